"""``specverify bench certificate``: the planned alpha allocation column (weighted Holm, issue 27).

The gate's Holm half (``alpha / 2``) is split over a prompt's m cells by fixed weights
(:mod:`verifier.stats.allocation`): the non-TV cells (surprisal, PIT) keep the equal level ``alpha / (2 m)``; the TV
cells share the rest, ``(number of TV cells) x alpha / (2 m)``, by the levels that equalise their n under the weighted
test's computed power (:func:`verifier.stats.allocation.equalised_levels`, every TV cell at least
:data:`verifier.stats.allocation.MIN_SHARE` of its equal level).  The weights come from the exact laws only.  At those
levels the sign-mixture test (:mod:`verifier.stats.identity_mixture`) is planned by its measured power on the cell with
the largest level, and every other TV cell is measured at that n (planned too where its power falls short).  The bench
then checks the binding cell like the other columns (:func:`verifier.bench.certificate.exact_check` at its own level)
and measures every other TV cell's false alarms and power at the certificate's n at its own level: the sum of the TV
cells' false-alarm rates bounds the family's rate over them (weighted Holm rejects a true null cell only at its level or
later), to compare with their share of the Holm half.
"""

from __future__ import annotations

from scipy import stats as sps

from verifier.bench._common import md_table

__all__ = ["plan_allocation", "check_allocation", "render_allocation"]


def _fmt_ci(ci) -> str:
    return f"[{ci[0]:.3g}, {ci[1]:.3g}]"


def _interval(k: int, n: int) -> list[float]:
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return [float(ci.low), float(ci.high)]


def plan_allocation(out, laws: dict, target_tv: float, power: float, alpha: float) -> None:
    """Fill ``out`` (a :class:`verifier.bench.certificate.ConfigPlan`) with the planned levels and the n they need.

    Parameters
    ----------
    out : ConfigPlan
        ``cell_alpha`` is the equal level ``alpha / (2 m)``; sets ``alloc_levels``, ``alloc_n`` (weighted test),
        ``alloc_mix_n`` / ``alloc_mix_binding`` (mixture test) and each cell's ``alloc_mix_n`` or ``alloc_mix_covered``.
    laws : dict
        Cell name -> exact law, shape (categories,), float64.
    target_tv, power, alpha : float
        TV to certify, the power, the family alpha (the Holm half is ``alpha / 2``).
    """
    from verifier.stats.allocation import equalised_levels, tv_level_at
    from verifier.stats.identity_mixture import mixture_power, mixture_samples_needed

    tv = [c for c in out.cells if c.new_n]
    at = {c.cell: tv_level_at(laws[c.cell], "weighted", target_tv, power, alpha / 2) for c in tv}
    out.alloc_n, out.alloc_levels = equalised_levels(at, out.cell_alpha * len(tv))
    if not out.alloc_n:
        return
    first = max(tv, key=lambda c: out.alloc_levels[c.cell])
    first.alloc_mix_n = mixture_samples_needed(laws[first.cell], target_tv, alpha=out.alloc_levels[first.cell], power=power)
    if first.alloc_mix_n is None:
        return
    for c in tv:
        if c is first:
            continue
        c.alloc_mix_covered = mixture_power(first.alloc_mix_n, laws[c.cell], target_tv, alpha=out.alloc_levels[c.cell])[0]
        if c.alloc_mix_covered < power:
            c.alloc_mix_n = mixture_samples_needed(laws[c.cell], target_tv, alpha=out.alloc_levels[c.cell], power=power)
            c.alloc_mix_covered = None
    known = [c for c in tv if c.alloc_mix_n]
    out.alloc_mix_binding = max(known, key=lambda c: c.alloc_mix_n).cell
    out.alloc_mix_n = max(c.alloc_mix_n for c in known)


def check_allocation(out, laws: dict, *, exact_check, simulate_cell, null_runs: int, alt_runs: int, seed: int) -> None:
    """Measure the allocation: the binding cell's exact n at its level (``checks["alloc"]``), and every other TV cell's
    false alarms and power at the certificate's exact n at its own level (``checks["alloc_cells"]``); ``exact_check``
    and ``simulate_cell`` are :mod:`verifier.bench.certificate`'s (passed in: that module renders this one's tables)."""
    if not out.alloc_mix_n:
        return
    lv = out.alloc_levels
    out.checks["alloc"] = exact_check(laws[out.alloc_mix_binding], out.alloc_mix_n, lv[out.alloc_mix_binding], "mixture",
                                      null_runs=null_runs, alt_runs=alt_runs, seed=seed)
    out.alloc_mix_n_exact = n = out.checks["alloc"]["n"]
    out.checks["alloc_cells"] = {
        name: simulate_cell(laws[name], n, lv[name], "mixture", null_runs=null_runs, alt_runs=alt_runs, seed=seed + 1 + i)
        for i, name in enumerate(sorted(lv)) if name != out.alloc_mix_binding}


def render_allocation(results) -> list[str]:
    """Markdown tables: the levels (weights) per TV cell, the n beside the other columns, the measured calibration."""
    rows, cells, cal = [], [], []
    for r in results:
        if not getattr(r, "alloc_n", None):
            continue
        exact = r.alloc_mix_n_exact
        rows.append([r.config, f"{r.old_n:,}", f"{r.mix_n:,}" if r.mix_n else "-",
                     f"{r.mix_n / r.old_n:.3f}x" if r.mix_n else "-", f"{r.alloc_n:,} ({r.alloc_n / r.old_n:.3f}x)",
                     f"{r.alloc_mix_n:,} ({r.alloc_mix_n / r.old_n:.3f}x) ({r.alloc_mix_binding})" if r.alloc_mix_n else "-",
                     f"{exact:,} ({exact / r.old_n_exact:.3f}x exact)" if exact and r.old_n_exact else "-"])
        for c in r.cells:
            if c.cell in r.alloc_levels:
                lv = r.alloc_levels[c.cell]
                cells.append([r.config, c.cell, f"{r.cell_alpha:.3g}", f"{lv:.3g}", f"{lv / r.cell_alpha:.3f}",
                              f"{c.alloc_mix_n:,}" if c.alloc_mix_n else (
                                  f"power {c.alloc_mix_covered:.4f} at the certificate's n" if c.alloc_mix_covered is not None else "-")])
        checks = [(r.alloc_mix_binding, r.checks.get("alloc"))] + sorted(r.checks.get("alloc_cells", {}).items())
        total, runs = 0, 0
        for name, ch in checks:
            if not ch or not ch["null_runs"]:
                continue
            total, runs = total + ch["false_alarms"], ch["null_runs"]
            cal.append([r.config, name, f"{ch['n']:,}", f"{ch['alpha']:.3g}",
                        f"{ch['false_alarms']}/{ch['null_runs']:,} = {ch['rate']:.2g} {_fmt_ci(ch['rate_ci'])}",
                        f"{ch['power']:.4f} {_fmt_ci(ch['power_ci'])} ({ch['worst']})"])
        if runs:
            share = sum(r.alloc_levels.values())
            cal.append([r.config, "sum over the TV cells (bounds their family rate)", "", f"{share:.3g}",
                        f"{total / runs:.3g} (each cell's own runs; Clopper-Pearson on the summed count {_fmt_ci(_interval(total, runs))})", ""])
    if not rows:
        return []
    out = [md_table(["config", "Pearson n", "mixture n, equal levels", "x Pearson", "weighted test, planned levels",
                     "mixture test, planned levels (binding cell)", "mixture, planned levels: exact n"], rows),
           md_table(["config", "TV cell", "equal level", "planned level", "weight (x equal)",
                     "mixture n at the planned level"], cells)]
    if cal:
        out.append(md_table(["config", "TV cell", "n", "planned level", "false alarms (95% CI)",
                             "power at TV 0.03, worst alternative (95% CI)"], cal))
    return out
