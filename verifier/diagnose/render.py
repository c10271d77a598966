"""Text and JSON-safe form of a diagnosis (CLI output, report.json/md/html "Diagnosis" section).

The report templates include ``diagnosis.md.j2`` / ``diagnosis.html.j2`` (verifier/reports/templates);
the figure is drawn by the reports (:func:`verifier.reports.plots.diagnosis_figures`).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["json_safe", "diagnosis_text", "localization_rows"]


def json_safe(obj: Any) -> Any:
    """Strict JSON: non-finite floats become None / "inf" / "-inf", numpy scalars plain values."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else (None if math.isnan(obj) else ("inf" if obj > 0 else "-inf"))
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        return json_safe(obj.item())
    return obj


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    return f"{v:.1f}"


def localization_rows(entry: dict) -> list[dict]:
    """Rows of the localization table of one sample set: position / origin / round position groups."""
    loc = entry.get("localization") or {}
    rows = []
    for i, v in enumerate(loc.get("log_lr_per_position") or []):
        rows.append({"where": f"position {i + 1}", "what": f"log LR of {loc.get('mechanism')} over the target", "value": _fmt(v)})
    for g in loc.get("by_position") or []:
        p = g.get("pvalue")
        temp = f"; T = {g['temperature']:.3g}" if "temperature" in g else ""
        rows.append({"where": g["group"], "what": f"PIT vs the target law given the prefix (n = {g['n']})",
                     "value": ("not tested" if p is None else f"p = {p:.2g}" + (" BIASED" if g.get("biased") else "")) + temp})
    for g in (loc.get("by_origin") or []) + (loc.get("by_round_position") or []):
        p = g.get("pvalue")
        rows.append({"where": g["group"], "what": f"PIT vs the canonical law given it (n = {g['n']})",
                     "value": "not tested" if p is None else f"p = {p:.2g}" + (" BIASED" if g.get("biased") else "")})
    return rows


def diagnosis_text(result: dict) -> str:
    """Plain-text diagnosis of every decoder (the CLI's output)."""
    if result.get("error"):
        return f"diagnosis failed: {result['error']}"
    lines = []
    for d in result.get("decoders", []):
        lines.append(f"{d['decoder']}: {d['sentence']}")
        for m in d.get("mechanism") or []:  # verifier.diagnose.glossary
            lines.append(f"  what the code did wrong ({m['name']}): {m['plain']} ({m.get('pointer') or m['reproduce']})")
        if d.get("configs"):
            lines.append(f"  {d['configs']}")
        for s in d.get("sets", []):
            if "decision" not in s:
                loc = s.get("localization") or {}
                lines.append(f"  {s['set']}: {loc['sentence'] if loc.get('sentence') else s.get('note', '')}")
                continue
            lines.append(f"  {s['set']}: {s['decision']['sentence']}")
            fits = s.get("fits") or {}
            if fits:
                lines.append(f"    {fits['temperature']['sentence']}; {fits['settings']['sentence']}")
            loc = s.get("localization") or {}
            per = loc.get("log_lr_per_position")
            if per and loc.get("mechanism"):
                lines.append(f"    log LR of {loc['mechanism']} per position: " + ", ".join(_fmt(v) for v in per))
            if loc.get("sentence"):
                lines.append(f"    {loc['sentence']}")
    if not lines:
        lines.append("no decoder to diagnose (no BIAS DETECTED)")
    return "\n".join(lines)


