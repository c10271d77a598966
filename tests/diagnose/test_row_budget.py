"""The automatic diagnosis reads the first rows of a sample set up to a budget of distinct rows (issue 27).

* :func:`verifier.diagnose.row_budget.rows_read` is the first time the distinct count reaches the budget (a stopping
  time of the row sequence: the ranking's Ville bound holds there), property-tested;
* the runner's diagnosis of a biased run (trigram3, full_p_fallback, n = 600, seed 20261129, the suite of
  tests/diagnose/test_auto_diagnosis_budget.py; at most 27 distinct rows of 3 tokens) with a budget of 8 distinct rows
  is the diagnosis of exactly those first rows (the same decision as :func:`diagnose_sample_set` on them), says how
  many rows it read, and is not reused by ``specverify diagnose RUN_DIR``, which reads every row -- and names
  full_p_fallback there;
* ``--diagnose-rows`` / ``diagnose --rows`` take an integer >= 1 or ``all``; anything else is a usage error naming
  the flag.
"""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verifier._diagnose_mode import distinct_rows, set_distinct_rows
from verifier.cli import main
from verifier.diagnose.row_budget import rows_read
from verifier.errors import InvalidArgumentError

from tests.diagnose.test_auto_diagnosis_budget import SUITE


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=60), st.integers(1, 30))
def test_rows_read_stops_where_the_distinct_count_reaches_the_budget(flat, budget):
    tokens = np.asarray(flat[: len(flat) // 2 * 2], dtype=np.int64).reshape(-1, 2)
    n = len(tokens)
    distinct = len({tuple(r) for r in tokens.tolist()})
    m = rows_read(tokens, budget)
    assert rows_read(tokens, None) == n
    if distinct <= budget:
        assert m == n
        return
    assert len({tuple(r) for r in tokens[:m].tolist()}) == budget  # the budget, exactly
    assert len({tuple(r) for r in tokens[:m - 1].tolist()}) == budget - 1  # row m - 1 is the one that reached it


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_a_bad_budget_is_refused_by_name(bad):
    with pytest.raises(InvalidArgumentError, match="max_distinct"):
        rows_read(np.zeros((4, 2), dtype=np.int64), bad)
    with pytest.raises(InvalidArgumentError, match="diagnose-rows"):
        set_distinct_rows(bad)


def test_the_automatic_diagnosis_reads_the_budgeted_rows_and_says_so(tmp_path, capsys):
    from verifier.diagnose.run_dir import load_tokens
    from verifier.diagnose.sample_set import diagnose_sample_set
    from verifier.pipeline import run_suite
    from verifier.runner.store import SampleStore
    from verifier.suite import load_suite

    path = tmp_path / "suite.toml"
    path.write_text(SUITE)
    out = tmp_path / "run"
    before = distinct_rows()
    set_distinct_rows(8)
    try:
        outcome = run_suite(load_suite(path), out, progress=False, log=lambda _m: None)
    finally:
        set_distinct_rows(before)
    assert outcome.exit_code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["decoders"][0]["verdict"] == "BIAS DETECTED"
    diag, = report["diagnosis"]["decoders"]
    entry, = diag["sets"]
    store = SampleStore(out)  # the rows on disk, and the cut the budget makes
    set_id = entry["set_id"]
    plan = next(p for p in _plans(out) if p.set_id == set_id)
    tokens, _, calls = load_tokens(store, plan, with_calls=True)
    m = rows_read(tokens, 8)
    assert len(tokens) == 600 and 8 < m < 600
    assert (entry["rows_diagnosed"], entry["rows"]) == (m, 600) and entry["n"] == m
    assert diag["row_budget"] == 8 and diag["rows_read"] == {set_id: {"rows_diagnosed": m, "rows": 600}}
    assert f"diagnosed on the first {m:,} of 600 rows" in diag["sentence"]
    assert "specverify diagnose RUN_DIR` reads every row" in diag["sentence"]
    # exactly the diagnosis of those first rows
    pair = _pair(out, plan)
    direct = diagnose_sample_set(pair.reference, pair.draft_reference, plan.prompt_ids, plan.sampling,
                                 plan.num_draft_tokens, tokens[:m], bias_detected=True, calls=calls[:m])
    assert entry["decision"]["status"] == direct["decision"]["status"]
    assert entry["decision"]["best"] == direct["decision"]["best"]
    assert entry["decision"]["log_lr"] == pytest.approx(direct["decision"]["log_lr"])
    # on demand every row is read: the stored, budgeted diagnosis is not reused for it
    capsys.readouterr()
    assert main(["diagnose", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "reused the diagnosis" not in text and "diagnosed on the first" not in text
    assert "full_p_fallback: consistent with full_p_fallback" in text
    full, = json.loads((out / "diagnosis.json").read_text())["decoders"]
    assert "rows_read" not in full and "rows_diagnosed" not in full["sets"][0] and full["sets"][0]["n"] == 600
    # the same budget asked for again: report.json's diagnosis is reused
    (out / "diagnosis.json").unlink()
    assert main(["diagnose", str(out), "--rows", "8", "--no-progress"]) == 0
    assert "reused the diagnosis stored in report.json" in capsys.readouterr().out


def _plans(run_dir):
    from verifier.runner.context import entry_prompt_ids
    from verifier.runner.models import load_pair
    from verifier.runner.plan import plan_sample_sets
    from verifier.runner.run import load_run_suite

    suite, _ = load_run_suite(run_dir)
    pairs = {d.models: load_pair(suite.models[d.models], suite.base_dir) for d in suite.decoders}
    return plan_sample_sets(suite, entry_prompt_ids(suite, pairs), {n: p.vocab_size for n, p in pairs.items()})


def _pair(run_dir, plan):
    from verifier.runner.models import load_pair
    from verifier.runner.run import load_run_suite

    suite, _ = load_run_suite(run_dir)
    return load_pair(suite.models[plan.pair], suite.base_dir)


@pytest.mark.parametrize("flag", [["run", "--diagnose-rows"], ["diagnose", "--rows"]])
@pytest.mark.parametrize("value", ["0", "-1", "many", "1.5"])
def test_the_row_flags_take_an_integer_or_all(flag, value, tmp_path, capsys):
    command, name = flag
    target = str(tmp_path / "suite.toml") if command == "run" else str(tmp_path)
    with pytest.raises(SystemExit) as stop:  # argparse's usage error
        main([command, target, name, value])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert name in err and "allowed: an integer >= 1" in err and "'all'" in err


def test_diagnose_rows_all_reads_every_row():
    from verifier.cli._diagnose_args import rows_arg

    assert rows_arg("all") is None and rows_arg("ALL") is None and rows_arg("25") == 25


PENALTY_SUITE = """
schema_version = 1
name = "penbudget"
seed = 20261129
[exact]
enabled = false
[models.bigram4]
target = "tabular:bigram4_eos"
draft = "tabular:bigram4_eos"
[prompts.repeated]
ids = [0, 1, 0, 1]
[sampling.pen]
temperature = 1.0
repetition_penalty = 1.5
presence_penalty = 0.5
frequency_penalty = 0.5
min_p = 0.3
[defaults]
models = "bigram4"
prompts = ["repeated"]
sampling = ["pen"]
num_draft_tokens = [2]
max_new_tokens = 6
samples = 1500
tests = ["gof", "joint"]
gof_positions = [1, 2, 3, 4, 5, 6]
joint_tokens = 4
[[decoders]]
name = "penalty_ignored_in_verification@penalties"
decoder = "penalty_ignored_in_verification"
expect = "detect"
[stats]
alpha = 1e-3
target_mde = 0.1
"""


def test_a_finding_outside_the_ranking_says_it_read_fewer_rows_too(tmp_path, capsys):
    """The penalty finding (exact laws on a tabular pair; the breaker's case: vLLM #18902's mechanism, bigram4,
    n = 1,500, seed 20261129) returns before the ranking: its cut is recorded and said as well, the one-line summary
    (``mechanism_line``: CLI, pytest plugin, engines matrix) carries it, and a forged diagnosis.json that hides it is
    recomputed, never reused as a diagnosis of every row."""
    from verifier.diagnose.glossary import mechanism_line

    path = tmp_path / "pen.toml"
    path.write_text(PENALTY_SUITE)
    out = tmp_path / "run"
    assert main(["run", str(path), "--run-dir", str(out), "--no-progress", "--diagnose-rows", "100"]) == 0
    diag, = json.loads((out / "report.json").read_text())["diagnosis"]["decoders"]
    assert diag["status"] == "penalty mechanism" and diag["row_budget"] == 100
    (cut,) = diag["rows_read"].values()
    assert cut["rows"] == 1500 and 100 <= cut["rows_diagnosed"] < 1500
    assert f"diagnosed on the first {cut['rows_diagnosed']:,} of 1,500 rows" in diag["sentence"]
    assert f"[diagnosed on the first {cut['rows_diagnosed']:,} of 1,500 rows" in mechanism_line(
        {**diag, "status": "consistent", "mechanism": [{"name": "x", "plain": "y", "reproduce": "z"}],
         "setting_law": {"named": ["x"]}})
    # a diagnosis.json written with the same budget, then edited to hide the cut: recomputed on every row
    assert main(["diagnose", str(out), "--rows", "100", "--recompute", "--no-progress"]) == 0
    stored = json.loads((out / "diagnosis.json").read_text())
    for forge in ({"row_budget": None}, {"row_budget": True}, {"rows_read": {}}, {"row_budget": 100.0}):
        item = {k: v for k, v in stored["decoders"][0].items() if k not in ("row_budget", "rows_read")}
        item.update({k: v for k, v in forge.items() if v is not None})
        (out / "diagnosis.json").write_text(json.dumps({**stored, "decoders": [item]}))
        capsys.readouterr()
        assert main(["diagnose", str(out), "--no-progress", "--out", str(tmp_path / "full.json")]) == 0
        assert "reused the diagnosis" not in capsys.readouterr().out, forge
