"""Report writers: report.json (versioned schema), report.md, report.html, junit.xml.

All four are rendered from the one ``report.json`` dictionary built by the runner, so
``specverify report RUN_DIR`` and a run produce the same files.  Templates live in
``verifier/reports/templates/`` (jinja2; HTML autoescaping on -- decoder names and prompts come
from users).  Every file is written to a temporary name and moved into place.

report.json top-level keys (schema version 1): ``schema_version``, ``tool``, ``verdict``
(``PASS``/``FAIL``/``UNDERPOWERED``/``ERROR``), ``exit_code``, ``summary``, ``suite``,
``environment``, ``exact`` (exact-stage findings), ``decoders`` (verdict per decoder),
``sample_sets``, ``cells`` (statistic, raw and adjusted p-values, effect with CI, MDE, verdict),
``stopped`` (where a decoder failed) and ``run`` (the only volatile part: run id, timestamps,
wall time per stage).
"""

from __future__ import annotations

import json
import math
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from verifier.errors import ReportWriteError

__all__ = ["write_reports", "render_markdown", "render_html", "render_junit", "REPORT_FILES"]

REPORT_FILES = ("report.json", "report.md", "report.html", "junit.xml")


def _sanitize(obj: Any) -> Any:
    """Make ``obj`` strict JSON: non-finite floats become None / "inf" / "-inf"."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_sanitize(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _sanitize(obj.item())
    return obj


def _num(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError):
        return str(value)


def _cell_p(cell: dict, key: str = "pvalue") -> str:
    """A cell's p-value (``key``) as shown: a support violation is shown as such, never as a number."""
    return "support violation" if cell.get("support_violation") else _num(cell.get(key))


def _cell_stat(cell: dict) -> str:
    return "" if cell.get("support_violation") else _num(cell.get("statistic"))


def _cell_mde(cell: dict) -> str:
    """MDE, plus the rows per sample set that reach the suite's target when the cell is underpowered."""
    text = _num(cell.get("mde"))
    if cell.get("n_needed") is not None and cell.get("verdict") == "UNDERPOWERED":
        text += f" (needs n >= {cell['n_needed']}; has {cell.get('n')})"
    return text


def _cell_ci(cell: dict) -> str:
    """A cell's effect interval ``[lo, hi]``, or a dash where it has none (collision and consistency cells)."""
    ci = cell.get("effect_ci")
    return f"[{_num(ci[0])}, {_num(ci[1])}]" if ci else "—"


def _md(value: Any) -> str:
    """Escape text for a Markdown table cell (pipes, newlines, HTML brackets)."""
    text = re.sub(r"<(?=[A-Za-z/!?])", "&lt;", str(value))  # no HTML tags; "<=" stays readable
    for a, b in (("|", "\\|"), ("\n", " "), ("`", "'")):
        text = text.replace(a, b)
    return text


def _code(value: Any) -> str:
    """Text for a Markdown code span outside tables: shown literally (no HTML is rendered there, so
    ``<`` is not escaped -- "&lt;audit ...>" leaked before), only backticks and newlines replaced."""
    return str(value).replace("`", "'").replace("\n", " ")


def _env(autoescape: bool):
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("verifier.reports", "templates"),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined if not autoescape else jinja2.Undefined,
        trim_blocks=False,
        keep_trailing_newline=True,
    )
    env.filters["num"] = _num
    env.filters["md"] = _md
    env.filters["code"] = _code
    env.filters["pval"] = _cell_p
    env.filters["statv"] = _cell_stat
    env.filters["mdev"] = _cell_mde
    env.filters["ci"] = _cell_ci
    from verifier.reports.summary import decimal, test_phrase

    env.filters["dec"] = decimal
    env.filters["phrase"] = test_phrase
    return env


FAR_BELOW_FRACTION = 0.5  # = verifier.runner.acceptance.FAR_BELOW_FRACTION (tested), without importing the runner


def _far_below() -> float:
    return FAR_BELOW_FRACTION


def _failing(report: dict) -> list[dict]:
    """Cells whose verdict breaks their decoder's expectation: bias or underpowered where the
    decoder is expected to ``pass``."""
    expect = {d["decoder"]: d["expect"] for d in report.get("decoders", [])}
    return [c for c in report.get("cells", [])
            if expect.get(c.get("decoder")) == "pass" and c.get("verdict") in ("BIAS", "UNDERPOWERED")]


def _detected(report: dict) -> list[dict]:
    """Biased cells of ``detect`` decoders (mutants): the findings the suite expects."""
    expect = {d["decoder"]: d["expect"] for d in report.get("decoders", [])}
    return [c for c in report.get("cells", []) if expect.get(c.get("decoder")) == "detect" and c.get("verdict") == "BIAS"]


def render_markdown(report: dict) -> str:
    """report.md: the verdict and one plain line per decoder first, then failing cells, then the rest."""
    from verifier.reports.summary import cell_legend, decoder_line

    alpha = float(report.get("suite", {}).get("stats", {}).get("alpha", 1e-3))
    sets = {s.get("set_id"): s for s in report.get("sample_sets", [])}
    target = report.get("suite", {}).get("stats", {}).get("target_mde")
    lines = {d["decoder"]: decoder_line(d, [c for c in report.get("cells", []) if c.get("decoder") == d["decoder"]], sets, alpha,
                                        target)
             for d in report.get("decoders", [])}
    return _env(False).get_template("report.md.j2").render(r=report, failing=_failing(report), detected=_detected(report),
                                                           far_below=_far_below(), lines=lines, legend=cell_legend(report),
                                                           speculation=_speculation_lines(report))


def _speculation_lines(report: dict) -> dict[str, str]:
    """{decoder: what its own speculation figures show} (:func:`verifier.runner.speculation.describe`: a server's
    counters, an engine's per-call draft counts), for the decoders that report them."""
    from verifier.runner.speculation import describe

    sent = ((report.get("run") or {}).get("requests_sent_session") or {})
    out = {}
    for d in report.get("decoders", []):
        if isinstance(d.get("speculation"), dict):
            try:
                out[d["decoder"]] = describe(d["speculation"], sent.get(d["decoder"]) if isinstance(sent, dict) else None)
            except (TypeError, ValueError, KeyError, AttributeError):  # a hand-edited report.json: said, not a crash
                out[d["decoder"]] = "speculation figures unreadable in report.json"
    return out


def _sections(report: dict) -> list[dict]:
    """Per decoder: its plain line, its most telling cell with a figure, acceptance figures, its cells.

    One dict per decoder, in report order; report.html renders each as a ``<section class="decoder">``
    (and appends ``templates/decoder_extra.html.j2`` when present: the hook for extra per-decoder blocks).
    """
    from markupsafe import Markup

    from verifier.reports import summary, svg

    alpha = float(report.get("suite", {}).get("stats", {}).get("alpha", 1e-3))
    sets = {s.get("set_id"): s for s in report.get("sample_sets", [])}
    by_dec: dict[str, list[dict]] = {}
    for c in report.get("cells", []):
        by_dec.setdefault(c.get("decoder", ""), []).append(c)
    out = []
    speculation = _speculation_lines(report)
    for d in report.get("decoders", []):
        cells = by_dec.get(d["decoder"], [])
        cell = summary.most_telling_cell(cells)
        fig = svg.cell_figure(cell) if cell else None
        acc = [Markup(f) for f in (svg.acceptance_figure(a) for a in (d.get("acceptance") or [])) if f]
        out.append({
            "d": d, "line": summary.decoder_line(d, cells, sets, alpha, report.get("suite", {}).get("stats", {}).get("target_mde")),
            "speculation": speculation.get(d["decoder"]),
            "cells": cells, "cell": cell,
            "cell_where": summary.set_label(cell, sets) if cell else "",
            "figure": Markup(fig) if fig else None, "acceptance_figures": acc,
        })
    return out


def render_html(report: dict) -> str:
    """report.html: one self-contained file (inline SVG figures), autoescaped."""
    from markupsafe import Markup

    from verifier.reports import summary, svg

    failing, detected = _failing(report), _detected(report)
    stats = report.get("suite", {}).get("stats", {})
    alpha = float(stats.get("alpha", 1e-3))
    level = alpha / 2 if stats.get("correction", "gate") == "gate" else alpha
    ranked = svg.ranked_pvalues(report.get("cells", []), level)
    figs = {}
    if report.get("diagnosis"):  # issue 15: observed vs target vs best-mechanism law per diagnosed decoder
        from verifier.reports.plots import diagnosis_figures

        figs["diagnosis"] = diagnosis_figures(report)
    return _env(True).get_template("report.html.j2").render(
        r=report, failing=failing, detected=detected, sections=_sections(report), legend=summary.cell_legend(report),
        ranked=Markup(ranked) if ranked else None, plots=figs, far_below=_far_below())


def _diagnosis_by_decoder(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """{decoder: (mechanism names or status, plain line)} of the run's diagnosis (verifier.diagnose.glossary)."""
    diag = report.get("diagnosis") or {}
    if not diag.get("decoders"):
        return {}
    from verifier.diagnose.glossary import mechanism_line

    out = {}
    for item in diag["decoders"]:
        names = "+".join(m["name"] for m in item.get("mechanism") or []) or str(item.get("status", "not diagnosed"))
        out[item["decoder"]] = (names.replace(" ", "_"), mechanism_line(item))
    return out


def render_junit(report: dict) -> str:
    """junit.xml: one testsuite per decoder, one testcase per cell.

    A cell fails when its verdict contradicts the decoder's expectation: a ``BIAS`` cell of a
    ``pass`` decoder, or (for a ``detect`` decoder that went undetected) every cell.  A decoder
    error is one ``error`` testcase.  Underpowered cells of ``pass`` decoders are failures too.
    """
    root = ET.Element("testsuites", name=f"spec-verifier:{report.get('suite', {}).get('name', '')}")
    cells_by_dec: dict[str, list[dict]] = {}
    for c in report.get("cells", []):
        cells_by_dec.setdefault(c.get("decoder", ""), []).append(c)
    total = failures = errors = 0
    diagnosed = _diagnosis_by_decoder(report)
    for d in report.get("decoders", []):
        name = d["decoder"]
        suite_el = ET.SubElement(root, "testsuite", name=name)
        cases = cells_by_dec.get(name, [])
        f = e = 0
        for c in cases:
            tc = ET.SubElement(suite_el, "testcase", classname=f"{report['suite']['name']}.{name}", name=c["id"])
            msg = (f"verdict={c.get('verdict')} support violation: {c['support_violation']}" if c.get("support_violation")
                   else f"verdict={c.get('verdict')} p={_num(c.get('pvalue'))} adjusted={_num(c.get('adjusted_pvalue'))}") + \
                f" effect={_num(c.get('effect'))} {c.get('effect_unit', '')} mde={_cell_mde(c)}"
            bad = (d["expect"] == "pass" and c.get("verdict") in ("BIAS", "UNDERPOWERED")) or (
                d["expect"] == "detect" and not d["expectation_met"])
            if bad:
                f += 1
                text = c.get("support_violation") or (
                    f"n = {c.get('n')} rows can only see TV >= {_num(c.get('mde'))}; needs n >= {c['n_needed']} rows"
                    if c.get("verdict") == "UNDERPOWERED" and c.get("n_needed") is not None else d.get("reason", ""))
                if name in diagnosed:  # which known mechanism (issue 28): in the message a CI page shows first
                    msg, text = f"{msg} mechanism={diagnosed[name][0]}", f"{text}\ndiagnosis: {diagnosed[name][1]}"
                ET.SubElement(tc, "failure", message=msg).text = text
            else:
                ET.SubElement(tc, "system-out").text = msg
        conf = d.get("acceptance_conformance")
        if conf:  # declared acceptance = "canonical": one testcase, apart from the bias cells
            tc = ET.SubElement(suite_el, "testcase", classname=f"{report['suite']['name']}.{name}",
                               name=f"{name}/acceptance-rule-conformance")
            if conf["verdict"] == "NONCONFORMING" and d["expect"] == "pass":
                f += 1
                ET.SubElement(tc, "failure", message="acceptance rule conformance: NONCONFORMING").text = conf["reason"]
            else:
                ET.SubElement(tc, "system-out").text = f"{conf['verdict']}: {conf['reason']}"
        if d.get("error"):
            e += 1
            tc = ET.SubElement(suite_el, "testcase", classname=f"{report['suite']['name']}.{name}", name=f"{name}/generate")
            if d["expectation_met"]:
                ET.SubElement(tc, "system-out").text = d["error"].get("message", "")
            else:
                ET.SubElement(tc, "error", message=d["error"].get("type", "DecoderError")).text = d["error"].get("message", "")
        suite_el.set("tests", str(len(cases) + (1 if d.get("error") else 0) + (1 if conf else 0)))
        suite_el.set("failures", str(f))
        suite_el.set("errors", str(e if d.get("error") and not d["expectation_met"] else 0))
        total += len(cases) + (1 if d.get("error") else 0) + (1 if conf else 0)
        failures += f
        errors += int(suite_el.get("errors"))
    exact = report.get("exact", {})
    if exact.get("ran"):
        ex = ET.SubElement(root, "testsuite", name="exact-stage", tests="1", failures="0" if exact["ok"] else "1", errors="0")
        tc = ET.SubElement(ex, "testcase", classname=f"{report['suite']['name']}.exact", name="rules match declared status")
        if not exact["ok"]:
            ET.SubElement(tc, "failure", message="wrong rules: " + ", ".join(exact.get("wrong_rules", [])))
        total += 1
        failures += 0 if exact["ok"] else 1
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(text, encoding="utf-8", errors="backslashreplace")  # a lone surrogate from plugin text: escaped
    os.replace(tmp, path)


def write_reports(report: dict, out_dir: str | Path) -> dict[str, Path]:
    """Write report.json, report.md, report.html and junit.xml into ``out_dir``.

    Parameters
    ----------
    report : dict
        The report.json content built by :mod:`verifier.runner`.
    out_dir : path
        Created if absent.

    Returns
    -------
    dict[str, Path]
        File name -> path written.

    Raises
    ------
    ReportWriteError
        ``out_dir`` cannot be created or written (read-only, disk full, a file in the way).
    """
    out = Path(out_dir)
    report = _sanitize(report)
    if isinstance(report.get("run"), dict):  # the seal `specverify report` checks before reusing it (issue 28)
        from verifier.reports.digest import DIGEST_FIELD, report_digest

        report["run"][DIGEST_FIELD] = report_digest(report)
    texts = {
        "report.json": json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n",
        "report.md": render_markdown(report),
        "report.html": render_html(report),
        "junit.xml": render_junit(report),
    }
    paths = {}
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            _write(out / name, text)
            paths[name] = out / name
    except OSError as exc:
        raise ReportWriteError(f"cannot write reports to {str(out)!r}: {exc.strerror or exc}") from None
    return paths
