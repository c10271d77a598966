"""``specverify bench time-to-verdict`` and the run's own time-to-verdict record (issue 17 part 4).

The verdict is known after the statistics stage, before the diagnosis and the report files: the
run must record that moment (``run.time_to_verdict``) and print its ``time to verdict:`` line then,
and the bench must time that line, not the exit."""

from __future__ import annotations

import time
from pathlib import Path

from verifier.bench import time_to_verdict as ttv
from verifier.runner.clock import since_process_start

TINY = Path(__file__).resolve().parents[2] / "tests" / "runner" / "suites" / "tiny.toml"
IMPORTED = time.monotonic()  # this module is imported after the process started, so its age is a lower bound


def test_since_process_start_counts_from_the_process_start():
    since_import = time.monotonic() - IMPORTED
    first = since_process_start()
    assert first["wall_from"] == "process start"  # Linux: /proc, interpreter start included
    # this pytest process started well before this test: its age exceeds the time spent in this test
    c0 = time.thread_time()
    while time.thread_time() - c0 < 0.1:  # 0.1 s of CPU of this thread: at least 0.1 s of wall and of process CPU
        pass  # (process_time alone is not enough: other threads of a long pytest run add CPU faster than wall time)
    second = since_process_start()
    # both figures are rounded to 1 ms, so their difference can fall up to 1 ms short of the 0.1 s spent
    # (CI run of session 15: 403.126 >= 403.026 + 0.1 failed on the float sum 403.12600000000003)
    assert second["cpu_seconds"] >= first["cpu_seconds"] + 0.1 - 0.0011
    assert second["wall_seconds"] >= first["wall_seconds"] + 0.08  # /proc counts in 10 ms ticks
    # pytest's own start-up and imports are counted: at least the age of this module plus one 10 ms /proc tick
    # (was `> 0.5 s`, which a quick worker's start-up undercut when this file ran alone: 0.49 s measured)
    assert first["wall_seconds"] >= since_import + 0.01, (first, since_import)


def test_bench_times_the_verdict_line_not_the_exit(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVERIFY_CACHE_DIR", str(tmp_path / "cache"))
    t = ttv.time_suite(str(TINY))
    assert t.exit_code == 0 and t.all_expectations_met, t.stderr_tail
    assert t.verdict_wall_seconds is not None  # the line was printed before the exit and timed
    assert 0 < t.verdict_wall_seconds <= t.wall_seconds
    job = t.verdict_job
    assert job["wall_from"] == "process start" and 0 < job["cpu_seconds"] and 0 < job["wall_seconds"] <= t.verdict_wall_seconds + 0.02
    # (+ 20 ms: the child's age comes from /proc, in 10 ms ticks for its start and for the uptime)
    split = t.verdict_split
    assert list(split) == ["start-up and imports", "exact", "models", "sampling", "statistics"]
    assert abs(sum(split.values()) - job["wall_seconds"]) < 1e-6  # the split adds up to the verdict time
    assert "diagnosis" not in split and "reports" not in split
    md = ttv.render_markdown(t)
    assert "Time to verdict (before diagnosis and reports)" in md and "start-up and imports" in md
    assert t.to_json()["verdict_split"] == split
