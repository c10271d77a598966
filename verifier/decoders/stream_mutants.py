"""The randomness zoo: decoders whose every row has the target's law but whose rows are not independent.

Issue 29, bug kind 2 ("shared or correlated randomness across requests"): unseeded requests that share one
random stream, per-request seeds that are ignored, ranks that draw the same uniforms.  Each row alone is a
correct sample, so every cell that looks at one row at a time (``gof@t``, ``joint``, ``surprisal``, ``pit``)
has the target's law under these decoders; only cells that look across rows can see them
(``collision@1..J``: repeated rows; ``serial@1``: correlated consecutive rows).

:data:`STREAM_DECODER_REGISTRY` maps a name to a :class:`~verifier.decoders.spec.DecoderSpec`;
:func:`verifier.decoders.make_decoder` finds these names too (``decoder = "shared_stream"`` in a suite).  The
defect lives in the uniforms, not in a verification rule, so both are plain target sampling
(:class:`~verifier.decoders.speculative.AncestralDecoder`: one inverse-CDF draw per row and token, in
token-id order) with a defective :meth:`~verifier.decoders.speculative.AncestralDecoder._uniforms`; the
draft and ``num_draft_tokens`` are ignored (a speculative rule would add nothing: its law is the target's).

Per-row law.  Row ``r``'s token ``t`` is the inverse-CDF draw of the target's processed law at its prefix
with uniform ``u_{r,t}``; in both mutants ``u_{r,t}`` is, for each fixed row, iid Uniform(0, 1) over the steps
``t`` (a fresh base uniform per step, moved by a fixed measure-preserving map), so every row is distributed
exactly as ancestral sampling from the target, which is the canonical rule's law
(``verifier.exact.n_token_law(..., "canonical") == verifier.exact.target_law(...)``; checked on the tabular
pairs in ``tests/decoders/test_stream_mutants.py``).  Rows of different ``generate`` calls are independent
(each call seeds its own generator); within a call they are not.
"""

from __future__ import annotations

import math

import torch

from verifier.decoders.spec import DecoderSpec
from verifier.decoders.speculative import _FROM_CONFIG, AncestralDecoder
from verifier.errors import invalid_argument

__all__ = ["STREAM_DECODER_REGISTRY", "SharedStreamDecoder", "SerialStreamDecoder", "WEYL_STEP", "stream_decoder_names"]

WEYL_STEP = (math.sqrt(5.0) - 1.0) / 2.0  # 1/golden ratio: the rotation whose multiples stay farthest from 0 mod 1


class SharedStreamDecoder(AncestralDecoder):
    """Plain target sampling in which groups of ``group_size`` consecutive rows of a call share one random stream.

    Every row of a group re-uses the uniforms of the group's first row, as requests batched into one step
    that draw one uniform for the step, or unseeded requests that all start a generator from one default
    seed.  With the same prompt the rows of a group are identical.

    Parameters
    ----------
    target : causal LM
        As for :class:`~verifier.decoders.speculative.AncestralDecoder`.
    group_size : int, default 2
        Rows per shared stream (rows ``g * i .. g * i + g - 1`` of a call); 0 = the whole call.  The default
        pairs rows: every marginal cell's statistic doubles in law (counts are twice a multinomial of n / 2),
        so ``gof@1`` on a 4-category law rejects at a per-cell level 1e-3 with probability
        ``P(chi2_3 > 16.27 / 2) = 0.043``, while every disjoint pair the collision cell tests is identical.  With whole calls (``group_size = 0``) a call holds one distinct row, and
        ``n / chunk_size`` distinct rows make even ``gof@1`` reject.
    eos_token_id, name, precision
        As for :class:`~verifier.decoders.speculative.AncestralDecoder`.

    Raises
    ------
    InvalidArgumentError
        ``group_size`` is not an integer >= 0 or is 1 (1 is independent rows: the ``ancestral`` decoder).

    Notes
    -----
    Per-row law: row ``r`` uses the base uniform of row ``g * (r // g)``, a fresh Uniform(0, 1) per step, so
    each row alone is exact ancestral sampling (module docstring).
    """

    def __init__(self, target, *, group_size: int = 2, eos_token_id=_FROM_CONFIG, name: str = "shared_stream",
                 precision: str = "auto") -> None:
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 0 or group_size == 1:
            raise invalid_argument("group_size", group_size, "0 (the whole call) or an integer >= 2")
        super().__init__(target, eos_token_id=eos_token_id, name=name, precision=precision)
        self.group_size = group_size
        self.settings["group_size"] = group_size

    def _uniforms(self, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        base = torch.rand(int(rows.max()) + 1, dtype=torch.float64, device=self.device, generator=gen)
        first = torch.zeros_like(rows) if self.group_size == 0 else rows - rows % self.group_size
        return base[first]  # BUG on purpose: a row's uniform is its group's first row's


class SerialStreamDecoder(AncestralDecoder):
    """Plain target sampling in which each row's uniforms are the previous row's shifted by a fixed step.

    Row ``r`` of a call draws with ``u_{r,t} = frac(u_{0,t} + r * step)``: a low-discrepancy (Weyl) sequence
    across requests, as a sampler that spreads requests' randomness "evenly" does.  Row ``r + 1``'s uniforms are
    a fixed function of row ``r``'s, so consecutive rows are correlated (lag-1 correlation of the uniforms
    ``1 - 6 s (1 - s)``: -0.42 for the default step), yet two rows repeat only where one token's interval holds
    both uniforms: two consecutive rows share their first token with probability ``sum_x max(0, p(x) - d)``,
    ``d = min(s, 1 - s)`` (0.382 for the default), never more than independent rows' ``sum_x p(x)^2``, so the
    collision cell cannot see it; ``serial@1`` does.

    Parameters
    ----------
    target : causal LM
        As for :class:`~verifier.decoders.speculative.AncestralDecoder`.
    step : float, default :data:`WEYL_STEP`
        The shift per row, in (0, 1).
    eos_token_id, name, precision
        As for :class:`~verifier.decoders.speculative.AncestralDecoder`.

    Raises
    ------
    InvalidArgumentError
        ``step`` is not a number in (0, 1).

    Notes
    -----
    Per-row law: ``frac(U + c)`` is Uniform(0, 1) for ``U`` uniform and any fixed ``c``, and ``u_{0,t}`` is
    fresh per step, so each row alone is exact ancestral sampling (module docstring).
    """

    def __init__(self, target, *, step: float = WEYL_STEP, eos_token_id=_FROM_CONFIG, name: str = "serial_stream",
                 precision: str = "auto") -> None:
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not 0.0 < float(step) < 1.0:
            raise invalid_argument("step", step, "a number in (0, 1)")
        super().__init__(target, eos_token_id=eos_token_id, name=name, precision=precision)
        self.step = float(step)
        self.settings["step"] = self.step

    def _uniforms(self, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        base = torch.rand(1, dtype=torch.float64, device=self.device, generator=gen)
        return torch.remainder(base + rows.to(torch.float64) * self.step, 1.0)  # BUG on purpose: row r+1 = row r + step


def _factory(cls):
    return lambda target, draft, k, **options: cls(target, **options)


_VISIBLE = ("only across rows of one generate call (num_samples >= 2, T > 0): every row alone has the target's law, "
            "so gof/joint/surprisal/pit keep their level")
_ENTRIES = [
    DecoderSpec("shared_stream", "Rows 2i and 2i + 1 of a call share one random stream (the second re-uses the first's "
                "uniforms; option group_size, 0 = the whole call): identical rows.", "biased",
                _VISIBLE + "; collision@1..J sees every pair identical, serial@1 the correlated neighbours",
                _factory(SharedStreamDecoder)),
    DecoderSpec("serial_stream", "Row r + 1's uniforms are row r's shifted by the golden-ratio step (a Weyl sequence "
                "across requests): consecutive rows correlated, rarely identical.", "biased",
                _VISIBLE + "; serial@1 sees it, collision@1..J does not (pairs repeat less often than chance)",
                _factory(SerialStreamDecoder)),
]

STREAM_DECODER_REGISTRY: dict[str, DecoderSpec] = {spec.name: spec for spec in _ENTRIES}


def stream_decoder_names() -> list[str]:
    """Names of the randomness zoo's decoders."""
    return list(STREAM_DECODER_REGISTRY)
