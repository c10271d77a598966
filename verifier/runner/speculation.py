"""Guard: a decoder that reports its speculation counters must show that drafts were verified.

Servers have silently turned speculation off (for logprobs or penalty requests, in some versions), and so do
engines (OpenVINO GenAI with prefix caching on after its first ``content_length`` failure; with k = 1 and two new
tokens it never drafts); plain sampling from the target then passes every bias cell, and a PASS would certify a
speculative decoder that never ran.  A decoder may record, per ``generate`` call,
``DecoderStats.extra["speculation"]`` (the URL audit's :class:`verifier.server.decoder.ServerDecoder`
does: the server's ``/metrics`` counter deltas and per-request draft figures; the OpenVINO GenAI worker its
per-call draft tokens verified, ``per_request_source`` naming where they come from, and ``calls_with_drafts``,
which the description reports beside the total when some calls drafted nothing); the runner stores it
in the chunk's shard meta.  :func:`summarize` adds the chunks up and :func:`apply_guard` turns a PASS
into UNDERPOWERED when the evidence says no draft token was proposed (or none verified): no
evidence about speculative decoding is not a certificate of it.  Where no chunk reports a figure
the guard says so in the summary and leaves the verdict alone (a plugin owes no counters).
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["summarize", "apply_guard", "describe", "NO_SPECULATION_REASON", "UNOBSERVABLE_REASON"]

UNOBSERVABLE_REASON = ("speculation not observable: the server exposes no speculation counters (vLLM /metrics; "
                       "llama-server --metrics) and no per-request draft figures, so nothing shows that a draft was "
                       "verified; pass --speculation-unverified to accept the bias verdict without that evidence "
                       "(the report then says so)")

NO_SPECULATION_REASON = ("speculation never ran: {why}; these samples are plain target sampling and say nothing about "
                         "speculative decoding (start the server or engine with a draft model / speculative config, check "
                         "that the request mix -- logprobs, penalties -- does not switch it off, and leave room to draft: "
                         "an engine whose first token comes from the prompt step drafts nothing with --max-new-tokens 2)")


def summarize(metas: Iterable[dict[str, Any] | None], session: str | None = None) -> dict[str, Any] | None:
    """Sum the ``speculation`` entries of a decoder's chunk metas; None when no chunk has one.

    Parameters
    ----------
    metas : iterable of dict or None
        Each chunk's ``speculation`` entry (``requests``, ``requests_sent``, counters, ...).
    session : str or None
        This process's :func:`verifier.runner.clock.session_id`: only entries stamped with it (chunks sampled
        by this process) count in ``requests_sent_session``; None: every entry was made by this process.

    Returns
    -------
    dict or None
        ``chunks`` (with an entry), ``requests``, ``requests_sent`` (by the process that sampled each chunk;
        the rest were read back from the response journal), ``requests_sent_session`` (by this process: a
        resume's chunks from an earlier process, and the journal's replies, excluded; report.json keeps it in
        ``run``, :data:`verifier.runner.verdict.SESSION_KEYS`), and for each source
        (``counters``: the server's ``/metrics`` deltas; ``per_request``: per-reply figures) the
        summed ``draft_tokens`` / ``accepted_tokens`` (``drafts`` for counters) or None where any
        chunk lacked it, plus ``acceptance_rate`` = accepted / draft tokens; ``server_fingerprints`` (the distinct
        ``system_fingerprint`` values of the replies, where the server sends one) only when a chunk has one.
    """
    metas = list(metas)
    entries = [m for m in metas if isinstance(m, dict)]
    if not entries:
        return None
    readable = [e for e in entries if _readable(e)]
    unreadable, missing = len(entries) - len(readable), len(metas) - len(entries)
    entries = readable
    out: dict[str, Any] = {"chunks": len(entries), "requests": sum(int(e.get("requests", 0)) for e in entries),
                           "requests_sent": sum(int(e.get("requests_sent", 0)) for e in entries)}
    out["requests_sent_session"] = sum(int(e.get("requests_sent", 0)) for e in entries
                                       if session is None or e.get("session") == session)
    out["background_requests"] = sum(int(e.get("background_requests", 0)) for e in entries)  # mixed-batch factor
    # the decoder asks for the evidence; every entry malformed (a hand-edited shard): nothing is evidence, none verified
    out["required"] = any(e.get("required", False) for e in entries) or not entries
    prints = sorted({str(e["server_fingerprint"]) for e in entries if e.get("server_fingerprint")})
    if prints:  # what the server says it is, in its replies (mlx_lm server: "<mlx-lm version>-<mlx version>-...")
        out["server_fingerprints"] = prints
    seeds = [e.get("seed_honoured") for e in entries if e.get("seed_honoured") is not None]
    out["seed_honoured"] = None if not seeds else all(seeds)  # the server's seed contract (verifier.server.decoder)

    def total(values):
        values = list(values)
        return None if not values or any(v is None for v in values) else float(sum(values))

    sent = [e for e in entries if int(e.get("requests_sent", 0)) > 0]  # journal replays carry no fresh counter delta
    counters = [e.get("counters") or {} for e in sent]
    out["counters"] = {key: total(c.get(key) for c in counters) for key in ("drafts", "draft_tokens", "accepted_tokens")}
    # the source that explains a missing total (a chunk whose counters were unusable) before any other
    out["counters"]["source"] = next((c.get("source") for c in counters if c.get("source") and c.get("draft_tokens") is None
                                      and c.get("drafts") is None), None) or next((c.get("source") for c in counters
                                                                                   if c.get("source")), None)
    out["per_request"] = {"draft_tokens": total(e.get("per_request_draft_tokens") for e in entries),
                          "accepted_tokens": total(e.get("per_request_accepted_tokens") for e in entries)}
    source = next((str(e["per_request_source"]) for e in entries if e.get("per_request_source")), None)
    if source:  # an engine's per-call figures (OpenVINO GenAI: its main-model step sizes), not a server's timings
        out["per_request"]["source"] = source
    with_drafts = total(e.get("calls_with_drafts") for e in entries)
    if with_drafts is not None:  # calls that verified at least one draft token (the rest sampled the target alone)
        out["calls_with_drafts"] = int(with_drafts)
    if unreadable or missing:  # figures from some chunks only: their totals say nothing about the others
        out["unreadable_chunks"], out["chunks_without_figures"] = unreadable, missing
    for part in (out["counters"], out["per_request"]):
        d, a = part.get("draft_tokens"), part.get("accepted_tokens")
        part["acceptance_rate"] = (a / d) if d and a is not None else None
    return out


COUNT_KEYS = ("requests", "requests_sent", "background_requests", "per_request_draft_tokens",
              "per_request_accepted_tokens", "calls_with_drafts")  # counts in a chunk's entry: integers >= 0 or None


def _readable(entry: dict[str, Any]) -> bool:
    """Whether a chunk's entry holds usable figures: every count an integer >= 0 (or absent / None), accepted tokens at
    most the draft tokens, calls that drafted at most the calls and non-zero exactly when draft tokens were verified.
    A malformed entry (a hand-edited or damaged shard) is left out of the sums and counted, never trusted."""
    import math

    for key in COUNT_KEYS:
        v = entry.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or v != int(v):
            return False
    drafts, accepted = entry.get("per_request_draft_tokens"), entry.get("per_request_accepted_tokens")
    calls, requests = entry.get("calls_with_drafts"), entry.get("requests")
    if drafts is not None and accepted is not None and accepted > drafts:
        return False
    if calls is not None and (requests is None or calls > requests or (drafts is not None and (calls > 0) != (drafts > 0))):
        return False
    return isinstance(entry.get("counters", {}), dict)


def _why_none(summary: dict[str, Any]) -> str | None:
    """The reason no draft was verified, or None when drafts were verified (or nothing says, or the figures cover some
    chunks only)."""
    if summary.get("unreadable_chunks") or summary.get("chunks_without_figures"):
        return None
    per, cnt = summary["per_request"], summary["counters"]
    if per.get("draft_tokens") == 0 and per.get("source"):
        return f"0 draft tokens verified over {summary['requests']} generate calls ({per['source']})"
    if per.get("draft_tokens") == 0:
        return f"the server reported 0 draft tokens over {summary['requests']} requests (per-request timings)"
    if cnt.get("draft_tokens") == 0 or (cnt.get("draft_tokens") is None and cnt.get("drafts") == 0):
        return (f"the server's own counters ({cnt.get('source')}) did not move over {summary['requests_sent']} "
                "requests sent: 0 draft tokens proposed")
    return None


def _drafts_seen(summary: dict[str, Any]) -> bool | None:
    """True when a figure shows draft tokens proposed; None when no figure says (not observable: the
    report must not claim speculation was verified)."""
    per, cnt = summary["per_request"], summary["counters"]
    seen = [v for v in (per.get("draft_tokens"), cnt.get("draft_tokens"),
                        cnt.get("drafts") if cnt.get("draft_tokens") is None else None) if v is not None]
    return True if any(v > 0 for v in seen) else None


def apply_guard(verdict, summary: dict[str, Any] | None, target_tv: float | None = None) -> None:
    """Turn ``verdict`` (a :class:`~verifier.runner.verdict.DecoderVerdict`) from PASS into UNDERPOWERED
    when ``summary`` shows that no draft was verified, or that so few calls drafted that the PASS says nothing about
    them (:func:`sparse_reason`; ``target_tv``: the suite's target MDE); BIAS and ERROR stand (bias is bias either
    way)."""
    from verifier.runner.verdict import PASS, UNDERPOWERED

    if summary is None:
        return
    why = _why_none(summary)
    verdict.speculation = dict(summary, verified=False if why is not None else _drafts_seen(summary))
    sparse = sparse_reason(verdict, summary, target_tv) if why is None and verdict.verdict == PASS else None
    if sparse is not None:
        verdict.verdict = UNDERPOWERED
        verdict.reason = f"{sparse} (the bias cells alone: {verdict.reason})"
        verdict.expectation_met = False
        return
    if why is not None and verdict.verdict in (PASS, UNDERPOWERED):
        verdict.verdict = UNDERPOWERED
        verdict.reason = NO_SPECULATION_REASON.format(why=why) + f" (the bias cells alone: {verdict.reason})"
        verdict.expectation_met = False
    elif verdict.speculation["verified"] is None and summary.get("required") and verdict.verdict == PASS:
        # nothing shows a draft: a certificate of speculative decoding needs evidence that it ran
        verdict.verdict = UNDERPOWERED
        verdict.reason = (f"{UNOBSERVABLE_REASON} (the bias cells alone: {verdict.reason})")
        verdict.expectation_met = False


def sparse_reason(verdict, summary: dict[str, Any], target_tv: float | None) -> str | None:
    """Why a PASS certifies too little of the calls that drafted, or None.

    Where a decoder counts the calls that verified a draft (``calls_with_drafts`` of ``requests``; OpenVINO GenAI with
    prefix caching on stops drafting at its first failure), its rows are a mixture: a share ``s`` from the speculating
    calls, the rest plain target samples.  The output law's TV from the target is ``s`` times the speculating calls'
    own, so a PASS whose TV cells can see ``m`` (their largest MDE) bounds the speculating calls' law only by
    ``m / s``; when that exceeds ``target_tv`` (or 1), the audit cannot certify the speculative path: UNDERPOWERED."""
    calls, requests = summary.get("calls_with_drafts"), summary.get("requests")
    if not isinstance(calls, int) or not isinstance(requests, int) or not 0 < calls < requests:
        return None
    if summary.get("unreadable_chunks") or summary.get("chunks_without_figures"):
        return None
    share = calls / requests
    mdes = [c.mde for c in verdict.cells if getattr(c, "effect_unit", "tv") == "tv" and c.mde is not None]
    if not mdes:
        return None
    bound = max(mdes) / share
    limit = min(1.0, float(target_tv)) if target_tv else 1.0
    if bound <= limit:
        return None
    return (f"speculation ran in only {calls:,} of {requests:,} calls ({share:.2%}): the rows are a mixture in which "
            f"the calls that drafted are that share, so the TV cells' largest MDE {max(mdes):.3g} bounds their own law "
            f"only by {min(bound, 1.0):.3g}{' (no bound)' if bound > 1 else ''}, above the "
            f"target TV {limit:g}; this PASS certifies plain target sampling, not the speculative path")


def describe(summary: dict[str, Any], sent_session: int | None = None) -> str:
    """One line on what the decoder's own counters show (for the CLI and reports).

    Parameters
    ----------
    summary : dict
        :func:`summarize`'s figures with ``verified`` (report.json ``decoders[].speculation``).
    sent_session : int or None
        Requests this session sent (report.json ``run.requests_sent_session[decoder]``); None: the summary's own
        ``requests_sent_session`` (an in-memory summary, or a report written before it moved to ``run``), else
        ``requests_sent``.
    """
    parts = []
    per_label = "per call (engine)" if (summary.get("per_request") or {}).get("source") else "per request"
    for name, part in ((per_label, summary.get("per_request") or {}), ("server counters", summary.get("counters") or {})):
        d, a = part.get("draft_tokens"), part.get("accepted_tokens")
        if d is not None and a is not None:
            rate = f" ({a / d:.1%})" if d else ""
            parts.append(f"{name}: {a:,.0f} of {d:,.0f} draft tokens accepted{rate}")
    calls, requests = summary.get("calls_with_drafts"), int(summary.get("requests", 0))
    if calls is not None and parts and requests and calls < requests:  # a PASS then speaks mostly for the target alone
        parts.append(f"drafts verified in {calls:,} of {requests:,} calls ({calls / requests:.1%}); the other "
                     f"{requests - calls:,} sampled the target alone")
    partial = [f"{v} chunk(s) {what}" for v, what in ((summary.get("chunks_without_figures"), "without figures"),
                                                      (summary.get("unreadable_chunks"), "with malformed figures, left out"))
               if v]
    if partial:
        parts.append("figures from " + f"{summary.get('chunks', 0)} chunk(s) only; " + ", ".join(partial))
    if not parts:
        src = (summary.get("counters") or {}).get("source")
        return f"speculation: not observable ({src or 'no counters reported'}); a PASS cannot show that drafts were verified"
    head = {True: "speculation verified", False: "SPECULATION NEVER RAN"}.get(summary.get("verified"),
                                                                              "speculation not shown")
    seed = {True: "; request seeds reproduce", False: "; the server IGNORES request seeds (the journal is the only "
            "record of the samples)", None: ""}[summary.get("seed_honoured")]
    total = int(summary.get("requests", 0))
    if sent_session is None:  # older reports: in the summary, or no session split at all
        sent_session = summary.get("requests_sent_session", summary.get("requests_sent", 0))
    sent = int(sent_session)
    source = ("earlier sessions' samples" if (summary.get("per_request") or {}).get("source")  # an engine keeps no journal
              else "the response journal or earlier sessions' samples")
    earlier = f", {total - sent:,} from {source}" if total > sent else ""
    return (f"{head} -- " + "; ".join(parts) + f" over {total:,} requests "
            f"({sent:,} sent in this session{earlier}"
            + (f", beside {summary['background_requests']:,} background requests whose drafts the server counters include"
               if summary.get("background_requests") else "") + f"){seed}")
