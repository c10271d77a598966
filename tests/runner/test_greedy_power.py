"""Issue 12, part 2: UNDERPOWERED says which n to use; a single-outcome law is a support check; T = 0
is the greedy contract; a support violation is reported as its reason.

Runs on tabular targets (laws known exactly), seeds fixed in the suites, family-wise alpha 1e-3 (gate).
The greedy and support checks have no false alarms (the null cannot produce a row off the greedy
output or a token at target prob 0); their detections are certain here (the plugin samplers emit
such rows with probability > 0.3 per row, 200+ rows).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.errors import EXIT_BIAS, EXIT_OK, EXIT_UNDERPOWERED

from .conftest import EXACT_DECODER, suite_text

TRIGRAM = 'target = "tabular:trigram3"\ndraft = "tabular:trigram3"'
SAMPLING = """
[sampling.greedy]
temperature = 0.0

[sampling.top1]
temperature = 1.0
top_k = 1

[sampling.top2]
temperature = 1.0
top_k = 2
"""


def _decoder(decoder: str, sampling: str, expect: str = "pass") -> str:
    return f"""
[[decoders]]
name = "dut"
decoder = "{decoder}"
expect = "{expect}"
sampling = ["{sampling}"]
num_draft_tokens = [2]
"""


def _run(write_suite, tmp_path: Path, decoders: str, *, defaults: str = "", stats: str = "target_mde = 0.1") -> tuple[int, dict]:
    suite = write_suite(suite_text(decoders + SAMPLING, models=TRIGRAM, prompt="ids = [0, 1]",
                                   defaults=defaults, stats=stats))
    run_dir = tmp_path / "run"
    code = main(["run", str(suite), "--run-dir", str(run_dir), "--no-progress"])
    return code, json.loads((run_dir / "report.json").read_text())


def test_greedy_reference_passes_by_exact_match(write_suite, tmp_path, capsys):
    """Before: every cell 'untestable', exit 4 ('can only see TV >= inf')."""
    code, report = _run(write_suite, tmp_path, _decoder("reference", "greedy"))
    assert code == EXIT_OK, report["decoders"][0]["reason"]
    (cell,) = report["cells"]
    assert cell["test"] == "greedy" and cell["verdict"] == "PASS" and cell["statistic"] == 0
    assert cell["mde"] == pytest.approx(1 - 0.01 ** (1 / 600))  # power 0.99, n = 600 rows
    assert "inf" not in capsys.readouterr().out


def test_greedy_mismatch_is_bias_with_the_first_mismatching_row(write_suite, tmp_path, capsys):
    """A sampler that ignores T = 0 (samples the raw table) leaves the greedy output."""
    code, report = _run(write_suite, tmp_path, _decoder("tests.runner.plugins:table_sampler", "greedy"))
    assert code == EXIT_BIAS
    (cell,) = report["cells"]
    assert cell["verdict"] == "BIAS" and cell["pvalue"] == 0.0
    assert cell["support_violation"].startswith("row ") and "differs from the target's greedy output at position" in cell["support_violation"]
    assert "differs from the target's greedy output" in capsys.readouterr().out


def test_single_outcome_law_at_t1_top_k_1_is_not_underpowered(write_suite, tmp_path):
    """top_k = 1 makes every expected law one-hot: support checks with MDE 1 - (1 - power)^(1/n)."""
    code, report = _run(write_suite, tmp_path, _decoder("reference", "top1"))
    assert code == EXIT_OK, report["decoders"][0]["reason"]
    chi = [c for c in report["cells"] if c["test"].startswith(("gof", "joint"))]
    assert chi and all(c["verdict"] == "PASS" and c["method"].startswith("support check") for c in chi)
    assert all(c["mde"] == pytest.approx(1 - 0.01 ** (1 / 600)) for c in chi)


def test_support_violation_is_shown_as_its_reason(write_suite, tmp_path, capsys):
    """Before: gof@1 showed p = 0.908 with verdict BIAS; the PIT cell p = 0.156."""
    code, report = _run(write_suite, tmp_path, _decoder("tests.runner.plugins:table_sampler", "top2"))
    assert code == EXIT_BIAS
    violated = [c for c in report["cells"] if c["support_violation"]]
    assert violated and all(c["verdict"] == "BIAS" and c["pvalue"] == 0.0 for c in violated)
    gof1 = next(c for c in violated if c["test"] == "gof@1")
    assert gof1["support_violation"].startswith("token ") and " at target prob 0" in gof1["support_violation"]
    out = capsys.readouterr().out
    assert "support violation in" in out and gof1["support_violation"] in out
    junit = ET.parse(tmp_path / "run" / "junit.xml").getroot()
    case = next(tc for tc in junit.iter("testcase") if tc.get("name") == gof1["id"])
    failure = case.find("failure")
    assert "support violation: " + gof1["support_violation"] in failure.get("message") and " p=" not in failure.get("message")
    md = (tmp_path / "run" / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith(f"| {gof1['id']} | BIAS | gof@1"))
    assert "| support violation | support violation |" in row


def test_underpowered_cells_state_the_n_that_reaches_the_target(write_suite, tmp_path, capsys):
    """Each underpowered chi-square cell carries n_needed; rerun at that n, no cell is underpowered
    (the n is the one gof_test's own MDE reaches, verifier.stats.gof.gof_mde)."""
    code, report = _run(write_suite, tmp_path, EXACT_DECODER + "sampling = [\"t1\"]\nsamples = 60\nchunk_size = 60\n",
                        stats="target_mde = 0.15")
    assert code == EXIT_UNDERPOWERED
    weak = [c for c in report["cells"] if c["verdict"] == "UNDERPOWERED"]
    assert weak and all(c["n_needed"] and c["n_needed"] > c["n"] for c in weak)
    needed = max(c["n_needed"] for c in weak)
    reason = report["decoders"][0]["reason"]
    assert f"n >= {needed} rows per sample set" in reason and f"n >= {needed} rows" in capsys.readouterr().out
    assert f"needs n >= {needed}" in (tmp_path / "run" / "report.md").read_text()
    (tmp_path / "again").mkdir()
    code2, report2 = _run(write_suite, tmp_path / "again", EXACT_DECODER + f"sampling = [\"t1\"]\nsamples = {needed}\nchunk_size = {needed}\n",
                          stats="target_mde = 0.15")
    assert not [c for c in report2["cells"] if c["verdict"] == "UNDERPOWERED"], report2["decoders"][0]["reason"]
    assert code2 == EXIT_OK
