#!/usr/bin/env bash
# Benchmarks the release `keel` binary and prints a markdown table.
#
#   1. start-up: `keel --version`, STARTUP_RUNS runs (default 200), each timed
#      alone; median/min/p90/max per run; peak RSS from `/usr/bin/time -v`.
#   2. 100 turns: a scripted run in which every turn reads counter.txt, edits
#      it and runs a bash command (scripts/gen-100-turn-script.py), in a fresh
#      workspace each time, TURN_RUNS runs (default 5), stdout to /dev/null;
#      wall per run and peak RSS (max over the runs) from `/usr/bin/time -v`;
#      with `perf` installed, also the task-clock of every process of the run
#      (three more runs under `perf stat`, which counts the descendants keel
#      does not wait for itself, such as the sandbox's namespace holder).
#      The session directory is on disk, under the temporary directory.
#   3. diagnostic: 2. again with the session directory on tmpfs (/dev/shm),
#      where fsync is free; skipped with NO_TMPFS=1 or without /dev/shm.
#
# Needs bash 5 (EPOCHREALTIME), python3 and GNU time (/usr/bin/time); when
# GNU time is missing, RSS is reported as n/a. hyperfine is used only as an
# optional cross-check when installed. Builds nothing but the release binary;
# every temporary file lives in mktemp directories, removed on exit.
#
# Usage: scripts/bench.sh   (KEEL=path/to/keel measures another binary, with NO_BUILD=1)
#   env: STARTUP_RUNS (200), TURN_RUNS (5), TURNS (100), NO_BUILD=1, NO_TMPFS=1
set -euo pipefail

[[ -n "${EPOCHREALTIME:-}" ]] || { echo "bench.sh needs bash 5 (EPOCHREALTIME)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench.sh needs python3" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
startup_runs="${STARTUP_RUNS:-200}"
turn_runs="${TURN_RUNS:-5}"
turns="${TURNS:-100}"
keel="${KEEL:-$root/target/release/keel}"

work="$(mktemp -d "${TMPDIR:-/tmp}/keel-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [[ "${NO_BUILD:-0}" != 1 ]]; then
  (cd "$root" && cargo build --release -p keel-cli --quiet)
fi
[[ -x "$keel" ]] || { echo "no release binary at $keel" >&2; exit 1; }

gnu_time=""
if /usr/bin/time -v true >/dev/null 2>&1; then gnu_time=/usr/bin/time; fi

# Prints "median min p90 max" (in ms, 2 decimals) of the microsecond values in file $1.
stats() {
  sort -n "$1" | awk '{ v[NR] = $1 }
    END {
      n = NR; if (n == 0) { print "n/a n/a n/a n/a"; exit }
      med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
      p = int(0.9 * n + 0.999999); if (p < 1) p = 1; if (p > n) p = n
      printf "%.2f %.2f %.2f %.2f\n", med / 1000, v[1] / 1000, v[p] / 1000, v[n] / 1000
    }'
}

# Microseconds elapsed since the EPOCHREALTIME value $1.
since_us() {
  local now="$EPOCHREALTIME"
  local then="$1"
  echo $(( 10#${now//[.,]/} - 10#${then//[.,]/} ))
}

# Runs "$@" (stdout to /dev/null) under GNU time when available, and appends its
# peak RSS in KB to file $1 ("n/a" without GNU time). Returns the command's status.
run_measured() {
  local out="$1"; shift
  if [[ -z "$gnu_time" ]]; then "$@" >/dev/null || { echo "failed: $*" >&2; return 1; }; echo n/a >>"$out"; return; fi
  if ! "$gnu_time" -v -o "$work/time.txt" "$@" >/dev/null; then
    echo "failed: $*" >&2
    return 1
  fi
  awk -F': *' '/Maximum resident set size/ { print $2 }' "$work/time.txt" >>"$out"
  # CPU time (user + system) in microseconds, 10 ms resolution, to "$out.cpu".
  awk -F': *' '/User time|System time/ { t += $2 } END { printf "%d\n", t * 1000000 }' "$work/time.txt" >>"$out.cpu"
}

# Prints the largest value of file $1, or n/a.
max_of() { sort -n "$1" | tail -n 1 | awk '$1 ~ /^[0-9]+$/ { print; next } { print "n/a" }'; }

kb_to_mb() { [[ "$1" == n/a ]] && echo n/a || awk -v kb="$1" 'BEGIN { printf "%.1f MB", kb / 1024 }'; }

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- 1. start-up ------------------------------------------------------------
"$keel" --version >/dev/null   # warm the page cache
: >"$work/startup.us"
for ((i = 0; i < startup_runs; i++)); do
  t0="$EPOCHREALTIME"
  "$keel" --version >/dev/null
  since_us "$t0" >>"$work/startup.us"
done
read -r s_med s_min s_p90 s_max < <(stats "$work/startup.us")
: >"$work/startup.rss"
for ((i = 0; i < 5; i++)); do run_measured "$work/startup.rss" "$keel" --version; done
s_rss="$(max_of "$work/startup.rss")"

# --- 2. 100 turns -------------------------------------------------------------
python3 "$root/scripts/gen-100-turn-script.py" --turns "$turns" "$work/script.json"

# Makes a fresh workspace at $1 holding counter.txt = "value 0".
fresh_workspace() {
  rm -rf "$1" && mkdir -p "$1" && printf 'value 0\n' >"$1/counter.txt"
}

# Checks the workspace at $1 counted to $turns.
check_counter() {
  [[ "$(cat "$1/counter.txt")" == "value $turns" ]] || {
    echo "workspace $1 did not count to $turns: $(cat "$1/counter.txt")" >&2
    exit 1
  }
}

# One checked run, then $turn_runs timed runs, with sessions in directory $1.
# The checked run must exit 0 with exactly one settled result line (the
# line of type "result"; `workspace_changes` and `session` lines follow it)
# and leave the
# counter at $turns. Sets t_med t_min t_p90 t_max (ms), t_rss (KB), t_cpu
# (median user + system CPU), events.
bench_turns() {
  local sessions="$1"
  local cmd=("$keel" run --provider scripted --script "$work/script.json" --workspace "$work/ws"
    --session-dir "$sessions" --mode auto "count to $turns")
  fresh_workspace "$work/ws"
  if ! "${cmd[@]}" >"$work/check.jsonl"; then
    echo "the $turns-turn run failed; last lines:" >&2
    tail -n 2 "$work/check.jsonl" >&2
    exit 1
  fi
  local check_py='
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
results = [line for line in lines if line.get("type") == "result"]
if len(results) != 1 or results[0].get("state") != "settled":
    sys.exit(f"expected one settled result line, got {len(results)}: {results[-1:]}")
print(sum(1 for line in lines if "type" in line and "seq" in line))
'
  events="$(python3 -c "$check_py" "$work/check.jsonl")"
  check_counter "$work/ws"
  : >"$work/turns.us"
  : >"$work/turns.rss"
  : >"$work/turns.rss.cpu"
  for ((i = 0; i < turn_runs; i++)); do
    fresh_workspace "$work/ws"
    t0="$EPOCHREALTIME"
    run_measured "$work/turns.rss" "${cmd[@]}"
    since_us "$t0" >>"$work/turns.us"
    check_counter "$work/ws"
  done
  read -r t_med t_min t_p90 t_max < <(stats "$work/turns.us")
  t_rss="$(max_of "$work/turns.rss")"
  t_clock="n/a"
  if command -v perf >/dev/null 2>&1; then
    : >"$work/turns.clock"
    for ((i = 0; i < 3; i++)); do
      fresh_workspace "$work/ws"
      perf stat -x, -e task-clock -o "$work/perf.txt" "${cmd[@]}" >/dev/null
      awk -F, '$3 ~ /^task-clock/ { printf "%d\n", $1 * 1000 }' "$work/perf.txt" >>"$work/turns.clock"
    done
    t_clock="$(stats "$work/turns.clock" | awk '{ printf "%.0f ms", $1 }')"
  fi
  t_cpu="n/a"
  [[ -s "$work/turns.rss.cpu" ]] && t_cpu="$(stats "$work/turns.rss.cpu" | awk '{ printf "%.0f ms", $1 }')"
}

# Prints "yes" when $1 <= $2 (numbers), else "**no**"; "n/a" when $1 is n/a.
meets() { [[ "$1" == n/a ]] && echo n/a || awk -v a="$1" -v b="$2" 'BEGIN { print (a <= b) ? "yes" : "**no**" }'; }

# Prints the table row of the last bench_turns, labelled $1; $2 = 1 to judge the targets.
turns_row() {
  local rss_mb target met
  rss_mb="$(kb_to_mb "$t_rss")"
  if [[ "$2" == 1 && "$turns" == 100 ]]; then
    target="≤ 1000 ms, ≤ 20 MB"
    met="$(meets "$t_med" 1000) / $(meets "${rss_mb% MB}" 20)"
  elif [[ "$2" == 1 ]]; then
    target="(set for 100 turns)"; met="–"
  else
    target="(diagnostic)"; met="–"
  fi
  echo "| $turns turns (read + edit + bash), $events events, $1 | $turn_runs | $t_med ms | $t_min ms | $t_p90 ms | $t_max ms | $t_cpu | $t_clock | $rss_mb | $target | $met |"
}

# Sessions go under $work (on disk, like the default data directory), so
# nothing is left in the user's data directory.
bench_turns "$work/sessions"
disk_row="$(turns_row "sessions on disk" 1)"

# Diagnostic: the same run with the session directory on tmpfs, where fsync
# costs nothing; the difference is the cost of durable appends.
tmpfs_row=""
if [[ -d /dev/shm && -w /dev/shm && "${NO_TMPFS:-0}" != 1 ]]; then
  shm="$(mktemp -d /dev/shm/keel-bench.XXXXXX)"
  trap 'rm -rf "$work" "$shm"' EXIT
  bench_turns "$shm/sessions"
  tmpfs_row="$(turns_row "sessions on tmpfs" 0)"
fi

# --- report -------------------------------------------------------------------
s_rss_mb="$(kb_to_mb "$s_rss")"
echo "Machine: $(nproc) cores, $(lscpu 2>/dev/null | awk -F': *' '/Model name/ { print $2; exit }'), $(rustc --version), $(date -u +%Y-%m-%d)"
echo
echo "Load average before / after: $load_before / $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| Benchmark | Runs | Median wall | Min | p90 | Max | CPU (median) | task-clock, all processes | Peak RSS | Target | Met |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
echo "| \`keel --version\` | $startup_runs | $s_med ms | $s_min ms | $s_p90 ms | $s_max ms | – | – | $s_rss_mb | ≤ 5 ms | $(meets "$s_med" 5) |"
echo "$disk_row"
[[ -z "$tmpfs_row" ]] || echo "$tmpfs_row"

if command -v hyperfine >/dev/null 2>&1; then
  echo
  echo "hyperfine cross-check (mean ± σ; sessions on disk):"
  hyperfine -N --warmup 20 --runs "$startup_runs" --style basic "$keel --version" 2>&1 | sed -n '2,3p'
  hyperfine -N --warmup 1 --runs "$turn_runs" --style basic \
    --prepare "bash -c 'rm -rf $work/ws && mkdir -p $work/ws && echo value 0 > $work/ws/counter.txt'" \
    "$keel run --provider scripted --script $work/script.json --workspace $work/ws --session-dir $work/sessions --mode auto count" 2>&1 | sed -n '2,3p'
fi
