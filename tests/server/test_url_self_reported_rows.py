"""Self-reported design against lying servers whose top-logprob rows are not one law's (stdlib server, in process).

Each lie must end in a clear error (exit 3: the server misreports, naming the row) -- never a traceback, never a
law silently repaired into a PASS or a false BIAS: a token id listed twice (a JSON reader keeps one value), ids
outside the vocabulary (a negative id wrapped onto another token), and probs over the whole vocabulary that do not
sum to 1 (renormalised into a law the server never reported).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.server.hostile import hostile  # noqa: F401  (fixture)
from verifier.errors import DecoderOutputError
from verifier.sampling import SamplingConfig
from verifier.server.dialects import ServerReplyError
from verifier.server.reported_law import Undefined, rebuild_law
from verifier.server.self_audit import SelfReportedSpec, run_self_reported

LAW = [0.5, 0.3, 0.2]  # the honest law at every position (vocabulary of 3)


def _llama(edit):
    """A llama-server /completion that samples LAW and reports ``edit(entries)`` as each row's top_probs."""
    def post(count, body):
        rng = np.random.default_rng(body.get("seed", count))
        toks = [int(t) for t in rng.choice(3, size=body["n_predict"], p=LAW)]
        rows = [{"id": t, "prob": LAW[t], "top_probs": [{"id": i, "prob": p} for i, p in edit(list(enumerate(LAW)))]}
                for t in toks]
        return 200, json.dumps({"tokens": toks, "stop_type": "limit", "completion_probabilities": rows,
                                "timings": {"draft_n": 2, "draft_n_accepted": 1}})
    return post


def _openai(row_text):
    """An OpenAI /v1/completions whose top_logprobs row is the literal JSON ``row_text``."""
    def post(count, body):
        choices = ",".join(
            '{"index": %d, "token_ids": [0], "finish_reason": "length", "logprobs": {"token_logprobs": [%r], '
            '"top_logprobs": [%s]}}' % (i, math.log(LAW[0]), row_text) for i in range(body.get("n", 1)))
        return 200, '{"choices": [%s]}' % choices
    return post


def _spec(url, tmp_path, api="llama-server"):
    return SelfReportedSpec(url=url, api=api, prompts=[[0, 1]], sampling=SamplingConfig(), logprobs=3, vocab_size=3,
                            max_new_tokens=1 if api != "llama-server" else 2, num_draft_tokens=2,
                            run_dir=tmp_path / "run", num_samples=20, collisions=0, consistency_positions=2,
                            server={"max_retries": 0})


@pytest.mark.parametrize("edit, message", [
    (lambda e: e + [e[0]], "lists token id 0 more than once"),
    (lambda e: [(0, e[0][1] / 2), (0, e[0][1] / 2)] + e[1:], "lists token id 0 more than once"),
])
def test_a_row_that_names_a_token_twice_is_a_server_reply_error(hostile, tmp_path, edit, message):
    """Before: the dict kept the last entry -- a repeated entry PASSed, a split one (0.25 + 0.25 for token 0) was
    renormalised into another law and the honest sampler was called BIASED."""
    server = hostile(_llama(edit))
    with pytest.raises(ServerReplyError, match=message):
        run_self_reported(_spec(server.url, tmp_path))


def test_a_repeated_token_id_key_in_an_openai_row_is_a_server_reply_error(hostile, tmp_path):
    """JSON objects with a repeated key: Python's reader keeps the last value silently."""
    lp = [math.log(p) for p in LAW]
    server = hostile(_openai('{"token_id:0": %r, "token_id:0": %r, "token_id:1": %r, "token_id:2": %r}'
                             % (lp[0] - math.log(2), lp[0] - math.log(2), lp[1], lp[2])))
    with pytest.raises(ServerReplyError, match="holds the key 'token_id:0' more than once"):
        run_self_reported(_spec(server.url, tmp_path, api="openai-completions"))


@pytest.mark.parametrize("extra", [(-1, 0.1), (10, 0.1), (10, 0.0)])
def test_row_ids_outside_the_vocabulary_are_decoder_output_errors(hostile, tmp_path, extra):
    """Before: id 10 with mass crashed with an IndexError traceback (exit 3 'without writing its verdict'); id -1 was
    wrapped onto token 2 by numpy indexing (a false BIAS); id 10 at prob 0 was accepted."""
    server = hostile(_llama(lambda e: [(i, p * (1 - extra[1])) for i, p in e] + [extra]))
    with pytest.raises(DecoderOutputError, match=f"name token id {extra[0]} outside 0..2"):
        run_self_reported(_spec(server.url, tmp_path))


@pytest.mark.parametrize("scale", [0.5, 1.5])
def test_a_prompt_row_that_is_no_law_is_a_server_error_not_a_usage_error(hostile, tmp_path, scale):
    """Probs over the whole vocabulary summing to 0.5 were renormalised (PASS); both that and a sum of 1.5 were a
    usage error (exit 2) although nothing the user passes can fix a server that misreports."""
    server = hostile(_llama(lambda e: [(i, p * scale) for i, p in e]))
    with pytest.raises(ServerReplyError, match="is not the log probabilities of any law"):
        run_self_reported(_spec(server.url, tmp_path))


def test_a_row_over_the_whole_vocabulary_must_sum_to_one():
    row = {i: math.log(p / 2) for i, p in enumerate(LAW)}
    for convention in ("raw", "processed"):
        out = rebuild_law(row, SamplingConfig(), convention, vocab_size=3)
        assert isinstance(out, Undefined) and out.not_a_law and "sum to 0.5 < 1" in out.reason
    assert not isinstance(rebuild_law({i: math.log(p) for i, p in enumerate(LAW)}, SamplingConfig(), "processed",
                                      vocab_size=3), Undefined)


@pytest.mark.parametrize("flag, value, message", [
    ("--alpha", "0", "--alpha=0.0 is invalid"),
    ("--alpha", "1", "--alpha=1.0 is invalid"),
    ("--target-tv", "0", "--target-tv=0.0 is invalid"),
    ("--target-tv", "nan", "--target-tv=nan is invalid"),
    ("--target-tv", "1.5", "--target-tv=1.5 is invalid"),
    ("--seed", "-1", "--seed=-1 is invalid"),
    ("--eos-token-id", "3", "--eos-token-id=3 is invalid"),
])
def test_statistics_flags_are_refused_before_any_request(hostile, tmp_path, flag, value, message):
    """Before: --alpha 0/1 and --target-tv 0 were refused only after every sample request had been sent (the
    statistics' own checks), --seed -1 crashed with a numpy traceback after them (exit 3 'without writing its
    verdict'), --target-tv nan ran to a nonsense UNDERPOWERED ('TV 0 > target TV nan'), --target-tv 1.5 PASSed
    ('no bias >= TV 1.5') and an EOS id outside --vocab-size was taken."""
    from tests.server.conftest import audit

    server = hostile(_llama(lambda e: e))
    done = audit(["--url", server.url, "--api", "llama-server", "--design", "self-reported", "--vocab-size", "3",
                  "--prompt-ids", "0,1", "--logprobs", "3", "--num-draft-tokens", "2", "--max-new-tokens", "2",
                  "--num-samples", "10", "--collisions", "0", flag, value, "--run-dir", str(tmp_path / "r")], timeout=120)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert message in done.stderr, done.stderr[-2000:]
    assert server.count == 0 and not (tmp_path / "r" / "server").exists()


def _finished_run(hostile, tmp_path):
    server = hostile(_llama(lambda e: e))
    spec = _spec(server.url, tmp_path)
    assert run_self_reported(spec) in (0, 4)
    return server, spec


def test_journaled_replies_are_checked_against_this_runs_vocabulary(hostile, tmp_path):
    """The same --run-dir rerun with a smaller --vocab-size: the journaled replies hold ids outside it.  Before: an
    IndexError traceback (exit 3 'without writing its verdict'); now a JournalError (exit 2) naming the line."""
    from verifier.server.journal import JournalError

    server, spec = _finished_run(hostile, tmp_path)
    sent = server.count
    spec.vocab_size, spec.logprobs = 2, 3
    with pytest.raises(JournalError, match=r"responses.jsonl:1: the journaled reply to prompt law .* outside 0..1"):
        run_self_reported(spec)
    assert server.count == sent  # nothing sent


def test_a_journal_line_edited_with_its_digest_removed_is_refused(hostile, tmp_path):
    """Before: a line without a `digest` was read as an old journal's, so an edit plus deleting the digest passed (now the
    keyed seal, `mac`, is deleted)."""
    from verifier.server.journal import JOURNAL_NAME, JournalError

    _server, spec = _finished_run(hostile, tmp_path)
    path = spec.run_dir / JOURNAL_NAME
    lines = path.read_text().splitlines()
    entry = json.loads(lines[3])
    del entry["mac"]
    entry["completions"][0]["token_ids"] = [2, 2]
    lines[3] = json.dumps(entry)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(JournalError, match="line 4 has no digest"):
        run_self_reported(spec)


def test_a_self_reported_audit_refuses_another_designs_run_folder(hostile, tmp_path):
    """Before: it wrote its report.json/md/html/junit over a known-target run's (run.json and samples kept)."""
    from verifier.errors import ConfigError

    server = hostile(_llama(lambda e: e))
    spec = _spec(server.url, tmp_path)
    spec.run_dir.mkdir()
    (spec.run_dir / "run.json").write_text("{}")
    (spec.run_dir / "report.json").write_text('{"verdict": "PASS"}')
    with pytest.raises(ConfigError, match="already holds a run of the suite runner"):
        run_self_reported(spec)
    (spec.run_dir / "run.json").unlink()
    with pytest.raises(ConfigError, match="report of another audit"):
        run_self_reported(spec)
    assert server.count == 0 and (spec.run_dir / "report.json").read_text() == '{"verdict": "PASS"}'


def test_a_suite_run_refuses_a_self_reported_audits_folder(hostile, tmp_path):
    """Before: a known-target audit (or `run --run-dir`) overwrote a self-reported audit's reports."""
    from verifier.errors import ConfigError
    from verifier.runner.guards import check_fresh_run_dir

    _server, spec = _finished_run(hostile, tmp_path)
    with pytest.raises(ConfigError, match="self-reported audit"):
        check_fresh_run_dir(spec.run_dir, "run.json")
    assert run_self_reported(spec) in (0, 4)  # its own command continues it
