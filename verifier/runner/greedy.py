"""The greedy contract: at temperature 0 every emitted sequence must equal the target's greedy output.

At ``temperature = 0`` the processed probs are one-hot on the argmax (:func:`verifier.sampling.processed_probs`),
so the target's law of the emitted tokens is a single sequence.  Distribution tests have nothing to
test there (one category: every chi-square cell would be "untestable"); instead the ``greedy`` cell
compares every row with that sequence.  Any mismatch is a deviation from a single-outcome law, i.e.
a support violation: BIAS with the first mismatching row shown.  Under the null no row can differ
(false-alarm rate 0); a decoder that leaves the greedy output in a fraction ``TV`` of rows is seen
with probability ``1 - (1 - TV)^n``, so the cell's minimum detectable effect is
``TV = 1 - (1 - power)^(1 / n)`` (:func:`verifier.stats.power.support_check_mde`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from verifier.protocols import PADDING_TOKEN_ID
from verifier.runner.analysis import CI_LEVEL, CellResult
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig
from verifier.stats.effect import binomial_tv_estimate
from verifier.stats.power import support_check_mde

__all__ = ["greedy_output", "greedy_cell"]


def greedy_output(ref: ReferenceModel, prompt: tuple[int, ...], sampling: SamplingConfig, max_new_tokens: int) -> np.ndarray:
    """The target's greedy continuation of ``prompt``.

    Parameters
    ----------
    ref : ReferenceModel
        The target.
    prompt : tuple of int
    sampling : SamplingConfig
        With ``temperature == 0`` (the processed probs are one-hot; ties as ``processed_probs`` breaks them).
    max_new_tokens : int

    Returns
    -------
    np.ndarray, shape (max_new_tokens,), int64
        Emitted tokens, ``PADDING_TOKEN_ID`` (-1) after EOS.
    """
    out = np.full(max_new_tokens, PADDING_TOKEN_ID, dtype=np.int64)
    prefix = list(prompt)
    for t in range(max_new_tokens):
        probs = ref.next_probs(np.array([prefix], dtype=np.int64), sampling, len(prompt))[0]
        tok = int(np.argmax(probs))
        out[t] = tok
        prefix.append(tok)
        if ref.eos_token_id is not None and tok == ref.eos_token_id:
            break
    return out


def greedy_cell(cell_id: str, tokens: np.ndarray, expected: np.ndarray, *, power: float, cell_alpha: float,
                label_fn: Callable[[int], str] | None = None, **meta: Any) -> CellResult:
    """Exact match of every emitted row against the target's greedy output.

    Parameters
    ----------
    tokens : np.ndarray, shape (rows, max_new_tokens), int64
        Emitted tokens of the sample set, -1 after EOS.
    expected : np.ndarray, shape (max_new_tokens,), int64
        :func:`greedy_output`.
    power : float
        Power at which the MDE is stated.
    cell_alpha : float
        Recorded only: the check has no false alarms.
    label_fn : callable (token id) -> str, optional
        Names tokens in the mismatch message.

    Returns
    -------
    CellResult
        ``test = "greedy"``; ``statistic`` = mismatching rows, ``pvalue`` 0 with a mismatch else 1;
        ``effect`` = the mismatch fraction (the TV between the emitted and the greedy law) with its
        Clopper-Pearson interval; ``support_violation`` names the first mismatching row.
    """
    n = int(len(tokens))
    if n == 0:
        return CellResult(cell_id, test="greedy", method="no samples", n=0, statistic=float("nan"), pvalue=1.0, **meta)
    bad_rows = np.flatnonzero((tokens != expected[None, :]).any(axis=1))
    mismatches = int(len(bad_rows))
    violation = None
    if mismatches:
        r = int(bad_rows[0])
        pos = int(np.flatnonzero(tokens[r] != expected)[0])
        name = label_fn or str

        def show(tok: int) -> str:
            return "<ended>" if tok == PADDING_TOKEN_ID else name(int(tok))

        violation = (f"row {r} differs from the target's greedy output at position {pos + 1}: emitted "
                     f"{show(tokens[r, pos])} where greedy decoding emits {show(expected[pos])} "
                     f"({mismatches} of {n} rows differ)")
    eff = binomial_tv_estimate(mismatches, n, CI_LEVEL)
    mde = support_check_mde(n, power, cell_alpha)
    return CellResult(
        cell_id, test="greedy", method="exact match of every row against the target's greedy output (T = 0)", n=n,
        statistic=float(mismatches), pvalue=0.0 if mismatches else 1.0, effect=eff.estimate,
        effect_ci=(eff.ci_low, eff.ci_high), mde=mde.tv, cell_alpha=cell_alpha, support_violation=violation,
        extra={"greedy_output": expected.tolist(), "effect_method": eff.method}, **meta,
    )
