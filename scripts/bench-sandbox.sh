#!/usr/bin/env bash
# The per-call cost of the OS sandbox: a scripted run of CALLS turns, each
# one `bash` call of `true`, in `auto` (every call sandboxed) against `full`
# (every call unsandboxed), timed with hyperfine; the difference of the
# medians over CALLS is what the sandbox costs per call. Also prints the
# user + system CPU of one run of each (GNU time), which moves less with
# the machine's load than wall time, and, when `perf` is installed, the
# task-clock of every process of the run (`perf stat`, inherited by every
# descendant: GNU time misses processes keel does not wait for itself, such
# as the sandbox's namespace holder and the calls it starts).
#
# Usage: scripts/bench-sandbox.sh [KEEL_BINARY]   (default target/release/keel)
#   env: CALLS (100), RUNS (10)
# Needs hyperfine, python3 and GNU time. Builds nothing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
keel="${1:-$root/target/release/keel}"
calls="${CALLS:-100}"
runs="${RUNS:-10}"
command -v hyperfine >/dev/null || { echo "bench-sandbox.sh needs hyperfine" >&2; exit 1; }
[[ -x "$keel" ]] || { echo "no keel binary at $keel" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-sandbox.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws"
python3 - "$calls" >"$work/script.json" <<'EOF'
import json, sys
calls = int(sys.argv[1])
turn = {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "true"}}]}
print(json.dumps({"turns": [turn] * calls + [{"content": [{"type": "text", "text": "done"}]}]}))
EOF

run() {
  echo "$keel run --provider scripted --script $work/script.json --workspace $work/ws --session-dir $work/sessions-$1 --mode $1 bench"
}
for mode in auto full; do
  $(run "$mode") >"$work/check-$mode.jsonl"
  ok="$(grep -c '"status":"success"' "$work/check-$mode.jsonl" || true)"
  [[ "$ok" -ge "$calls" ]] || { echo "$mode: only $ok of $calls calls succeeded" >&2; exit 1; }
done

echo "Load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
hyperfine -N --warmup 2 --runs "$runs" --export-json "$work/h.json" "$(run auto)" "$(run full)" >/dev/null
for mode in auto full; do
  /usr/bin/time -f "%U %S" -o "$work/cpu-$mode" $(run "$mode") >/dev/null
  if command -v perf >/dev/null; then
    for i in 1 2 3; do
      perf stat -x, -e task-clock -o "$work/perf-$mode-$i" $(run "$mode") >/dev/null
    done
  fi
done
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work" "$calls" <<'EOF'
import json, sys
work, calls = sys.argv[1], int(sys.argv[2])
results = json.load(open(f"{work}/h.json"))["results"]
auto, full = (r["median"] * 1000 for r in results)
cpu = {mode: sum(map(float, open(f"{work}/cpu-{mode}").read().split())) * 1000 for mode in ("auto", "full")}
print(f"{calls} calls: auto {auto:.0f} ms, full {full:.0f} ms (hyperfine medians)")
print(f"sandbox per call: {(auto - full) / calls:.2f} ms wall, {(cpu['auto'] - cpu['full']) / calls:.2f} ms CPU (user + system)")
import glob, statistics
def task_clock(mode):
    values = []
    for path in glob.glob(f"{work}/perf-{mode}-*"):
        for line in open(path):
            fields = line.split(",")
            if len(fields) > 2 and fields[2].startswith("task-clock"):
                values.append(float(fields[0]))
    return statistics.median(values) if values else None
clocks = {mode: task_clock(mode) for mode in ("auto", "full")}
if None not in clocks.values():
    print(f"task-clock of every process (perf, median of 3): auto {clocks['auto']:.0f} ms, full {clocks['full']:.0f} ms; "
          f"sandbox per call {(clocks['auto'] - clocks['full']) / calls:.2f} ms")
EOF
