"""The planned alpha allocation end to end (issue 27): ``[stats] cell_weights``, the runner's per-cell levels,
weighted Holm in the verdict, the weights in the reports, and ``audit --alpha-allocation planned``'s plan.

Samples come from the exact tabular laws (``tests.runner.plugins:table_sampler``, seed 11 of the suite); the biased
sampler mixes half of the draft's law into every row (TV ~0.2 on bigram4_eos), which every TV cell sees at 600 rows.
"""

from __future__ import annotations

import json

import pytest

from verifier.audit.suite_builder import AuditSpec, plan_audit
from verifier.cli import main
from verifier.errors import EXIT_BIAS, EXIT_USAGE, ConfigError, InvalidArgumentError
from verifier.suite import load_suite

from .conftest import EXACT_DECODER, suite_text

WEIGHTS = 'cell_weights = { "gof@1" = 0.5, "gof@2" = 0.5, "joint@1..2" = 2.0 }'
BIASED = """
[[decoders]]
name = "biased-sampler"
decoder = "tests.runner.plugins:table_sampler"
expect = "detect"
options = { bias = 0.5 }
"""


def test_schema_reads_the_weights_and_refuses_bad_ones(write_suite):
    suite = load_suite(write_suite(suite_text(EXACT_DECODER, stats=WEIGHTS)), "nightly")
    assert dict(suite.stats.cell_weights) == {"gof@1": 0.5, "gof@2": 0.5, "joint@1..2": 2.0}  # kept by a profile
    assert suite.stats.weight_of("pit") == 1.0 and load_suite(write_suite(suite_text(EXACT_DECODER))).stats.cell_weights == ()
    with pytest.raises(ConfigError, match=r"stats\.cell_weights\.gof@1=0 is invalid; allowed: a finite number > 0"):
        load_suite(write_suite(suite_text(EXACT_DECODER, stats='cell_weights = { "gof@1" = 0 }')))
    with pytest.raises(ConfigError, match=r"stats\.cell_weights=.*correction = 'gate'"):
        load_suite(write_suite(suite_text(EXACT_DECODER, stats=f'correction = "audit"\n{WEIGHTS}')))


def test_weighted_levels_verdicts_and_reports(write_suite, tmp_path):
    """Alpha 1e-3, cells gof@1, gof@2, joint@1..2, pit with weights 0.5, 0.5, 2, 1 (sum 4 = m): each cell's level is
    (alpha / 2) w / 4; the exact sampler passes, the biased one is detected, and the reports carry the weights."""
    suite = write_suite(suite_text(EXACT_DECODER + BIASED, defaults="gof_positions = [1, 2]",
                                   stats=f"alpha = 1e-3\ntarget_mde = 0.3\n{WEIGHTS}"))
    run_dir = tmp_path / "run"
    assert main(["run", str(suite), "--run-dir", str(run_dir), "--no-progress"]) == 0  # both expectations met
    report = json.loads((run_dir / "report.json").read_text())
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    assert verdicts == {"exact-sampler": "PASS", "biased-sampler": "BIAS DETECTED"}
    levels = {c["test"]: c["cell_alpha"] for c in report["cells"] if c["decoder"] == "exact-sampler"}
    assert levels == pytest.approx({"gof@1": 6.25e-5, "gof@2": 6.25e-5, "joint@1..2": 2.5e-4, "pit": 1.25e-4})
    assert report["suite"]["stats"]["cell_weights"] == {"gof@1": 0.5, "gof@2": 0.5, "joint@1..2": 2.0}
    assert all("weighted Holm" in d["method"] and "joint@1..2 2" in d["method"] for d in report["decoders"])
    assert "Planned alpha allocation" in (run_dir / "report.md").read_text()
    assert "Planned alpha allocation" in (run_dir / "report.html").read_text()


def test_equal_suite_report_is_unchanged(write_suite, tmp_path):
    suite = write_suite(suite_text(EXACT_DECODER, defaults="gof_positions = [1]"))
    run_dir = tmp_path / "run"
    main(["run", str(suite), "--run-dir", str(run_dir), "--no-progress"])
    report = json.loads((run_dir / "report.json").read_text())
    assert "cell_weights" not in report["suite"]["stats"] and report["decoders"][0]["method"].startswith("Holm(")


COMMON = dict(decoder="reference", target="tabular:trigram3", prompts=(("ids", (0, 1)),), num_draft_tokens=2,
              target_tv=0.1)


def test_audit_plan_gives_the_binding_cell_more_alpha_and_needs_fewer_rows():
    """trigram3, prompt (0, 1), k = 2, TV 0.1, alpha 1e-3, power 0.99 (Pearson cells): equal levels need 1,922 rows
    (joint@1..3 binds); the planned weights (from the exact laws) give joint@1..3 ~3.7x its equal level and the gof
    cells 0.1x, surprisal and pit keep 1, and the plan needs fewer rows."""
    old = plan_audit(AuditSpec(**COMMON))
    new = plan_audit(AuditSpec(**COMMON, alpha_allocation="planned"))
    w = new.cell_weights
    assert set(w) == {"gof@1", "gof@2", "gof@3", "joint@1..3"} and new.raw["stats"]["cell_weights"] == w
    assert sum(w.values()) == pytest.approx(4.0) and w["joint@1..3"] > 3 and min(w.values()) >= 0.1 - 1e-9
    assert new.cell_alpha == old.cell_alpha and "cell_weights" not in old.raw["stats"]
    assert new.n_needed < 0.95 * old.n_needed, (old.needed, new.needed)
    assert "planned allocation" in new.describe() and any("weighted Holm" in n for n in new.notes)
    with pytest.raises(InvalidArgumentError, match="--alpha-allocation"):
        plan_audit(AuditSpec(**COMMON, alpha_allocation="greedy"))


def test_planned_audit_passes_the_reference_and_detects_a_biased_decoder(tmp_path):
    """The same audit through `specverify audit` (seed 0, TV 0.1, n planned ~1,800): the lossless reference decoder
    passes and full_p_fallback (exact TV 0.39 on trigram3's first token) is detected."""
    base = ["audit", "--target", "tabular:trigram3", "--prompt-ids", "0,1", "--num-draft-tokens", "2",
            "--target-tv", "0.1", "--alpha-allocation", "planned", "--no-progress"]
    assert main(base + ["--decoder", "reference", "--report-dir", str(tmp_path / "ok")]) == 0
    assert main(base + ["--decoder", "full_p_fallback", "--report-dir", str(tmp_path / "bad")]) == EXIT_BIAS
    report = json.loads(next((tmp_path / "ok").rglob("report.json")).read_text())
    assert report["suite"]["stats"]["cell_weights"]["joint@1..3"] > 3


def test_a_weight_for_no_cell_is_refused_before_sampling(write_suite, tmp_path):
    suite = write_suite(suite_text(EXACT_DECODER, stats='cell_weights = { "joint@1..3" = 2.0 }'))  # the suite's J is 2
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_USAGE
    assert not (tmp_path / "run" / "samples").exists()


def test_the_cli_offers_exactly_the_allocations_the_statistics_know():
    """`audit --alpha-allocation` lists its choices as a literal (importing verifier.stats.allocation would pull numpy
    into `--help`); this keeps the literal equal to allocation.ALLOCATIONS, so a new allocation cannot be missing from
    the CLI or a CLI choice unknown to the suite builder."""
    import argparse

    from verifier.cli import cmd_audit
    from verifier.stats.allocation import ALLOCATIONS

    parser = argparse.ArgumentParser()
    cmd_audit.register(parser)
    action = next(a for a in parser._actions if "--alpha-allocation" in a.option_strings)
    assert tuple(action.choices) == tuple(ALLOCATIONS) and action.default in ALLOCATIONS
