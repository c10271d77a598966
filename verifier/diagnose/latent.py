"""Decoder-level mechanisms with latent state: exact J-token laws by enumerating the decoder's choices.

Two decoder mutants have no chain-rule likelihood in teacher-forced probs along the emitted row:

* ``kv_not_rolled_back``: after a rejection at draft position j, the rejected draft ``d_j`` and the
  drafts after it stay in both KV caches (the target was fed ``d_1..d_k``, the draft ``d_1..d_{k-1}``),
  and every later prob conditions on them.  The latent state is those stale tokens; the law is
  computed by carrying the full cache contents (target context, draft context) through an
  enumeration of every draft, acceptance and recovered / bonus token, round by round (as
  :class:`verifier.decoders.speculative.SpeculativeDecoder` with ``roll_back_caches = False``).
* ``batch_cross_talk``: row 0's accepted length is applied to every row of the generate call, so
  rows are not independent.  Given row 0's sequence of accepted counts ``c``, another row emits its
  first ``c_r`` drafts as drafted and then the recovered token from the residual at position ``c_r``
  (or the bonus token when ``c_r = k``); rows are independent given ``c``, and row 0 is a canonical
  decoder, so the law of a row other than row 0 is ``sum_c P_canonical(c) P(row | c)``.  The sum over
  rows of log of this marginal is a composite likelihood (rows of one call share ``c``), exact per
  row; row 0 of each generate call (unbiased) is not modelled.  Exact when row 0 cannot stop early
  (no EOS emitted before J tokens); with an EOS the generate call moves another row into place 0,
  which this law does not follow.

Both enumerate contexts token by token through ``SequenceProbs.target_after`` / ``draft_after``
(memoised), which is cheap for tabular pairs (vocab ** (k + 1) branches per round) and infeasible for a
transformer's vocabulary: :func:`feasible` says when a law is computed (the ranking notes the others).

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable

import numpy as np

from verifier.diagnose.mechanisms import _residual  # as kernels.residual_or_target
from verifier.protocols import PADDING_TOKEN_ID

__all__ = ["LATENT_LAWS", "feasible", "latent_law", "law_log_likelihood", "call_log_likelihood", "call_predictive", "count_classes",
           "MAX_BRANCHES", "GROUPED"]

GROUPED = {"batch_cross_talk"}  # mechanisms whose likelihood is per generate call, not per row

MAX_BRANCHES = 4096  # vocab ** (k + 1) branches per round and context an enumeration may take
MAX_OUTCOMES = 20_000  # vocab ** J emitted outcomes (as verifier.diagnose.inputs.MAX_LAW_OUTCOMES)
MAX_ROUND_PATHS = 1_000_000  # round paths the stale-cache enumeration may walk (a Python recursion, ~80 us each: <= ~80 s)


class LatentTooLarge(Exception):
    """The exact enumeration would walk more than ``MAX_ROUND_PATHS`` round paths."""


class _Probs:
    """Memoised next-token probs of one model after a context (tuple of ints, prompt included)."""

    def __init__(self, after: Callable[[np.ndarray], np.ndarray]) -> None:
        self.after, self.cache = after, {}

    def __call__(self, ctx: tuple) -> np.ndarray:
        row = self.cache.get(ctx)
        if row is None:
            row = self.cache[ctx] = np.asarray(self.after(np.array([ctx], dtype=np.int64))[0], dtype=np.float64)
        return row


def _ratio(p: float, q: float) -> float:
    return min(1.0, p / q) if q > 0 else 0.0


def _done(emitted: tuple, num_tokens: int, eos: int | None) -> bool:
    return len(emitted) >= num_tokens or (eos is not None and eos in emitted)


def _outcome(emitted: tuple, num_tokens: int, eos: int | None) -> tuple:
    out = list(emitted[:num_tokens])
    if eos is not None and eos in out:
        out = out[:out.index(eos) + 1]
    return tuple(out) + (PADDING_TOKEN_ID,) * (num_tokens - len(out))


def _drafts(Q: _Probs, dctx: tuple, k: int):
    """Every draft chain d_1..d_k from the draft after ``dctx``, with its probability."""
    chains = [((), 1.0)]
    for _ in range(k):
        nxt = []
        for seq, w in chains:
            q = Q(dctx + seq)
            nxt.extend((seq + (v,), w * q[v]) for v in np.flatnonzero(q > 0).tolist())
        chains = nxt
    return chains


def kv_stale_law(P: _Probs, Q: _Probs, prompt: tuple, k: int, num_tokens: int, eos: int | None) -> dict:
    """Law of the first ``num_tokens`` emitted tokens when rejected drafts stay in the KV caches."""
    law: dict = defaultdict(float)
    budget = [MAX_ROUND_PATHS]

    def rounds(tctx: tuple, dctx: tuple, emitted: tuple, w: float) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise LatentTooLarge(f"more than {MAX_ROUND_PATHS} round paths")
        if _done(emitted, num_tokens, eos):
            law[_outcome(emitted, num_tokens, eos)] += w
            return
        for dseq, wq in _drafts(Q, dctx, k):
            ps = [P(tctx + dseq[:j]) for j in range(k + 1)]
            acc = w * wq
            for j in range(k):
                d, q = dseq[j], Q(dctx + dseq[:j])
                a = _ratio(ps[j][d], q[d])
                if acc * (1.0 - a) > 0:  # rejected at j: recovered y; the caches keep d_j..d_k (target), d_j..d_{k-1} (draft)
                    res = _residual(ps[j], q)
                    for y in np.flatnonzero(res > 0).tolist():
                        rounds(tctx + dseq + (y,), dctx + dseq[:k - 1] + (y,), emitted + dseq[:j] + (y,),
                               acc * (1.0 - a) * res[y])
                acc *= a
                if acc == 0:
                    break
            else:  # all k accepted: bonus from the target after d_1..d_k
                for b in np.flatnonzero(ps[k] > 0).tolist():
                    rounds(tctx + dseq + (b,), dctx + dseq + (b,), emitted + dseq + (b,), acc * ps[k][b])

    rounds(tuple(prompt), tuple(prompt), (), 1.0)
    return dict(law)


def _count_paths(P: _Probs, Q: _Probs, prompt: tuple, k: int, num_tokens: int, eos: int | None) -> dict:
    """Joint law of a canonical decoder's accepted counts per round and its first ``num_tokens`` tokens.

    Returns {counts tuple: {outcome: probability}}; the rounds run until ``num_tokens`` tokens are emitted
    (an EOS cuts the outcome, not the counts: see the module note).
    """
    law: dict = defaultdict(lambda: defaultdict(float))

    def rounds(ctx: tuple, counts: tuple, w: float) -> None:
        emitted = ctx[len(prompt):]
        if len(emitted) >= num_tokens:
            law[counts][_outcome(emitted, num_tokens, eos)] += w
            return
        for dseq, wq in _drafts(Q, ctx, k):
            acc = w * wq
            for j in range(k):
                d = dseq[j]
                p, q = P(ctx + dseq[:j]), Q(ctx + dseq[:j])
                a = _ratio(p[d], q[d])
                if acc * (1.0 - a) > 0:
                    res = _residual(p, q)
                    for y in np.flatnonzero(res > 0).tolist():
                        rounds(ctx + dseq[:j] + (y,), counts + (j,), acc * (1.0 - a) * res[y])
                acc *= a
                if acc == 0:
                    break
            else:
                pb = P(ctx + dseq)
                for b in np.flatnonzero(pb > 0).tolist():
                    rounds(ctx + dseq + (b,), counts + (k,), acc * pb[b])

    rounds(tuple(prompt), (), 1.0)
    return {c: dict(v) for c, v in law.items()}


def _given_counts(P: _Probs, Q: _Probs, prompt: tuple, k: int, num_tokens: int, eos: int | None, counts: tuple) -> dict:
    """Law of a row's first ``num_tokens`` tokens when its accepted count in round r is forced to ``counts[r]``."""
    paths = [((), 1.0)]
    for n in counts:
        nxt = []
        for emitted, w in paths:
            if _done(emitted, num_tokens, eos):
                nxt.append((emitted, w))
                continue
            ctx = tuple(prompt) + emitted
            for dseq, wq in _drafts(Q, ctx, n):  # the first n drafts are emitted whatever the target says
                p = P(ctx + dseq)
                last = p if n == k else _residual(p, Q(ctx + dseq))  # bonus, or the residual at position n
                nxt.extend((emitted + dseq + (y,), w * wq * last[y]) for y in np.flatnonzero(last > 0).tolist())
        paths = nxt
    law: dict = defaultdict(float)
    for emitted, w in paths:
        law[_outcome(emitted, num_tokens, eos)] += w
    return dict(law)


def cross_talk_laws(P: _Probs, Q: _Probs, prompt: tuple, k: int, num_tokens: int, eos: int | None) -> list:
    """[(counts, row 0's joint law {outcome: P(outcome, counts)}, another row's law {outcome: P(outcome | counts)})]."""
    return [(c, joint, _given_counts(P, Q, tuple(prompt), k, num_tokens, eos, c))
            for c, joint in _count_paths(P, Q, tuple(prompt), k, num_tokens, eos).items()]


LATENT_LAWS = {"kv_not_rolled_back": kv_stale_law, "batch_cross_talk": cross_talk_laws}


def feasible(seqs, num_draft_tokens: int, name: str = "kv_not_rolled_back", *, grouped: bool = False) -> str | None:
    """None when mechanism ``name``'s law can be enumerated for ``seqs``; else why not (a note for the ranking).

    ``grouped``: the call-level likelihood is wanted (batch cross-talk), which needs ``seqs.calls``.
    """
    vocab, steps = seqs.p.shape[2], seqs.tokens.shape[1]
    if seqs.target_after is None or seqs.draft_after is None or not seqs.prompt:
        return "not computed: needs the target and the draft at arbitrary contexts after a non-empty prompt"
    if grouped and name in GROUPED:  # products of teacher-forced probs: any vocabulary
        if getattr(seqs, "calls", None) is None:
            return "not computed: needs the generate call of each row (rows of one call share row 0's accepted counts)"
        classes = len(count_classes(num_draft_tokens, steps))
        if classes > MAX_COUNT_CLASSES:
            return f"not computed: {classes} round structures of {steps} tokens > {MAX_COUNT_CLASSES}"
        return None
    if name == "kv_not_rolled_back" and getattr(seqs, "penalised", False):
        return "not computed: a repetition penalty's context mask excludes the latent tokens (not modelled)"
    if vocab ** steps > MAX_OUTCOMES or vocab ** (num_draft_tokens + 1) > MAX_BRANCHES:
        return (f"not computed: the latent state is enumerated exactly only for small vocabularies (vocab {vocab}: "
                f"{vocab}^{steps} outcomes > {MAX_OUTCOMES} or {vocab}^{num_draft_tokens + 1} branches per round > {MAX_BRANCHES})")
    if name == "kv_not_rolled_back":  # the path count grows with the rounds, not only with vocab ** J: try it, bounded
        try:
            _enumerated(name, seqs, num_draft_tokens)
        except LatentTooLarge:
            return (f"not computed exactly: the stale-cache enumeration needs more than {MAX_ROUND_PATHS} round paths "
                    f"({steps} tokens, k = {num_draft_tokens}, vocab {vocab})")
    return None


_CACHE: dict = {}


def _enumerated(name: str, seqs, num_draft_tokens: int):
    """The enumeration behind mechanism ``name`` (memoised per pair, prompt, k and J)."""
    key = (name, seqs.target_after, seqs.draft_after, seqs.prompt, num_draft_tokens, seqs.tokens.shape[1])
    if key not in _CACHE:
        if len(_CACHE) >= 32:
            _CACHE.clear()
        try:
            _CACHE[key] = LATENT_LAWS[name](_Probs(seqs.target_after), _Probs(seqs.draft_after), tuple(seqs.prompt),
                                            num_draft_tokens, seqs.tokens.shape[1], seqs.eos_token_id)
        except LatentTooLarge as exc:  # remembered: the bounded attempt is not repeated
            _CACHE[key] = exc
    got = _CACHE[key]
    if isinstance(got, LatentTooLarge):
        raise got
    return got


def latent_law(name: str, seqs, num_draft_tokens: int) -> dict:
    """The enumerated per-row law (outcome tuple -> probability) of mechanism ``name`` for the pair behind ``seqs``.

    For batch cross-talk: the marginal law of a row other than row 0, ``sum_c P(c) P(row | c)``.
    """
    got = _enumerated(name, seqs, num_draft_tokens)
    if name not in GROUPED:
        return got
    law: dict = defaultdict(float)
    for _, joint, given in got:
        pc = sum(joint.values())
        for o, w in given.items():
            law[o] += pc * w
    return dict(law)


MAX_COUNT_CLASSES = 5000  # count sequences batch cross-talk sums over (they grow with max_new_tokens)


def count_classes(num_draft_tokens: int, num_tokens: int) -> list[tuple[tuple[int, bool], ...]]:
    """Every round structure of ``num_tokens`` emitted tokens: ((accepted count, last-round "at least"), ...).

    A round with count n emits n accepted drafts and one recovered (n < k) or bonus (n = k) token; the
    last round, with R <= k tokens left, is either n < R (its final token visible) or "at least R"
    (every visible token an accepted draft), which merges counts whose difference is not observed.
    """
    k, out = num_draft_tokens, []

    def rec(t: int, seq: tuple) -> None:
        left = num_tokens - t
        if left <= 0:
            out.append(seq)
            return
        for n in range(0, min(k, left - 1) + 1):
            rec(t + n + 1, seq + ((n, False),))
        if left <= k:
            out.append(seq + ((left, True),))

    rec(0, ())
    return out


def _position_logs(seqs) -> dict[str, np.ndarray]:
    """Per distinct row and position, log of: q(x), min(p, q)(x), residual(x), 1 - sum min(p, q), p(x)."""
    from verifier.diagnose.rows import _pick_all

    p, q = seqs.p, seqs.q
    m = np.minimum(p, q)
    w = np.clip(p - q, 0.0, None)
    sw = w.sum(axis=2, keepdims=True)
    res = np.where(sw > 0, w / np.where(sw > 0, sw, 1.0), p)
    with np.errstate(divide="ignore"):
        return {"q": np.log(_pick_all(q, seqs.tokens)), "min": np.log(_pick_all(m, seqs.tokens)),
                "res": np.log(_pick_all(res, seqs.tokens)), "rej": np.log(np.clip(1.0 - m.sum(axis=2), 0.0, None)),
                "p": np.log(_pick_all(p, seqs.tokens))}


def _call_tables(seqs, num_draft_tokens: int) -> tuple[np.ndarray, np.ndarray, list]:
    """log P(row 0 = u, c) (canonical) and log P(row = u | c) (counts forced) for every class c and distinct row u.

    Both are products along the row of teacher-forced probs: exact at any vocabulary, O(C T) per row
    after the O(T V) logs.  Returns ((C, rows), (C, rows), classes).
    """
    from verifier.diagnose.rows import sequence_ends

    k = num_draft_tokens
    steps = seqs.tokens.shape[1]
    classes = count_classes(k, steps)
    logs = _position_logs(seqs)
    ends = sequence_ends(seqs.tokens, seqs.eos_token_id)
    live = np.arange(steps)[None] < ends[:, None]
    first = np.zeros((len(classes), len(seqs.tokens)))
    other = np.zeros_like(first)
    for ci, c in enumerate(classes):
        f = np.zeros((len(seqs.tokens), steps))
        o = np.zeros_like(f)
        t = 0
        for n, at_least in c:
            f[:, t:t + n] = logs["min"][:, t:t + n]  # accepted drafts: row 0 by the canonical test, the others forced
            o[:, t:t + n] = logs["q"][:, t:t + n]
            if not at_least:
                pos = t + n
                if n == k:
                    f[:, pos] = o[:, pos] = logs["p"][:, pos]
                else:
                    f[:, pos] = logs["rej"][:, pos] + logs["res"][:, pos]
                    o[:, pos] = logs["res"][:, pos]
                t = pos + 1
            else:
                t += n
        with np.errstate(invalid="ignore"):
            first[ci] = np.where(live, f, 0.0).sum(axis=1)
            other[ci] = np.where(live, o, 0.0).sum(axis=1)
    return first, other, classes


def call_log_likelihood(seqs, num_draft_tokens: int) -> float:
    """Log probability of the sample set under batch cross-talk, generate call by generate call (exact).

    ``seqs.calls = (call id, distinct-row index)`` per observed row, in generate order: per call,
    ``log sum_c P(row 0, c) prod_{i >= 1} P(row i | c)``, summed over calls.
    """
    from verifier.diagnose.rows import sequence_ends

    calls, inverse = seqs.calls
    first, other, _ = _call_tables(seqs, num_draft_tokens)
    steps = seqs.tokens.shape[1]
    live = np.arange(steps)[None] < sequence_ends(seqs.tokens, seqs.eos_token_id)[:, None]
    with np.errstate(invalid="ignore"):
        alone = np.where(live, _position_logs(seqs)["p"], 0.0).sum(axis=1)  # log P_target(row): a call's only row
    total = 0.0
    for g in np.unique(calls):
        idx = inverse[calls == g]
        if len(idx) == 1:  # row 0 alone is the reference's row: its target probability, exactly (the sum over
            total += float(alone[idx[0]])  # classes double-counts structures that differ only after the row's EOS)
            continue
        with np.errstate(invalid="ignore"):
            per_c = first[:, idx[0]] + other[:, idx[1:]].sum(axis=1)
        total += float(np.logaddexp.reduce(per_c)) if len(per_c) else -np.inf
    return total


def call_predictive(seqs, num_draft_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch cross-talk's predictive law of every token of the rows other than row 0, each call at its most
    likely round structure: (observed row indices into seqs.calls order, (rows, steps, vocab) laws).

    Given the structure a token's law is q (accepted draft), the residual (recovered) or p (bonus) at
    its position; the randomized PIT of these is the mechanism's own fit check (the structure is chosen
    from the same data: slightly optimistic).
    """
    calls, inverse = seqs.calls
    k = num_draft_tokens
    first, other, classes = _call_tables(seqs, k)
    p, q = seqs.p, seqs.q
    w = np.clip(p - q, 0.0, None)
    sw = w.sum(axis=2, keepdims=True)
    res = np.where(sw > 0, w / np.where(sw > 0, sw, 1.0), p)
    picked, laws = [], []
    for g in np.unique(calls):
        where = np.flatnonzero(calls == g)
        idx = inverse[where]
        with np.errstate(invalid="ignore"):
            c = classes[int(np.argmax(first[:, idx[0]] + other[:, idx[1:]].sum(axis=1)))]
        kinds = []
        for n, at_least in c:
            kinds += ["q"] * n + ([] if at_least else ["p" if n == k else "res"])
        u = idx[1:]
        law = np.stack([{"q": q, "p": p, "res": res}[kd][u, t] for t, kd in enumerate(kinds[:p.shape[1]])], axis=1)
        picked.append(where[1:])
        laws.append(law)
    return np.concatenate(picked), np.concatenate(laws)


def law_log_likelihood(name: str, seqs, num_draft_tokens: int, *, per_position: bool = False,
                       predictive: np.ndarray | None = None):
    """Log probability of each row under a latent mechanism's enumerated law (and conditionals / predictive).

    Returns like :func:`verifier.diagnose.likelihood.log_likelihood`: (rows,) or ((rows,), (rows, steps)).
    """
    from verifier.diagnose.rows import sequence_ends

    law = latent_law(name, seqs, num_draft_tokens)
    tokens = np.asarray(seqs.tokens, dtype=np.int64)
    n, steps = tokens.shape
    vocab = seqs.p.shape[2]
    prefix: dict = defaultdict(float)  # emitted prefix (no padding) -> marginal probability
    for outcome, w in law.items():
        live = tuple(t for t in outcome if t != PADDING_TOKEN_ID)
        for t in range(len(live) + 1):
            prefix[live[:t]] += w
    ends = sequence_ends(tokens, seqs.eos_token_id)
    with np.errstate(divide="ignore", invalid="ignore"):
        total = np.log(np.array([law.get(tuple(r), 0.0) for r in tokens.tolist()]))
        if predictive is not None:
            for i, r in enumerate(tokens.tolist()):
                for t in range(int(ends[i])):
                    base = prefix.get(tuple(r[:t]), 0.0)
                    if base > 0:
                        predictive[i, t] = [prefix.get(tuple(r[:t]) + (v,), 0.0) / base for v in range(vocab)]
        if not per_position:
            return total
        cond = np.zeros((n, steps))
        for i, r in enumerate(tokens.tolist()):
            for t in range(int(ends[i])):
                cond[i, t] = np.log(prefix.get(tuple(r[:t + 1]), 0.0)) - np.log(prefix.get(tuple(r[:t]), 0.0))
    return total, cond
