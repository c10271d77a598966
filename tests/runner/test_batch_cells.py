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

Mixed prompt lengths (``suites/batch_prompts.toml``): level 2 plain and level 2 with a filler row continuing a prompt of
another length in slot 0 of every call; ``prompt_length_leak`` (slot 0's prompt length for every row) is BIAS only at
the mixed-prompts level.
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


def _value(value) -> str:
    if isinstance(value, dict):  # an inline table
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def _write(path: Path, raw: dict) -> Path:
    """``raw`` (a parsed suite) as TOML: top-level scalars, its tables (``[models.tab]``), then ``[[decoders]]``."""
    lines = [f"{k} = {_value(v)}" for k, v in raw.items() if not isinstance(v, (dict, list))]
    for key, table in raw.items():
        if isinstance(table, dict):
            named = table.items() if key in ("models", "prompts", "sampling", "profiles") else [(None, table)]
            for name, entries in named:
                lines += [f"[{key}.{name}]" if name else f"[{key}]"] + [f"{k} = {_value(v)}" for k, v in entries.items()]
    for d in raw["decoders"]:
        lines += ["[[decoders]]"] + [f"{k} = {_value(v)}" for k, v in d.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("value, words", [
    ({"rows": [1, 2, 2]}, "distinct"), ({"rows": []}, "non-empty"), ({"rows": [0]}, "1..4096"),
    ({"rows": [True]}, "integers"), ({"rows": [4], "colour": 1}, "unknown key 'colour'"),
    ({"rows": [4], "mixed_temperature": 0}, "a finite number > 0"),
    ({"rows": [1], "mixed_temperature": 0.5}, "only with a rows level >= 2"),  # break-it: ran, option ignored, exit 0
    ({"rows": [4], "mixed_prompt_lengths": [3]}, "list of distinct prompt names"),
    ({"rows": [4], "mixed_prompt_lengths": []}, "non-empty list"), ({"rows": [4], "mixed_prompt_lengths": "zero"}, "true"),
    ({"rows": [1], "mixed_prompt_lengths": True}, "only with a rows level >= 2"),
    ({"rows": [4], "mixed_prompt_lengths": ["nope"]}, "names defined under [prompts]"), ([1, 2], "a table")])
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


PROMPTS = Path(__file__).parent / "suites" / "batch_prompts.toml"


def test_mixed_prompt_levels_plan_their_fillers_and_combine_with_mixed_temperature():
    """``mixed_prompt_lengths = true`` takes every suite prompt of another length as a filler; with
    ``mixed_temperature`` each factor makes its own levels; a set left without a filler of another length is refused
    when the suite is planned, naming the key and the lengths."""
    from verifier.runner.batch import row_prompts_of

    raw = tomllib.loads(PROMPTS.read_text())
    raw["prompts"]["three"] = {"ids": [0, 1, 2]}
    raw["prompts"]["uno"] = {"ids": [3]}  # the audited prompt's length: never a filler
    raw["defaults"]["batch_composition"] = {"rows": [1, 4], "mixed_temperature": 0.5, "mixed_prompt_lengths": True}
    ids = {("tab", n): tuple(p["ids"]) for n, p in raw["prompts"].items()}
    plans = [p for p in plan_sample_sets(parse_suite(raw), ids) if p.decoder.name == "reference"]
    assert [p.level_name for p in plans] == ["1", "4", "4 mixed T=0.5", "4 mixed prompts"]
    mixed = plans[-1]
    assert mixed.filler_prompt_names == ("two", "three") and mixed.samples == 200 and mixed.mixed
    assert row_prompts_of(mixed) == [[2, 0], [1], [0, 1, 2], [1]]
    assert len({p.key for p in plans}) == 4 and mixed.describe()["filler_prompts"] == ["two", "three"]
    raw["defaults"]["batch_composition"] = {"rows": [2], "mixed_prompt_lengths": ["uno"]}
    with pytest.raises(ConfigError, match=r"mixed_prompt_lengths=\['uno'\] leaves no filler prompt of another length"):
        plan_sample_sets(parse_suite(raw), ids)


def test_all_prompts_skips_a_prompt_the_pair_cannot_take_and_a_listed_one_must_load(tmp_path):
    """``mixed_prompt_lengths = true`` in a suite that also holds a text prompt (suites/ci.toml's `def`) on a tabular
    pair: the text prompt is no filler this pair can take, so it is left out (it used to refuse the whole suite:
    "needs a tokenizer"); listed by name it is still refused (exit 2)."""
    from verifier.runner.context import SuiteContext
    from verifier.suite.schema import load_suite

    raw = tomllib.loads(PROMPTS.read_text())
    raw["prompts"]["txt"] = {"text": "def "}
    raw["decoders"] = raw["decoders"][:1]
    ctx = SuiteContext(load_suite(_write(tmp_path / "true.toml", raw)))
    mixed = [p for p in ctx.plans if p.mixed]
    assert [p.filler_prompt_names for p in mixed] == [("two",)]
    raw["defaults"]["batch_composition"] = {"rows": [2], "mixed_prompt_lengths": ["txt"]}
    with pytest.raises(ConfigError, match="prompts.txt.text='def ' needs a tokenizer"):
        SuiteContext(load_suite(_write(tmp_path / "listed.toml", raw)))


def test_diagnose_one_decoder_beside_a_mixed_prompts_entry_on_another_pair(tmp_path, capsys):
    """`specverify diagnose RUN` loads only the diagnosed decoders' pairs; the others' prompts were placeholders of one
    length, so a mixed-prompts entry on a pair not loaded (suites/ci.toml's reference@batch-prompts beside a trigram3
    mutant) was "left without a filler prompt of another length": exit 2, no diagnosis."""
    raw = tomllib.loads(PROMPTS.read_text())
    raw["models"]["tri"] = {"target": "tabular:trigram3", "draft": "tabular:trigram3"}
    raw["prompts"]["ctx"] = {"ids": [0, 1]}
    raw["defaults"]["batch_composition"] = {"rows": [2], "mixed_prompt_lengths": ["two"]}
    raw["decoders"] = [{"name": "ref_mixed", "decoder": "reference", "expect": "pass", "models": "tab"},
                       {"name": "fpf", "decoder": "full_p_fallback", "expect": "detect", "models": "tri",
                        "prompts": ["ctx"], "batch_composition": {"rows": [1]}, "samples": 400, "chunk_size": 400}]
    run_dir = tmp_path / "run"
    code = main(["run", str(_write(tmp_path / "two_pairs.toml", raw)), "--run-dir", str(run_dir), "--no-progress",
                 "--no-diagnosis", "--threads", "1"])
    assert code == EXIT_OK, capsys.readouterr()
    capsys.readouterr()
    assert main(["diagnose", str(run_dir), "--decoder", "fpf", "--no-progress"]) == 0, capsys.readouterr().err
    assert "full_p_fallback" in capsys.readouterr().out


def test_mixed_prompt_levels_audit_the_odd_slots(tmp_path, capsys):
    """``suites/batch_prompts.toml`` (seed 37, 200 rows per level, alpha 1e-3, 4 cells per decoder): the reference
    passes at level 2 plain and mixed prompts (slot 0 continues [2, 0], slot 1 audited continues [1], one padded call);
    ``prompt_length_leak`` passes plain and is BIAS mixed (its audited rows continue [1, 0]: first-token TV 0.4 exact,
    gof@1's MDE at n = 200 is below 0.25, asserted), and the finding names the mixed-prompts level and where to look.
    A decoder whose generate takes no row_prompts is refused (exit 2), naming the keyword."""
    run_dir = tmp_path / "run"
    code = main(["run", str(PROMPTS), "--run-dir", str(run_dir), "--no-progress", "--threads", "1"])
    report, cells = _cells(run_dir)
    assert code == EXIT_OK, report["summary"]
    for t in ("gof@1", "joint@1..2"):
        assert cells[("reference", f"{t}[batch=2]")]["verdict"] == "PASS"
        assert cells[("reference", f"{t}[batch=2,mixed prompts]")]["verdict"] == "PASS"
        assert cells[("prompt_length_leak", f"{t}[batch=2]")]["verdict"] == "PASS"
        assert cells[("prompt_length_leak", f"{t}[batch=2,mixed prompts]")]["verdict"] == "BIAS"
    assert cells[("reference", "gof@1[batch=2,mixed prompts]")]["mde"] < 0.25
    assert cells[("reference", "gof@1[batch=2,mixed prompts]")]["extra"]["filler_prompts"] == ["two"]
    finding = batch_finding("prompt_length_leak", report["cells"])
    assert finding["rejected_levels"] == ["2 mixed prompts"] and finding["clean_levels"] == ["2"]
    assert "rows with prompts of other lengths" in finding["sentence"] and "position ids" in finding["sentence"]
    diagnosis = {d["decoder"]: d for d in report["diagnosis"]["decoders"]}["prompt_length_leak"]
    assert diagnosis["prompt_context"]["named"] == "slot 0's prompt length"
    assert "the audited rows continue slot 0's prompt length ([1, 0] for prompt [1])" in diagnosis["sentence"]
    # the per-row ranking (at the own prompt) does not apply: no mechanism is named (issue 26: never a wrong name)
    assert diagnosis["status"] == "prompt context" and "mechanism" not in diagnosis
    shard = np.load(next((run_dir / "samples").glob("*mixedprompts*/chunk-000000.npz")), allow_pickle=True)
    assert json.loads(str(shard["meta"]))["filler_prompts"] == ["two"]
    raw = tomllib.loads(PROMPTS.read_text())
    raw["decoders"] = [{"name": "tree", "decoder": "tree_reference", "expect": "pass"}]
    _write(tmp_path / "tree.toml", raw)
    code = main(["run", str(tmp_path / "tree.toml"), "--run-dir", str(tmp_path / "tree"), "--no-progress",
                 "--no-diagnosis"])
    assert code == 2 and "takes no row_prompts keyword" in capsys.readouterr().err


def test_the_prompt_context_check_names_nothing_on_rows_of_their_own_prompt(tmp_path):
    """``verifier.diagnose.batchprompts`` (alpha 1e-3, Markov bound over 2 candidates): on the reference's 200 audited
    rows of ``suites/batch_prompts.toml`` (they continue their own prompt [1]) no candidate context is named; on
    ``prompt_length_leak``'s (they continue [1, 0]) slot 0's prompt length is, by a log LR far past log(2 / alpha)."""
    from verifier.diagnose.batchprompts import prompt_context_finding
    from verifier.diagnose.run_dir import load_tokens
    from verifier.runner.models import load_pair
    from verifier.runner.store import SampleStore
    from verifier.suite.schema import load_suite

    run_dir = tmp_path / "run"
    assert main(["run", str(PROMPTS), "--run-dir", str(run_dir), "--no-progress", "--no-diagnosis", "--threads", "1"]) == 0
    suite = load_suite(PROMPTS)
    pairs = {"tab": load_pair(suite.models["tab"])}
    plans = plan_sample_sets(suite, {("tab", "one"): (1,), ("tab", "two"): (2, 0)})
    store = SampleStore(run_dir)
    found = {name: prompt_context_finding([p for p in plans if p.decoder.name == name], pairs, ["2 mixed prompts"],
                                          lambda p: load_tokens(store, p)[0]) for name in ("reference", "prompt_length_leak")}
    assert found["reference"]["named"] is None and found["reference"]["rows"] == 200
    assert max(found["reference"]["log_lr"].values()) < found["reference"]["threshold"]
    assert found["prompt_length_leak"]["named"] == "slot 0's prompt length"
    assert found["prompt_length_leak"]["log_lr"]["slot 0's prompt length"] > 10 * found["prompt_length_leak"]["threshold"]
