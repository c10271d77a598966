"""The README's "Field bug kinds per engine" table (issue 29), regenerated from the committed engine reports.

The audit matrix (:mod:`verifier.engines.matrix`) has one row per report; this table has one row per engine variant
(engine, version and the configuration options that differ from the engine's defaults, e.g. a control patch) and
one column per bug kind of issue 29, each filled from the cells of that kind in every report of the variant:

========================  =====================================================================================
kind                      cells it reads
========================  =====================================================================================
1 batch shape             cells at a ``batch_composition`` level (ids ending ``[batch=B]`` or ``[batch=B,mixed ...]``)
2 shared randomness       ``collision...`` and ``serial...`` cells (URL audits: ``collision (seeded)`` / ``(unseeded)``)
3 penalties, min-p        every cell of a sample set whose sampling sets a ``repetition_penalty`` other than 1, a
                          ``presence_penalty`` / ``frequency_penalty`` other than 0, or a ``min_p`` above 0
                          (:func:`penalised_sampling`)
4 reported logprobs       ``logprob`` cells; URL audits' ``consistency`` cells
5 stop rules              ``stop-rule`` and ``stop-position...`` cells
6 lossy modes             the acceptance audit's fingerprint (``decoders[].acceptance_fingerprint``), where it was
                          tested (it needs two sample sets with a canonical acceptance figure)
7 another vocabulary      cells of a sample set whose draft has its own tokenizer (transformers ``assistant_tokenizer``)
                          or is mapped into the target's ids (a decoder setting ``draft_to_target``)
8 recurrent state         cells of a sample set whose target is recurrent (the decoder class, its ``target_model``
                          option or the set's model name says ``recurrent`` or ``mamba``)
========================  =====================================================================================

A kind's entry is its worst result over those cells: ``BIAS`` (a cell of the kind rejected), else ``FLAGGED`` (kind 6:
the fingerprint, an efficiency/configuration finding, not a bias verdict), else ``UNDERPOWERED``, else ``PASS``, with the batch levels or the number of reports and a link to the report that decided it.  "not run"
means no committed report has a cell of the kind; where the engine's description
(:meth:`verifier.engines.base.Engine.describe`) gives ``field_kinds[KIND]`` (why the kind cannot be expressed on it,
e.g. an engine that samples one row per call has no batch; an engine whose ``batching`` says "one row per
speculative step" gets "not expressible" in the batch column), that reason is shown instead.  A suite report with
several decoders is read per decoder (the matrix row's ``decoder``), so a negative control never speaks for the
engine as shipped.  The verdict of a kind
is the cells', not the audit's: an audit can be BIAS for another defect while its independence cells pass.  A kind's
cells inherit every defect of the decoder they ran on, so a BIAS here is a finding only with its root cause (the
audit matrix's last column and the engine's FINDINGS.md); the control rows of a biased engine isolate the kind.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

__all__ = ["KINDS", "START", "END", "kind_results", "collect_kinds", "render_kinds", "penalised_sampling"]

KINDS = ("batch shape", "shared randomness", "penalties, min-p", "reported logprobs", "stop rules", "lossy modes",
         "another vocabulary", "recurrent state")
START, END = "<!-- field-kinds:start -->", "<!-- field-kinds:end -->"
_RANK = {"BIAS": 4, "FLAGGED": 3, "UNDERPOWERED": 2, "PASS": 1}  # FLAGGED: the acceptance fingerprint (not a bias verdict)
# across reports of one variant a conclusive result outranks an inconclusive one: a powered PASS (vLLM's control at
# 2,500 rows per level) is not undone by an earlier UNDERPOWERED run of the same level (300 rows); BIAS still wins
_ACROSS = {"BIAS": 4, "FLAGGED": 3, "PASS": 2, "UNDERPOWERED": 1}
_BATCH = re.compile(r"\[batch=(\d+)(,mixed[^\]]*)?\]$")


def _variant(config: str, decoder: str | None) -> str:
    """The engine variant of a matrix row: its engine options (``config`` before ``;``) without the suite's label of
    the decoder (``"control-batch-mixed-n2500: patch_cpu_expand=True"`` -> ``"patch_cpu_expand=True"``), so reports
    that ran the same engine configuration under different suite labels are one variant ("" = as shipped)."""
    head = config.split(";")[0].strip()
    if decoder and (head == decoder or head.startswith(f"{decoder}: ")):
        head = head[len(decoder):].lstrip(": ").strip()
    return head


def _sets_by_id(report: dict[str, Any], decoder: str | None = None) -> dict[Any, dict[str, Any]]:
    """The report's sample sets by ``set_id`` (only ``decoder``'s when given)."""
    return {s.get("set_id"): s for s in report.get("sample_sets") or []
            if isinstance(s, dict) and (decoder is None or s.get("decoder") == decoder)}


def _url_levels(cells: list[dict[str, Any]], sets: dict[Any, dict[str, Any]]) -> dict[str, list[str | None]]:
    """Batch levels of a URL audit's design factors (kind 1): each sample set of a ``ServerDecoder`` is a level
    ``"N in flight"`` (``",mixed batch"`` with background requests at other temperatures and a longer prompt in
    flight), counted only when the report audits two or more such levels (one level is no batch design).  Unseeded
    sets are the independence kind's (their collision cells), not a batch level."""
    def level(s: dict[str, Any]) -> str | None:
        ident = s.get("decoder_identity") if isinstance(s.get("decoder_identity"), dict) else {}
        opts = ident.get("options") if isinstance(ident.get("options"), dict) else {}
        if not str(ident.get("class", "")).endswith("ServerDecoder") or opts.get("seeded") is False:
            return None
        return f"{opts.get('num_concurrent', 4)} in flight" + (",mixed batch" if opts.get("background") else "")

    per_set = {sid: level(s) for sid, s in sets.items()}
    if len({v for v in per_set.values() if v}) < 2:
        return {}
    out: dict[str, list[str | None]] = {}
    for c in cells:
        lvl = per_set.get(c.get("set_id"))
        if lvl:
            out.setdefault(lvl, []).append(_cell_verdict(c))
    return out


def penalised_sampling(sampling: Any) -> bool:
    """Whether a sample set's sampling (report.json's ``sample_sets[].sampling`` mapping) uses one of kind 3's logits
    processors: a repetition penalty other than 1 (it needs the context, as the others do), a presence or frequency
    penalty other than 0, or a min-p above 0.  None or a non-mapping (a set with no sampling record) is False.

    >>> penalised_sampling({"temperature": 1.0, "repetition_penalty": 1.2}), penalised_sampling({"min_p": 0.0})
    (True, False)
    """
    if not isinstance(sampling, dict):
        return False
    neutral = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_p": 0.0}
    return any(sampling.get(k) not in (None, v) for k, v in neutral.items())


def _cell_verdict(cell: dict[str, Any]) -> str | None:
    v = str(cell.get("verdict") or "")
    return "BIAS" if v.startswith("BIAS") else v if v in _RANK else None


def _worst(verdicts: Iterable[str | None]) -> str | None:
    vs = [v for v in verdicts if v]
    return max(vs, key=_RANK.__getitem__) if vs else None


def kind_results(report: dict[str, Any], decoder: str | None = None) -> dict[str, dict[str, Any]]:
    """The bug kinds one report speaks to: ``{kind: {"verdict": ..., "levels": {...}, "detail": str}}``.

    Parameters
    ----------
    report : dict
        A ``report.json`` (runner report of a known-p, suite or URL audit; kernel reports have no kind cells).
    decoder : str, optional
        Only this decoder's cells, sample sets and fingerprint (a suite report with several decoders); default all.

    Returns
    -------
    dict
        Only the kinds with at least one cell (or a fingerprint) in the report; ``levels`` maps a batch level
        (``"4"``, ``"4,mixed 0.5"``) to its worst cell verdict (kind 1 only).
    """
    mine = lambda x: isinstance(x, dict) and (decoder is None or x.get("decoder") == decoder)  # noqa: E731
    cells = [c for c in report.get("cells") or [] if mine(c)]
    sets = _sets_by_id(report, decoder)
    out: dict[str, dict[str, Any]] = {}

    def add(kind: str, verdicts: list[str | None], **extra: Any) -> None:
        worst = _worst(verdicts)
        if worst:
            out[kind] = {"verdict": worst, **extra}

    levels: dict[str, list[str | None]] = {}
    for c in cells:
        m = _BATCH.search(str(c.get("id", "")))
        if m:
            levels.setdefault(m.group(1) + (m.group(2) or ""), []).append(_cell_verdict(c))  # "4", "4,mixed T=0.5"
    levels.update(_url_levels(cells, sets))
    if levels:
        per = {lvl: _worst(v) for lvl, v in levels.items()}
        add(KINDS[0], list(per.values()), levels={k: v for k, v in per.items() if v})
    tests = lambda pred: [_cell_verdict(c) for c in cells if pred(str(c.get("test", "")))]  # noqa: E731
    add(KINDS[1], tests(lambda t: t.startswith(("collision", "serial"))))

    add(KINDS[2], [_cell_verdict(c) for c in cells if penalised_sampling(sets.get(c.get("set_id"), {}).get("sampling"))])
    add(KINDS[3], tests(lambda t: t in ("logprob", "consistency")))
    add(KINDS[4], tests(lambda t: t.startswith("stop")))
    fps = [d.get("acceptance_fingerprint") for d in report.get("decoders") or [] if mine(d)]
    fps = [f for f in fps if isinstance(f, dict) and (f.get("flagged") or f.get("positions"))]  # tested ones only
    if fps:
        flagged = any(f.get("flagged") for f in fps)
        out[KINDS[5]] = {"verdict": "FLAGGED" if flagged else "PASS",
                         "detail": "acceptance independent of the probs: a lossy mode left on?" if flagged
                         else "no fixed-rate acceptance"}
    def identity(s: dict[str, Any]) -> dict[str, Any]:
        return s.get("decoder_identity") if isinstance(s.get("decoder_identity"), dict) else {}

    def other_vocab(s: dict[str, Any]) -> bool:  # a different-tokenizer draft, or a draft mapped into the target's ids
        ident = identity(s)
        return str((ident.get("options") or {}).get("mode", "")) == "assistant_tokenizer" or \
            "draft_to_target" in (ident.get("settings") or {})

    add(KINDS[6], [_cell_verdict(c) for c in cells if other_vocab(sets.get(c.get("set_id"), {}))])

    def recurrent(s: dict[str, Any]) -> bool:  # a recurrent (state-space) target: the decoder class or the model says so
        ident = identity(s)
        text = f"{ident.get('class', '')} {(ident.get('options') or {}).get('target_model', '')} {s.get('models', '')}"
        return bool(re.search(r"recurrent|mamba", text, re.I))

    add(KINDS[7], [_cell_verdict(c) for c in cells if recurrent(sets.get(c.get("set_id"), {}))])
    return out


def collect_kinds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per engine variant of the audit matrix's ``rows`` (:func:`verifier.engines.matrix.collect`; a row's
    ``field_kinds`` is its engine record's), each kind's deciding result over the variant's reports with a link to the
    deciding report: BIAS over a fingerprint FLAGGED over PASS over UNDERPOWERED (a conclusive run outranks an
    inconclusive one; within one report a kind is its worst cell).

    An engine none of whose reports has a cell of any kind gets one entry (variant "every variant") that says
    "not run" (or the engine's ``field_kinds`` reason) in every column, so that every engine of the matrix shows.

    Returns
    -------
    list of dict
        ``{"engine", "version", "variant", "kinds": {kind: {"verdict", "text", "folder"}}, "reasons": {kind: str}}``,
        sorted by engine, version and variant.
    """
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    reports: dict[Path, dict[str, Any] | None] = {}  # a suite report is one row per decoder: read it once
    url_levels_of: dict[Path, dict[str, list[str | None]]] = {}  # a design-factor URL audit's levels, once per folder
    url_read: set[Path] = set()  # such a report is one variant: read with its first row, its other rows skipped
    for row in rows:
        folder = Path(row["folder"])
        if folder not in reports:
            try:
                reports[folder] = json.loads((folder / "report.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                reports[folder] = None
        report = reports[folder]
        if report is None:
            continue
        if report.get("mode") == "kernel":
            continue
        decoder = row.get("decoder")
        variant = _variant(str(row.get("config", "")), decoder)
        if folder not in url_levels_of:
            url_levels_of[folder] = _url_levels(report.get("cells") or [], _sets_by_id(report))
        url_levels = url_levels_of[folder]
        if url_levels:  # a URL audit of design factors: one variant, its levels read together (each decoder is a level)
            if folder in url_read:
                continue
            url_read.add(folder)
            server = re.search(r", ([^,;]+ server)(?:;|$)", str(row.get("config", "")))  # a control server's name
            variant, decoder = "URL, design factors: " + ", ".join(url_levels) + (f", {server.group(1)}" if server else ""), None
        key = (str(row["engine"]), str(row["version"]), variant)
        g = groups.setdefault(key, {"engine": key[0], "version": key[1], "variant": variant, "kinds": {},
                                    "reasons": {}, "counts": {}})
        if not g["reasons"]:  # the engine record's, via the matrix row
            g["reasons"] = dict(row.get("field_kinds") or {})
            if str(row.get("batching", "")).startswith("one row per speculative step"):
                g["reasons"].setdefault(KINDS[0], "not expressible: one row per speculative step")
        for kind, res in kind_results(report, decoder).items():
            g["counts"][kind] = g["counts"].get(kind, 0) + 1
            old = g["kinds"].get(kind)
            levels = dict(old.get("levels") or {}) if old else {}
            for lvl, v in (res.get("levels") or {}).items():  # batch levels: per level over the reports (_ACROSS)
                if _ACROSS[v] > _ACROSS.get(levels.get(lvl, ""), 0):
                    levels[lvl] = v
            if old is None or _ACROSS[res["verdict"]] > _ACROSS[old["verdict"]]:
                g["kinds"][kind] = old = {**res, "folder": folder}
            if levels:
                old["levels"] = levels
    out = []
    engines_with_kinds = {(g["engine"], g["version"]) for g in groups.values() if g["kinds"]}
    for g in groups.values():
        if not g["kinds"]:
            if (g["engine"], g["version"]) not in engines_with_kinds:  # one "not run" row per such engine
                engines_with_kinds.add((g["engine"], g["version"]))
                out.append({**g, "variant": "every variant"})
            continue
        for kind, res in g["kinds"].items():
            n = g["counts"][kind]
            if kind == KINDS[0] and res.get("levels"):
                by: dict[str, list[str]] = {}
                for lvl, v in sorted(res["levels"].items(), key=lambda kv: (int(re.match(r"\d+", kv[0]).group()), kv[0])):
                    by.setdefault(v, []).append(lvl)
                res["text"] = "; ".join(f"{v} at {', '.join(lvls)}" for v, lvls in by.items())
            else:
                res["text"] = res["verdict"] + (f" ({res['detail']})" if res.get("detail") else "") + \
                    (f", {n} reports" if n > 1 else "")
        out.append(g)
    return sorted(out, key=lambda g: (g["engine"], g["version"], g["variant"]))


def render_kinds(groups: list[dict[str, Any]]) -> str:
    """The markdown table: engine | version | variant | one column per kind (linked to the deciding report)."""
    def cell(s: Any) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    lines = ["| engine | version | variant | " + " | ".join(KINDS) + " |", "|---|---|---|" + "---|" * len(KINDS)]
    for g in groups:
        parts = []
        for kind in KINDS:
            res = g["kinds"].get(kind)
            if res:
                parts.append(f"[{cell(res['text'])}]({(Path(res['folder']) / 'report.md').as_posix()})")
            else:
                parts.append(cell(g["reasons"].get(kind, "not run")))
        lines.append(f"| `{cell(g['engine'])}` | {cell(g['version'])} | {cell(g['variant']) or 'as shipped'} | "
                     + " | ".join(parts) + " |")
    return "\n".join(lines)
