#!/usr/bin/env bash
# Checks the example Prometheus alerting rules and runs their unit tests
# (examples/alerts). Installs promtool from Debian's prometheus package
# when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1; then
	if [ -r /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; then
		sudo=""
		if [ "$(id -u)" -ne 0 ]; then
			sudo="sudo"
		fi
		echo "--- installing promtool (Debian package prometheus)"
		export DEBIAN_FRONTEND=noninteractive
		$sudo apt-get update -qq
		$sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	fi
fi
if ! command -v promtool >/dev/null 2>&1; then
	echo "alerts.sh: promtool not found and could not be installed (apt-get install prometheus)" >&2
	exit 1
fi

cd examples/alerts
promtool --version
echo "--- promtool check rules"
promtool check rules breaker.rules.yml
echo "--- promtool test rules"
promtool test rules breaker.rules.test.yml
