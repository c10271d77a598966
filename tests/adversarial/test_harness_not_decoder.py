"""Issue 28 item 9: harness crashes blamed on the decoder, and usage errors found only after sampling.

Each input below ended the job child with an uncaught exception or a signal ("exit 3 (decoder
error)" with no report), or was accepted and failed late.  Now each is a clear error with the
right exit code -- 2 usage, 3 decoder misbehaviour -- and never a traceback.  Real plugins
(``_plug.py``) and real processes where a process is what breaks; no mocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.adversarial.test_plugin_exits import PLUG, REPO, write_suite
from verifier.cli import main
from verifier.errors import EXIT_DECODER, EXIT_OK, EXIT_USAGE


def cli_bytes(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """``python -m verifier.cli ARGS`` in a fresh process, output as bytes (it must be valid UTF-8)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "verifier.cli", *args], env=env, capture_output=True, timeout=timeout)


def _run(tmp_path, mode: str, expect: str = "pass") -> tuple[int, dict]:
    suite = write_suite(tmp_path / "s", options=f'{{ mode = "{mode}" }}', expect=expect)
    code = main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"])
    return code, json.loads((tmp_path / "run" / "report.json").read_text())


@pytest.mark.parametrize("mode, prop", [("stats_raises", "last_stats"), ("name_raises", "name")])
def test_plugin_property_that_raises_is_a_decoder_error_naming_it(tmp_path, capsys, mode, prop):
    """Before: RuntimeError out of the runner (decoder_identity / the stats read), no report."""
    code, report = _run(tmp_path, mode)
    assert code == EXIT_DECODER
    d = report["decoders"][0]
    assert d["verdict"] == "ERROR" and f"`{prop}` property raised RuntimeError" in d["reason"], d["reason"]


@pytest.mark.parametrize("mode, prop", [("stats_raises", "last_stats"), ("name_raises", "name")])
def test_audit_plugin_property_that_raises_is_exit_3(tmp_path, capsys, mode, prop):
    (tmp_path / "plug.py").write_text(PLUG.read_text())
    code = main(["audit", "--decoder", f"{tmp_path / 'plug.py'}:make", "--option", f"mode={mode}", "--target",
                 "tabular:bigram4_eos", "--prompt-ids", "0", "--num-samples", "100", "--max-new-tokens", "2",
                 "--report-dir", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == EXIT_DECODER and f"`{prop}` property" in captured.out + captured.err


def test_meta_tensor_from_generate_is_invalid_output(tmp_path, capsys):
    """Before: NotImplementedError ('Cannot copy out of meta tensor') out of check_emitted_tokens."""
    code, report = _run(tmp_path, "meta")
    assert code == EXIT_DECODER
    assert "'meta' device" in report["decoders"][0]["reason"]


def test_lone_surrogate_in_exception_text_is_printed_and_reported(tmp_path):
    """Before: UnicodeEncodeError writing report.md (job ended without a verdict; stdout carried a raw
    0xff byte).  Now exit 3, valid UTF-8 everywhere, the surrogate shown as its escape."""
    suite = write_suite(tmp_path / "s", options='{ mode = "surrogate" }', expect="pass")
    done = cli_bytes("run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress")
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")  # strict: must not raise
    assert done.returncode == EXIT_DECODER, err[-2000:]
    assert "Traceback (most recent" not in err and "without writing its verdict" not in err
    assert "bad \\udcff text" in out and "bad \\udcff text" in (tmp_path / "run" / "report.md").read_text("utf-8")


@pytest.mark.parametrize("mode", ["close_stdout", "close_fd1"])
def test_plugin_that_closes_stdout_does_not_silence_or_crash_the_job(tmp_path, mode):
    """Before: ValueError / OSError (EBADF) printing the next line, no verdict (exit 3).  The uniform
    plugin is a mutant expected to be detected: exit 0 with the verdict line printed."""
    suite = write_suite(tmp_path / "s", options=f'{{ mode = "{mode}" }}')
    done = cli_bytes("run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress")
    assert done.returncode == EXIT_OK, done.stderr.decode()[-2000:]
    assert "verdict: PASS" in done.stdout.decode()


def test_symlink_loops_are_usage_errors(tmp_path, capsys):
    """Before: RuntimeError('Symlink loop') from Path.resolve (model path relative to the suite, and a
    plugin file), a traceback and exit 3."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "l1.py").symlink_to(tmp_path / "l2.py")
    (tmp_path / "l2.py").symlink_to(tmp_path / "l1.py")
    suite = write_suite(tmp_path / "s")
    suite.write_text(suite.read_text().replace('target = "tabular:bigram4_eos"', 'target = "../a"'))
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_USAGE
    assert "cannot be resolved" in capsys.readouterr().err
    code = main(["audit", "--decoder", f"{tmp_path / 'l1.py'}:make", "--target", "tabular:bigram4_eos", "--prompt-ids",
                 "0", "--num-samples", "100", "--max-new-tokens", "2", "--report-dir", str(tmp_path / "out")])
    assert code == EXIT_USAGE and "cannot be resolved" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "folder"])
def test_suite_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    """Before: a FIFO blocked forever, /dev/zero read until memory ran out."""
    path = {"fifo": tmp_path / "fifo.toml", "dev_zero": Path("/dev/zero"), "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    done = cli_bytes("run", str(path), "--run-dir", str(tmp_path / "run"), timeout=60)
    err = done.stderr.decode()
    assert done.returncode == EXIT_USAGE and "not a regular file" in err and "Traceback" not in err


def test_threads_beyond_the_machine_is_a_usage_error(tmp_path):
    """Before: --threads 100000 ended the job in libgomp's out-of-memory abort or a SIGSEGV (exit 3)."""
    suite = write_suite(tmp_path / "s")
    done = cli_bytes("run", str(suite), "--run-dir", str(tmp_path / "run"), "--threads", "100000")
    err = done.stderr.decode()
    assert done.returncode == EXIT_USAGE and "--threads=100000 is invalid; allowed: an integer 1.." in err


def test_meta_device_is_refused(tmp_path, capsys):
    """Before: accepted for tabular models (they ignore the device) and exit 0."""
    suite = write_suite(tmp_path / "s")
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--device", "meta"]) == EXIT_USAGE
    assert "'meta': the meta device holds no data" in capsys.readouterr().err


def test_gof_position_beyond_max_new_tokens_and_denormal_temperature_fail_up_front(tmp_path, capsys):
    """Before: gof_positions = [3] at max_new_tokens = 2 ran with the cell silently missing; temperature
    5e-324 sampled, then failed in the statistics on NaN probs."""
    suite = write_suite(tmp_path / "a")
    suite.write_text(suite.read_text().replace("gof_positions = [1]", "gof_positions = [3]"))
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "r1")]) == EXIT_USAGE
    assert "gof_positions=[3] is invalid; allowed: positions in 1..max_new_tokens=2" in capsys.readouterr().err
    suite = write_suite(tmp_path / "b")
    suite.write_text(suite.read_text().replace("temperature = 1.0", "temperature = 5e-324"))
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "r2")]) == EXIT_USAGE
    assert "temperature=5e-324 is invalid" in capsys.readouterr().err
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()  # refused before any sampling


def _jsonl(path: Path) -> Path:
    import numpy as np

    rng = np.random.default_rng(0)
    with open(path, "w") as fh:
        for t, n in ((1.0, 120), (0.7, 30)):
            for _ in range(n):
                fh.write(json.dumps({"prompt_id": "p0", "prompt_token_ids": [0], "sampling": {"temperature": t},
                                     "emitted_token_ids": rng.integers(0, 3, 3).tolist()}) + "\n")
    return path


@pytest.mark.parametrize("extra, message", [
    (["--max-new-tokens", "2"], "3 emitted tokens > max_new_tokens=2 (--max-new-tokens), and no earlier row fits"),
    (["--max-new-tokens", "5"], "is at most 3 tokens long without EOS, but max_new_tokens=5"),
    (["--temperature", "0.5"], "no rows with sampling T=0.5"),
    (["--prompt-ids", "1"], "--prompt-ids [1] has no rows with sampling T=1"),
])
def test_jsonl_audit_usage_mismatch_is_exit_2(tmp_path, capsys, extra, message):
    """Before: exit 3, 'decoder raised SampleFileError' from inside the replay (or DecoderOutputError)."""
    samples = _jsonl(tmp_path / "s.jsonl")
    code = main(["audit", "--samples", str(samples), "--target", "tabular:bigram4_eos", "--report-dir", str(tmp_path / "o"),
                 *extra])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and message in err, err[-2000:]


@pytest.mark.full  # 29 s; the JSONL import checks of tests/audit stay quick
def test_jsonl_audit_notes_rows_of_another_sampling_config(tmp_path, capsys):
    """Before: the 30 rows at T=0.7 were dropped without a word (and the default 4 tokens asked of
    3-token rows was a decoder error)."""
    samples = _jsonl(tmp_path / "s.jsonl")
    code = main(["audit", "--samples", str(samples), "--target", "tabular:bigram4_eos", "--report-dir", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code in (0, 1, 4)  # a verdict on the T=1 rows, whichever it is
    assert "note: 30 rows of prompt_id='p0' with sampling T=0.7 are not audited" in out
