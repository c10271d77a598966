"""``specverify bench gpu`` (issue 17 part 6): the scale grid + throughput, tested without a GPU.

``--device cpu`` runs the same code path as on CUDA (grid points through ``bench scale``'s
``measure``, the budget, the throughput table) on a tiny grid and tiny models; ``--device cuda``
without CUDA refuses with exit 2 and one line.
"""

from __future__ import annotations

import json

import pytest
import torch

from verifier.bench import gpu
from verifier.cli import main
from verifier.errors import EXIT_USAGE


@pytest.mark.full  # 7 s
def test_cpu_dry_run_runs_the_grid_and_the_throughput_table(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    assert main(["bench", "gpu", "--device", "cpu", "--work-dir", str(tmp_path / "w"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "**Scale grid**" in text and "**Throughput**" in text
    res = json.loads(out.read_text())
    (point,) = res["grid"]
    assert (point["vocab"], point["samples"]) == gpu.DRY_RUN_GRID[0]
    # the reference decoder: never BIAS; n = 200 leaves the TV cells underpowered (exit 4), which is fine for a dry run
    assert (point["exit_code"], point["verdict"]) in ((0, "PASS"), (4, "UNDERPOWERED"))
    assert set(point["stage_seconds"]) >= {"sampling", "statistics"}
    rows = res["throughput"]["rows"]
    assert {(r["decoder"], r["batch"]) for r in rows} == {(d, b) for d in ("plain", "speculative") for b in gpu.DRY_RUN_BATCHES}
    assert all(r["samples_per_s"] > 0 for r in rows)


def test_grid_points_past_the_budget_are_recorded_not_run(tmp_path):
    rows = gpu.scale_grid(((256, 100), (384, 100)), device="cpu", dtype="float32", budget=gpu.MIN_POINT_S - 1,
                          work_dir=tmp_path)
    assert [r.get("not_run") for r in rows] == ["budget", "budget"]
    assert "not run (budget)" in gpu.render_grid(rows)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_cuda_without_cuda_is_exit_2_with_one_line(capsys):
    assert main(["bench", "gpu"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert "no CUDA device" in err and "--device cpu" in err and len(err.splitlines()) == 1
