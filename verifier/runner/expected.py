"""Expected laws of a sample set under the null "the decoder samples from the target".

Computed in float64 from the target's processed probs (:class:`~verifier.runner.models.ReferenceModel`)
by enumerating the target's prefix tree -- only branches with positive probability, so top-k /
top-p configs stay small -- for the first positions of a fixed prompt:

* :func:`position_laws`: the marginal law of emitted token ``t`` for ``t = 1..max_position``
  over ``vocab + 1`` categories (the last one means the row ended with EOS before position
  ``t``), and the joint law of the first ``joint_tokens`` emitted tokens.
* :func:`accepted_count_law`: the law of the number of accepted drafts in the first round of the
  canonical rule (Leviathan et al. 2023, Algorithm 1: draft ``x`` accepted with probability
  ``min(1, p(x)/q(x))``, so ``P(N >= j) = sum over draft paths of prod_i min(p_i, q_i)(x_i)``).
  An accepted EOS ends the round, counting the drafts accepted so far (as
  ``verifier.exact.accepted_count_law``).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from verifier.errors import ConfigError
from verifier.protocols import PADDING_TOKEN_ID
from verifier.runner.memory import rows_per_batch
from verifier.runner.models import ReferenceModel
from verifier.runner.topmass import TopMass
from verifier.sampling import SamplingConfig

__all__ = ["PositionLaws", "position_laws", "shared_position_laws", "accepted_count_law", "MAX_PREFIXES", "MAX_LAW_ELEMENTS",
           "MAX_JOINT_CATEGORIES"]

MAX_PREFIXES = 50_000  # prefixes enumerated per level; beyond this the level keeps the target's top prefixes by mass
MAX_LAW_ELEMENTS = 2**28  # prefixes x vocab next-token probs computed per level (about 30 s of a tiny model on 2 cores)
MAX_JOINT_CATEGORIES = 2_000_000  # joint categories kept (dense (vocab + 1) ** J, else the top ones by mass + "other")


def prefix_cap(vocab: int) -> int:
    """Prefixes one level of the enumeration evaluates: ``min(MAX_PREFIXES, MAX_LAW_ELEMENTS // vocab)``."""
    return max(1, min(MAX_PREFIXES, MAX_LAW_ELEMENTS // max(1, vocab)))


@dataclass
class PositionLaws:
    """Expected laws of the first positions of a sample set.

    Exact (``top_prefixes is None``) when every level of the target's prefix tree fits
    :func:`prefix_cap`.  Otherwise the level that does not fit keeps the target's top
    ``top_prefixes`` prefixes by mass (a data-blind choice: it depends on the target only) and the
    rest of the mass goes to one extra category, "other prefix", at every later position; the
    laws stay exact laws of these pooled categories.

    Attributes
    ----------
    marginals : dict[int, np.ndarray]
        Position t (1-based) -> float64 of shape (vocab + 1,): index ``vocab`` = row already ended;
        shape (vocab + 2,) where t is pooled (:meth:`pooled`): index ``vocab + 1`` = "other prefix".
    joint : np.ndarray or None
        Law of the first ``joint_tokens`` emitted tokens: dense, flattened row-major from shape
        ``(vocab + 1,) * joint_tokens`` (index ``vocab`` = ended), or -- when ``joint_keys`` is set --
        one entry per kept category (``joint_keys`` order) plus a last entry "other".
    joint_keys : np.ndarray or None
        Sorted int64 keys of the kept joint categories (sparse form, see :meth:`joint_codes`).
    top_prefixes : int or None
        Prefixes kept per level when pooled; None when exact.
    target_passes : int
        Prefixes the target was evaluated on beyond the prompt (the extra target passes).
    """

    marginals: dict[int, np.ndarray]
    joint: np.ndarray | None
    joint_keys: np.ndarray | None = None
    top_prefixes: int | None = None
    target_passes: int = 0
    vocab: int = 0
    eos: int | None = None
    joint_tokens: int = 0
    pooled_from: int | None = None  # first position whose law has the "other prefix" category
    levels: list = field(default_factory=list)  # levels[d - 1]: sorted child keys (parent * vocab + token) of depth d
    parents: list = field(default_factory=list)  # parents[d - 1] / tokens[d - 1]: the prefixes evaluated at depth d
    tokens: list = field(default_factory=list)
    offsets: list = field(default_factory=list)  # sparse joint key offset of depth d (offsets[d - 1])

    def pooled(self, t: int) -> bool:
        """Whether position ``t``'s law carries the "other prefix" category."""
        return self.pooled_from is not None and t >= self.pooled_from

    def note(self) -> str:
        """One sentence on the pooling (empty when exact)."""
        if self.top_prefixes is None and self.joint_keys is None:
            return ""
        parts = []
        if self.top_prefixes is not None:
            parts.append(f"the target's top {self.top_prefixes} prefixes by mass per level + 'other prefix'")
        if self.joint_keys is not None:
            parts.append(f"joint: top {len(self.joint_keys)} outcomes by mass + 'other'")
        return "pooled over " + "; ".join(parts) + f" ({self.target_passes} extra target passes)"

    def _walk(self, tokens: np.ndarray, upto: int) -> tuple[np.ndarray, np.ndarray]:
        """(idx[rows, upto], ended_at[rows]): index of each row's prefix of depth d among the
        prefixes evaluated at depth d (-1: outside them), and the position of its EOS (0: none)."""
        rows = len(tokens)
        idx = np.full((rows, upto), -1, dtype=np.int64)
        idx[:, 0] = 0
        ended_at = np.zeros(rows, dtype=np.int64)
        for d in range(1, upto + 1):
            x = tokens[:, d - 1]
            newly = (ended_at == 0) & ((x == PADDING_TOKEN_ID) | ((x == self.eos) if self.eos is not None else False))
            ended_at[newly] = d  # EOS emitted at d (padding without EOS: treated as ended there)
            if d == upto:
                break
            go = (idx[:, d - 1] >= 0) & (ended_at == 0)
            keys = idx[go, d - 1] * self.vocab + x[go]
            child = self.levels[d - 1] if d - 1 < len(self.levels) else np.zeros(0, dtype=np.int64)
            pos = np.searchsorted(child, keys)
            hit = (pos < len(child)) & (child[np.minimum(pos, max(len(child) - 1, 0))] == keys) if len(child) else np.zeros(len(keys), bool)
            col = np.full(len(keys), -1, dtype=np.int64)
            col[hit] = pos[hit]
            idx[go, d] = col
        return idx, ended_at

    def marginal_codes(self, tokens: np.ndarray, t: int) -> np.ndarray:
        """Category of each row at position ``t`` in ``marginals[t]``: token id, ``vocab`` = ended,
        ``vocab + 1`` = other prefix (only where :meth:`pooled`)."""
        col = tokens[:, t - 1]
        code = np.where(col == PADDING_TOKEN_ID, self.vocab, col)
        if not self.pooled(t):
            return code
        idx, ended_at = self._walk(tokens, t)
        before = (ended_at > 0) & (ended_at < t)
        tracked = np.where(before, idx[np.arange(len(tokens)), np.maximum(ended_at - 1, 0)] >= 0, idx[:, t - 1] >= 0)
        return np.where(tracked, code, self.vocab + 1)

    def joint_codes(self, tokens: np.ndarray) -> np.ndarray:
        """Category of each row in ``joint`` (dense: the row-major code; sparse: index into ``joint_keys``,
        ``len(joint_keys)`` = other)."""
        jt, v = self.joint_tokens, self.vocab
        if self.joint_keys is None:
            c = np.zeros(len(tokens), dtype=np.int64)
            for j in range(jt):
                c = c * (v + 1) + np.where(tokens[:, j] < 0, v, tokens[:, j])
            return c
        idx, ended_at = self._walk(tokens, jt)
        depth = np.where(ended_at > 0, ended_at, jt)
        rows = np.arange(len(tokens))
        prefix = idx[rows, depth - 1]
        last = tokens[rows, depth - 1]
        last = np.where(last == PADDING_TOKEN_ID, self.eos if self.eos is not None else 0, last)
        keys = np.asarray(self.offsets, dtype=np.int64)[depth - 1] + prefix * v + last
        pos = np.searchsorted(self.joint_keys, keys)
        ok = (prefix >= 0) & (pos < len(self.joint_keys))
        ok[ok] = self.joint_keys[pos[ok]] == keys[ok]
        return np.where(ok, pos, len(self.joint_keys))

    def joint_counts(self, tokens: np.ndarray) -> np.ndarray:
        """Counts of the rows over the categories of ``joint``."""
        return np.bincount(self.joint_codes(tokens), minlength=len(self.joint)).astype(np.int64)

    def joint_label(self, c: int, tok_label) -> str:
        """Name of joint category ``c`` (``tok_label(token id)`` names one token; ``vocab`` = ended)."""
        jt, v = self.joint_tokens, self.vocab
        if self.joint_keys is None:
            parts = []
            for _ in range(jt):
                c, r = divmod(c, v + 1)
                parts.append(tok_label(r))
            return "(" + ",".join(reversed(parts)) + ")"
        if c >= len(self.joint_keys):
            return "<other>"
        key = int(self.joint_keys[c])
        d = max(i + 1 for i, off in enumerate(self.offsets) if off <= key)
        i, tok = divmod(key - self.offsets[d - 1], v)
        parts = [tok_label(tok)]
        for dd in range(d, 1, -1):
            parts.append(tok_label(int(self.tokens[dd - 1][i])))
            i = int(self.parents[dd - 1][i])
        return "(" + ",".join(reversed(parts)) + (",<ended>" * (jt - d)) + ")"


_SHARED: "weakref.WeakKeyDictionary[ReferenceModel, dict]" = weakref.WeakKeyDictionary()


def shared_position_laws(ref: ReferenceModel, prompt, sampling: SamplingConfig, max_position: int,
                         joint_tokens: int = 0) -> PositionLaws:
    """:func:`position_laws`, computed once per reference model and arguments while the model lives.

    The audit plans its n from these laws and the run then scores its cells with the same ones (the run
    reuses the audit's loaded pair: ``SuiteContext(..., pairs=)``), so they are enumerated once, not twice.
    The laws are read-only to every caller.
    """
    memo = _SHARED.setdefault(ref, {})
    key = (tuple(int(t) for t in prompt), sampling, int(max_position), int(joint_tokens))
    if key not in memo:
        memo[key] = position_laws(ref, tuple(prompt), sampling, max_position, joint_tokens)
    return memo[key]


def position_laws(ref: ReferenceModel, prompt: tuple[int, ...], sampling: SamplingConfig,
                  max_position: int, joint_tokens: int = 0) -> PositionLaws:
    """Marginal laws of positions 1..``max_position`` and the joint law of the first ``joint_tokens``.

    Memory: one batch of ``[prefixes, vocab]`` float64 at a time (:mod:`verifier.runner.memory`),
    the laws (O(vocab) each, the joint at most :data:`MAX_JOINT_CATEGORIES` entries) and the kept
    prefixes -- never ``[all prefixes, vocab]``.  Time: at most :func:`prefix_cap` target passes
    per level.

    Parameters
    ----------
    ref : ReferenceModel
        The target.
    prompt : tuple of int
    sampling : SamplingConfig
    max_position : int
        Last position (1-based) whose marginal is needed.
    joint_tokens : int, default 0
        0 for no joint law, else J >= 2 (J = 1 gives the first marginal as the "joint").

    Returns
    -------
    PositionLaws
        Exact where the prefix tree fits :func:`prefix_cap` per level and ``(vocab + 1) ** J``
        fits :data:`MAX_JOINT_CATEGORIES`; else pooled (:class:`PositionLaws`).
    """
    vocab, eos = ref.vocab_size, ref.eos_token_id
    cap = prefix_cap(vocab)
    batch = rows_per_batch(vocab * 8 * 4)  # path + probs + logits + the mask of one batch, float64
    dense_ok = bool(joint_tokens) and (vocab + 1) ** joint_tokens <= MAX_JOINT_CATEGORIES
    prefixes = np.array([prompt], dtype=np.int64)
    codes = np.zeros(1, dtype=np.int64)  # flattened dense joint index of each prefix's emitted tokens
    weights = np.ones(1)
    parent_idx = np.zeros(1, dtype=np.int64)
    ended_mass = other_mass = 0.0
    ended_codes: list[tuple[np.ndarray, np.ndarray, int]] = []  # (codes, mass, depth) of rows ended by EOS
    sparse_ended: list[tuple[np.ndarray, np.ndarray]] = []  # (sparse keys, mass) of rows ended before J
    laws = PositionLaws({}, None, vocab=vocab, eos=eos, joint_tokens=joint_tokens)
    depth = max(max_position, joint_tokens, 1)
    offset = 0
    for t in range(1, depth + 1):
        m = len(prefixes)
        laws.offsets.append(offset)
        laws.parents.append(parent_idx)
        laws.tokens.append(prefixes[:, -1] if t > 1 else np.zeros(1, dtype=np.int64))
        if t > 1:
            laws.target_passes += m
        law = np.zeros(vocab + 1 + (laws.pooled_from is not None))
        law[vocab] = ended_mass
        if laws.pooled_from is not None:
            law[vocab + 1] = other_mass
        sparse = t == joint_tokens and (laws.pooled_from is not None or not dense_ok)
        joint = np.zeros((vocab + 1) ** joint_tokens) if t == joint_tokens and not sparse else None
        cand = TopMass(cap)  # the next level's prefixes: the target's top ``cap`` by mass (module topmass)
        jtop = TopMass(MAX_JOINT_CATEGORIES) if sparse else None
        for s in range(0, m, batch):
            part = prefixes[s:s + batch]
            probs = ref.next_probs(part, sampling, len(prompt)) if len(part) else np.zeros((0, vocab))
            path = weights[s:s + batch, None] * probs  # (batch, vocab)
            del probs
            law[:vocab] += path.sum(axis=0)
            if joint is not None:
                np.add.at(joint, (codes[s:s + batch, None] * (vocab + 1) + np.arange(vocab)[None, :]).ravel(), path.ravel())
            if jtop is not None:
                jtop.offer_block(path, offset + s * vocab, vocab)
            if t == depth:
                continue
            if eos is not None:
                ended_mass += float(path[:, eos].sum())
                if t < joint_tokens:
                    if dense_ok:
                        ended_codes.append((codes[s:s + batch] * (vocab + 1) + eos, path[:, eos].copy(), t))
                    sparse_ended.append((offset + (s + np.arange(len(part))) * vocab + eos, path[:, eos].copy()))
            cand.offer_block(path, s * vocab, vocab, exclude_col=eos)
            del path
        laws.marginals[t] = law
        if joint is not None:
            for c, mass, d in ended_codes:  # rows ended at depth d: pad the remaining positions with "ended"
                pad = 0
                for _ in range(joint_tokens - d):
                    pad = pad * (vocab + 1) + vocab
                np.add.at(joint, c * (vocab + 1) ** (joint_tokens - d) + pad, mass)
            laws.joint = joint
        if jtop is not None:
            for keys, mass in sparse_ended:  # rows ended by EOS before J: outcomes of their own
                jtop.offer(keys, mass)
            laws.joint_keys, kept, jdropped = jtop.result()
            laws.joint = np.concatenate([kept, [other_mass + jdropped]])
        if t == depth:
            break
        child, cmass, dropped = cand.result()
        if cand.num_dropped:
            laws.top_prefixes = cap
            laws.pooled_from = laws.pooled_from or t + 1
            other_mass += dropped
        laws.levels.append(child)
        offset += m * vocab
        parent_idx, toks = np.divmod(child, vocab)
        prefixes = np.concatenate([prefixes[parent_idx], toks[:, None]], axis=1)
        if dense_ok:
            codes = codes[parent_idx] * (vocab + 1) + toks
        weights = cmass
    laws.marginals = {t: m for t, m in laws.marginals.items() if t <= max_position}
    return laws


def accepted_count_law(ref: ReferenceModel, draft_ref: ReferenceModel, prompt: tuple[int, ...],
                       sampling: SamplingConfig, num_draft_tokens: int) -> np.ndarray:
    """Law of the accepted drafts in the first round, shape (num_draft_tokens + 1,), float64.

    Entry ``j`` is P(j drafts accepted); entry ``k`` means all accepted (bonus token emitted).
    Streams the draft prefixes in batches (:mod:`verifier.runner.memory`).

    Raises
    ------
    ConfigError
        If a level of the draft prefix tree has more than :func:`prefix_cap` prefixes (the law is
        exact or nothing: the acceptance audit then reports no canonical law).
    """
    k, eos, vocab = num_draft_tokens, ref.eos_token_id, ref.vocab_size
    cap = prefix_cap(vocab)
    batch = rows_per_batch(vocab * 8 * 6)
    law = np.zeros(k + 1)
    prefixes = np.array([prompt], dtype=np.int64)
    weights = np.ones(1)
    for i in range(k):
        if len(prefixes) > cap:
            raise ConfigError(
                f"the accepted-count law at k={k} needs {len(prefixes)} draft prefixes of {i} tokens x vocab {vocab} "
                f"(> {cap} prefixes, MAX_LAW_ELEMENTS = {MAX_LAW_ELEMENTS} probs per level); allowed: acceptance = "
                "\"any\" (the acceptance audit is then reported without the canonical law), a smaller num_draft_tokens, "
                "or top_k / top_p that keep the draft prefix tree small")
        if not len(prefixes):
            break
        nxt_p, nxt_w, last = [], [], []
        for s in range(0, len(prefixes), batch):
            part = prefixes[s:s + batch]
            accepted = weights[s:s + batch, None] * np.minimum(ref.next_probs(part, sampling, len(prompt)),
                                                               draft_ref.next_probs(part, sampling, len(prompt)))
            law[i] += float(weights[s:s + batch].sum() - accepted.sum())  # rejected at draft position i + 1
            keep = accepted > 0
            if eos is not None:
                law[i + 1] += float(accepted[:, eos].sum())  # an accepted EOS ends the round
                keep[:, eos] = False
            if i == k - 1:  # the last draft: only the mass of "all accepted" is needed, not the prefixes
                last.append(accepted[keep].sum())
                continue
            rows, toks = np.nonzero(keep)
            nxt_p.append(np.concatenate([part[rows], toks[:, None]], axis=1))
            nxt_w.append(accepted[rows, toks])
        if i == k - 1:
            weights = np.asarray(last[0] if len(last) == 1 else sum(last)).reshape(-1)
            break
        prefixes = np.concatenate(nxt_p) if nxt_p else np.zeros((0, len(prompt) + i + 1), dtype=np.int64)
        weights = np.concatenate(nxt_w) if nxt_w else np.zeros(0)
    law[k] += float(weights.sum())
    return np.clip(law, 0.0, None) / law.sum()
