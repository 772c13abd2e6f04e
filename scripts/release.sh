#!/usr/bin/env bash
# Builds a release of keel (docs/release.md):
#
#   target/release/keel                       the binary (cargo build --release --locked -p keel-cli)
#   dist/keel-VERSION-TARGET.cdx.json         its CycloneDX SBOM: exactly the binary's dependency graph
#   dist/keel-VERSION-TARGET.tar.gz           bin/keel, the man pages, shell completions, README,
#                                             LICENSE, CHANGELOG, the SBOM and SHA256SUMS
#   dist/keel-VERSION-TARGET.tar.gz.sha256    the tarball's checksum
#
# and checks what it built: the binary names its version and commit and has no
# test-only features, and scripts/sbom.py finds the SBOM lists exactly the
# crates the binary is built from. Needs cargo-cyclonedx (`cargo install
# cargo-cyclonedx --locked --version 0.5.9`). Prints the binary's path last.
#
# The tarball's entries and the SBOM are dated SOURCE_DATE_EPOCH (default:
# the commit's time), so their metadata does not depend on when they were
# packed; when SOURCE_DATE_EPOCH is set, the binary's build date is it too.
set -euo pipefail
cd "$(dirname "$0")/.."
# Everything goes to stderr but the binary's path, printed last on stdout.
exec 3>&1 1>&2

if ! cargo cyclonedx --version >/dev/null 2>&1; then
  echo "release.sh: cargo-cyclonedx is missing: cargo install cargo-cyclonedx --locked --version 0.5.9"
  exit 1
fi

target=$(rustc -vV | sed -n 's/^host: //p')
# The tarball's and the SBOM's date. SOURCE_DATE_EPOCH is not exported to
# cargo unless it was set: some dependencies' build scripts (aws-lc-sys)
# rebuild when it changes, and a plain `cargo build --release` afterwards
# should find target/release/keel up to date.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

echo "== cargo build --release --locked -p keel-cli ($target)"
build_start=$SECONDS
cargo build --release --locked -p keel-cli
echo "   built in $((SECONDS - build_start)) s"
binary="${CARGO_TARGET_DIR:-target}/release/keel"

# The binary says what it is; a release never has the crash points of test builds.
info=$("$binary" version --json)
version=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["version"])' "$info")
python3 - "$info" <<'EOF'
import json, sys
info = json.loads(sys.argv[1])
problems = []
if info["commit"] is None:
    problems.append("names no commit (built without git?)")
if "failpoints" in info["features"]:
    problems.append("has the test builds' crash points compiled in")
for problem in problems:
    print(f"release.sh: the binary {problem}: {info}", file=sys.stderr)
if info["dirty"]:
    print(f"release.sh: note: built from a tree with uncommitted changes ({info['commit']}-dirty)", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
changelog_heading="## [$version]"
grep -qF -- "$changelog_heading" CHANGELOG.md || {
  echo "release.sh: CHANGELOG.md has no entry $changelog_heading"
  exit 1
}

name="keel-$version-$target"
dist=dist
stage="$dist/$name"
rm -rf "$stage" "$dist/$name.tar.gz" "$dist/$name.tar.gz.sha256" "$dist/$name.cdx.json"
mkdir -p "$dist" "$stage/bin" "$stage/share/man/man1" \
  "$stage/share/bash-completion/completions" "$stage/share/zsh/site-functions" \
  "$stage/share/fish/vendor_completions.d"

echo "== SBOM (cargo cyclonedx)"
# One SBOM per binary target: keel's normal dependency graph for this target
# (no dev- or build-dependencies, no other platform's crates), written
# beside crates/keel-cli/Cargo.toml as keel_bin.cdx.json. scripts/sbom.py
# removes what cargo-cyclonedx lists but the binary never compiles (see
# there), makes it reproducible, and checks it against cargo's graph.
sbom_raw=crates/keel-cli/keel_bin.cdx.json
rm -f "$sbom_raw"
cargo cyclonedx --manifest-path crates/keel-cli/Cargo.toml --describe binaries \
  --format json --spec-version 1.5 --target "$target" --no-build-deps -q
[ -f "$sbom_raw" ] || { echo "release.sh: cargo cyclonedx wrote no $sbom_raw"; exit 1; }
python3 scripts/sbom.py fix "$sbom_raw" "$dist/$name.cdx.json" --target "$target" --epoch "$epoch"
rm -f "$sbom_raw"
python3 scripts/sbom.py check "$dist/$name.cdx.json" --target "$target"

echo "== the tarball"
install -m 0755 "$binary" "$stage/bin/keel"
"$binary" man --dir "$stage/share/man/man1" >/dev/null
"$binary" completion bash >"$stage/share/bash-completion/completions/keel"
"$binary" completion zsh >"$stage/share/zsh/site-functions/_keel"
"$binary" completion fish >"$stage/share/fish/vendor_completions.d/keel.fish"
cp README.md LICENSE CHANGELOG.md "$stage/"
cp "$dist/$name.cdx.json" "$stage/sbom.cdx.json"
(cd "$stage" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
  -C "$dist" -cf - "$name" | gzip -n -9 >"$dist/$name.tar.gz"
(cd "$dist" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
rm -rf "$stage"

echo "release: $dist/$name.tar.gz ($(du -k "$dist/$name.tar.gz" | cut -f1) KiB), binary $(du -k "$binary" | cut -f1) KiB"
# An absolute path: callers use it from other directories (a test runs
# in its crate's directory).
realpath "$binary" >&3
