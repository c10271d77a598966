"""Text, JSON-safe form and figures of a diagnosis (CLI output, report.json/md/html "Diagnosis" section).

The report templates include ``diagnosis.md.j2`` / ``diagnosis.html.j2`` (verifier/reports/templates);
the figure is :func:`diagnosis_figures` (observed vs target vs best-mechanism law on the most telling
position of each diagnosed decoder).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["json_safe", "diagnosis_text", "diagnosis_figures", "localization_rows"]


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
        if d.get("configs"):
            lines.append(f"  {d['configs']}")
        for s in d.get("sets", []):
            if "decision" not in s:
                lines.append(f"  {s['set']}: {s.get('note', '')}")
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


def diagnosis_figures(report: dict) -> dict[str, str]:
    """decoder -> base64 PNG: observed vs target vs best-mechanism law on its most telling position."""
    from verifier.reports import plots

    out = {}
    for d in (report.get("diagnosis") or {}).get("decoders", []):
        sets = [s for s in d.get("sets", []) if s.get("plot")]
        if not sets:
            continue
        s = max(sets, key=lambda s: _lr(s))
        png = _figure(plots, d["decoder"], s)
        if png:
            out[d["decoder"]] = png
    return out


def _lr(s: dict) -> float:
    v = (s.get("decision") or {}).get("log_lr")
    if isinstance(v, str):
        return math.inf if v == "inf" else -math.inf
    return -math.inf if v is None else v


def _figure(plots, decoder: str, s: dict) -> str | None:
    import numpy as np

    @plots._plain_text
    def draw() -> str:
        fig, ax = plots.plt.subplots(figsize=(6, 2.8))
        pl = s["plot"]
        x = np.arange(len(pl["labels"]))
        ax.bar(x - 0.27, pl["observed"], 0.27, label="observed")
        ax.bar(x, pl["target"], 0.27, label="target")
        ax.bar(x + 0.27, pl["mechanism_law"], 0.27, label=pl["mechanism"])
        ax.set_xticks(x, pl["labels"], rotation=45, fontsize=7)
        ax.set_ylabel("probability")
        ax.set_title(f"{decoder}: {s['set']}, position {pl['position']}", fontsize=8)
        ax.legend(fontsize=7)
        return plots._png(fig)

    return draw()
