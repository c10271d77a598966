"""Time the test tiers: wall time, CPU time (user + system of pytest and every child) and load average.

Usage (from the repository root, in the venv)::

    python ci/bench_tests.py            # the quick tier: python -m pytest -q
    python ci/bench_tests.py --full     # the full tier:  python -m pytest -q --full
    python ci/bench_tests.py -- -n 2    # extra pytest arguments after "--"
    python ci/bench_tests.py --log out.txt -- --durations=50   # keep pytest's whole output

Prints one line per figure and the pytest summary line; exit status is pytest's. The figures go to
reports/benchmarks.md section 14 and the README (issue 30: quick tier <= 8 min, `.ci/run` <= 30 min on a 2-core
machine). CPU time is the figure to compare between a loaded and a quiet machine; wall time is the goal's unit.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    own = argv[:argv.index("--")] if "--" in argv else argv
    full = "--full" in own
    log = own[own.index("--log") + 1] if "--log" in own and own.index("--log") + 1 < len(own) else None
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + (["--full"] if full else []) + extra
    load_before = os.getloadavg()
    start = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = [line for line in proc.stdout.splitlines() if " in " in line and ("passed" in line or "failed" in line)]
    print(f"tier: {'full' if full else 'quick'}   command: {' '.join(cmd[1:])}")
    print(f"wall: {wall:.0f} s ({wall / 60:.1f} min)")
    print(f"cpu: {usage.ru_utime + usage.ru_stime:.0f} s (user {usage.ru_utime:.0f} s, system {usage.ru_stime:.0f} s)")
    print(f"cores: {os.cpu_count()}   load average before: {load_before[0]:.2f}   after: {os.getloadavg()[0]:.2f}")
    print(f"pytest: {summary[-1].strip('= ') if summary else '(no summary line)'}")
    if log:
        with open(log, "w", encoding="utf-8") as fh:
            fh.write(proc.stdout)
        print(f"log: {log}")
    if proc.returncode != 0:
        print(proc.stdout[-6000:])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
