"""The ``batch_composition`` suite axis (``verifier.suite.batch``, ``verifier.runner.batch``; issue 29, bug kind 1).

Suite ``suites/batch.toml``: bigram4_eos target and draft, prompt (0,), T = 1, k = 2, 3 tokens, cells gof@1 and
joint@1..2, each sample set drawn in generate calls of exactly 1, 2, 4 and 16 rows (2,000 rows per level), seed 29,
family-wise alpha 1e-3 (gate; 8 cells per decoder: Holm step 1 at 6.25e-5).  At n = 2,000 gof@1 sees TV 0.077 with
power 0.99 at its level (its MDE, asserted), below the mutant's exact first-token TV at batch 4 (3/40 = 0.075 -- the
joint cell, TV 0.085 exact, carries that level) and at batch 16 (21/160 = 0.131).

* The reference passes at every level (false-fail rate <= 1e-3 per run: the gate).
* ``corrupt_batch_gt2`` (slots >= 2 of a call of > 2 rows recover from p): every cell at batch 1 and 2 passes (their
  law is exactly the target's, ``verifier.exact.batch_level_law``), every cell at batch 4 and 16 rejects, and the
  diagnosis says "bias only at batch composition 4, 16" and names full_p_fallback for the rows there.

The run takes ~60-200 s of sampling (7-25 ms per generate call on the shared box, 3,625 calls per decoder): full tier;
the quick test below runs the same modules (schema, plan, runner.batch, cell names, the finding) on the mutant alone
at batch 2 and 16, 640 rows per level (gof@1 MDE at n = 640: 0.135 TV, asserted; joint@1..2 exact TV 0.149).

Mixed temperatures (``suites/batch_mixed.toml``): level 2 plain and level 2 with a filler row at T = 0.3 in slot 0 of
every call; ``mixed_temperature_leak`` (row 0's temperature for every row) is BIAS only at the mixed level.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from verifier.cli import main
from verifier.diagnose.batchlevel import batch_finding
from verifier.errors import EXIT_OK, ConfigError
from verifier.runner.batch import call_plan
from verifier.runner.plan import plan_sample_sets
from verifier.suite.schema import parse_suite

SUITE = Path(__file__).parent / "suites" / "batch.toml"


def _raw(**defaults) -> dict:
    raw = tomllib.loads(SUITE.read_text())
    raw["defaults"].update(defaults)
    return raw


def _write(path: Path, raw: dict) -> Path:
    lines = ["schema_version = 1", f"name = {raw['name']!r}", f"seed = {raw['seed']}", "[exact]", "enabled = false",
             "[models.tab]", 'target = "tabular:bigram4_eos"', 'draft = "tabular:bigram4_eos"', "[prompts.zero]",
             "ids = [0]", "[sampling.t1]", "temperature = 1.0", "[defaults]"]
    for key, value in raw["defaults"].items():
        if isinstance(value, dict):
            value = "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()) + " }"
        else:
            value = json.dumps(value)
        lines.append(f"{key} = {value}")
    for d in raw["decoders"]:
        lines += ["[[decoders]]"] + [f"{k} = {json.dumps(v)}" for k, v in d.items()]
    lines += ["[stats]"] + [f"{k} = {json.dumps(v)}" for k, v in raw["stats"].items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("value, words", [
    ({"rows": [1, 2, 2]}, "distinct"), ({"rows": []}, "non-empty"), ({"rows": [0]}, "1..4096"),
    ({"rows": [True]}, "integers"), ({"rows": [4], "colour": 1}, "unknown key 'colour'"),
    ({"rows": [4], "mixed_temperature": 0}, "a finite number > 0"),
    ({"rows": [1], "mixed_temperature": 0.5}, "only with a rows level >= 2"),  # break-it: ran, option ignored, exit 0
    ({"rows": [4], "mixed_prompt_lengths": [3]}, "not supported yet"), ([1, 2], "a table")])
def test_schema_is_strict_and_names_the_key(value, words):
    with pytest.raises(ConfigError, match="batch_composition") as info:
        parse_suite(_raw(batch_composition=value))
    assert words in str(info.value)


def test_levels_are_sample_sets_of_whole_calls_with_their_own_seeds():
    suite = parse_suite(_raw(samples=1000, chunk_size=300))
    plans = plan_sample_sets(suite, {("tab", "zero"): (0,)})
    mine = [p for p in plans if p.decoder.name == "reference"]
    assert [p.batch_rows for p in mine] == [1, 2, 4, 16]
    assert [(p.chunk_size, p.samples) for p in mine] == [(300, 1000), (300, 1000), (300, 1000), (288, 1008)]
    assert len({p.key for p in mine}) == 4 and all("batch=" in p.label for p in mine)
    last = mine[3]
    calls = call_plan(last, last.num_chunks - 1)  # the last chunk: 1008 - 3 * 288 = 144 rows = 9 calls of 16
    assert [r for r, _ in calls] == [16] * 9
    seeds = [s for i in range(last.num_chunks) for _, s in call_plan(last, i)]
    assert len(set(seeds)) == len(seeds) == 1008 // 16
    plain = plan_sample_sets(parse_suite({k: v for k, v in _raw().items()} | {"defaults": {
        k: v for k, v in _raw()["defaults"].items() if k != "batch_composition"}}), {("tab", "zero"): (0,)})
    assert [p.batch_rows for p in plain] == [None, None] and call_plan(plain[0], 0) == [(500, plain[0].chunk_seed(0))]


def _cells(run_dir: Path) -> dict:
    report = json.loads((run_dir / "report.json").read_text())
    return report, {(c["decoder"], c["id"].rsplit("/", 1)[1]): c for c in report["cells"]}


def test_mutant_passes_at_batch_2_and_is_detected_at_batch_16(tmp_path):
    raw = _raw(samples=640, batch_composition={"rows": [2, 16]})
    raw["decoders"] = [d for d in raw["decoders"] if d["name"] == "corrupt_batch_gt2"]
    run_dir = tmp_path / "run"
    code = main(["run", str(_write(tmp_path / "batch.toml", raw)), "--run-dir", str(run_dir), "--no-progress",
                 "--no-diagnosis", "--threads", "1"])
    report, cells = _cells(run_dir)
    assert code == EXIT_OK and report["decoders"][0]["verdict"] == "BIAS DETECTED"
    assert set(cells) == {("corrupt_batch_gt2", f"{t}[batch={b}]") for t in ("gof@1", "joint@1..2") for b in (2, 16)}
    for t in ("gof@1", "joint@1..2"):
        assert cells[("corrupt_batch_gt2", f"{t}[batch=2]")]["verdict"] == "PASS"
        assert cells[("corrupt_batch_gt2", f"{t}[batch=16]")]["verdict"] == "BIAS"
    assert cells[("corrupt_batch_gt2", "gof@1[batch=16]")]["mde"] < 0.14
    shard = np.load(next((run_dir / "samples").glob("*b16*/chunk-000000.npz")), allow_pickle=True)
    assert json.loads(str(shard["meta"]))["batch_rows"] == 16
    finding = batch_finding("corrupt_batch_gt2", report["cells"])
    assert finding["rejected_levels"] == ["16"] and finding["clean_levels"] == ["2"]


@pytest.mark.full  # ~60-200 s of sampling; test_mutant_passes_at_batch_2_and_is_detected_at_batch_16 covers the modules
def test_reference_passes_every_level_and_the_mutant_only_above_two_rows(tmp_path):
    run_dir = tmp_path / "run"
    code = main(["run", str(SUITE), "--run-dir", str(run_dir), "--no-progress", "--threads", "1"])
    report, cells = _cells(run_dir)
    assert code == EXIT_OK, report["summary"]
    assert {d["decoder"]: d["verdict"] for d in report["decoders"]} == {"reference": "PASS",
                                                                        "corrupt_batch_gt2": "BIAS DETECTED"}
    for b in (1, 2, 4, 16):
        for t in ("gof@1", "joint@1..2"):
            assert cells[("reference", f"{t}[batch={b}]")]["verdict"] == "PASS"
            assert cells[("corrupt_batch_gt2", f"{t}[batch={b}]")]["verdict"] == ("BIAS" if b > 2 else "PASS"), (t, b)
    assert cells[("reference", "gof@1[batch=1]")]["mde"] < 0.078
    diagnosis = {d["decoder"]: d for d in report["diagnosis"]["decoders"]}["corrupt_batch_gt2"]
    assert diagnosis["sentence"].startswith("bias only at batch composition 4, 16 rows per generate call")
    assert diagnosis["batch_composition"]["clean_levels"] == ["1", "2"]
    assert diagnosis["status"] == "consistent" and diagnosis["mechanism"][0]["name"] == "full_p_fallback"
    assert "bias only at batch composition" in (run_dir / "report.md").read_text()


MIXED = Path(__file__).parent / "suites" / "batch_mixed.toml"


def test_mixed_temperature_levels_audit_the_odd_slots(tmp_path, capsys):
    """``suites/batch_mixed.toml`` (seed 31, 200 rows per level, alpha 1e-3, 4 cells per decoder): the reference
    passes at level 2 plain and mixed (slot 0 at T = 0.3, slot 1 audited at T = 1); ``mixed_temperature_leak`` passes
    plain and is BIAS mixed (its audited rows are T = 0.3 samples: first-token TV 0.41 exact, gof@1's MDE at n = 200
    is below 0.25, asserted).  A decoder whose generate takes no row_temperatures is refused (exit 2)."""
    run_dir = tmp_path / "run"
    code = main(["run", str(MIXED), "--run-dir", str(run_dir), "--no-progress", "--no-diagnosis", "--threads", "1"])
    report, cells = _cells(run_dir)
    assert code == EXIT_OK, report["summary"]
    for t in ("gof@1", "joint@1..2"):
        assert cells[("reference", f"{t}[batch=2]")]["verdict"] == "PASS"
        assert cells[("reference", f"{t}[batch=2,mixed T=0.3]")]["verdict"] == "PASS"
        assert cells[("mixed_temperature_leak", f"{t}[batch=2]")]["verdict"] == "PASS"
        assert cells[("mixed_temperature_leak", f"{t}[batch=2,mixed T=0.3]")]["verdict"] == "BIAS"
    assert cells[("reference", "gof@1[batch=2,mixed T=0.3]")]["mde"] < 0.25
    finding = batch_finding("mixed_temperature_leak", report["cells"])
    assert finding["rejected_levels"] == ["2 mixed T=0.3"] and "only mixed calls reject" in finding["sentence"]
    raw = tomllib.loads(MIXED.read_text())
    raw["decoders"] = [{"name": "tree", "decoder": "tree_reference", "expect": "pass"}]
    code = main(["run", str(_write(tmp_path / "tree.toml", raw)), "--run-dir", str(tmp_path / "tree"), "--no-progress",
                 "--no-diagnosis"])
    assert code == 2 and "takes no row_temperatures keyword" in capsys.readouterr().err
