#!/usr/bin/env bash
# `keel serve` under load: runs/s, latency from kernel event to client, and
# memory per idle run (method and recorded numbers: docs/benchmarks.md,
# "keel serve under load — issue 23").
#
# Builds `keel` in release and serves it to the load test
# (crates/keel-cli/tests/serve_load.rs, its client a debug build) with
# KEEL_LOAD_BIN, one scenario at a time, RUNS runs each (default 1,000):
#   - RUNS concurrent scripted runs, each in its own workspace (write, read,
#     and in one run of ten a sandboxed bash call; 20 ms before each streamed
#     event): runs/s from the first start to the last terminal event, and the
#     latency of every event from its `timestamp` (set by the kernel) to the
#     client's receive time (both ms since the epoch, one clock);
#   - RUNS runs parked on a permission request (ask mode): the server's PSS
#     beyond an empty server, per parked run;
#   - the burst, slow-reader and two-token scenarios, for their numbers.
# A scenario whose assertion fails still prints its numbers (the 1 GiB
# budget of the first fails today: see docs/benchmarks.md); the script
# prints every `load:` line and exits 0 when all passed, 1 otherwise.
#
# Usage: scripts/bench-serve.sh
#   env: RUNS (default 1000), NO_BUILD=1, KEEL (a keel binary to serve
#        instead of target/release/keel)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${RUNS:-1000}"
keel="${KEEL:-$root/target/release/keel}"
cd "$root"
if [ -z "${NO_BUILD:-}" ]; then
    cargo build --release -p keel-cli >&2
    cargo test -p keel-cli --test serve_load --no-run >&2
fi
[ -x "$keel" ] || { echo "no keel binary at $keel" >&2; exit 2; }

status=0
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for scenario in thousand_runs parked_runs a_burst a_client_that_stops a_flooding_token; do
    if ! KEEL_LOAD_BIN="$keel" KEEL_LOAD_RUNS="$runs" \
        cargo test -q -p keel-cli --test serve_load "$scenario" -- --nocapture --test-threads 1 \
        >"$log" 2>&1; then
        status=1
        echo "# $scenario FAILED:" "$(grep -m1 -A1 'panicked at' "$log" | tail -1)"
    fi
    grep '^load:' "$log" || true
done
exit "$status"
