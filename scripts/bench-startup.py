#!/usr/bin/env python3
"""Compares the start-up of two `keel` binaries: pairs of batches, ABBA.

Usage: scripts/bench-startup.py BEFORE_KEEL AFTER_KEEL [ARG ...]
  env: PAIRS (30), RUNS (20 runs of each binary per pair)

Runs `KEEL ARG ...` (default: `--version`) RUNS times in a row, for one
binary then the other, alternating which goes first (ABBA ...), so that a
burst of load from the rest of the machine hits both alike. Prints the
median time of one run for each binary and the median (and quartiles) of
the per-pair ratios after / before. Builds nothing; output goes to
/dev/null, and a run that exits non-zero stops the comparison.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time


def batch(binary, args, runs, env):
    start = time.perf_counter()
    for _ in range(runs):
        subprocess.run(
            [binary, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            check=True,
        )
    return (time.perf_counter() - start) / runs


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    before, after = sys.argv[1], sys.argv[2]
    args = sys.argv[3:] or ["--version"]
    pairs = int(os.environ.get("PAIRS", "30"))
    runs = int(os.environ.get("RUNS", "20"))
    # An isolated home, so a user's configuration or sessions do not count.
    home = tempfile.mkdtemp(prefix="keel-bench-startup.")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "XDG_DATA_HOME": os.path.join(home, ".local/share"),
        "XDG_STATE_HOME": os.path.join(home, ".local/state"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
    }
    for binary in (before, after):
        batch(binary, args, 3, env)  # warm the page cache
    times = {before: [], after: []}
    ratios = []
    with open("/proc/loadavg") as f:
        load_before = " ".join(f.read().split()[:3])
    for i in range(pairs):
        order = (before, after) if i % 2 == 0 else (after, before)
        got = {b: batch(b, args, runs, env) for b in order}
        times[before].append(got[before])
        times[after].append(got[after])
        ratios.append(got[after] / got[before])
    with open("/proc/loadavg") as f:
        load_after = " ".join(f.read().split()[:3])
    q = statistics.quantiles(ratios, n=4)
    print(f"keel {' '.join(args)}: {pairs} pairs of {runs} runs each")
    print(f"load average before: {load_before}, after: {load_after}")
    print(f"before: median {statistics.median(times[before]) * 1e3:.3f} ms per run")
    print(f"after:  median {statistics.median(times[after]) * 1e3:.3f} ms per run")
    print(f"median pair ratio after/before: {statistics.median(ratios):.3f} "
          f"(quartiles {q[0]:.3f}-{q[2]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
