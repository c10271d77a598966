"""A server's speculation counters that are not counts (going backwards, NaN, Inf, more accepted than
drafted) or absent never make the report claim that speculation was verified."""

from __future__ import annotations

import json

import pytest

from tests.server.hostile import decoder, generate, hostile, ok  # noqa: F401  (hostile: a fixture)


def _metrics(values):
    state = iter(values)

    def get(path):
        if path != "/metrics":
            return json.dumps({"data": []})
        draft, accepted = next(state)
        return (f"# TYPE vllm:spec_decode_num_draft_tokens counter\nvllm:spec_decode_num_draft_tokens_total {draft}\n"
                f"# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
                f"vllm:spec_decode_num_accepted_tokens_total {accepted}\n")
    return get


@pytest.mark.parametrize("before, after", [
    ((100.0, 50.0), (90.0, 40.0)),  # counters went backwards (a restart, or a lie)
    (("NaN", "NaN"), ("NaN", "NaN")),
    (("+Inf", 0.0), ("+Inf", 1.0)),
    ((0.0, 0.0), (10.0, 50.0)),  # more accepted than drafted
])
def test_counters_that_are_not_counts_never_verify_speculation(hostile, before, after):
    from verifier.runner import speculation
    from verifier.runner.verdict import PASS

    s = hostile(ok, _metrics([before, after] + [after] * 10))
    dec = decoder(s.url)
    generate(dec)
    figures = dec.last_stats.extra["speculation"]
    assert figures["counters"]["draft_tokens"] is None and "counters unusable" in figures["counters"]["source"]
    summary = speculation.summarize([figures])

    class Verdict:
        verdict, reason, expectation_met, speculation = PASS, "no bias", True, None

    v = Verdict()
    speculation.apply_guard(v, summary)
    assert v.speculation["verified"] is not True  # no figure shows a draft: never reported as verified
    assert "counters unusable" in speculation.describe(v.speculation)


def test_no_counters_at_all_is_not_reported_as_verified(hostile):
    from verifier.runner import speculation

    s = hostile(ok)  # /metrics answers, without speculation counters
    dec = decoder(s.url)
    generate(dec)

    class Verdict:
        verdict, reason, expectation_met, speculation = "PASS", "no bias", True, None

    v = Verdict()
    speculation.apply_guard(v, speculation.summarize([dec.last_stats.extra["speculation"]]))
    assert v.speculation["verified"] is None
