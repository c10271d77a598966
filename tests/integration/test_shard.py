"""Sharded sampling: `specverify run --shard I/N` + `specverify merge` give the report of one
unsharded run (timestamps aside), and the torchrun launcher does both with 2 local processes.

The suite (tests/integration/suites/shard.toml) runs the reference speculative decoder (expect
pass) and the full-p-fallback mutant (expect detect) on the bigram4_eos tabular pair, two sampling
configs (listed out of alphabetical order, so a report that loses the suite's order differs), 600
samples per set in 3 chunks of 200, family-wise alpha 1e-3, target MDE 0.25 TV.  These tests compare
runs with each other -- same seeds, same samples -- so they hold whatever the verdicts are; the verdict
assertions only restate what the unsharded run itself reports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verifier.cli import main
from verifier.errors import EXIT_USAGE, ConfigError, InvalidArgumentError
from verifier.pipeline import merge_runs
from verifier.runner.shard import ShardSpec, parse_shard

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "integration" / "suites" / "shard.toml"


def _report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def _stable(report: dict) -> dict:
    """report.json without its volatile section (run id, timestamps, wall times)."""
    return {k: v for k, v in report.items() if k != "run"}


def _chunks(run_dir: Path) -> dict[str, Path]:
    return {f"{p.parent.name}/{p.name}": p for p in sorted((run_dir / "samples").glob("*/chunk-*.npz"))}


def _tokens(path: Path) -> np.ndarray:
    with np.load(path) as z:
        return z["tokens"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One unsharded run and the two shards of --shard I/2 of the same suite."""
    root = tmp_path_factory.mktemp("shard")
    single = root / "single"
    assert main(["run", str(SUITE), "--run-dir", str(single), "--no-progress"]) in (0, 1, 4)
    for i in range(2):
        assert main(["run", str(SUITE), "--shard", f"{i}/2", "--run-dir", str(root / f"shard{i}"), "--no-progress"]) == 0
    return root


def test_parse_shard():
    assert parse_shard("1/4") == ShardSpec(1, 4) and parse_shard(" 0 / 1 ") == ShardSpec(0, 1)
    for bad in ("2/2", "-1/2", "1-of-4", "0/0", "a/b"):
        with pytest.raises(InvalidArgumentError, match=r"--shard=.* is invalid; allowed: I/N"):
            parse_shard(bad)


def test_shards_partition_the_chunks_and_draw_the_same_samples(runs):
    """Seed streams never overlap: shards own disjoint chunks, and together they hold exactly the
    chunks of the unsharded run, token for token."""
    single, s0, s1 = _chunks(runs / "single"), _chunks(runs / "shard0"), _chunks(runs / "shard1")
    assert s0 and s1 and not set(s0) & set(s1)
    assert set(s0) | set(s1) == set(single)
    for name, path in {**s0, **s1}.items():
        assert np.array_equal(_tokens(path), _tokens(single[name])), name
    assert not (runs / "shard0" / "report.json").exists()  # a shard only samples
    marker = json.loads((runs / "shard1" / "shard-1-of-2.json").read_text())
    assert marker["complete"] and sorted(marker["chunks"]) == sorted(s1)


def test_merge_gives_the_unsharded_report(runs, capsys):
    out = runs / "merged"
    code = main(["merge", str(runs / "shard0"), str(runs / "shard1"), "--out", str(out)])
    single = _report(runs / "single")
    assert code == single["exit_code"]
    assert _stable(_report(out)) == _stable(single)
    assert "verdict: " in capsys.readouterr().out
    for name in ("report.html", "report.md", "junit.xml"):
        assert (out / name).is_file()


def test_shards_sharing_one_folder_merge_in_place(runs, tmp_path):
    shared = tmp_path / "shared"
    for i in range(2):
        assert main(["run", str(SUITE), "--shard", f"{i}/2", "--run-dir", str(shared), "--no-progress"]) == 0
    main(["merge", str(shared)])
    assert _stable(_report(shared)) == _stable(_report(runs / "single"))


def test_missing_shard_is_a_usage_error_naming_the_shard(runs, tmp_path, capsys):
    code = main(["merge", str(runs / "shard0"), "--out", str(tmp_path / "m")])
    assert code == EXIT_USAGE
    assert "shards missing or unfinished: --shard 1/2" in capsys.readouterr().err
    assert not (tmp_path / "m" / "report.json").exists()


def test_merging_different_runs_is_refused(runs, tmp_path):
    other = tmp_path / "other-seed"
    assert main(["run", str(SUITE), "--shard", "1/2", "--seed", "6", "--run-dir", str(other), "--no-progress"]) == 0
    with pytest.raises(ConfigError, match="different suite, profile or seed"):
        merge_runs([runs / "shard0", other], tmp_path / "m")


@pytest.mark.full  # 12 s; the in-process shard merge tests stay quick
@pytest.mark.slow
def test_torchrun_two_local_processes_give_the_single_process_report(runs, tmp_path):
    """`torchrun --nproc-per-node=2` (gloo): each rank samples shard RANK/2, rank 0 gathers and merges."""
    run_dir = tmp_path / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "verifier.cli.torchrun", str(SUITE), "--run-dir", str(run_dir), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    single = _report(runs / "single")
    assert proc.returncode == (0 if single["exit_code"] == 0 else 1), proc.stdout + proc.stderr
    assert "(gloo)" in proc.stdout and "[rank 1] shard 1/2" in proc.stdout
    assert sorted(p.name for p in (run_dir / "shards").iterdir()) == ["rank-0-of-2", "rank-1-of-2"]
    assert _stable(_report(run_dir)) == _stable(single)


def test_allow_partial_reports_on_the_samples_present(runs, tmp_path):
    out = tmp_path / "partial"
    main(["merge", str(runs / "shard0"), "--out", str(out), "--allow-partial"])
    report = _report(out)
    on_disk = sum(s["samples_on_disk"] for s in report["sample_sets"])
    assert 0 < on_disk < sum(s["samples"] for s in report["sample_sets"])


def test_conflicting_samples_for_one_chunk_are_refused(runs, tmp_path):
    """Two folders holding different tokens for the same chunk come from different runs."""
    forged = tmp_path / "forged"
    shutil.copytree(runs / "shard0", forged)
    path = sorted((forged / "samples").glob("*/chunk-*.npz"))[0]
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["tokens"] = np.where(arrays["tokens"] >= 0, (arrays["tokens"] + 1) % 3, arrays["tokens"])
    np.savez(path, **arrays)
    with pytest.raises(ConfigError, match="hold different samples for the same chunk"):
        merge_runs([runs / "shard0", forged, runs / "shard1"], tmp_path / "m")


@pytest.mark.full  # ~60-80 s on 2 cores (a local Ray instance starts: ~30 s); covered in the quick tier by the
# --shard/merge tests above (the same run_shard + merge_runs), and its argument checks by test_ray_arguments_are_checked
def test_ray_local_cluster_gives_the_single_process_report_and_resumes(runs, tmp_path):
    """`python -m verifier.cli.raylaunch --shards 2` on the embedded local Ray instance: two Ray tasks sample shards
    0/2 and 1/2, the driver merges them, and report.json equals the unsharded run's; the same command again finds
    both shards complete and samples nothing (no Ray start)."""
    pytest.importorskip("ray")
    run_dir = tmp_path / "ray"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "verifier.cli.raylaunch", str(SUITE), "--shards", "2", "--num-cpus", "2",
           "--run-dir", str(run_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env, cwd=ROOT)
    single = _report(runs / "single")
    assert proc.returncode == single["exit_code"], proc.stdout + proc.stderr
    assert "shard 0/2:" in proc.stdout and "shard 1/2:" in proc.stdout and "with Ray" in proc.stdout
    assert sorted(p.name for p in (run_dir / "shards").iterdir()) == ["rank-0-of-2", "rank-1-of-2"]
    assert _stable(_report(run_dir)) == _stable(single)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env, cwd=ROOT)
    assert again.returncode == single["exit_code"], again.stdout + again.stderr
    assert "2 already complete" in again.stdout and "with Ray" not in again.stdout
    assert _stable(_report(run_dir)) == _stable(single)


def test_ray_launch_into_another_suites_run_dir_is_refused(runs, tmp_path, monkeypatch, capsys):
    """A --run-dir whose shards are complete is merged without sampling; when those shards hold another suite, profile
    or seed the launch exits 2 naming the folder (it merged them and printed their verdict as this suite's, exit 0).
    The same suite given by a relative path resumes (no false refusal).  No Ray start: every shard is complete."""
    pytest.importorskip("ray")
    from verifier.cli.raylaunch import main as ray_main

    run_dir = tmp_path / "ray"
    for i in range(2):
        shutil.copytree(runs / f"shard{i}", run_dir / "shards" / f"rank-{i}-of-2")
    assert ray_main([str(SUITE), "--shards", "2", "--seed", "6", "--run-dir", str(run_dir)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "already holds a run of suite 'shard'" in err and "seed 5" in err and "seed 6" in err, err
    assert not (run_dir / "report.json").exists()
    monkeypatch.chdir(ROOT)
    code = ray_main([str(SUITE.relative_to(ROOT)), "--shards", "2", "--run-dir", str(run_dir)])
    assert code == _report(runs / "single")["exit_code"], capsys.readouterr()
    assert _stable(_report(run_dir)) == _stable(_report(runs / "single"))


@pytest.mark.parametrize("args, word", [(["--shards", "0"], "--shards"), (["--shards", "2", "--num-cpus", "0"], "--num-cpus"),
                                        (["--shards", "2", "--address", "auto", "--num-cpus", "2"], "--num-cpus"),
                                        (["--shards", "2", "--cpus-per-shard", "0"], "--cpus-per-shard"),
                                        (["--shards", "2", "--cpus-per-shard", "inf"], "--cpus-per-shard"),
                                        (["--shards", "2", "--num-cpus", "1", "--cpus-per-shard", "2"], "--cpus-per-shard")])
def test_ray_arguments_are_checked(args, word, tmp_path, capsys):
    """Bad launcher arguments exit 2 naming the argument, before Ray or the suite is touched.  Break-it finding: more
    CPUs per shard than the local instance has (--num-cpus 1 --cpus-per-shard 2) started Ray and waited forever on a
    task that can never be scheduled."""
    from verifier.cli.raylaunch import main as ray_main

    assert ray_main([str(SUITE), "--run-dir", str(tmp_path / "r"), *args]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert word in err and "Traceback" not in err


@pytest.mark.parametrize("env, words", [
    ({}, "without RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT"),
    ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "localhost", "MASTER_PORT": "29555"}, "RANK='x'"),
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "localhost", "MASTER_PORT": "29555"},
     "0 <= RANK < WORLD_SIZE")])
def test_torchrun_launcher_outside_torchrun_or_with_bad_rank_variables_exits_2(env, words, monkeypatch, tmp_path, capsys):
    """Break-it finding: `python -m verifier.cli.torchrun` started without torchrun (or RANK=x, or RANK >= WORLD_SIZE)
    died in int() or init_process_group with a ValueError traceback and exit 1, the code of a BIAS verdict.  Now exit
    2 naming the variables and the torchrun command, before any sampling or rendezvous."""
    from verifier.cli.torchrun import main as torchrun_main

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):  # torchrun's; none inherited
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert torchrun_main([str(SUITE), "--run-dir", str(tmp_path / "t"), "--timeout-s", "5"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert words in err and "torchrun --nproc-per-node" in err and "Traceback" not in err, err
    assert not (tmp_path / "t").exists()


def test_shard_env_reads_the_launchers_rank_variables(monkeypatch, tmp_path, capsys):
    """`--shard env` takes I/N from torchrun's RANK/WORLD_SIZE, a Slurm array's task id/count or srun's
    PROCID/NTASKS (first pair set wins); none set, or a bad pair, exits 2 naming the variables."""
    from verifier.runner.shard import RANK_VARIABLES, shard_from_env

    for index, count in RANK_VARIABLES:
        monkeypatch.delenv(index, raising=False)
        monkeypatch.delenv(count, raising=False)
    assert shard_from_env({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}) == ShardSpec(1, 2)
    assert shard_from_env({"RANK": "0", "WORLD_SIZE": "4", "SLURM_PROCID": "3", "SLURM_NTASKS": "8"}) == ShardSpec(0, 4)
    with pytest.raises(InvalidArgumentError, match="SLURM_ARRAY_TASK_ID"):
        shard_from_env({"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_COUNT": "8"})
    assert main(["run", str(SUITE), "--shard", "env", "--run-dir", str(tmp_path / "none"), "--no-progress"]) == EXIT_USAGE
    assert "RANK/WORLD_SIZE" in capsys.readouterr().err
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    assert main(["run", str(SUITE), "--shard", "env", "--run-dir", str(tmp_path / "s"), "--no-progress"]) == 0
    assert (tmp_path / "s" / "shard-1-of-2.json").is_file()


def test_shard_env_numbers_a_slurm_array_from_its_first_id_and_names_a_half_set_pair():
    """Break-it findings: a Slurm array `--array=1-4` (ids 1..4, SLURM_ARRAY_TASK_MIN=1) ran shards 1..3 and refused
    id 4, so shard 0 never ran; now id k is shard k - MIN, and an array whose ids are not consecutive (a step, a list)
    is refused in every task.  RANK set without WORLD_SIZE said "none is set here"; now it names the half pair."""
    from verifier.runner.shard import shard_from_env

    one_based = {"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "4",
                 "SLURM_ARRAY_TASK_STEP": "1"}
    assert [shard_from_env({**one_based, "SLURM_ARRAY_TASK_ID": str(i)}) for i in range(1, 5)] == [
        ShardSpec(i, 4) for i in range(4)]
    assert shard_from_env({**one_based, "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "3",
                           "SLURM_ARRAY_TASK_ID": "3"}) == ShardSpec(3, 4)
    with pytest.raises(InvalidArgumentError, match="consecutive ids, e.g. --array=0-2 or --array=1-3"):
        shard_from_env({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "0",
                        "SLURM_ARRAY_TASK_MAX": "4", "SLURM_ARRAY_TASK_STEP": "2"})
    with pytest.raises(InvalidArgumentError, match="SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN < SLURM_ARRAY_TASK_COUNT"):
        shard_from_env({**one_based, "SLURM_ARRAY_TASK_ID": "5"})
    with pytest.raises(InvalidArgumentError, match="give --shard 3/N with N the size of the original array"):
        shard_from_env({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "3",
                        "SLURM_ARRAY_TASK_MAX": "3"})  # `sbatch --array=3`: task 3 resubmitted, not the whole suite
    with pytest.raises(InvalidArgumentError, match="RANK='1' is set but WORLD_SIZE is not"):
        shard_from_env({"RANK": "1"})
    with pytest.raises(InvalidArgumentError, match="none is set here"):
        shard_from_env({})


def test_a_shard_of_another_n_into_a_folder_of_shards_is_refused(runs, tmp_path, capsys):
    """Break-it finding: `run --shard 1/3` into a folder holding shard-0-of-2.json sampled and exited 0, and only the
    merge refused the mixed shardings afterwards.  Now exit 2 before sampling, naming the marker and the way out."""
    folder = tmp_path / "shared"
    shutil.copytree(runs / "shard0", folder)
    chunks = sorted(_chunks(folder))
    assert main(["run", str(SUITE), "--shard", "1/3", "--run-dir", str(folder), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--shard='1/3' is invalid" in err and "shard-0-of-2.json" in err and "remove those markers" in err, err
    assert sorted(_chunks(folder)) == chunks and not list(folder.glob("shard-1-of-3.json"))
    assert main(["run", str(SUITE), "--shard", "1/2", "--run-dir", str(folder), "--no-progress"]) == 0  # same N: fine


@pytest.mark.parametrize("content, words", [
    ("[1, 2]", "a JSON list, not an object"), ('{"shard": 0}', "num_shards=None where the file name says 2"),
    ('{"shard": "x", "num_shards": 2, "complete": true}', "shard='x'"),
    ('{"shard": 1, "num_shards": 2, "complete": true}', "shard=1 where the file name says 0"),
    ('{"shard": 0, "num_shards": 2, "complete": true, "stopped": "oops"}', "not a list of stop records"),
    ('{"shard": 0, "num_shards": 2, "complete": true, "stopped": [{"x": 1}]}', "stopped: record 0 has no decoder")])
def test_an_edited_or_damaged_shard_marker_is_named_by_merge(runs, tmp_path, capsys, content, words):
    """Break-it finding: a shard marker that is not an object, lacks num_shards, or holds garbage stop records made
    `specverify merge` die in a KeyError / TypeError traceback with exit 3 ("decoder error").  Now exit 2 naming the
    file, what is wrong and the shard to rerun."""
    shard0 = tmp_path / "shard0"
    shutil.copytree(runs / "shard0", shard0)
    (shard0 / "shard-0-of-2.json").write_text(content)
    assert main(["merge", str(shard0), str(runs / "shard1"), "--out", str(tmp_path / "m")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "shard-0-of-2.json: not a shard marker" in err and words in err and "--shard 0/2" in err, err
    assert "Traceback" not in err and not (tmp_path / "m" / "report.json").exists()


@pytest.mark.parametrize("content, words", [
    ('{"decoder": 1}', "a JSON dict, not a list of stop records"), ("[1]", "record 0 is a JSON int"),
    ('[{"decoder": "reference"}]', "record 0 has no type, message, set"), ("garbage", "unreadable")])
def test_an_edited_stopped_json_is_named_by_report_and_merge(runs, tmp_path, capsys, content, words):
    """Break-it finding: a stopped.json that is not a list of the runner's stop records made `report --recompute`
    (KeyError, or jinja2's UndefinedError for a record without its `set`) and `merge` of an unsharded folder die in a
    traceback with exit 3 ("decoder error").  Now exit 2 naming the file."""
    run = tmp_path / "single"
    shutil.copytree(runs / "single", run)
    (run / "stopped.json").write_text(content)
    assert main(["report", str(run), "--recompute", "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "stopped.json" in err and words in err and "Traceback" not in err, err
    if content != "garbage":
        assert main(["merge", str(run), "--out", str(tmp_path / "m")]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert "stopped.json" in err and words in err and "Traceback" not in err, err
