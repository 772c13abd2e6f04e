#!/usr/bin/env bash
# Writes the session compatibility fixtures of the session format version
# this build writes: crates/keel-cli/tests/fixtures/sessions/v<N>/.
#
# The scripted runs are those of crates/keel-cli/tests/compat.rs (its
# format-change guard runs them too, and compares): a settled run with tool
# calls, a fork of it, a compacted session, a run SIGKILLed mid-batch with
# its journal, and an `always` permission rule. They run through the real
# `keel` binary of a test build (its failpoints are what kill the crashing
# run); the temporary directory they used is replaced by /keel-compat, and
# the summary sidecars (caches of one machine) are left out.
#
# Only v<N> of the version this build writes is replaced; the fixtures of
# older versions are never touched: this build must still read them.
# When to run it: docs/session-format.md, "Versions and migrations", and
# the message of the guard when it fails.
#
# Usage: scripts/gen-compat-fixtures.sh   (then review `git status` and `git diff`)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
KEEL_UPDATE_COMPAT_FIXTURES=1 cargo test --locked -p keel-cli --test compat -- \
  --exact the_writer_still_writes_what_the_fixtures_of_its_version_hold --nocapture
git status --short -- crates/keel-cli/tests/fixtures/sessions
