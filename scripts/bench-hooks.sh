#!/usr/bin/env bash
# The cost of hooks (docs/benchmarks.md, "Hooks"): the 100-turn scripted run
# (scripts/gen-100-turn-script.py, `auto`, sessions on disk) with no
# extension ("off"), with one command hook that observes every tool call
# ("hook": a shell script answering `allow`, so one process per call), and,
# when PREV is given, the previous commit's binary ("prev"). Rounds run
# every variant once each, the order rotating, so that drift in the
# machine's load falls on all alike. Prints the median wall time of each,
# their ratios, and how many times the hook ran (it must be every call).
#
# Usage: scripts/bench-hooks.sh KEEL [PREV_KEEL]
#   env: ROUNDS (10), TURNS (100)
# Needs bash 5 (EPOCHREALTIME) and python3. Builds nothing.
set -euo pipefail

[[ $# -ge 1 && -x "$1" ]] || { echo "usage: $0 KEEL [PREV_KEEL]" >&2; exit 2; }
keel="$1"
prev="${2:-}"
rounds="${ROUNDS:-10}"
turns="${TURNS:-100}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

work="$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-hooks.XXXXXX")"
trap 'rm -rf "$work"' EXIT
python3 "$root/scripts/gen-100-turn-script.py" --turns "$turns" "$work/script.json"

# The hook: reads its event, counts itself, allows.
cat >"$work/hook.sh" <<HOOK
#!/bin/sh
cat >/dev/null
echo x >>"$work/hook.count"
echo '{"outcome":"allow"}'
HOOK
chmod +x "$work/hook.sh"
mkdir -p "$work/off/keel" "$work/hook/keel"
: >"$work/off/keel/config.toml"
printf '[[hooks]]\nevent = "tool_call"\ncommand = ["%s"]\n' "$work/hook.sh" >"$work/hook/keel/config.toml"

# One run of variant $1 (off|hook|prev); appends its wall time (µs).
run_once() {
  local binary="$keel" config="$work/off"
  case "$1" in
    hook) config="$work/hook" ;;
    prev) binary="$prev" ;;
  esac
  rm -rf "$work/ws" "$work/sessions"
  mkdir -p "$work/ws" && printf 'value 0\n' >"$work/ws/counter.txt"
  local t0="$EPOCHREALTIME"
  XDG_CONFIG_HOME="$config" "$binary" run --provider scripted --script "$work/script.json" \
    --workspace "$work/ws" --session-dir "$work/sessions" --mode auto "count to $turns" >/dev/null
  local t1="$EPOCHREALTIME"
  [[ "$(cat "$work/ws/counter.txt")" == "value $turns" ]] || { echo "$1: the run did not count to $turns" >&2; exit 1; }
  echo $(( 10#${t1//[.,]/} - 10#${t0//[.,]/} )) >>"$work/$1.us"
}

variants=(off hook)
[[ -n "$prev" ]] && variants+=(prev)
for v in "${variants[@]}"; do run_once "$v"; : >"$work/$v.us"; done   # warm-up
: >"$work/hook.count"
n=${#variants[@]}
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < n; i++)); do run_once "${variants[$(((r + i) % n))]}"; done
done

python3 - "$work" "$rounds" "${variants[@]}" <<'PY'
import statistics, sys
work, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = {}
for v in variants:
    xs = [int(l) / 1e6 for l in open(f"{work}/{v}.us")]
    med[v] = statistics.median(xs)
    print(f"{v:5s} median {med[v]:.3f} s  min {min(xs):.3f}  max {max(xs):.3f}  (n={len(xs)})")
print(f"hook/off  {med['hook'] / med['off']:.3f}")
if "prev" in med:
    print(f"off/prev  {med['off'] / med['prev']:.3f}")
calls = sum(1 for _ in open(f"{work}/hook.count"))
print(f"the hook ran {calls} times over {rounds} hooked runs")
if calls == 0:
    sys.exit("the hook never ran: the hooked variant measured nothing")
PY
