#!/usr/bin/env bash
# The long reliability checks, too slow for every run: each fuzz target
# for a fixed number of inputs, the 30s flapping-dependency soak once
# (without the race detector; the short soak runs under -race in .ci/run),
# and staticcheck.
#
# A fuzz failure leaves its input in <dir>/testdata/fuzz/<Target>/: commit it
# with the fix, so that every later `go test` replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

# Never fetch another Go toolchain behind our back.
export GOTOOLCHAIN=local

# A count, not a duration: with a duration, Go 1.26's fuzz coordinator can
# report its own deadline as a failure ("context deadline exceeded", no
# input written) when a worker is still busy as the time runs out
# (golang/go#75804, fixed in Go 1.27). A count has no deadline to race.
# Each count is about 10-30s of fuzzing on a 2-core machine.
for entry in .:FuzzHostKey:200000 .:FuzzDefaultClassifier:100000 .:FuzzParseRetryAfter:100000 \
	.:FuzzParseConfig:150000 .:FuzzSelector:200000 internal/route:FuzzMatch:200000 \
	redisstore:FuzzDecodeWire:100000; do
	IFS=: read -r dir target count <<<"$entry"
	count="${FUZZCOUNT:-$count}"
	echo "--- fuzz $target in $dir (${count} inputs)"
	(cd "$dir" && go test -run '^$' -fuzz "^${target}\$" -fuzztime "${count}x" .) # redisstore is a module of its own
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
