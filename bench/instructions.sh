#!/usr/bin/env bash
# Counts what each library's wrapper costs per call in instructions and
# simulated cache misses, under valgrind's cachegrind: numbers that do not
# move between runs, where this machine's nanoseconds move 25–60 %. Use it
# to see whether a change adds or saves work on the request path; the
# budgets stay ratios of nanoseconds in one run.sh run, since a
# count weighs a slow clock read (one instruction) as little as an add.
#
#   bench/instructions.sh                        # httpbreaker and gobreaker
#   bench/instructions.sh httpbreaker gobreaker failsafe
#   N=100000 bench/instructions.sh               # iterations of the short run
#
# Each scenario runs twice, N and 3N iterations (GOMAXPROCS=1, GOGC=off),
# so that the difference divided by 2N is one call without the setup; the
# wrapper's cost is that of its scenario minus the same for the bare stub.
# The simulated caches are a 32 KiB 8-way L1 and a 1 MiB 8-way last level
# (an L2's size, where the 1,000 hosts' breakers must fit).
set -euo pipefail

cd "$(dirname "$0")"

if ! command -v valgrind >/dev/null; then
  echo "instructions.sh: needs valgrind (Debian: apt-get install valgrind)" >&2
  exit 2
fi
N=${N:-100000}
if (($#)); then LIBS=("$@"); else LIBS=(httpbreaker gobreaker); fi

OUT=out/instructions
mkdir -p "$OUT"

# counts LIB BENCH SUB ITER prints the instructions, L1 data misses and
# last-level data misses of one run.
counts() {
  (cd "$1" && GOMAXPROCS=1 GOGC=off valgrind --tool=cachegrind --cache-sim=yes \
    --D1=32768,8,64 --LL=1048576,8,64 --cachegrind-out-file=/dev/null \
    "../$OUT/$1.test" -test.run '^$' -test.bench "^Benchmark$2\$/^$3\$" \
    -test.benchtime "$4x" -test.count 1 2>&1) |
    awk '/ I +refs:/ {gsub(",", "", $4); i = $4}
         / D1 +misses:/ {gsub(",", "", $4); d = $4}
         / LLd misses:/ {gsub(",", "", $4); l = $4}
         END {if (i == "") exit 1; print i, d, l}'
}

# percall LIB BENCH SUB prints one call's instructions and misses.
percall() {
  local a b
  a=$(counts "$1" "$2" "$3" "$N") && b=$(counts "$1" "$2" "$3" $((3 * N))) || {
    echo "instructions.sh: $1 Benchmark$2/$3 failed under valgrind" >&2
    exit 1
  }
  echo "$a $b" | awk -v n="$N" '{printf "%.0f %.2f %.2f\n", ($4-$1)/(2*n), ($5-$2)/(2*n), ($6-$3)/(2*n)}'
}

echo "| library | scenario | instructions | L1 misses | LL misses |"
echo "|---|---|---:|---:|---:|"
for lib in "${LIBS[@]}"; do
  go test -c -o "$OUT/$lib.test" "./$lib"
  for pair in "Closed host" "ManyHosts wrapped"; do
    set -- $pair
    bare=$(percall "$lib" "$1" bare)
    wrapped=$(percall "$lib" "$1" "$2")
    echo "$bare $wrapped" | awk -v lib="$lib" -v s="$1/$2" \
      '{printf "| %s | %s | %+d | %+.2f | %+.2f |\n", lib, s, $4-$1, $5-$2, $6-$3}'
  done
done
