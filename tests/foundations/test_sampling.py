"""SamplingConfig validation and the processed-probs conventions documented in verifier.sampling."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verifier import InvalidArgumentError, SamplingConfig, processed_probs

LOG_P = torch.log(torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.0}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ],
)
def test_invalid_config_names_argument(kwargs, name):
    with pytest.raises(InvalidArgumentError, match=rf"{name}=.* is invalid; allowed: "):
        SamplingConfig(**kwargs)


def test_config_is_frozen_and_labelled():
    cfg = SamplingConfig(temperature=0.7, top_k=5, top_p=0.9)
    with pytest.raises(AttributeError):
        cfg.temperature = 1.0  # type: ignore[misc]
    assert cfg.label() == "T=0.7,top_k=5,top_p=0.9"
    assert SamplingConfig(**cfg.to_dict()) == cfg


def test_default_is_plain_softmax_in_float64():
    probs = processed_probs(LOG_P.float(), SamplingConfig())
    assert probs.dtype == torch.float64
    np.testing.assert_allclose(probs.numpy(), [0.5, 0.3, 0.2], rtol=1e-6)


def test_greedy_is_one_hot_lowest_id_on_ties():
    probs = processed_probs(torch.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]]), SamplingConfig(temperature=0))
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def test_temperature_matches_closed_form():
    probs = processed_probs(LOG_P, SamplingConfig(temperature=0.5))
    expected = np.array([0.5, 0.3, 0.2]) ** 2 / np.sum(np.array([0.5, 0.3, 0.2]) ** 2)
    np.testing.assert_allclose(probs.numpy(), expected, rtol=1e-12)


def test_top_k_keeps_ties_at_the_boundary():
    probs = processed_probs(torch.tensor([2.0, 1.0, 1.0, 0.0], dtype=torch.float64), SamplingConfig(top_k=2))
    assert (probs > 0).tolist() == [True, True, True, False]


@pytest.mark.parametrize("top_p, kept", [(0.5, 1), (0.51, 2), (0.8, 2), (0.81, 3), (1.0, 3)])
def test_top_p_keeps_smallest_prefix_reaching_mass(top_p, kept):
    probs = processed_probs(LOG_P, SamplingConfig(top_p=top_p))
    assert int((probs > 0).sum()) == kept
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_top_p_tie_inclusive():
    logits = torch.log(torch.tensor([0.4, 0.3, 0.3], dtype=torch.float64))
    probs = processed_probs(logits, SamplingConfig(top_p=0.6))
    assert (probs > 0).tolist() == [True, True, True]


def test_repetition_penalty_follows_hf_rule():
    logits = torch.tensor([[1.0, 2.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[True, False, True]])
    probs = processed_probs(logits, SamplingConfig(repetition_penalty=2.0), mask)
    expected = torch.softmax(torch.tensor([0.5, 2.0, -2.0], dtype=torch.float64), -1)
    torch.testing.assert_close(probs[0], expected)
    with pytest.raises(InvalidArgumentError, match="context_token_mask"):
        processed_probs(logits, SamplingConfig(repetition_penalty=2.0))


@pytest.mark.parametrize(
    "logits", [torch.tensor([math.nan, 0.0]), torch.tensor([math.inf, 0.0]), torch.tensor([-math.inf, -math.inf]), torch.zeros(0)]
)
def test_bad_logits_rejected(logits):
    with pytest.raises(InvalidArgumentError, match="logits"):
        processed_probs(logits, SamplingConfig())


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    logits=st.lists(st.floats(-20, 20), min_size=1, max_size=12),
    temperature=st.sampled_from([0.3, 0.7, 1.0, 1.7]),
    top_k=st.one_of(st.none(), st.integers(1, 14)),
    top_p=st.one_of(st.none(), st.floats(0.05, 1.0)),
)
def test_processed_probs_is_a_distribution_supported_on_the_top(logits, temperature, top_k, top_p):
    x = torch.tensor(logits, dtype=torch.float64)
    probs = processed_probs(x, SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p))
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-9)
    assert (probs >= 0).all()
    # support is an upper set of the logit order: a kept token never has a smaller logit than a dropped one
    kept, dropped = x[probs > 0], x[probs == 0]
    if len(dropped):
        assert kept.min() >= dropped.max()
    if top_k is not None:
        assert int((probs > 0).sum()) >= min(top_k, 1)
