#!/usr/bin/env bash
# Peak resident memory of resuming a 100 MB session, and of reading it
# (method and recorded numbers: docs/benchmarks.md, "Integrity and memory —
# issue 14").
#
# A linear session of LARGE_BYTES (default 100 MiB, no checkpoints, ~32k
# entries written as Anthropic's model would: prompts, signed thinking, tool
# calls, decisions, results of 1–14 KB) is made with `session_bench
# gen-large`. Then, RUNS times each (default 3), under GNU time:
#   - the store alone: open the session and read its context branch;
#   - `keel session tree`;
#   - a resume (`keel run --session ID continue`, on a fresh copy, since a
#     run appends) with the scripted provider, which serialises nothing;
#   - the same resume through each HTTP adapter against a local stand-in
#     (scripts/sse-stand-in.py, which reads the whole body and answers at
#     once): openai-compatible (Chat Completions), anthropic (Messages, the
#     session's own model) and openai (Responses).
# Prints a markdown table of the median peak RSS and, for the HTTP runs, the
# body size and framing the stand-in received.
#
# Usage: scripts/bench-resume-memory.sh
#   env: RUNS, LARGE_BYTES, PORT (default 18431), NO_BUILD=1,
#        KEEL (a keel binary to measure instead of target/release/keel)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${RUNS:-3}"
large_bytes="${LARGE_BYTES:-104857600}"
port="${PORT:-18431}"
bench="$root/target/release/examples/session_bench"
keel="${KEEL:-$root/target/release/keel}"

/usr/bin/time -v true >/dev/null 2>&1 || { echo "needs GNU time at /usr/bin/time" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-resume.XXXXXX")"
server=""
cleanup() { [[ -n "$server" ]] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

if [[ "${NO_BUILD:-0}" != 1 ]]; then
  (cd "$root" && cargo build --release -p keel-session --example session_bench --quiet)
  (cd "$root" && cargo build --release -p keel-cli --bin keel --quiet)
fi
[[ -x "$bench" && -x "$keel" ]] || { echo "no release binaries (build, or set KEEL)" >&2; exit 1; }

line="$("$bench" gen-large "$work/session" "$large_bytes" --no-checkpoints)"
id="$(tr ' ' '\n' <<<"$line" | sed -n 's/^id=//p')"
echo "session: $line" >&2
mkdir -p "$work/ws"
echo '{"turns":[{"content":[{"type":"text","text":"resumed"}]}]}' >"$work/script.json"

python3 "$root/scripts/sse-stand-in.py" "$port" "$work/server.log" &
server=$!
sleep 0.5

# Peak RSS in KiB of the command "$@" (a run's exit status must be 0).
peak() {
  /usr/bin/time -v "$@" >"$work/out" 2>"$work/time" || { cat "$work/time" >&2; exit 1; }
  awk -F': ' '/Maximum resident set size/ { print $2 }' "$work/time"
}

# Median of the numbers on stdin.
median() { sort -n | awk '{ v[++n] = $1 } END { print v[int((n + 1) / 2)] }'; }

mib() { awk -v kib="$1" 'BEGIN { printf "%.1f MiB", kib / 1024 }'; }

# measure NAME COMMAND…: RUNS runs; a resume gets a fresh copy each time.
measure() {
  local name="$1" kib
  shift
  kib="$(for _ in $(seq "$runs"); do
    if [[ "$*" == *" run "* ]]; then rm -rf "$work/resume"; cp -a "$work/session" "$work/resume"; fi
    peak "$@"
  done | median)"
  local sent="–"
  if [[ "$name" == resume:*HTTP* ]]; then
    sent="$(tail -n 1 "$work/server.log" | sed 's/.* body=\([0-9]*\) framing=\(.*\)/\1 bytes, \2/')"
  fi
  echo "| $name | $(mib "$kib") | $sent |"
}

# A window of 10^9 tokens: a 100 MB branch stays far below the compaction
# threshold (the catalog's 200k window of the session's model would start a
# compaction, which the stand-in, answering no summary, would fail).
resume=(run --workspace "$work/ws" --session-dir "$work/resume" --session "$id"
  --context-window 1000000000)
export ANTHROPIC_API_KEY=stand-in OPENAI_API_KEY=stand-in
echo "| Command (100 MB session, no checkpoints) | Peak RSS (median of $runs) | Body sent |"
echo "|---|---|---|"
measure "store only: open + context_branch" "$bench" open "$work/session" "$id" context
measure "keel session tree ID" "$keel" session tree "$id" --session-dir "$work/session"
measure "resume: scripted provider" "$keel" "${resume[@]}" --script "$work/script.json" continue
measure "resume: HTTP, openai-compatible (Chat Completions)" "$keel" "${resume[@]}" \
  --provider openai-compatible --base-url "http://127.0.0.1:$port/v1" --model m continue
measure "resume: HTTP, anthropic (Messages)" "$keel" "${resume[@]}" \
  --provider anthropic --base-url "http://127.0.0.1:$port" continue
measure "resume: HTTP, openai (Responses)" "$keel" "${resume[@]}" \
  --provider openai --base-url "http://127.0.0.1:$port/v1" continue
