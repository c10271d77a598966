"""A request the server refuses (4xx) inside ``generate`` is a usage error (exit 2), as before the first sample."""

from __future__ import annotations

from verifier.errors import EXIT_USAGE, SamplingRefusedError
from verifier.server.client import ServerUsageError

from tests.server.hostile import hostile  # noqa: F401  (a fixture)


def test_a_refused_request_raised_inside_generate_is_a_usage_error():
    """The runner passes a SamplingRefusedError raised in ``generate`` through as exit 2 (no crash verdict)."""
    assert issubclass(ServerUsageError, SamplingRefusedError) and ServerUsageError("x").exit_code == EXIT_USAGE


def test_cli_a_request_refused_with_400_is_exit_2_not_a_crash(hostile, tmp_path):
    from tests.server.conftest import audit

    s = hostile(lambda count, body: (400, '{"error": "unknown field return_token_ids"}'))
    done = audit(["--url", s.url, "--target", "tabular:trigram3", "--num-draft-tokens", "2", "--num-samples", "10",
                  "--max-retries", "0", "--run-dir", str(tmp_path / "a")])
    assert done.returncode == EXIT_USAGE, done.stdout[-2000:] + done.stderr[-2000:]
    assert "HTTP 400" in done.stderr and "unknown field return_token_ids" in done.stderr
    assert "Traceback" not in done.stderr


def _trigram3_ok(count, body):  # a reply in the trigram3 vocabulary (ids 0..2)
    import json

    import numpy as np

    rng = np.random.default_rng(body["seed"])
    return 200, json.dumps({"choices": [{"index": i, "token_ids": [int(t) for t in rng.integers(0, 3, body["max_tokens"])],
                                         "finish_reason": "length"} for i in range(body.get("n", 1))]})


def test_cli_two_sample_server_errors_keep_their_exit_code_and_print_no_traceback(hostile, tmp_path):
    """The two-sample design wraps each arm as a plugin: a refused request is still exit 2, a malformed reply
    exit 3, each with its message and without the asyncio frames as a 'traceback of the plugin'."""
    from tests.server.conftest import audit

    arm = hostile(_trigram3_ok)
    for name, ref, code, said in (
            ("refused", hostile(lambda count, body: (400, '{"error": "unknown field"}')), EXIT_USAGE, "HTTP 400"),
            ("short", hostile(lambda count, body: (200, '{"choices": [{"index": 0, "token_ids": [1], '
                                                        '"finish_reason": "stop"}]}')), 3, "1 of max_tokens")):
        done = audit(["--url", arm.url, "--reference-url", ref.url, "--target", "tabular:trigram3", "--num-draft-tokens",
                      "2", "--num-samples", "10", "--max-retries", "0", "--run-dir", str(tmp_path / name)])
        assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
        assert said in done.stderr and "Traceback" not in done.stdout + done.stderr, done.stderr[-2000:]
