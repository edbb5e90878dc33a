#!/usr/bin/env bash
# Checks the example Prometheus alerting rules and runs their unit tests
# (examples/alerts). Installs promtool from Debian's prometheus package
# when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

. .ci/need.sh
need promtool prometheus

cd examples/alerts
promtool --version
echo "--- promtool check rules"
promtool check rules breaker.rules.yml
echo "--- promtool test rules"
promtool test rules breaker.rules.test.yml
