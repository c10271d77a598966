"""A truncated/corrupt shard (e.g. a copy cut short) raised zipfile.BadZipFile out of
`specverify report` / `run --resume` (traceback, exit 1).  It is now treated like a missing shard:
the report counts only valid chunks (and says so), a resume samples that chunk again."""

from __future__ import annotations

import numpy as np
import pytest

from verifier.runner.store import SampleStore, Shard


def test_truncated_shard_reads_as_missing(tmp_path):
    store = SampleStore(tmp_path)
    path = store.write_chunk("set", 0, Shard(np.zeros((4, 2), np.int64), None, np.zeros(0, np.int64), {"seed": 1}))
    assert store.read_chunk("set", 0) is not None
    path.write_bytes(path.read_bytes()[:100])  # not a zip any more
    assert store.read_chunk("set", 0) is None
    path.write_bytes(b"")
    assert store.read_chunk("set", 0) is None


@pytest.mark.parametrize("text", ["{}", "[1]", '{"suite": 3}'])
def test_run_json_without_a_suite_is_a_usage_error(tmp_path, capsys, text):
    """`specverify report` on a folder whose run.json is JSON but not ours raised KeyError/TypeError."""
    from verifier.cli import main
    from verifier.errors import EXIT_USAGE

    (tmp_path / "run.json").write_text(text)
    assert main(["report", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "not a run file of spec-verifier" in err and "Traceback" not in err
