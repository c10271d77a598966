"""The self-reported design (``specverify audit --url --design self-reported``) against the real ``llama-server``.

Needs the llama.cpp install with ``llama-server`` (``bash ci/engines/llama-cpp.sh``); without it the tests skip
naming that command (they fail under CI, as tests/server/test_llama_server_launch.py).  Shipped GGUF pair, prompt
``def `` as ids, T = 0.7, top-k 8, the top-8 post-sampling rows, 5 tokens per completion.

* speculation on (k = 3): llama-server reports ``prob 1.0`` and no top entries for every token a verification step
  emits (``// TODO: set result.probs``, tools/server/server-context.cpp, update_slots, build 0c1e570), so positions
  2-4 of every completion (and 5 of about half) have no law: UNDERPOWERED with that reason, never PASS
  (measured: 70% of the positions);
* control, no draft: every row defines the law and no cell rejects (the verdict is UNDERPOWERED "speculation never
  ran": the server's counters stay at 0, which a certificate of speculative decoding must not accept).

Run time: about 13 s on 2 loaded cores (load average 3) (n = 300 completions and 2 x 40 collision requests per server).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.server.conftest import audit
from verifier.engines.base import EngineNotInstalledError

pytestmark = pytest.mark.full  # ~20 s: two real servers and two audits through HTTP

FLAGS = ["--api", "llama-server", "--design", "self-reported", "--vocab-size", "384", "--eos-token-id", "0",
         "--prompt-ids", "68,69,70,221", "--temperature", "0.7", "--top-k", "8", "--logprobs", "8",
         "--num-draft-tokens", "3", "--max-new-tokens", "5", "--num-samples", "300", "--collisions", "40",
         "--consistency-positions", "16", "--seed", "5"]


@pytest.fixture(scope="module")
def install():
    from verifier.server.launch import llama_server_install

    try:
        return llama_server_install()
    except EngineNotInstalledError as exc:
        why = f"llama-server not installed: {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI must install every engine: .ci/run runs ci/engines/*.sh)")
        pytest.skip(why)


def _run(install, tmp_path, draft: bool):
    from verifier.server.launch import launch_llama_server

    run_dir = tmp_path / "run"
    with launch_llama_server(install.target_gguf, install.draft_gguf if draft else None, draft_max=3, parallel=4,
                             threads=1, log_path=tmp_path / "server.log") as server:
        done = audit(["--url", server.base_url, *FLAGS, "--run-dir", str(run_dir)])
    report = json.loads((run_dir / "report.json").read_text())
    return done, report, {c["test"]: c for c in report["cells"]}


def test_speculation_on_is_underpowered_by_the_verification_rows(install, tmp_path):
    from verifier.server.self_reported import UNDEFINED_REASON, VERIFICATION_ROW

    done, report, cells = _run(install, tmp_path, draft=True)
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    d = report["decoders"][0]
    assert d["verdict"] == "UNDERPOWERED" and d["reason"].startswith(UNDEFINED_REASON), d["reason"]
    assert VERIFICATION_ROW in d["reason"] and d["speculation"]["verified"]
    positions = report["sample_sets"][0]["reported_positions"]
    assert positions["reasons"][0]["reason"] == VERIFICATION_ROW
    assert positions["fraction_undefined"] >= 0.6  # positions 2-4 always, 5 about half the time (1,500 in all)
    assert all(c["verdict"] != "BIAS" for c in cells.values())
    assert cells["consistency"]["verdict"] == "PASS" and cells["consistency"]["effect"] < 1e-3  # defined rows agree
    assert cells["collision (seeded)"]["n"] == 0  # every completion has an undefined position: no pair is usable
    assert "raise `samples`" not in d["reason"]


def test_speculation_off_control_rejects_no_cell(install, tmp_path):
    done, report, cells = _run(install, tmp_path, draft=False)
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]  # speculation never ran: not a PASS
    d = report["decoders"][0]
    assert d["verdict"] == "UNDERPOWERED" and d["reason"].startswith("speculation never ran"), d["reason"]
    positions = report["sample_sets"][0]["reported_positions"]
    assert positions["undefined"] == 0 and positions["positions"] > 1400  # 300 x 5, less what ends at EOS
    assert not any(c["verdict"] == "BIAS" for c in cells.values()), cells
    assert cells["pit"]["verdict"] == "PASS" and cells["pit"]["n"] == positions["positions"]
    assert cells["collision (seeded)"]["n"] == cells["collision (unseeded)"]["n"] == 20
    assert cells["consistency"]["effect"] < 1e-3
