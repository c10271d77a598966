"""The job child's allocator setting (issue 17): with ``SPECVERIFY_HUGEPAGES=1`` ``specverify run`` runs
its job with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` appended to the user's tunables, never over a
``glibc.malloc.hugetlb`` the user chose; without it the environment is left alone; report.json records
what the job ran with.

Why: at V = 256k a (rows, vocab) float32 block is 134 MB; glibc mmaps every such block afresh and
the kernel faults it in 4 KiB pages (28% of a V = 256k run's CPU time went to the kernel; 14-20%
less stage time with huge pages, reports/benchmarks.md).  No statistics here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.cli._isolate import with_hugepage_malloc

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "runner" / "suites" / "tiny.toml"


@pytest.mark.parametrize("user, job", [
    ("", "glibc.malloc.hugetlb=1"),
    ("glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
    ("glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=0"),  # the user's choice wins
    ("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"),
    (":glibc.malloc.arena_max=2:", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
])
def test_hugepage_tunable_is_appended_unless_the_user_set_it(user, job):
    assert with_hugepage_malloc(user) == job


def _run_child(tmp_path: Path, tunables: str | None, hugepages: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "SPECVERIFY_HUGEPAGES")}
    if hugepages:
        env["SPECVERIFY_HUGEPAGES"] = "1"
    if tunables is not None:
        env["GLIBC_TUNABLES"] = tunables
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "verifier.cli", "run", str(TINY), "--run-dir", str(run_dir),
                           "--no-progress"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((run_dir / "report.json").read_text(encoding="utf-8"))["environment"]


def test_the_job_runs_with_huge_page_malloc_and_the_report_says_so(tmp_path):
    env = _run_child(tmp_path, None)
    assert env["glibc_tunables"] == "glibc.malloc.hugetlb=1"


def test_without_the_opt_in_the_job_environment_is_left_alone(tmp_path):
    assert _run_child(tmp_path, None, hugepages=False)["glibc_tunables"] is None


def test_a_user_setting_reaches_the_job_unchanged(tmp_path):
    env = _run_child(tmp_path, "glibc.malloc.hugetlb=0")
    assert env["glibc_tunables"] == "glibc.malloc.hugetlb=0"
