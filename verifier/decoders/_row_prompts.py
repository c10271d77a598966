"""Rows with their own prompts in one ``generate`` call: ``generate(..., row_prompts=)`` (internal).

The batch-composition axis's mixed-prompts levels (issue 29, bug kind 1; :mod:`verifier.suite.batch`) put filler rows
with prompts of other lengths beside the audited rows of one call.  The reference decoders run such a call as one
padded batch: every row's prompt context is left-padded to the longest with a masked dummy token, each row keeps its
own position counter (:meth:`verifier.decoders._runner.CacheRunner.prefill_rows`), its own last prompt token and, with
a penalty, its own prompt context -- so a row's law is that of its own prompt.  A call whose rows share one prompt
takes the plain path (one prefill, replicated), token for token the call without ``row_prompts``.
"""

from __future__ import annotations

from typing import Sequence

import torch

from verifier.sampling import context_codes
from verifier.validation import check_row_prompts

__all__ = ["row_prompt_list", "prefill", "last_tokens", "row_context"]


def row_prompt_list(prompt: list[int], row_prompts, num_samples: int, vocab_size: int,
                    min_len: int) -> list[tuple[int, ...]]:
    """Each row's prompt: ``row_prompts`` checked (:func:`verifier.validation.check_row_prompts`), or ``prompt`` for
    every row without it."""
    rows = check_row_prompts(row_prompts, num_samples, vocab_size, min_len)
    return [tuple(prompt)] * num_samples if rows is None else rows


def _shared(prompts: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    first = prompts[0]
    return first if all(p == first for p in prompts) else None


def prefill(runner, prompts: Sequence[tuple[int, ...]]) -> None:
    """Prefill ``runner`` with every row's prompt but its last token (fed as the first pending token)."""
    shared = _shared(prompts)
    if shared is not None:
        runner.prefill(list(shared[:-1]), len(prompts))
    else:
        runner.prefill_rows([p[:-1] for p in prompts])


def last_tokens(prompts: Sequence[tuple[int, ...]], device) -> torch.Tensor:
    """Each row's last prompt token, int64 (batch,)."""
    return torch.tensor([p[-1] for p in prompts], dtype=torch.int64, device=device)


def row_context(prompts: Sequence[tuple[int, ...]], vocab_size: int, device, sampling) -> torch.Tensor | None:
    """:func:`verifier.sampling.context_codes` of each row's own prompt, (batch, vocab); None without penalties."""
    shared = _shared(prompts)
    if shared is not None:
        return context_codes(list(shared), len(prompts), vocab_size, device, sampling=sampling)
    if not sampling.uses_context:
        return None
    return torch.cat([context_codes(list(p), 1, vocab_size, device, sampling=sampling) for p in prompts])
