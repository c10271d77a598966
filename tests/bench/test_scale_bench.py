"""``specverify bench scale`` (issue 17): its suite is valid and it refuses CUDA cleanly where there is none."""

from __future__ import annotations

import pytest
import torch

from verifier.bench.scale import scale_suite
from verifier.cli import main
from verifier.errors import EXIT_USAGE
from verifier.suite.schema import parse_suite


def test_scale_suite_is_a_valid_suite_with_the_default_cells_and_a_chunk_size_adapted_to_the_vocabulary(tmp_path):
    import tomllib

    raw = tomllib.loads(scale_suite(tmp_path / "t", tmp_path / "d", 256_000, 100_000))
    suite = parse_suite(raw, source="scale.toml", base_dir=tmp_path)
    d = suite.decoders[0]
    assert d.samples == 100_000 and list(d.num_draft_tokens) == [2]
    assert not d.chunk_size_set  # the runner's default chunk size (verifier.runner.chunking) is what is measured
    from verifier.runner.plan import plan_sample_sets

    plan, = plan_sample_sets(suite, {("llama", "p"): (1, 2, 3)}, {"llama": 256_000})
    assert plan.chunk_size == 131  # 1 GiB // ((2k + 4) x V x 4 B)
    assert set(d.tests) >= {"gof", "joint", "surprisal", "pit"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_bench_scale_on_cuda_without_cuda_is_exit_2(capsys):
    assert main(["bench", "scale", "--device", "cuda", "--quick"]) == EXIT_USAGE
    assert "CUDA is not available" in capsys.readouterr().err
