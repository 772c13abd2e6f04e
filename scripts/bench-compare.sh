#!/usr/bin/env bash
# Compares two `keel` binaries on the 100-turn kernel benchmark of bench.sh
# (read + edit + bash per turn, `auto`, sessions on disk), run in pairs,
# alternating which goes first (ABBA …), so that a burst of load from the
# rest of the machine hits both alike. Prints the median wall time of each,
# the median of the per-pair ratios (after / before), the task-clock of
# every process of a run (`perf stat`, which counts the descendants a
# binary does not wait for itself, e.g. the sandbox's namespace holder) and
# the load average before and after.
#
# Usage: scripts/bench-compare.sh BEFORE_KEEL AFTER_KEEL
#   env: PAIRS (20), TURNS (100), MODE (auto)
# Needs bash 5 (EPOCHREALTIME) and python3; perf is optional. Builds nothing.
set -euo pipefail

[[ $# -eq 2 ]] || { echo "usage: $0 BEFORE_KEEL AFTER_KEEL" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
before="$1"
after="$2"
pairs="${PAIRS:-20}"
turns="${TURNS:-100}"
mode="${MODE:-auto}"
for keel in "$before" "$after"; do
  [[ -x "$keel" ]] || { echo "no keel binary at $keel" >&2; exit 1; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-compare.XXXXXX")"
trap 'rm -rf "$work"' EXIT
python3 "$root/scripts/gen-100-turn-script.py" --turns "$turns" "$work/script.json"

# Runs binary $1 once in a fresh workspace; appends its wall time (µs) to $2.
run_once() {
  rm -rf "$work/ws" "$work/sessions" && mkdir -p "$work/ws" && printf 'value 0\n' >"$work/ws/counter.txt"
  local t0="$EPOCHREALTIME"
  "$1" run --provider scripted --script "$work/script.json" --workspace "$work/ws" \
    --session-dir "$work/sessions" --mode "$mode" "count to $turns" >/dev/null
  local t1="$EPOCHREALTIME"
  echo $(( 10#${t1//[.,]/} - 10#${t0//[.,]/} )) >>"$2"
  [[ "$(cat "$work/ws/counter.txt")" == "value $turns" ]] || { echo "$1 did not count to $turns" >&2; exit 1; }
}

# Appends the task-clock (ms) of one run of binary $1 to $2.
clock_once() {
  rm -rf "$work/ws" "$work/sessions" && mkdir -p "$work/ws" && printf 'value 0\n' >"$work/ws/counter.txt"
  perf stat -x, -e task-clock -o "$work/perf.txt" "$1" run --provider scripted \
    --script "$work/script.json" --workspace "$work/ws" --session-dir "$work/sessions" \
    --mode "$mode" "count to $turns" >/dev/null
  awk -F, '$3 ~ /^task-clock/ { print $1 }' "$work/perf.txt" >>"$2"
}

run_once "$before" /dev/null
run_once "$after" /dev/null
echo "Load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$work/before.us"
: >"$work/after.us"
for ((i = 0; i < pairs; i++)); do
  if ((i % 2 == 0)); then
    run_once "$before" "$work/before.us"
    run_once "$after" "$work/after.us"
  else
    run_once "$after" "$work/after.us"
    run_once "$before" "$work/before.us"
  fi
done
: >"$work/before.clock"
: >"$work/after.clock"
if command -v perf >/dev/null 2>&1; then
  for ((i = 0; i < 5; i++)); do
    clock_once "$before" "$work/before.clock"
    clock_once "$after" "$work/after.clock"
  done
fi
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work" "$pairs" "$turns" <<'EOF'
import statistics, sys
work, pairs, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def values(name):
    return [float(line) for line in open(f"{work}/{name}") if line.strip()]
before = [v / 1000 for v in values("before.us")]
after = [v / 1000 for v in values("after.us")]
ratios = [a / b for a, b in zip(after, before)]
q = lambda xs: statistics.quantiles(xs, n=4)
print(f"{turns} turns, {pairs} pairs: before median {statistics.median(before):.0f} ms "
      f"(quartiles {q(before)[0]:.0f}–{q(before)[2]:.0f}), after median {statistics.median(after):.0f} ms "
      f"(quartiles {q(after)[0]:.0f}–{q(after)[2]:.0f})")
print(f"after / before, median of the pairs: {statistics.median(ratios):.3f} "
      f"(quartiles {q(ratios)[0]:.3f}–{q(ratios)[2]:.3f}); ratio of the medians: "
      f"{statistics.median(after) / statistics.median(before):.3f}")
clock_before, clock_after = values("before.clock"), values("after.clock")
if clock_before and clock_after:
    print(f"task-clock of every process, median of {len(clock_before)}: before "
          f"{statistics.median(clock_before):.0f} ms, after {statistics.median(clock_after):.0f} ms")
EOF
