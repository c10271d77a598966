"""The recurrent-state zoo through a suite run (issue 29, bug kind 8): ``suites/recurrent.toml``.

parity3 (a finite-state target, ``verifier.models.recurrent:parity3_target``) with its bigram draft, prompt (0,),
6,000 rows of 4 tokens, k = 2, T = 1, seed 8, alpha 1e-3.  The reference (every round drafting, or with draftless
rounds at probability 1/2) and the stale-checkpoint decoder without draftless rounds PASS; state_not_rolled_back
(exact TV 0.094 on the 4 tokens) and the stale checkpoint with draftless rounds (exact TV 0.039) are DETECTED by the
joint cell of the 4 tokens (their marginals move by TV <= 0.023 and <= 0.005: ``recurrent_law``), and the diagnosis
names each by its state policy (``verifier.diagnose.recurrent``; before it, the per-row ranking called them
kv_not_rolled_back and draft_suffix_kept).  About 2 min (the joint cell's Monte Carlo p-values, the diagnosis), so
the full tier.
"""

import json
from pathlib import Path

import pytest

from verifier.cli import main

SUITE = Path(__file__).parent / "suites" / "recurrent.toml"


@pytest.mark.full
def test_recurrent_zoo_verdicts(tmp_path):
    run_dir = tmp_path / "run"
    code = main(["run", str(SUITE), "--run-dir", str(run_dir), "--no-progress"])
    report = json.loads((run_dir / "report.json").read_text())
    assert code == 0, report["summary"]
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    assert verdicts == {"reference": "PASS", "reference_intermittent": "PASS", "state_not_rolled_back": "BIAS DETECTED",
                        "stale_every_round_drafts": "PASS", "stale_intermittent": "BIAS DETECTED"}
    cells = {(c["decoder"], c["test"]): c for c in report["cells"]}
    for name in ("state_not_rolled_back", "stale_intermittent"):
        assert cells[(name, "joint@1..4")]["verdict"] == "BIAS"
    diagnosis = {d["decoder"]: d for d in report["diagnosis"]["decoders"]}
    for name, mechanism in (("state_not_rolled_back", "state_not_rolled_back"),
                            ("stale_intermittent", "state_checkpoint_stale")):  # never kv_not_rolled_back / draft_suffix_kept
        assert diagnosis[name]["status"] == "recurrent state"
        assert diagnosis[name]["recurrent_state"]["mechanism"] == mechanism, diagnosis[name]["sentence"]


@pytest.mark.full
def test_mamba_suite(tmp_path):
    """``suites/recurrent_mamba.toml``: a tiny random transformers Mamba on CPU (2,000 rows of 3 tokens, seed 3):
    the reference PASSes, the state not rolled back is DETECTED and the diagnosis points at the state rollback
    without naming a KV-cache mechanism.  About 20 s."""
    pytest.importorskip("transformers")
    run_dir = tmp_path / "run"
    code = main(["run", str(SUITE.with_name("recurrent_mamba.toml")), "--run-dir", str(run_dir), "--no-progress"])
    report = json.loads((run_dir / "report.json").read_text())
    assert code == 0, report["summary"]
    assert {d["decoder"]: d["verdict"] for d in report["decoders"]} == {"reference": "PASS",
                                                                      "state_not_rolled_back": "BIAS DETECTED"}
    (entry,) = [d for d in report["diagnosis"]["decoders"] if d["decoder"] == "state_not_rolled_back"]
    assert entry["status"] == "recurrent state" and entry["recurrent_state"]["mechanism"] is None
    assert "state" in entry["sentence"] and "kv_not_rolled_back" not in entry["sentence"]
