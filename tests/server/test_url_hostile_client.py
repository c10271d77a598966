"""The URL audit's client against hostile servers: one deadline per whole reply (a slow drip is cut off),
root endpoints of a base URL ending in ``/v1``."""

from __future__ import annotations

import json
import time

import pytest

from verifier.errors import EXIT_DECODER
from verifier.server.client import ServerError, ServerSettings

from tests.server.hostile import decoder, generate, hostile, ok  # noqa: F401  (hostile: a fixture)


def _drip(text):
    def drip(handler):  # a valid reply, one byte every 0.2 s: each read is quick, the whole takes many seconds
        data = text.encode()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        for b in data:
            handler.wfile.write(bytes([b]))
            handler.wfile.flush()
            time.sleep(0.2)
    return drip


def test_a_slow_drip_reply_is_cut_off_at_the_request_timeout(hostile):
    drip = _drip(json.dumps({"choices": [{"index": 0, "token_ids": [1, 1, 1], "finish_reason": "length"}]}))
    s = hostile(lambda count, body: drip)
    start = time.monotonic()
    with pytest.raises(ServerError, match=r"no complete reply within 1 s \(--request-timeout\)") as info:
        generate(decoder(s.url, request_timeout_s=1.0), n=1)
    assert time.monotonic() - start < 6 and info.value.exit_code == EXIT_DECODER


def test_a_slow_drip_metrics_page_is_cut_off(hostile):
    from verifier.server.client import get_text

    s = hostile(ok, lambda path: _drip("# TYPE vllm:spec_decode_num_draft_tokens counter\n" * 3))
    start = time.monotonic()
    status, text = get_text(ServerSettings(s.url), "/metrics", timeout_s=1.0)
    assert status == 0 and time.monotonic() - start < 2.5


def test_a_base_url_ending_in_v1_reads_root_endpoints_at_the_root():
    settings = ServerSettings("http://127.0.0.1:8000/v1")
    assert settings.url("/v1/completions") == "http://127.0.0.1:8000/v1/completions"
    assert settings.url("/metrics") == "http://127.0.0.1:8000/metrics"  # vLLM serves /metrics at the root
    assert settings.url("/health") == "http://127.0.0.1:8000/health"
    assert ServerSettings("http://h:1/").url("/metrics") == "http://h:1/metrics"


@pytest.mark.parametrize("url, problem", [
    ("http://127.0.0.1:notaport", "Port could not be cast"),  # httpx.InvalidURL was a traceback at the first GET
    ("http://127.0.0.1:99999", "Port out of range"),
    ("http://user:s3cret@127.0.0.1:8000", "credentials in the URL"),  # would be written to the suite and reports
    ("http://127.0.0.1:8000/?key=s3cret", "a query or fragment"),
    ("http://127.0.0.1:8000#x", "a query or fragment"),
    ("http://127.0.0.1:8000 ", "it holds whitespace"),
])
def test_a_url_the_client_cannot_use_is_refused_before_any_request(url, problem):
    from verifier.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=rf"--url=.* is invalid \({problem}"):
        ServerSettings(url)


def test_cli_a_url_with_a_bad_port_is_exit_2_without_a_traceback(tmp_path):
    from tests.server.conftest import audit

    done = audit(["--url", "http://127.0.0.1:notaport", "--target", "tabular:trigram3", "--num-samples", "10",
                  "--run-dir", str(tmp_path / "a")])
    assert done.returncode == 2 and "--url='http://127.0.0.1:notaport' is invalid" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize("status", [301, 307, 308])
def test_a_redirected_post_is_a_usage_error_naming_the_location(hostile, status):
    """A redirect means --url is not the endpoint's address (http -> https, a moved path): exit 2 naming where it
    points, never followed (a POST's body would be dropped or sent twice) and never retried."""
    from verifier.errors import EXIT_USAGE

    s = hostile(lambda count, body: (status, "", [("Location", "https://elsewhere.example/v1/completions")]))
    with pytest.raises(Exception, match=rf"redirected with HTTP {status} to 'https://elsewhere.example/v1/compl") as info:
        generate(decoder(s.url, max_retries=3), n=1)
    assert info.value.exit_code == EXIT_USAGE and s.count == 1


@pytest.mark.parametrize("field, value, allowed", [("num_concurrent", 0, "1..256"), ("num_concurrent", 257, "1..256"),
                                                   ("max_retries", 101, "0..100")])
def test_concurrency_and_retries_have_bounds(field, value, allowed):
    from verifier.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=rf"={value} is invalid; allowed: an integer in {allowed}"):
        ServerSettings("http://127.0.0.1:8000", **{field: value})
