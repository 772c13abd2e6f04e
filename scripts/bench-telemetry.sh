#!/usr/bin/env bash
# The cost of exporting a run's traces and metrics (docs/benchmarks.md,
# "Telemetry export"): the 100-turn scripted run (scripts/gen-100-turn-script.py,
# `auto`, sessions on disk) with export off, and on — OTLP/HTTP protobuf to
# a local sink that answers every export at once (python3's http.server,
# counting the requests and bytes it was sent) — and, when PREV is given,
# the previous commit's binary with export off. Rounds run every variant
# once each, the order rotating, so that drift in the machine's load falls
# on all alike. Prints the median wall time of each and their ratios, and
# what the sink received (it must be more than nothing).
#
# Usage: scripts/bench-telemetry.sh KEEL [PREV_KEEL]
#   env: ROUNDS (10), TURNS (100)
# Needs bash 5 (EPOCHREALTIME) and python3. Builds nothing.
set -euo pipefail

[[ $# -ge 1 && -x "$1" ]] || { echo "usage: $0 KEEL [PREV_KEEL]" >&2; exit 2; }
keel="$1"
prev="${2:-}"
rounds="${ROUNDS:-10}"
turns="${TURNS:-100}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

work="$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-telemetry.XXXXXX")"
sink_pid=""
trap '[[ -n "$sink_pid" ]] && kill "$sink_pid" 2>/dev/null; rm -rf "$work"' EXIT
python3 "$root/scripts/gen-100-turn-script.py" --turns "$turns" "$work/script.json"

# The sink: answers 200 to every POST and appends "path bytes" per request.
python3 - "$work/sink.port" "$work/sink.log" <<'PY' &
import http.server, sys
port_file, log = sys.argv[1], sys.argv[2]
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(log, "a") as f:
            f.write(f"{self.path} {len(body)}\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
open(port_file, "w").write(str(server.server_address[1]))
server.serve_forever()
PY
sink_pid=$!
for _ in $(seq 100); do [[ -s "$work/sink.port" ]] && break; sleep 0.05; done
endpoint="http://127.0.0.1:$(cat "$work/sink.port")"

# One run of variant $1 (off|export|prev); appends its wall time (µs).
run_once() {
  local binary="$keel" env=()
  case "$1" in
    export) env=(OTEL_EXPORTER_OTLP_ENDPOINT="$endpoint") ;;
    prev) binary="$prev" ;;
  esac
  rm -rf "$work/ws" "$work/sessions"
  mkdir -p "$work/ws" && printf 'value 0\n' >"$work/ws/counter.txt"
  local t0="$EPOCHREALTIME"
  env -u OTEL_EXPORTER_OTLP_ENDPOINT "${env[@]}" XDG_CONFIG_HOME="$work/config" \
    "$binary" run --provider scripted --script "$work/script.json" --workspace "$work/ws" \
    --session-dir "$work/sessions" --mode auto "count to $turns" >/dev/null
  local t1="$EPOCHREALTIME"
  [[ "$(cat "$work/ws/counter.txt")" == "value $turns" ]] || { echo "$1: the run did not count to $turns" >&2; exit 1; }
  echo $(( 10#${t1//[.,]/} - 10#${t0//[.,]/} )) >>"$work/$1.us"
}

variants=(off export)
[[ -n "$prev" ]] && variants+=(prev)
for v in "${variants[@]}"; do run_once "$v"; : >"$work/$v.us"; done   # warm-up
: >"$work/sink.log"
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
    print(f"{v:7s} median {med[v]:.3f} s  min {min(xs):.3f}  max {max(xs):.3f}  (n={len(xs)})")
print(f"export/off {med['export'] / med['off']:.3f}")
if "prev" in med:
    print(f"off/prev   {med['off'] / med['prev']:.3f}")
sent = [l.split() for l in open(f"{work}/sink.log")]
traces = [int(b) for p, b in sent if p == "/v1/traces"]
metrics = [int(b) for p, b in sent if p == "/v1/metrics"]
print(f"sink: {len(traces)} trace exports ({sum(traces)} bytes), {len(metrics)} metric exports ({sum(metrics)} bytes) over {rounds} exported runs")
if not traces:
    sys.exit("the sink received no traces: export did not happen")
PY
