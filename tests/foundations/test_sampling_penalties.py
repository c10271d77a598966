"""Presence / frequency penalties and min-p in SamplingConfig and processed_probs (issue 29, bug kind 3).

Expected values are closed forms of the documented conventions (vLLM's penalties on generated tokens only,
Hugging Face's min-p after top-p), computed here from the definitions, not read off the code under test.
"""

import math

import numpy as np
import pytest
import torch

from verifier import InvalidArgumentError, SamplingConfig, processed_probs
from verifier.sampling import add_generated, context_codes

LOG_P = torch.log(torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64))


@pytest.mark.parametrize("kwargs, name", [
    ({"presence_penalty": 101.0}, "presence_penalty"),
    ({"presence_penalty": math.inf}, "presence_penalty"),
    ({"frequency_penalty": math.nan}, "frequency_penalty"),
    ({"frequency_penalty": True}, "frequency_penalty"),
    ({"min_p": 1.5}, "min_p"),
    ({"min_p": -0.1}, "min_p"),
    ({"min_p": "0.1"}, "min_p"),
])
def test_invalid_processor_names_argument(kwargs, name):
    with pytest.raises(InvalidArgumentError, match=rf"{name}=.* is invalid; allowed: "):
        SamplingConfig(**kwargs)


def test_old_configs_keep_their_dict_and_new_ones_round_trip():
    # the set key (and so every chunk seed) of a config without the new processors must not change
    assert set(SamplingConfig(top_k=3).to_dict()) == {"temperature", "top_k", "top_p", "repetition_penalty"}
    cfg = SamplingConfig(presence_penalty=0.5, frequency_penalty=-0.25, min_p=0.1)
    assert SamplingConfig(**cfg.to_dict()) == cfg
    assert cfg.label() == "T=1,presence=0.5,frequency=-0.25,min_p=0.1"


def test_presence_and_frequency_count_generated_tokens_only():
    # token 0 twice generated, token 1 only in the prompt, token 2 never seen
    codes = context_codes([1], 1, 3)
    add_generated(codes, torch.tensor([0, 0]), torch.tensor([0, 0]))
    assert codes.tolist() == [[4, 1, 0]]
    cfg = SamplingConfig(presence_penalty=0.7, frequency_penalty=0.2)
    probs = processed_probs(LOG_P, cfg, codes[0])
    w = np.array([0.5 * math.exp(-0.7 - 2 * 0.2), 0.3, 0.2])  # the prompt's token 1 is not penalised
    np.testing.assert_allclose(probs.numpy(), w / w.sum(), rtol=1e-12)


def test_repetition_penalty_with_codes_sees_the_prompt():
    codes = context_codes([1], 1, 3, sampling=None)
    cfg = SamplingConfig(repetition_penalty=2.0, presence_penalty=0.5)
    probs = processed_probs(LOG_P, cfg, codes[0])
    w = np.array([0.5, 0.3 ** 2, 0.2])  # log p < 0 is multiplied by 2 on the prompt token; nothing generated yet
    np.testing.assert_allclose(probs.numpy(), w / w.sum(), rtol=1e-12)


def test_penalty_without_codes_is_refused():
    cfg = SamplingConfig(frequency_penalty=0.5)
    with pytest.raises(InvalidArgumentError, match="context_token_mask"):
        processed_probs(LOG_P, cfg)
    with pytest.raises(InvalidArgumentError, match="integer context codes"):
        processed_probs(LOG_P, cfg, torch.tensor([True, False, False]))


@pytest.mark.parametrize("min_p, kept", [(0.0, 3), (0.39, 3), (0.41, 2), (0.59, 2), (0.61, 1), (1.0, 1)])
def test_min_p_keeps_tokens_at_least_min_p_times_the_top(min_p, kept):
    probs = processed_probs(LOG_P, SamplingConfig(min_p=min_p))
    assert int((probs > 0).sum()) == kept
    p = np.array([0.5, 0.3, 0.2])[:kept]
    np.testing.assert_allclose(probs.numpy()[:kept], p / p.sum(), rtol=1e-12)


def test_min_p_after_temperature_and_after_top_p():
    # T = 0.5 squares the probs: 25/38, 9/38, 4/38; min_p 0.3 keeps 9/25 = 0.36 >= 0.3, drops 4/25 = 0.16
    probs = processed_probs(LOG_P, SamplingConfig(temperature=0.5, min_p=0.3))
    np.testing.assert_allclose(probs.numpy(), [25 / 34, 9 / 34, 0.0], rtol=1e-12)
    # after top-p (Hugging Face's order): p = (.4, .35, .25), top_p .7 keeps {0, 1}; min_p .9 then keeps .35/.4 =
    # .875 < .9 -> only token 0.  min-p first (vLLM) would keep {0} too here, but at min_p .6 HF keeps {0, 1}
    logits = torch.log(torch.tensor([0.4, 0.35, 0.25], dtype=torch.float64))
    assert (processed_probs(logits, SamplingConfig(top_p=0.7, min_p=0.9)) > 0).tolist() == [True, False, False]
    assert (processed_probs(logits, SamplingConfig(top_p=0.7, min_p=0.6)) > 0).tolist() == [True, True, False]
