"""Faults of a URL audit's server, each a clear error naming what was sent and what came back.

The in-process HTTP server of tests/server/hostile.py (standard library, a thread) injects the faults -- allowed for these
cases only; the PASS/BIAS behaviour is tested against real server processes (test_url_audit.py).
Exit codes: 2 for usage (unreachable before the first sample, 4xx), 3 for a misbehaving server
(5xx/429 after the retries, malformed replies, wrong token counts, ids outside the vocabulary);
responses received before a failure stay in the journal and a resume sends only what is missing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from verifier.errors import EXIT_DECODER, EXIT_USAGE, DecoderOutputError
from verifier.sampling import SamplingConfig
from verifier.server.client import ServerError, ServerUsageError
from verifier.server.decoder import ServerDecoder
from verifier.server.dialects import ServerReplyError

from tests.server.hostile import VOCAB, hostile, ok  # noqa: F401  (hostile: the fixture `server` wraps)
from tests.server.hostile import tokens as seeded_tokens


@pytest.fixture
def server(hostile):
    """``server(reply)``: a fault-injecting server answering ``reply(count, body) -> (status, text[, headers])``."""
    return hostile


def decoder(url, **kw):
    return ServerDecoder(url, vocab_size=VOCAB, eos_token_id=0, num_draft_tokens=2, max_retries=kw.pop("max_retries", 2),
                         request_timeout_s=kw.pop("request_timeout_s", 10.0), **kw)


def generate(dec, n=6, seed=1):
    return dec.generate([1, 2], n, 3, SamplingConfig(), seed)


def test_unreachable_url_is_a_usage_error_naming_it():
    with pytest.raises(ServerUsageError, match=r"--url='http://127.0.0.1:9' does not answer") as info:
        decoder("http://127.0.0.1:9")
    assert info.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("text, match", [
    ('{"object": "error"}', "no `choices` list"),
    ("this is not json{", "not JSON"),
    ('{"choices": [{"index": 0, "text": "hi", "finish_reason": "length"}]}', "carries no emitted token ids"),
    ('{"choices": [{"index": 0, "token_ids": [1, 2], "finish_reason": "length"}]}', "2 of max_tokens=3 tokens"),
    ('{"choices": [{"index": 0, "token_ids": [1, 2, 3, 4], "finish_reason": "length"}]}', "max_tokens overshot"),
    ('{"choices": [{"index": 0, "token_ids": [1, 9, 3], "finish_reason": "length"}]}', "token id 9 outside"),
    ('{"choices": []}', "asked for n=1 completions, the reply has 0"),
])
def test_malformed_replies_are_server_errors_naming_request_and_reply(server, text, match):
    s = server(lambda count, body: (200, text))
    with pytest.raises(DecoderOutputError, match=match) as info:
        generate(decoder(s.url))
    assert info.value.exit_code == EXIT_DECODER
    assert "seed" in str(info.value)  # names the request that got it


@pytest.mark.full  # 13 s of backoff waits; tests/server/test_url_hostile_client.py stays quick
def test_429_and_5xx_storms_are_retried_with_backoff(server):
    s = server(lambda count, body: (429, "slow down", [("Retry-After", "0")]) if count <= 3
               else (503, "busy") if count <= 5 else ok(count, body))
    rows = generate(decoder(s.url, num_concurrent=1, max_retries=6))
    assert rows.shape == (6, 3) and s.count == 6 + 5 + 2  # 6 samples, 5 refusals retried, 2 seed-contract probes


def test_persistent_503_fails_after_retries_and_keeps_what_arrived(server, tmp_path):
    s = server(lambda count, body: ok(count, body) if count <= 4 else (503, "overloaded"))
    dec = decoder(s.url, num_concurrent=1, max_retries=1)
    dec.bind_run_dir(tmp_path)
    with pytest.raises(ServerError, match=r"failed after 2 tries .*HTTP 503.*--resume") as info:
        generate(dec)
    assert info.value.exit_code == EXIT_DECODER
    assert (tmp_path / "server" / "responses.jsonl").read_text().count("\n") == 4


def test_dead_server_then_resume_sends_only_what_is_missing(server, tmp_path):
    first = server(lambda count, body: ok(count, body) if count <= 3 else (500, "dying"))
    dec = decoder(first.url, num_concurrent=1, max_retries=0)
    dec.bind_run_dir(tmp_path)
    with pytest.raises(ServerError):
        generate(dec)
    second = server(ok)
    dec2 = decoder(second.url, num_concurrent=1)
    dec2.bind_run_dir(tmp_path)
    rows = generate(dec2)
    assert second.count == 3 + 2  # the 3 missing requests + the seed-contract probes; the 3 journaled are not resent
    sent_seeds = [b["seed"] for b in first.bodies[:3]]
    assert [list(r) for r in rows[:3]] == [seeded_tokens({"seed": sd, "max_tokens": 3}) for sd in sent_seeds]


def test_a_server_that_ignores_seeds_is_named(server, capsys):
    rng = np.random.default_rng(0)
    s = server(lambda count, body: (200, json.dumps({"choices": [
        {"index": 0, "token_ids": [int(t) for t in rng.integers(1, VOCAB, 3)], "finish_reason": "length"}]})))
    dec = decoder(s.url)
    generate(dec, n=4)
    assert dec.seed_honoured is False and "ignores the request seed" in capsys.readouterr().out


def test_logprobs_missing_when_asked_for(server):
    s = server(ok)
    with pytest.raises(ServerReplyError, match="logprobs were asked for"):
        generate(decoder(s.url, logprobs=2))


def test_auth_token_is_sent_from_the_environment_and_never_journaled(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVERIFY_TEST_TOKEN", "s3cret-token")
    s = server(ok)
    dec = decoder(s.url, api_key_env="SPECVERIFY_TEST_TOKEN")
    dec.bind_run_dir(tmp_path)
    generate(dec, n=2)
    assert s.headers[0]["Authorization"] == "Bearer s3cret-token"
    assert "s3cret" not in (tmp_path / "server" / "responses.jsonl").read_text()
    assert "s3cret" not in json.dumps(dec.settings)


def test_401_is_a_usage_error_pointing_at_the_token(server):
    s = server(lambda count, body: (401, '{"error": "invalid api key"}'))
    with pytest.raises(ServerUsageError, match=r"HTTP 401.*--api-key-env"):
        generate(decoder(s.url))


def test_unset_token_variable_is_refused_before_any_request():
    with pytest.raises(Exception, match=r"--api-key-env='SPECVERIFY_UNSET_VAR' is invalid"):
        decoder("http://127.0.0.1:9", api_key_env="SPECVERIFY_UNSET_VAR")


@pytest.mark.full  # 19 s; test_url_hostile_exits.py stays quick
def test_cli_exit_codes_for_unreachable_and_misbehaving_servers(server, tmp_path):
    from tests.server.conftest import audit

    done = audit(["--url", "http://127.0.0.1:9", "--target", "tabular:trigram3", "--num-samples", "10",
                  "--run-dir", str(tmp_path / "a")])
    assert done.returncode == EXIT_USAGE and "does not answer" in done.stderr and "Traceback" not in done.stderr
    s = server(lambda count, body: (200, '{"choices": [{"index": 0, "token_ids": [1, 7, 1, 1], "finish_reason": "length"}]}'))  # k + 2 tokens
    done = audit(["--url", s.url, "--target", "tabular:trigram3", "--num-draft-tokens", "2", "--num-samples", "10", "--max-retries", "0",
                  "--run-dir", str(tmp_path / "b")])
    assert done.returncode == EXIT_DECODER, done.stdout[-2000:] + done.stderr[-2000:]
    assert "token id 7 outside" in done.stdout + done.stderr and "Traceback" not in done.stderr
    for bad, flag in ((["--url", "ftp://x"], "--url"), (["--url", s.url, "--api", "grpc"], "--api"),
                      (["--url", s.url, "--num-concurrent", "0"], "--num-concurrent"),
                      (["--url", s.url, "--reference-off"], "--reference-off")):
        done = audit([*bad, "--target", "tabular:trigram3", "--num-samples", "10"])
        assert done.returncode == EXIT_USAGE and flag in done.stderr and "Traceback" not in done.stderr, (bad, done.stderr)
