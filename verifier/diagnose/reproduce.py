"""Score an engine reproduction's predicted laws against a run folder's samples.

``python -m verifier.diagnose.reproduce ENGINE RUN_DIR[=REPORT_DIR] ...`` with ENGINE one of
:data:`verifier.engines.reproductions.SCORERS` (``llama.cpp``, ``llama-cpp-python``, ``openvino-genai``):
for every sample set of every run folder, the engine's law predicted from its source
(:mod:`verifier.engines.reproductions`) against the samples the engine drew -- chi-square p-values and
acceptance, printed; ``=REPORT_DIR`` writes ``REPORT_DIR/acceptance.txt`` where the scorer has one (the
README audit matrix reads it).  The run folders are audits of the engine on the shipped models.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Iterator

from verifier.errors import invalid_argument

__all__ = ["sample_sets", "main"]


def sample_sets(run_dir: str | Path) -> Iterator[tuple[str, list[int], object, list]]:
    """``(set folder name, prompt ids, SamplingConfig, shards in chunk order)`` for each stored sample set."""
    from verifier.runner.store import SampleStore
    from verifier.sampling import SamplingConfig

    store = SampleStore(run_dir)
    for set_dir in sorted(p for p in store.samples_dir.iterdir() if p.is_dir()):
        shards, i = [], 0
        while (s := store.read_chunk(set_dir.name, i)) is not None:
            shards.append(s)
            i += 1
        key = shards[0].meta["set_key"]
        prompt = json.loads(key.split("|prompt=", 1)[1].split("|", 1)[0])
        sampling = SamplingConfig(**json.loads(key.split("|sampling=", 1)[1].split("|", 1)[0]))
        yield set_dir.name, prompt, sampling, shards


def main(argv: list[str] | None = None) -> int:
    from verifier.engines.reproductions import SCORERS
    from verifier.models.loading import load_model

    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in SCORERS:
        raise invalid_argument("ENGINE", args[0] if args else None, f"one of {sorted(SCORERS)}, then RUN_DIR[=REPORT_DIR] ...")
    scorer = importlib.import_module(SCORERS[args[0]])
    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    for arg in args[1:]:
        run_dir, _, report_dir = arg.partition("=")
        report_file = Path(run_dir) / "report.json"
        report = json.loads(report_file.read_text()) if report_file.exists() else {}
        for name, prompt, sampling, shards in sample_sets(run_dir):
            scorer.score_set(run_dir, name, prompt, sampling, shards, target, draft, report_dir=report_dir or None,
                             report=report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
