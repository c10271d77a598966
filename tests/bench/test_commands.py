"""The `specverify bench` commands of issue 7, on tiny settings (figures are not asserted: timing
goals live in the benchmark output, never in unit tests)."""

import json

import numpy as np
import pytest
import torch

from verifier.bench import calibration, detect, gpu, throughput
from verifier.cli import main
from verifier.errors import InvalidArgumentError


def test_detect_command_prints_rows_next_to_the_oracle(capsys):
    code = main(["bench", "detect", "--rule", "greedy_acceptance", "--case", "seed_argmax_agree", "--seeds", "20",
                 "--format", "json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out.split("\n_")[0])
    assert [(r["rule"], r["case"], r["battery"], r["oracle_n"]) for r in rows] == [
        ("greedy_acceptance", "seed_argmax_agree", "default", 16), ("greedy_acceptance", "seed_argmax_agree", "window", 16)]
    assert rows[0]["fixed_median"] is not None and rows[0]["fixed_median"] >= 1


def test_detect_rejects_unknown_names():
    with pytest.raises(InvalidArgumentError, match="rules"):
        detect.detect_rows(["no_such_rule"])
    assert main(["bench", "detect", "--case", "no_such_case", "--seeds", "1"]) == 2


def test_calibration_counts_false_alarms_with_an_interval():
    """A few null runs of suites/ci.toml's reference decoder at a loose alpha: the rate has a
    Clopper-Pearson interval that contains it; at alpha 0.5 some run must raise an alarm (test the
    tester: the counting can see a rejection)."""
    skipped: dict[str, str] = {}
    res = calibration.calibrate("suites/ci.toml", runs=40, alpha=0.5, skipped=skipped)
    by = {r.decoder: r for r in res}
    # the issue-29 controls whose null this bench does not simulate are named with the reason, never half-calibrated
    assert {"reference@penalties", "reference@requests", "reference@stop", "vocab_mapped@vocab"} <= set(skipped)
    assert "prefix" in skipped["reference@penalties"] and "collision" in skipped["reference@requests"]
    assert "reference" in by  # the tabular reference (exact laws); a transformer pass decoder may follow
    for r in res:
        assert r.ci_low <= r.rate <= r.ci_high
        assert r.false_alarms > 0
    # 2 sample sets x (gof@1..3, joint@1..3, surprisal@1..3, pit, accepted): the reference declares acceptance = "canonical"
    assert by["reference"].num_cells == 14
    assert by["fresh_target_match"].num_cells == 12  # no accepted cell: acceptance is no bias finding (issue 12)
    assert "reference" in calibration.render_markdown(res)


def test_throughput_measure_runs_each_decoder(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    for name, hidden in (("t", 32), ("d", 16)):
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=64, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64, eos_token_id=2)
        LlamaForCausalLM(cfg).save_pretrained(tmp_path / name, safe_serialization=True)
    job = dict(target=str(tmp_path / "t"), draft=str(tmp_path / "d"), num_samples=8, max_new_tokens=6,
               num_draft_tokens=2, device="cpu", dtype=None, seed=0)
    for kind in ("plain", "speculative"):
        res = throughput.measure({**job, "decoder": kind, "threads": 1})
        assert res["samples_per_s"] > 0 and res["peak_rss_mib"] > 0 and res["torch_threads"] == 1
    assert 0 <= res["acceptance_rate"] <= 1
    costs = throughput.measure({**job, "decoder": "costs"})
    for key in ("target_1_batchN_s", "target_3_batchN_s", "draft_1_batchN_s", "draft_2_batchN_s",
                "target_1_batch1_s", "target_3_batch1_s", "draft_1_batch1_s", "draft_2_batch1_s"):
        assert costs[key] > 0, key
    med = {"plain": {"samples_per_s": 10.0, "tokens_per_s": 60.0, "num_samples": 8, "peak_rss_mib": 1.0},
           "speculative": {"samples_per_s": 5.0, "tokens_per_s": 30.0, "num_samples": 8, "acceptance_rate": 0.5,
                           "peak_rss_mib": 1.0}}
    arith = throughput._cost_arithmetic(costs, med, threads=1)
    assert arith["emitted_per_round"] == 2.0
    assert arith["bound_speculative_vs_plain"] == pytest.approx(
        2.0 * costs["target_1_batchN_s"] / (costs["target_3_batchN_s"] + costs["draft_2_batchN_s"] + costs["draft_1_batchN_s"]))
    res = {"settings": {**job, "threads": 1, "num_samples": 8, "hf_samples": 0, "repeats": 1}, "median": med,
           "ratios": {"speculative_vs_plain": 0.5}, "costs": arith, "errors": []}
    assert "forward passes alone cap speculative / plain" in throughput.render_markdown(res)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_gpu_refuses_without_cuda(capsys):
    assert main(["bench", "gpu"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_gpu_models_have_the_stated_sizes():
    target_params = sum(np.prod(s) for s in _shapes(gpu.TARGET_CONFIG))
    assert 90e6 < target_params < 110e6


def _shapes(cfg):
    """Parameter shapes of a Llama config without building it (embeddings, layers, head)."""
    h, i, v, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    per_layer = [(h, h)] * 4 + [(h, i)] * 3 + [(h,)] * 2
    return [(v, h)] + per_layer * n + [(h,)] + ([] if cfg.get("tie_word_embeddings") else [(v, h)])


def test_coverage_command_measures_the_effect_interval(capsys):
    """`specverify bench coverage` on a small setting: every row reports coverage with its interval;
    the replaced bootstrap interval is run next to it (seeded; figures in reports/benchmarks.md)."""
    from verifier.bench import coverage

    code = main(["bench", "coverage", "--laws", "zipf-32k", "--sizes", "2000", "--replicates", "30",
                 "--bootstrap-replicates", "5", "--format", "json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["scenario"] for r in rows] == ["null", "mix 0.05", "mix 0.2", "T 0.8"]
    assert all(r["vocab"] == coverage.ZIPF_VOCAB and r["replicates"] == 30 and r["bootstrap_replicates"] == 5 for r in rows)
    assert rows[0]["true_tv"] < 1e-12 and all(r["meets_goal"] for r in rows)
    assert main(["bench", "coverage", "--replicates", "0"]) == 2
