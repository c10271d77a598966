"""The two plug-in contracts of the harness: :class:`Decoder` and :class:`VerificationKernel`.

Glossary (used in every module, report and docstring)
-----------------------------------------------------
target / draft
    The model whose distribution must be preserved (``target_probs``, p) and the cheaper model
    that proposes tokens (``draft_probs``, q).  Both are always *processed* probs
    (:func:`verifier.sampling.processed_probs`), float64.
round
    One proposal of ``num_draft_tokens`` (k) draft tokens plus one target verification pass.
accepted
    A draft token kept by the verification rule.
rejected position
    The first position of a round whose draft token is not accepted; everything after it is
    discarded.
residual
    ``max(0, p - q) / sum(max(0, p - q))`` at the rejected position.
recovered token
    The token sampled from the residual at the rejected position.
bonus token
    The extra token sampled from the target at position k + 1 when all k drafts are accepted.
emitted tokens
    What the decoder returns: accepted tokens, then the recovered or bonus token.
cell
    One (prompt, sampling config, k, position/statistic) unit that gets one hypothesis test.
mutant
    A decoder or rule with one deliberately injected defect (the bug zoo).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # annotations only: importing the protocols must not import torch
    import torch

    from verifier.sampling import SamplingConfig

__all__ = ["PADDING_TOKEN_ID", "ORIGIN_CODES", "Decoder", "DecoderStats", "TreeVerificationKernel", "VerificationKernel"]

PADDING_TOKEN_ID = -1  # fills emitted-token arrays after EOS and after a round's last emitted token
# origin of an emitted token (DecoderStats.origins); -1 = padding
ORIGIN_CODES = {0: "accepted", 1: "recovered", 2: "bonus", 3: "unverified draft"}


@dataclass
class DecoderStats:
    """What a decoder reports about its last ``generate`` call (optional for plugins).

    Attributes
    ----------
    rounds : int
        Verification rounds run, summed over rows.
    accepted_counts : np.ndarray, shape (num_rounds_total,), int64
        Number of accepted draft tokens in each round, in the order the rounds ran.
        ``accepted_counts[i] == k`` means the bonus token was emitted.
    num_draft_tokens : int
        k used for the call.
    first_round_accepted : np.ndarray or None, shape (num_samples,), int64
        Accepted draft tokens in each row's *first* round (``0 .. k``; ``-1`` for a row in which no
        speculative round ran).  What the acceptance audit reads: the per-position acceptance rates
        with confidence intervals beside the verdict, and the canonical rule's first-round law when a
        suite declares ``acceptance = "canonical"``.  None when not reported (the report then says
        "ENGINE REPORTS NO STATISTICS"; the bias verdict never needs it).
    extra : dict
        Free-form decoder-specific figures (timings, cache sizes).
    origins : np.ndarray or None, shape (num_samples, max_new_tokens), int8
        Optional origin of each emitted token (:data:`ORIGIN_CODES`: 0 accepted draft, 1 recovered,
        2 bonus, 3 unverified draft emitted after a rejection; -1 padding), for the diagnosis's
        localization (:mod:`verifier.diagnose.localize`).  None when the decoder does not report it.
    """

    rounds: int = 0
    accepted_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    num_draft_tokens: int = 0
    first_round_accepted: np.ndarray | None = None  # shape (num_samples,): accepted drafts in each row's first round
    extra: dict[str, Any] = field(default_factory=dict)
    origins: np.ndarray | None = None  # shape (num_samples, max_new_tokens), int8 ORIGIN_CODES, -1 padding

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / proposed draft tokens (NaN when no round ran)."""
        proposed = self.num_draft_tokens * len(self.accepted_counts)
        return float(self.accepted_counts.sum() / proposed) if proposed else float("nan")


@runtime_checkable
class Decoder(Protocol):
    """A sampler under test.  Third-party decoders plug in by ``module:factory``.

    ``generate`` returns ``int64`` of shape ``(num_samples, max_new_tokens)``: row i holds the
    emitted tokens of the i-th independent sample continuing ``prompt_ids``, padded with
    :data:`PADDING_TOKEN_ID` after EOS (EOS itself is emitted).  The same ``seed`` must give the
    same array.  A decoder may expose ``last_stats: DecoderStats`` after each call, ``name: str``
    and ``vocab_size: int``.
    """

    def generate(
        self,
        prompt_ids: Sequence[int],
        num_samples: int,
        max_new_tokens: int,
        sampling: SamplingConfig,
        seed: int,
    ) -> np.ndarray: ...


@runtime_checkable
class VerificationKernel(Protocol):
    """The verify step of speculative sampling as a pure function (level 2 of the design).

    Parameters
    ----------
    target_probs : torch.Tensor, shape (batch, num_draft_tokens + 1, vocab), float64
        Processed target probs at each draft position; the ``+ 1`` row is where the bonus token is
        sampled when all drafts are accepted.
    draft_probs : torch.Tensor, shape (batch, num_draft_tokens, vocab), float64
        Processed draft probs the draft tokens were sampled from.
    draft_token_ids : torch.Tensor, shape (batch, num_draft_tokens), int64
    generator : torch.Generator
        The only source of randomness.

    Returns
    -------
    torch.Tensor, shape (batch, num_draft_tokens + 1), int64
        Emitted tokens: accepted drafts, then the recovered or bonus token, then
        :data:`PADDING_TOKEN_ID`.
    """

    def __call__(
        self,
        target_probs: torch.Tensor,
        draft_probs: torch.Tensor,
        draft_token_ids: torch.Tensor,
        generator: torch.Generator,
    ) -> torch.Tensor: ...


@runtime_checkable
class TreeVerificationKernel(Protocol):
    """The verify step of tree (multi-draft) speculative sampling as a pure function.

    Node 0 is the root (the last emitted token, no draft token); nodes ``1 .. num_nodes - 1`` are
    draft tokens.  Nodes are in topological order (``parent_ids[i] < i``) and the children of a
    node are verified in index order.

    Parameters
    ----------
    target_probs : torch.Tensor, shape (batch, num_nodes, vocab), float64
        Processed target probs after the path to each node: node i's row verifies i's children and
        is where the recovered or bonus token is drawn when i is the last accepted node.
    draft_probs : torch.Tensor, shape (batch, num_nodes, vocab), float64
        Processed draft probs after the path to each node: the law node i's children were drawn
        from (before any without-replacement update).  Rows of leaves are unused.
    parent_ids : torch.Tensor, shape (num_nodes,), int64
        ``parent_ids[0] == -1``; ``0 <= parent_ids[i] < i`` otherwise.  One static tree per call.
    draft_token_ids : torch.Tensor, shape (batch, num_nodes), int64
        Token of each node; column 0 (the root) is ignored.
    generator : torch.Generator
        The only source of randomness.

    Returns
    -------
    torch.Tensor, shape (batch, max_depth + 1), int64
        Emitted tokens: the accepted path's tokens, then the recovered or bonus token, then
        :data:`PADDING_TOKEN_ID`.  ``max_depth`` is the number of draft tokens on the longest path.
    """

    def __call__(
        self,
        target_probs: torch.Tensor,
        draft_probs: torch.Tensor,
        parent_ids: torch.Tensor,
        draft_token_ids: torch.Tensor,
        generator: torch.Generator,
    ) -> torch.Tensor: ...
