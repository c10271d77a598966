"""Per-sequence likelihood of emitted tokens under a mechanism: a forward recursion over rounds.

A chain rule emits tokens round by round; which emitted token was an accepted draft, a recovered
token or a bonus token is not observed, so the probability of an emitted sequence is a sum over
round structures.  It is computed exactly by a forward recursion over the states
``(t, j)`` = (tokens emitted so far, drafts accepted so far in the current round):

* ``j < k``: the draft proposes ``d ~ propose(q_t)``; ``x_t`` is emitted either as the accepted
  draft (``d = x_t``, probability ``propose(x_t) * accept(x_t)``, to ``(t+1, j+1)``) or as the
  recovered token after a rejection, the rejected draft token summed out exactly
  (``sum_d propose(d) (1 - accept(d)) recover_d(x_t)``, to ``(t+1, 0)``);
* ``j = k``: the bonus token, ``x_t ~ p_{t + bonus_offset}``, to ``(t+1, 0)``;
* a shared uniform makes the acceptance at ``j`` conditional on the ``j`` acceptances of the round
  so far (``min(a, b) / b`` with ``b`` the smallest threshold met, read off the observed tokens);
* ``mechanism.lead`` plain target samples come first (the prefill step, :mod:`verifier.diagnose.family`);
* a kept draft suffix jumps from ``(t, j)`` to ``(t + 1 + m, 0)``, the ``m = k - j - 1`` drafts after
  the rejected one emitted too; they were drafted after the latent rejected token ``d``, so their
  law needs the draft at contexts ending in ``d`` (``SequenceProbs.draft_after``), for every ``d``.

Everything is in log space (float64) and batched over samples: O(T k V) per sample.  Under the
canonical rule every path emits ``x_t`` with total probability ``p_t(x_t)``, so the likelihood is
the target's product of processed probs (tested against :func:`verifier.exact.n_token_law`).

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from verifier.diagnose.late import late_columns, late_laws
from verifier.diagnose.mechanisms import Mechanism, Views
from verifier.diagnose.rows import _log, _pick, sequence_ends, unique_rows  # noqa: F401  unique_rows: re-exported
from verifier.errors import invalid_argument

__all__ = ["SequenceProbs", "log_likelihood", "target_log_likelihood", "target_per_position", "sequence_ends", "unique_rows",
           "suffix_draft_rows"]

SUFFIX_BATCH_ENTRIES = 8_000_000  # float64 entries of one batch of kept-suffix draft rows (64 MB)


@dataclass
class SequenceProbs:
    """Emitted rows and the teacher-forced probs along them.

    Attributes
    ----------
    tokens : np.ndarray, shape (num_samples, max_new_tokens), int64
        Emitted tokens, -1 after EOS.
    p, q : np.ndarray, shape (num_samples, max_new_tokens, vocab), float64
        Processed target / draft probs of emitted token t given the prompt and tokens < t.
    p_raw, q_raw : np.ndarray or None
        The same with ``SamplingConfig()`` (no temperature, top-k/top-p or penalty).
    eos_token_id : int or None
    prompt : tuple of int
    draft_after : callable (contexts (m, L) int64) -> (m, vocab) float64, or None
        Processed draft probs after arbitrary equal-length contexts (prompt included): needed only
        by a kept draft suffix.
    weights : np.ndarray, shape (num_samples,), or None
        How many observed rows each row stands for (rows deduplicated by :func:`unique_rows`); None = 1 each.
    target_after : callable or None
        As ``draft_after`` for the target: needed by the latent mechanisms (:mod:`verifier.diagnose.latent`).
    penalised : bool
        The sampling config has a repetition penalty (its context mask is not modelled for latent tokens).
    calls : (np.ndarray, np.ndarray) or None
        Per observed row in generate order: its generate call's id and its index into these (distinct)
        rows; needed by batch cross-talk, whose rows are independent only given their call's row 0.
    q_temp : np.ndarray or None
        The draft's probs with the temperature (and penalty) but without top-k / top-p, shape as ``q``: the q a
        decoder reports when its draft sampled with filters (``draft_processors_differ``); set with ``q_raw``.
    """

    tokens: np.ndarray
    p: np.ndarray
    q: np.ndarray
    p_raw: np.ndarray | None = None
    q_raw: np.ndarray | None = None
    eos_token_id: int | None = None
    prompt: tuple[int, ...] = ()
    draft_after: Callable[[np.ndarray], np.ndarray] | None = None
    weights: np.ndarray | None = None
    target_after: Callable[[np.ndarray], np.ndarray] | None = None
    penalised: bool = False
    calls: tuple[np.ndarray, np.ndarray] | None = None
    q_temp: np.ndarray | None = None
    memo: dict = field(default_factory=dict, repr=False, compare=False)  # oracle results shared by the hypotheses

    @property
    def row_weights(self) -> np.ndarray:
        return np.ones(len(self.tokens)) if self.weights is None else np.asarray(self.weights, dtype=np.float64)

    def rows(self, sel) -> "SequenceProbs":
        """The subset of rows ``sel`` (slice or index array)."""
        pick = (lambda a: None if a is None else a[sel])
        return SequenceProbs(self.tokens[sel], self.p[sel], self.q[sel], pick(self.p_raw), pick(self.q_raw),
                             self.eos_token_id, self.prompt, self.draft_after, pick(self.weights), self.target_after,
                             self.penalised, q_temp=pick(self.q_temp))


def target_per_position(seqs: SequenceProbs, view: str = "p") -> np.ndarray:
    """``log p_t(x_t)`` per row and position, 0 after a row's end, shape (rows, max_new_tokens): the conditional
    log-probs of plain sampling from the ``view`` target (the canonical rule's)."""
    ends = sequence_ends(seqs.tokens, seqs.eos_token_id)
    x = np.where(seqs.tokens < 0, 0, seqs.tokens)
    lp = _log(np.take_along_axis(getattr(seqs, view), x[..., None], axis=2)[..., 0])
    live = np.arange(seqs.tokens.shape[1])[None] < ends[:, None]
    return np.where(live, lp, 0.0)


def target_log_likelihood(seqs: SequenceProbs, view: str = "p") -> np.ndarray:
    """``sum_t log p_t(x_t)`` per row (the law of plain sampling from the ``view`` target), shape (rows,)."""
    return target_per_position(seqs, view).sum(axis=1)


def log_likelihood(mechanism: Mechanism, seqs: SequenceProbs, num_draft_tokens: int, *,
                   per_position: bool = False, predictive: np.ndarray | None = None) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Log probability of each emitted row under ``mechanism`` with k = ``num_draft_tokens``.

    Parameters
    ----------
    mechanism : Mechanism
    seqs : SequenceProbs
    num_draft_tokens : int
        k >= 1.
    per_position : bool, default False
        Also return the conditional log-probs ``log P(x_t | x_<t)`` (rows, max_new_tokens), 0 after a
        row's end (NaN for a kept-suffix mechanism, whose in-flight jumps have no prefix marginal here).

    Returns
    -------
    np.ndarray, shape (rows,), float64
        ``-inf`` where the mechanism cannot emit the row.

    Raises
    ------
    InvalidArgumentError
        ``num_draft_tokens < 1``, a mechanism needing raw probs or ``draft_after`` that ``seqs`` lacks.
    """
    k = num_draft_tokens
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise invalid_argument("num_draft_tokens", k, "an integer >= 1")
    if mechanism.needs_raw and (seqs.p_raw is None or seqs.q_raw is None):
        raise invalid_argument("seqs.p_raw", None, f"unprocessed probs (mechanism {mechanism.name!r} needs them)")
    if mechanism.keep_suffix and k > 1 and seqs.draft_after is None:
        raise invalid_argument("seqs.draft_after", None, f"a draft oracle (mechanism {mechanism.name!r} needs it)")
    if mechanism.latent:
        from verifier.diagnose.latent import feasible, law_log_likelihood

        why = feasible(seqs, k, mechanism.name)
        if why is not None and mechanism.name == "kv_not_rolled_back":  # any vocabulary: Monte Carlo estimate
            from verifier.diagnose.latent_mc import kv_stale_mc_log_likelihood, mc_feasible

            if mc_feasible(seqs, k) is None:
                return kv_stale_mc_log_likelihood(seqs, k, per_position=per_position)
        if why is not None:
            raise invalid_argument("seqs", "a large vocabulary", f"a pair whose latent state can be enumerated ({why})")
        return law_log_likelihood(mechanism.name, seqs, k, per_position=per_position, predictive=predictive)
    n, steps, _ = seqs.p.shape
    ends = sequence_ends(seqs.tokens, seqs.eos_token_id)
    if mechanism.same_as_target:
        if predictive is not None:
            predictive[:] = seqs.p
        cond = target_per_position(seqs)
        return (cond.sum(axis=1), cond) if per_position else cond.sum(axis=1)
    la = np.full((n, steps + 1, k + 1), -np.inf)
    la[:, 0, 0] = 0.0
    x_all = np.where(seqs.tokens < 0, 0, seqs.tokens)
    target_rows = getattr(seqs, mechanism.target)
    thresholds = np.zeros((n, steps))  # acceptance threshold of the observed token at each t (shared uniform)
    later_thresholds = np.zeros((n, steps)) if mechanism.later_raw else thresholds  # the same at a round's later positions
    for t in range(steps):
        live = t < ends
        if not live.any():
            break
        x = x_all[:, t]
        if t < mechanism.lead:  # the prefill: a plain target sample before the first round
            la[:, t + 1, 0] = np.where(live, la[:, t, 0] + _log(_pick(seqs.p[:, t], x)), -np.inf)
            if predictive is not None:
                predictive[:, t] = seqs.p[:, t]
            continue
        v = Views(seqs.p[:, t], seqs.q[:, t], None if seqs.p_raw is None else seqs.p_raw[:, t],
                  None if seqs.q_raw is None else seqs.q_raw[:, t], None if seqs.q_temp is None else seqs.q_temp[:, t])
        prop, acc = mechanism.propose(v), mechanism.acceptance(v)
        thresholds[:, t] = _pick(acc, x)
        rec = None if mechanism.reject_emit is not None else mechanism.recover(v)
        first_view = (v, prop, acc, rec)
        later_view = first_view
        if mechanism.later_raw:  # target_processed_first_only: positions after a round's first see the raw target
            vl = Views(v.p_raw, v.q, v.p_raw, v.q_raw, v.q_temp)
            later_view = (vl, mechanism.propose(vl), mechanism.acceptance(vl), mechanism.recover(vl))
            later_thresholds[:, t] = _pick(later_view[2], x)
        pred = None
        if predictive is not None and not (mechanism.keep_suffix and k > 1):
            pred = np.zeros(seqs.p.shape[::2])
            norm = np.logaddexp.reduce(la[:, t], axis=1)
            state_w = np.exp(la[:, t] - np.where(np.isfinite(norm), norm, 0.0)[:, None])  # P(j | x_<t)
        states = [np.where(live, la[:, t, j], -np.inf) for j in range(k + 1)]
        # (acceptance, latent rejected draft's weight) after j acceptances this round; an unreachable j weighs nothing
        rejects = [_rejection_weights(mechanism, j, t, later_view if j else first_view, thresholds, later_thresholds)
                   if np.isfinite(states[j]).any() else (None, np.zeros_like(seqs.p[:, t])) for j in range(k)]
        late = late_pred = None
        if mechanism.late_recover:  # recovered_one_late: its recovered law at x_t after each latent d, (n, d) columns
            need = [(w != 0) & np.isfinite(a)[:, None] for a, (_, w) in zip(states, rejects)]
            bonus_need = need[k - 1]  # the round's last draft: the bonus row p[k] after d, else the residual after d
            residual_need = np.logical_or.reduce(need[:k - 1]) if k > 1 else np.zeros_like(bonus_need)
            late = late_columns(seqs, t, bonus_need, residual_need)
            if pred is not None:
                late_pred = late_laws(seqs, t, [(j == k - 1, np.where(need[j], w, 0.0))
                                                for j, (_, w) in enumerate(rejects)])
        for j in range(k + 1):
            a = states[j]
            if not np.isfinite(a).any():
                continue
            if j == k:  # bonus token from the target row at t + bonus_offset
                # (later_raw: the processed row when that is the round's first, k = 1 with the bonus one row early)
                bonus_rows = seqs.p if mechanism.later_raw and k + mechanism.bonus_offset == 0 else target_rows
                bonus = bonus_rows[:, t + mechanism.bonus_offset]
                la[:, t + 1, 0] = np.logaddexp(la[:, t + 1, 0], a + _log(_pick(bonus, x)))
                if pred is not None:
                    pred += state_w[:, j:j + 1] * bonus
                continue
            v, prop, acc, rec = later_view if j else first_view
            acc_eff, reject_w = rejects[j]
            la[:, t + 1, j + 1] = np.logaddexp(la[:, t + 1, j + 1], a + _log(_pick(prop * acc_eff, x)))
            late_j = None if late is None else (late[0] if j == k - 1 else late[1])  # bonus row p[k] at the last
            if late_j is not None:  # sum over the latent rejected draft d of its weight times its recovered law at x_t
                emit = (reject_w * late_j).sum(axis=1)
            elif mechanism.reject_emit is not None:
                emit = _pick(mechanism.reject_emit(v, prop, acc_eff), x)
            else:
                emit = reject_w.sum(axis=1) * _pick(rec, x)
            if pred is not None:
                if late_pred is not None:
                    full_emit = late_pred[j]
                elif mechanism.reject_emit is not None:
                    full_emit = mechanism.reject_emit(v, prop, acc_eff)
                else:
                    full_emit = reject_w.sum(axis=1, keepdims=True) * rec
                pred += state_w[:, j:j + 1] * (prop * acc_eff + full_emit)
            if mechanism.keep_suffix and j < k - 1:
                _suffix_jumps(la, a, reject_w, _pick(rec, x), t, k - j - 1, ends, seqs, mechanism)
            else:
                la[:, t + 1, 0] = np.logaddexp(la[:, t + 1, 0], a + _log(emit))
        if predictive is not None:
            predictive[:, t] = pred if pred is not None else np.nan
    final = np.logaddexp.reduce(la[np.arange(n), ends], axis=1)
    if not per_position:
        return final
    if mechanism.keep_suffix and k > 1:
        return final, np.full((n, steps), np.nan)
    prefix = np.logaddexp.reduce(la, axis=2)  # (n, steps + 1): log P(x_<t)
    with np.errstate(invalid="ignore"):
        cond = prefix[:, 1:] - prefix[:, :-1]
    return final, np.where(np.arange(steps)[None] < ends[:, None], cond, 0.0)


def _rejection_weights(mechanism: Mechanism, j: int, t: int, view: tuple, thresholds: np.ndarray,
                       later_thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The acceptance of the next draft after ``j`` acceptances this round and the latent rejected draft's weight
    ``propose (1 - acceptance)``, each (rows, vocab), at emitted position t (``view`` = (views, propose, acceptance,
    recover) of that round position)."""
    v, prop, acc, _ = view
    acc_eff = mechanism.acceptance_at(j, v, acc)  # a fixed rate per round position, else the hook's
    if mechanism.shared_uniform and j:
        # U < bound after j acceptances this round (the round's first at t - j, the later ones after it)
        bound = np.minimum(thresholds[:, t - j], later_thresholds[:, t - j + 1:t].min(axis=1) if j > 1 else np.inf)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            acc_eff = np.where(bound > 0, np.minimum(acc, bound) / np.where(bound > 0, bound, 1.0), 0.0)
    return acc_eff, prop * (1.0 - acc_eff)


def _suffix_jumps(la, a, reject_w, rec_x, t, m, ends, seqs: SequenceProbs, mechanism: Mechanism) -> None:
    """Add the kept-suffix transitions from time t: recovered x_t, then up to m observed drafts drafted
    after the latent rejected token d (drafting stops after an EOS d)."""
    n, _, vocab = seqs.p.shape
    eos = seqs.eos_token_id
    rows = np.flatnonzero(np.isfinite(a))
    length = np.minimum(m, ends[rows] - (t + 1))  # observed suffix tokens of each row (cut at EOS / the end)
    log_suffix = np.zeros((len(rows), vocab))  # log P(observed suffix | latent d)
    prompt = np.asarray(seqs.prompt, dtype=np.int64)
    if getattr(seqs.draft_after, "extend", None) is not None:  # the same terms from a KV cache, shared by the hypotheses
        need = reject_w[rows] > 0
        if eos is not None:
            need[:, eos] = False  # an EOS draft: no suffix (below)
        terms = _suffix_terms(seqs, t, m, ends, mechanism, rows, need)
        for i in range(1, int(length.max(initial=0)) + 1):
            sel = np.flatnonzero(length >= i)
            log_suffix[sel] += terms[i - 1][rows[sel]]
    else:  # the oracle by context: one draft call per distinct context and latent d
        for i in range(1, int(length.max(initial=0)) + 1):
            sel = np.flatnonzero(length >= i)
            r = rows[sel]
            # context of the i-th suffix token: prompt, x_<t, latent d, x_{t+1..t+i-1}; rows sharing the observed
            # part share it, so the draft runs once per distinct (x_<t, x_{t+1..t+i-1}) and latent d (exact)
            key = np.concatenate([seqs.tokens[r, :t], seqs.tokens[r, t + 1:t + i]], axis=1)
            uniq, inv = np.unique(key, axis=0, return_inverse=True)
            inv = np.asarray(inv).reshape(-1)
            nxt = seqs.tokens[r, t + i]
            got = np.zeros((len(r), vocab))
            step = max(1, SUFFIX_BATCH_ENTRIES // (vocab * vocab))  # distinct contexts per draft call (memory bound)
            for lo in range(0, len(uniq), step):
                u = uniq[lo:lo + step]
                head = np.concatenate([np.broadcast_to(prompt, (len(u), len(prompt))), u[:, :t]], axis=1)
                ctx = np.concatenate([np.repeat(head, vocab, axis=0), np.tile(np.arange(vocab), len(u))[:, None],
                                      np.repeat(u[:, t:], vocab, axis=0)], axis=1)
                qd = seqs.draft_after(ctx)
                prop = mechanism.propose(Views(qd, qd)).reshape(len(u), vocab, vocab)
                mine = np.flatnonzero((inv >= lo) & (inv < lo + len(u)))
                got[mine] = prop[inv[mine] - lo, :, nxt[mine]]
            log_suffix[sel] += _log(got)
    w = reject_w[rows]
    if eos is not None:  # an EOS draft stops drafting: no suffix, the round ends after the recovered token
        stop = w[:, eos].copy()
        w = w.copy()
        w[:, eos] = 0.0
        la[rows, t + 1, 0] = np.logaddexp(la[rows, t + 1, 0], a[rows] + _log(stop * rec_x[rows]))
    with np.errstate(divide="ignore"):
        jump = np.logaddexp.reduce(_log(w) + log_suffix, axis=1) + _log(rec_x[rows])
    dest = t + 1 + length
    la[rows, dest, 0] = np.logaddexp(la[rows, dest, 0], a[rows] + jump)


def _suffix_terms(seqs: SequenceProbs, t: int, m: int, ends: np.ndarray, mechanism: Mechanism, rows: np.ndarray,
                  need: np.ndarray) -> list[np.ndarray]:
    """``log propose(q(. | prompt, x_<t, d, x_{t+1..t+i-1}))[x_{t+i}]`` for each row and latent d, i = 1..m: a list of
    (all rows, vocab) float64 arrays, memoised on ``seqs`` per (t, propose) and shared by the hypotheses.

    Filled where ``need`` (rows ``rows``, vocab) is True (a latent d of rejection weight 0 adds nothing to the jump;
    its entry stays 0); 0 also where a row has no i-th suffix token.  The draft runs once per distinct ``x_<t`` (its
    keys and values cached) and then over the tails ``d, x_{t+1..t+L-1}`` of every distinct observed suffix and needed
    d, all L positions in one pass (``draft_after.extend``,
    :meth:`verifier.runner.models.ReferenceModel.extend_probs`): the terms of the context-by-context loop of
    :func:`_suffix_jumps` to float32 rounding of the draft's logits (tests/diagnose/test_fast_oracles.py).
    """
    n, _, vocab = seqs.p.shape
    memo = seqs.memo.setdefault(("suffix", t, mechanism.propose), {"terms": [], "done": np.zeros((n, vocab), bool)})
    while len(memo["terms"]) < m:  # a longer suffix than before: its deeper terms are new
        memo["terms"].append(np.zeros((n, vocab)))
        memo["done"][:] = False
    terms, done = memo["terms"], memo["done"]
    want = np.zeros((n, vocab), bool)
    want[rows] = need
    want &= ~done
    avail = np.clip(np.minimum(len(terms), ends - (t + 1)), 0, None)
    prompt = np.asarray(seqs.prompt, dtype=np.int64)
    for length in range(1, len(terms) + 1):
        sel = np.flatnonzero((avail == length) & want.any(axis=1))
        if not sel.size:
            continue
        key_rows = np.concatenate([seqs.tokens[sel, :t], seqs.tokens[sel, t + 1:t + length]], axis=1)
        uniq, inv = np.unique(key_rows, axis=0, return_inverse=True)
        inv = np.asarray(inv).reshape(-1)
        key_want = np.zeros((len(uniq), vocab), bool)
        np.logical_or.at(key_want, inv, want[sel])
        pair_u, pair_d = np.nonzero(key_want)  # (distinct suffix, latent d) pairs to run, suffix-major
        step = max(1, SUFFIX_BATCH_ENTRIES // (vocab * length))  # tail rows per pass (memory bound)
        for lo in range(0, len(pair_u), step):
            pu, pd = pair_u[lo:lo + step], pair_d[lo:lo + step]
            heads, parent = np.unique(uniq[pu, :t], axis=0, return_inverse=True)
            bases = np.concatenate([np.broadcast_to(prompt, (len(heads), len(prompt))), heads], axis=1)
            tails = np.concatenate([pd[:, None], uniq[pu, t:]], axis=1)
            _, probs = seqs.draft_after.extend(bases, tails, np.asarray(parent).reshape(-1))
            slot = np.full((len(uniq), vocab), -1)
            slot[pu, pd] = np.arange(len(pu))
            r_idx, d_idx = np.nonzero(slot[inv] >= 0)  # every row of a suffix in this pass, at each of its d in the pass
            src = slot[inv[r_idx], d_idx]
            for i in range(1, length + 1):
                qd = probs[:, i - 1]
                picked = mechanism.propose(Views(qd, qd))
                terms[i - 1][sel[r_idx], d_idx] = _log(picked[src, seqs.tokens[sel[r_idx], t + i]])
            done[sel[r_idx], d_idx] = True
    return terms


def suffix_draft_rows(tokens: np.ndarray, eos_token_id: int | None, num_draft_tokens: int, vocab_size: int) -> int:
    """Draft forward rows a kept-suffix likelihood of ``tokens`` needs: distinct observed contexts x V latent tokens.

    For each start t and suffix length i < k, one row per distinct (x_<t, x_{t+1..t+i-1}) and latent
    rejected token d (an upper bound: rows whose path cannot reach t are counted too).
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    ends = sequence_ends(tokens, eos_token_id)
    total = 0
    for t in range(tokens.shape[1]):
        for i in range(1, num_draft_tokens):
            sel = ends - (t + 1) >= i
            if sel.any():
                key = np.concatenate([tokens[sel, :t], tokens[sel, t + 1:t + i]], axis=1)
                total += len(np.unique(key, axis=0)) * vocab_size
    return total
