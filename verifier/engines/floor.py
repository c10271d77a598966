"""The numeric floor: how far an engine's own target law is from the Hugging Face reference the audit uses.

An audit compares the engine's emitted tokens with the target's processed law computed by the harness
(:class:`verifier.runner.models.ReferenceModel`: transformers, float64 processing).  An engine computes
its target with its own kernels, weights format and dtype, so even a lossless engine samples from a
slightly different law.  Where the engine exposes its target logits (``EngineDecoder.target_logits``,
``HFAssistedDecoder.target_logits``), this module measures that gap on the audit's prompts::

    floor = max over (prompt, sampling config) of TV(engine processed law, reference processed law)

of the first token (both processed by :func:`verifier.sampling.processed_probs`, float64).

A PASS means "no bias >= target TV".  If the floor is above the audit's target TV, the audit cannot tell
a lossless engine from one whose law moved by the floor, so the verdict is UNDERPOWERED, never PASS
(:func:`apply_floor`).  A BIAS DETECTED stands, with the floor stated beside it (a bias far above the
floor is the engine's; one near it may be numeric).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["reapply_floor", "finite_number", "measure_floor", "apply_floor", "logits_source", "FLOOR_KEY"]

FLOOR_KEY = "numeric_floor"  # report.json key
ENGINE_MEASURED = "the engine's own target law vs the HF reference, first token, worst prompt and config"
SERVER_MEASURED = "the server's reported law with speculation off vs --target's processed law, worst checked position"


def logits_source(decoder: Any) -> Callable[[Sequence[int]], np.ndarray] | None:
    """The decoder's ``target_logits(prompt_ids) -> float[V]``, looking through wrappers; None if it has none
    (or says ``exposes_target_logits = False``, as an engine whose worker lacks the method does)."""
    seen = 0
    while decoder is not None and seen < 8:
        fn = getattr(decoder, "target_logits", None)
        if callable(fn):
            return fn if getattr(decoder, "exposes_target_logits", True) else None
        decoder, seen = getattr(decoder, "inner", None), seen + 1
    return None


def measure_floor(target_logits: Callable[[Sequence[int]], np.ndarray], reference: Any, prompts: Sequence[Sequence[int]],
                  samplings: Sequence[Any], *, source: str = "") -> dict[str, Any]:
    """TV between the engine's and the reference's processed first-token laws, per prompt and sampling config.

    Parameters
    ----------
    target_logits : callable
        ``prompt_ids -> logits`` of shape (vocab,) (the engine's own target, after the prompt).
    reference : ReferenceModel
        The harness's target (``next_probs(prefixes (1, P), sampling) -> (1, vocab)`` float64).
    prompts : sequence of sequence of int
        The audit's prompts (token ids).
    samplings : sequence of SamplingConfig
        The audit's sampling configs (greedy ones are skipped: exact match, no law).
    source : str
        Named in the result (what produced the logits).

    Returns
    -------
    dict
        ``rows`` (prompt index, ids, sampling label, tv), ``max_tv``, ``source``, ``method``.

    Raises
    ------
    DecoderOutputError
        (exit 3) logits of the wrong length or not finite where the reference has mass.
    """
    import torch

    from verifier.errors import DecoderOutputError
    from verifier.sampling import processed_probs

    rows = []
    for i, prompt in enumerate(prompts):
        logits = np.asarray(target_logits(list(prompt)), dtype=np.float64).reshape(-1)
        if logits.shape[0] < reference.vocab_size:
            raise DecoderOutputError(f"{source or 'engine'}: target_logits returned {logits.shape[0]} logits; the target's "
                                     f"vocabulary has {reference.vocab_size}")
        logits = logits[: reference.vocab_size]  # a padded LM head (vLLM, llama.cpp) has extra rows
        for sampling in samplings:
            if sampling.greedy:
                continue
            ref = reference.next_probs(np.asarray([list(prompt)], dtype=np.int64), sampling, len(prompt))[0]
            mine = processed_probs(torch.from_numpy(logits)[None, :], sampling).numpy()[0]
            if not np.isfinite(mine).all():
                raise DecoderOutputError(f"{source or 'engine'}: target_logits give non-finite probs after prompt {i}")
            rows.append({"prompt": i, "prompt_ids": [int(t) for t in prompt][:16], "sampling": sampling.label(),
                         "tv": float(0.5 * np.abs(mine - ref).sum())})
    return {"source": source, "rows": rows, "max_tv": max((r["tv"] for r in rows), default=None),
            "method": "TV of the first token's processed law: the engine's own target logits vs the harness's "
                      "Hugging Face reference (float64 processing of both), per prompt and sampling config"}


def apply_floor(report: dict[str, Any], floor: dict[str, Any], target_tv: float, *,
                measured: str = ENGINE_MEASURED) -> int:
    """Put ``floor`` into ``report`` (``report["numeric_floor"]``); a floor above ``target_tv`` turns PASS into UNDERPOWERED.

    Parameters
    ----------
    report : dict
        A runner report; changed in place.  Each PASS decoder becomes UNDERPOWERED; the report's verdict
        changes only from PASS (a BIAS DETECTED of another decoder stays the report's verdict).
    floor : dict
        :func:`measure_floor` (or :func:`verifier.server.floor.measure_server_floor`; its ``where`` is named).
    target_tv : float
        The audit's target TV.
    measured : str
        What the floor compares, in the reason's words (default: the engine's target law vs the HF reference).

    Returns
    -------
    int
        The report's exit code afterwards.
    """
    from verifier.errors import EXIT_UNDERPOWERED

    max_tv = floor.get("max_tv")
    floor = {**floor, "target_tv": float(target_tv), "measured": measured,
             "above_target": bool(max_tv is not None and max_tv > target_tv)}
    report[FLOOR_KEY] = floor
    if max_tv is None:
        return int(report["exit_code"])
    where = f" at {floor['where']}" if floor.get("where") else ""
    line = f"numeric floor TV {max_tv:.3g} ({measured}{where}; {floor['source']})"
    for d in report.get("decoders", []):
        if floor["above_target"] and d.get("verdict") == "PASS":
            d["verdict"], d["expectation_met"] = "UNDERPOWERED", False
            d["reason"] = (f"{line} > target TV {target_tv:g}: the audit cannot tell a lossless decoder from one whose law moved by "
                           f"the floor, so no PASS; " + d.get("reason", ""))
            if report.get("verdict") in ("PASS", "UNDERPOWERED"):  # a BIAS DETECTED elsewhere in the report stays
                report["verdict"], report["exit_code"] = "UNDERPOWERED", EXIT_UNDERPOWERED
                report["summary"] = (f"{d['decoder']}: UNDERPOWERED (numeric floor {max_tv:.3g} > target TV {target_tv:g}) "
                                     f"-> exit {EXIT_UNDERPOWERED}")
        else:
            d["reason"] = f"{d.get('reason', '')}; {line} {'>' if floor['above_target'] else '<='} target TV {target_tv:g}"
            if floor["above_target"] and d.get("verdict") == "BIAS DETECTED":
                d["reason"] += (" (the bias stands against the reference's law; the part of it up to the floor may be "
                                "the decoder's own target numerics rather than its speculative sampling)")
    return int(report["exit_code"])


def finite_number(v) -> float | None:
    """A finite real number (not a bool), else None."""
    import math

    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


def reapply_floor(report: dict[str, Any], previous: dict[str, Any] | None) -> int:
    """Put a run folder's measured floor back into a report recomputed from its samples (``specverify report
    --recompute``, ``audit --resume``): the floor was measured once, against the engine or server, and no sample holds it.

    ``previous`` is the folder's report.json before the recompute (None or without a floor: nothing to do).  The
    same :func:`apply_floor`, so a floor above the target TV keeps a recomputed PASS UNDERPOWERED; a floor that was
    not measured (``max_tv`` None) is kept as it was, with its statement; a malformed one (not a finite ``max_tv`` >= 0
    and ``target_tv`` > 0, no ``source``) is never believed: it counts as TV 1, so no PASS.  Returns the
    report's exit code afterwards.
    """
    floor = (previous or {}).get(FLOOR_KEY) if isinstance(previous, dict) else None
    if not isinstance(floor, dict):
        return int(report["exit_code"])
    if floor.get("max_tv") is None and isinstance(floor.get("source"), str):  # "not measured": its statement stays
        report[FLOOR_KEY] = floor
        return int(report["exit_code"])
    max_tv, target_tv = finite_number(floor.get("max_tv")), finite_number(floor.get("target_tv"))
    measured = floor.get("measured") if isinstance(floor.get("measured"), str) else (
        SERVER_MEASURED if floor.get("where") else ENGINE_MEASURED)
    if max_tv is None or max_tv < 0 or target_tv is None or target_tv <= 0 or not isinstance(floor.get("source"), str):
        bad = {"max_tv": 1.0, "rows": [], "source": (  # TV is at most 1
            "the previous report.json's numeric floor is malformed (max_tv "
            f"{str(floor.get('max_tv'))[:40]!r}, target_tv {str(floor.get('target_tv'))[:40]!r}), so it counts as "
            "TV 1, the largest: measure it again with the audit")}
        return apply_floor(report, bad, target_tv if target_tv and 0 < target_tv < 1 else 0.0, measured=measured)
    return apply_floor(report, floor, target_tv, measured=measured)
