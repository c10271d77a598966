"""The server's own speculation counters (Prometheus ``/metrics``), read before and after sampling.

A URL audit cannot PASS unless drafts were verified: servers have silently turned speculation off
(for logprobs or penalties requests, in some versions).  :func:`read_counters` reads the dialect's
counters of drafts, draft tokens and accepted tokens (vLLM ``vllm:spec_decode_*``, llama-server
``llamacpp:*`` with ``--metrics``), summed over label sets; :func:`counter_delta` is what one
``generate`` call moved.  Parsing uses ``prometheus_client``'s text parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SpecCounters", "read_counters", "counter_delta", "parse_counters"]


@dataclass(frozen=True)
class SpecCounters:
    """Speculation counters of a server at one moment (None: the server does not expose that one).

    Attributes
    ----------
    drafts : float or None
        Draft proposals (rounds) verified.
    draft_tokens : float or None
        Draft tokens proposed (sum of num_draft_tokens over rounds).
    accepted_tokens : float or None
        Draft tokens accepted.
    source : str
        Where they came from (``/metrics``) or why none were read.
    """

    drafts: float | None
    draft_tokens: float | None
    accepted_tokens: float | None
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted_tokens": self.accepted_tokens,
                "source": self.source}


def parse_counters(text: str, names: dict[str, tuple[str, ...]]) -> dict[str, float | None]:
    """Sum each of ``names``' counters (a family name with or without ``_total``) over its label sets."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith(("_created", "_bucket", "_count", "_sum")):
                    continue
                base = sample.name[:-len("_total")] if sample.name.endswith("_total") else sample.name
                totals[base] = totals.get(base, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError):
        return {key: None for key in names}
    out: dict[str, float | None] = {}
    for key, spellings in names.items():
        out[key] = next((totals[s] for s in spellings if s in totals), None)
    return out


def read_counters(settings, dialect) -> SpecCounters:
    """GET ``/metrics`` and read the dialect's speculation counters (never raises)."""
    from verifier.server.client import get_text

    if not dialect.metrics_counters:  # e.g. mlx_lm server: no /metrics at all
        return SpecCounters(None, None, None, f"--api {dialect.name} servers expose no speculation counters")
    status, text = get_text(settings, "/metrics")
    if status != 200:
        why = text if status == 0 else f"HTTP {status}"
        hint = "; start llama-server with --metrics" if dialect.name == "llama-server" else ""
        return SpecCounters(None, None, None, f"/metrics unavailable ({why[:120]}){hint}")
    values = parse_counters(text, dialect.metrics_counters)
    if all(v is None for v in values.values()):
        return SpecCounters(None, None, None, "/metrics has no speculation counters (" +
                            ", ".join(s for names in dialect.metrics_counters.values() for s in names) + ")")
    return SpecCounters(values["drafts"], values["draft_tokens"], values["accepted_tokens"], "/metrics")


def counter_delta(before: SpecCounters, after: SpecCounters) -> SpecCounters:
    """``after - before`` per counter (None where either is missing).

    Counters only grow: a delta that is negative (the server restarted, or lies), not finite, or
    with more tokens accepted than drafted is no evidence of speculation either way -- every figure
    is then None and ``source`` says why (the guard reads None as "not observable", never as
    "verified").
    """
    import math

    def sub(a, b):
        return None if a is None or b is None else a - b

    delta = {"drafts": sub(after.drafts, before.drafts), "draft_tokens": sub(after.draft_tokens, before.draft_tokens),
             "accepted_tokens": sub(after.accepted_tokens, before.accepted_tokens)}
    bad = [f"{name} {before_v!r} -> {after_v!r}" for name, before_v, after_v, d in
           (("drafts", before.drafts, after.drafts, delta["drafts"]),
            ("draft tokens", before.draft_tokens, after.draft_tokens, delta["draft_tokens"]),
            ("accepted tokens", before.accepted_tokens, after.accepted_tokens, delta["accepted_tokens"]))
           if d is not None and not (math.isfinite(d) and d >= 0)]
    d_tok, a_tok = delta["draft_tokens"], delta["accepted_tokens"]
    if not bad and d_tok is not None and a_tok is not None and a_tok > d_tok:
        bad.append(f"{a_tok:g} accepted of {d_tok:g} draft tokens")
    if bad:
        return SpecCounters(None, None, None, f"{after.source}: counters unusable ({'; '.join(bad)}: a counter went "
                                              "backwards or is not a count -- server restarted or misreporting)")
    return SpecCounters(delta["drafts"], delta["draft_tokens"], delta["accepted_tokens"], after.source)
