"""The runner: exact stage, sampling into resumable shards, statistics, verdict, reports.

Public entry points: :func:`run_suite` (a fresh or resumed run), :func:`analyze_run`
(``specverify report RUN_DIR``: statistics and reports again from stored samples),
:func:`new_run_dir`, :func:`load_run_suite`; seeds in :mod:`verifier.runner.seeds`, shards in
:mod:`verifier.runner.store`.
"""

from verifier.runner.run import REPORT_SCHEMA_VERSION, RunOutcome, analyze_run, load_run_suite, new_run_dir, run_suite
from verifier.runner.seeds import chunk_seed, stream_seed
from verifier.runner.store import SampleStore, Shard

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "RunOutcome",
    "SampleStore",
    "Shard",
    "analyze_run",
    "chunk_seed",
    "load_run_suite",
    "new_run_dir",
    "run_suite",
    "stream_seed",
]
