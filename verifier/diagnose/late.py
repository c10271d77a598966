"""``recovered_one_late``'s recovered laws: the models after each latent rejected draft token, at the emitted token.

Under ``recovered_one_late`` (:mod:`verifier.exact.field_rules`) the recovered token after a rejection at round
position j is drawn from the rows *after* the rejected draft token d: ``residual(p(. | x_<t, d), q(. | x_<t, d))``
before the round's last draft position, the bonus row ``p(. | x_<t, d)`` at it.  The likelihood's term at emitted
position t is ``sum_d w(d) law_d(x_t)`` with ``w = propose (1 - acceptance)`` the latent rejected draft's weight, so
it needs one target (and draft) forward row per distinct prefix ``x_<t`` and latent d -- but only at the emitted
token ``x_t`` and only for the d of nonzero weight:

* :func:`late_columns` gives ``law_d(x_t)`` per row and d, (rows, vocab) per law, computed for the (row, d) a
  hypothesis needs and memoised on ``SequenceProbs.memo`` for the hypotheses that share them (``recovered_one_late``
  and its 13 pairs / ``@prefill`` variants); never a (rows, vocab, vocab) tensor;
* :func:`late_laws` gives the mixtures ``sum_d w(d) law_d(.)`` themselves (the predictive law of a fit check);
* :func:`next_rows` is the dense (rows, vocab, vocab) reference both replace (tests);
* :func:`late_recover_cost` counts what a likelihood may need, for the ranking's budget (:mod:`verifier.diagnose.rank`).

The rows come from the same oracles (``SequenceProbs.target_after`` / ``draft_after``).  Where an oracle has a KV
cache (``ProbsAfter.extend``: a Hugging Face causal LM; issue 27) each distinct prefix ``prompt, x_<t`` runs once and
every latent d is a one-token step over its keys and values (:meth:`verifier.runner.models.ReferenceModel.extend_probs`):
~3x less forward CPU than whole contexts on the shipped pair, for probs that differ from the whole-context ones by the
float32 rounding of the model's logits (log probs by up to ~2e-5; a row's log-likelihood by <= 5.3e-5 nats,
reports/benchmarks.md section 29; tolerances in tests/diagnose/test_late_columns.py).  Elsewhere (a tabular model, a
plain oracle) each row is a whole context, in batches that :meth:`verifier.runner.models.ReferenceModel.next_probs`
runs as it ran them for the dense reference (never a pass of fewer than
:data:`~verifier.runner.models.MIN_EXTEND_ROWS` rows, whose CPU kernels round differently).  :func:`next_rows`
always runs whole contexts.

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from verifier.diagnose.mechanisms import _residual
from verifier.diagnose.rows import sequence_ends
from verifier.errors import invalid_argument

__all__ = ["LateCost", "late_columns", "late_laws", "next_rows", "late_recover_cost"]

LATE_BATCH_ENTRIES = 4_000_000  # float64 entries of one batch of forward rows (pairs x vocab, per model: 32 MB)
SPLIT_MIN_BATCHES = 4  # a call with this many batches or more runs its second half in a forked child (_in_halves)


class LateCost(NamedTuple):
    """What a ``recovered_one_late`` likelihood of a row set may need (an upper bound: every latent token counted).

    Attributes
    ----------
    rows : int
        Forward rows: per emitted position, one target and one draft row per distinct prefix and latent token.
    positions : int
        Token positions those rows run through (each row is a whole context: prompt, prefix and latent token); the
        forward cost grows with it (reports/benchmarks.md section 26).
    entries : int
        float64 entries of the memoised columns (2 per row, position and latent token).
    """

    rows: int
    positions: int
    entries: int


def _check_oracles(seqs) -> None:
    if seqs.target_after is None or seqs.draft_after is None:
        raise invalid_argument("seqs.target_after", None, "target and draft oracles (recovered_one_late reads the rows "
                               "after a latent rejected draft token)")


def _prefixes(seqs, t: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``x_<t`` of ``rows`` (distinct, t) and each row's index into them (as :func:`next_rows`)."""
    prefixes = seqs.tokens[rows, :t]
    if not t:
        return prefixes[:1], np.zeros(len(rows), dtype=np.int64)
    uniq, inv = np.unique(prefixes, axis=0, return_inverse=True)
    return uniq, np.asarray(inv).reshape(-1)


def _after(oracle, prompt: tuple[int, ...], uniq: np.ndarray, pair_u: np.ndarray, pair_d: np.ndarray) -> np.ndarray:
    """The oracle's probs after ``prompt, uniq[pair_u], pair_d``, shape (pairs, vocab) float64.

    Where the oracle has a KV cache (``ProbsAfter.extend``, a Hugging Face causal LM) each distinct base
    ``prompt, uniq[u]`` runs once and every latent d is a one-token step over its keys and values
    (:meth:`verifier.runner.models.ReferenceModel.extend_probs`): the probs of :func:`_after_dense` to the float32
    rounding of the model's logits (tests/diagnose/test_late_columns.py).  Otherwise (a tabular model, a plain
    oracle, an empty base) the whole contexts, :func:`_after_dense`."""
    extend = getattr(oracle, "extend", None)
    if extend is None or not len(prompt) + uniq.shape[1] or not len(pair_u):
        return _after_dense(oracle, prompt, uniq, pair_u, pair_d)
    bases_u, parent = np.unique(pair_u, return_inverse=True)
    head = np.broadcast_to(np.asarray(prompt, dtype=np.int64), (len(bases_u), len(prompt)))
    _, probs = extend(np.concatenate([head, uniq[bases_u]], axis=1), pair_d[:, None].astype(np.int64),
                      np.asarray(parent).reshape(-1))
    return probs[:, 0]


def _after_dense(oracle, prompt: tuple[int, ...], uniq: np.ndarray, pair_u: np.ndarray, pair_d: np.ndarray) -> np.ndarray:
    """The oracle's probs after the whole contexts ``prompt, uniq[pair_u], pair_d``, shape (pairs, vocab) float64.

    A call whose last :data:`~verifier.runner.models.ROW_BATCH` batch would hold fewer than
    :data:`~verifier.runner.models.MIN_EXTEND_ROWS` rows is padded with copies of its first context (dropped after):
    the CPU kernels of a 1-5 row batch round differently from the larger ones."""
    from verifier.runner.models import MIN_EXTEND_ROWS, ROW_BATCH

    head = np.broadcast_to(np.asarray(prompt, dtype=np.int64), (len(pair_u), len(prompt)))
    ctx = np.concatenate([head, uniq[pair_u], pair_d[:, None]], axis=1)
    short = len(ctx) % ROW_BATCH
    if 0 < short < MIN_EXTEND_ROWS:
        ctx = np.concatenate([ctx, np.repeat(ctx[:1], MIN_EXTEND_ROWS - short, axis=0)])
    return np.asarray(oracle(ctx), dtype=np.float64)[:len(pair_u)]


def _pair_batches(seqs, uniq: np.ndarray, key: np.ndarray, draft: bool, starts=None):
    """Forward rows of the (prefix, d) pairs where ``key`` (distinct, vocab) is True, in memory-bounded batches:
    yields (pair_u, pair_d, target rows, draft rows or None), rows of shape (pairs, vocab).  ``starts``: only the batches
    that begin at these pair indices (:func:`_batch_starts`), default all."""
    vocab = key.shape[1]
    pair_u, pair_d = np.nonzero(key)
    step = max(1, LATE_BATCH_ENTRIES // vocab)
    for lo in (range(0, len(pair_u), step) if starts is None else starts):
        pu, pd = pair_u[lo:lo + step], pair_d[lo:lo + step]
        pn = _after(seqs.target_after, seqs.prompt, uniq, pu, pd)
        yield pu, pd, pn, (_after(seqs.draft_after, seqs.prompt, uniq, pu, pd) if draft else None)


def _batch_starts(key: np.ndarray) -> list[int]:
    """The first pair index of each batch :func:`_pair_batches` runs for ``key``."""
    return list(range(0, int(np.count_nonzero(key)), max(1, LATE_BATCH_ENTRIES // key.shape[1])))


def _in_halves(seqs, uniq: np.ndarray, key: np.ndarray, draft: bool, consume) -> tuple:
    """``consume(batches)`` over the first half of :func:`_pair_batches`' batches and over the second half: the two
    parts, in that order.

    Where the call has at least :data:`SPLIT_MIN_BATCHES` batches and this process can fork (Linux), the second half
    runs in a forked child (:func:`verifier._beside.forked_or_none`: it inherits the models) on the other core while this
    process runs the first; its part comes back pickled.  Each batch is the same forward pass either way, so the rows
    are the same bit for bit, and the caller combines the two parts the same way whether or not a child ran them.  A
    fork that fails, or a child lost before its result (killed), leaves its half to this process; a failure or an
    interrupt here kills the child before it propagates."""
    starts = _batch_starts(key)
    half = (len(starts) + 1) // 2

    def run(part: list[int]):
        return consume(_pair_batches(seqs, uniq, key, draft, part))

    from verifier._beside import ChildLost, forked_or_none

    # no child where none can be forked (not Linux, a process limit, no memory): both halves here, in turn
    child = (forked_or_none(run, starts[half:], name="recovered_one_late rows")
             if len(starts) >= SPLIT_MIN_BATCHES else None)
    try:
        first = run(starts[:half])
        if child is not None:
            try:
                return first, child.result()
            except ChildLost:  # killed (out of memory, kill -9): its half here, the same batches
                child = None
        return first, run(starts[half:])
    except BaseException:
        if child is not None:
            child.cancel()
        raise



def _residual_at(pn: np.ndarray, qn: np.ndarray, src: np.ndarray, col: np.ndarray) -> np.ndarray:
    """``mechanisms._residual(pn, qn)[src, col]`` without the whole (pairs, vocab) residual: the same float64
    operations on the entries read (the row sums are the same sums), so the same values bit for bit."""
    over = pn - qn
    np.clip(over, 0.0, None, out=over)
    s = over.sum(axis=-1)[src]
    return np.where(s > 0, over[src, col] / np.where(s > 0, s, 1.0), pn[src, col])


def _scatter(inv: np.ndarray, pu: np.ndarray, pd: np.ndarray, distinct: int, vocab: int):
    """Each (row, d) of a batch of (prefix, d) pairs: (row index into ``inv``, d, the pair's index in the batch)."""
    slot = np.full((distinct, vocab), -1)
    slot[pu, pd] = np.arange(len(pu))
    r_idx, d_idx = np.nonzero(slot[inv] >= 0)
    return r_idx, d_idx, slot[inv[r_idx], d_idx]


def late_columns(seqs, t: int, need_bonus: np.ndarray, need_residual: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The recovered laws after each latent rejected draft token d, read at each row's emitted token ``x_t``.

    Parameters
    ----------
    seqs : SequenceProbs
        With ``target_after`` and ``draft_after``.
    t : int
        Emitted position (0-based): the context is the prompt, ``x_<t`` and d.
    need_bonus, need_residual : np.ndarray of bool, shape (rows, vocab d)
        The (row, d) whose bonus-row / residual term is needed (a nonzero weight); the rows must be live at t.

    Returns
    -------
    (np.ndarray, np.ndarray), each shape (rows, vocab d), float64
        ``p(x_t | x_<t, d)`` and ``residual_or_target(p(. | x_<t, d), q(. | x_<t, d))[x_t]``: exact where needed (or
        computed for another hypothesis), 0 elsewhere.  Memoised on ``seqs.memo`` per t (read-only views: copy to
        modify); the rows a ``need`` adds are one target (and, for a residual, one draft) forward row per distinct
        ``x_<t`` and d.

    Raises
    ------
    InvalidArgumentError
        ``seqs`` has no target or draft oracle.
    """
    _check_oracles(seqs)
    n, _, vocab = seqs.p.shape
    key_tokens = seqs.tokens[:, :t + 1]
    memo = seqs.memo.get(("late", t))
    if memo is None or not np.array_equal(memo["tokens"], key_tokens):  # new rows (or none yet): a fresh memo
        memo = {"tokens": key_tokens.copy(), "bonus": np.zeros((n, vocab)), "residual": np.zeros((n, vocab)),
                "done_bonus": np.zeros((n, vocab), bool), "done_residual": np.zeros((n, vocab), bool)}
        seqs.memo[("late", t)] = memo
    want_r = need_residual & ~memo["done_residual"]
    want_b = need_bonus & ~memo["done_bonus"]
    rows = np.flatnonzero(want_r.any(axis=1) | want_b.any(axis=1))
    if rows.size:
        uniq, inv = _prefixes(seqs, t, rows)
        key_r = np.zeros((len(uniq), vocab), bool)
        np.logical_or.at(key_r, inv, want_r[rows])
        key_b = np.zeros((len(uniq), vocab), bool)
        np.logical_or.at(key_b, inv, want_b[rows])
        key_b &= ~key_r  # a residual's forward rows give the bonus row too
        x = seqs.tokens[rows, t]
        for residual, key in ((True, key_r), (False, key_b)):
            def columns(batches, residual=residual):  # each (row, d) of the batches: its bonus and residual at x_t
                found = []
                for pu, pd, pn, qn in batches:
                    r_idx, d_idx, src = _scatter(inv, pu, pd, len(uniq), vocab)
                    row, col = rows[r_idx], x[r_idx]
                    found.append((row, d_idx, pn[src, col], _residual_at(pn, qn, src, col) if residual else None))
                return found
            for row, d_idx, bonus, res in (f for part in _in_halves(seqs, uniq, key, residual, columns) for f in part):
                memo["bonus"][row, d_idx] = bonus
                memo["done_bonus"][row, d_idx] = True
                if residual:
                    memo["residual"][row, d_idx] = res
                    memo["done_residual"][row, d_idx] = True
    return memo["bonus"], memo["residual"]


def late_laws(seqs, t: int, weights: list[tuple[bool, np.ndarray]]) -> list[np.ndarray]:
    """The recovered token's whole law at t, the latent rejected draft summed out: ``sum_d w[n, d] law_d(.)``.

    Parameters
    ----------
    seqs : SequenceProbs
        With ``target_after`` and ``draft_after``.
    t : int
        Emitted position (0-based).
    weights : list of (bool, np.ndarray of shape (rows, vocab d))
        Per term: whether its law is the bonus row ``p(. | x_<t, d)`` (else the residual), and the weight of each d
        (rows not live at t must have zero weights).

    Returns
    -------
    list of np.ndarray, each shape (rows, vocab), float64
        One mixture per term (the predictive law of a fit check; not memoised: the same forward rows as
        :func:`late_columns`, whole; a (prefix, d) pair that a residual term needs runs once for both kinds of term).
    """
    _check_oracles(seqs)
    n, _, vocab = seqs.p.shape
    import scipy.sparse

    out = [np.zeros((n, vocab)) for _ in weights]
    need = [w != 0 for _, w in weights]
    rows = np.flatnonzero(np.logical_or.reduce(need).any(axis=1)) if need else np.zeros(0, np.int64)
    if not rows.size:
        return out
    uniq, inv = _prefixes(seqs, t, rows)
    keys = {}
    for (bonus, _), nd in zip(weights, need):
        key = keys.setdefault(bonus, np.zeros((len(uniq), vocab), bool))
        np.logical_or.at(key, inv, nd[rows])
    if False in keys and True in keys:  # a residual's forward rows give the bonus row too (as late_columns)
        keys[True] &= ~keys[False]
    def mixtures(batches, bonus):  # the terms' sums over the batches' (prefix, d) pairs, (rows read, vocab) each
        part = [np.zeros((len(rows), vocab)) for _ in weights]
        for pu, pd, pn, qn in batches:
            r_idx, d_idx, src = _scatter(inv, pu, pd, len(uniq), vocab)
            laws = {True: pn} if bonus else {True: pn, False: _residual(pn, qn)}
            for (b, w), acc in zip(weights, part):
                if b in laws:
                    mix = scipy.sparse.csr_matrix((w[rows[r_idx], d_idx], (r_idx, src)), shape=(len(rows), len(pu)))
                    acc += mix @ laws[b]
        return part

    for bonus, key in sorted(keys.items()):  # residual pairs first: their target rows also serve the bonus terms
        first, second = _in_halves(seqs, uniq, key, not bonus, lambda batches, bonus=bonus: mixtures(batches, bonus))
        for acc, a, b in zip(out, first, second):  # the two halves' sums, added the same way with or without a child
            acc[rows] += a + b
    return out


def next_rows(seqs, t: int, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The dense reference: ``recovered_one_late``'s recovered laws at t after every latent token d, whole.

    Parameters
    ----------
    seqs : SequenceProbs
        With ``target_after`` and ``draft_after``.
    t : int
        Emitted position (0-based): the context is the prompt, ``x_<t`` and d.
    live : np.ndarray of bool, shape (rows,)
        Rows still emitting at t (the others get zeros).

    Returns
    -------
    (np.ndarray, np.ndarray), each shape (rows, vocab d, vocab y), float64
        ``p(. | x_<t, d)`` (the bonus row) and ``residual_or_target(p(. | x_<t, d), q(. | x_<t, d))``: one target and
        one draft forward row per distinct ``x_<t`` and every d.  Memory rows x vocab^2: small inputs (tests) only.

    Raises
    ------
    InvalidArgumentError
        ``seqs`` has no target or draft oracle.
    """
    _check_oracles(seqs)
    n, _, vocab = seqs.p.shape
    p_next, residual = np.zeros((n, vocab, vocab)), np.zeros((n, vocab, vocab))
    rows = np.flatnonzero(live)
    if rows.size:
        uniq, inv = _prefixes(seqs, t, rows)
        pair_u, pair_d = np.repeat(np.arange(len(uniq)), vocab), np.tile(np.arange(vocab), len(uniq))
        pn = _after_dense(seqs.target_after, seqs.prompt, uniq, pair_u, pair_d).reshape(len(uniq), vocab, vocab)
        qn = _after_dense(seqs.draft_after, seqs.prompt, uniq, pair_u, pair_d).reshape(len(uniq), vocab, vocab)
        p_next[rows], residual[rows] = pn[inv], _residual(pn, qn)[inv]
    return p_next, residual


def late_recover_cost(seqs) -> LateCost:
    """What a ``recovered_one_late`` likelihood of ``seqs`` may need (:class:`LateCost`): per emitted position one
    target and one draft row per distinct prefix and latent token (every token: the weights are the hypothesis's),
    each a whole context of ``len(prompt) + t + 1`` positions; columns of 2 x rows x vocab float64 per position.

    The positions are what the whole-context route runs; from a KV cache (a Hugging Face model, :func:`_after`) a row
    is one token step after its prefix's single pass, so there the count is an upper bound (~3x the work on the
    shipped pair, reports/benchmarks.md section 29)."""
    n, steps, vocab = seqs.p.shape
    ends = sequence_ends(seqs.tokens, seqs.eos_token_id)
    rows = positions = entries = 0
    for t in range(steps):
        live = ends > t
        if live.any():
            distinct = 2 * vocab * (len(np.unique(seqs.tokens[live, :t], axis=0)) if t else 1)
            rows += distinct
            positions += distinct * (len(seqs.prompt) + t + 1)
            entries += 2 * n * vocab
    return LateCost(rows, positions, entries)
