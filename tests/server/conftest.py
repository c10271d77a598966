"""Real servers for the URL audit tests: ``specverify serve`` processes (the harness's decoders over HTTP).

Each fixture starts one server process on a free loopback port and stops it (the whole process
group) when the module ends.  No mocks: the URL audit talks HTTP to a separate process that runs a
real speculative decoder.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
URL_LINE = re.compile(r" at (http://127\.0\.0\.1:\d+)")


def start_serve(decoder: str, target: str = "tabular:trigram3", k: int = 2, *extra: str) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "verifier.cli", "serve", "--decoder", decoder, "--target", target,
                             "--num-draft-tokens", str(k), "--port", "0", *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = URL_LINE.search(line)
        if m:
            return proc, m.group(1)
    stop(proc)
    raise RuntimeError("specverify serve did not start: " + "".join(lines))


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def reference_server():
    proc, url = start_serve("reference")
    yield url
    stop(proc)


@pytest.fixture(scope="module")
def mutant_server():
    proc, url = start_serve("full_p_fallback")
    yield url
    stop(proc)


def audit(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """``specverify audit ARGS`` as a user runs it (job child included)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "verifier.cli", "audit", *args, "--no-progress"], env=env,
                          capture_output=True, text=True, timeout=timeout)


def requests_served(url: str) -> float:
    import httpx

    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("specverify:requests_total"):
            return float(line.split()[-1])
    raise AssertionError("no specverify:requests_total in /metrics")
