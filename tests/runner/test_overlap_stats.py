"""Statistics computed beside other work (issue 27, "every audit as fast as the engine allows"): the PIT cell in a
thread beside a set's other cells, the TV cells' sample-independent values warmed while an engine worker samples.
Neither may change a value: each test compares against the same cells computed the plain way."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from verifier.runner import analysis, cells, pitscore
from verifier.runner.context import SuiteContext
from verifier.suite.schema import load_suite

SUITE = """
schema_version = 1
name = "overlap"
seed = 5
[exact]
enabled = false
[models.shipped]
target = "shipped:target"
draft = "shipped:draft"
[prompts.p]
ids = [272, 70, 221]
[sampling.t1]
temperature = 1.0
[defaults]
max_new_tokens = 3
samples = 1500
chunk_size = 500
tests = ["gof", "joint", "surprisal", "pit"]
gof_positions = [1, 2]
joint_tokens = 2
[[decoders]]
name = "reference"
decoder = "reference"
num_draft_tokens = [2]
expect = "pass"
[stats]
alpha = 1e-3
correction = "gate"
target_mde = 0.02
power = 0.99
"""


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> SuiteContext:
    path = Path(tmp_path_factory.mktemp("overlap")) / "suite.toml"
    path.write_text(SUITE, encoding="utf-8")
    return SuiteContext(load_suite(path))


def _rows(ctx: SuiteContext, plan, seed: int = 0) -> np.ndarray:
    """Rows drawn from the shipped target itself (prompt, T = 1): the data a correct decoder gives."""
    ref = ctx.pairs[plan.pair].reference
    rng = np.random.default_rng(seed)
    rows = np.zeros((plan.samples, plan.max_new_tokens), np.int64)
    for t in range(plan.max_new_tokens):
        probs = ref.next_probs(np.concatenate([np.tile(plan.prompt_ids, (len(rows), 1)), rows[:, :t]], axis=1),
                               plan.sampling)
        cdf = probs.cumsum(axis=1)
        rows[:, t] = np.minimum((cdf < rng.random((len(rows), 1)) * cdf[:, -1:]).sum(axis=1), probs.shape[1] - 1)
    eos = ctx.pairs[plan.pair].eos_token_id
    ended = np.cumsum(rows == eos, axis=1) - (rows == eos) > 0  # after the row's first EOS: padding
    rows[ended] = -1
    return rows


def _same(a: analysis.CellResult, b: analysis.CellResult) -> None:
    assert (a.id, a.test, a.n, a.statistic, a.pvalue, a.mde, a.n_needed, a.support_violation) == \
           (b.id, b.test, b.n, b.statistic, b.pvalue, b.mde, b.n_needed, b.support_violation)


def test_pit_cell_in_its_thread_equals_the_cell_computed_alone(ctx, monkeypatch):
    """The PIT cell of 1,500 rows runs in the "pit-cell" thread beside the gof / joint / surprisal cells and equals
    the cell computed in place (same statistic and p-value to the bit: its own generator, same inputs)."""
    plan = ctx.plans[0]
    tokens = _rows(ctx, plan)
    level = cells.cell_levels(ctx.suite, ctx.plans)
    threads: list[str] = []
    real = pitscore.pit_values

    def spy(*a, **k):
        threads.append(threading.current_thread().name)
        return real(*a, **k)
    monkeypatch.setattr(pitscore, "pit_values", spy)
    together = cells.set_cells(ctx, plan, tokens, level)
    assert threads and threads[-1].startswith("pit-cell")
    monkeypatch.setattr(cells, "PIT_THREAD_MIN_ROWS", 10**9)  # computed in place, after the other cells
    alone = cells.set_cells(ctx, plan, tokens, level)
    assert threads[-1] == threading.current_thread().name
    assert [c.id for c in together] == [c.id for c in alone] and together[-1].id.endswith("/pit")
    for a, b in zip(together, alone):
        _same(a, b)


def test_pit_cell_error_is_raised_by_the_set(ctx, monkeypatch):
    """An error of the PIT cell's thread reaches the caller of set_cells, as the cell computed in place raised it."""
    plan = ctx.plans[0]
    tokens = _rows(ctx, plan, seed=1)
    tokens[3, 0] = 10**6  # an id outside the vocabulary: pit_values refuses it

    monkeypatch.setattr(cells, "PIT_THREAD_MIN_ROWS", 1)
    with pytest.raises(Exception) as raised:
        cells._pit_started(ctx.suite, plan, ctx.pairs[plan.pair], tokens, 1e-3, 0.99, {}).result()
    assert "token_ids" in str(raised.value)


def test_warmed_tv_cells_read_their_memos_and_give_the_cold_values(ctx):
    """warm_statistics (the thread an engine audit starts at its first chunk) computes the TV cells' MDE and n needed
    at the planned n: the cells then find n_needed memoised (hits, no new entry) and equal the cells computed cold."""
    plan = ctx.plans[0]
    tokens = _rows(ctx, plan, seed=2)
    level = cells.cell_levels(ctx.suite, ctx.plans)
    analysis._n_needed.cache_clear()
    cold = cells.set_cells(ctx, plan, tokens, level)
    assert any(c.n_needed for c in cold), "target_mde 0.02 at n = 1,500: the TV cells need more rows"
    analysis._n_needed.cache_clear()
    cells.warm_statistics(ctx, [plan]).join()
    warmed = analysis._n_needed.cache_info()
    assert warmed.currsize == sum(1 for c in cold if c.n_needed)
    again = cells.set_cells(ctx, plan, tokens, level)
    info = analysis._n_needed.cache_info()
    assert info.currsize == warmed.currsize and info.hits - warmed.hits == warmed.currsize
    for a, b in zip(again, cold):
        _same(a, b)


def test_warming_is_joined_before_the_statistics(ctx, monkeypatch):
    """The statistics stage waits for a warming thread still running (never two threads filling one memo)."""
    order: list[str] = []
    gate = threading.Event()

    def slow(*_a, **_k):
        gate.wait(5)
        order.append("warm")
    monkeypatch.setattr(cells, "warm_tv_cells", slow)
    ctx.warming.append(cells.warm_statistics(ctx, ctx.plans))
    threading.Timer(0.2, gate.set).start()
    for thread in ctx.warming:  # what _statistics does first
        thread.join()
    order.append("statistics")
    ctx.warming.clear()
    assert order == ["warm", "statistics"]
