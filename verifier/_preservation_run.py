""":func:`verifier.api.check_preserves_target` through the suite runner (the one statistics path).

The decoder and the target are lent to the runner (:mod:`verifier.audit._live`), an audit suite is
built (:func:`verifier.audit.suite_builder.plan_audit`: the runner's cells ``gof@t``, ``joint@1..J``,
``surprisal@1..J``, ``pit``) and run in a temporary run folder; the
:class:`~verifier._preservation.PreservationResult` is read off the runner's report.
"""

from __future__ import annotations

import math
import tempfile
from typing import Any

import numpy as np

from verifier._preservation import PreservationCell, PreservationResult

__all__ = ["check_through_runner", "cell_family"]

API_TESTS = ("gof", "joint", "surprisal", "pit")  # no `accepted`: the API is not given the decoder's draft
UNKNOWN_NUM_DRAFT_TOKENS = 64  # a decoder without .num_draft_tokens: the bound its reported accepted counts must respect


def cell_family(test: str) -> str:
    """``gof`` for chi-square cells (gof@t, joint@1..J, accepted), ``surprisal``, ``pit-ks``."""
    if test.startswith(("gof", "joint", "accepted")):
        return "gof"
    return "pit-ks" if test == "pit" else test.split("@", 1)[0]


def _float(v: Any) -> float:
    if v is None:
        return math.nan
    if isinstance(v, str):
        return math.inf if v == "inf" else -math.inf if v == "-inf" else math.nan
    return float(v)


def _cell(c: dict) -> PreservationCell:
    prompt = c["id"].split("/")[1]
    index = int(prompt[1:]) if prompt[1:].isdigit() else 0
    effect = ""
    if c.get("effect") is not None:
        unit = {"tv": "TV", "ks": "KS distance", "nats": "mean surprisal - entropy (nats)"}.get(c.get("effect_unit"), c.get("effect_unit"))
        effect = f"{unit} {_float(c['effect']):.4f}"
        if c.get("effect_ci"):
            lo, hi = c["effect_ci"]
            effect += f" (99% CI {_float(lo):.4f}-{_float(hi):.4f})"
    tv = c.get("effect_unit") == "tv"
    return PreservationCell(
        name=f"prompt{index}/{c['test']}", prompt_index=index, test=cell_family(c["test"]), n=int(c["n"]),
        statistic=_float(c["statistic"]), pvalue=0.0 if c.get("support_violation") else _float(c["pvalue"]),
        adjusted_pvalue=_float(c.get("adjusted_pvalue")), rejected=c.get("verdict") == "BIAS",
        effect=effect, effect_tv=_float(c["effect"]) if tv and c.get("effect") is not None else None,
        mde_tv=_float(c["mde"]) if tv and c.get("mde") is not None else None, detail=c.get("support_violation") or "")


def check_through_runner(decoder, target_model, prompts, sampling, *, num_samples: int, max_new_tokens: int,
                         alpha: float, seed: int, num_gof_positions: int | None, min_effect: float | None,
                         name: str, reproduce: str, chunk_size: int | None = None) -> PreservationResult:
    """Run the check as an audit suite; see :func:`verifier.api.check_preserves_target`.

    Raises
    ------
    DecoderOutputError, DecoderError
        The decoder returned invalid output or raised (the runner's error, re-raised).
    """
    from verifier.audit._live import lending
    from verifier.audit.suite_builder import DEFAULT_CHUNK_SIZE, AuditSpec, plan_audit
    from verifier.errors import DecoderError, DecoderOutputError
    from verifier.pipeline import run_suite

    # k only bounds the decoder's reported accepted counts (no acceptance audit here: the draft is not given)
    k = getattr(decoder, "num_draft_tokens", None)
    k = int(k) if isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1 else UNKNOWN_NUM_DRAFT_TOKENS
    with lending(decoder=decoder, target=target_model) as specs, tempfile.TemporaryDirectory(prefix="specverify-api-") as tmp:
        positions = None if num_gof_positions is None else tuple(range(1, min(num_gof_positions, max_new_tokens) + 1))
        spec = AuditSpec(decoder=specs["decoder"], target=specs["target"], draft=specs["target"],
                         prompts=tuple(("ids", tuple(p)) for p in prompts), sampling=sampling, num_draft_tokens=k,
                         max_new_tokens=max_new_tokens, num_samples=num_samples,
                         target_tv=1.0 if min_effect is None else float(min_effect), alpha=alpha, seed=seed,
                         chunk_size=chunk_size or DEFAULT_CHUNK_SIZE, tests=API_TESTS, gof_positions=positions,
                         name="check_preserves_target", plan_n=False)
        plan = plan_audit(spec)
        outcome = run_suite(plan.suite, tmp, progress=False, log=lambda _m: None)
    report = outcome.report
    d = report["decoders"][0]
    if d["error"]:
        err = d["error"]
        cls = DecoderOutputError if err.get("kind") == "invalid_output" else DecoderError
        raise cls(err.get("message", "decoder error"))
    cells = tuple(_cell(c) for c in report["cells"])
    verdict = d["verdict"]
    if verdict == "UNDERPOWERED" and min_effect is not None:
        weak = [c for c in cells if c.mde_tv is not None and c.mde_tv > min_effect]
        if weak:
            worst = max(weak, key=lambda c: c.mde_tv)
            d["reason"] = (f"cell {worst.name} (n={worst.n}) only sees TV >= {worst.mde_tv:.3g} > min_effect={min_effect:g}; "
                           "raise num_samples (see min_num_samples)")
    return PreservationResult(verdict=verdict, cells=cells, alpha=alpha,
                              combined_pvalue=_float(d.get("combined_pvalue")), seed=seed, num_samples=num_samples,
                              max_new_tokens=max_new_tokens, decoder_name=name, reproduce=reproduce, reason=d["reason"],
                              extra={"report": report})
