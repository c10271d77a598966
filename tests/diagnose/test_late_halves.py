"""``recovered_one_late``'s forward rows split between this process and a forked child (issue 27).

:func:`verifier.diagnose.late._in_halves` runs the second half of a call's batches in a child forked from the caller
(the OpenVINO 5,000-row BIAS folder's diagnosis reads 405,120 (prefix, latent token) pairs twice: the ranking's columns
and the fit check's predictive laws).  Each batch is the same forward pass wherever it runs, and the two halves are
combined the same way with or without a child, so the columns and the predictive laws must be equal bit for bit to
the ones computed in this process alone.  Shipped pair, prompt "def ", k = 2, 3 tokens, T = 1, 12 rows of the
``recovered_one_late`` mutant (seed 1714); batches shrunk to 64 pairs so that every call splits.
"""

import os

import numpy as np
import pytest

from verifier import _beside
from verifier.diagnose import late
from verifier.diagnose.family import hypothesis
from verifier.diagnose.likelihood import log_likelihood

from tests.diagnose._helpers import shipped_seqs

pytestmark = pytest.mark.skipif(not _beside.can_fork(), reason="the child is forked (Linux)")
K, TOKENS = 2, 3
NAMES = ("recovered_one_late", "shared_uniform+recovered_one_late")


def _seqs():
    return shipped_seqs("recovered_one_late", K, 12, TOKENS, 1714)


def _likelihoods_and_laws(seqs):
    out = {}
    for name in NAMES:
        pred = np.full(seqs.p.shape, np.nan)
        ll, cond = log_likelihood(hypothesis(name), seqs, K, per_position=True, predictive=pred)
        out[name] = (ll, cond, pred)
    return out


def test_the_child_computes_the_rows_this_process_would(monkeypatch):
    monkeypatch.setattr(late, "LATE_BATCH_ENTRIES", 64 * 384)  # 64 pairs a batch: every call has >= 4 batches
    forks = []
    real_halves = late._in_halves

    def counted(seqs, uniq, key, draft, consume):
        if len(late._batch_starts(key)) >= late.SPLIT_MIN_BATCHES:
            forks.append(os.getpid())
        return real_halves(seqs, uniq, key, draft, consume)

    monkeypatch.setattr(late, "_in_halves", counted)
    split = _likelihoods_and_laws(_seqs())
    assert forks, "no call was split"
    monkeypatch.setattr(_beside, "can_fork", lambda: False)
    alone = _likelihoods_and_laws(_seqs())
    for name in NAMES:
        for got, want in zip(split[name], alone[name]):
            assert np.array_equal(got, want, equal_nan=True), name
        assert np.isfinite(split[name][0]).all(), name


def test_a_failure_in_this_half_kills_the_child(monkeypatch):
    monkeypatch.setattr(late, "LATE_BATCH_ENTRIES", 64 * 384)
    children = []
    real_init = _beside.Forked.__init__

    def remember(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        children.append(self._pid)

    monkeypatch.setattr(_beside.Forked, "__init__", remember)
    seqs = _seqs()
    real_after = late._after
    parent = os.getpid()

    def fails_here(*args):
        if os.getpid() == parent:
            raise KeyboardInterrupt
        return real_after(*args)

    monkeypatch.setattr(late, "_after", fails_here)
    with pytest.raises(KeyboardInterrupt):
        log_likelihood(hypothesis("recovered_one_late"), seqs, K)
    assert children
    for pid in children:
        with pytest.raises(ChildProcessError):  # killed and reaped: no child left computing, no zombie
            os.waitpid(pid, os.WNOHANG)


def test_a_fork_that_fails_leaves_both_halves_here(monkeypatch):
    monkeypatch.setattr(late, "LATE_BATCH_ENTRIES", 64 * 384)
    want = _likelihoods_and_laws(_seqs())

    def no_process():
        raise BlockingIOError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(os, "fork", no_process)
    got = _likelihoods_and_laws(_seqs())
    for name in NAMES:
        for a, b in zip(got[name], want[name]):
            assert np.array_equal(a, b, equal_nan=True), name


def test_a_lost_child_leaves_its_half_here(monkeypatch):
    """Every child killed as soon as it is forked (as by the out-of-memory killer): the same values, computed here."""
    import signal

    monkeypatch.setattr(late, "LATE_BATCH_ENTRIES", 64 * 384)
    want = _likelihoods_and_laws(_seqs())
    real_init = _beside.Forked.__init__

    def killed(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        os.kill(self._pid, signal.SIGKILL)

    monkeypatch.setattr(_beside.Forked, "__init__", killed)
    got = _likelihoods_and_laws(_seqs())
    for name in NAMES:
        for a, b in zip(got[name], want[name]):
            assert np.array_equal(a, b, equal_nan=True), name
