"""The shipped tree gate end to end: ``specverify run suites/tree.toml`` (issue 18 part 3).

Expectation per decoder (suites/tree.toml): the reference tree decoder on four shapes and every
lossless tree rule PASS; every tree kernel mutant plugged into the decoder, the wrong tree
attention mask and the cache kept for a rejected branch are DETECTED, at family-wise alpha 1e-3 per
decoder with the suite's fixed seed.  The smallest kernel-mutant effect in the suite is TV .10 over
the first three tokens (exact, `specverify exact --tree`) against cell MDEs of about 0.05-0.06 TV at
n = 2500; the decoder-level mutants were measured at p < 1e-10.  So with this seed the outcome is a
regression check, not a coin flip.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifier.cli import main

TREE_SUITE = Path(__file__).resolve().parents[2] / "suites" / "tree.toml"


@pytest.mark.full  # 113 s; tree decoders, kernels and laws keep their quick tests
@pytest.mark.slow
def test_tree_suite_lossless_pass_and_every_tree_mutant_is_detected(tmp_path, capsys):
    code = main(["run", str(TREE_SUITE), "--run-dir", str(tmp_path / "tree"), "--no-progress"])
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "tree" / "report.json").read_text())
    assert code == 0, out
    assert report["verdict"] == "PASS" and report["exact"]["ok"]
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    passing = {n for n in verdicts if n.startswith(("tree_reference", "tree_wor_recursive_rejection", "tree_topk_target_only"))}
    assert {verdicts[n] for n in passing} == {"PASS"} and len(passing) == 9
    detected = set(verdicts) - passing
    assert {verdicts[n] for n in detected} == {"BIAS DETECTED"} and len(detected) == 10
    assert {"tree_mask_sees_sibling@shipped", "tree_cache_kept_rejected@shipped"} <= detected
