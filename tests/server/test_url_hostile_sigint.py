"""SIGINT during a URL audit's sampling, sent to a backgrounded audit (``specverify audit ... &`` in a script,
which starts with SIGINT ignored, then ``kill -INT``): it stops within seconds with exit 130 and keeps the
journal of what arrived."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.server.conftest import REPO
from tests.server.hostile import hostile  # noqa: F401  (a fixture)


def test_sigint_to_a_backgrounded_audit_stops_it_with_130_and_keeps_the_journal(hostile, tmp_path):
    import numpy as np

    def post(count, body):
        if count > 5:
            time.sleep(30)  # a slow server: the audit waits on an in-flight request when the SIGINT comes
        rng = np.random.default_rng(body["seed"])
        return 200, json.dumps({"choices": [{"index": 0, "token_ids": [int(t) for t in rng.integers(0, 3, body["max_tokens"])],
                                             "finish_reason": "length"}]})

    s = hostile(post)
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "verifier.cli", "audit", "--url", s.url, "--target", "tabular:trigram3",
         "--num-draft-tokens", "2", "--num-samples", "40", "--num-concurrent", "1", "--no-progress",
         "--run-dir", str(run_dir)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as a shell starts a background job
    try:
        deadline = time.monotonic() + 120
        while s.count <= 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert s.count > 5, "the audit never reached the slow requests"
        proc.send_signal(signal.SIGINT)
        start = time.monotonic()
        out, err = proc.communicate(timeout=20)
        assert time.monotonic() - start < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    assert len((run_dir / "server" / "responses.jsonl").read_text().splitlines()) == 5  # what arrived is kept
