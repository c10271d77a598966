"""Matplotlib helpers (base64 PNG); report.html's own figures are inline SVG (reports/svg.py).

* :func:`failing_cell_bars` -- observed vs expected counts on the pooled categories of a cell;
* :func:`pit_figure` -- randomized-PIT histogram (summed over a decoder's PIT cells) and QQ plot;
* :func:`ranked_pvalues` -- every cell's adjusted p-value, ranked, against the rejection level;
* :func:`acceptance_lengths` -- the per-round accepted-draft distribution of each decoder and k;
* :func:`diagnosis_figures` -- the diagnosis (report.json ``diagnosis``): observed vs target vs the best
  mechanism's law on each diagnosed decoder's most telling position.
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: reports are rendered headless
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["failing_cell_bars", "pit_figure", "ranked_pvalues", "acceptance_lengths", "diagnosis_figures"]

DPI = 80  # small PNGs keep report.html self-contained and light
MAX_BARS = 24  # categories drawn per failing cell (the rest are summed into "other")


def _plain_text(fn):
    """Run a figure builder with mathtext off: names and labels ('$x^$') are drawn as typed, never
    parsed as TeX (a '$...$' decoder name made matplotlib raise after sampling and statistics).
    A figure that still fails is left out (a warning on stderr): a plot never costs the report."""
    import functools
    import sys

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
                return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - decoration only; the verdict and tables are written anyway
            plt.close("all")
            print(f"warning: figure {fn.__name__} left out of report.html: {type(exc).__name__}: {exc}", file=sys.stderr)
            return None

    return wrapper


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


@_plain_text
def failing_cell_bars(cell: dict[str, Any]) -> str | None:
    """Observed vs expected counts of one chi-square cell (pooled categories)."""
    obs, exp, labels = cell.get("observed"), cell.get("expected"), cell.get("labels")
    if not obs or not exp or cell.get("effect_unit") != "tv":
        return None
    obs, exp = np.asarray(obs, float), np.asarray(exp, float)
    labels = list(labels or [str(i) for i in range(len(obs))])
    if len(obs) > MAX_BARS:
        obs = np.append(obs[:MAX_BARS - 1], obs[MAX_BARS - 1:].sum())
        exp = np.append(exp[:MAX_BARS - 1], exp[MAX_BARS - 1:].sum())
        labels = labels[:MAX_BARS - 1] + ["other"]
    x = np.arange(len(obs))
    fig, ax = plt.subplots(figsize=(max(5.0, 0.35 * len(obs) + 2), 3.0))
    ax.bar(x - 0.2, obs, width=0.4, label="observed")
    ax.bar(x + 0.2, exp, width=0.4, label="expected (target)")
    ax.set_xticks(x)
    ax.set_xticklabels([lab[:14] for lab in labels], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("count")
    ax.set_title(str(cell.get("id", ""))[:90], fontsize=8)
    ax.legend(fontsize=7)
    return _png(fig)


@_plain_text
def pit_figure(cells: list[dict[str, Any]]) -> str | None:
    """Randomized-PIT histogram per decoder (summed over its PIT cells, as density) and a QQ plot
    of every PIT cell against Uniform(0, 1), coloured by decoder -- one figure for the report."""
    pit = [c for c in cells if c.get("effect_unit") == "ks" and c.get("observed")]
    if not pit:
        return None
    decoders = list(dict.fromkeys(c["decoder"] for c in pit))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4))
    grid = np.linspace(0, 1, 101)
    for i, d in enumerate(decoders):
        colour = plt.cm.tab20(i % 20)
        mine = [c for c in pit if c["decoder"] == d]
        hist = np.sum([np.asarray(c["observed"], float) for c in mine], axis=0)
        edges = np.linspace(0, 1, len(hist) + 1)
        a1.stairs(hist / hist.sum() * len(hist), edges, color=colour, label=d[:24])
        for c in mine:
            q = c.get("extra", {}).get("quantiles")
            if q:
                a2.plot(grid, q, lw=1, alpha=0.8, color=colour)
    a1.axhline(1.0, color="k", lw=1, ls="--")
    a1.set_xlabel("randomized PIT u")
    a1.set_ylabel("density")
    a1.set_title("PIT histogram per decoder (flat = target law)", fontsize=9)
    a1.legend(fontsize=6, ncol=2)
    a2.plot([0, 1], [0, 1], "k--", lw=1)
    a2.set_xlabel("Uniform(0,1) quantile")
    a2.set_ylabel("PIT quantile")
    a2.set_title("QQ plot (one line per PIT cell)", fontsize=9)
    return _png(fig)


@_plain_text
def ranked_pvalues(cells: list[dict[str, Any]], level: float) -> str | None:
    """Adjusted p-values of all cells, ranked, log scale, with the rejection level."""
    rows = [c for c in cells if isinstance(c.get("adjusted_pvalue"), (int, float))]
    if not rows:
        return None
    decoders = sorted({c["decoder"] for c in rows})
    fig, ax = plt.subplots(figsize=(8, 3.2))
    order = sorted(rows, key=lambda c: c["adjusted_pvalue"])
    floor = 1e-16
    for i, d in enumerate(decoders):
        xs = [j for j, c in enumerate(order) if c["decoder"] == d]
        ys = [max(order[j]["adjusted_pvalue"], floor) for j in xs]
        ax.scatter(xs, ys, s=10, label=d[:30], color=plt.cm.tab20(i % 20))
    ax.axhline(level, color="r", lw=1, ls="--", label=f"level {level:g}")
    ax.set_yscale("log")
    ax.set_xlabel("cells, ranked by adjusted p-value")
    ax.set_ylabel("adjusted p-value")
    ax.legend(fontsize=6, ncol=3, loc="lower right")
    return _png(fig)


@_plain_text
def acceptance_lengths(sample_sets: list[dict[str, Any]]) -> str | None:
    """Distribution of accepted drafts per round, per decoder, one panel per k."""
    by_k: dict[int, dict[str, np.ndarray]] = {}
    for s in sample_sets:
        hist = s.get("accepted_counts_hist") or []
        if not hist:
            continue
        k = int(s["num_draft_tokens"])
        acc = by_k.setdefault(k, {})
        acc[s["decoder"]] = acc.get(s["decoder"], np.zeros(k + 1)) + np.asarray(hist, float)
    if not by_k:
        return None
    ks = sorted(by_k)
    fig, axes = plt.subplots(1, len(ks), figsize=(4 * len(ks), 3), squeeze=False)
    for ax, k in zip(axes[0], ks):
        decs = sorted(by_k[k])
        width = 0.8 / len(decs)
        for i, d in enumerate(decs):
            h = by_k[k][d]
            ax.bar(np.arange(k + 1) + i * width - 0.4 + width / 2, h / h.sum(), width=width, label=d[:24],
                   color=plt.cm.tab20(i % 20))
        ax.set_xticks(np.arange(k + 1))
        ax.set_xlabel("accepted drafts per round")
        ax.set_ylabel("fraction of rounds")
        ax.set_title(f"k = {k}", fontsize=9)
        ax.legend(fontsize=6)
    return _png(fig)


MAX_PANELS = 4  # decoders drawn in the diagnosis figure (~1 s per panel on a loaded CPU; report.json has every plot)


def diagnosis_figures(report: dict) -> dict[str, str]:
    """{"all": base64 PNG}: one panel per diagnosed decoder (at most MAX_PANELS), observed vs target vs the
    best mechanism's law on its most telling position, all in one figure (one PNG costs far less than many)."""
    panels = []
    for d in (report.get("diagnosis") or {}).get("decoders", []):
        sets = [s for s in d.get("sets", []) if s.get("plot")]
        if sets:
            panels.append((d["decoder"], max(sets, key=_log_lr)))
    if not panels:
        return {}
    png = _diagnosis_figure(panels[:MAX_PANELS])
    return {"all": png} if png else {}


def _log_lr(s: dict) -> float:
    v = (s.get("decision") or {}).get("log_lr")
    if isinstance(v, str):
        return math.inf if v == "inf" else -math.inf
    return -math.inf if v is None else v


def _diagnosis_figure(panels) -> str | None:
    @_plain_text
    def draw() -> str:
        cols = min(3, len(panels))
        rows = -(-len(panels) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.6 * rows), squeeze=False)
        for ax in axes.ravel()[len(panels):]:
            ax.axis("off")
        for ax, (decoder, s) in zip(axes.ravel(), panels):
            pl = s["plot"]
            x = np.arange(len(pl["labels"]))
            ax.bar(x - 0.27, pl["observed"], 0.27, label="observed")
            ax.bar(x, pl["target"], 0.27, label="target")
            ax.bar(x + 0.27, pl["mechanism_law"], 0.27, label=pl["mechanism"])
            ax.set_xticks(x, pl["labels"], rotation=45, fontsize=6)
            ax.set_title(f"{decoder}: {s['sampling']}, position {pl['position']}", fontsize=7)
            ax.legend(fontsize=6)
        return _png(fig)

    return draw()
