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
