"""verifier.engines.priority: the harness's thread yields the CPU to an engine drawing chunks ahead, and gets its
priority back where the process may raise it (issue 27)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from verifier.engines import priority

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch):
    """The tests run beside other tests: the load-average guard (tested on its own below) is taken as quiet."""
    monkeypatch.setattr(priority, "_busy", lambda: False)
    # a worker's start-up can pass 2 s on a loaded machine: only the start-up test below yields for it
    monkeypatch.setattr(priority, "STARTING_YIELD_SECONDS", 60.0)
    priority._SAVED.clear()


def test_no_yield_on_a_busy_machine_or_where_the_priority_cannot_come_back(monkeypatch):
    """A machine whose other work keeps the cores busy (load average >= cores), or a process that may not raise a
    priority again (unprivileged, RLIMIT_NICE 0): the harness keeps its priority -- it would yield to that other work
    too, or stay behind it to its end."""
    def attempt():
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        ok = priority.yield_to_engine()
        now = os.getpriority(os.PRIO_PROCESS, tid)
        priority.reclaim()
        return ok, before, now

    monkeypatch.setattr(priority, "_busy", lambda: True)
    ok, before, now = _in_thread(attempt)
    assert not ok and now == before
    monkeypatch.setattr(priority, "_busy", lambda: False)
    monkeypatch.setattr(priority, "_may_raise_again", lambda nice: False)
    ok, before, now = _in_thread(attempt)
    assert not ok and now == before
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0 * (os.cpu_count() or 1), 0.0, 0.0))
    monkeypatch.undo()
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0 * (os.cpu_count() or 1), 0.0, 0.0))
    assert priority._busy()
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert not priority._busy()


def _in_thread(fn):
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = exc
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_only_the_calling_thread_yields_and_it_gets_its_priority_back():
    main_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def body():
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        assert priority.yield_to_engine() and priority.yield_to_engine()  # a second call lowers nothing more
        lowered = os.getpriority(os.PRIO_PROCESS, tid)
        child = _in_thread(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        priority.reclaim()
        return before, lowered, child, os.getpriority(os.PRIO_PROCESS, tid)

    before, lowered, child, after = _in_thread(body)
    assert lowered == min(19, before + priority.YIELD_NICE)
    assert child == lowered  # threads it starts later yield too (Linux: inherited at creation)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_before  # other threads untouched
    if os.geteuid() == 0:  # root may raise a priority again; an unprivileged thread keeps the lower one
        assert after == before
    else:
        assert after in (before, lowered)


def test_reclaim_without_yield_changes_nothing():
    def body():
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        priority.reclaim()
        return before, os.getpriority(os.PRIO_PROCESS, tid)

    before, after = _in_thread(body)
    assert before == after


def test_another_thread_can_be_made_to_yield_and_reclaims_itself():
    """The presampling thread lowers the harness thread's priority (yield_to_engine(tid)); the harness thread later
    calls reclaim() itself."""
    ready, go = threading.Event(), threading.Event()
    seen: dict = {}

    def harness():
        seen["tid"] = threading.get_native_id()
        seen["before"] = os.getpriority(os.PRIO_PROCESS, seen["tid"])
        ready.set()
        go.wait(10)
        seen["lowered"] = os.getpriority(os.PRIO_PROCESS, seen["tid"])
        priority.reclaim()
        seen["after"] = os.getpriority(os.PRIO_PROCESS, seen["tid"])
    t = threading.Thread(target=harness)
    t.start()
    ready.wait(10)
    assert priority.yield_to_engine(seen["tid"])
    go.set()
    t.join()
    assert seen["lowered"] == min(19, seen["before"] + priority.YIELD_NICE)
    if os.geteuid() == 0:
        assert seen["after"] == seen["before"]


def _presampled(monkeypatch, *, calls: int = 3, call_sleep: float = 0.0, startup_sleep: float = 0.0,
                limit: int | None = None) -> tuple[int, int, int]:
    """In a fresh thread (the harness's): hand ``calls`` generate calls ahead (a planned n's guess cut to ``limit``
    when given), take them; the thread's nice value before, right after the first call was taken, and after the
    sampling ended."""
    from tests.engines.test_bridge import _decoder
    import verifier.engines.bridge as bridge
    from verifier.sampling import SamplingConfig

    def body():
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        early = _decoder(startup_sleep=startup_sleep, call_sleep=call_sleep)
        early.start()
        early.presample([early.request([1, 2], 4, 3, SamplingConfig(), seed=s) for s in range(calls)],
                        guessed=limit is not None)
        if limit is not None:
            early.limit_presample(limit)
        dec = _decoder(startup_sleep=startup_sleep, call_sleep=call_sleep)
        try:
            dec.generate([1, 2], 4, 3, SamplingConfig(), seed=0)
            during = os.getpriority(os.PRIO_PROCESS, tid)
            for s in range(1, limit if limit is not None else calls):
                dec.generate([1, 2], 4, 3, SamplingConfig(), seed=s)
            dec.stop_presample()
            after = os.getpriority(os.PRIO_PROCESS, tid)
        finally:
            dec.close()
            bridge.close_pool()
        return before, during, after
    return _in_thread(body)


def test_the_harness_yields_only_when_the_engine_has_the_longer_work(monkeypatch):
    """EngineWorker.presample: after the first call the calls left times its seconds decide -- above
    YIELD_AFTER_SECONDS the harness's thread yields while the calls ahead run (and gets its priority back after them,
    root), below it keeps its priority (an engine done before the harness is ready)."""
    monkeypatch.setattr(priority, "YIELD_AFTER_SECONDS", 0.5)
    before, during, after = _presampled(monkeypatch, calls=4, call_sleep=0.4)  # 3 x 0.4 s left > 0.5 s
    assert during == min(19, before + priority.YIELD_NICE)
    if os.geteuid() == 0:
        assert after == before
    monkeypatch.setattr(priority, "YIELD_AFTER_SECONDS", 1e9)
    before, during, after = _presampled(monkeypatch, calls=4, call_sleep=0.4)
    assert during == before == after


def test_a_guessed_count_yields_only_for_the_calls_the_plan_keeps(monkeypatch):
    """A planned n hands over a guess (32 calls): the calls beyond the plan's n must not make the harness yield (the
    breaker's case: 4 real chunks of ~1 s each, the harness slowed 2x under load). Cut to 2 calls, 1 x 0.4 s left is
    below the threshold; uncut, 31 x 0.4 s would be far above it."""
    monkeypatch.setattr(priority, "YIELD_AFTER_SECONDS", 1.0)
    before, during, after = _presampled(monkeypatch, calls=32, call_sleep=0.4, limit=2)
    assert during == before


def test_the_harness_yields_while_a_slow_engine_is_still_starting(monkeypatch):
    """An engine still starting after STARTING_YIELD_SECONDS (vLLM's ~11 s start-up) is the critical path: the
    harness's thread yields before the first call is back, whatever the calls left; a quick start-up leaves that to
    the first call's rule."""
    monkeypatch.setattr(priority, "YIELD_AFTER_SECONDS", 1e9)  # the calls' rule never yields here
    monkeypatch.setattr(priority, "STARTING_YIELD_SECONDS", 0.3)
    before, during, _ = _presampled(monkeypatch, calls=3, call_sleep=0.4, startup_sleep=1.5)  # still starting at 0.3 s
    assert during == min(19, before + priority.YIELD_NICE)
    monkeypatch.setattr(priority, "STARTING_YIELD_SECONDS", 30.0)
    before, during, _ = _presampled(monkeypatch, calls=3, call_sleep=0.4)  # ready long before
    assert during == before


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority again needs root (CAP_SYS_NICE)")
def test_threads_started_while_yielding_get_their_priority_back():
    """Threads the yielding thread starts inherit the lower priority (torch's intra-op pool, the warming thread);
    reclaim restores them too, not only the thread that yielded (the breaker's finding)."""
    def body():
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        priority.yield_to_engine()
        started, release, seen = threading.Event(), threading.Event(), {}

        def child():
            seen["tid"] = threading.get_native_id()
            started.set()
            release.wait(10)
        c = threading.Thread(target=child)
        c.start()
        started.wait(10)
        lowered = os.getpriority(os.PRIO_PROCESS, seen["tid"])
        priority.reclaim()
        restored = os.getpriority(os.PRIO_PROCESS, seen["tid"])
        release.set()
        c.join()
        return before, lowered, restored

    before, lowered, restored = _in_thread(body)
    assert lowered == min(19, before + priority.YIELD_NICE) and restored == before
