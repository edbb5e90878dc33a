#!/usr/bin/env bash
# Runs the side-by-side benchmarks of every library package under bench/,
# each in its own process, then writes bench/RESULTS.md.
#
#   bench/run.sh                 # 10 rounds of every library, 1s per benchmark
#   bench/run.sh -n 3            # 3 rounds (COUNT=3 works too)
#   bench/run.sh -n 3 httpbreaker gobreaker   # only these packages
#
# Options (or environment variables):
#   -n COUNT      rounds, i.e. samples per benchmark        [COUNT=10]
#   -t BENCHTIME  go test -benchtime                        [BENCHTIME=1s]
#   -c CPUS       -cpu list of BenchmarkParallel            [CPUS=1,2,8]
#   -o            also run the outage test and add its report [OUTAGE=0]
#
# Each round runs every package once (`-count 1`) in turn, so that a burst
# of load from elsewhere on the machine hits every library alike instead of
# all the samples of one: that is the same as `go test -count N` per
# package, interleaved. The test binaries are built once. Raw output goes
# to bench/out/LIB.txt; with benchstat installed (go install
# golang.org/x/perf/cmd/benchstat@latest) its medians (bench/out/LIB.csv,
# bench/out/benchstat.txt) feed the table, else cmd/table computes them.
set -euo pipefail

cd "$(dirname "$0")"

COUNT=${COUNT:-10}
BENCHTIME=${BENCHTIME:-1s}
CPUS=${CPUS:-1,2,8}
OUTAGE=${OUTAGE:-0}
while getopts "n:t:c:oh" opt; do
  case $opt in
    n) COUNT=$OPTARG ;;
    t) BENCHTIME=$OPTARG ;;
    c) CPUS=$OPTARG ;;
    o) OUTAGE=1 ;;
    *) sed -n '2,22p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

ALL=(httpbreaker gobreaker resty rubyist eapache failsafe hystrix passthrough counter)
if (($#)); then LIBS=("$@"); else LIBS=("${ALL[@]}"); fi

OUT=out
rm -rf "$OUT"
mkdir -p "$OUT"

echo "building test binaries..." >&2
for lib in "${LIBS[@]}"; do
  go test -c -o "$OUT/$lib.test" "./$lib"
done

{
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ); $(go version | cut -d' ' -f3-)"
  echo "- machine: $(nproc) CPUs (GOMAXPROCS defaults to that), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM;" \
       "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- command: \`bench/run.sh -n $COUNT -t $BENCHTIME -c $CPUS\` — rounds: $COUNT, each running every library's" \
       "package once in its own process (interleaved \`-count 1\`), \`-benchtime $BENCHTIME\`, BenchmarkParallel at \`-cpu $CPUS\`"
} > "$OUT/meta.txt"

FAILED=()
for ((round = 1; round <= COUNT; round++)); do
  for lib in "${LIBS[@]}"; do
    echo "round $round/$COUNT: $lib" >&2
    if ! (
      cd "$lib"
      "../$OUT/$lib.test" -test.run '^$' -test.bench '^Benchmark(Closed|ManyHosts|Open|Loopback)$' \
        -test.benchmem -test.count 1 -test.benchtime "$BENCHTIME"
      "../$OUT/$lib.test" -test.run '^$' -test.bench '^BenchmarkParallel$' \
        -test.benchmem -test.count 1 -test.benchtime "$BENCHTIME" -test.cpu "$CPUS"
    ) >> "$OUT/$lib.txt"; then
      echo "warning: $lib failed in round $round (see $OUT/$lib.txt); going on" >&2
      FAILED+=("$lib (round $round)")
    fi
  done
done
if ((${#FAILED[@]})); then
  echo "- **failed benchmark runs** (their samples are missing): ${FAILED[*]}" >> "$OUT/meta.txt"
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
sed -i "s|^\(- machine: .*load average at start: .*\)$|\1, at end: $(cut -d' ' -f1-3 /proc/loadavg)|" "$OUT/meta.txt"

BENCHSTAT=$(command -v benchstat || true)
if [[ -z $BENCHSTAT && -x "$(go env GOPATH)/bin/benchstat" ]]; then
  BENCHSTAT="$(go env GOPATH)/bin/benchstat"
fi
if [[ -n $BENCHSTAT ]]; then
  for lib in "${LIBS[@]}"; do
    "$BENCHSTAT" -format csv "$OUT/$lib.txt" > "$OUT/$lib.csv" 2> /dev/null
  done
  (cd "$OUT" && "$BENCHSTAT" "${LIBS[@]/%/.txt}" > benchstat.txt 2>&1) || true
else
  echo "benchstat not found: cmd/table computes the medians itself" >&2
fi

EXTRA=()
if [[ $OUTAGE == 1 ]]; then
  echo "outage test..." >&2
  if ! OUTAGE_REPORT="$PWD/$OUT/outage.md" go test -count 1 -run TestOutage -v ./outage/ > "$OUT/outage.txt"; then
    echo "warning: the outage test failed (see bench/$OUT/outage.txt)" >&2
    [[ -f $OUT/outage.md ]] && printf '\n**The outage test FAILED in this run**: see `bench/%s/outage.txt`.\n' "$OUT" >> "$OUT/outage.md"
  fi
  [[ -f $OUT/outage.md ]] && EXTRA=(-extra "$OUT/outage.md")
fi

go run ./cmd/table -in "$OUT" -gomod go.mod -meta "$OUT/meta.txt" "${EXTRA[@]}" > RESULTS.md
echo "wrote bench/RESULTS.md" >&2
