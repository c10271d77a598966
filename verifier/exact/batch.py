"""Exact laws of a batch-shape defect per batch composition (issue 29, bug kind 1: batch shape and concurrency).

A defect that appears only when more than two requests share a step corrupts some rows of a ``generate`` call
and leaves the others alone.  The zoo's ``corrupt_batch_gt2`` (:mod:`verifier.decoders.batch_mutants`) is the
model: in a call of more than :data:`CLEAN_ROWS` rows, the rows in slots ``>= CLEAN_ROWS`` draw their recovered
token from the target row ``p`` instead of the residual ``max(0, p - q)`` (their residual scratch buffer holds
only the captured batch of two rows), the rule :data:`verifier.exact.rules.RULES` calls ``full_p_fallback``;
the slots below it, and every row of a call of at most two rows, are the reference.  The acceptance test is the
reference's in every slot, so the accepted-count law of the first round is unchanged: acceptance looks normal.

Rows of one call are independent (each row's uniforms are its own), so the law of a row is the law of its slot,
and the law of a row drawn uniformly from calls of ``b`` rows -- the rows the runner stores for one batch level
(:mod:`verifier.runner.batch`) -- is the mixture

    ``P_b = (clean(b) / b) target + ((b - clean(b)) / b) corrupted``,  ``clean(b) = b if b <= 2 else 2``,

exact in Fractions here (:func:`batch_level_law`), with the corrupted share :func:`corrupted_share`.  Every cell
of a sample set at level ``b`` reads rows of that mixture: ``gof@t`` its marginal, ``joint@1..J`` its first J
tokens.

The zoo's ``prompt_length_leak`` starts every row of a call whose rows have prompts of different lengths at slot
0's prompt length (a shorter row reads pad tokens as prompt, a longer row's tail is overwritten).  At a mixed-prompts
level (``batch_composition.mixed_prompt_lengths``) slot 0 is a filler, so every audited row is exact speculative
sampling after :func:`leaked_prompt` ``(prompt, len(filler))``: :func:`mixed_prompts_level_law`, the same at every
``b >= 2``; calls whose rows share one prompt length are the reference.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from verifier.errors import invalid_argument
from verifier.exact.laws import n_token_law, target_law
from verifier.exact.rules import get_rule
from verifier.exact.tabular import TabularLM

__all__ = ["CLEAN_ROWS", "BATCH_DEFECTS", "PAD_TOKEN_ID", "corrupted_share", "slot_law", "batch_level_law",
           "leaked_prompt", "mixed_prompts_level_law"]

CLEAN_ROWS = 2  # slots 0 and 1: the smallest captured batch, whose buffers every call has
# defect name -> the rule of a corrupted slot (verifier.exact.rules); the clean slots follow the canonical rule
BATCH_DEFECTS = {"corrupt_batch_gt2": "full_p_fallback"}
PAD_TOKEN_ID = 0  # the pad id a padded batch fills with (verifier.decoders._runner.DUMMY_TOKEN_ID)


def _rows_iv(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_argument(name, value, "an integer >= 1 (rows in one generate call)")
    return value


def _defect_iv(defect: str) -> str:
    if defect not in BATCH_DEFECTS:
        raise invalid_argument("defect", defect, f"one of {sorted(BATCH_DEFECTS)}")
    return BATCH_DEFECTS[defect]


def corrupted_share(batch_rows: int) -> Fraction:
    """Share of the rows of calls of ``batch_rows`` rows that sit in a corrupted slot: ``(b - 2) / b`` for b > 2, else 0.

    Raises
    ------
    InvalidArgumentError
        ``batch_rows`` is not an integer >= 1.

    Examples
    --------
    >>> [str(corrupted_share(b)) for b in (1, 2, 4, 16)]
    ['0', '0', '1/2', '7/8']
    """
    b = _rows_iv("batch_rows", batch_rows)
    return Fraction(0) if b <= CLEAN_ROWS else Fraction(b - CLEAN_ROWS, b)


def slot_law(target: TabularLM, draft: TabularLM, prefix: Sequence[int], num_draft_tokens: int, num_tokens: int,
             slot: int, batch_rows: int, defect: str = "corrupt_batch_gt2") -> dict[tuple[int, ...], Fraction]:
    """Exact law of the first ``num_tokens`` emitted tokens of the row in ``slot`` of a call of ``batch_rows`` rows.

    Parameters
    ----------
    target, draft : TabularLM
    prefix : sequence of int
        The prompt.
    num_draft_tokens : int
        k, draft tokens per round.
    num_tokens : int
        N, tokens of the law (``-1`` after EOS), as :func:`verifier.exact.n_token_law`.
    slot : int
        The row's index in the call, ``0 .. batch_rows - 1``.
    batch_rows : int
        Rows of the call.
    defect : str, default "corrupt_batch_gt2"
        A key of :data:`BATCH_DEFECTS`.

    Returns
    -------
    dict
        ``{tokens: Fraction}``: the target's law (:func:`verifier.exact.target_law`) for a clean slot, the
        defect's rule (:func:`verifier.exact.n_token_law`) for a corrupted one.

    Raises
    ------
    InvalidArgumentError
        ``batch_rows`` not an integer >= 1, ``slot`` outside ``0 .. batch_rows - 1``, unknown ``defect``.
    """
    b = _rows_iv("batch_rows", batch_rows)
    rule = _defect_iv(defect)
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < b:
        raise invalid_argument("slot", slot, f"an integer in 0..{b - 1} (batch_rows={b})")
    if b <= CLEAN_ROWS or slot < CLEAN_ROWS:
        return target_law(target, prefix, num_tokens)
    return n_token_law(target, draft, prefix, num_draft_tokens, num_tokens, get_rule(rule))


def batch_level_law(target: TabularLM, draft: TabularLM, prefix: Sequence[int], num_draft_tokens: int,
                    num_tokens: int, batch_rows: int,
                    defect: str = "corrupt_batch_gt2") -> dict[tuple[int, ...], Fraction]:
    """Exact law of a row drawn uniformly from calls of ``batch_rows`` rows of the defective decoder.

    Parameters
    ----------
    target, draft, prefix, num_draft_tokens, num_tokens, defect
        As for :func:`slot_law`.
    batch_rows : int
        b, rows per ``generate`` call (one batch level of the suite axis ``batch_composition``).

    Returns
    -------
    dict
        ``{tokens: Fraction}``, ``(1 - s) target + s corrupted`` with ``s =`` :func:`corrupted_share` ``(b)``; the
        target's law itself for b <= 2.

    Raises
    ------
    InvalidArgumentError
        As for :func:`slot_law`.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs, marginal, target_law, total_variation
    >>> pair = standard_tabular_pairs()["bigram4_eos"]
    >>> law = lambda b: marginal(batch_level_law(pair.target, pair.draft, pair.prefix, 2, 2, b), (0,))
    >>> first = marginal(target_law(pair.target, pair.prefix, 2), (0,))
    >>> [str(total_variation(law(b), first)) for b in (1, 2, 4, 16)]
    ['0', '0', '3/40', '21/160']
    """
    share = corrupted_share(batch_rows)
    _defect_iv(defect)
    clean = target_law(target, prefix, num_tokens)
    if share == 0:
        return clean
    bad = slot_law(target, draft, prefix, num_draft_tokens, num_tokens, CLEAN_ROWS, batch_rows, defect)
    return {x: (1 - share) * clean.get(x, Fraction(0)) + share * bad.get(x, Fraction(0))
            for x in sorted(set(clean) | set(bad)) if clean.get(x, 0) or bad.get(x, 0)}


def leaked_prompt(prompt: Sequence[int], length: int, pad_id: int = PAD_TOKEN_ID) -> tuple[int, ...]:
    """The prompt a row of ``prompt_length_leak`` runs when slot 0's prompt has ``length`` tokens: ``prompt`` cut to
    ``length`` tokens, or right-padded to it with ``pad_id`` (read as prompt).

    Examples
    --------
    >>> leaked_prompt((1, 2, 3), 2), leaked_prompt((1,), 3)
    ((1, 2), (1, 0, 0))
    """
    ids = tuple(int(t) for t in prompt)
    return (ids + (int(pad_id),) * max(0, int(length) - len(ids)))[:int(length)]


def mixed_prompts_level_law(target: TabularLM, prompt: Sequence[int], filler: Sequence[int], num_tokens: int,
                            defect: str = "prompt_length_leak") -> dict[tuple[int, ...], Fraction]:
    """Exact law of the audited rows of a mixed-prompts level whose slot 0 continues ``filler`` (module docstring).

    Parameters
    ----------
    target : TabularLM
    prompt : sequence of int
        The audited rows' prompt.
    filler : sequence of int
        Slot 0's prompt (the first filler).
    num_tokens : int
        N, tokens of the law (``-1`` after EOS).
    defect : {"prompt_length_leak", "reference"}, default "prompt_length_leak"

    Returns
    -------
    dict
        ``{tokens: Fraction}``: the target's law after :func:`leaked_prompt` ``(prompt, len(filler))``, or after
        ``prompt`` for ``"reference"`` (speculative sampling is exact: the draft and k do not enter).

    Raises
    ------
    InvalidArgumentError
        Unknown ``defect``.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs, marginal, total_variation
    >>> pair = standard_tabular_pairs()["bigram4_eos"]
    >>> law = lambda d: marginal(mixed_prompts_level_law(pair.target, (1,), (2, 0), 1, d), (0,))
    >>> str(total_variation(law("prompt_length_leak"), law("reference")))
    '2/5'
    """
    if defect not in ("prompt_length_leak", "reference"):
        raise invalid_argument("defect", defect, "'prompt_length_leak' or 'reference'")
    used = leaked_prompt(prompt, len(filler)) if defect == "prompt_length_leak" else tuple(prompt)
    return target_law(target, used, num_tokens)
