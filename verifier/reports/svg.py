"""Small inline-SVG figures of report.html: one per decoder, expected vs observed with an interval.

Hand-written SVG (no matplotlib): a figure costs microseconds, scales with the page, and every
bar carries its exact numbers on hover (``<title>``).  Each function returns an SVG string or
``None`` when the cell holds nothing to draw.  Text is escaped (decoder names come from users).

* :func:`cell_figure` -- the form the cell supports: token bars (gof / joint: observed share per
  category vs the exact law with its 99% band), PIT histogram (observed share per bin vs the
  uniform law with its 99% band), or surprisal (observed mean excess surprisal with its interval
  vs the null law of that mean: centred on the exact entropy, spread sqrt(varentropy / n)).
* :func:`acceptance_figure` -- first-round accepted drafts: observed share with its 99% interval
  vs the canonical rule's exact law.
* :func:`ranked_pvalues` -- every cell's adjusted p-value, ranked, against the rejection level.

Intervals are pointwise normal-approximation 99% bands (``Z99``), drawn for reading, not testing:
the verdict comes from the cells' own tests.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any, Sequence

__all__ = ["cell_figure", "acceptance_figure", "ranked_pvalues", "Z99"]

Z99 = 2.5758293035489  # two-sided 99% normal quantile (pointwise bands)
WIDTH, HEIGHT = 340, 190  # px of one small multiple
MARGIN = (30, 10, 40, 44)  # top, right, bottom, left
MAX_BARS = 16  # categories drawn per token cell (the rest are summed into "other")
OBSERVED, EXPECTED, BAND, BAD = "#3b6fb6", "#222", "#d9d9d9", "#cf222e"


def _f(x: float) -> str:
    return f"{x:.1f}"


class _Plot:
    """Axes of one small multiple: data -> pixel maps, and SVG pieces appended in order."""

    def __init__(self, title: str, ymax: float, ymin: float = 0.0, ylabel: str = "", width: int = WIDTH,
                 height: int = HEIGHT):
        self.w, self.h = width, height
        self.top, self.right, self.bottom, self.left = MARGIN
        self.ymin, self.ymax = ymin, ymax if ymax > ymin else ymin + 1.0
        self.parts: list[str] = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="fig" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
            f"<title>{escape(title)}</title>",
            f'<text x="{self.left}" y="14" font-size="11" font-weight="bold">'
            f"{escape(_clip(title, int((width - self.left - self.right) / 6.4)))}</text>",
        ]
        if ylabel:
            mid = (self.top + height - self.bottom) / 2
            self.parts.append(f'<text font-size="9" fill="#555" text-anchor="middle" '
                              f'transform="translate(9,{_f(mid)}) rotate(-90)">{escape(ylabel)}</text>')
        self._axes()

    @property
    def x0(self) -> float:
        return self.left

    @property
    def x1(self) -> float:
        return self.w - self.right

    def y(self, v: float) -> float:
        v = min(max(v, self.ymin), self.ymax)
        return self.h - self.bottom - (v - self.ymin) / (self.ymax - self.ymin) * (self.h - self.top - self.bottom)

    def _axes(self) -> None:
        y0 = self.h - self.bottom
        self.parts.append(f'<line x1="{self.x0}" y1="{y0}" x2="{self.x1}" y2="{y0}" stroke="#888"/>')
        self.parts.append(f'<line x1="{self.x0}" y1="{self.top}" x2="{self.x0}" y2="{y0}" stroke="#888"/>')
        for v in _ticks(self.ymin, self.ymax):
            yy = self.y(v)
            self.parts.append(f'<line x1="{self.x0 - 3}" y1="{_f(yy)}" x2="{self.x0}" y2="{_f(yy)}" stroke="#888"/>')
            self.parts.append(f'<text x="{self.x0 - 5}" y="{_f(yy + 3)}" font-size="9" text-anchor="end">{_tick(v)}</text>')

    def rect(self, x: float, y_lo: float, w: float, y_hi: float, fill: str, title: str = "", opacity: float = 1.0) -> None:
        top, bot = self.y(y_hi), self.y(y_lo)
        t = f"<title>{escape(title)}</title>" if title else ""
        self.parts.append(f'<rect x="{_f(x)}" y="{_f(top)}" width="{_f(max(w, 0.5))}" height="{_f(max(bot - top, 0.5))}" '
                          f'fill="{fill}" fill-opacity="{opacity}">{t}</rect>')

    def tick_mark(self, x: float, w: float, v: float, color: str = EXPECTED) -> None:
        yy = self.y(v)
        self.parts.append(f'<line x1="{_f(x)}" y1="{_f(yy)}" x2="{_f(x + w)}" y2="{_f(yy)}" stroke="{color}" stroke-width="2"/>')

    def whisker(self, x: float, lo: float, hi: float, color: str = EXPECTED) -> None:
        self.parts.append(f'<line x1="{_f(x)}" y1="{_f(self.y(lo))}" x2="{_f(x)}" y2="{_f(self.y(hi))}" stroke="{color}"/>')

    def xlabel(self, x: float, text: str, rotate: bool = False) -> None:
        yy = self.h - self.bottom + 11
        if rotate:
            self.parts.append(f'<text font-size="8" text-anchor="end" transform="translate({_f(x)},{_f(yy - 2)}) rotate(-40)">'
                              f"{escape(_clip(text, 10))}</text>")
        else:
            self.parts.append(f'<text x="{_f(x)}" y="{_f(yy)}" font-size="9" text-anchor="middle">{escape(_clip(text, 10))}</text>')

    def caption(self, text: str) -> None:
        self.parts.append(f'<text x="{self.x0}" y="{self.h - 3}" font-size="9" fill="#555">{escape(_clip(text, 64))}</text>')

    def legend(self, items: Sequence[tuple[str, str]]) -> None:
        x = self.x0 + 4
        for color, text in items:
            self.parts.append(f'<rect x="{_f(x)}" y="{self.top - 11}" width="8" height="8" fill="{color}"/>')
            self.parts.append(f'<text x="{_f(x + 11)}" y="{self.top - 4}" font-size="9">{escape(text)}</text>')
            x += 16 + 5.2 * len(text)

    def svg(self) -> str:
        return "".join(self.parts) + "</svg>"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _ticks(lo: float, hi: float) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    step = 10 ** math.floor(math.log10(span / 3))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 5:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _tick(v: float) -> str:
    return f"{v:.3g}"


def _band(p: float, n: int) -> tuple[float, float]:
    half = Z99 * math.sqrt(max(p * (1 - p), 0.0) / n) if n > 0 else 0.0
    return max(0.0, p - half), min(1.0, p + half)


def _token_bars(cell: dict, title: str) -> str | None:
    obs, exp, labels = cell.get("observed"), cell.get("expected"), cell.get("labels")
    if not obs or not exp or len(obs) != len(exp):
        return None
    n = sum(obs)
    if n <= 0:
        return None
    labels = list(labels or [str(i) for i in range(len(obs))])
    order = sorted(range(len(obs)), key=lambda i: -(exp[i] + obs[i]))
    keep = order[:MAX_BARS] if len(order) > MAX_BARS else order
    rows = [(labels[i], obs[i] / n, exp[i] / n) for i in keep]
    if len(order) > len(keep):
        rest = order[len(keep):]
        rows.append((f"other {len(rest)}", sum(obs[i] for i in rest) / n, sum(exp[i] for i in rest) / n))
    ymax = max(max(max(o, _band(e, n)[1]) for _, o, e in rows) * 1.1, 1e-9)
    plot = _Plot(title, ymax, ylabel="share of rows")
    plot.legend([(OBSERVED, "observed"), (EXPECTED, "exact law"), (BAND, "99% band")])
    slot = (plot.x1 - plot.x0) / len(rows)
    bw = slot * 0.6
    for i, (label, o, e) in enumerate(rows):
        x = plot.x0 + i * slot + (slot - bw) / 2
        lo, hi = _band(e, n)
        plot.rect(x - 2, lo, bw + 4, hi, BAND)
        color = BAD if e == 0 and o > 0 else OBSERVED
        plot.rect(x, 0.0, bw, o, color, title=f"{label}: observed {o * n:.0f} of {n} ({o:.4f}); "
                                                f"exact law {e:.4f} (expected {e * n:.1f}); 99% band [{lo:.4f}, {hi:.4f}]",
                  opacity=0.85)
        plot.tick_mark(x - 2, bw + 4, e)
        plot.xlabel(x + bw / 2, label, rotate=len(rows) > 6 or len(label) > 3)
    plot.caption(f"n = {n:.0f} rows; red bar: emitted at exact probability 0")
    return plot.svg()


def _pit_hist(cell: dict, title: str) -> str | None:
    obs = cell.get("observed")
    if not obs:
        return None
    n = sum(obs)
    bins = len(obs)
    if n <= 0:
        return None
    p = 1.0 / bins
    lo, hi = _band(p, n)
    shares = [o / n for o in obs]
    plot = _Plot(title, max(max(shares), hi) * 1.15, ylabel="share per bin")
    plot.legend([(OBSERVED, "observed"), (EXPECTED, "uniform"), (BAND, "99% band")])
    plot.rect(plot.x0, lo, plot.x1 - plot.x0, hi, BAND)
    slot = (plot.x1 - plot.x0) / bins
    for i, s in enumerate(shares):
        out = s < lo or s > hi
        plot.rect(plot.x0 + i * slot + 0.5, 0.0, slot - 1, s, BAD if out else OBSERVED,
                  title=f"PIT in [{i / bins:.2f}, {(i + 1) / bins:.2f}): {obs[i]:.0f} of {n:.0f} ({s:.4f}); "
                        f"uniform {p:.4f}, 99% band [{lo:.4f}, {hi:.4f}]", opacity=0.85)
    plot.tick_mark(plot.x0, plot.x1 - plot.x0, p)
    for v in (0.0, 0.5, 1.0):
        plot.xlabel(plot.x0 + v * (plot.x1 - plot.x0), f"{v:g}")
    plot.caption(f"PIT value (0..1); n = {n:.0f} tokens; red: outside the band")
    return plot.svg()


def _surprisal(cell: dict, title: str) -> str | None:
    extra = cell.get("extra") or {}
    v, n, d = extra.get("varentropy"), cell.get("n"), cell.get("effect")
    if v is None or not n or d is None or v <= 0:
        return None
    sd = math.sqrt(v / n)
    ci = cell.get("effect_ci") or [d, d]
    span = max(4.5 * sd, abs(ci[0]) * 1.1, abs(ci[1]) * 1.1, abs(d) * 1.1)
    pdf_max = 1 / (sd * math.sqrt(2 * math.pi))
    plot = _Plot(title, pdf_max * 1.2, ylabel="density")
    plot.legend([(BAND, "null law of the mean"), (OBSERVED, "observed mean, 95% CI")])

    def x(val: float) -> float:
        return plot.x0 + (val + span) / (2 * span) * (plot.x1 - plot.x0)

    pts = []
    for i in range(121):
        val = -span + 2 * span * i / 120
        pts.append(f"{_f(x(val))},{_f(plot.y(pdf_max * math.exp(-0.5 * (val / sd) ** 2)))}")
    base = plot.y(0)
    plot.parts.append(f'<polygon points="{_f(x(-span))},{_f(base)} {" ".join(pts)} {_f(x(span))},{_f(base)}" '
                      f'fill="{BAND}" stroke="{EXPECTED}"><title>null: mean surprisal minus entropy ~ Normal(0, '
                      f'varentropy / n), entropy {extra.get("entropy", 0):.4f} nats, sd {sd:.4f}</title></polygon>')
    yy = plot.y(pdf_max * 0.6)
    color = BAD if cell.get("verdict") == "BIAS" else OBSERVED
    plot.parts.append(f'<line x1="{_f(x(ci[0]))}" y1="{_f(yy)}" x2="{_f(x(ci[1]))}" y2="{_f(yy)}" stroke="{color}" stroke-width="2"/>')
    plot.parts.append(f'<circle cx="{_f(x(d))}" cy="{_f(yy)}" r="4" fill="{color}"><title>observed mean surprisal minus '
                      f'entropy {d:.4f} nats, 95% CI [{ci[0]:.4f}, {ci[1]:.4f}]</title></circle>')
    for val in (-span * 0.8, 0.0, span * 0.8):
        plot.xlabel(x(val), f"{val:.2g}")
    plot.caption(f"mean surprisal - entropy (nats); n = {n}")
    return plot.svg()


def cell_figure(cell: dict[str, Any], title: str | None = None) -> str | None:
    """The figure a cell supports (module docstring), or None when it holds no data to draw."""
    title = title or cell.get("id", "")
    test = str(cell.get("test", ""))
    try:
        if test == "pit":
            return _pit_hist(cell, title)
        if test.startswith("surprisal"):
            return _surprisal(cell, title)
        if cell.get("effect_unit") == "tv" or test.startswith(("gof", "joint", "greedy")):
            return _token_bars(cell, title)
    except (TypeError, ValueError, ZeroDivisionError, KeyError):  # a malformed cell: no figure, never no report
        return None
    return None


def _count_law(positions: list[dict], k: int, key: str) -> list[float] | None:
    """First-round accepted-count law from per-position acceptance probabilities (P(accept j | reached j))."""
    probs = {p["position"]: p.get(key) for p in positions}
    if any(probs.get(j) is None for j in range(1, k + 1)):
        return None
    law, reach = [], 1.0
    for j in range(1, k + 1):
        law.append(reach * (1 - probs[j]))
        reach *= probs[j]
    law.append(reach)
    return law


def acceptance_figure(audit: dict[str, Any]) -> str | None:
    """First-round accepted drafts of one sample set: observed share (99% interval) vs the canonical law."""
    try:
        k = int(audit.get("num_draft_tokens") or 0)
        positions = audit.get("positions") or []
        rounds = int(audit.get("rounds") or 0)
        if not audit.get("reported") or k < 1 or rounds <= 0 or len(positions) < k:
            return None
        accepted = {p["position"]: p.get("accepted") for p in positions}
        counts, prev = [], rounds
        for j in range(1, k + 1):
            counts.append(prev - accepted[j])
            prev = accepted[j]
        counts.append(prev)
        canonical = _count_law(positions, k, "canonical")
    except (TypeError, ValueError, KeyError):
        return None
    shares = [c / rounds for c in counts]
    bands = [_band(s, rounds) for s in shares]
    ymax = max(max(hi for _, hi in bands), max(canonical or [0])) * 1.15
    plot = _Plot(audit.get("label", ""), ymax, ylabel="share of first rounds")
    plot.legend([(OBSERVED, "observed, 99% interval"), (EXPECTED, "canonical rule (exact)")])
    slot = (plot.x1 - plot.x0) / (k + 1)
    bw = slot * 0.55
    for a in range(k + 1):
        x = plot.x0 + a * slot + (slot - bw) / 2
        lo, hi = bands[a]
        plot.rect(x, 0.0, bw, shares[a], OBSERVED, opacity=0.85,
                  title=f"{a} accepted: {counts[a]} of {rounds} first rounds ({shares[a]:.4f}), 99% interval "
                        f"[{lo:.4f}, {hi:.4f}]" + (f"; canonical {canonical[a]:.4f}" if canonical else ""))
        plot.whisker(x + bw / 2, lo, hi)
        if canonical:
            plot.tick_mark(x - 3, bw + 6, canonical[a])
        plot.xlabel(x + bw / 2, str(a))
    plot.caption(f"drafts accepted in the first round (of k={k}); {rounds} rounds")
    return plot.svg()


def ranked_pvalues(cells: list[dict[str, Any]], level: float) -> str | None:
    """Every cell's adjusted p-value (log scale), smallest first, against the rejection level."""
    ps = sorted(((c.get("adjusted_pvalue") if c.get("adjusted_pvalue") is not None else c.get("pvalue")), c.get("id", ""))
                for c in cells if (c.get("adjusted_pvalue") is not None or c.get("pvalue") is not None))
    if not ps:
        return None
    floor = 1e-20
    logs = [math.log10(max(p, floor)) for p, _ in ps]
    plot = _Plot("adjusted p-value of every cell, ranked (log10)", 0.0, ymin=min(min(logs), math.log10(level)) - 0.5,
                 width=700, height=200)
    step = (plot.x1 - plot.x0) / max(len(ps), 1)
    for i, ((p, cid), lp) in enumerate(zip(ps, logs)):
        color = BAD if p <= level else OBSERVED
        plot.parts.append(f'<circle cx="{_f(plot.x0 + (i + 0.5) * step)}" cy="{_f(plot.y(lp))}" r="2.2" fill="{color}">'
                          f"<title>{escape(cid)}: adjusted p {p:.3g}</title></circle>")
    yl = plot.y(math.log10(level))
    plot.parts.append(f'<line x1="{plot.x0}" y1="{_f(yl)}" x2="{plot.x1}" y2="{_f(yl)}" stroke="{BAD}" stroke-dasharray="4 3"/>')
    plot.caption(f"dashed: rejection level {level:g}; red: rejected; p below 1e-20 drawn at 1e-20")
    return plot.svg()
