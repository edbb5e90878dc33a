#!/usr/bin/env bash
# Vets and tests the otelbreaker module (its own go.mod: OpenTelemetry
# stays out of the core's dependencies) with the race detector, against
# the real OpenTelemetry SDK and otelhttp. examples/otel, a module of its
# own under examples/, is run by .ci/examples.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

# Never fetch another Go toolchain behind our back: OpenTelemetry v1.47
# needs Go 1.26, and a machine without it should fail loudly.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

cd otelbreaker
echo "--- otelbreaker: gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "not gofmt'ed:"; echo "$unformatted"; exit 1
fi
echo "--- otelbreaker: go vet"
go vet ./...
echo "--- otelbreaker: go test -race"
go test -race ./...
