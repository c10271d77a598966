"""The ``logprob`` test (``verifier.runner.logprob``; issue 29, bug kind 4) and its diagnosis (``verifier.diagnose.logprob``).

Suite ``suites/logprob.toml``: bigram4_eos target and draft, prompt (0,), T = 1, k = 3, 4 tokens, 600 rows per set in
calls of 300, seed 5, tests gof@1..3 + logprob, family-wise alpha 1e-3 (gate).  The logprob cell is deterministic
(tolerance 1e-9 nats on float64 tables): the reference never fails it (its values are the scorer's, 1e-9, see
tests/decoders/test_logprob_mutants.py), and each mutant fails it once one row holds a wrong value -- P(a row of 4
tokens holds one) is exactly 1, 11249/20000 and 17237/20000 for zero / first_only / draft_row
(``verifier.exact.logprob_defect_law``), so 600 rows miss with probability < 1e-200.  The zoo samples as the
reference, so gof@1..3 pass for every decoder (false-fail rate <= 1e-3 each, as the reference's).  The classifier
names each mutant's defect; the diagnosis is that finding alone (no likelihood ranking).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from verifier.cli import main
from verifier.diagnose.logprob import LOGPROB_STATUS, logprob_finding
from verifier.errors import EXIT_OK, EXIT_USAGE
from verifier.runner.logprob import LOGPROB_TOL, classify_defect, logprob_cell, logprob_tolerance

SUITE = Path(__file__).parent / "suites" / "logprob.toml"
EXPECTED_DEFECT = {"logprobs_zero": "zero", "logprobs_first_only": "first_only", "logprobs_draft_row": "draft_row"}


@pytest.mark.full  # a whole run with reports: ~18 s on the shared machine
def test_logprob_cell_passes_the_reference_and_names_each_defect_of_the_zoo(tmp_path):
    run_dir = tmp_path / "run"
    code = main(["run", str(SUITE), "--run-dir", str(run_dir), "--no-progress"])
    report = json.loads((run_dir / "report.json").read_text())
    assert code == EXIT_OK, report["summary"]
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    assert verdicts == {"reference": "PASS", **{name: "BIAS DETECTED" for name in EXPECTED_DEFECT}}
    cells = {(c["decoder"], c["test"]): c for c in report["cells"]}
    ref = cells[("reference", "logprob")]
    assert ref["verdict"] == "PASS" and ref["statistic"] == 0 and ref["extra"]["tolerance"] == LOGPROB_TOL["float64"]
    assert [row["position"] for row in ref["extra"]["positions"]] == [1, 2, 3, 4]
    for name, defect in EXPECTED_DEFECT.items():
        cell = cells[(name, "logprob")]
        assert cell["verdict"] == "BIAS" and "row " in cell["support_violation"], cell
        assert cell["extra"]["defect"]["defect"] == defect and cell["extra"]["defect"]["fits"] == [defect]
        for t in (1, 2, 3):
            assert cells[(name, f"gof@{t}")]["verdict"] == "PASS"  # the tokens are the reference's
    first_only = cells[("logprobs_first_only", "logprob")]["extra"]["positions"]
    assert first_only[0]["wrong"] == 0 and first_only[1]["wrong"] > 0  # position 1 opens every row's first round
    diagnosis = {d["decoder"]: d for d in report["diagnosis"]["decoders"]}
    for name, defect in EXPECTED_DEFECT.items():
        assert diagnosis[name]["status"] == LOGPROB_STATUS and diagnosis[name]["logprob"]["defect"] == defect
    md = (run_dir / "report.md").read_text()
    assert "Reported logprobs per position" in md and "reported logprobs differ from the target's" in md


def test_a_decoder_without_return_logprobs_is_a_usage_error(tmp_path, capsys):
    text = SUITE.read_text().replace('decoder = "logprobs_zero"', 'decoder = "ancestral"')
    suite = tmp_path / "s.toml"
    suite.write_text(text.replace('python_path = ["../../.."]', f'python_path = ["{SUITE.parents[3]}"]'))
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_USAGE
    assert "AncestralDecoder.generate takes no return_logprobs keyword" in capsys.readouterr().err



def test_logprob_with_a_greedy_config_is_a_usage_error_not_a_silent_skip(tmp_path, capsys):
    """Review 2026-12-03: at temperature 0 the greedy cell replaces every cell of a set, so `tests = [..., "logprob"]`
    asked for the logprobs, stored them and never checked them: a decoder reporting -5.0 for every token passed
    (exit 0, no logprob cell, no word).  A greedy config with the logprob test is refused before sampling, as a stop
    rule with one is."""
    text = SUITE.read_text().replace('python_path = ["../../.."]', f'python_path = ["{SUITE.parents[3]}"]')
    suite = tmp_path / "s.toml"
    suite.write_text(text.replace("temperature = 1.0", "temperature = 0.0"))
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "'logprob'" in err and "sampling.t1 is greedy" in err and "Traceback" not in err, err
    assert not (tmp_path / "run" / "samples").exists()  # refused before any sample

def _rows():
    """Two rows of k = 2 rounds: origins 0 accepted, 1 recovered, 2 bonus; right values, the draft's, the tokens."""
    tokens = np.array([[1, 2, 0, 1], [2, 2, 1, -1]])
    origins = np.array([[0, 1, 0, 2], [1, 0, 2, -1]], dtype=np.int8)
    right = np.log(np.array([[0.5, 0.2, 0.25, 0.6], [0.3, 0.4, 0.1, np.nan]]))
    draft = np.log(np.array([[0.7, 0.1, 0.5, 0.3], [0.2, 0.9, 0.3, np.nan]]))
    return tokens, origins, right, draft


def test_classifier_checks_each_rule_token_by_token():
    tokens, origins, right, draft = _rows()
    live = tokens != -1
    zero = np.where(live, 0.0, np.nan)
    starts = np.array([[1, 0, 1, 0], [1, 1, 0, 0]], dtype=bool)  # column 0 and after a recovered or bonus token
    first = right.copy()
    first[0, 1], first[0, 3], first[1, 2] = right[0, 0], right[0, 2], right[1, 1]
    draft_row = np.where(origins == 0, draft, right)
    for reported, expected in ((right, None), (zero, "zero"), (first, "first_only"), (draft_row, "draft_row")):
        got = classify_defect(tokens, reported, right, 1e-9, origins=origins, draft=draft)
        assert got["defect"] == expected, (expected, got)
    assert classify_defect(tokens, first, right, 1e-9, origins=origins, draft=draft)["wrong"] == 3
    assert starts[live].sum() == 4
    # no origins: the round structure is unknown, so only 'zero' can be named; one stray value fits nothing
    assert classify_defect(tokens, first, right, 1e-9)["defect"] is None
    stray = right.copy()
    stray[1, 1] = -3.0
    got = classify_defect(tokens, stray, right, 1e-9, origins=origins, draft=draft)
    assert got["defect"] is None and got["fits"] == [] and "no known defect" in got["sentence"]


def test_cell_is_deterministic_at_the_tolerance_and_names_the_first_wrong_token():
    tokens, origins, right, draft = _rows()
    near = right + 5e-10
    cell = logprob_cell("d/logprob", tokens, near, right, 1e-9, power=0.99, cell_alpha=1e-3, decoder="d", set_id="s")
    assert cell.verdict == "" and cell.pvalue == 1.0 and cell.statistic == 0 and cell.n == 7
    far = right.copy()
    far[1, 2] = -np.inf  # reported probability 0 for an emitted token
    cell = logprob_cell("d/logprob", tokens, far, right, 1e-9, power=0.99, cell_alpha=1e-3, decoder="d", set_id="s")
    assert cell.pvalue == 0.0 and cell.statistic == 1 and "row 1, position 3, token 1" in cell.support_violation
    assert cell.extra["positions"][2]["max_abs"] == np.inf and cell.extra["wrong_rows"] == 1
    both_inf = right.copy()
    both_inf[0, 0] = -np.inf
    assert logprob_cell("d/l", tokens, both_inf, both_inf, 1e-9, power=0.99, cell_alpha=1e-3, decoder="d",
                        set_id="s").statistic == 0


def test_tolerance_follows_the_target_dtype():
    import torch

    from verifier.exact import standard_tabular_pairs

    assert logprob_tolerance(standard_tabular_pairs()["unigram3"].target) == 1e-9
    assert logprob_tolerance(torch.nn.Linear(2, 2)) == LOGPROB_TOL["float32"]
    assert logprob_tolerance(torch.nn.Linear(2, 2).to(torch.bfloat16)) == LOGPROB_TOL["bfloat16"]


def test_finding_leads_when_other_cells_rejected_too():
    cells = [{"decoder": "d", "id": "d/gof@1", "test": "gof@1", "verdict": "BIAS"},
             {"decoder": "d", "id": "d/logprob", "test": "logprob", "verdict": "BIAS", "support_violation": "x",
              "extra": {"defect": {"defect": "zero", "sentence": "reported logprobs: zeros"}}}]
    f = logprob_finding("d", cells)
    assert not f["marginal_clean"] and f["defect"] == "zero" and "gof@1" in f["sentence"]
    assert logprob_finding("other", cells) is None


def test_stored_logprobs_no_decoder_run_writes_are_a_storage_error(tmp_path):
    """Review 2026-12-03: a chunk's stored logprobs of another shape than its tokens crashed `specverify report`
    (np.concatenate ValueError, traceback, exit 3 "decoder error"); values the write path refuses (0.7, a
    probability above 1) became BIAS.  Both are a stored chunk edited after the run: StoredSampleError naming it."""
    from verifier.errors import StoredSampleError
    from verifier.runner.store import SampleStore, Shard

    store = SampleStore(tmp_path)
    tokens = np.array([[1, 2, 3, -1], [0, 0, 1, 2]], dtype=np.int64)
    good = np.where(tokens >= 0, -0.5, np.nan)
    origins = np.zeros(tokens.shape, dtype=np.int8)
    for i, (lps, orig) in enumerate(((good, origins), (good[:, :-1], None), (np.where(tokens >= 0, 0.7, np.nan), None),
                                     (good, origins[:, :-1]))):
        store.write_chunk("s", i, Shard(tokens, None, np.zeros(0, np.int64), {"seed": i}, orig, lps))
    lps, orig = store.check_reported(store.read_chunk("s", 0), "s", 0)
    assert np.array_equal(np.isnan(lps), tokens < 0) and orig.shape == tokens.shape
    for i, why in ((1, "shape=(2, 3)"), (2, "logprob 0.7 for emitted token"), (3, "origins of shape=(2, 3)")):
        with pytest.raises(StoredSampleError) as err:
            store.check_reported(store.read_chunk("s", i), "s", i)
        assert str(store.chunk_path("s", i)) in str(err.value) and why in str(err.value), err.value
    assert store.check_reported(Shard(tokens, None, np.zeros(0, np.int64), {}), "s", 0) == (None, None)


@pytest.mark.full  # two small runs of the reference (~15 s on the shared machine)
def test_a_report_on_edited_stored_logprobs_is_exit_2_naming_the_chunk(tmp_path, capsys):
    text = SUITE.read_text().replace('python_path = ["../../.."]', f'python_path = ["{SUITE.parents[3]}"]')
    suite = tmp_path / "s.toml"
    suite.write_text(text.split("[[decoders]]\nname = \"logprobs_zero\"")[0])
    run = tmp_path / "run"
    assert main(["run", str(suite), "--run-dir", str(run), "--no-progress"]) == EXIT_OK
    chunk = sorted((run / "samples").glob("reference*/chunk-000001.npz"))[0]
    with np.load(chunk, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["logprobs"] = arrays["logprobs"][:, :-1]
    with open(chunk, "wb") as fh:
        np.savez(fh, **arrays)
    capsys.readouterr()
    assert main(["report", str(run), "--no-progress"]) == EXIT_USAGE
    out = capsys.readouterr()
    assert str(chunk) in out.err and "Traceback" not in out.err and "BIAS" not in out.out + out.err, out.err


@pytest.mark.parametrize("extra", [{"defect": {"defect": "bogus", "sentence": "x"}}, {"defect": "zero"}, "zero", None,
                                   {"defect": {"defect": ["zero"], "sentence": 3}}])
def test_finding_reads_an_edited_report_without_a_traceback(extra):
    """Review 2026-12-03: `specverify diagnose RUN_DIR` on a report.json whose logprob cell names another defect
    (KeyError: 'bogus') or holds a string where the classifier's dict was (AttributeError) ended in a traceback with
    exit 1, the bias code.  A defect the classifier never names is no defect (the generic pointer)."""
    cells = [{"decoder": "d", "id": "d/logprob", "test": "logprob", "verdict": "BIAS", "support_violation": "x",
              "extra": extra}]
    f = logprob_finding("d", cells)
    assert f["defect"] is None and f["marginal_clean"] and "position by position" in f["sentence"]
