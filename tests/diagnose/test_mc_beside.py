"""The stale-KV Monte Carlo likelihood runs beside the other hypotheses of a ranking, with the same values (issue 27).

On the shipped pair at T = 1, k = 3 the exact stale-cache law is too large (vocab 384), so ``kv_not_rolled_back`` is
scored by :func:`verifier.diagnose.latent_mc.kv_stale_mc_log_likelihood`; :func:`verifier.diagnose.rank.rank_mechanisms`
starts it beside the other hypotheses (:func:`verifier.diagnose.rank._mc_beside`: a forked child on Linux, a thread
elsewhere), reads it after them, and must give the row log-likelihoods the call gives alone, bit for bit (its generator
is seeded, its oracles are stateless).  40 rows drawn by the reference decoder, seed 20261206.
"""

import numpy as np

from verifier.diagnose import rank
from verifier.diagnose.family import hypothesis
from verifier.diagnose.likelihood import log_likelihood

from tests.diagnose._helpers import shipped_seqs


def _seqs():
    return shipped_seqs("reference", 3, 40, 4, 20261206)


def test_the_monte_carlo_beside_gives_the_values_computed_alone(monkeypatch):
    seqs = _seqs()
    started = []
    real = rank._mc_beside
    monkeypatch.setattr(rank, "_mc_beside", lambda *a: started.append(real(*a)) or started[-1])
    ranking = rank.rank_mechanisms(seqs, 3, mechanisms=["canonical", "kv_not_rolled_back", "greedy_draft"])
    assert started and started[0] is not None  # it did run beside
    alone = log_likelihood(hypothesis("kv_not_rolled_back"), seqs, 3)
    assert np.array_equal(ranking.row_ll["kv_not_rolled_back"], alone)
    assert np.isfinite(alone).all()


def test_a_failing_ranking_stops_the_monte_carlo_before_it_raises(monkeypatch):
    """A hypothesis that raises (or Ctrl-C) while the Monte Carlo runs beside: the ranking cancels it before the error
    propagates -- the child is killed and reaped (no process left computing, no zombie), or the thread has left torch
    (a daemon thread there aborted the interpreter at exit, "terminate called without an active exception", exit 134,
    not 130)."""
    import os
    import threading

    seqs = _seqs()
    real, real_beside = rank.log_likelihood, rank._mc_beside
    started = []

    def failing(mechanism, *args, **kwargs):
        if mechanism.name == "greedy_draft":
            raise KeyboardInterrupt
        return real(mechanism, *args, **kwargs)

    monkeypatch.setattr(rank, "log_likelihood", failing)
    monkeypatch.setattr(rank, "_mc_beside", lambda *a: started.append(real_beside(*a)) or started[-1])
    try:
        rank.rank_mechanisms(seqs, 3, mechanisms=["kv_not_rolled_back", "greedy_draft"])
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the ranking swallowed the interrupt")
    assert started and started[0] is not None
    pid = getattr(started[0], "_pid", None)
    if pid is not None:  # a forked child: killed and reaped
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        else:
            raise AssertionError(f"the Monte Carlo's child {pid} was not reaped")
    assert not [t for t in threading.enumerate() if t.name == "kv-stale-mc" and t.is_alive()]


def test_a_lost_child_is_computed_here_with_the_same_values(monkeypatch):
    """The Monte Carlo's child killed (as by the out-of-memory killer): the ranking computes it in turn, the same values,
    instead of failing the diagnosis (a breaker's ``kill -9`` of the child had ended ``specverify diagnose`` with a
    traceback, exit 1)."""
    import os
    import signal

    seqs = _seqs()
    real = rank._mc_beside

    def killed(*args):
        job = real(*args)
        if hasattr(job, "_pid"):
            os.kill(job._pid, signal.SIGKILL)
        return job

    monkeypatch.setattr(rank, "_mc_beside", killed)
    ranking = rank.rank_mechanisms(seqs, 3, mechanisms=["canonical", "kv_not_rolled_back"])
    alone = log_likelihood(hypothesis("kv_not_rolled_back"), seqs, 3)
    assert np.array_equal(ranking.row_ll["kv_not_rolled_back"], alone)
