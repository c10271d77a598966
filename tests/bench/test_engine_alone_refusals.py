"""`specverify bench engine-alone`: audit arguments it cannot measure are refused before anything runs (exit 2, the
flag, its value and the engines it takes), and an audit that ends without a verdict passes its own exit code on.

Quick: no engine runs (the refusals come first; the stopped audit is a usage error of the audit itself)."""

import time

import pytest

from verifier.cli import main


@pytest.mark.parametrize("words, named", [
    ([], "AUDIT ARGS"),
    (["--"], "AUDIT ARGS"),
    (["--", "--engine", "vllm-sampler", "--num-samples", "20"], "--engine='vllm-sampler'"),
    (["--", "--target", "shipped:target", "--decoder", "reference"], "--engine is missing"),
    (["--", "--engine", "openvino-genai", "--url", "http://127.0.0.1:9"], "no --url"),
])
def test_arguments_it_cannot_measure_are_refused_at_once(words, named, capsys):
    start = time.perf_counter()
    assert main(["bench", "engine-alone", *words]) == 2
    err = capsys.readouterr().err
    assert named in err and "openvino-genai" in err and "Traceback" not in err
    assert time.perf_counter() - start < 5  # no audit ran


def test_an_audit_that_stops_passes_its_exit_code_on(capsys):
    """A usage error of the audit (here an unknown engine option) is the audit's exit 2 with its own message, not a
    complaint about the bench's arguments; exit 130 and 3 pass the same way (AuditStopped)."""
    code = main(["bench", "engine-alone", "--", "--engine", "openvino-genai", "--engine-arg", "flavour=salty"])
    err = capsys.readouterr().err
    assert code == 2 and "ended without a verdict (exit 2)" in err and "flavour" in err


@pytest.mark.parametrize("value", ["0", "-1", "x", "2.5", "101", "1e3", "\uff12", ""])
def test_a_repeat_count_outside_1_to_100_is_refused(value, capsys):
    assert main(["bench", "engine-alone", "--repeat", value, "--", "--engine", "llama-cpp-python"]) == 2
    err = capsys.readouterr().err
    assert "--repeat" in err and repr(value) in err and "1 to 100" in err and "Traceback" not in err


def test_repeated_pairs_are_summarised_by_their_median_and_range():
    """The median of the pairs' ratios (a pair without a verdict time counts in `pairs` but not in the ratios)."""
    from verifier.bench.engine_alone import render_repeats, repeat_summary

    runs = [{"ratio": r, "audit_args": ["--engine", "x"], "verdict": "PASS", "exit_code": 0, "rows": 5000,
             "audit_time_to_verdict_s": 8.0 if r else None, "audit_generate_s": 7.0, "alone_wall_s": 7.2,
             "alone_generate_s": 6.9, "loadavg": [0.5, 0.6, 0.7]} for r in (0.81, 0.94, 0.72, None)]
    assert repeat_summary(runs) == {"pairs": 4, "median_ratio": 0.81, "min_ratio": 0.72, "max_ratio": 0.94}
    text = render_repeats(runs)
    assert "median **0.81** (min 0.72, max 0.94) over 4 pairs" in text and text.count("\n| ") == 5
    assert repeat_summary([dict(runs[3])])["median_ratio"] is None


def test_repeat_after_the_double_dash_is_refused_with_where_it_belongs(capsys):
    assert main(["bench", "engine-alone", "--", "--engine", "llama-cpp-python", "--repeat", "2"]) == 2
    err = capsys.readouterr().err
    assert "--repeat N before `--`" in err and "Traceback" not in err


def test_pairs_that_finished_are_printed_when_a_later_pair_stops(monkeypatch, capsys):
    """A later pair's audit that stops passes its exit code on, and the pairs before it still print their figures."""
    from verifier.bench import engine_alone as mod

    calls = []

    def fake(audit_args):
        calls.append(1)
        if len(calls) == 2:
            raise mod.AuditStopped(130, "interrupted")
        return {"ratio": 0.9, "audit_args": audit_args, "verdict": "PASS", "exit_code": 0, "rows": 500,
                "audit_time_to_verdict_s": 8.0, "audit_generate_s": 7.0, "alone_wall_s": 7.2, "alone_generate_s": 6.9,
                "loadavg": [0.5, 0.5, 0.5]}

    monkeypatch.setattr(mod, "engine_alone", fake)
    assert main(["bench", "engine-alone", "--repeat", "3", "--", "--engine", "llama-cpp-python"]) == 130
    out, err = capsys.readouterr()
    assert "median **0.90**" in out and "1 of 3 pairs finished" in err and "exit 130" in err
