"""Rows with their own prompts in one call (``generate(..., row_prompts=)``; issue 29, kind 1) and the zoo's
``prompt_length_leak`` (every row started at slot 0's prompt length).

Deterministic: a call whose rows share one prompt is the plain call, token for token; on the shipped transformers pair
(Llama, V = 384) a greedy call whose 4 rows continue 4 prompts of 9, 1, 3 and 7 tokens -- one left-padded batch with an
attention mask and per-row position ids -- emits each prompt's own greedy continuation (HF ``generate`` on that
prompt alone), so padding, masks and positions are right; ``prompt_length_leak`` does not.

Statistical (seed 5, chi-square at alpha 1e-3 on the joint law of tokens 1..2, expected values from the exact
enumerator ``verifier.exact.target_law``): in one call of 1,200 rows alternating a filler prompt (even slots) and the
audited prompt (odd slots), with prompt lengths 2 and 1 (bigram4_eos) or 3 and 2 (trigram3), the reference and
ancestral decoders' odd rows fit the law after the audited prompt and their even rows the law after the filler's;
``prompt_length_leak``'s odd rows reject it and fit the law after the leaked prompt (the audited prompt padded or cut
to slot 0's length, :func:`verifier.exact.leaked_prompt`).  n = 600 rows per side sees a joint TV of
0.12 at power 0.99 (the assertion prints it); the leaked laws are TV >= 0.3 away on both pairs (asserted).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verifier.decoders import AncestralDecoder, make_decoder
from verifier.exact import leaked_prompt
from verifier.errors import InvalidArgumentError
from verifier.exact import standard_tabular_pairs, target_law, total_variation
from verifier.models import TabularCausalLM, load_model, load_tokenizer
from verifier.sampling import GREEDY, SamplingConfig
from verifier.stats import gof_test, min_detectable_effect

T1 = SamplingConfig(temperature=1.0)
K, WIDTH, J = 2, 3, 2
CASES = {"bigram4_eos": ((1,), (2, 0)), "trigram3": ((0, 1), (2, 1, 0))}  # pair -> (audited prompt, filler prompt)


def _decoders(case: str):
    pair = standard_tabular_pairs()[case]
    target, draft = TabularCausalLM(pair.target), TabularCausalLM(pair.draft)
    return pair, {"reference": make_decoder("reference", target, draft, K), "ancestral": AncestralDecoder(target),
                  "prompt_length_leak": make_decoder("prompt_length_leak", target, draft, K)}


def _joint(law, outcomes) -> np.ndarray:
    return np.array([float(law.get(x, 0)) for x in outcomes])


def _counts(rows: np.ndarray, outcomes) -> np.ndarray:
    index = {x: i for i, x in enumerate(outcomes)}
    return np.bincount([index[tuple(int(t) for t in r[:J])] for r in rows], minlength=len(outcomes))


def test_rows_sharing_one_prompt_are_the_plain_call():
    _, decs = _decoders("bigram4_eos")
    for dec in decs.values():
        for rows in (1, 6):
            assert np.array_equal(dec.generate([2, 0], rows, WIDTH, T1, 4),
                                  dec.generate([1], rows, WIDTH, T1, 4, row_prompts=[[2, 0]] * rows)), type(dec)


@pytest.mark.parametrize("case", list(CASES))
def test_each_row_follows_its_own_prompt_and_the_leak_follows_slot_0s_length(case):
    pair, decs = _decoders(case)
    audited, filler = CASES[case]
    own, other = target_law(pair.target, audited, J), target_law(pair.target, filler, J)
    leaked = target_law(pair.target, leaked_prompt(audited, len(filler)), J)
    outcomes = sorted(set(own) | set(other) | set(leaked))
    assert float(total_variation(own, leaked)) >= 0.3  # the effect the leak test needs (exact)
    mde = min_detectable_effect(600, _joint(own, outcomes), alpha=1e-3, power=0.99)
    for name, dec in decs.items():
        rows = dec.generate(list(audited), 1200, WIDTH, T1, 5, row_prompts=[filler, audited] * 600)
        odd, even = _counts(rows[1::2], outcomes), _counts(rows[0::2], outcomes)
        assert gof_test(even, _joint(other, outcomes), alpha=1e-3).pvalue > 1e-3, name
        if name == "prompt_length_leak":
            assert gof_test(odd, _joint(own, outcomes), alpha=1e-3).pvalue < 1e-3, mde
            assert gof_test(odd, _joint(leaked, outcomes), alpha=1e-3).pvalue > 1e-3
        else:
            assert gof_test(odd, _joint(own, outcomes), alpha=1e-3).pvalue > 1e-3, (name, mde)


def test_a_padded_greedy_call_on_the_shipped_models_is_each_prompts_own_greedy():
    torch.manual_seed(0)
    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    tok = load_tokenizer("shipped:target")
    prompts = [tok(t, add_special_tokens=False)["input_ids"]
               for t in ("def __init__(self", "x", "def f", "import os\n")]
    assert len({len(p) for p in prompts}) == 4
    n_new = 12
    alone = np.array([target.generate(torch.tensor([p]), max_new_tokens=n_new, do_sample=False, eos_token_id=None,
                                      pad_token_id=0)[0, len(p):].tolist() for p in prompts])
    for dec in (make_decoder("reference", target, draft, 3, eos_token_id=None), AncestralDecoder(target, eos_token_id=None)):
        assert np.array_equal(dec.generate(prompts[0], 4, n_new, GREEDY, 0, row_prompts=prompts), alone), type(dec)
    leak = make_decoder("prompt_length_leak", target, draft, 3, eos_token_id=None)
    out = leak.generate(prompts[0], 4, n_new, GREEDY, 0, row_prompts=prompts)
    assert np.array_equal(out[0], alone[0]) and not np.array_equal(out[1:], alone[1:])


@pytest.mark.parametrize("bad, where", [([[1]], "row_prompts"), ([[1], []], r"row_prompts\[1\]"),
                                         ([[1], [9]], r"row_prompts\[1\].*0\.\.3"), ([[True], [1]], r"row_prompts\[0\]"),
                                         ("ab", "row_prompts"), ([[1], 2], r"row_prompts\[1\]")])
def test_bad_row_prompts_name_the_argument(bad, where):
    _, decs = _decoders("bigram4_eos")
    for dec in decs.values():
        with pytest.raises(InvalidArgumentError, match=where):
            dec.generate([1], 2, WIDTH, T1, 0, row_prompts=bad)
