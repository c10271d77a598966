"""Stale KV cache at any vocabulary: an unbiased Monte Carlo estimate of each row's likelihood.

:mod:`verifier.diagnose.latent` enumerates the stale-cache law exactly only when ``vocab ** (k + 1)``
branches per round are few.  Here each distinct row gets ``draws`` independent sequential-importance
paths through the decoder's rounds (as :class:`~verifier.decoders.speculative.SpeculativeDecoder`
with ``roll_back_caches = False``), each path carrying its own target and draft cache contents:

* at a round starting at emitted position t with target context ``T`` and draft context ``D``, the
  weight of "n drafts accepted, then the recovered token" is
  ``prod_{j<n} min(p_j, q_j)(x_{t+j}) * (1 - sum min(p_n, q_n)) * residual_n(x_{t+n})``, of "all k
  accepted, then the bonus" ``prod_{j<k} min(p_j, q_j)(x_{t+j}) * p_k(x_{t+k})`` and, when the row
  ends within the round, of "every remaining token accepted" ``prod_{j<L} min(p_j, q_j)(x_{t+j})``,
  with ``p_j = P(T + x_{t..t+j-1})`` and ``q_j = Q(D + x_{t..t+j-1})`` (the draft's and target's
  processed probs at the path's own stale contexts).  These weights are exact given the path's state;
  their sum ``W`` multiplies the path's weight and one structure is chosen with probability
  proportional to its weight;
* after a rejection at position n the latent rejected draft is ``d ~ max(q_n - p_n, 0)`` normalised
  (``q(d) (1 - min(1, p(d)/q(d)))``: its conditional law given the rejection, independent of the
  recovered token), and the drafts after it ``d_{n+2..k}`` are plain draft samples along
  ``D + x_{t..t+n-1} + d + ...``; the target keeps ``x_{t..t+n-1}, d_{n+1..k}`` and the draft
  ``x_{t..t+n-1}, d_{n+1..k-1}``, then both see the recovered token.

The product of the per-round sums along a path is an unbiased estimate of the row's probability
(sequential importance sampling whose proposal is the decoder's own conditional law of the latent
state given the data); the row's estimate is the mean over its draws.  ``log`` of the mean
underestimates the log-likelihood on average (Jensen), so the mechanism's log LR over the target
is conservative; and the false-diagnosis bound of :mod:`verifier.diagnose.rank` still holds
exactly: with independent draws per row, ``E[Lhat(x) / P_target(x)] = sum_x P_kv(x) = 1`` under the
null, so the estimated likelihood ratio of the sample set is again a mean-1 non-negative variable
and ``P(log LRhat >= c) <= e^-c``.

Cost: per round, one target and one draft forward per distinct (path context, prefix) -- rows x
draws x (2 k + 1) short contexts at most -- plus ``k - n - 1`` draft rows per rejection.  Rows
beyond :data:`MAX_MC_ROWS` distinct rows are not scored (the mechanism is then "not computed").

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

__all__ = ["MC_DRAWS", "MC_SEED", "MAX_MC_ROWS", "mc_feasible", "kv_stale_log_weights", "kv_stale_mc_log_likelihood"]

MC_DRAWS = 32  # independent paths per distinct row
MC_SEED = 0  # fixed: the estimate is a function of the data (and this seed) only
MAX_MC_ROWS = 5000  # distinct rows the estimate runs on (rows x draws paths)


def mc_feasible(seqs, num_draft_tokens: int) -> str | None:
    """None when the stale-KV Monte Carlo likelihood can run on ``seqs``; else why not."""
    if seqs.target_after is None or seqs.draft_after is None or not seqs.prompt:
        return "not computed: needs the target and the draft at arbitrary contexts after a non-empty prompt"
    if getattr(seqs, "penalised", False):
        return "not computed: a repetition penalty's context mask excludes the latent tokens (not modelled)"
    if len(seqs.tokens) > MAX_MC_ROWS:
        return f"not computed: {len(seqs.tokens)} distinct rows > {MAX_MC_ROWS} for the Monte Carlo likelihood"
    return None


NESTED_KEEP = 8  # most prefixes of one context read from its forward pass (_evaluate)


def _stopped(stop) -> None:
    """Raise :class:`verifier._beside.Cancelled` once ``stop`` (a ``threading.Event`` or None) is set."""
    if stop is not None and stop.is_set():
        from verifier._beside import Cancelled

        raise Cancelled("the stale-KV Monte Carlo likelihood was cancelled")


def _evaluate(after, contexts: list, stop=None) -> dict:
    """Probs after each distinct context (tuple), batched by length: {context: (vocab,) float64}.

    A round asks for nested contexts (``T``, ``T + x_t``, ``T + x_t x_t+1``, ...): where the oracle reads several
    prefixes of a context from one forward pass (``after.nested``: :class:`verifier.diagnose.inputs.ProbsAfter`), only the
    contexts no other one extends run, each keeping the positions of its requested prefixes (up to
    :data:`NESTED_KEEP`): the same probs up to float32 rounding, a forward pass per leaf instead of per context."""
    wanted = set(contexts)
    nested = getattr(after, "nested", None)
    covered: dict = defaultdict(list)  # leaf length -> [(a requested prefix, the leaf whose forward pass gives it)]
    if nested is not None:
        done: set = set()
        for c in sorted(wanted, key=len, reverse=True):  # longest first: a leaf covers its requested prefixes
            if c in done:
                continue
            for m in range(max(1, len(c) - NESTED_KEEP + 1), len(c)):
                if c[:m] in wanted and c[:m] not in done:
                    done.add(c[:m])
                    covered[len(c)].append((c[:m], c))
        wanted -= done
    by_len: dict = defaultdict(list)
    for c in wanted:
        by_len[len(c)].append(c)
    out = {}
    for n, group in sorted(by_len.items()):
        _stopped(stop)
        batch = np.array(group, dtype=np.int64)
        if nested is None:
            out.update(zip(group, np.asarray(after(batch), dtype=np.float64)))
            continue
        keep = 1 + max((n - len(p) for p, _ in covered[n]), default=0)
        probs = np.asarray(nested(batch, keep), dtype=np.float64)  # (leaves, keep, vocab)
        out.update(zip(group, probs[:, -1]))
        index = {c: i for i, c in enumerate(group)}
        for p, leaf in covered[n]:
            out[p] = probs[index[leaf], keep - 1 - (n - len(p))]
    return out


def kv_stale_log_weights(seqs, num_draft_tokens: int, *, draws: int = MC_DRAWS, seed: int = MC_SEED,
                         ends: np.ndarray | None = None, stop=None) -> np.ndarray:
    """Log importance weight of each path: (rows, draws) float64, ``-inf`` where a path cannot emit its row.

    ``exp`` of each entry is an unbiased estimate of the row's probability under the stale KV cache
    (its first ``ends[i]`` tokens; default: up to and including EOS).  ``stop``: a ``threading.Event`` polled before
    every batch of forward passes (:class:`verifier._beside.Cancelled` once set; run beside a ranking).
    """
    from verifier.diagnose.rows import sequence_ends

    k = num_draft_tokens
    rng = np.random.default_rng(seed)
    tokens = np.asarray(seqs.tokens, dtype=np.int64)
    ends = sequence_ends(tokens, seqs.eos_token_id) if ends is None else np.asarray(ends)
    rows = [tuple(r) for r in tokens.tolist()]
    prompt = tuple(seqs.prompt)
    # one path: [row, t, target context, draft context]
    paths = [[i, 0, prompt, prompt] for i in range(len(rows)) for _ in range(draws)]
    logw = np.zeros(len(paths))
    active = [a for a in range(len(paths)) if ends[paths[a][0]] > 0]
    while active:
        treq, dreq = [], []
        for a in active:
            i, t, tc, dc = paths[a]
            left = int(ends[i]) - t
            x = rows[i]
            treq.extend(tc + x[t:t + j] for j in range(min(k, left - 1) + 1))
            dreq.extend(dc + x[t:t + j] for j in range(min(k - 1, left - 1) + 1))
        P, Q = _evaluate(seqs.target_after, treq, stop), _evaluate(seqs.draft_after, dreq, stop)
        nxt, pending = [], []  # pending: (path, rejected position n, latent drafts so far)
        groups: dict = defaultdict(list)  # paths in the same state share the round's weights
        for a in active:
            groups[tuple(paths[a][:4])].append(a)
        for (i, t, tc, dc), members in groups.items():
            left = int(ends[i]) - t
            x = rows[i]
            opts, ws = [], []
            acc = 1.0
            for n in range(min(k, left) + 1):
                if n < k and n + 1 <= left:  # n accepted, rejected at n, recovered x_{t+n}
                    p, q = P[tc + x[t:t + n]], Q[dc + x[t:t + n]]
                    m = np.minimum(p, q)
                    over = np.clip(q - p, 0.0, None)
                    res = np.clip(p - q, 0.0, None)
                    s = res.sum()
                    res = res / s if s > 0 else p
                    opts.append(("rej", n, over))
                    ws.append(acc * max(0.0, 1.0 - float(m.sum())) * float(res[x[t + n]]) if over.sum() > 0 else 0.0)
                    acc *= float(m[x[t + n]])
                elif n == k and n + 1 <= left:  # all k accepted, bonus x_{t+k}
                    opts.append(("bonus", n, None))
                    ws.append(acc * float(P[tc + x[t:t + k]][x[t + k]]))
            if left <= k:  # the row ends inside this round: every remaining token an accepted draft
                acc_all = 1.0
                for j in range(left):
                    acc_all *= float(np.minimum(P[tc + x[t:t + j]], Q[dc + x[t:t + j]])[x[t + j]])
                opts.append(("end", left, None))
                ws.append(acc_all)
            w = np.asarray(ws)
            total = float(w.sum())
            members = np.asarray(members)
            if not total > 0:
                logw[members] = -np.inf
                continue
            logw[members] += np.log(total)
            picks = rng.choice(len(w), size=len(members), p=w / total)
            for o in np.unique(picks):
                kind, n, over = opts[o]
                chosen = members[picks == o]
                if kind == "end" or t + n + 1 >= ends[i]:
                    continue
                if kind == "bonus":
                    seg = x[t:t + k + 1]
                    for a in chosen.tolist():
                        paths[a] = [i, t + k + 1, tc + seg, dc + seg]
                        nxt.append(a)
                    continue
                ds = rng.choice(len(over), size=len(chosen), p=over / over.sum())  # the rejected draft, given the rejection
                pending.extend((a, n, [int(d)]) for a, d in zip(chosen.tolist(), ds.tolist()))
        # drafts after the rejected one: plain draft samples along the stale draft context, batched per step
        for _ in range(k - 1):
            need = [(a, n, ds) for a, n, ds in pending if n + len(ds) < k]
            if not need:
                break
            ctxs = [paths[a][3] + rows[paths[a][0]][paths[a][1]:paths[a][1] + n] + tuple(ds) for a, n, ds in need]
            Qd = _evaluate(seqs.draft_after, ctxs, stop)
            for (a, n, ds), c in zip(need, ctxs):
                q = Qd[c]
                ds.append(int(rng.choice(len(q), p=q / q.sum())))
        for a, n, ds in pending:
            i, t, tc, dc = paths[a]
            x = rows[i]
            acc_seg, y = x[t:t + n], (x[t + n],)
            paths[a] = [i, t + n + 1, tc + acc_seg + tuple(ds) + y, dc + acc_seg + tuple(ds[:k - 1 - n]) + y]
            nxt.append(a)
        active = nxt
    return logw.reshape(len(rows), draws)


def _log_mean(lw: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        top = lw.max(axis=1, keepdims=True)
        safe = np.where(np.isfinite(top), top, 0.0)
        return (safe + np.log(np.exp(lw - safe).mean(axis=1, keepdims=True)))[:, 0]


def kv_stale_mc_log_likelihood(seqs, num_draft_tokens: int, *, per_position: bool = False,
                               draws: int = MC_DRAWS, seed: int = MC_SEED, stop=None):
    """Log of the Monte Carlo estimate of each row's probability under the stale KV cache.

    Returns like :func:`verifier.diagnose.likelihood.log_likelihood`: (rows,) or ((rows,), (rows, steps)),
    the per-position part as differences of the estimated prefix log-probabilities (each prefix
    length its own run, seed ``seed + length``).
    """
    from verifier.diagnose.rows import sequence_ends

    ends = sequence_ends(np.asarray(seqs.tokens), seqs.eos_token_id)
    total = _log_mean(kv_stale_log_weights(seqs, num_draft_tokens, draws=draws, seed=seed, stop=stop))
    if not per_position:
        return total
    steps = seqs.tokens.shape[1]
    prev = np.zeros(len(ends))
    cond = np.zeros((len(ends), steps))
    for t in range(steps):
        cur = total if t == steps - 1 else _log_mean(kv_stale_log_weights(
            seqs, num_draft_tokens, draws=draws, seed=seed + t + 1, ends=np.minimum(ends, t + 1), stop=stop))
        live = t < ends
        with np.errstate(invalid="ignore"):
            cond[:, t] = np.where(live, cur - prev, 0.0)
        prev = np.where(live, cur, prev)
    return total, cond
