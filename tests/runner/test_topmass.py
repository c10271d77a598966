"""The pooled expected laws keep the target's top outcomes by a data-blind total order (issue 17)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verifier.exact.tabular import TabularLM
from verifier.runner import expected, memory
from verifier.runner.models import ReferenceModel
from verifier.runner.topmass import TopMass, top_by_mass
from verifier.sampling import SamplingConfig

V = 16


def _tied_target(seed: int) -> ReferenceModel:
    """A bigram table whose probs take few values (weights 1..3): many equal masses."""
    rng = np.random.default_rng(seed)
    table = {}
    for a in range(V):
        w = rng.integers(1, 4, size=V)
        table[(a,)] = [Fraction(int(x), int(w.sum())) for x in w]
    return ReferenceModel(TabularLM(table, vocab_size=V, context_len=1), V, None)


def _brute_top(keys, mass, cap):
    order = sorted(range(len(keys)), key=lambda i: (-mass[i], keys[i]))[:cap]
    return sorted(keys[i] for i in order)


@pytest.mark.parametrize("seed", range(6))
def test_top_by_mass_is_mass_descending_then_key_ascending(seed):
    rng = np.random.default_rng(seed)
    keys = rng.permutation(500).astype(np.int64)
    mass = rng.integers(1, 6, size=500) / 7.0  # heavy ties
    for cap in (1, 37, 250, 499, 500, 600):
        kept = keys[top_by_mass(keys, mass, cap)]
        assert sorted(kept.tolist()) == _brute_top(keys.tolist(), mass.tolist(), cap)


@pytest.mark.parametrize("block", [1, 3, 7, 40])
def test_streamed_blocks_keep_the_same_entries_and_drop_the_rest(block):
    """Any split of the stream into blocks gives the one-shot selection and the exact dropped mass."""
    rng = np.random.default_rng(11)
    grid = rng.integers(0, 5, size=(40, 30)) / 9.0  # zeros (never offered) and ties
    top = TopMass(100)
    for r0 in range(0, 40, block):
        top.offer_block(grid[r0:r0 + block], r0 * 30, 30, exclude_col=4)
    keys, mass, dropped = top.result()
    offered = grid.copy()
    offered[:, 4] = 0
    r, x = np.nonzero(offered)
    assert keys.tolist() == _brute_top((r * 30 + x).tolist(), offered[r, x].tolist(), 100)
    assert np.all(np.diff(keys) > 0)
    assert dropped == pytest.approx(offered.sum() - mass.sum(), abs=1e-12) and dropped > 0
    assert top.num_dropped == len(r) - 100


def test_pooled_joint_law_does_not_depend_on_the_memory_budget(monkeypatch):
    """Regression (issue 17): the kept joint outcomes -- hence the law, the pooled "other" category
    and the p-values -- were chosen by an argpartition over each batch, so which of equal masses was
    kept changed with the batch size, i.e. with the memory available (105 of 120 tied cases differed
    before).  Now they are the top ``cap`` by (mass descending, key ascending) at any budget."""
    ref = _tied_target(0)
    monkeypatch.setattr(expected, "MAX_JOINT_CATEGORIES", 20)
    monkeypatch.setattr(memory, "MIN_WORK_BYTES", 1)
    kept = []
    for work in (V * 32, V * 32 * 3, 2**29):  # 1 prefix per batch, 3, all
        monkeypatch.setattr(memory, "MAX_WORK_BYTES", work)
        laws = expected.position_laws(ref, (0,), SamplingConfig(), 2, joint_tokens=2)
        kept.append((laws.joint_keys.tolist(), laws.joint.tolist()))
    assert kept[0] == kept[1] == kept[2]
    # the rule itself: outcome (a, b) has key V + a * V + b (every first token is a kept prefix)
    p1 = ref.next_probs(np.array([[0]]), SamplingConfig())[0]
    p2 = ref.next_probs(np.arange(V)[:, None], SamplingConfig())
    mass = (p1[:, None] * p2).ravel()
    keys = (V + np.arange(V * V)).tolist()
    assert kept[0][0] == _brute_top(keys, mass.tolist(), 20)
    assert kept[0][1][-1] == pytest.approx(1 - sum(kept[0][1][:-1]), abs=1e-12)  # "other" holds the rest
