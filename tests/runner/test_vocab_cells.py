"""Drafts in another vocabulary in a suite (issue 29 kind 7): the existing gof cells see the vocabulary mutants.

Suite ``suites/vocab.toml``: bigram4_eos, draft head over 4 draft ids mapped by (0, 0, 1, 2), k = 2, T = 1 and
T = 1 with top_k = 2, 1,000 rows per set in calls of 500, seed 7, gof@1..3, family-wise alpha 1e-3 (gate).  The
reference's false-fail rate is <= 1e-3.  Exact TVs of the 3-token laws (``verifier.exact.vocab``): many_to_one_q_single
0.12 (T = 1), q_permuted 0.26 (T = 1, identity map, reversed order), draft_processors_differ 0.19 (top_k = 2, identity
map; the reference without a filter), each
far above the cells' MDE at n = 1,000.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.errors import EXIT_OK

SUITE = Path(__file__).parent / "suites" / "vocab.toml"


@pytest.mark.full  # ~25-50 s under load (sampling and reports); tests/decoders/test_vocab_mutants.py drives the same
def test_gof_cells_pass_the_mapped_draft_and_detect_each_vocabulary_mutant(tmp_path):
    run_dir = tmp_path / "run"
    code = main(["run", str(SUITE), "--run-dir", str(run_dir), "--no-progress", "--no-diagnosis"])
    report = json.loads((run_dir / "report.json").read_text())
    assert code == EXIT_OK, report["summary"]
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    assert verdicts == {"vocab_mapped": "PASS", "many_to_one_q_single": "BIAS DETECTED", "q_permuted": "BIAS DETECTED",
                        "draft_processors_differ": "BIAS DETECTED"}
    rejected = {(c["decoder"], c["test"]) for c in report["cells"] if c["verdict"] == "BIAS"}
    assert ("many_to_one_q_single", "gof@1") in rejected and ("q_permuted", "gof@1") in rejected
    assert ("draft_processors_differ", "gof@1") in rejected
    assert not any(d == "vocab_mapped" for d, _ in rejected)


@pytest.mark.full  # ~20-40 s under load (an audit run and its report); the quick decoder tests drive the same decoders
def test_audit_flags_a_permuted_q_by_its_law_and_its_acceptance(tmp_path):
    """``specverify audit --decoder q_permuted`` on trigram3 (prompt 0,1, k = 2, n = 1,000, seed 0, target TV 0.2): FAIL,
    and draft 1 is accepted above the coupling bound sum min(p, q) = 0.7 (exact law: 0.92 of first rounds, vocab_accepted_count_law), which no
    lossless decoder drafting from this draft can reach -- what the harness says when the permutation is unknown."""
    code = main(["audit", "--decoder", "q_permuted", "--target", "tabular:trigram3", "--draft", "tabular:trigram3",
                 "--prompt-ids", "0,1", "--num-draft-tokens", "2", "--num-samples", "1000", "--target-tv", "0.2",
                 "--report-dir", str(tmp_path), "--no-diagnosis", "--no-progress"])
    assert code == 1
    (report,) = [json.loads(p.read_text()) for p in tmp_path.rglob("report.json")]
    (decoder,) = report["decoders"]
    assert decoder["verdict"] == "BIAS DETECTED"
    acceptance = decoder["acceptance"]
    acceptance = acceptance[0] if isinstance(acceptance, list) else acceptance
    assert acceptance["above_bound"] is True
