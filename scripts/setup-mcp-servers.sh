#!/usr/bin/env bash
# Installs the pinned npm MCP servers the keel-mcp tests run against
# (crates/keel-mcp/tests) into a cache directory, once, and prints the
# line to eval:
#
#   eval "$(scripts/setup-mcp-servers.sh [CACHE_DIR])"
#
# which exports KEEL_MCP_SERVERS=<cache>/node_modules/@modelcontextprotocol.
# The tests start each server with `node <dir>/dist/index.js` (never npx,
# which needs ~/.npm). Everything but the export line goes to stderr.
set -euo pipefail

version=2026.8.31
packages=(server-everything server-filesystem)
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/keel/mcp-servers}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
scope="$cache/node_modules/@modelcontextprotocol"

installed() {
  local package=$1 manifest="$scope/$1/package.json"
  [ -f "$manifest" ] || return 1
  node -e 'const m = require(process.argv[1]); process.exit(m.version === process.argv[2] ? 0 : 1)' \
    "$manifest" "$version"
}

missing=()
for package in "${packages[@]}"; do
  installed "$package" || missing+=("@modelcontextprotocol/$package@$version")
done
if [ "${#missing[@]}" -gt 0 ]; then
  # npm writes its cache under $HOME/.npm unless told otherwise: keep it
  # inside the cache directory, which is known to be writable.
  npm install --no-audit --no-fund --prefix "$cache" \
    --cache "$cache/.npm-cache" "${missing[@]}" >&2
fi
for package in "${packages[@]}"; do
  installed "$package" || { echo "setup-mcp-servers: $package@$version did not install" >&2; exit 1; }
  [ -f "$scope/$package/dist/index.js" ] \
    || { echo "setup-mcp-servers: $scope/$package/dist/index.js is missing" >&2; exit 1; }
done
printf 'export KEEL_MCP_SERVERS=%q\n' "$scope"
