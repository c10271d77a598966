"""Penalty cells (issue 29, bug kind 3): the runner's expected laws and scorer with penalties and min-p, and the suite
``suites/penalties.toml`` end to end.

Quick: the runner's float64 laws (``runner.expected.position_laws`` through ``ReferenceModel.next_probs`` with the
prompt length, ``teacher_forced`` for the PIT) equal the exact enumerator's (``verifier.exact.penalties``) to 1e-12 on
every standard pair, with a prompt of repeated tokens: presence / frequency count the generated tokens only.

Full (the same modules in the quick tests here and tests/decoders/test_penalty_mutants.py): the suite -- trigram3,
prompt (0, 1, 0, 1), PENALTY_SAMPLING, k = 2, rows of k + 2 = 4 tokens, 1,000 rows per set (seed 29), gof@1..4,
joint@1..4, pit, accepted, family-wise alpha 1e-3 (gate) -- passes the reference and detects each mutant of the
penalty zoo (exact TVs 0.26 / 0.41 / 0.27 on the 4-token law; the joint cell's MDE at n = 1,000 is below 0.2), and the
diagnosis names each one (``verifier.diagnose.penalty``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from verifier.cli import main
from verifier.errors import EXIT_OK, InvalidArgumentError
from verifier.exact import marginal, standard_tabular_pairs
from verifier.exact.penalties import PENALTY_PROMPTS, PENALTY_SAMPLING, HistoryProcessedLM, penalty_target_law
from verifier.runner.expected import position_laws
from verifier.runner.models import ReferenceModel

SUITE = Path(__file__).parent / "suites" / "penalties.toml"
N = 4


def _dense(law, vocab, num_tokens):
    out = np.zeros((vocab + 1) ** num_tokens)
    for seq, prob in law.items():
        code = 0
        for tok in seq:
            code = code * (vocab + 1) + (vocab if tok == -1 else tok)
        out[code] += float(prob)
    return out


@pytest.mark.parametrize("name", sorted(PENALTY_PROMPTS))
def test_runner_laws_match_the_exact_penalised_law(name):
    pair, prompt = standard_tabular_pairs()[name], PENALTY_PROMPTS[name]
    vocab = pair.target.vocab_size
    ref = ReferenceModel(pair.target, vocab, pair.target.eos_token_id)
    laws = position_laws(ref, prompt, PENALTY_SAMPLING, max_position=N, joint_tokens=N)
    exact = penalty_target_law(pair.target, prompt, PENALTY_SAMPLING, N)
    np.testing.assert_allclose(laws.joint, _dense(exact, vocab, N), atol=1e-12)
    for t in range(1, N + 1):
        np.testing.assert_allclose(laws.marginals[t], _dense(marginal(exact, [t - 1]), vocab, 1), atol=1e-12)
    # teacher-forced probs (the PIT's) along every outcome of the law = the exact processed rows of its prefixes
    view = HistoryProcessedLM(pair.target, PENALTY_SAMPLING, len(prompt))
    rows = np.array(sorted(exact), dtype=np.int64)
    probs = np.concatenate([p for _, p in ref.teacher_forced(prompt, rows, PENALTY_SAMPLING)])
    for i, seq in enumerate(rows):
        for t in range(N):
            if seq[t] < 0:
                break
            want = [float(f) for f in view.probs(prompt + tuple(int(x) for x in seq[:t]))]
            np.testing.assert_allclose(probs[i, t], want, atol=1e-12)


def test_next_probs_needs_the_prompt_length_with_generated_counts():
    pair = standard_tabular_pairs()["unigram3"]
    ref = ReferenceModel(pair.target, 3, None)
    with pytest.raises(InvalidArgumentError, match="prompt_len=None"):
        ref.next_probs(np.array([[0, 1]]), PENALTY_SAMPLING)


@pytest.mark.full  # ~15 s: a suite run; the quick tests above and tests/decoders/test_penalty_mutants.py cover its modules
def test_penalty_suite_passes_the_reference_and_detects_the_zoo(tmp_path):
    run_dir = tmp_path / "run"
    code = main(["run", str(SUITE), "--run-dir", str(run_dir), "--no-progress"])
    report = json.loads((run_dir / "report.json").read_text())
    assert code == EXIT_OK, report["summary"]
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    assert verdicts == {"reference": "PASS", "penalty_once_per_round": "BIAS DETECTED",
                        "penalty_ignored_in_verification": "BIAS DETECTED", "min_p_skipped_on_verified": "BIAS DETECTED"}
    tests = {c["test"] for c in report["cells"] if c["decoder"] == "reference"}
    assert {"gof@3", "gof@4", "joint@1..4"} <= tests  # the late positions (>= k + 2) are cells
    joint = [c for c in report["cells"] if c["decoder"] == "reference" and c["test"] == "joint@1..4"][0]
    assert joint["verdict"] == "PASS" and joint["mde"] < 0.2
    diagnosis = {d["decoder"]: d for d in report["diagnosis"]["decoders"]}
    for name in ("penalty_once_per_round", "penalty_ignored_in_verification", "min_p_skipped_on_verified"):
        assert diagnosis[name]["status"] == "penalty mechanism" and diagnosis[name]["penalty"]["named"] == name
        assert diagnosis[name]["sentence"].startswith(f"consistent with {name}")


def test_fast_pit_scorer_leaves_the_new_processors_to_the_float64_path():
    # the float32 PIT scorer implements temperature only; a torch target with a presence/frequency penalty or min-p
    # must be scored by ReferenceModel.teacher_forced (the float64 path above)
    import torch

    from verifier.runner import pitscore
    from verifier.sampling import SamplingConfig

    ref = ReferenceModel(torch.nn.Linear(2, 2), 2, None)
    assert pitscore.fast_pit_applies(ref, SamplingConfig(temperature=0.7))
    for kwargs in ({"presence_penalty": 0.5}, {"frequency_penalty": 0.5}, {"min_p": 0.1}):
        assert not pitscore.fast_pit_applies(ref, SamplingConfig(temperature=0.7, **kwargs)), kwargs


def test_audit_suites_keep_the_new_processors():
    from verifier.audit.suite_builder import _sampling_dict

    assert _sampling_dict(PENALTY_SAMPLING) == {"temperature": 1.0, "repetition_penalty": 1.5, "presence_penalty": 0.5,
                                                "frequency_penalty": 0.5, "min_p": 0.3}
