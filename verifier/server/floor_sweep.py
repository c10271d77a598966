"""The whole reported row behind a server's top-logprobs cap, rebuilt by ``logit_bias`` sweeps.

``mlx_lm server`` reports at most 11 top logprobs per position (``_validate("top_logprobs", max_val=11)``), so on
the shipped pair's 384-token vocabulary at T = 1 a one-token request shows about two thirds of the mass and the
known-target numeric floor (:mod:`verifier.server.floor`) can only bound the TV (0.33 on the committed audits).
Its reported values are ``logits - logsumexp(logits)`` taken *after* the logits processors, ``logit_bias`` among
them, and before the sampler (mlx_lm ``generate.py``: ``_process_and_sample``; docs/servers.md), so a request
that adds a bias ``B`` to every id of a set ``S`` reports, when ``S`` is the top set::

    r_x = l_x + B - LSE        (x in S; LSE the same for every x of the request)
    r_x - r_a = l_x - l_a      (any x, a in S: the bias and the normaliser cancel)

Sweep (:func:`sweep_groups`, :func:`sweep_request`)
    The anchor ``a`` is the server's own top-1 id at the prefix (from the floor's plain request); every other id
    of ``--target``'s vocabulary goes into groups of ``cap - 1``, and one one-token request per group biases
    ``{a} + group`` by :data:`SWEEP_BIAS` and asks for ``cap`` top logprobs: ``ceil((V - 1) / (cap - 1))``
    requests per position (39 for V = 384, cap = 11).  Each gives ``l_x - l_a`` for its group, so the sweep
    holds the server's whole temperature-1 law ``softmax(l)`` at the prefix and the floor is exact.
Checks (:func:`rebuild_row`)
    * An id of ``S`` missing from a biased reply's top set has ``l_x < l_y - B`` for a returned unbiased id ``y``:
      its prob is below ``e^-B`` times one in the row (``e^-40 = 4e-18``); it is set to 0 and counted.
    * Ids the sweep does not cover (a server vocabulary larger than ``--target``'s): the plain request's top row
      gives the server's probs ``exp(r_x)`` of its ids over the *whole* vocabulary, the sweep ``p_sw(x)`` over the
      swept ids, so ``1 - exp(r_x) / p_sw(x)`` (the largest over the row) is the mass outside the sweep; it is
      counted as disagreeing in full (``unseen``).
    * Consistency: the plain row against the sweep (``max |exp(r_x) - (1 - unseen) p_sw(x)|``).  Requests served
      from different contexts (a broken prompt cache: reports/audits/mlx-lm-server-0.32.2/FINDINGS.md) disagree;
      above :data:`CONSISTENCY_TOL` the sweep is not used and the floor falls back to the bounded plain row.

Precision: the reported values are float32 near ``B``, so each ``l_x - l_a`` carries ~``ulp(40) = 4e-6``; the
rebuilt probs are within ~1e-5 relative of the server's.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from verifier.server.floor_requests import top_rows

__all__ = ["sweep_groups", "sweep_request", "rebuild_row", "run_sweeps", "sweep_budget_note", "SWEEP_BIAS",
           "CONSISTENCY_TOL", "MAX_SWEEP_REQUESTS"]

SWEEP_BIAS = 40.0  # added to the logits of a sweep's ids: above any other id unless its prob is < e^-40 of theirs
CONSISTENCY_TOL = 1e-3  # largest |plain row prob - sweep prob| accepted (float32 rows agree to ~1e-6)
MAX_SWEEP_REQUESTS = 100_000  # sweeps of a whole floor; above it the floor stays the bounded plain rows (stated)


def sweep_budget_note(vocab_size: int, cap: int, positions: int) -> str:
    """Why a floor's sweep is not sent ("" when it fits :data:`MAX_SWEEP_REQUESTS`): ``positions`` x
    ``ceil((vocab_size - 1) / (cap - 1))`` one-token requests (39 per position at V = 384, cap 11; ~15,000 at
    V = 150,000).

    Examples
    --------
    >>> sweep_budget_note(384, 11, 8)
    ''
    >>> sweep_budget_note(150_000, 11, 8)[:40]
    '120,000 sweep requests (8 positions x 15'
    """
    per = math.ceil((int(vocab_size) - 1) / max(1, int(cap) - 1))
    total = per * int(positions)
    if total <= MAX_SWEEP_REQUESTS:
        return ""
    return (f"{total:,} sweep requests ({positions} positions x {per:,}) > {MAX_SWEEP_REQUESTS:,}; lower "
            "--floor-positions, or give --top-k <= the server's cap")


def sweep_groups(vocab_size: int, anchor: int, cap: int) -> list[list[int]]:
    """The ids of ``range(vocab_size)`` other than ``anchor``, in groups of ``cap - 1`` (ascending).

    Parameters
    ----------
    vocab_size : int
        ``--target``'s vocabulary size V.
    anchor : int
        The id every sweep request biases as well (the server's top-1 at the prefix).
    cap : int
        The server's top-logprobs cap (>= 2).

    Returns
    -------
    list of list of int
        ``ceil((V - 1) / (cap - 1))`` groups (V - 1 ids when ``anchor < V``, else V).

    Raises
    ------
    InvalidArgumentError
        ``cap`` below 2 (no room for the anchor and one other id).

    Examples
    --------
    >>> sweep_groups(7, anchor=2, cap=3)
    [[0, 1], [3, 4], [5, 6]]
    """
    from verifier.errors import invalid_argument

    if int(cap) < 2:
        raise invalid_argument("cap", cap, "an integer >= 2 (the anchor and at least one other id per request)")
    others = [t for t in range(int(vocab_size)) if t != int(anchor)]
    size = int(cap) - 1
    return [others[i:i + size] for i in range(0, len(others), size)]


def sweep_request(body: Mapping[str, Any], group: Sequence[int], anchor: int, cap: int) -> dict[str, Any]:
    """The floor's plain one-token request ``body`` with ``logit_bias`` on ``{anchor} + group`` and ``cap`` top
    logprobs (a new dict; mlx_lm takes ``logit_bias`` as ``{"id": bias}``)."""
    out = dict(body)
    out["logit_bias"] = {str(int(t)): SWEEP_BIAS for t in (int(anchor), *map(int, group))}
    out["top_logprobs"] = int(cap)
    return out


def rebuild_row(plain: Mapping[int, float], sweeps: Sequence[Mapping[int, float]], groups: Sequence[Sequence[int]],
                anchor: int) -> tuple[dict[int, float] | None, dict[str, Any]]:
    """The server's whole temperature-1 row at one prefix from its plain row and its sweep rows (module docstring).

    Parameters
    ----------
    plain : mapping token id -> natural-log prob
        The plain one-token request's top row (no bias; holds ``anchor``, its top-1).
    sweeps : sequence of mapping token id -> natural-log prob
        One top row per group of ``groups``, in the same order.
    groups : sequence of sequence of int
        :func:`sweep_groups`.
    anchor : int

    Returns
    -------
    row : dict token id -> natural-log prob, or None
        Every swept id and the anchor, normalised over them (prob 0 -> ``-inf``); None when the sweep is not
        consistent with the plain row (``info["why"]``).
    info : dict
        ``requests``, ``missing`` (ids set to 0: not in their biased top set), ``unseen`` (mass outside the
        swept ids), ``deviation`` (largest |plain - sweep| prob on the plain row's ids), ``why`` (when None).
    """
    rel: dict[int, float] = {int(anchor): 0.0}
    missing = 0
    for group, row in zip(groups, sweeps):
        row = {int(k): float(v) for k, v in (row or {}).items()}
        if int(anchor) not in row:
            return None, {"requests": len(groups), "why": f"the anchor id {anchor} is missing from a biased reply "
                          f"(ids {sorted(row)[:12]}): its bias did not reach the top set"}
        if not math.isfinite(row[int(anchor)]):  # every id's value is relative to it: -inf leaves none
            return None, {"requests": len(groups), "why": f"the anchor id {anchor} has logprob {row[int(anchor)]!r} in a "
                          f"biased reply (it was biased by +{SWEEP_BIAS:g}): no id's value relative to it is defined"}
        for t in group:
            if t in row:
                rel[int(t)] = row[t] - row[int(anchor)]
            else:
                rel[int(t)] = -math.inf
                missing += 1
    ids = np.fromiter(rel.keys(), dtype=np.int64, count=len(rel))
    logits = np.fromiter(rel.values(), dtype=np.float64, count=len(rel))
    lse = float(np.logaddexp.reduce(logits))
    logp = logits - lse
    swept = dict(zip(ids.tolist(), logp.tolist()))
    # mass outside the sweep from the plain row: exp(r_x) = (1 - unseen) p_sw(x) for the ids both hold
    both = [t for t in plain if t in swept]  # an id the sweep set to 0 but the plain row holds counts as disagreement
    ratios = [math.exp(float(plain[t]) - swept[t]) for t in both if math.isfinite(swept[t])]
    unseen = max(0.0, 1.0 - min(ratios)) if ratios else 0.0
    deviation = max((abs(math.exp(float(plain[t])) - (1.0 - unseen) * math.exp(swept[t])) for t in both), default=0.0)
    info = {"requests": len(groups), "missing": missing, "unseen": unseen, "deviation": deviation}
    if not both or not (deviation <= CONSISTENCY_TOL and unseen <= CONSISTENCY_TOL):  # NaN refused as well
        info["why"] = (f"the sweep disagrees with the plain row (largest prob difference {deviation:.3g}, mass outside "
                       f"the sweep {unseen:.3g}; tolerance {CONSISTENCY_TOL:g}): the requests did not see one law")
        return None, info
    return swept, info


def run_sweeps(settings, dialect, bodies: Sequence[Mapping[str, Any]], plain_rows: Sequence[Mapping[int, float] | None],
               vocab_size: int, *, journal=None, eos_token_id: int | None = None,
               labels: Sequence[str] | None = None) -> list[tuple[dict[int, float] | None, dict[str, Any]]]:
    """Sweep every position of the floor and rebuild its whole row (module docstring).

    Parameters
    ----------
    settings : ServerSettings
    dialect : Dialect
        One with ``bias_sweep`` and ``max_top_logprobs`` (the cap).
    bodies : sequence of dict
        The floor's plain one-token request per position (the sweep requests copy it).
    plain_rows : sequence of (mapping token id -> natural-log prob, or None)
        Their top rows.
    vocab_size : int
        ``--target``'s vocabulary size (the ids swept).
    journal : Journal or None
        Where sweep replies persist (and are read back from: a resumed floor resends nothing).
    eos_token_id : int or None
    labels : sequence of str, optional
        Names of the positions in errors.

    Returns
    -------
    list of (row or None, info)
        Per position, :func:`rebuild_row`'s result; ``(None, {"why": ...})`` for a position without a plain row.

    Raises
    ------
    ServerError, ServerUsageError, ServerReplyError
        As :func:`verifier.server.client.post_all` and :meth:`Dialect.parse`.
    """
    cap = int(dialect.max_top_logprobs)
    plan, jobs = [], []  # per position: (anchor, groups, first job index) or None
    for j, (body, plain) in enumerate(zip(bodies, plain_rows)):
        if not plain:
            plan.append(None)
            continue
        anchor = max(plain, key=lambda t: plain[t])
        groups = sweep_groups(vocab_size, anchor, cap)
        plan.append((anchor, groups, len(jobs)))
        for g, group in enumerate(groups):
            label = labels[j] if labels else f"position {j}"
            jobs.append((f"numeric floor sweep {g + 1}/{len(groups)} at {label}", sweep_request(body, group, anchor, cap)))
    rows = top_rows(settings, dialect, jobs, "known-target floor sweep", journal=journal, eos_token_id=eos_token_id)
    out = []
    for plain, entry in zip(plain_rows, plan):
        if entry is None:
            out.append((None, {"why": "no plain row to anchor the sweep"}))
            continue
        anchor, groups, first = entry
        out.append(rebuild_row(plain, [rows[first + g] for g in range(len(groups))], groups, anchor))
    return out
