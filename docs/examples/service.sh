#!/bin/sh
# README "Keel as a service": starts `keel serve` on a free loopback port
# with a token and the scripted provider, runs docs/examples/service_client.py
# against it, and stops the server (SIGTERM: it drains and exits 0).
set -eu
dir=$(mktemp -d)
server=
trap 'if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi; rm -rf "$dir"' EXIT
KEEL_SERVER_TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
export KEEL_SERVER_TOKEN
keel serve --listen 127.0.0.1:0 --script docs/examples/look-around.json \
  --session-dir "$dir/sessions" >"$dir/listening" &
server=$!
# The first stdout line is {"type":"listening","address":"127.0.0.1:PORT"}.
for _ in $(seq 1 200); do
  [ -s "$dir/listening" ] && break
  sleep 0.05
done
address=$(sed -n 's/.*"address":"\([^"]*\)".*/\1/p' "$dir/listening")
[ -n "$address" ] || { echo "keel serve did not start" >&2; exit 1; }
python3 docs/examples/service_client.py "ws://$address/" "$(pwd)/docs"
kill -TERM "$server"
wait "$server"
server=
