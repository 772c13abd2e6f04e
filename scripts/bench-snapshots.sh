#!/usr/bin/env bash
# The cost of the workspace snapshots each run records (docs/benchmarks.md,
# "Workspace snapshots"): one `keel` binary, a workspace of FILES files
# (FILE_BYTES each, in directories of 10), a one-turn scripted run, with
# snapshots on and off (`[sessions] snapshots = false`), alternating which
# goes first in each pair (ABBA …). Prints the median wall time of each and
# of the per-pair differences, and what the session store holds after a
# first run and after a second run over the unchanged workspace.
#
# Usage: scripts/bench-snapshots.sh KEEL
#   env: PAIRS (20), FILES (1000), FILE_BYTES (2048)
# Needs bash 5 (EPOCHREALTIME) and python3. Builds nothing.
set -euo pipefail

[[ $# -eq 1 && -x "$1" ]] || { echo "usage: $0 KEEL" >&2; exit 2; }
keel="$1"
pairs="${PAIRS:-20}"
files="${FILES:-1000}"
bytes="${FILE_BYTES:-2048}"

work="$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-snapshots.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws" "$work/on/keel" "$work/off/keel"
printf '[sessions]\nsnapshots = false\n' >"$work/off/keel/config.toml"
python3 - "$work/ws" "$files" "$bytes" <<'PY'
import os, random, sys
root, files, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(7)
for i in range(files):
    d = os.path.join(root, f"dir{i // 10:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"file{i % 10}.txt"), "w") as f:
        f.write("".join(random.choice("abcdefghij \n") for _ in range(size)))
PY
printf '{"turns":[{"content":[{"type":"text","text":"ok"}]}]}' >"$work/script.json"

# Runs once with configuration $1 (on|off); appends the wall time (µs) to $2.
run_once() {
  rm -rf "$work/sessions"
  local t0="$EPOCHREALTIME"
  XDG_CONFIG_HOME="$work/$1" "$keel" run --provider scripted --script "$work/script.json" \
    --workspace "$work/ws" --session-dir "$work/sessions" "hi" >/dev/null
  local t1="$EPOCHREALTIME"
  echo $(( 10#${t1//[.,]/} - 10#${t0//[.,]/} )) >>"$2"
}

run_once on /dev/null
run_once off /dev/null
: >"$work/on.us"
: >"$work/off.us"
for ((i = 0; i < pairs; i++)); do
  if ((i % 2 == 0)); then
    run_once on "$work/on.us"; run_once off "$work/off.us"
  else
    run_once off "$work/off.us"; run_once on "$work/on.us"
  fi
done
python3 - "$work/on.us" "$work/off.us" <<'PY'
import statistics, sys
on = [int(x) for x in open(sys.argv[1])]
off = [int(x) for x in open(sys.argv[2])]
print(f"snapshots on:  median {statistics.median(on) / 1000:.1f} ms")
print(f"snapshots off: median {statistics.median(off) / 1000:.1f} ms")
print(f"median pair difference: {statistics.median(a - b for a, b in zip(on, off)) / 1000:.1f} ms")
PY

# The store after one run, and after a second run over the same workspace.
rm -rf "$work/sessions"
XDG_CONFIG_HOME="$work/on" "$keel" run --provider scripted --script "$work/script.json" \
  --workspace "$work/ws" --session-dir "$work/sessions" --output-format json "hi" >"$work/first.json"
id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["session_id"])' "$work/first.json")"
first="$(du -sb "$work/sessions/$id.snapshots" | cut -f1)"
XDG_CONFIG_HOME="$work/on" "$keel" run --provider scripted --script "$work/script.json" \
  --workspace "$work/ws" --session-dir "$work/sessions" --session "$id" "again" >/dev/null
second="$(du -sb "$work/sessions/$id.snapshots" | cut -f1)"
echo "workspace: $(du -sb "$work/ws" | cut -f1) bytes in $files files"
echo "snapshot store after one run: $first bytes; after a second run: $second bytes"
