"""Checkpointed kernel draws (issue 27): an interrupted or extended kernel audit continues its exact stream.

Real kernels from :mod:`verifier.decoders.kernels` (the canonical ``verify_chain`` and the biased
``full_p_fallback_kernel``); expected laws come from the exact enumerator inside the audit.  The resumed
audit must equal an uninterrupted one with the same seed bit for bit (draws, cells, p-values), so a
stream that drifted on resume -- the generator states stored after the wrong rows -- fails here.
"""

import json

import numpy as np
import pytest
import torch

from verifier.audit.kernel_audit import audit_kernel, draw_kernel_samples, standard_kernel_cases
from verifier.audit.kernel_checkpoint import KernelCheckpoint
from verifier.cli import main
from verifier.decoders.kernels import full_p_fallback_kernel, verify_chain
from verifier.errors import EXIT_BIAS, EXIT_OK, EXIT_UNDERPOWERED, EXIT_USAGE

CHAIN = next(c for c in standard_kernel_cases() if c.name == "chain-k4")
SEED3 = next(c for c in standard_kernel_cases() if c.name == "seed-3token")
IDENTITY = {"kernel": "verify_chain", "seed": 7, "num_draws": 0}


def _stored(folder, case):
    return np.concatenate([np.load(p)["emitted"] for p in sorted((folder / "draws" / case).glob("chunk-*.npz"))])


class _InterruptAfter:
    """The real ``verify_chain``, with a Ctrl-C arriving inside its call number ``calls`` (after the draft tokens were drawn)."""

    def __init__(self, calls):
        self.calls = calls

    def __call__(self, target_probs, draft_probs, draft_token_ids, generator):
        self.calls -= 1
        if self.calls < 0:
            torch.rand(8, generator=generator)  # the kernel's generator has moved too: the stored states must be the ones before this batch
            raise KeyboardInterrupt
        return verify_chain(target_probs, draft_probs, draft_token_ids, generator)


def test_an_interrupted_draw_resumes_to_the_uninterrupted_stream(tmp_path):
    straight = draw_kernel_samples(verify_chain, CHAIN, 5000, 7, batch_size=512)
    checkpoint = KernelCheckpoint(tmp_path, IDENTITY)
    with pytest.raises(KeyboardInterrupt):
        draw_kernel_samples(_InterruptAfter(3), CHAIN, 5000, 7, batch_size=512, checkpoint=checkpoint)
    assert len(_stored(tmp_path, CHAIN.name)) == 3 * 512  # the three whole batches drawn before the interruption
    resumed = draw_kernel_samples(verify_chain, CHAIN, 5000, 7, batch_size=512,
                                  checkpoint=KernelCheckpoint(tmp_path, IDENTITY, resume=True))
    assert np.array_equal(resumed, straight)
    assert np.array_equal(_stored(tmp_path, CHAIN.name), straight)  # every row reached disk, none twice


def test_a_ctrl_c_while_the_generator_states_are_read_keeps_rows_and_states_paired(tmp_path, monkeypatch):
    """The window a real SIGINT hit in CI: a batch drawn and counted, the generators' states not yet read.  The
    interruption lands inside ``get_state`` after the third batch; the stored rows must still carry the states after
    them (only whole, consistent batches kept), so the resume equals the straight stream."""
    import verifier.audit.kernel_audit as kernel_audit

    straight = draw_kernel_samples(verify_chain, CHAIN, 5000, 7, batch_size=512)
    calls = {"n": 0}

    class _Generator(torch.Generator):
        def get_state(self):
            calls["n"] += 1
            if calls["n"] == 7:  # 2 reads at the start, 2 per batch: the 7th is the draft state after batch 3
                raise KeyboardInterrupt
            return super().get_state()

    monkeypatch.setattr(kernel_audit.torch, "Generator", _Generator)
    with pytest.raises(KeyboardInterrupt):
        draw_kernel_samples(verify_chain, CHAIN, 5000, 7, batch_size=512, checkpoint=KernelCheckpoint(tmp_path, IDENTITY))
    monkeypatch.undo()
    assert len(_stored(tmp_path, CHAIN.name)) == 2 * 512  # batch 3 has no states yet: it is drawn again
    resumed = draw_kernel_samples(verify_chain, CHAIN, 5000, 7, batch_size=512,
                                  checkpoint=KernelCheckpoint(tmp_path, IDENTITY, resume=True))
    assert np.array_equal(resumed, straight)
    assert np.array_equal(_stored(tmp_path, CHAIN.name), straight)


def test_a_partial_last_batch_is_redrawn_when_more_draws_are_asked(tmp_path):
    """1300 draws end in a partial batch (1300 = 2 x 512 + 276); growing to 3000 redraws it in full."""
    checkpoint = KernelCheckpoint(tmp_path, IDENTITY)
    draw_kernel_samples(verify_chain, SEED3, 1300, 7, batch_size=512, checkpoint=checkpoint)
    grown = draw_kernel_samples(verify_chain, SEED3, 3000, 7, batch_size=512, checkpoint=KernelCheckpoint(tmp_path, IDENTITY, resume=True))
    assert np.array_equal(grown, draw_kernel_samples(verify_chain, SEED3, 3000, 7, batch_size=512))


def test_a_resumed_biased_kernel_still_fails_on_all_draws(tmp_path):
    """full-p fallback on seed-3token (exact TV .06 per emitted token; alpha 1e-3, seed 7): 4000 draws stored, 40000 in all."""
    first = KernelCheckpoint(tmp_path, IDENTITY)
    audit_kernel(full_p_fallback_kernel, SEED3, num_draws=4000, seed=7, checkpoint=first)
    r = audit_kernel(full_p_fallback_kernel, SEED3, num_draws=40_000, seed=7, checkpoint=KernelCheckpoint(tmp_path, IDENTITY, resume=True))
    straight = audit_kernel(full_p_fallback_kernel, SEED3, num_draws=40_000, seed=7)
    assert r.verdict == straight.verdict == "BIAS DETECTED"
    assert [c.counts.tolist() for c in r.cells] == [c.counts.tolist() for c in straight.cells]
    assert np.array_equal(r.adjustment.adjusted_pvalues, straight.adjustment.adjusted_pvalues)


def _cells(folder):
    report = json.loads((folder / "report.json").read_text())
    return [(c["case"], c["num_draws"], c["verdict"], [(x["name"], x["observed"], x["pvalue"]) for x in c["cells"]]) for c in report["cases"]]


def test_cli_resume_with_more_draws_equals_a_straight_run(tmp_path, capsys):
    common = ["--kernel", "verifier.decoders.kernels:full_p_fallback_kernel", "--case", "seed-3token", "--case", "chain-k4", "--seed", "5"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert main(["audit", *common, "--num-draws", "30000", "--report-dir", str(straight)]) == EXIT_BIAS
    main(["audit", *common, "--num-draws", "9000", "--report-dir", str(resumed)])
    assert main(["audit", "--resume", str(resumed), "--num-draws", "30000"]) == EXIT_BIAS
    assert _cells(resumed) == _cells(straight)
    for case in ("seed-3token", "chain-k4"):
        assert np.array_equal(_stored(resumed, case), _stored(straight, case))
    capsys.readouterr()
    # the resumed report's reproduce command is the straight run it equals (never a `--resume DIR` line)
    import shlex
    import sys

    again = tmp_path / "again"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["specverify", "audit", "--resume", str(resumed), "--num-draws", "30000"])
        assert main(sys.argv[1:]) == EXIT_BIAS
    command = json.loads((resumed / "report.json").read_text())["command"]
    assert "--resume" not in command and "--num-draws 30000" in command
    argv = shlex.split(command)[1:]
    argv[argv.index("--report-dir") + 1] = str(again)
    assert main(argv) == EXIT_BIAS and _cells(again) == _cells(straight)
    capsys.readouterr()
    # an identity that differs is refused, naming the flag; so is a second audit into the same folder
    assert main(["audit", "--resume", str(resumed), "--seed", "6"]) == EXIT_USAGE
    assert "--seed" in capsys.readouterr().err
    assert main(["audit", "--resume", str(resumed), "--num-draws", "100"]) == EXIT_USAGE
    assert "--num-draws" in capsys.readouterr().err
    assert main(["audit", *common, "--num-draws", "100", "--report-dir", str(resumed)]) == EXIT_USAGE
    assert "--resume" in capsys.readouterr().err


def test_a_changed_case_is_refused_on_resume(tmp_path, capsys):
    KernelCheckpoint(tmp_path, {**IDENTITY, "cases": [{"name": "chain-k4", "sha256": "0" * 64}]})
    with pytest.raises(Exception) as err:
        KernelCheckpoint(tmp_path, {**IDENTITY, "cases": [{"name": "chain-k4", "sha256": "1" * 64}]}, resume=True)
    assert "cases" in str(err.value) and err.value.exit_code == EXIT_USAGE


def test_kernel_shards_merge_into_one_report_on_the_summed_draws(tmp_path, capsys):
    """Two shards of 6000 draws of full-p fallback on seed-3token (TV .06, alpha 1e-3, seed 5): the merged cells count
    12000 draws, equal to judging the two shards' draws (each with its spawned seed) as one sample; a shard given twice,
    a missing shard and a shard of another seed are refused (exit 2)."""
    from verifier.audit.kernel_audit import judge_kernel_draws
    from verifier.audit.kernel_shards import shard_seed

    common = ["audit", "--kernel", "verifier.decoders.kernels:full_p_fallback_kernel", "--case", "seed-3token", "--seed", "5",
              "--num-draws", "6000"]
    a, b, other, out = (tmp_path / n for n in ("s0", "s1", "other", "merged"))
    main([*common, "--shard", "0/2", "--report-dir", str(a)])
    main([*common, "--shard", "1/2", "--report-dir", str(b)])
    assert main(["merge", str(a), str(b), "--out", str(out)]) == EXIT_BIAS
    merged = json.loads((out / "report.json").read_text())
    assert merged["cases"][0]["num_draws"] == 12_000 and [s["shard"] for s in merged["shards"]] == ["0/2", "1/2"]
    parts = [draw_kernel_samples(full_p_fallback_kernel, SEED3, 6000, shard_seed(5, i)) for i in (0, 1)]
    expected = judge_kernel_draws(np.concatenate(parts), SEED3, label="x", seed=5)
    got = [(c["n"], c["pvalue"], np.rint(np.array(c["observed"]) * c["n"]).tolist()) for c in merged["cases"][0]["cells"]]
    assert got == [(c.result.n, c.result.pvalue, c.counts.tolist()) for c in expected.cells]
    capsys.readouterr()
    assert main(["merge", str(a), str(a), "--out", str(out)]) == EXIT_USAGE  # the same folder twice
    main([*common[:-2], "--num-draws", "100", "--shard", "0/2", "--report-dir", str(other)])
    assert main(["merge", str(a), str(other), "--out", str(out)]) == EXIT_USAGE  # shard 0/2 twice
    assert "shard 0/2" in capsys.readouterr().err
    assert main(["merge", str(a), "--out", str(out)]) == EXIT_USAGE  # shard 1/2 missing
    assert "1/2" in capsys.readouterr().err
    seed6 = tmp_path / "seed6"
    main([*common[:-4], "--seed", "6", "--num-draws", "100", "--shard", "1/2", "--report-dir", str(seed6)])
    assert main(["merge", str(a), str(seed6), "--out", str(out)]) == EXIT_USAGE  # another audit's shard
    assert "seed" in capsys.readouterr().err


@pytest.mark.full  # 163 s wall at load 4 on 2 cores: a real process stopped by SIGINT (Ctrl-C) while it draws, then resumed
def test_a_process_stopped_by_ctrl_c_resumes_to_the_straight_stream(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH", "")) if p)}
    folder = tmp_path / "stopped"
    argv = [sys.executable, "-m", "verifier.cli", "audit", "--kernel", "verifier.decoders.kernels:verify_chain", "--case", "chain-k4",
            "--seed", "11", "--num-draws", "4000000", "--report-dir", str(folder)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (folder / "draws" / "identity.json").is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)  # some batches drawn, the 4M not finished (seconds at <= 1.5M draws/s)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 130, proc.stderr.read()
    stored = len(_stored(folder, "chain-k4"))
    assert 0 < stored < 4_000_000 and stored % 8192 == 0  # whole batches only
    straight = draw_kernel_samples(verify_chain, CHAIN, 4_000_000, 11)  # the uninterrupted stream, drawn in this process
    assert np.array_equal(_stored(folder, "chain-k4"), straight[:stored])
    assert main(["audit", "--resume", str(folder)]) in (EXIT_OK, EXIT_UNDERPOWERED)  # verify_chain is correct: no bias
    assert np.array_equal(_stored(folder, "chain-k4"), straight)
