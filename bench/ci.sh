#!/usr/bin/env bash
# Quick mode for CI (a few minutes): builds and vets every bench package,
# runs every benchmark once with -benchtime 100x (only proving that they
# run, no numbers worth reading), feeds that output through the table
# generator, and runs the outage test (2×5s) with its assertions.
#
#   bench/ci.sh
set -euo pipefail

cd "$(dirname "$0")"

LIBS=(httpbreaker gobreaker resty rubyist eapache failsafe hystrix passthrough counter)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== build and vet"
go build ./...
go vet ./...

echo "== benchmarks, once each (-benchtime 100x)"
for lib in "${LIBS[@]}"; do
  go test -run '^$' -bench . -benchmem -benchtime 100x "./$lib" | tee "$tmp/$lib.txt"
  go test -run '^$' -bench '^BenchmarkParallel$' -benchmem -benchtime 100x -cpu 1,2,8 "./$lib" >> "$tmp/$lib.txt"
done

echo "== table generator"
go test -count 1 ./cmd/table
go run ./cmd/table -in "$tmp" -raw -gomod go.mod > "$tmp/RESULTS.md"
for lib in "${LIBS[@]}"; do
  if ! grep -q "^| benchmark |.* $lib |" "$tmp/RESULTS.md"; then
    echo "ci.sh: no results for $lib in the generated table" >&2
    exit 1
  fi
done

echo "== outage test"
go test -count 1 -run TestOutage -v ./outage/
