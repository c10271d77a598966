"""Issue 12, part 3: plugin code that exits the process must never read as a pass.

Before the fix a plugin raising ``SystemExit`` (at import, in its factory or in ``generate``)
made ``specverify run`` and ``specverify audit`` exit 0 with no verdict and no report, and so did
``os._exit(0)``.  Now any ``BaseException`` from plugin code (Ctrl-C aside) is a decoder error
(exit 3), and the CLI runs ``run``/``audit``/``report``/``merge`` in a child process whose exit
counts only with the verdict file it writes last: a child that ends without it is exit 3.
No statistics here: every verdict is ERROR or a config error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.errors import EXIT_DECODER, EXIT_USAGE, DecoderError

REPO = Path(__file__).resolve().parents[2]
PLUG = Path(__file__).with_name("_plug.py")


def write_suite(folder: Path, decoder: str | None = None, options: str = "{}", extra: str = "",
                expect: str = "detect", tests: str = '["gof", "pit"]') -> Path:
    """A tabular suite (bigram4_eos, 2 x 100 samples) with one plugin decoder; plug.py beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(PLUG, folder / "plug.py")
    decoder = decoder or f"{folder / 'plug.py'}:make"
    path = folder / "suite.toml"
    path.write_text(f"""
schema_version = 1
name = "adv"
seed = 3
[exact]
enabled = false
[models.tab]
target = "tabular:bigram4_eos"
draft = "tabular:bigram4_eos"
[prompts.p]
ids = [0]
[sampling.t1]
temperature = 1.0
[defaults]
max_new_tokens = 2
samples = 200
chunk_size = 100
tests = {tests}
gof_positions = [1]
[[decoders]]
name = "plugin"
decoder = "{decoder}"
expect = "{expect}"
options = {options}
{extra}
[stats]
target_mde = 0.9
""")
    return path


def cli(*args: str, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m verifier.cli ARGS`` in a fresh process (as a CI job runs it)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "verifier.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("mode", ["exit_factory", "exit_generate"])
def test_system_exit_in_plugin_is_a_decoder_error(tmp_path, capsys, mode):
    suite = write_suite(tmp_path / "s", options=f'{{ mode = "{mode}" }}')
    run_dir = tmp_path / "run"
    assert main(["run", str(suite), "--run-dir", str(run_dir), "--no-progress"]) == EXIT_DECODER
    report = json.loads((run_dir / "report.json").read_text())
    assert report["decoders"][0]["verdict"] == "ERROR" and "SystemExit" in json.dumps(report["stopped"])


def test_system_exit_at_plugin_import_is_a_decoder_error(tmp_path):
    (tmp_path / "dies.py").write_text("raise SystemExit(0)\n")
    with pytest.raises(DecoderError, match="SystemExit"):
        from verifier.plugins import load_plugin

        load_plugin(f"{tmp_path / 'dies.py'}:make", "decoder")
    suite = write_suite(tmp_path / "s", decoder=f"{tmp_path / 'dies.py'}:make")
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_DECODER


def test_system_exit_in_kernel_is_a_decoder_error(tmp_path):
    import torch

    from verifier.plugins import PluginKernel

    def kernel(target_probs, draft_probs, draft_token_ids, generator):
        raise SystemExit(0)

    t = torch.full((1, 2, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(DecoderError, match="SystemExit"):
        PluginKernel(kernel)(t, t[:, :1], torch.zeros((1, 1), dtype=torch.int64), torch.Generator())


def test_keyboard_interrupt_from_plugin_is_not_swallowed(tmp_path):
    """Ctrl-C must still stop the run (exit 130 from the dispatcher), not become a decoder error."""
    from verifier.plugins import PluginDecoder

    class Stops:
        vocab_size = 3

        def generate(self, *a):
            raise KeyboardInterrupt

    from verifier.sampling import SamplingConfig

    with pytest.raises(KeyboardInterrupt):
        PluginDecoder(Stops()).generate([0], 2, 2, SamplingConfig(), 0)


def test_audit_with_system_exit_in_generate_is_exit_3(tmp_path):
    shutil.copy(PLUG, tmp_path / "plug.py")
    code = main(["audit", "--decoder", f"{tmp_path / 'plug.py'}:make", "--option", "mode=exit_generate",
                 "--target", "tabular:bigram4_eos", "--prompt-ids", "0", "--num-samples", "100", "--max-new-tokens", "2",
                 "--run-dir", str(tmp_path / "run")])  # never a folder in the checkout's reports/audit
    assert code == EXIT_DECODER


@pytest.mark.parametrize("command", ["run", "audit"])
def test_os_exit_in_plugin_is_never_success(tmp_path, command):
    suite = write_suite(tmp_path / "s", options='{ mode = "os_exit" }')
    if command == "run":
        args = ["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]
    else:
        args = ["audit", "--decoder", f"{tmp_path / 's' / 'plug.py'}:make", "--option", "mode=os_exit",
                "--target", "tabular:bigram4_eos", "--prompt-ids", "0", "--num-samples", "100", "--max-new-tokens", "2",
                "--run-dir", str(tmp_path / "run")]
    done = cli(*args)
    assert done.returncode == EXIT_DECODER, (done.returncode, done.stderr[-2000:])
    assert "without writing its verdict" in done.stderr and "os._exit" in done.stderr


def test_exit_codes_pass_through_the_child_process(tmp_path):
    """0 (every expectation met) and 2 (config error) come back unchanged; --help stays in-process."""
    suite = write_suite(tmp_path / "s")
    ok = cli("run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress")
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = cli("run", str(tmp_path / "missing.toml"), "--run-dir", str(tmp_path / "run2"))
    assert bad.returncode == EXIT_USAGE and "does not exist" in bad.stderr and "Traceback" not in bad.stderr
    helped = cli("run", "--help")
    assert helped.returncode == 0 and "--resume" in helped.stdout
    usage = cli("run", str(suite), "--threads", "many")
    assert usage.returncode == EXIT_USAGE and "invalid int value" in usage.stderr


@pytest.mark.parametrize("whole_group", [True, pytest.param(False, marks=pytest.mark.full)])
def test_ctrl_c_still_stops_the_job(tmp_path, whole_group):
    """Ctrl-C in a terminal signals the whole process group; a CI runner may signal only the parent
    (forwarded to the child).  Either way: exit 130 and the interrupted message, within seconds."""
    import signal
    import time

    suite = write_suite(tmp_path / "s", options='{ mode = "sleep" }')
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "verifier.cli", "run", str(suite), "--run-dir", str(run_dir),
                             "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "run.json").is_file() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        time.sleep(3)  # into generate()
        if whole_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err


def test_pytest_verifier_suite_fixture_survives_os_exit(tmp_path):
    """The pytest plugin ran suites in the pytest process: a decoder calling os._exit(0) ended the
    whole pytest run with status 0 (a green CI).  Now the suite runs in a job process: exit 3."""
    suite = write_suite(tmp_path / "s", options='{ mode = "os_exit" }')
    (tmp_path / "test_gate.py").write_text(
        "def test_gate(verifier_suite):\n"
        f"    outcome = verifier_suite({str(suite)!r})\n"
        "    assert outcome.exit_code == 3, outcome.exit_code\n")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "verifier.pytest_plugin", "-p", "no:cacheprovider",
                           "--verifier-report-dir", str(tmp_path / "out"), str(tmp_path / "test_gate.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
