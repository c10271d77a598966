"""Shared check of an engine's rows under a stop rule (issue 29, kind 5), for the engine tests that send one."""

from __future__ import annotations

import numpy as np


def rows_ended_at_stops(rows: np.ndarray, stops: tuple[int, ...], max_tokens: int) -> int:
    """Assert every row of ``rows`` (n, width) ends right after its first stop token, is no longer than ``max_tokens``
    and holds -1 only after its end; return how many rows ended at a stop token."""
    assert (rows[:, max_tokens:] == -1).all()  # nothing past max_tokens
    ended = 0
    for row in rows.tolist():
        toks = [t for t in row if t >= 0]
        assert row[:len(toks)] == toks  # -1 only after the row's end
        hit = [i for i, t in enumerate(toks) if t in stops]
        if hit:
            assert len(toks) == hit[0] + 1, row  # nothing after the first stop token
            ended += 1
    return ended


def rows_are_the_uncut_rows_stopped(rows: np.ndarray, uncut: np.ndarray, ends: np.ndarray, max_tokens: int) -> int:
    """Assert each row of ``rows`` (the engine under a stop rule) is the same seed's row of ``uncut`` (the engine
    without one) up to its end, and that the stop-rule cell's check (:func:`verifier.runner.stop.stop_violations`)
    finds nothing in ``rows``; return how many ``uncut`` rows it flags -- what a stop-ignoring engine would return."""
    from verifier.runner.stop import stop_violations

    for cut, whole in zip(rows.tolist(), uncut.tolist()):
        n = sum(t >= 0 for t in cut)
        assert cut[:n] == whole[:n]
    assert not stop_violations(rows, ends, max_tokens)[0].any()
    return int(stop_violations(uncut, ends, max_tokens)[0].sum())
