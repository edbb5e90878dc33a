#!/usr/bin/env bash
# Vets and tests the redisstore module (its own go.mod) against a real
# redis-server, with the race detector. The tests start and stop their own
# redis-server on free loopback ports; this script only makes sure the
# binary is there, installing Debian's redis-server package when it is
# missing. HTTPBREAKER_REQUIRE_REDIS=1 makes the tests fail, not skip,
# when redis-server cannot be found.
set -euo pipefail
cd "$(dirname "$0")/.."

# Never fetch another Go toolchain behind our back.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

. .ci/need.sh
need redis-server redis-server
# The package may start a system service on 6379; the tests never use it.
redis-server --version

cd redisstore
echo "--- redisstore: go vet"
go vet ./...
echo "--- redisstore: go test -race (real redis-server on loopback)"
HTTPBREAKER_REQUIRE_REDIS=1 go test -race ./...
