"""The shipped CI gate end to end: ``specverify run suites/ci.toml``.

Expectation per decoder (suites/ci.toml): the reference decoder and the lossless non-canonical
decoders (fresh_target_match, block_verification) PASS and every mutant of the decoder bug zoo
that is visible end to end is DETECTED, at family-wise alpha 1e-3 per decoder
with the suite's fixed seed.  The smallest mutant effect in the suite is TV 0.07 over the first
three tokens (exact, `specverify exact`), against cell MDEs of about 0.05-0.06 TV at n = 2000, so
with this seed the outcome is a regression check, not a coin flip.  The suite also runs the
reference and the cache-rollback mutant on the shipped transformers, and (issue 29) one lossless control and one
mutant per field bug kind: batch composition, shared randomness, reported logprobs, penalties, stop rules, a lossy
mode left on, another vocabulary and recurrent state.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from verifier.cli import main

CI_SUITE = Path(__file__).resolve().parents[2] / "suites" / "ci.toml"


@pytest.mark.slow
def test_ci_suite_reference_passes_and_every_mutant_is_detected(tmp_path, capsys):
    code = main(["run", str(CI_SUITE), "--run-dir", str(tmp_path / "ci"), "--no-progress"])
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "ci" / "report.json").read_text())
    assert code == 0, out
    assert report["verdict"] == "PASS" and report["exact"]["ok"]
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    expect = {d["name"]: d["expect"] for d in tomllib.loads(CI_SUITE.read_text())["decoders"]}
    assert set(expect) == set(verdicts)
    must_pass = {name for name, e in expect.items() if e == "pass"}
    # the reference, the lossless decoders with other acceptance rules (issue 12; their acceptance is audited
    # beside) and one lossless control per field bug kind (issue 29: batch, requests, penalties, stop, vocab, recurrent)
    assert {"reference", "reference@shipped", "fresh_target_match", "block_verification", "reference@batch",
            "reference@batch-prompts",
            "reference@requests", "reference@penalties", "reference@stop", "vocab_mapped@vocab",
            "recurrent_reference_intermittent@recurrent"} == must_pass
    assert all(verdicts.pop(name) == "PASS" for name in must_pass), verdicts
    assert len(verdicts) >= 20 and set(verdicts.values()) == {"BIAS DETECTED"}
    assert "wall time per stage: exact" in out
    decoders = {d["decoder"]: d for d in report["decoders"]}
    assert decoders["reference"]["acceptance_conformance"]["verdict"] == "CONFORMS"
    assert any(a["far_below"] for a in decoders["fresh_target_match"]["acceptance"])  # PASS + the loud note
    assert "ACCEPTANCE FAR BELOW CANONICAL" in out
    assert_matches_golden(report)  # issue 17: same verdicts and p-values as before the scale work
    _check_field_kinds_per_decoder(report)
    diagnosed = {d["decoder"] for d in report["diagnosis"]["decoders"]}  # every biased decoder, no passing one
    assert diagnosed == set(verdicts), diagnosed
    _check_verdicts_do_not_depend_on_last_stats(tmp_path / "ci", report)


def _check_field_kinds_per_decoder(report):
    """The README's field-kinds table (verifier.engines.kinds_matrix) reads each issue-29 control as PASS and each
    mutant as BIAS at its own kind -- and the batch mutant at batch 16 only, the lossy mode by its fingerprint."""
    from verifier.engines.kinds_matrix import kind_results

    kinds = {d["decoder"]: {k: v["verdict"] for k, v in kind_results(report, d["decoder"]).items()}
             for d in report["decoders"]}
    assert kinds["reference@batch"] == {"batch shape": "PASS"}
    assert kinds["corrupt_batch_gt2@batch"] == {"batch shape": "BIAS"}
    assert kind_results(report, "corrupt_batch_gt2@batch")["batch shape"]["levels"] == {"2": "PASS", "16": "BIAS"}
    # mixed prompt lengths: the control passes plain and mixed; the leak rejects only in mixed calls (its 500 rows leave
    # the plain level UNDERPOWERED at the ci profile's TV 0.1, never BIAS)
    assert kind_results(report, "reference@batch-prompts")["batch shape"]["levels"] == {"4": "PASS", "4,mixed prompts": "PASS"}
    assert kind_results(report, "prompt_length_leak@batch")["batch shape"]["levels"] == {"4": "UNDERPOWERED",
                                                                                       "4,mixed prompts": "BIAS"}
    assert kinds["reference@requests"] == {"shared randomness": "PASS", "reported logprobs": "PASS"}
    assert kinds["shared_stream@requests"] == {"shared randomness": "BIAS"}
    assert kinds["logprobs_first_only@requests"] == {"reported logprobs": "BIAS"}
    assert kinds["reference@penalties"] == {"penalties, min-p": "PASS"}
    assert kinds["penalty_ignored_in_verification@penalties"] == {"penalties, min-p": "BIAS"}
    assert kinds["reference@stop"] == {"stop rules": "PASS"} and kinds["stop_mid_block@stop"] == {"stop rules": "BIAS"}
    assert kinds["synthetic_acceptance"] == {"lossy modes": "FLAGGED"} and kinds["reference"] == {"lossy modes": "PASS"}
    assert kinds["vocab_mapped@vocab"] == {"another vocabulary": "PASS"}
    assert kinds["many_to_one_q_single@vocab"] == {"another vocabulary": "BIAS"}
    assert kinds["recurrent_reference_intermittent@recurrent"] == {"recurrent state": "PASS"}
    assert kinds["state_not_rolled_back@recurrent"] == {"recurrent state": "BIAS"}


def _check_verdicts_do_not_depend_on_last_stats(run_dir, report):
    """Regression (issue 12): every ci decoder's verdict is the same when the decoder hides
    ``last_stats`` -- the same samples (same seeds) with the decoder statistics dropped from
    every shard, re-analysed.  Before, a hidden ``last_stats`` dropped the `accepted` cell and so
    changed the per-cell level of every other cell and the verdict of non-canonical decoders."""
    import numpy as np

    from verifier.pipeline import analyze_run
    from verifier.runner.store import SampleStore, Shard

    store = SampleStore(run_dir)
    for path in sorted(store.samples_dir.glob("*/chunk-*.npz")):
        shard = store.read_chunk(path.parent.name, int(path.stem.split("-")[1]))
        store.write_chunk(path.parent.name, int(path.stem.split("-")[1]),
                          Shard(shard.tokens, None, np.zeros(0, dtype=np.int64), shard.meta,
                                logprobs=shard.logprobs))  # reported logprobs are samples, not statistics
    hidden = analyze_run(run_dir, out_dir=run_dir / "no-stats", log=lambda _m: None).report
    strip = lambda d: {k: v for k, v in d.items()  # noqa: E731  acceptance figures need last_stats
                       if k not in ("acceptance", "acceptance_conformance", "acceptance_fingerprint")}
    assert [strip(d) for d in hidden["decoders"]] == [strip(d) for d in report["decoders"]]
    # the logprob cell's defect name (`extra`) reads the rounds (which tokens began a round): without last_stats it
    # checks fewer defects; its statistic, p-value and verdict must not move
    cell = lambda c: {k: v for k, v in c.items() if not (c["test"] == "logprob" and k == "extra")}  # noqa: E731
    assert [cell(c) for c in hidden["cells"]] == [cell(c) for c in report["cells"]]
    assert all(not a["reported"] for d in hidden["decoders"] for a in d["acceptance"])
    conf = next(d for d in hidden["decoders"] if d["decoder"] == "reference")["acceptance_conformance"]
    assert conf["verdict"] == "NOT TESTED" and "no first_round_accepted" in conf["reason"]


GOLDEN = Path(__file__).resolve().parent / "data" / "ci_cells_golden.json"


def assert_matches_golden(report: dict) -> None:
    """Verdicts equal and every cell's p-value equal to the ci run of main before issue 17
    (tests/runner/data/ci_cells_golden.json, written from ``specverify run suites/ci.toml`` at commit
    20a4b8c; the issue-29 field-kind decoders' cells were added from the run of session 15, every earlier cell
    unchanged): scale work must not move a result.  Tabular cells are bit-identical; the shipped
    transformer's float32 output layer now runs on the scored positions only (``logits_to_keep``),
    which moves its probs by float32 rounding -- and float32 rounding differs across CPUs, so shipped cells are
    compared by result (below), tabular ones to 1e-12 and Monte Carlo ones within Monte Carlo error.  Issue 28: the Monte Carlo cells (13 of 44 moved, every verdict
    the same; two small-sample gof cells now report the other pooling) were regenerated when null
    streams stopped being seeded by the law's bytes (verifier.stats.montecarlo._seed): seeded so,
    another CPU's float32 rounding of the shipped law drew an independent null and
    ``reference@shipped/.../surprisal@1..2`` moved 0.8 -> 1.0.  Now the same uniforms drive the rounded law (tests/stats/test_null_seed_rounding.py),
    so these p-values agree across CPUs to the rounding, well inside the tolerance below."""
    golden = json.loads(GOLDEN.read_text())
    assert {d["decoder"]: d["verdict"] for d in report["decoders"]} == golden["decoders"]
    cells = {c["id"]: c for c in report["cells"]}
    assert set(cells) == set(golden["cells"])
    for cid, want in golden["cells"].items():
        got = cells[cid]["pvalue"]
        if "@shipped/" in cid:
            # The shipped transformer runs in float32: its law differs in the last bits across CPUs (AMD EPYC vs
            # Intel Xeon, thread count), which flips a sampled token wherever a uniform falls within rounding of a
            # CDF edge, so its samples -- and p-values -- are not bit-stable across machines (measured on a fresh
            # Intel Xeon: the reference's gof@2 0.486 -> 0.454, kv_not_rolled_back's gof@2 2.0709e-278 ->
            # 2.0703e-278; 2 threads vs xdist workers moved them differently).  What must not move is the result:
            # a cell that rejected (p <= 1e-4, the Monte Carlo floor 1e-5 included) still rejects, and one far
            # from rejecting (p > 0.01; every cell's corrected alpha is below that) stays so.
            assert want["pvalue"] <= 1e-4 or want["pvalue"] > 0.01, (cid, want)  # the golden file has no middle case
            assert (got <= 1e-4) if want["pvalue"] <= 1e-4 else (got > 0.01), (cid, got, want)
            continue
        if "monte-carlo" in want["method"]:
            tol = 4 * (want["pvalue"] * (1 - want["pvalue"]) / 1000) ** 0.5 + 1e-3
        else:
            tol = 1e-12 * abs(want["pvalue"])  # tabular pairs: float64 laws, bit-identical samples
        assert abs(got - want["pvalue"]) <= tol, (cid, got, want)

