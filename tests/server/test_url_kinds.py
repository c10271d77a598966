"""Issue 29's field bug kinds 3 (penalties, min-p) and 5 (stop rules) through ``specverify audit --url``: the new
flags' bad input, what each dialect sends and refuses, and a stop rule broken by a server (the in-process hostile
server of tests/server/hostile.py) caught by the deterministic ``stop-rule`` cell.

The stop-rule cell is deterministic (one violating row is BIAS, p = 0): its false-fail rate is 0 for a server that
keeps the rule, and a server that emits a token after a stop token in every row is caught with certainty at any n.
The real-server side (llama-server keeping its stop rule, PASS) is tests/server/test_llama_server_kinds.py.
"""

from __future__ import annotations

import json

import pytest

from verifier.errors import EXIT_USAGE, SamplingRefusedError
from verifier.sampling import SamplingConfig
from verifier.server.dialects import ServerReplyError, StopRule, get_dialect

from tests.server.hostile import hostile  # noqa: F401  (a fixture)

DEAD = "http://127.0.0.1:9"  # nothing listens: every refusal below must come before any request
SHIPPED = ["--target", "shipped:target", "--num-draft-tokens", "3", "--no-progress"]
STOP_S = "83,262,274,287,304,307,321,323,350,359,369"  # the shipped tokens whose text holds "s" (stop string "s")


def _cli(argv, capsys) -> tuple[int, str]:
    from verifier.cli import main

    code = main(["audit", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv, shown", [
    (["--min-p", "1.5"], "--min-p=1.5 is invalid; allowed: None or a number with 0 <= min_p <= 1"),
    (["--presence-penalty", "200"], "--presence-penalty=200.0 is invalid; allowed: None or a number in [-100, 100]"),
    (["--frequency-penalty", "nan"], "--frequency-penalty=nan is invalid; allowed: None or a number in [-100, 100]"),
    (["--stop-token-ids", "3,x"], "--stop-token-ids='3,x' is invalid; allowed: distinct comma-separated token ids >= 0"),
    (["--stop-token-ids", "3,3"], "--stop-token-ids='3,3' is invalid; allowed: distinct comma-separated token ids >= 0"),
    (["--max-tokens", "0"], "--max-tokens=0 is invalid; allowed: an integer >= 1"),
    (["--max-tokens", "6", "--max-new-tokens", "6"], "--max-tokens=6 is invalid; allowed: an integer in 1..5 (below "
                                                     "--max-new-tokens 6"),
    (["--stop-token-ids", "5", "--temperature", "0"], "--stop-token-ids='5' is invalid; allowed: temperature > 0"),
    (["--stop-token-ids", "5", "--sequential"], "--stop-token-ids='5' is invalid; allowed: not with --sequential"),
    (["--stop-token-ids", "5", "--reference-url", DEAD], "--stop-token-ids='5' is invalid; allowed: with the "
                                                         "known-target design"),
])
def test_bad_kind_flags_are_usage_errors_naming_the_flag(argv, shown, capsys, tmp_path):
    code, err = _cli(["--url", DEAD, "--api", "openai-completions", *SHIPPED, *argv, "--run-dir", str(tmp_path / "r")],
                     capsys)
    assert code == EXIT_USAGE, err
    assert shown in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_stop_flags_without_url_are_refused(capsys):
    code, err = _cli(["--decoder", "reference", *SHIPPED, "--stop-token-ids", "5"], capsys)
    assert code == EXIT_USAGE and "--stop-token-ids='5' is invalid; allowed: with --url BASE_URL" in err


@pytest.mark.parametrize("api, argv, shown", [
    ("llama-server", ["--presence-penalty", "0.5"], "--presence-penalty=0.5 is invalid; allowed: unset with --api "
                                                    "llama-server (its penalties sampler counts the last repeat_last_n "
                                                    "tokens of prompt + output"),
    ("llama-server", ["--frequency-penalty", "0.5"], "--frequency-penalty=0.5 is invalid; allowed: unset with --api "
                                                     "llama-server"),
    ("openai-completions", ["--min-p", "0.1", "--top-p", "0.9"], "--min-p=0.1 is invalid; allowed: unset with --top-p "
                                                                 "on --api openai-completions (vLLM applies min-p "
                                                                 "before top-p"),
    ("mlx-lm", ["--min-p", "0.1"], "--min-p=0.1 is invalid; allowed: unset with --api mlx-lm (it applies min-p to the "
                                   "temperature-1 logprobs, before top-k and the temperature"),
    ("mlx-lm", ["--presence-penalty", "0.5"], "--presence-penalty=0.5 is invalid; allowed: unset with --api mlx-lm "
                                              "(its presence window is the last presence_context_size"),
    ("mlx-lm", ["--stop-token-ids", "5"], "is invalid; allowed: unset with --api mlx-lm (its stop words are text "
                                          "re-encoded to token sequences"),
    ("llama-server", ["--stop-token-ids", "83"], "--stop-token-ids=[83] is invalid; allowed: a set closed under "
                                                 "containment for llama-server's stop strings ['s']"),
    ("llama-server", ["--stop-token-ids", STOP_S, "--logprobs", "5"], "--logprobs=5 is invalid; allowed: unset with a "
                                                                      "stop rule on --api llama-server"),
    ("llama-server", ["--stop-token-ids", "999"], "--stop-token-ids='999' is invalid; allowed: token ids in 0..383"),
])
def test_each_dialect_refuses_what_its_server_does_not_apply_as_audited(api, argv, shown, capsys, tmp_path):
    """Refused before any request (nothing listens at the URL): exit 2 with the reason from the server's source."""
    code, err = _cli(["--url", DEAD, "--api", api, *SHIPPED, *argv, "--run-dir", str(tmp_path / "r")], capsys)
    assert code == EXIT_USAGE, err
    assert shown in err and "Traceback" not in err


def test_self_reported_design_refuses_context_dependent_penalties(capsys):
    code, err = _cli(["--url", DEAD, "--design", "self-reported", "--logprobs", "5", "--top-k", "5", "--vocab-size",
                      "384", "--prompt-ids", "1,2", "--presence-penalty", "0.5", "--no-progress"], capsys)
    assert code == EXIT_USAGE and "--presence-penalty=0.5 is invalid; allowed: unset with the self-reported" in err


def test_penalised_known_p_audit_plans_with_the_prompt_length(capsys, tmp_path):
    """Presence / frequency penalties count the generated tokens only, so every law the audit plans from needs the
    prompt's length (before: ``prompt_len=None is invalid`` from the plan, exit 2, on vLLM's penalties URL audit).
    The reference decoder at TV 0.2 (n planned, alpha 0.001): PASS."""
    code, err = _cli(["--decoder", "reference", "--target", "tabular:trigram3", "--num-draft-tokens", "2",
                      "--presence-penalty", "0.5", "--frequency-penalty", "0.3", "--repetition-penalty", "1.2",
                      "--target-tv", "0.2", "--run-dir", str(tmp_path / "r"), "--no-progress"], capsys)
    assert code == 0, err


def test_request_bodies_carry_the_new_knobs_only_where_set():
    """Bodies of audits without the new options are unchanged (their journal keys too); with them each dialect
    sends the harness's law: llama-server's chain ends with min_p after top_p, vLLM gets its own fields."""
    llama, openai = get_dialect("llama-server"), get_dialect("openai-completions")
    plain = SamplingConfig(temperature=1.0)
    for d in (llama, openai):
        body = d.request([1, 2], plain, 5, 7)
        assert not {"stop", "stop_token_ids"} & set(body)
    assert llama.request([1, 2], plain, 5, 7)["samplers"] == ["top_k", "temperature", "top_p"]
    b = llama.request([1, 2], SamplingConfig(min_p=0.1), 8, 7, stop=StopRule((83, 262), 6, ("s",)))
    assert b["samplers"] == ["top_k", "temperature", "top_p", "min_p"] and b["min_p"] == 0.1
    assert b["n_predict"] == 6 and b["stop"] == ["s"]
    b = openai.request([1, 2], SamplingConfig(presence_penalty=0.5, frequency_penalty=-0.25, min_p=0.1, top_k=5), 8, 7,
                       stop=StopRule((3, 4), 6))
    assert (b["presence_penalty"], b["frequency_penalty"], b["min_p"], b["top_k"]) == (0.5, -0.25, 0.1, 5)
    assert b["stop_token_ids"] == [3, 4] and b["max_tokens"] == 6 and b["ignore_eos"] is False
    with pytest.raises(SamplingRefusedError, match="--stop-token-ids"):  # llama-server takes strings only
        llama.request([1, 2], plain, 8, 7, stop=StopRule((83,), 6))


def _llama_reply(tokens, stop_type, word=""):
    return {"tokens": tokens, "stop_type": stop_type, "stopping_word": word}


def test_llama_server_replies_that_stopped_at_a_sent_stop_are_samples_others_are_refused():
    d, rule = get_dialect("llama-server"), StopRule((83, 262), 6, ("s",))
    parse = lambda body, stop=rule: d.parse(body, n=1, max_new_tokens=8, eos_token_id=0, what="r", stop=stop)  # noqa: E731
    assert parse(_llama_reply([5, 83], "word", "s"))[0].finish == "stop"
    # a token after the stop token, and a row past max_tokens: kept for the stop-rule cell, never refused
    assert parse(_llama_reply([5, 83, 7], "word", "s"))[0].token_ids == (5, 83, 7)
    assert parse(_llama_reply([5, 6, 7, 8, 9, 10, 11], "limit"))[0].token_ids == (5, 6, 7, 8, 9, 10, 11)
    assert len(parse(_llama_reply(list(range(1, 11)), "limit"))[0].token_ids) == 8  # cut to the row width
    with pytest.raises(ServerReplyError, match="stopped at a stop string/word it was not given"):
        parse(_llama_reply([5, 83], "word", "x"))
    with pytest.raises(ServerReplyError, match="stopped at a stop string/word it was not given"):
        parse(_llama_reply([5, 83], "word", "s"), stop=None)
    with pytest.raises(ServerReplyError, match="none of the stop tokens"):
        parse(_llama_reply([5, 6], "word", "s"))
    with pytest.raises(ServerReplyError, match="without ending at EOS"):
        parse(_llama_reply([5, 6], "limit"))


def test_openai_replies_stop_reason_must_be_a_sent_stop_id():
    d, rule = get_dialect("openai-completions"), StopRule((2,), 4)

    def parse(choice, stop=rule):
        return d.parse({"choices": [dict(choice, index=0)]}, n=1, max_new_tokens=6, eos_token_id=0, what="r",
                       stop=stop)[0]

    assert parse({"token_ids": [1, 2], "finish_reason": "stop", "stop_reason": 2}).finish == "stop"
    assert parse({"token_ids": [1], "finish_reason": "stop", "stop_reason": 2}).token_ids == (1, 2)  # id left out
    assert parse({"token_ids": [1, 2, 1, 1], "finish_reason": "length"}).token_ids == (1, 2, 1, 1)  # kept: cell's job
    assert parse({"token_ids": [1, 1], "finish_reason": "stop", "stop_reason": None}).token_ids == (1, 1, 0)  # EOS
    for reason in (3, "x"):
        with pytest.raises(ServerReplyError, match="stopped at a stop string/word it was not given"):
            parse({"token_ids": [1, 3], "finish_reason": "stop", "stop_reason": reason})
    with pytest.raises(ServerReplyError, match="stopped at a stop string/word it was not given"):
        parse({"token_ids": [1, 2], "finish_reason": "stop", "stop_reason": 2}, stop=None)


def test_server_that_emits_a_token_after_the_stop_token_is_caught_by_the_stop_rule_cell(hostile, tmp_path, capsys):
    """trigram3 (ids 0..2, no EOS), stop token 2, max_tokens 3 in rows of 5: the hostile server answers every
    request with [1, 2, 1] -- a token after the stop token, within max_tokens, as a block-emitting engine that
    checked its stop rule only per block would.  The dialect keeps the row; the stop-rule cell rejects (BIAS, exit 1)
    naming the row, the position and the stop token."""
    s = hostile(lambda count, body: (200, json.dumps({"choices": [
        {"index": 0, "token_ids": [1, 2, 1], "finish_reason": "length", "stop_reason": None}]})))
    run = tmp_path / "run"
    code, err = _cli(["--url", s.url, "--target", "tabular:trigram3", "--num-draft-tokens", "2", "--stop-token-ids", "2",
                      "--max-tokens", "3", "--max-new-tokens", "5", "--num-samples", "40", "--floor-positions", "0",
                      "--max-retries", "0", "--run-dir", str(run), "--no-progress"], capsys)
    assert code == 1, err
    assert s.bodies[0]["stop_token_ids"] == [2] and s.bodies[0]["max_tokens"] == 3
    cells = {c["test"]: c for c in json.loads((run / "report.json").read_text())["cells"]}
    rule = cells["stop-rule"]
    assert rule["statistic"] == 40 and rule["pvalue"] == 0.0
    assert "token 1 at position 3 after stop token 2 at position 2" in rule["support_violation"]


def test_kinds_matrix_counts_the_repetition_penalty_as_a_penalty():
    from verifier.engines.kinds_matrix import penalised_sampling

    assert penalised_sampling({"repetition_penalty": 1.2}) and penalised_sampling({"min_p": 0.1})
    assert not penalised_sampling({"repetition_penalty": 1.0}) and not penalised_sampling({"temperature": 1.0})
    assert not penalised_sampling(None)  # a set without a sampling record
