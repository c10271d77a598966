"""The distinct teacher-forcing inputs of a sample set: each prefix goes through the target once.

At T < 1 with top-k, and at T = 1 with short rows, the rows of a sample set share few prefixes (64 for 25,257 rows at
top-k 8, k = 1; 182 for 53,474 rows at T = 1, k = 1 on the shipped pair), so the statistics stage runs the model on
those and indexes the rows into them (:meth:`verifier.runner.models.ReferenceModel.teacher_forced`,
:func:`verifier.runner.pitscore.pit_terms`).
"""

from __future__ import annotations

import numpy as np
import torch

from verifier.protocols import PADDING_TOKEN_ID

__all__ = ["forcing_inputs", "distinct_prefixes"]


def forcing_inputs(prompt: torch.Tensor, tokens: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, inputs)``: ``tokens`` as int64 with the padding -1 read as id 0 (those positions' probs are never
    used), and the teacher-forcing inputs ``prompt + row[:-1]``, shapes (n, T) and (n, prompt_len + T - 1)."""
    part = torch.as_tensor(tokens, dtype=torch.long)
    part = torch.where(part == PADDING_TOKEN_ID, torch.zeros_like(part), part)
    return part, torch.cat([prompt.expand(len(part), -1), part[:, :-1]], dim=1)


def distinct_prefixes(prompt: torch.Tensor, tokens: np.ndarray, budget_rows: int) -> tuple[torch.Tensor, np.ndarray] | None:
    """The distinct teacher-forcing inputs ``prompt + row[:-1]`` of ``tokens`` and each row's index among them.

    Parameters
    ----------
    prompt : torch.Tensor, shape (prompt_len,), int64
    tokens : np.ndarray, shape (num_samples, max_new_tokens), int64, -1 after EOS (read as id 0: those positions'
        probs are never used)
    budget_rows : int
        The most distinct inputs worth holding at once (one batch's memory budget).

    Returns
    -------
    (uniq, inverse) or None
        ``uniq`` (num_distinct, prompt_len + max_new_tokens - 1) int64 and ``inverse`` (num_samples,) int64 with
        ``uniq[inverse[i]]`` the input of row i; None when there are more than ``budget_rows`` of them or more than half
        as many as rows (a batch-by-batch pass then costs about the same).
    """
    part, seqs = forcing_inputs(prompt, tokens)
    uniq, inverse = torch.unique(seqs, dim=0, return_inverse=True)
    if len(uniq) > budget_rows or 2 * len(uniq) > len(part):
        return None
    return uniq, inverse.numpy()
