#!/usr/bin/env bash
# The long reliability checks, too slow for every run: each fuzz target
# for 20s, the 30s flapping-dependency soak once (without the race
# detector; the short soak runs under -race in .ci/run), and staticcheck.
#
# A fuzz failure leaves its input in <package>/testdata/fuzz/<Target>/: commit it
# with the fix, so that every later `go test` replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

# Never fetch another Go toolchain behind our back.
export GOTOOLCHAIN=local

fuzztime="${FUZZTIME:-20s}"
# Each fuzz target, as package:target; go test -fuzz takes one package.
for entry in .:FuzzHostKey .:FuzzDefaultClassifier .:FuzzParseRetryAfter ./internal/route:FuzzMatch; do
	pkg="${entry%%:*}" target="${entry#*:}"
	echo "--- fuzz $target in $pkg ($fuzztime)"
	go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
done

echo "--- soak (HTTPBREAKER_SOAK=long, 30s)"
HTTPBREAKER_SOAK=long go test -run Soak -count=1 -v .

# staticcheck 2026.2.2 (v0.8.2) is built with and supports Go 1.26; the
# 2025.x releases predate it. Pinned so that a new check is a deliberate
# upgrade, not a surprise.
staticcheck_version=v0.8.2
echo "--- staticcheck $staticcheck_version"
go install "honnef.co/go/tools/cmd/staticcheck@${staticcheck_version}"
"$(go env GOPATH)/bin/staticcheck" ./...
