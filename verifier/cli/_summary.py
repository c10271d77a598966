"""The verdict summary that ``specverify run``, ``report`` and ``merge`` print at the end."""

from __future__ import annotations

from typing import Any


def acceptance_lines(decoder: dict[str, Any], run: dict[str, Any] | None = None) -> list[str]:
    """Lines about acceptance beside a decoder's verdict: conformance when declared, every loud
    (far below canonical, above the coupling bound) note, the acceptance fingerprint of a fixed (synthetic)
    acceptance mode, else, for a ``pass`` decoder, the efficiency figure of its least efficient sample set.  ``run``:
    report.json's ``run`` section (the requests this session sent per decoder)."""
    lines = []
    conf = decoder.get("acceptance_conformance")
    if conf:
        lines.append(f"acceptance rule conformance: {conf['verdict']}: {conf['reason']}")
    audits = decoder.get("acceptance") or []
    if decoder.get("speculation"):  # the decoder's own counters (a URL audit's server): they speak for acceptance
        from verifier.runner.speculation import describe

        sent = ((run or {}).get("requests_sent_session") or {}).get(decoder.get("decoder"))
        lines.append(describe(decoder["speculation"], sent))
        audits = [a for a in audits if a.get("reported", True) is not False and "NO STATISTICS" not in str(a.get("note"))]
    fixed = decoder.get("acceptance_fingerprint") or {}
    if fixed.get("flagged"):  # one line for the decoder (its sets' notes only point at it)
        lines.append(f"acceptance fingerprint: {fixed['note']}")
    loud = [a for a in audits if a.get("far_below") or a.get("above_bound")]
    if loud:
        lines += [f"acceptance ({a['label']}): {a['note']}" for a in loud]
    elif audits and decoder.get("expect") == "pass":  # a mutant's efficiency is beside the point unless loud
        known = [a for a in audits if a.get("passes_ratio")]
        a = max(known, key=lambda a: a["passes_ratio"]) if known else audits[0]
        where = f" ({a['label']}, the least efficient of {len(audits)} sets)" if len(audits) > 1 else ""
        lines.append(f"acceptance{where}: {a['note']}")
    return lines


def diagnosis_lines(report: dict[str, Any]) -> list[str]:
    """The diagnosis after BIAS DETECTED, one line per diagnosed decoder: the mechanism in plain words and
    where to see its exact law (:func:`verifier.diagnose.glossary.mechanism_line`), or why there is none."""
    diag = report.get("diagnosis")
    if not diag:
        return []
    if diag.get("skipped"):
        return [f"  diagnosis skipped ({diag['skipped']}); which mechanism, where: {diag.get('command', 'specverify diagnose RUN_DIR')}"]
    if diag.get("error"):
        return [f"  diagnosis failed ({diag['error']}); verdicts are unaffected"]
    from verifier.diagnose.glossary import mechanism_line

    return [f"  {d['decoder']:<28} diagnosis: {mechanism_line(d)}" for d in diag.get("decoders", [])]


def print_outcome(outcome: Any) -> None:
    """Print one line per decoder, the exact stage, where decoders stopped, the verdict and the report paths.

    ``outcome`` is a runner outcome: ``.report`` (the report.json dict), ``.exit_code``, ``.run_dir``.
    """
    report = outcome.report
    stopped = {e.get("decoder"): e.get("message") for e in report.get("stopped", [])}
    for d in report["decoders"]:
        mark = "ok" if d["expectation_met"] else f"EXPECTED {d['expect'].upper()}"
        reason = d["reason"]
        if d.get("error") and stopped.get(d["decoder"]) == d["error"].get("message"):  # said once, where it stopped
            reason = f"decoder error: {d['error'].get('type', 'DecoderError')} (where it stopped, below)"
        print(f"  {d['decoder']:<28} expect {d['expect']:<6} -> {d['verdict']:<14} [{mark}] {reason}")
        for line in acceptance_lines(d, report.get("run")):
            print(f"  {'':<28} {line}")
    for line in diagnosis_lines(report):
        print(line)
    exact = report.get("exact", {})
    if exact.get("ran"):
        verdict = "every rule as declared" if exact["ok"] else f"WRONG: {', '.join(exact['wrong_rules'])}"
        print(f"  exact stage: {len(exact['findings'])} findings, {verdict}")
    for e in report.get("stopped", []):
        print(f"  {e['decoder']} stopped at {e['set']}, chunk {e['chunk']}: {e['message']}")
        if e.get("traceback"):  # the plugin's own frames (verifier._tracebacks); --debug: all frames
            print("\n".join(f"    {line}" for line in e["traceback"].splitlines()))
    print(f"verdict: {report['verdict']} (exit {outcome.exit_code})")
    print(f"reports: {outcome.run_dir}/report.html, report.md, report.json, junit.xml")
