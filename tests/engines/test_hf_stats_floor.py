"""Engine statistics and the numeric floor (issue 14).

* The HF round recorder used to wrap ``AssistedCandidateGenerator.update_candidate_strategy`` only, so prompt lookup,
  universal assisted generation and the Gemma4 assistant reported 0 rounds where rounds ran (silently).  Now every
  candidate generator's target passes are recorded: one per target forward pass.  (Failed before: 0 rounds.)
* ``first_round_accepted = -1`` (no speculative round in that row) was invalid output (exit 3); now allowed and left
  out of the acceptance figures, stated; a decoder reporting no statistics gets "ENGINE REPORTS NO STATISTICS".
* The floor: the HF decoder's own target logits vs the reference are ~0; a perturbed target law above the target TV
  turns a PASS into UNDERPOWERED.
"""

import numpy as np
import pytest
import torch

from verifier.runner.acceptance import NO_ROUND, acceptance_audit
from verifier.validation import check_decoder_stats

PROMPT_TEXT = "def foo(x):\n    return foo(x)\ndef "


def test_recorder_counts_prompt_lookup_rounds():
    from verifier.engines import hf_assisted
    from verifier.models import load_model, load_tokenizer

    rounds = hf_assisted._install_round_recorder()
    rounds.clear()
    target = load_model("shipped:target")
    passes = []
    handle = target.register_forward_hook(lambda *_: passes.append(1))
    ids = torch.tensor([load_tokenizer("shipped:target")(PROMPT_TEXT, add_special_tokens=False)["input_ids"]])
    torch.manual_seed(0)
    with torch.inference_mode():
        for _ in range(5):
            target.generate(ids, attention_mask=torch.ones_like(ids), prompt_lookup_num_tokens=3, do_sample=True,
                            max_new_tokens=12, min_new_tokens=12, top_k=0, eos_token_id=None)
    handle.remove()
    assert len(passes) > 5 and len(rounds) == len(passes), (len(rounds), len(passes))
    assert any(d > 0 for d, _a in rounds)  # the prompt repeats "foo(x)": lookups match


def test_decoder_stats_for_prompt_lookup_are_reported():
    from verifier.engines.hf_assisted import HFAssistedDecoder
    from verifier.models import load_tokenizer
    from verifier.sampling import SamplingConfig

    dec = HFAssistedDecoder("shipped:target", None, 3, num_workers=0, mode="prompt_lookup")
    assert dec.draft_known is False
    prompt = load_tokenizer("shipped:target")(PROMPT_TEXT, add_special_tokens=False)["input_ids"]
    dec.generate(prompt, 20, 8, SamplingConfig(), seed=1)
    s = dec.last_stats
    assert s.rounds > 0 and s.extra["target_passes"] >= s.rounds and s.extra["drafted"] >= s.rounds
    assert s.first_round_accepted.shape == (20,) and ((s.first_round_accepted >= NO_ROUND) & (s.first_round_accepted <= 3)).all()
    fra, _ = check_decoder_stats(s.first_round_accepted, s.accepted_counts, num_draft_tokens=3, num_samples=20)
    assert fra is not None


def test_no_round_rows_are_stated_not_zeros():
    fra, _ = check_decoder_stats([NO_ROUND, 2, 1], [2, 1], num_draft_tokens=2)
    a = acceptance_audit("s", "s", "d", 2, fra, np.array([2, 1]), np.array([0.2, 0.3, 0.5]))
    assert a.rows_without_round == 1 and a.rounds == 2 and a.mean_accepted == 1.5 and "1 of 3 rows ran no speculative round" in a.note
    none = acceptance_audit("s", "s", "d", 2, np.array([NO_ROUND] * 4), np.zeros(0, np.int64), np.array([0.2, 0.3, 0.5]))
    assert not none.reported and none.note.startswith("ENGINE REPORTS NO STATISTICS") and none.mean_accepted is None
    missing = acceptance_audit("s", "s", "d", 2, None, np.array([1, 2]), None)
    assert missing.note.startswith("ENGINE REPORTS NO STATISTICS") and "2 rounds" in missing.note


def _report(verdict="PASS"):
    return {"verdict": verdict, "exit_code": 0 if verdict == "PASS" else 1, "summary": "",
            "decoders": [{"decoder": "d", "verdict": verdict, "expectation_met": verdict == "PASS", "reason": "r"}]}


def test_floor_of_the_hf_decoder_is_zero_and_a_moved_law_blocks_pass():
    from verifier.engines.hf_assisted import HFAssistedDecoder
    from verifier.engines.floor import apply_floor, measure_floor
    from verifier.runner.models import load_pair
    from verifier.sampling import SamplingConfig
    from verifier.suite.schema import ModelPair

    pair = load_pair(ModelPair("a", "shipped:target", "unknown"))
    dec = HFAssistedDecoder("shipped:target", "shipped:draft", 2, num_workers=0)
    samplings = [SamplingConfig(), SamplingConfig(temperature=0.7, top_k=50, top_p=0.9)]
    floor = measure_floor(dec.target_logits, pair.reference, [(272, 70), (5,)], samplings, source="hf")
    assert len(floor["rows"]) == 4 and floor["max_tv"] < 1e-5
    report = _report()
    assert apply_floor(report, floor, 0.03) == 0 and report["decoders"][0]["verdict"] == "PASS"
    assert "numeric floor TV" in report["decoders"][0]["reason"]

    def moved(ids):  # a target law a few percent off: what an engine's own kernels/dtype could give
        logits = dec.target_logits(ids).copy()
        logits[np.argsort(logits)[-2:]] += [0.3, -0.3]
        return logits

    floor = measure_floor(moved, pair.reference, [(272, 70)], samplings[:1], source="moved")
    assert floor["max_tv"] > 0.03
    report = _report()
    assert apply_floor(report, floor, 0.03) == 4
    assert report["verdict"] == "UNDERPOWERED" and report["decoders"][0]["verdict"] == "UNDERPOWERED"
    assert report["numeric_floor"]["above_target"]
    biased = _report("BIAS DETECTED")
    apply_floor(biased, floor, 0.03)
    assert biased["decoders"][0]["verdict"] == "BIAS DETECTED"  # a bias stands, the floor stated beside it
