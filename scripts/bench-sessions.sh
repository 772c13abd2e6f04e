#!/usr/bin/env bash
# Benchmarks the JSONL session store and prints markdown tables
# (method and recorded numbers: docs/benchmarks.md, "Sessions").
#
#   1. open: a linear session of LARGE_BYTES (default 100 MiB, ~32k entries,
#      checkpoints every ~2,000 entries) is written through the store; then a
#      fresh process opens it and builds the context branch (what a resumed
#      run sends the model), OPEN_RUNS times (default 5), under GNU time for
#      peak RSS; the same for the whole active branch.
#   2. append: APPENDS (default 2000) fsync'd single-entry appends of ~500 B,
#      one at a time; the same number of raw write+fdatasync calls of the same
#      line size on a plain file in the same directory (and with a sidecar
#      replace after each, as the store's writer does); then WRITERS (default
#      8) concurrent appenders sharing the total (group commit).
#   3. list: SESSIONS (default 1000) sessions of ~10 entries; the release
#      `keel session list` LIST_RUNS times (default 10) with the `.meta.json`
#      sidecars (warm) and after deleting them (every file rescanned).
#
# Everything runs on the page cache (results are warm-cache: dropping caches
# needs root). Needs bash 5 (EPOCHREALTIME); GNU time (/usr/bin/time) for RSS,
# else RSS is n/a. Every temporary file lives in one mktemp directory (on
# TMPDIR's disk, which is also the disk the append numbers describe), removed
# on exit.
#
# Usage: scripts/bench-sessions.sh
#   env: OPEN_RUNS, LIST_RUNS, LARGE_BYTES, APPENDS, WRITERS, SESSIONS, NO_BUILD=1
set -euo pipefail

[[ -n "${EPOCHREALTIME:-}" ]] || { echo "bench-sessions.sh needs bash 5 (EPOCHREALTIME)" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
open_runs="${OPEN_RUNS:-5}"
list_runs="${LIST_RUNS:-10}"
large_bytes="${LARGE_BYTES:-104857600}"
appends="${APPENDS:-2000}"
writers="${WRITERS:-8}"
sessions="${SESSIONS:-1000}"
bench="$root/target/release/examples/session_bench"
keel="$root/target/release/keel"

work="$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-sessions.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [[ "${NO_BUILD:-0}" != 1 ]]; then
  (cd "$root" && cargo build --release -p keel-session --example session_bench --quiet)
  (cd "$root" && cargo build --release -p keel-cli --quiet)
fi
[[ -x "$bench" ]] || { echo "no benchmark binary at $bench" >&2; exit 1; }
[[ -x "$keel" ]] || { echo "no release binary at $keel" >&2; exit 1; }

gnu_time=""
if /usr/bin/time -v true >/dev/null 2>&1; then gnu_time=/usr/bin/time; fi

# Prints the value of key $2 in the `key=value …` line $1.
field() { tr ' ' '\n' <<<"$1" | awk -F= -v key="$2" '$1 == key { print substr($0, length(key) + 2); exit }'; }

# Prints the median of the numbers in file $1 (n/a when empty or not numeric).
median() {
  sort -n "$1" | awk '$1 ~ /^[0-9.]+$/ { v[++n] = $1 }
    END { if (n == 0) { print "n/a"; exit }
          m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
          printf "%.1f\n", m }'
}

# Prints the largest number in file $1 (n/a when none).
max_of() { sort -n "$1" | awk '$1 ~ /^[0-9.]+$/ { m = $1 } END { print (m == "") ? "n/a" : m }'; }

# Milliseconds elapsed since the EPOCHREALTIME value $1.
since_ms() {
  local now="$EPOCHREALTIME" then="$1"
  awk -v us=$(( 10#${now//[.,]/} - 10#${then//[.,]/} )) 'BEGIN { printf "%.1f\n", us / 1000 }'
}

# Runs "$@" with stdout to file $1, under GNU time when available; appends the
# peak RSS in KiB to file $2 ("n/a" without GNU time).
run_measured() {
  local out="$1" rss="$2"; shift 2
  if [[ -z "$gnu_time" ]]; then "$@" >"$out"; echo n/a >>"$rss"; return; fi
  "$gnu_time" -v -o "$work/time.txt" "$@" >"$out"
  awk -F': *' '/Maximum resident set size/ { print $2 }' "$work/time.txt" >>"$rss"
}

kib_to_mib() { [[ "$1" == n/a ]] && echo n/a || awk -v kb="$1" 'BEGIN { printf "%.1f", kb / 1024 }'; }

# Prints "yes" when $1 <= $2, else "**no**"; "n/a" when $1 is n/a.
meets() { [[ "$1" == n/a ]] && echo n/a || awk -v a="$1" -v b="$2" 'BEGIN { print (a <= b) ? "yes" : "**no**" }'; }

# --- 1. open a large session --------------------------------------------------
gen="$("$bench" gen-large "$work/large" "$large_bytes")"
id="$(field "$gen" id)"
large_entries="$(field "$gen" entries)"
large_mib="$(awk -v b="$(field "$gen" bytes)" 'BEGIN { printf "%.1f", b / 1048576 }')"
avg_entry="$(field "$gen" avg_entry_bytes)"

for mode in context active; do
  # Warms the page cache and records the branch's size (not timed).
  line="$("$bench" open "$work/large" "$id" "$mode" --bytes)"
  field "$line" entries >"$work/$mode.entries"
  field "$line" branch_bytes >"$work/$mode.bytes"
  : >"$work/$mode.total"; : >"$work/$mode.open"; : >"$work/$mode.read"
  : >"$work/$mode.wall"; : >"$work/$mode.rss"
  for ((i = 0; i < open_runs; i++)); do
    t0="$EPOCHREALTIME"
    run_measured "$work/open.out" "$work/$mode.rss" "$bench" open "$work/large" "$id" "$mode"
    since_ms "$t0" >>"$work/$mode.wall"
    line="$(cat "$work/open.out")"
    field "$line" total_ms >>"$work/$mode.total"
    field "$line" open_ms >>"$work/$mode.open"
    field "$line" read_ms >>"$work/$mode.read"
  done
done

# --- 2. append latency ----------------------------------------------------------
"$bench" append "$work/append" "$appends" "$writers" >"$work/append.out"
series() { grep "^series=$1 " "$work/append.out"; }
seq_line="$(series sequential)"
raw_line="$(series raw)"
side_line="$(series raw_sidecar)"
conc_line="$(series "concurrent$writers")"

# --- 3. list many sessions ------------------------------------------------------
"$bench" gen-many "$work/many" "$sessions" 10 >/dev/null
listed="$("$keel" session list --session-dir "$work/many" | wc -l)"
[[ "$listed" == "$sessions" ]] || { echo "keel session list printed $listed sessions, not $sessions" >&2; exit 1; }

# Times `keel session list` $list_runs times into $1.wall, peak RSS into $1.rss.
time_list() {
  : >"$1.wall"; : >"$1.rss"
  "$keel" session list --session-dir "$work/many" >/dev/null   # warm-up
  for ((i = 0; i < list_runs; i++)); do
    t0="$EPOCHREALTIME"
    "$keel" session list --session-dir "$work/many" >/dev/null
    since_ms "$t0" >>"$1.wall"
  done
  run_measured /dev/null "$1.rss" "$keel" session list --session-dir "$work/many"
}
time_list "$work/list-warm"
rm -f "$work/many"/*.meta.json
time_list "$work/list-cold"

# --- report -----------------------------------------------------------------------
c_total="$(median "$work/context.total")"
c_rss="$(kib_to_mib "$(median "$work/context.rss")")"
a_total="$(median "$work/active.total")"
a_rss="$(kib_to_mib "$(median "$work/active.rss")")"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

echo "Machine: $(nproc) cores, $(lscpu 2>/dev/null | awk -F': *' '/Model name/ { print $2; exit }'), $(rustc --version), $(date -u +%Y-%m-%d)"
echo "Session: $large_mib MiB, $large_entries entries (avg $avg_entry B); warm page cache; medians of $open_runs runs."
echo
echo "| Benchmark | Entries returned | Median (in process) | open + read | Process wall | Peak RSS (median, max) | Target | Met |"
echo "|---|---|---|---|---|---|---|---|"
echo "| open + \`context_branch\` | $(cat "$work/context.entries") ($(mib "$(cat "$work/context.bytes")")) | $c_total ms | $(median "$work/context.open") + $(median "$work/context.read") ms | $(median "$work/context.wall") ms | $c_rss MiB, $(kib_to_mib "$(max_of "$work/context.rss")") MiB | ≤ 500 ms, ≤ 64 MiB | $(meets "$c_total" 500) / $(meets "$c_rss" 64) |"
echo "| open + \`active_branch\` | $(cat "$work/active.entries") ($(mib "$(cat "$work/active.bytes")")) | $a_total ms | $(median "$work/active.open") + $(median "$work/active.read") ms | $(median "$work/active.wall") ms | $a_rss MiB, $(kib_to_mib "$(max_of "$work/active.rss")") MiB | (not the resume path) | – |"
echo
echo "Appends: $appends of ~$(field "$seq_line" line_bytes) B lines each; one run."
echo
echo "| Series | fsyncs | p50 | p99 | max | Throughput |"
echo "|---|---|---|---|---|---|"
for row in "store, sequential:$seq_line" "raw write + fdatasync:$raw_line" "raw + sidecar replace:$side_line" \
  "store, $writers concurrent appenders:$conc_line"; do
  name="${row%%:*}"; line="${row#*:}"
  echo "| $name | $(field "$line" fsyncs) | $(field "$line" p50_us) µs | $(field "$line" p99_us) µs | $(field "$line" max_us) µs | $(field "$line" per_s) /s |"
done
echo
echo "| \`keel session list\`, $sessions sessions | Runs | Median | Min | Max | Peak RSS | Target | Met |"
echo "|---|---|---|---|---|---|---|---|"
for kind in warm cold; do
  label="sidecars present"; [[ "$kind" == cold ]] && label="sidecars deleted (rescan)"
  med="$(median "$work/list-$kind.wall")"
  echo "| $label | $list_runs | $med ms | $(sort -n "$work/list-$kind.wall" | head -n 1) ms | $(max_of "$work/list-$kind.wall") ms | $(kib_to_mib "$(max_of "$work/list-$kind.rss")") MiB | ≤ 200 ms | $(meets "$med" 200) |"
done
