"""The filter-boundary finding (``verifier.diagnose.boundary``; issue 26): a support change at a threshold only.

Tabular cases: trigram3, prompt (0, 1) (target probs 0.2 / 0.5 / 0.3, so token 0 has p / p_max = 0.4), requested
T = 1 with min-p 0.4 / 1.01 (token 0 kept with a margin of log 1.01 = 0.00995 nats), k = 2, 3 tokens, 3,000 rows drawn
(numpy, seed 0) from exact laws (``verifier.exact.penalties.penalty_n_token_law``):

* min-p 0.4 x 1.01 (the threshold crossed by a 1% error: what lower precision does) -> named, rounding;
* the requested law (null) -> not named (the band test runs at alpha 0.01: a wrong name has probability <= 0.01);
* T = 0.8 -> named, never "rounding" (the non-band tokens fit T ~ 0.77, the requested T = 1 outside the
  1 - 0.001 profile interval): the sentence gives a temperature defect as the other candidate;
* ``min_p_skipped_on_verified`` and the unprocessed target (tokens min-p drops, far from the threshold) -> not named.

Real engine rows: the committed OpenVINO GenAI field-kinds run (bf16 / u8 KV cache by default; FINDINGS.md there):
its min-p set is named a threshold flip of 'name' (id 361, margin 0.012 nats, 0 of 57.2 expected) with the
engine's precision hint.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.diagnose._helpers import law_rows, trigram3
from verifier.diagnose.boundary import BAND_NATS, BOUNDARY_STATUS, boundary_set_finding, covered_positions, filter_margins
from verifier.diagnose.inputs import sequence_probs
from verifier.exact.penalties import penalty_n_token_law
from verifier.sampling import SamplingConfig

ROOT = Path(__file__).resolve().parents[2]
PROMPT, K, N, ROWS = (0, 1), 2, 3, 3000
REQUESTED = SamplingConfig(temperature=1.0, min_p=0.4 / 1.01)


def _finding(sampling: SamplingConfig, rule: str = "canonical", seed: int = 0) -> dict:
    pair, tr, dr = trigram3()
    law = penalty_n_token_law(pair.target, pair.draft, PROMPT, sampling, K, N, rule=rule)
    rows = law_rows(law, ROWS, seed)
    uniq, counts = np.unique(rows, axis=0, return_counts=True)
    seqs = sequence_probs(tr, dr, PROMPT, uniq, REQUESTED)
    seqs.weights = counts.astype(np.float64)
    return boundary_set_finding(seqs, REQUESTED, N)


def test_a_threshold_crossed_by_one_percent_is_named_rounding():
    f = _finding(replace(REQUESTED, min_p=0.4 * 1.01))
    assert f["named"] and f["rounding"], f["sentence"]
    first = f["first_position"]
    assert [e["token"] for e in first] == [0] and first[0]["observed"] == 0
    assert first[0]["margin"] == pytest.approx(math.log(1.01), rel=1e-9) and first[0]["expected"] == pytest.approx(600.0)
    assert "not a defect of the speculative rule" in f["sentence"]


def test_the_requested_law_is_not_named():
    f = _finding(REQUESTED)
    assert not f["named"] and "emitted as often as expected" in f["sentence"]


def test_a_temperature_defect_is_never_called_rounding():
    f = _finding(replace(REQUESTED, temperature=0.8))
    assert not f["rounding"] and not f["temperature"]["consistent"], f["temperature"]
    assert f["temperature"]["fitted"] < 0.9 and "temperature / logits-processor defect" in f["sentence"]


@pytest.mark.parametrize("sampling, rule", [(REQUESTED, "min_p_skipped_on_verified"), (SamplingConfig(), "canonical")])
def test_tokens_dropped_far_from_the_threshold_rule_it_out(sampling, rule):
    f = _finding(sampling, rule)
    assert not f["named"] and f["impossible_outside_band"] > 0
    assert "outside the band" in f["sentence"]


def test_margins_of_each_filter():
    x = np.log(np.array([0.5, 0.3, 0.12, 0.08]))
    m, kept = filter_margins(x, SamplingConfig(top_k=2))
    assert kept.tolist() == [True, True, False, False]
    assert m[1] == pytest.approx(math.log(0.3 / 0.12)) and m[2] == pytest.approx(math.log(0.3 / 0.12))
    m, kept = filter_margins(x, SamplingConfig(top_p=0.79))  # mass before token 2 is 0.8: dropped, 0.0126 nats away
    assert kept.tolist() == [True, True, False, False] and m[2] == pytest.approx(math.log(0.8 / 0.79))
    m, kept = filter_margins(x, SamplingConfig(min_p=0.25))  # p / p_max of token 2 = 0.24
    assert kept.tolist() == [True, True, False, False] and m[2] == pytest.approx(abs(math.log(0.24 / 0.25)))
    assert (m[2] <= BAND_NATS) and (m[3] > BAND_NATS)
    m, _ = filter_margins(x, SamplingConfig())
    assert np.isinf(m).all()


def test_covered_positions_read_the_rejected_cells():
    cells = [{"id": "d/p/s/k=2/gof@1", "verdict": "BIAS"}, {"id": "d/p/s/k=2/gof@3", "verdict": "PASS"},
             {"id": "d/p/s/k=2/joint@1..2", "verdict": "BIAS"}, {"id": "e/p/s/k=2/pit", "verdict": "BIAS"}]
    assert covered_positions(cells, "d/p/s/k=2/", 5) == 2
    assert covered_positions(cells, "e/p/s/k=2/", 5) == 5


def test_the_openvino_min_p_row_is_named_from_its_committed_samples(tmp_path):
    src = ROOT / "reports/audits/openvino-genai-2026.4.1.0/field-kinds/suite"
    run = tmp_path / "run"
    shutil.copytree(src, run)
    proc = subprocess.run([sys.executable, "-m", "verifier.cli", "diagnose", str(run), "--recompute", "--no-progress",
                           "--decoder", "penalties-token1"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    item = next(d for d in json.loads((run / "diagnosis.json").read_text())["decoders"] if d["decoder"] == "penalties-token1")
    assert item["status"] == BOUNDARY_STATUS, item["sentence"]
    (f,) = item["boundary"].values()
    assert f["named"] and f["filters"] == ["min-p"] and f["impossible_outside_band"] == 0
    (name,) = [e for e in f["first_position"] if e["token"] == 361]
    assert name["observed"] == 0 and name["expected"] > 50 and name["margin"] < BAND_NATS
    assert "INFERENCE_PRECISION_HINT" in item["sentence"]


def test_a_rule_defect_that_drops_a_token_wholly_is_not_named():
    """deterministic_acceptance (accept iff p >= q) never emits token 0 at token 1 here -- all or nothing, like a flip --
    but it also drops tokens far from any threshold at later positions, which no rounding error does (2,500 rows,
    seed 1)."""
    from verifier.bench.diagnose import _Setting

    st = _Setting(REQUESTED)
    law = st.law("deterministic_acceptance")
    idx = np.random.default_rng(1).choice(len(law), size=2500, p=law)
    uniq, counts = np.unique(idx, return_counts=True)
    seqs = st.sp.rows(uniq)
    seqs.weights = counts.astype(np.float64)
    f = boundary_set_finding(seqs, REQUESTED, N)
    assert not f["named"] and f["flip_pvalue"] < 0.01 and f["far_gone_pvalue"] < 1e-3, f["sentence"]
    assert "a token far from every threshold is wholly gone" in f["sentence"]


def test_the_threshold_flip_is_named_when_the_draft_is_unknown(tmp_path, capsys):
    """A URL audit's server drafts with its own model (the draft is unknown) and computes the target with its own
    numerics: the diagnosis has no mechanism to rank, yet a support change at a filter threshold needs the target's
    probs only, so it is still named (before, the report said only "not diagnosed: the draft is unknown"; the
    llama-server min-p run of reports/audits/llama-server-0c1e570/field-kinds/ is such a case).  The decoder
    (tests/diagnose/threshold_plugin.py) samples losslessly at min-p 0.4 x 1.01, the audit asks for 0.4 / 1.01:
    token 0 (p / p_max = 0.4) is never emitted where 600 of 3,000 first tokens are expected -- BIAS at any alpha, and
    named a threshold flip with the same statistics as test_a_threshold_crossed_by_one_percent_is_named_rounding."""
    from verifier.cli import main

    run = tmp_path / "run"
    code = main(["audit", "--decoder", f"{Path(__file__).with_name('threshold_plugin.py')}:ThresholdShifted",
                 "--target", "tabular:trigram3", "--draft", "unknown", "--prompt-ids", "0,1", "--min-p", repr(0.4 / 1.01),
                 "--num-draft-tokens", "2", "--max-new-tokens", "3", "--num-samples", "3000", "--seed", "0",
                 "--run-dir", str(run), "--no-progress"])
    out = capsys.readouterr()
    assert code == 1, out.err[-2000:]
    item = json.loads((run / "report.json").read_text())["diagnosis"]["decoders"][0]  # the audit's own diagnosis
    assert item["status"] == BOUNDARY_STATUS, item["sentence"]
    (f,) = item["boundary"].values()
    assert f["named"] and f["filters"] == ["min-p"] and f["impossible_outside_band"] == 0
    assert [(e["token"], e["observed"]) for e in f["first_position"]] == [(0, 0.0)]
    assert "not a defect of the speculative rule" in item["sentence"]
