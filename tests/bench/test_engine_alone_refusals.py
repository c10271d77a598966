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
