"""Reports of kernel-level audits (:func:`verifier.audit.kernel_audit.audit_kernel`): report.json + report.md.

The bias verdict is judged on the *emitted-token law* only: the cells ``position j token`` of each
case, corrected together (:func:`verifier.stats.adjust`, gate mode, dependent cells).  The accepted
count is reported separately as the kernel's *acceptance*, against the canonical rule and, where the
kernel declares another lossless rule (``acceptance_rule = "block_verification"``), against that
rule's exact law -- a lossless rule that accepts more is not bias.

Per case: ``BIAS DETECTED`` when the emitted-token family rejects; else ``PASS`` when every
emitted-token cell's minimum detectable effect (TV, power 0.99 at the cell's alpha) is at most
``target_tv``; else ``UNDERPOWERED`` (the cells that reach it are still listed).  The report's
verdict is the worst case's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from verifier.errors import ReportWriteError
from verifier.stats import BIAS_DETECTED, PASS, UNDERPOWERED, accepted_count_test, adjust

__all__ = ["kernel_audit_report", "write_kernel_report", "render_kernel_markdown", "rule_accepted_count_law", "ACCEPTANCE_RULES"]

DEFAULT_TARGET_TV = 0.03  # the target: every emitted-token cell must see a TV of 0.03
_ORDER = {PASS: 0, UNDERPOWERED: 1, BIAS_DETECTED: 2}


ACCEPTANCE_RULES = ("canonical", "block_verification", "target_only")


def rule_accepted_count_law(rule: str, case) -> tuple:
    """Exact accepted-count law of ``case`` under a lossless acceptance rule.

    ``"canonical"``: accept ``x`` with prob ``min(1, p(x)/q(x))``.  ``"block_verification"``: Sun et
    al. 2024, Algorithm 2 (:mod:`verifier.engines.block_verification`).  ``"target_only"``: accept
    ``x`` with prob ``p(x)`` whatever ``q`` (draft-free verification, e.g. LMDeploy without draft probs).

    Raises
    ------
    InvalidArgumentError
        An unknown rule name.
    """
    if rule == "block_verification":
        from verifier.engines.block_verification import block_accepted_count_law

        return block_accepted_count_law(case.target_probs, case.draft_probs)
    if rule == "target_only":
        return case.accepted_count_law([sum(pv * qv for pv, qv in zip(p, q)) for p, q in zip(case.target_probs, case.draft_probs)])
    if rule == "canonical":
        return case.accepted_count_law()
    from verifier.errors import invalid_argument

    raise invalid_argument("acceptance_rule", rule, " or ".join(ACCEPTANCE_RULES))


def _num(x: Any) -> Any:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else ("inf" if math.isinf(x) else x)


def _case_report(r, target_tv: float, rule: str) -> dict[str, Any]:
    emitted = [c for c in r.cells if c.name.startswith("position")]
    adj = adjust([c.result for c in emitted], alpha=r.alpha, mode="gate", dependent=True)
    cells = []
    for c, p_adj, rej in zip(emitted, adj.adjusted_pvalues, adj.rejected):
        res = c.result
        cells.append({
            "name": c.name, "n": int(res.n), "statistic": _num(res.statistic), "pvalue": _num(res.pvalue), "adjusted_pvalue": _num(p_adj),
            "mde_tv": _num(res.mde.tv) if res.mde else None, "tv_estimate": _num(res.effect.estimate) if res.effect else None,
            "tv_ci": [_num(res.effect.ci_low), _num(res.effect.ci_high)] if res.effect else None,
            "verdict": res.verdict(target_tv, rejected=bool(rej)), "expected": [float(v) for v in c.expected_probs],
            "observed": [float(v) / max(1, int(c.counts.sum())) for v in c.counts],
        })
    if adj.family_rejected or any(c["verdict"] == BIAS_DETECTED for c in cells):
        verdict = BIAS_DETECTED
    elif any(c["verdict"] == UNDERPOWERED for c in cells):
        verdict = UNDERPOWERED
    else:
        verdict = PASS
    counts = _accepted_histogram(r)
    acceptance = _acceptance(r, counts, rule) if counts is not None else None
    mdes = [c["mde_tv"] for c in cells if isinstance(c["mde_tv"], float)]
    return {"case": r.case.name, "purpose": r.case.purpose, "num_draft_tokens": r.case.num_draft_tokens, "num_draws": r.num_draws,
            "seed": r.seed, "alpha": r.alpha, "verdict": verdict, "emitted_family": {"method": adj.method, "combined_pvalue": _num(adj.combined_pvalue)},
            "smallest_mde_tv": min(mdes) if mdes else None, "largest_mde_tv": max(mdes) if mdes else None,
            "cells": cells, "acceptance": acceptance, "blind": list(r.blind),
            "draw_seconds": None if getattr(r, "draw_seconds", None) is None else round(float(r.draw_seconds), 6),
            "draws_needed_power": _power_draws(r) if verdict == UNDERPOWERED else None}


def _power_draws(r) -> int | None:
    """The draws the case needs by the power calculation the console prints (:meth:`KernelAuditResult.draws_needed`),
    so report.md and the console agree; None where it has none (no feasible n, or another result type)."""
    need = getattr(r, "draws_needed", None)
    try:
        value = need() if callable(need) else None
    except (ValueError, ArithmeticError):
        return None
    return int(value) if isinstance(value, (int, np.integer)) and value > 0 else None


def _accepted_histogram(r) -> np.ndarray | None:
    """Rounds with m = 0..k accepted drafts, from whichever form the audit result keeps them in."""
    for cell in [getattr(r, "conformance", None)] + [c for c in r.cells if c.name.startswith("accepted count")]:
        if cell is not None:
            return np.asarray(cell.counts, dtype=np.int64)
    audit = getattr(r, "acceptance", None) or {}
    if audit.get("rounds") and audit.get("positions"):  # verifier.runner.acceptance: rounds reaching / accepting each position
        at_least = [int(audit["rounds"])] + [int(row["accepted"]) for row in audit["positions"]] + [0]
        return np.array([at_least[m] - at_least[m + 1] for m in range(len(at_least) - 1)], dtype=np.int64)
    return None


def _acceptance(r, counts: np.ndarray, rule: str) -> dict[str, Any]:
    """Observed accepted-count law vs the canonical law and the claimed rule's law (not part of the verdict)."""
    n = int(counts.sum())
    observed = (counts / max(n, 1)).tolist()
    canonical = r.case.accepted_count_law()
    acceptance = {"observed": observed, "mean_accepted": float(np.dot(np.arange(len(observed)), observed)),
                  "canonical_law": [float(v) for v in canonical],
                  "vs_canonical_pvalue": _num(accepted_count_test(_expand(counts), canonical, alpha=r.alpha).pvalue), "rule": rule}
    if rule != "canonical":
        law = rule_accepted_count_law(rule, r.case)
        acceptance["rule_law"] = [float(v) for v in law]
        acceptance["vs_rule_pvalue"] = _num(accepted_count_test(_expand(counts), law, alpha=r.alpha).pvalue)
    note = (getattr(r, "acceptance", None) or {}).get("note")
    if note:
        acceptance["note"] = note
    return acceptance


def _expand(counts: np.ndarray) -> np.ndarray:
    """Accepted counts per draw from a histogram (accepted_count_test takes the per-draw values)."""
    return np.repeat(np.arange(len(counts)), counts.astype(np.int64))


def kernel_audit_report(results: Sequence, *, kernel: str, settings: dict | None = None, engine: dict | None = None,
                        target_tv: float = DEFAULT_TARGET_TV, acceptance_rule: str = "canonical", command: str | None = None,
                        seconds: Sequence[float] | None = None) -> dict[str, Any]:
    """Build the JSON-able report of kernel audits (one :class:`KernelAuditResult` per case).

    Parameters
    ----------
    results : sequence of KernelAuditResult
    kernel : str
        The kernel spec or engine name audited.
    settings, engine : dict, optional
        The kernel's settings and the engine's description (version, entry point, install record).
    target_tv : float, default 0.03
        Smallest bias (TV) every emitted-token cell must be able to see for ``PASS``.
    acceptance_rule : {"canonical", "block_verification", "target_only"}, default "canonical"
        The lossless rule the kernel claims; its accepted-count law is tested besides the canonical one.
    command : str, optional
        The command that reproduces the report.
    seconds : sequence of float, optional
        Wall time of each case.

    Returns
    -------
    dict
        ``verdict`` (worst case), ``cases`` (per-case verdict, cells with n / p / MDE / TV estimate,
        acceptance), and the inputs above.
    """
    if not 0 < target_tv < 1:
        from verifier.errors import invalid_argument

        raise invalid_argument("target_tv", target_tv, "a total variation in (0, 1)")
    cases = [_case_report(r, target_tv, acceptance_rule) for r in results]
    for c, s in zip(cases, seconds or [None] * len(cases)):
        c["seconds"] = None if s is None else round(float(s), 1)
    verdict = max((c["verdict"] for c in cases), key=_ORDER.__getitem__) if cases else UNDERPOWERED
    return {"schema": 1, "mode": "kernel", "kernel": kernel, "verdict": verdict, "target_tv": target_tv,
            "acceptance_rule": acceptance_rule, "settings": settings or {}, "engine": engine or {}, "command": command, "cases": cases}


def _fmt(x: Any, spec: str = ".3g") -> str:
    return "-" if x is None else (str(x) if isinstance(x, str) else format(x, spec))


def render_kernel_markdown(report: dict[str, Any]) -> str:
    """report.md: verdict, configuration, per-case cells (n, p, MDE, TV estimate) and acceptance."""
    eng = report.get("engine") or {}
    lines = [f"# Kernel audit: {report['kernel']}", "",
             f"**Verdict: {report['verdict']}** (emitted-token law; target TV {report['target_tv']:g}; acceptance reported separately)", ""]
    if eng:
        lines += [f"- engine: `{eng.get('name')}` {eng.get('package')}=={eng.get('version')}", f"- entry point: `{eng.get('entry_point')}`"]
        rec = eng.get("install_record") or {}
        if rec:
            lines.append(f"- installed from `{rec.get('wheel')}` (sha256 `{str(rec.get('sha256'))[:16]}...`), install {rec.get('seconds')} s")
        for path, sha in (eng.get("source_sha256") or {}).items():
            lines.append(f"- source audited: `{path}` sha256 `{sha[:16]}...`")
    lines += [f"- settings: `{json.dumps(report.get('settings') or {}, sort_keys=True)}`", f"- acceptance rule claimed: {report['acceptance_rule']}"]
    if report.get("command"):
        lines += ["", "Reproduce:", "", "```", report["command"], "```"]
    for c in report["cases"]:
        lines += ["", f"## {c['case']} (k={c['num_draft_tokens']}): {c['verdict']}", "",
                  f"{c['purpose']}", "",
                  f"n = {c['num_draws']} draws, seed {c['seed']}, alpha {c['alpha']:g} ({c['emitted_family']['method']}), "
                  f"{_fmt(c.get('seconds'))} s; smallest detectable TV per cell {_fmt(c['smallest_mde_tv'])} .. {_fmt(c['largest_mde_tv'])}", "",
                  "| cell | n | p | p adj | MDE (TV) | TV estimate [99% CI] | verdict |", "|---|---|---|---|---|---|---|"]
        for cell in c["cells"]:
            ci = cell["tv_ci"] or [None, None]
            lines.append(f"| {cell['name']} | {cell['n']} | {_fmt(cell['pvalue'])} | {_fmt(cell['adjusted_pvalue'])} | {_fmt(cell['mde_tv'])} | "
                         f"{_fmt(cell['tv_estimate'])} [{_fmt(ci[0])}, {_fmt(ci[1])}] | {cell['verdict']} |")
        need = draws_needed(c, report["target_tv"])
        if need is not None and need["draws"] is None:
            lines += ["", f"Draws needed for TV {report['target_tv']:g}: not estimated -- cell(s) {', '.join(need['blind'])} "
                          f"have no finite smallest detectable TV at this n, so the 1 / sqrt(n) scaling has nothing to "
                          f"scale; rerun with more draws."]
        elif need is not None:
            how = ("the power calculation of each cell at its level, scaled by the share of draws that reach it"
                   if need.get("method") == "power calculation per cell" else "the MDE scales as 1 / sqrt(n)")
            lines += ["", f"Draws needed for TV {report['target_tv']:g} in every cell: about {need['draws']:,} ({how}; "
                          f"the least reached cell sets it)"
                          + (f", {need['hours']:.2g} h at this case's {need['rate']:,.0f} draws/s ({need['rate_of']})"
                             if need.get("hours") else "") + "."]
        a = c["acceptance"] or {}
        text = "" if not a else ( (f"Acceptance (not part of the verdict): accepted-count law observed {[round(v, 4) for v in a['observed']]}, "
                f"canonical {[round(v, 4) for v in a['canonical_law']]} (p = {_fmt(a['vs_canonical_pvalue'])})"))
        if "rule_law" in a:
            text += f", {a['rule']} {[round(v, 4) for v in a['rule_law']]} (p = {_fmt(a['vs_rule_pvalue'])})"
        if a:
            lines += ["", f"{text}; mean accepted {a['mean_accepted']:.4f}."]
        if c["blind"]:
            lines += ["", "Blind cells (defects this case cannot show, whatever n):", ""] + [f"- {b}" for b in c["blind"]]
    return "\n".join(lines) + "\n"


def draws_needed(case: dict[str, Any], target_tv: float) -> dict[str, Any] | None:
    """Draws an UNDERPOWERED case needs for every cell's MDE to reach ``target_tv`` (MDE ~ 1 / sqrt(n), so
    ``num_draws * max(MDE / target_tv)^2``), and the hours at the case's measured rate; None for another verdict.
    A cell with an infinite MDE gives ``draws`` None and ``blind`` (the cells): the finite ones would understate it."""
    if case.get("verdict") != UNDERPOWERED:
        return None
    draws_now = case.get("num_draws")
    if (isinstance(draws_now, bool) or not isinstance(draws_now, int) or draws_now < 1 or isinstance(target_tv, bool)
            or not isinstance(target_tv, (int, float)) or not 0 < target_tv < 1 or not isinstance(case.get("cells"), list)):
        return None  # an edited or truncated report: nothing to scale from (never a traceback)
    blind = [c.get("name", "?") for c in case["cells"] if c.get("mde_tv") == "inf"
             or (isinstance(c.get("mde_tv"), float) and math.isinf(c["mde_tv"]))]  # no MDE at this n: no scaling
    if blind:  # the finite cells would understate it: say which cell no scaling of n reaches
        return {"draws": None, "rate": None, "hours": None, "blind": blind}
    mdes = [c["mde_tv"] for c in case["cells"] if isinstance(c.get("mde_tv"), float) and c["mde_tv"] > target_tv]
    if not mdes:
        return None
    draws = int(math.ceil(case["num_draws"] * (max(mdes) / target_tv) ** 2))
    power = case.get("draws_needed_power")  # the console's figure: the power calculation per cell (KernelAuditResult)
    method = "1 / sqrt(n) scaling"
    if isinstance(power, int) and not isinstance(power, bool) and power > 0:
        draws, method = power, "power calculation per cell"
    secs, drawing = _seconds(case.get("seconds")), _seconds(case.get("draw_seconds"))
    if drawing is not None:  # the drawing rate scales with n; the rest is paid once
        rate = case["num_draws"] / drawing
        fixed = max(0.0, secs - drawing) if secs is not None else 0.0
    else:  # an older report: the case's whole wall time (statistics included) -- an overestimate at large n
        rate = case["num_draws"] / secs if secs is not None else None
        fixed = 0.0
    return {"draws": draws, "rate": rate, "hours": (draws / rate + fixed) / 3600 if rate else None,
            "rate_of": "drawing" if drawing is not None else "case wall time", "method": method}


def _seconds(x: Any) -> float | None:
    """A stored duration as a float, or None when it is no measured time (absent, a bool, a string, zero, negative,
    NaN or infinite: an edited or corrupted report.json), so no rate or hours come from it."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) and x > 0 else None


def write_kernel_report(report: dict[str, Any], out_dir: str | Path) -> Path:
    """Write ``report.json`` and ``report.md`` into ``out_dir`` (created); returns the folder.

    Raises
    ------
    ReportWriteError
        The folder cannot be created or written.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        (out / "report.md").write_text(render_kernel_markdown(report))
    except OSError as exc:
        raise ReportWriteError(f"--report-dir={str(out_dir)!r} cannot be written: {exc.strerror or exc}") from None
    return out
