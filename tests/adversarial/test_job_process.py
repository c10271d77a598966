"""Issue 28 items 1 and 8: the job process stops when told, dies with its dispatcher, and ends
with its verdict.

Real processes and a real plugin (``_plug.py``), no mocks:

* a job started with SIGINT ignored (``specverify run ... &`` from a script: a non-interactive
  shell starts background jobs so) kept sampling after ``kill -INT``; now exit 130 whether the
  SIGINT reaches the whole group or the dispatcher alone, and the job child restores the handler
  by itself too;
* SIGKILL of the dispatcher left the job child sampling; now the child dies with it;
* a plugin's non-daemon thread kept the job alive after the verdict; now the job ends with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.adversarial.test_plugin_exits import REPO, write_suite

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and process groups")


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)


def _ignore_sigint() -> None:  # what a non-interactive shell does to a background job
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start(args: list[str], env: dict[str, str], ignore_sigint: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "verifier.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_ignore_sigint if ignore_sigint else None)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    # the plugin opens the file, then writes: wait for its content, not only the name (an empty read raced it once)
    while not (path.is_file() and path.read_text().strip()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert path.is_file() and path.read_text().strip(), f"{path} never appeared with content (exit {proc.poll()})"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (dead, not yet reaped by its new parent) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@pytest.mark.parametrize("whole_group", [True, False])
def test_ctrl_c_stops_a_job_started_with_sigint_ignored(tmp_path, whole_group):
    """Before the fix: the child inherited SIG_IGN, the job slept on, communicate() timed out."""
    suite = write_suite(tmp_path / "s", options='{ mode = "sleep" }')
    pid_file = tmp_path / "plugin.pid"
    proc = _start(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"],
                  _env(PLUG_PID_FILE=str(pid_file)), ignore_sigint=True)
    try:
        _wait_for(pid_file, proc)  # inside generate()
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


def test_job_child_started_with_sigint_ignored_restores_it(tmp_path):
    """The child alone (as a dispatcher off the main thread starts it, SIG_IGN inherited): SIGINT
    gives verdict 130.  Before the fix it slept on."""
    suite = write_suite(tmp_path / "s", options='{ mode = "sleep" }')
    pid_file, verdict = tmp_path / "plugin.pid", tmp_path / "verdict.json"
    proc = _start(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"],
                  _env(PLUG_PID_FILE=str(pid_file), SPECVERIFY_VERDICT_FILE=str(verdict)), ignore_sigint=True)
    try:
        _wait_for(pid_file, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert json.loads(verdict.read_text())["exit_code"] == 130, err[-2000:]
    assert proc.returncode == 130 and "Traceback" not in err


def test_sigkill_of_the_dispatcher_ends_the_job_child(tmp_path):
    """Before the fix the child went on sampling (and writing the run folder) for 120 s."""
    suite = write_suite(tmp_path / "s", options='{ mode = "sleep" }')
    pid_file = tmp_path / "plugin.pid"
    proc = _start(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"],
                  _env(PLUG_PID_FILE=str(pid_file)))
    try:
        _wait_for(pid_file, proc)
        child = int(pid_file.read_text())
        assert child != proc.pid and _alive(child)
        proc.kill()
        proc.communicate(timeout=30)
        deadline = time.monotonic() + 15
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(child), "the job child outlived its dispatcher"
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if _group_alive(proc.pid) else None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_non_daemon_plugin_thread_does_not_keep_the_job_alive(tmp_path):
    """The plugin leaves a thread sleeping 600 s; the job ends with its verdict (exit 0) at once.
    Before the fix the interpreter waited for the thread and the run hit the timeout."""
    suite = write_suite(tmp_path / "s", options='{ mode = "thread" }')
    proc = _start(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"], _env())
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-2000:]
    assert json.loads((tmp_path / "run" / "report.json").read_text())["decoders"][0]["verdict"] != "ERROR"


@pytest.mark.full  # 13 s; the run-folder lock unit tests stay quick
def test_resume_racing_a_live_job_is_refused(tmp_path):
    """Before the fix the resume started sampling the same folder (here: it hung in the sleeping
    decoder until the timeout) and report / merge wrote reports into it; now each is refused at
    once, exit 2, naming the folder and the pid."""
    from tests.adversarial.test_plugin_exits import cli

    suite = write_suite(tmp_path / "s", options='{ mode = "sleep" }')
    run_dir, pid_file = tmp_path / "run", tmp_path / "plugin.pid"
    proc = _start(["run", str(suite), "--run-dir", str(run_dir), "--no-progress"], _env(PLUG_PID_FILE=str(pid_file)))
    try:
        _wait_for(pid_file, proc)
        raced = cli("run", "--resume", str(run_dir), timeout=60)
        fresh = cli("run", str(suite), "--run-dir", str(run_dir), timeout=60)
        reported = cli("report", str(run_dir), timeout=60)  # would write reports into the live folder
        merged = cli("merge", str(run_dir), timeout=60)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    for done in (raced, fresh, reported, merged):
        assert done.returncode == 2, done.stderr[-2000:]
        assert "being written by another specverify job" in done.stderr and pid_file.read_text() in done.stderr
        assert "Traceback" not in done.stderr


def test_resume_removes_temporary_shards_a_killed_job_left(tmp_path):
    """A SIGKILL between mkstemp and os.replace leaves samples/<set>/.tmp-*.npz; before the fix no
    resume ever removed it."""
    from verifier.cli import main

    suite = write_suite(tmp_path / "s")
    run_dir = tmp_path / "run"
    assert main(["run", str(suite), "--run-dir", str(run_dir), "--no-progress"]) == 0
    set_dir = next((run_dir / "samples").iterdir())
    stale = [set_dir / ".tmp-k1ll3d.npz", run_dir / ".tmp-report.json"]
    for p in stale:
        p.write_bytes(b"PK\x03\x04 half a shard")
    assert main(["run", "--resume", str(run_dir), "--no-progress"]) == 0  # the lock is free again in-process
    assert not any(p.exists() for p in stale)


@pytest.mark.parametrize("mode", ["sleep", pytest.param("block_alarm", marks=pytest.mark.full)])
def test_call_timeout_stops_a_hanging_decoder_naming_the_call(tmp_path, mode):
    """A generate() that sleeps 120 s hung the run (there was no limit).  With --call-timeout 2: exit 3
    within seconds, the call and the limit named; 'sleep' is interrupted in the call (report written,
    verdict ERROR), 'block_alarm' never returns to Python and the job child's watchdog ends it."""
    from tests.adversarial.test_plugin_exits import cli

    suite = write_suite(tmp_path / "s", options=f'{{ mode = "{mode}" }}', expect="pass")
    run_dir = tmp_path / "run"
    started = time.monotonic()
    done = cli("run", str(suite), "--run-dir", str(run_dir), "--no-progress", "--call-timeout", "2", timeout=90)
    assert done.returncode == 3, done.stderr[-2000:]
    assert time.monotonic() - started < 60
    text = done.stdout + done.stderr
    assert "generate(prompt_ids=[0], num_samples=100, max_new_tokens=2, sampling=T=1, seed=" in text
    assert "did not return within --call-timeout=2 s" in text and "Traceback (most" not in done.stderr
    if mode == "sleep":
        assert json.loads((run_dir / "report.json").read_text())["decoders"][0]["verdict"] == "ERROR"


def test_call_timeout_must_be_positive(tmp_path, capsys):
    from verifier.cli import main

    suite = write_suite(tmp_path / "s")
    for bad in ("0", "-1", "nan", "inf", "1e300"):  # 1e300 overflowed setitimer / the watchdog's Timer
        assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--call-timeout", bad]) == 2
        assert "is invalid; allowed: a number of seconds in (0, 1e+06]" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.full  # 6 s; --call-timeout on `run` stays quick
def test_call_timeout_also_bounds_a_black_box_audit(tmp_path):
    """Black-box audits call the plugin through PluginDecoder, not the runner: the same limit applies
    (before, a sleeping decoder made the audit wait the full sleep)."""
    from tests.adversarial.test_plugin_exits import PLUG, cli

    (tmp_path / "plug.py").write_text(PLUG.read_text())
    started = time.monotonic()
    done = cli("audit", "--decoder", f"{tmp_path / 'plug.py'}:make", "--option", "mode=sleep", "--blackbox",
               "--target", "tabular:bigram4_eos", "--prompt-ids", "0", "--num-samples", "100", "--max-new-tokens", "2",
               "--call-timeout", "2", timeout=100)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "did not return within --call-timeout=2 s" in done.stderr and time.monotonic() - started < 60
