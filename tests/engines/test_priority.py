"""verifier.engines.priority: the harness's thread yields the CPU to an engine drawing chunks ahead, and gets its
priority back where the process may raise it (issue 27)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from verifier.engines import priority

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


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


def test_the_harness_yields_only_when_the_engine_has_the_longer_work(monkeypatch):
    """EngineWorker.presample: after the first call the calls left times its seconds decide -- above
    YIELD_AFTER_SECONDS the harness's thread yields, below it keeps its priority (an engine done before the harness is
    ready)."""
    from tests.engines.test_bridge import _decoder
    import verifier.engines.bridge as bridge
    from verifier.sampling import SamplingConfig

    def run(threshold: float) -> tuple[int, int]:
        monkeypatch.setattr(priority, "YIELD_AFTER_SECONDS", threshold)

        def body():
            tid = threading.get_native_id()
            before = os.getpriority(os.PRIO_PROCESS, tid)
            early = _decoder()
            early.start()
            early.presample([early.request([1, 2], 4, 3, SamplingConfig(), seed=s) for s in (10, 11, 12)])
            dec = _decoder()
            try:
                for s in (10, 11, 12):
                    dec.generate([1, 2], 4, 3, SamplingConfig(), seed=s)
                during = os.getpriority(os.PRIO_PROCESS, tid)
                dec.stop_presample()
            finally:
                dec.close()
                bridge.close_pool()
            return before, during
        return _in_thread(body)

    before, during = run(0.0)
    assert during == min(19, before + priority.YIELD_NICE)
    before, during = run(1e9)
    assert during == before


def test_the_harness_yields_while_a_slow_engine_is_still_starting(monkeypatch):
    """An engine still starting after STARTING_YIELD_SECONDS (vLLM's ~11 s start-up) is the critical path: the
    harness's thread yields before the first call is back, whatever the calls left; a quick start-up leaves that to
    the first call's rule."""
    from tests.engines.test_bridge import _decoder
    import verifier.engines.bridge as bridge
    from verifier.sampling import SamplingConfig

    monkeypatch.setattr(priority, "YIELD_AFTER_SECONDS", 1e9)  # the calls' rule never yields here

    def run(startup_sleep: float) -> tuple[int, int]:
        def body():
            tid = threading.get_native_id()
            before = os.getpriority(os.PRIO_PROCESS, tid)
            early = _decoder(startup_sleep=startup_sleep)
            early.start()
            early.presample([early.request([1, 2], 4, 3, SamplingConfig(), seed=10)])
            dec = _decoder(startup_sleep=startup_sleep)
            try:
                dec.generate([1, 2], 4, 3, SamplingConfig(), seed=10)
                during = os.getpriority(os.PRIO_PROCESS, tid)
                dec.stop_presample()
            finally:
                dec.close()
                bridge.close_pool()
            return before, during
        return _in_thread(body)

    monkeypatch.setattr(priority, "STARTING_YIELD_SECONDS", 0.3)
    before, during = run(2.0)  # still starting at 0.3 s
    assert during == min(19, before + priority.YIELD_NICE)
    monkeypatch.setattr(priority, "STARTING_YIELD_SECONDS", 30.0)
    before, during = run(0.0)  # ready long before
    assert during == before
