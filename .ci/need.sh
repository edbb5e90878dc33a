# Sourced by .ci scripts. need CMD PACKAGE: make sure the command CMD
# exists, installing the Debian package PACKAGE with apt-get when it is
# missing; fail loudly if it still is.
need() {
	local cmd=$1 pkg=$2
	if ! command -v "$cmd" >/dev/null 2>&1 && [ -r /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; then
		local sudo=""
		if [ "$(id -u)" -ne 0 ]; then
			sudo="sudo"
		fi
		echo "--- installing $cmd (Debian package $pkg)"
		export DEBIAN_FRONTEND=noninteractive
		$sudo apt-get update -qq
		$sudo apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
	fi
	if ! command -v "$cmd" >/dev/null 2>&1; then
		echo "$cmd not found and could not be installed (apt-get install $pkg)" >&2
		exit 1
	fi
}
