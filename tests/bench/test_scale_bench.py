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

    from verifier.runner.chunking import default_chunk_size

    plan, = plan_sample_sets(suite, {("llama", "p"): (1, 2, 3)}, {"llama": 256_000})
    # the runner's default, which shrinks only when a quarter of the memory available now is under 1 GiB (another
    # job on the machine): compare with it, and with its value on a machine with 16 GiB free
    assert plan.chunk_size == default_chunk_size(256_000, 2)
    assert default_chunk_size(256_000, 2, available=16 * 2**30) == 131  # 1 GiB // ((2k + 4) x V x 4 B)
    assert set(d.tests) >= {"gof", "joint", "surprisal", "pit"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_bench_scale_on_cuda_without_cuda_is_exit_2(capsys):
    assert main(["bench", "scale", "--device", "cuda", "--quick"]) == EXIT_USAGE
    assert "CUDA is not available" in capsys.readouterr().err


def test_memory_plan_of_the_goal_point_grows_as_n_times_t_not_n_times_v():
    """Issue 17 part 5: V = 256k, n = 100k must fit < 4 GB; only O(n x T) arrays grow with n, and the
    batch budgets are bytes of the memory available (a smaller machine gets smaller batches)."""
    from verifier.bench.scale import memory_plan

    small, goal = memory_plan(256_000, 2_000, available=16 * 2**30), memory_plan(256_000, 100_000, available=16 * 2**30)
    assert {k: v for k, v in small.items() if k not in ("per_sample", "largest")} == \
        {k: v for k, v in goal.items() if k not in ("per_sample", "largest")}
    assert goal["per_sample"] == 50 * small["per_sample"] < 16 * 2**20  # tokens, u's, counts: ~10 MB at n = 100k
    assert goal["largest"] < 1.2 * 2**30  # plus the models and the interpreter (~0.5 GB): inside 4 GB
    tight = memory_plan(256_000, 100_000, available=2 * 2**30)
    assert tight["sampler_chunk"] < goal["sampler_chunk"] and tight["pit_batch"] < goal["pit_batch"]
    assert tight["models_batch"] < goal["models_batch"]


def test_default_timeout_leaves_room_for_the_100k_point():
    from verifier.bench.scale import default_timeout

    assert default_timeout(2_000) == 1000 and default_timeout(100_000) == 5900


@pytest.mark.parametrize("threads", ["0", "-2"])
def test_bench_scale_refuses_a_thread_count_below_one(capsys, threads):
    assert main(["bench", "scale", "--quick", "--threads", threads]) == EXIT_USAGE
    assert f"--threads={threads}" in capsys.readouterr().err


@pytest.mark.parametrize("argv, named", [
    (["--vocab", "0"], "--vocab=0"),
    (["--vocab", "384", "-5"], "--vocab=-5"),
    (["--samples", "0"], "--samples=0"),
    (["--timeout", "nan"], "--timeout=nan"),
    (["--timeout", "-3"], "--timeout=-3.0"),
    (["--dtype", "banana"], "--dtype='banana'"),
    (["--device", "banana"], "--device='banana'"),
    (["--out", "/nonexistent-folder/scale.json"], "--out='/nonexistent-folder/scale.json'"),
])
def test_bench_scale_refuses_bad_arguments_before_building_anything(argv, named, tmp_path, capsys):
    """Break-it: each of these ran the whole grid (building checkpoints, minutes per V) and exited 0 with
    every row failing, or ended in a traceback after the grid (an --out in a missing folder lost the rows)."""
    work = tmp_path / "work"
    assert main(["bench", "scale", "--work-dir", str(work), *argv]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert named in err and "allowed" in err and "Traceback" not in err
    assert not work.exists()  # refused before the first checkpoint


def test_bench_scale_refuses_a_work_dir_that_is_a_file(tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("x")
    assert main(["bench", "scale", "--work-dir", str(file), "--vocab", "384", "--samples", "10"]) == EXIT_USAGE
    assert "--work-dir" in capsys.readouterr().err
