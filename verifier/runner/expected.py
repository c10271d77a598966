"""Expected laws of a sample set under the null "the decoder samples from the target".

Computed in float64 from the target's processed probs (:class:`~verifier.runner.models.ReferenceModel`)
by enumerating the target's prefix tree -- only branches with positive probability, so top-k /
top-p configs stay small -- for the first positions of a fixed prompt:

* :func:`position_laws`: the marginal law of emitted token ``t`` for ``t = 1..max_position``
  over ``vocab + 1`` categories (the last one, :data:`ENDED`, means the row ended with EOS before
  position ``t``), and the joint law of positions (1, 2).
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
    joint12 : np.ndarray or None
        Shape (vocab, vocab + 1): P(token 1 = a, token 2 = b), b = vocab when token 1 was EOS.
    """

    marginals: dict[int, np.ndarray]
    joint12: np.ndarray | None


def _check_size(n: int, what: str) -> None:
    if n > MAX_PREFIXES:
        raise ConfigError(
            f"{what} needs {n} target prefixes (> {MAX_PREFIXES}); allowed: fewer gof_positions, "
            "or a sampling config with top_k/top_p that keeps the prefix tree small"
        )


def position_laws(ref: ReferenceModel, prompt: tuple[int, ...], sampling: SamplingConfig,
                  max_position: int, joint: bool) -> PositionLaws:
    """Marginal laws of positions 1..``max_position`` (and the (1, 2) joint) after ``prompt``.

    Raises
    ------
    ConfigError
        If the prefix tree to enumerate exceeds :data:`MAX_PREFIXES`.
    """
    vocab, eos = ref.vocab_size, ref.eos_token_id
    prefixes = np.array([prompt], dtype=np.int64)
    weights = np.ones(1)
    ended = 0.0
    marginals: dict[int, np.ndarray] = {}
    joint12 = None
    first_probs = None
    depth = max(max_position, 2 if joint else 1)
    for t in range(1, depth + 1):
        _check_size(len(prefixes), f"the expected law of position {t}")
        probs = ref.next_probs(prefixes, sampling) if len(prefixes) else np.zeros((0, vocab))
        path = weights[:, None] * probs  # (num_prefixes, vocab)
        law = np.zeros(vocab + 1)
        law[:vocab] = path.sum(axis=0)
        law[vocab] = ended
        marginals[t] = law
        if t == 1:
            first_probs = probs[0]
        if t == 2 and joint:
            joint12 = np.zeros((vocab, vocab + 1))
            firsts = prefixes[:, len(prompt)]
            joint12[firsts, :vocab] = path
            if eos is not None:
                joint12[eos, vocab] = first_probs[eos]
        if t == depth:
            break
        keep = path > 0
        if eos is not None:
            ended += float(path[:, eos].sum())
            keep[:, eos] = False
        rows, toks = np.nonzero(keep)
        prefixes = np.concatenate([prefixes[rows], toks[:, None]], axis=1)
        weights = path[rows, toks]
    return PositionLaws({t: m for t, m in marginals.items() if t <= max_position}, joint12)


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
