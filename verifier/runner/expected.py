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

from dataclasses import dataclass

import numpy as np

from verifier.errors import ConfigError
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig

__all__ = ["PositionLaws", "position_laws", "accepted_count_law", "MAX_PREFIXES"]

MAX_PREFIXES = 50_000  # prefixes enumerated per level; beyond this a cell is not computable in CI time


@dataclass
class PositionLaws:
    """Expected laws of the first positions of a sample set.

    Attributes
    ----------
    marginals : dict[int, np.ndarray]
        Position t (1-based) -> shape (vocab + 1,) float64; index ``vocab`` = row already ended.
    joint : np.ndarray or None
        Law of the first ``joint_tokens`` emitted tokens, flattened row-major from shape
        ``(vocab + 1,) * joint_tokens`` (index ``vocab`` = ended), float64.
    """

    marginals: dict[int, np.ndarray]
    joint: np.ndarray | None


MAX_JOINT_CATEGORIES = 2_000_000  # (vocab + 1) ** joint_tokens; beyond this the joint cell is refused


def _check_size(n: int, what: str) -> None:
    if n > MAX_PREFIXES:
        raise ConfigError(
            f"{what} needs {n} target prefixes (> {MAX_PREFIXES}); allowed: fewer gof_positions or joint_tokens, "
            "or a sampling config with top_k/top_p that keeps the prefix tree small"
        )


def position_laws(ref: ReferenceModel, prompt: tuple[int, ...], sampling: SamplingConfig,
                  max_position: int, joint_tokens: int = 0) -> PositionLaws:
    """Marginal laws of positions 1..``max_position`` and the joint law of the first ``joint_tokens``.

    Parameters
    ----------
    ref : ReferenceModel
        The target.
    prompt : tuple of int
    sampling : SamplingConfig
    max_position : int
        Last position (1-based) whose marginal is needed.
    joint_tokens : int, default 0
        0 for no joint law, else J >= 2.

    Raises
    ------
    ConfigError
        If the prefix tree to enumerate exceeds :data:`MAX_PREFIXES` or the joint law has more
        than :data:`MAX_JOINT_CATEGORIES` categories.
    """
    vocab, eos = ref.vocab_size, ref.eos_token_id
    if joint_tokens and (vocab + 1) ** joint_tokens > MAX_JOINT_CATEGORIES:
        raise ConfigError(f"joint_tokens={joint_tokens} gives {(vocab + 1) ** joint_tokens} categories at vocab {vocab}; "
                          f"allowed: at most {MAX_JOINT_CATEGORIES} (use joint_tokens = 2 or a smaller vocabulary)")
    prefixes = np.array([prompt], dtype=np.int64)
    codes = np.zeros(1, dtype=np.int64)  # flattened joint index of each prefix's emitted tokens
    weights = np.ones(1)
    ended_mass = 0.0
    ended_codes: list[tuple[np.ndarray, np.ndarray, int]] = []  # (codes, mass, depth) of rows ended by EOS
    marginals: dict[int, np.ndarray] = {}
    joint = None
    depth = max(max_position, joint_tokens, 1)
    for t in range(1, depth + 1):
        _check_size(len(prefixes), f"the expected law of position {t}")
        probs = ref.next_probs(prefixes, sampling) if len(prefixes) else np.zeros((0, vocab))
        path = weights[:, None] * probs  # (num_prefixes, vocab)
        law = np.zeros(vocab + 1)
        law[:vocab] = path.sum(axis=0)
        law[vocab] = ended_mass
        marginals[t] = law
        if t == joint_tokens:
            joint = np.zeros((vocab + 1) ** joint_tokens)
            np.add.at(joint, (codes[:, None] * (vocab + 1) + np.arange(vocab)[None, :]).ravel(), path.ravel())
            for c, m, d in ended_codes:  # rows ended at depth d: pad the remaining positions with "ended"
                pad = 0
                for _ in range(joint_tokens - d):
                    pad = pad * (vocab + 1) + vocab
                np.add.at(joint, c * (vocab + 1) ** (joint_tokens - d) + pad, m)
        if t == depth:
            break
        keep = path > 0
        if eos is not None:
            ended_mass += float(path[:, eos].sum())
            ended_codes.append((codes * (vocab + 1) + eos, path[:, eos].copy(), t))
            keep[:, eos] = False
        rows, toks = np.nonzero(keep)
        prefixes = np.concatenate([prefixes[rows], toks[:, None]], axis=1)
        codes = codes[rows] * (vocab + 1) + toks
        weights = path[rows, toks]
    return PositionLaws({t: m for t, m in marginals.items() if t <= max_position}, joint)


def accepted_count_law(ref: ReferenceModel, draft_ref: ReferenceModel, prompt: tuple[int, ...],
                       sampling: SamplingConfig, num_draft_tokens: int) -> np.ndarray:
    """Law of the accepted drafts in the first round, shape (num_draft_tokens + 1,), float64.

    Entry ``j`` is P(j drafts accepted); entry ``k`` means all accepted (bonus token emitted).

    Raises
    ------
    ConfigError
        If the draft prefix tree exceeds :data:`MAX_PREFIXES`.
    """
    k, eos = num_draft_tokens, ref.eos_token_id
    law = np.zeros(k + 1)
    prefixes = np.array([prompt], dtype=np.int64)
    weights = np.ones(1)
    for i in range(k):
        _check_size(len(prefixes), f"the accepted-count law at k={k}")
        if not len(prefixes):
            break
        p = ref.next_probs(prefixes, sampling)
        q = draft_ref.next_probs(prefixes, sampling)
        accepted = weights[:, None] * np.minimum(p, q)  # P(path, draft x proposed and accepted)
        law[i] += float(weights.sum() - accepted.sum())  # rejected at draft position i + 1
        keep = accepted > 0
        if eos is not None:
            law[i + 1] += float(accepted[:, eos].sum())  # an accepted EOS ends the round
            keep[:, eos] = False
        rows, toks = np.nonzero(keep)
        prefixes = np.concatenate([prefixes[rows], toks[:, None]], axis=1)
        weights = accepted[rows, toks]
    law[k] += float(weights.sum())
    return np.clip(law, 0.0, None) / law.sum()
