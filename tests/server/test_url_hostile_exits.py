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
