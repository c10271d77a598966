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


TINY = __import__("pathlib").Path(__file__).resolve().parents[1] / "runner" / "suites" / "tiny.toml"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from verifier.cli import main

    run = tmp_path_factory.mktemp("corrupt") / "run"
    assert main(["run", str(TINY), "--run-dir", str(run), "--no-progress"]) == 0
    return run


def _rewrite_tokens(chunk, edit):
    with np.load(chunk, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["tokens"] = edit(arrays["tokens"].copy())
    with open(chunk, "wb") as fh:
        np.savez(fh, **arrays)


@pytest.mark.parametrize("edit, why", [
    (lambda t: np.full_like(t, -1), "padding -1 at position 0 with no EOS before it"),
    (lambda t: np.where(np.arange(t.size).reshape(t.shape) == 4, 77, t), "token id 77"),
])
def test_a_shard_with_values_no_decoder_could_emit_is_a_storage_error(tiny_run, tmp_path, capsys, edit, why):
    """Issue 28 item 7: a chunk rewritten to -1 rows became "BIAS DETECTED ... token <ended> emitted
    500 times"; an id outside the vocabulary a shape error naming neither chunk nor token.  Both are a
    storage error (exit 2) naming the chunk file, the row and the value, never a verdict."""
    import shutil

    from verifier.cli import main
    from verifier.errors import EXIT_USAGE

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    chunk = sorted((run / "samples").glob("biased-sampler*/chunk-000002.npz"))[0]
    _rewrite_tokens(chunk, edit)
    capsys.readouterr()
    assert main(["report", str(run), "--no-progress"]) == EXIT_USAGE
    out = capsys.readouterr()
    assert str(chunk) in out.err and why in out.err, out.err
    assert "BIAS" not in out.out + out.err and "Traceback" not in out.err


def test_stored_acceptance_figures_outside_0_to_k_are_a_storage_error(tmp_path, capsys):
    """A stored first_round_accepted rewritten to 99 was clipped into 0..k by the acceptance audit."""
    from verifier.cli import main
    from verifier.errors import EXIT_USAGE

    from .test_inputs_more import write_toml

    run = tmp_path / "run"
    assert main(["run", str(write_toml(tmp_path)), "--run-dir", str(run), "--no-progress"]) in (0, 4)
    chunk = sorted((run / "samples").rglob("chunk-*.npz"))[0]
    with np.load(chunk, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    assert bool(arrays["has_first_round_accepted"])  # the reference decoder reports it
    arrays["first_round_accepted"][3] = 99
    with open(chunk, "wb") as fh:
        np.savez(fh, **arrays)
    capsys.readouterr()
    assert main(["report", str(run), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert str(chunk) in err and "first_round_accepted" in err and "99" in err and "Traceback" not in err
