#!/usr/bin/env bash
# Vets and tests (with the race detector) every example that is a Go
# module of its own: each go.mod under examples/, found anew on every run
# so that new ones are included. Examples inside the root module (no
# go.mod of their own) are covered by the root's go vet/go test ./...
set -euo pipefail
cd "$(dirname "$0")/.."

# Never fetch another Go toolchain behind our back: a module that needs a
# newer Go than the one installed should fail loudly.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

mapfile -t mods < <(find examples -name go.mod -not -path '*/testdata/*' -not -path '*/vendor/*' 2>/dev/null | sort)
if [ "${#mods[@]}" -eq 0 ]; then
	echo "examples.sh: no nested example modules under examples/"
	exit 0
fi

for mod in "${mods[@]}"; do
	dir="$(dirname "$mod")"
	echo "--- $dir: go vet ./..."
	(cd "$dir" && go vet ./...)
	echo "--- $dir: go test -race ./..."
	(cd "$dir" && go test -race ./...)
done
