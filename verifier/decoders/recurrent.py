"""Speculative decoding over a recurrent (state-space) target, with the state rolled back (issue 29, bug kind 8).

Glossary as in :mod:`verifier.decoders.speculative`.  A round: the drafter proposes ``d_1..d_k`` from its processed
probs q (or, with probability ``skip_prob``, nothing: a *draftless round*); the target consumes the pending token
``x`` and the drafts one at a time, keeping a snapshot of its state after each (the per-position states), which
gives the processed probs p at the k draft positions and the bonus position; :func:`~verifier.decoders.verify_chain`
accepts ``m`` drafts and emits the recovered or bonus token; the state is then **rolled back** to the snapshot
after ``x, d_1..d_m`` -- a state has no column to hide, so rolling back the token position (what fixes a KV cache)
is not enough.  A draftless row emits ``y ~ p_1`` and keeps the state after ``x``.

The drafter is a stateless n-gram table read on the true emitted context (a :class:`~verifier.exact.TabularLM` or
:class:`~verifier.models.TabularCausalLM`): its rollback is never in question here.  The target is any adapter of
:mod:`verifier.models.recurrent` (a :class:`~verifier.exact.recurrent.RecurrentLM`, whose law
:func:`verifier.exact.recurrent.recurrent_law` enumerates exactly, or a transformers Mamba).  No EOS: rows run to
``max_new_tokens``.  The mutants (:mod:`verifier.decoders.recurrent_mutants`) change only :meth:`_roll_back`.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import torch

from verifier.decoders.kernels import sample_from_probs, verify_chain
from verifier.decoders.speculative import MAX_NUM_DRAFT_TOKENS, _Output
from verifier.errors import invalid_argument
from verifier.exact.tabular import TabularLM
from verifier.models.recurrent import STATE_PARTS, as_recurrent_target
from verifier.models.tabular import TabularCausalLM
from verifier.protocols import PADDING_TOKEN_ID, DecoderStats
from verifier.sampling import SamplingConfig, processed_probs

__all__ = ["RecurrentSpeculativeDecoder"]


def _draft_table(draft) -> tuple[torch.Tensor, int]:
    """(logits table (vocab ** context_len, vocab) float64, context_len) of an n-gram drafter."""
    if isinstance(draft, TabularLM):
        draft = TabularCausalLM(draft)
    if not isinstance(draft, TabularCausalLM):
        raise invalid_argument("draft", type(draft).__name__, "a TabularLM or TabularCausalLM (a stateless n-gram drafter)")
    return draft.table_logits.to(torch.float64).cpu(), draft.context_len


class RecurrentSpeculativeDecoder:
    """Reference speculative decoding over a recurrent target: the state rolled back to the accepted prefix.

    Parameters
    ----------
    target : RecurrentLM, recurrent adapter or transformers state-space causal LM
        See :func:`verifier.models.recurrent.as_recurrent_target`.
    draft : TabularLM or TabularCausalLM
        Stateless n-gram drafter with the target's vocabulary.
    num_draft_tokens : int, default 4
        k, drafts proposed in a round that drafts, 1..32.
    skip_prob : float, default 0.0
        Probability that a row's round proposes nothing (the intermittent drafter), in [0, 1).
    name : str, default "recurrent_reference"

    Raises
    ------
    InvalidArgumentError
        Bad k or ``skip_prob``, a drafter that is not an n-gram table, a vocabulary mismatch.

    Notes
    -----
    Leviathan et al. 2023 Alg. 1 / Chen et al. 2023 Alg. 2 with the target stepped one token at a time (k + 1 steps
    a round; a state-space layer's recurrent form).  Its law is the target's for every k and ``skip_prob``.
    """

    restore_parts: tuple[str, ...] = STATE_PARTS  # the parts of the state a rollback restores (mutants: fewer)

    def __init__(self, target, draft, num_draft_tokens: int = 4, *, skip_prob: float = 0.0,
                 name: str = "recurrent_reference") -> None:
        k = num_draft_tokens
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_NUM_DRAFT_TOKENS:
            raise invalid_argument("num_draft_tokens", k, f"an integer in 1..{MAX_NUM_DRAFT_TOKENS}")
        if isinstance(skip_prob, bool) or not isinstance(skip_prob, (int, float)) or not 0 <= skip_prob < 1:
            raise invalid_argument("skip_prob", skip_prob, "a probability in [0, 1)")
        self.target = as_recurrent_target(target)
        self.draft_logits, self.draft_context_len = _draft_table(draft)
        self.vocab_size = self.target.vocab_size
        if self.draft_logits.shape[1] != self.vocab_size:
            raise invalid_argument("draft", f"<vocab {self.draft_logits.shape[1]}>", f"vocab_size={self.vocab_size}")
        self.num_draft_tokens, self.skip_prob, self.name = int(k), float(skip_prob), name
        self.eos_token_id = None
        self.min_prompt_len = max(self.target.min_prompt_len, self.draft_context_len, 1)
        self.settings = {"skip_prob": self.skip_prob}
        self.last_stats: DecoderStats | None = None

    def _draft_probs(self, context: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
        """Processed draft probs q (batch, vocab) after ``context`` (batch, context_len)."""
        index = torch.zeros(context.shape[0], dtype=torch.int64)
        for j in range(self.draft_context_len):
            index = index * self.vocab_size + context[:, j]
        return processed_probs(self.draft_logits[index], sampling)

    def _roll_back(self, st: dict, accepted: torch.Tensor, drafted: torch.Tensor) -> None:
        """Put each row's state back to its snapshot after ``x, d_1..d_m`` (m = ``accepted``; a draftless row: x).

        ``st["snapshots"][i]``: the state after ``x, d_1..d_i``; the state is now the one after ``d_k``.
        """
        target, snaps = self.target, st["snapshots"]
        target.restore(snaps[0], ~drafted, STATE_PARTS)  # a draftless row proposed (and fed) no drafts
        for i in range(self.num_draft_tokens):  # m = k: the state after d_k is already the right one
            target.restore(snaps[i], drafted & (accepted == i), self.restore_parts)

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: SamplingConfig,
                 seed: int) -> np.ndarray:
        """Sample ``num_samples`` rows of ``max_new_tokens`` tokens by speculative decoding.

        Returns
        -------
        np.ndarray, shape (num_samples, max_new_tokens), int64

        Raises
        ------
        InvalidArgumentError
            Counts < 1, seed < 0, a prompt shorter than ``min_prompt_len`` or with an id outside the vocabulary,
            ``sampling`` not a SamplingConfig or with a repetition penalty (not supported here).
        """
        for label, value, low in (("num_samples", num_samples, 1), ("max_new_tokens", max_new_tokens, 1), ("seed", seed, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise invalid_argument(label, value, f"an integer >= {low}")
        if not isinstance(sampling, SamplingConfig) or sampling.repetition_penalty is not None:
            raise invalid_argument("sampling", sampling, "a SamplingConfig without repetition_penalty")
        prompt = [int(t) for t in prompt_ids]
        if len(prompt) < self.min_prompt_len or any(not 0 <= t < self.vocab_size for t in prompt):
            raise invalid_argument("prompt_ids", prompt, f"at least {self.min_prompt_len} ids in 0..{self.vocab_size - 1}")
        t0 = time.perf_counter()
        k, batch, c = self.num_draft_tokens, num_samples, self.draft_context_len
        gen = torch.Generator().manual_seed(int(seed))
        self.target.start(prompt, batch)
        st = {"checkpoint": self.target.snapshot()}
        out = _Output(batch, max_new_tokens, None, torch.device("cpu"))
        history = torch.cat([torch.tensor(prompt).expand(batch, -1), out.tokens], dim=1)  # prompt + emitted
        pending = torch.full((batch,), prompt[-1], dtype=torch.int64)
        live = torch.ones(batch, dtype=torch.bool)
        rows = torch.arange(batch)
        counts, rounds, first_round = [], 0, None
        while live.any():
            drafted = torch.rand(batch, dtype=torch.float64, generator=gen) >= self.skip_prob
            # 1. draft d_1..d_k ~ q on the true context (last c tokens of prompt + emitted)
            end = len(prompt) + out.written
            context = history.gather(1, (end[:, None] - c + torch.arange(c)[None]).clamp(min=0)) if c else history[:, :0]
            drafts, qs = [], []
            for _ in range(k):
                q = self._draft_probs(context, sampling)
                token = sample_from_probs(q, torch.rand(batch, dtype=torch.float64, generator=gen))
                drafts.append(token)
                qs.append(q)
                context = torch.cat([context[:, 1:], token[:, None]], dim=1) if c else context
            draft_ids = torch.stack(drafts, dim=1)
            # 2. target: step x, d_1..d_k, snapshot the state after each -> p at k + 1 positions
            logits, snaps = [], []
            for token in [pending] + drafts:
                logits.append(self.target.step(token))
                snaps.append(self.target.snapshot())
            p = processed_probs(torch.stack(logits, dim=1), sampling)
            st["snapshots"], st["fed"] = snaps, [pending] + drafts
            # 3. verify; a draftless row emits y ~ p_1 instead
            emitted = verify_chain(p, torch.stack(qs, dim=1), draft_ids, gen)
            plain = sample_from_probs(p[:, 0], torch.rand(batch, dtype=torch.float64, generator=gen))
            emitted = torch.where(drafted[:, None], emitted, torch.full_like(emitted, PADDING_TOKEN_ID))
            emitted[:, 0] = torch.where(drafted, emitted[:, 0], plain)
            num_emitted = (emitted != PADDING_TOKEN_ID).sum(dim=1)
            agree = (emitted[:, :k] == draft_ids).to(torch.int64).cumprod(dim=1).sum(dim=1)
            accepted = torch.where(drafted, torch.minimum(agree, num_emitted - 1), 0)
            # 4. roll back the state to x, d_1..d_m (a draftless row: x)
            self._roll_back(st, accepted, drafted)
            counts.append(accepted[live & drafted])
            if first_round is None and self.skip_prob == 0:  # with draftless rounds a first round may propose nothing
                first_round = accepted.clone()
            rounds += int(live.sum())
            finished = out.write(rows, emitted, torch.where(live, num_emitted, 0))
            live = live & ~finished
            history[:, len(prompt):] = out.tokens
            pending = emitted.gather(1, (num_emitted - 1)[:, None])[:, 0]
        accepted_counts = torch.cat(counts).numpy().astype(np.int64)
        self.last_stats = DecoderStats(
            rounds=rounds, accepted_counts=accepted_counts, num_draft_tokens=k,
            first_round_accepted=None if first_round is None else first_round.numpy().astype(np.int64),
            extra={"seconds": time.perf_counter() - t0, "device": "cpu"})
        return out.tokens.numpy()
