"""The README's "Audit matrix", regenerated from the committed engine reports.

``python -m verifier.engines.matrix [ROOT] [--readme README.md]`` reads every ``report.json`` under
``ROOT`` (default ``reports/audits``) and prints one markdown row per report:

engine | version | entry point | config | n | verdict | MDE (TV) | acceptance vs canonical | root cause

Two report kinds are understood:

* kernel audits (``specverify audit --engine NAME --report-dir DIR``: ``"mode": "kernel"``), one row per
  report folder (its cases summarised);
* known-p engine audits (``specverify audit --engine NAME --run-dir DIR``: a runner report plus the run's
  ``audit.json``, which holds the engine's description), one row per report folder.

URL audits (``specverify audit --url``): the engine record is what the server said it was (audit.json
``engine``; a self-reported audit's report.json ``design.server``, or in reports written before that was recorded
the server kind and ``--api DIALECT`` they recorded); a server with no version endpoint (``mlx_lm server``) gets the first field of
its replies' ``system_fingerprint`` (``decoders[].speculation.server_fingerprints``), and a report that recorded
neither the version of its top folder's name, ``<server>-<version>[-<design>]``, which the publishing scripts under
``ci/url-audits/`` write from the server they launched.

Acceptance: the report's acceptance audit, or the first line of ``acceptance.txt`` in the report folder where
that exists (engines whose first round starts after token 1, e.g. llama.cpp: written by
``python -m verifier.diagnose.reproduce ENGINE RUN_DIR=REPORT_DIR``).
An UNDERPOWERED row says the n its cells need and, where the run timed its sampling, the hours that n takes at the
run's rate ("UNDERPOWERED, needs n 53,474 (about 0.25 h more at 55 rows/s)").
A PASS or UNDERPOWERED planned for another target TV than the matrix's :data:`MATRIX_TV` (0.03; audit.json ``target_tv`` or the
report's ``suite.stats.target_mde``) says so: "PASS at target TV 0.3".
Root cause of a BIAS DETECTED: "harness: <mechanism>." when the report's own diagnosis named one (else what it said:
"harness: no known mechanism (engine laws not scored: <why>)", or "harness: no diagnosis in the report."), then "human:" and
the first line starting with ``Root cause:`` in ``FINDINGS.md`` of the
report folder or of the engine's folder (``reports/audits/<engine>-<version>/FINDINGS.md``); a BIAS
without one says "root cause: not written up" (never left blank).  An ERROR row carries the same FINDINGS line (an
engine that crashes on a setting is a finding: vLLM's server at top-k without top-p).  With ``--readme FILE`` the table
between the markers ``<!-- audit-matrix:start -->`` and ``<!-- audit-matrix:end -->`` is replaced, and the
field-kinds table (:mod:`verifier.engines.kinds_matrix`) between ``<!-- field-kinds:start -->`` and
``<!-- field-kinds:end -->`` where the file has those markers.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

__all__ = ["collect", "render", "main", "HEADER", "START", "END"]

MATRIX_TV = 0.03  # the certificate the matrix asks of every engine (issue 27); a row planned for another TV says so
HEADER = ("| engine | version | entry point | config | n | verdict | MDE (TV) | acceptance vs canonical | root cause |\n"
          "|---|---|---|---|---|---|---|---|---|")
START, END = "<!-- audit-matrix:start -->", "<!-- audit-matrix:end -->"


NOTE_WIDTH = 180  # characters of an acceptance note a matrix cell keeps


def _short_note(note: Any) -> str:
    """An acceptance note for a table cell: its parenthesised asides dropped; a note still longer than
    :data:`NOTE_WIDTH` keeps its first sentence, or is cut at a word boundary, with " ..." (a single word longer than that
    is cut inside)."""
    text = " ".join(("" if note is None else str(note)).split())
    while True:  # innermost asides first, so nested parentheses go too
        plain = re.sub(r"\s*\([^()]*\)", "", text)
        if plain == text:
            break
        text = plain
    text = text.strip()
    if len(text) <= NOTE_WIDTH:
        return text
    first = text.split(". ", 1)[0]  # the finding; what follows is advice (how to report the figures)
    if len(first) <= NOTE_WIDTH:
        return first + " ..."
    cut = textwrap.shorten(text, NOTE_WIDTH, placeholder=" ...")
    return cut if cut != "..." and len(cut) > 40 else text[:NOTE_WIDTH - 4] + " ..."


def _url_factors(options: dict[str, Any]) -> str:
    """A URL audit decoder's design factors beyond the concurrency: the mixed batch, unseeded requests, ``n`` > 1."""
    out = ", mixed batch" if options.get("background") else ""
    out += ", unseeded" if options.get("seeded") is False else ""
    n = options.get("n_per_request", 1)
    return out + (f", n = {n} per request" if isinstance(n, int) and n > 1 else "")


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def _range(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    return _fmt(lo) if _fmt(lo) == _fmt(hi) else f"{_fmt(lo)}-{_fmt(hi)}"


def _count(values: list[Any]) -> str:
    values = sorted({int(v) for v in values if v is not None})
    return "" if not values else f"{values[0]:,}" if len(values) == 1 else f"{values[0]:,}-{values[-1]:,}"


def _root_cause(folder: Path, root: Path) -> str:
    for cand in (folder / "FINDINGS.md", *[p / "FINDINGS.md" for p in folder.parents if root in p.parents or p == root]):
        if cand.is_file():
            for line in cand.read_text(encoding="utf-8").splitlines():
                m = re.match(r"\s*[*_]*root cause:?[*_]*:?\s*(.+)", line, re.IGNORECASE)
                if m:
                    return f"{m.group(1).strip()} ([FINDINGS]({cand.as_posix()}))"
            return f"[FINDINGS]({cand.as_posix()})"
    return ""


BOUNDARY_STATUS = "filter boundary (numeric precision)"  # = verifier.diagnose.boundary.BOUNDARY_STATUS (tested; no upward import)


def _harness_cause(r: dict[str, Any]) -> str:
    """"harness: <mechanism>." when the report's own diagnosis named one (report.json ``diagnosis``), else what it said instead."""
    def items(v, kind=list) -> list:  # a hand-edited or damaged diagnosis: its malformed parts name nothing
        if not isinstance(v, kind):
            return []
        return list(v.values()) if kind is dict else v

    names = []
    diagnosis = r.get("diagnosis") if isinstance(r.get("diagnosis"), dict) else {}
    for d in (d for d in items(diagnosis.get("decoders")) if isinstance(d, dict)):
        if d.get("status") == "consistent":
            names += [str(m["name"]) for m in items(d.get("mechanism")) if isinstance(m, dict) and "name" in m]
        elif d.get("status") == BOUNDARY_STATUS:  # a support change at a filter threshold (numeric precision)
            for f in (f for f in items(d.get("boundary"), dict) if isinstance(f, dict)):
                kind = "rounding" if f.get("rounding") else "precision or a logits defect"
                names.append(f"{'/'.join(map(str, items(f.get('filters'))))} threshold flip ({kind})")
    if names:
        return f"harness: `{' or '.join(dict.fromkeys(names))}`."
    if not diagnosis:
        return "harness: no diagnosis in the report."
    statuses, why = [], ""
    for d in (d for d in items(diagnosis.get("decoders")) if isinstance(d, dict)):
        if d.get("status"):
            statuses.append(str(d["status"]))
        first = next(iter(items((d.get("engine_law") or {}).get("sets") if isinstance(d.get("engine_law"), dict) else None)), None)
        if not why and isinstance(first, dict) and first.get("note"):  # why the engine's laws were not scored
            why = str(first["note"]).split(":")[0]
    said = " or ".join(dict.fromkeys(statuses)) or "no mechanism named"
    return f"harness: {said}" + (f" (engine laws not scored: {why})" if why else "") + "; the report's Diagnosis says why."


def _kernel_row(folder: Path, r: dict[str, Any], root: Path) -> dict[str, Any]:
    eng = r.get("engine") or {}
    cases = r.get("cases", [])
    settings = {k: v for k, v in (r.get("settings") or {}).items() if k not in ("engine", "version")}
    acc = []
    for c in cases:
        a = c.get("acceptance") or {}
        canon = a.get("canonical_law")
        if a.get("mean_accepted") is not None and canon:
            acc.append(f"{c['case']}: {a['mean_accepted']:.3g} vs {sum(i * v for i, v in enumerate(canon)):.3g}"
                       + (f" ({a['rule']})" if a.get("rule") else ""))
    return {"engine": r.get("kernel") or eng.get("name", folder.parent.name), "version": eng.get("version", ""),
            "entry_point": eng.get("entry_point", ""),
            "config": "kernel; " + ", ".join(f"{k}={v}" for k, v in settings.items()) + f"; cases {', '.join(c['case'] for c in cases)}",
            "n": _count([c.get("num_draws") for c in cases]), "verdict": r.get("verdict", ""),
            "mde": _range([c.get("smallest_mde_tv") for c in cases] + [c.get("largest_mde_tv") for c in cases]),
            "acceptance": "; ".join(acc), "folder": folder}


def _engine_from_folder(folder: Path, root: Path) -> dict[str, Any]:
    """The registered engine whose ``<name>-<version>`` is the report's top folder under ``root`` (else {})."""
    from verifier.engines import ENGINE_REGISTRY, engine_names

    try:
        top = folder.resolve().relative_to(root.resolve()).parts[0]
    except (ValueError, IndexError):
        return {}
    engine_names()  # registers the built-in adapters
    for cls in ENGINE_REGISTRY.values():
        if top == f"{cls.name}-{cls.version}":
            return cls.describe()
    # the folder of another version than the one installed here (transformers follows the harness's own venv):
    # the adapter's description with the folder's version, the longest matching name first
    for cls in sorted(ENGINE_REGISTRY.values(), key=lambda c: -len(c.name)):
        rest = top[len(cls.name) + 1:] if top.startswith(f"{cls.name}-") else ""
        if rest[:1].isdigit():
            return {**cls.describe(), "version": rest}
    return {}


# the version in a published folder's name, ``<server>-<version>[-<design>]`` (mlx-lm-server-0.32.2,
# llama-server-0c1e570-self-reported): a dotted number or a 7+ hex-digit build
_FOLDER_VERSION = re.compile(r"-(\d[\w.]*|[0-9a-f]{7,})(?:-[a-z][a-z-]*)?$")


def _url_version(folder: Path, root: Path, speculation: dict[str, Any]) -> str:
    """The version of a URL audit's server that recorded none from a version endpoint: its replies'
    ``system_fingerprint`` (first ``-``-separated field: mlx_lm server's ``<mlx-lm version>-<mlx version>-...``),
    else the report's top folder name under ``root`` (written by the publishing script from the server it launched,
    e.g. ``llama-server --version``), else ""."""
    prints = speculation.get("server_fingerprints") or []
    if prints:
        return ", ".join(dict.fromkeys(str(p).split("-")[0] for p in prints))
    try:
        top = folder.resolve().relative_to(root.resolve()).parts[0]
    except (ValueError, IndexError):
        return ""
    m = _FOLDER_VERSION.search(top)
    return m.group(1) if m else ""


def _self_reported_engine(design: dict[str, Any]) -> dict[str, Any]:
    """The engine record of a self-reported URL audit: what the server said it was (report.json ``design.server``,
    recorded since session 13), else the name and entry point its dialect implies (older reports)."""
    if design.get("server"):
        return dict(design["server"])
    api = str(design.get("api", ""))  # what such a report recorded: the dialect (this layer reads no dialect table)
    return {"name": "llama-server (URL)" if api == "llama-server" else f"{api} server", "version": "",
            "entry_point": f"--api {api}" if api else ""}


def _per_decoder(r: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(index, report restricted to that decoder) for each decoder of a suite report with several (one matrix row
    each: a suite's first decoder must not speak for the others); ``[(0, r)]`` otherwise."""
    decoders = r.get("decoders") or []
    if len(decoders) < 2:
        return [(0, r)]
    out = []
    for i, d in enumerate(decoders):
        name = d.get("decoder")
        diagnosis = dict(r.get("diagnosis") or {})
        diagnosis["decoders"] = [x for x in diagnosis.get("decoders") or [] if x.get("decoder") == name]
        out.append((i, {**r, "decoders": [d], "sample_sets": [x for x in r.get("sample_sets", []) if x.get("decoder") == name],
                        "cells": [c for c in r.get("cells", []) if c.get("decoder") == name], "diagnosis": diagnosis,
                        "several_decoders": True}))
    return out


def _sampling_label(sampling: dict[str, Any], k: Any) -> str:
    """``T=1.0, top-k 8, k=3``: one sample set's sampling config and draft length as the matrix shows it."""
    return f"T={sampling.get('temperature')}" + (f", top-k {sampling['top_k']}" if sampling.get("top_k") else "") \
        + (f", top-p {sampling['top_p']}" if sampling.get("top_p") else "") \
        + "".join(f", {label} {sampling[key]}" for key, label in (("repetition_penalty", "repetition"), ("presence_penalty", "presence"),
                                                                 ("frequency_penalty", "frequency"), ("min_p", "min-p"))
                  if sampling.get(key) is not None) + f", k={k if k is not None else ''}"


def _known_p_row(folder: Path, r: dict[str, Any], root: Path, index: int = 0) -> dict[str, Any]:
    plan = json.loads((folder / "audit.json").read_text()) if (folder / "audit.json").is_file() else {}
    eng = plan.get("engine") or _engine_from_folder(folder, root)  # reports run with --decoder SPEC carry no engine record
    design = r.get("design") if isinstance(r.get("design"), dict) else {}
    self_reported = design.get("name") == "self-reported"
    if self_reported:  # verifier.server.self_audit: no audit.json, the server is described in report.json
        eng = _self_reported_engine(design)
    d = (r.get("decoders") or [{}])[0]
    sets = r.get("sample_sets", [])
    options = {}
    try:
        options = dict(r["suite"]["source"] and json.loads((folder / "run.json").read_text())["suite"]["raw"]["decoders"][index].get("options", {}))
    except (OSError, ValueError, KeyError, IndexError):
        pass
    if not options and sets:  # report folders keep no run.json: the decoder identity in report.json has the options
        options = dict((sets[0].get("decoder_identity") or {}).get("options") or {})
    defaults = {k: o.get("default") for k, o in (eng.get("options") or {}).items()}
    shown = {k: v for k, v in options.items() if k not in ("target_model", "draft_model") and v not in ("", None)
             and not (isinstance(v, str) and "/" in v)  # file paths (logs, checkpoints) are not configuration
             and (k == "mode" or v != defaults.get(k))}  # the options that differ from the engine's defaults
    sampling = sets[0].get("sampling", {}) if sets else {}
    cfg = ", ".join(f"{k}={v}" for k, v in shown.items())
    if r.get("several_decoders"):  # one decoder of a suite of several: the row names it
        cfg = f"{d.get('decoder')}" + (f": {cfg}" if cfg else "")
    if "base_url" in options or self_reported:  # a URL audit: the client's options are not the server's configuration
        # the folder names the server variant before its sampling config: control-..., cache-off-..., certificate-...
        variant = re.match(r"(.+?)-t\d", folder.name)
        control = variant.group(1) if variant else ""
        cfg = (f"URL self-reported, top-{design.get('logprobs')} logprobs" if self_reported else
               f"URL, {options.get('num_concurrent', 4)} in flight" + _url_factors(options)) \
            + (f", {control} server" if control else "")
    labels = list(dict.fromkeys(_sampling_label(x.get("sampling", {}), x.get("num_draft_tokens")) for x in sets))
    cfg += "; " + (" and ".join(labels) if labels else _sampling_label(sampling, ""))  # every config the report holds
    acc = []
    for a in d.get("acceptance") or []:
        if a.get("mean_accepted") is None:
            acc.append(_short_note(a.get("note", "")))
        elif a.get("canonical_mean_accepted") is None:
            acc.append(f"{a['mean_accepted']:.2f} accepted/round; canonical: " + ("skipped (draft unknown)" if a.get("canonical_skipped") else "unknown"))
        else:
            acc.append(f"{a['mean_accepted']:.2f} vs {a['canonical_mean_accepted']:.2f} accepted/round")
    spec = d.get("speculation") if isinstance(d.get("speculation"), dict) else {}  # a hand-edited report: no figures

    def number(v):  # a figure of a hand-edited report.json that is no number is no figure (never a crash)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    if spec:  # a URL audit: the server's own counters speak for acceptance (verifier.runner.speculation)
        per = spec.get("per_request") if isinstance(spec.get("per_request"), dict) else {}
        engine_figures = bool(per.get("source")) and number(per.get("draft_tokens")) is not None  # an engine's per call
        counters = spec.get("counters") if isinstance(spec.get("counters"), dict) else {}
        part = per if engine_figures or number(per.get("draft_tokens")) else counters
        rate = number(part.get("acceptance_rate"))
        part = {**part, "draft_tokens": number(part.get("draft_tokens"))}
        who = "engine" if engine_figures else "server counters"
        acc = [f"{who}: {rate:.1%} of {part.get('draft_tokens') or 0:,.0f} draft tokens accepted" if rate is not None
               else f"{who}: 0 draft tokens verified" if part.get("draft_tokens") == 0
               else f"{who}: {part['draft_tokens']:,.0f} draft tokens verified" if part.get("draft_tokens")
               else "speculation counters not observable"]
        calls, requests = number(spec.get("calls_with_drafts")), number(spec.get("requests"))
        if calls is not None and requests and 0 <= calls < requests:
            acc[0] += f"; drafts verified in {calls:,} of {requests:,} calls"
        if spec.get("verified") is False:
            acc[0] += " -- SPECULATION NEVER RAN"
    side = folder / "acceptance.txt"  # an engine whose rounds start after token 1: written by verifier.diagnose.reproduce
    if side.is_file() and side.read_text(encoding="utf-8").strip():
        acc = [side.read_text(encoding="utf-8").strip().splitlines()[0]]
    conf = d.get("acceptance_conformance") or {}
    if conf.get("verdict"):
        acc.append(f"conformance {conf['verdict']}")
    floor = r.get("numeric_floor") or {}
    verdict = d.get("verdict", r.get("verdict", ""))
    if r.get("several_decoders") and d.get("expect") == "detect":  # a suite's negative control, not the engine as shipped
        verdict += " (negative control: expected)"
    tv = _target_tv(folder, r)
    if tv is not None and abs(tv - MATRIX_TV) > 1e-12 and verdict in ("PASS", "UNDERPOWERED"):
        # a certificate (or its attempt) for another TV than the matrix's: said beside the verdict
        verdict += f" at target TV {tv:.6g}"
    if floor.get("max_tv") is not None:
        verdict += f" (floor TV {floor['max_tv']:.2g})"
    if verdict.startswith("UNDERPOWERED"):  # what the certificate still needs (issue 27: the row keeps its hours)
        verdict += _still_needed(r, d)
    version = eng.get("version", "")
    if not version and ("base_url" in options or self_reported):
        version = _url_version(folder, root, d.get("speculation") or {})
    return {"engine": eng.get("name", folder.parent.name), "version": version,
            "entry_point": eng.get("entry_point", ""), "config": cfg,
            "n": _count([s.get("samples_on_disk") for s in sets]), "verdict": verdict,
            "mde": _range([c.get("mde") for c in r.get("cells", []) if c.get("mde") is not None]),
            "acceptance": "; ".join(acc), "folder": folder,
            "field_kinds": dict(eng.get("field_kinds") or {}),  # why a bug kind cannot run on it (kinds_matrix)
            "batching": str(eng.get("batching") or ""),
            "decoder": d.get("decoder") if r.get("several_decoders") else None}  # the row's decoder of a suite report


def _still_needed(r: dict[str, Any], d: dict[str, Any]) -> str:
    """", needs n N (about H h more at R rows/s)" of an UNDERPOWERED decoder: its ``n_needed`` and the report's run cost
    (:func:`verifier.runner.cost.decoder_costs`); empty when the report records neither."""
    need = d.get("n_needed")
    if not isinstance(need, int) or isinstance(need, bool) or need < 1:
        return ""
    run = r.get("run") if isinstance(r.get("run"), dict) else {}
    cost = (run.get("cost") or {}).get(str(d.get("decoder"))) if isinstance(run.get("cost"), dict) else None
    hours = cost.get("hours_still_needed") if isinstance(cost, dict) else None
    rate = cost.get("rate_samples_per_s") if isinstance(cost, dict) else None
    if isinstance(hours, (int, float)) and isinstance(rate, (int, float)) and hours > 0 and rate > 0:
        return f", needs n {need:,} (about {hours:.2g} h more at {rate:.3g} rows/s)"
    return f", needs n {need:,}"


def _target_tv(folder: Path, r: dict[str, Any]) -> float | None:
    """The TV the audit was planned for: audit.json ``target_tv``, else the report's ``suite.stats.target_mde``
    (a finite positive number; anything else: None)."""
    from verifier.engines.floor import finite_number

    def number(v) -> float | None:
        v = finite_number(v)
        return v if v is not None and v > 0 else None

    try:
        plan = json.loads((folder / "audit.json").read_text(encoding="utf-8"))
        if isinstance(plan, dict) and number(plan.get("target_tv")) is not None:
            return number(plan["target_tv"])
    except (OSError, ValueError, RecursionError):
        pass
    suite = r.get("suite") if isinstance(r.get("suite"), dict) else {}
    stats = suite.get("stats") if isinstance(suite.get("stats"), dict) else {}
    return number(stats.get("target_mde"))


def collect(root: str | Path = "reports/audits") -> list[dict[str, Any]]:
    """One row per ``report.json`` under ``root`` (sorted by engine, then folder)."""
    root = Path(root)
    rows = []
    for path in sorted(root.rglob("report.json")):
        try:
            r = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(r, dict):  # not a report specverify wrote
            continue
        parts = [(0, r)] if r.get("mode") == "kernel" else _per_decoder(r)
        for index, part in parts:
            row = _kernel_row(path.parent, part, root) if r.get("mode") == "kernel" else _known_p_row(path.parent, part, root, index)
            cause = _root_cause(path.parent, root)
            if "BIAS" in row["verdict"]:
                harness = _harness_cause(part)
                human = f"human: {cause}" if cause else "human: not written up"
                row["root_cause"] = f"{harness} {human}" if harness else human
            elif "ERROR" in row["verdict"]:  # a decoder or server that died is a finding too: say why
                row["root_cause"] = f"human: {cause}" if cause else "error: see the report"
            else:
                row["root_cause"] = ""
            rows.append(row)
    return sorted(rows, key=lambda x: (x["engine"], str(x["folder"])))


def render(rows: list[dict[str, Any]]) -> str:
    """The markdown table (header + one line per row; the verdict links the report)."""
    def cell(s: Any) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    lines = [HEADER]
    for r in rows:
        link = f"[{cell(r['verdict'])}]({(r['folder'] / 'report.md').as_posix()})"
        lines.append("| " + " | ".join([f"`{cell(r['engine'])}`", cell(r["version"]), cell(r["entry_point"]), cell(r["config"]),
                                          cell(r["n"]), link, cell(r["mde"]), cell(r["acceptance"]), cell(r["root_cause"])]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verifier.engines.matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default="reports/audits")
    parser.add_argument("--readme", default=None, help=f"replace the table between {START} and {END} in this file")
    args = parser.parse_args(argv)
    table = render(collect(args.root))
    if not args.readme:
        print(table)
        return 0
    text = Path(args.readme).read_text(encoding="utf-8")
    if START not in text or END not in text:
        print(f"{args.readme}: markers {START} / {END} not found", file=sys.stderr)
        return 2
    head, rest = text.split(START, 1)
    text = f"{head}{START}\n{table}\n{END}{rest.split(END, 1)[1]}"
    from verifier.engines import kinds_matrix as km

    if km.START in text and km.END in text:  # the field-kinds table (issue 29), from the same reports
        kinds = km.render_kinds(km.collect_kinds(collect(args.root)))
        head, rest = text.split(km.START, 1)
        text = f"{head}{km.START}\n{kinds}\n{km.END}{rest.split(km.END, 1)[1]}"
    Path(args.readme).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
