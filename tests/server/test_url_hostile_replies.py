"""Replies that are not what the dialect promises (choice indices, logprobs, llama-server draft figures):
ServerReplyError (exit 3) naming the request and the reply, never a crash of the parser."""

from __future__ import annotations

import json

import pytest

from verifier.errors import EXIT_DECODER
from verifier.server.dialects import ServerReplyError

from tests.server.hostile import decoder, generate, hostile, reply  # noqa: F401  (hostile: a fixture)


C = dict(token_ids=[1, 1, 1], finish_reason="length")


@pytest.mark.parametrize("choices, match", [
    ([dict(C, index=None), dict(C, index=1)], r"`index` fields are \[None, 1\]"),
    ([dict(C, index="a"), dict(C, index=1)], r"`index` fields are \['a', 1\]"),
    ([dict(C, index=0), dict(C, index=0)], r"`index` fields are \[0, 0\]"),
    ([dict(C, index=0), dict(C, index=5)], r"`index` fields are \[0, 5\]"),
])
def test_choice_indices_must_number_each_completion_once(hostile, choices, match):
    s = hostile(reply(choices))
    with pytest.raises(ServerReplyError, match=match) as info:
        generate(decoder(s.url, n_per_request=2), n=2)
    assert "seed" in str(info.value) and info.value.exit_code == EXIT_DECODER


@pytest.mark.parametrize("logprobs, match", [
    ({"token_logprobs": ["a", "b", "c"]}, r"token_logprobs holds 'a'"),
    ({"token_logprobs": [5.0, -1.0, -1.0]}, r"token_logprobs holds 5.0"),
    ({"token_logprobs": [-1, -1, -1], "top_logprobs": [[1], [2], [3]]}, r"top_logprobs holds \[1\]"),
    ({"token_logprobs": [-1, -1, -1], "top_logprobs": [{"token_id:1": "x"}] * 3}, r"top_logprobs holds 'x'"),
])
def test_malformed_logprobs_are_reply_errors_not_crashes(hostile, logprobs, match):
    s = hostile(reply([dict(C, index=0, logprobs=logprobs)]))
    with pytest.raises(ServerReplyError, match=match) as info:
        generate(decoder(s.url, logprobs=1), n=1)
    assert "seed" in str(info.value)


LLAMA = {"tokens": [1, 2, 3], "stop_type": "limit"}


@pytest.mark.parametrize("extra, match", [
    ({"timings": {"draft_n": float("nan"), "draft_n_accepted": 1}}, r"timings.draft_n=nan"),
    ({"timings": {"draft_n": float("inf"), "draft_n_accepted": 1}}, r"timings.draft_n=inf"),
    ({"timings": {"draft_n": -5, "draft_n_accepted": 0}}, r"timings.draft_n=-5"),
    ({"timings": {"draft_n": True, "draft_n_accepted": True}}, r"timings.draft_n=True"),
    ({"timings": {"draft_n": 1, "draft_n_accepted": 50}}, r"draft_n_accepted=50 exceeds timings.draft_n=1"),
    ({"completion_probabilities": [{"logprob": "x"}] * 3}, r"logprob holds 'x'"),
    ({"completion_probabilities": [{"logprob": -1, "top_logprobs": [1, 2]}] * 3}, r"completion_probabilities is malformed"),
    ({"completion_probabilities": [{"prob": 0.5, "top_probs": [{"id": 1}]}] * 3}, r"completion_probabilities is malformed"),
])
def test_llama_server_figures_that_are_not_counts_or_probabilities_are_reply_errors(hostile, extra, match):
    s = hostile(lambda count, body: (200, json.dumps(dict(LLAMA, **extra))))
    dec = decoder(s.url, api="llama-server", logprobs=2 if "completion_probabilities" in extra else None)
    with pytest.raises(ServerReplyError, match=match) as info:
        generate(dec, n=2)
    assert "seed" in str(info.value)


@pytest.mark.parametrize("api, text", [
    ("openai-completions", '{"choices": [{"index": 0, "token_ids": [0, 1, 2], "finish_reason": "length"}]}'),
    ("llama-server", '{"tokens": [0, 1, 2], "stop_type": "eos"}'),
])
def test_tokens_after_eos_are_a_reply_error_and_never_journaled(hostile, tmp_path, api, text):
    s = hostile(lambda count, body: (200, text))
    dec = decoder(s.url, api=api)
    dec.bind_run_dir(tmp_path)
    with pytest.raises(ServerReplyError, match=r"emitted tokens after EOS \(id 0 at position 0") as info:
        generate(dec, n=1)
    assert "seed" in str(info.value)
    assert not (tmp_path / "server" / "responses.jsonl").exists() or not (tmp_path / "server" / "responses.jsonl").read_text()
