"""``verifier._beside.Forked``: work in a child forked from the caller, its value or error back through a pipe.

The diagnosis runs the stale-KV Monte Carlo this way beside the ranking (:func:`verifier.diagnose.rank._mc_beside`);
these tests pin what the caller relies on: the value, the child's exception raised in the caller, a child that dies or
is killed never hangs the caller, and buffered output is not written twice.
"""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from verifier._beside import Beside, ChildLost, Forked, beside_process, can_fork

pytestmark = pytest.mark.skipif(not can_fork(), reason="fork is the Linux path")


def _run_code(code: str, timeout: float = 60, env=None) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (a caller of its own: its streams, its threads, its exit)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env)


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # reaped already: no zombie left
    return False


def test_the_value_comes_back_from_the_child():
    big = np.arange(200_000, dtype=np.float64)  # larger than a pipe's buffer: the caller reads while the child writes
    job = Forked(lambda a, b: (a * b, os.getpid()), big, 2.0)
    value, child = job.result()
    assert np.array_equal(value, big * 2.0) and child != os.getpid()
    assert _gone(child)


def test_the_childs_exception_is_raised_in_the_caller():
    def fails():
        raise ValueError("bad rows")
    with pytest.raises(ValueError, match="bad rows"):
        Forked(fails, name="x").result()


def test_an_unpicklable_exception_arrives_as_a_runtime_error_naming_it():
    class Local(Exception):  # a local class cannot be pickled
        pass

    def fails():
        raise Local("not picklable")
    with pytest.raises(RuntimeError, match="mc: Local: not picklable"):
        Forked(fails, name="mc").result()


def test_a_child_that_dies_without_a_value_is_an_error_not_a_hang():
    with pytest.raises(ChildLost, match="ended without a result .*exit code 3"):
        Forked(os._exit, 3, name="dies").result()
    job = Forked(time.sleep, 60, name="killed")
    os.kill(job._pid, 9)  # as the out-of-memory killer would
    with pytest.raises(ChildLost, match="killed by signal 9 .SIGKILL"):
        job.result()


def test_the_childs_traceback_comes_with_its_exception():
    def deep():
        raise ValueError("bad rows")
    with pytest.raises(ValueError) as info:
        Forked(lambda: deep(), name="mc").result()
    notes = "".join(getattr(info.value, "__notes__", []))
    assert "raised in the child process 'mc'" in notes and "in deep" in notes


def test_an_exception_that_cannot_be_read_back_is_named():
    code = ("from verifier._beside import Forked\n"
            "class Weird(Exception):\n"
            "    def __init__(self, a, *, b):\n"
            "        super().__init__(a)\n"
            "def fails():\n"
            "    raise Weird(1, b=2)\n"
            "try:\n"
            "    Forked(fails, name='w').result()\n"
            "except RuntimeError as exc:\n"
            "    print(exc)\n")
    out = _run_code(code)
    assert "w: the child's result could not be read back (TypeError" in out.stdout, out.stdout + out.stderr


def test_cancel_kills_and_reaps_a_long_child():
    job = Forked(time.sleep, 60)
    pid = job._pid
    t0 = time.monotonic()
    job.cancel()
    assert time.monotonic() - t0 < 10 and _gone(pid)
    job.cancel()  # a second cancel is a no-op
    with pytest.raises(RuntimeError, match="cancelled"):
        job.result()


def test_buffered_output_is_written_once():
    """The caller's buffered output is flushed before the fork: a child that flushes its own output (a warning, a
    progress line) must not write the caller's buffer a second time."""
    code = ("import sys; from verifier._beside import Forked\n"
            "print('before', end=' ')\n"  # buffered (stdout is a pipe) when the child forks
            "print(Forked(lambda: print('child', flush=True) or 42).result())\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout block-buffered, as on a pipe
    out = _run_code(code, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    out = out.stdout
    assert out == "before child\n42\n"


def test_beside_process_forks_on_linux():
    job = beside_process(os.getpid)
    assert isinstance(job, Forked) and not isinstance(job, Beside)
    assert job.result() != os.getpid()


def test_a_caller_killed_by_sigterm_leaves_no_child_computing(tmp_path):
    code = ("import os, sys, time; from verifier._beside import Forked\n"
            "job = Forked(time.sleep, 120)\n"
            "print(job._pid, flush=True)\n"
            "time.sleep(120)\n")
    caller = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    child = int(caller.stdout.readline())
    caller.terminate()
    caller.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(child), f"child {child} outlived its caller"


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie waits for its new parent, which a container's init may never be, to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_torch_in_the_child_after_the_caller_ran_it_on_two_threads():
    """The caller's OpenMP team does not survive the fork: without ``_one_thread`` the child's first matrix product
    waits forever for its threads (seen in the diagnosis tests, which run torch on 2 threads)."""
    code = ("import torch; from verifier._beside import Forked\n"
            "torch.set_num_threads(2)\n"
            "m, x = torch.nn.Linear(512, 512), torch.randn(2048, 512)\n"
            "with torch.no_grad():\n"
            "    want = [float(m(x).sum()) for _ in range(3)][-1]\n"
            "    got = Forked(lambda: float(m(x).sum())).result()\n"
            "print(abs(got - want) <= 1e-3 * abs(want), torch.get_num_threads())\n")
    out = _run_code(code, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "2"]  # the caller keeps its threads


def test_an_interrupted_wait_then_cancel_kills_the_child_without_a_second_error():
    """Ctrl-C while the caller waits in ``result()``: the interrupt propagates, and the cancel that follows (the
    ranking's) kills and reaps the child without tripping over the pipe the interrupted read already closed."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGALRM, interrupt)
    job = Forked(time.sleep, 60)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            job.result()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    job.cancel()
    assert _gone(job._pid)


def test_a_fork_that_fails_leaks_nothing_and_beside_process_falls_back_to_a_thread(monkeypatch):
    def no_process():
        raise BlockingIOError(11, "Resource temporarily unavailable")  # EAGAIN: a process limit
    before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "fork", no_process)
    with pytest.raises(OSError):
        Forked(os.getpid)
    assert len(os.listdir("/proc/self/fd")) == before  # the pipe is closed
    job = beside_process(os.getpid)
    assert isinstance(job, Beside) and job.result() == os.getpid()  # computed here, in a thread
