"""Issue 17: real-vocabulary scale -- memory failures are resource errors, audits call generate in chunks."""

from __future__ import annotations

import numpy as np

from tests.runner.conftest import suite_text
from verifier.cli import main
from verifier.errors import EXIT_USAGE, ResourceError, is_out_of_memory
from verifier.sampling import SamplingConfig

HOG = """
[[decoders]]
name = "hog"
decoder = "tests.runner.plugins:memory_hog_sampler"
expect = "pass"
"""


def test_an_allocation_failure_in_generate_is_a_resource_error_not_a_decoder_crash(write_suite, tmp_path, capsys):
    """Before: MemoryError inside generate was reported as the decoder crashing (exit 3)."""
    suite = write_suite(suite_text(HOG))
    code = main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "ran out of memory" in err and "chunk_size" in err and "--resume" in err
    assert len(list((tmp_path / "run" / "samples").rglob("*.npz"))) == 1  # the chunk drawn before is kept


def test_is_out_of_memory_tells_allocation_failures_from_bugs():
    assert is_out_of_memory(MemoryError("x"))
    assert is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: not enough memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert not is_out_of_memory(ValueError("out of memory"))  # only RuntimeError texts are read


class _Recorder:
    """Plain uniform sampler over 3 tokens that records each generate call's num_samples."""

    vocab_size, eos_token_id, name = 3, None, "recorder"

    def __init__(self):
        self.calls = []

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        self.calls.append((num_samples, seed))
        return np.random.default_rng(seed).integers(0, 3, size=(num_samples, max_new_tokens))


def test_blackbox_audit_calls_generate_in_chunks_with_distinct_seeds():
    """Before: all n rows of an arm went through one generate call (n x vocab memory in the decoder)."""
    from verifier.audit.blackbox import blackbox_audit

    a, b = _Recorder(), _Recorder()
    res = blackbox_audit(a, b, [[0]], SamplingConfig(), num_samples=1200, max_new_tokens=2, vocab_size=3,
                         seed=3, chunk_size=500)
    assert [n for n, _ in a.calls] == [500, 500, 200] and [n for n, _ in b.calls] == [500, 500, 200]
    assert len({s for _, s in a.calls + b.calls}) == 6
    assert res.verdict in ("PASS", "BIAS DETECTED")


def test_resource_error_is_exit_2():
    assert ResourceError("x").exit_code == EXIT_USAGE


def test_audit_suites_without_chunk_size_adapt_it_to_the_vocabulary():
    """Issue 17: audit suites wrote chunk_size = 500 at every vocabulary (sampler memory 500 x V), so the
    runner's V-adaptive default never applied to `specverify audit`; now only an explicit --chunk-size is written."""
    from verifier.audit.suite_builder import AuditSpec, _suite_raw
    from verifier.runner.plan import plan_sample_sets
    from verifier.suite.schema import parse_suite

    def plans(spec, vocab):
        raw = _suite_raw(spec, [("ids", [1, 2])], [1], 2, 1000, 3, "t")
        suite = parse_suite(raw)
        return raw, plan_sample_sets(suite, {("audit", "p0"): (1, 2)}, {"audit": vocab})

    raw, p = plans(AuditSpec(decoder="reference", target="shipped:target", num_draft_tokens=2), 256_000)
    from verifier.runner.chunking import default_chunk_size

    # the runner's default (131 rows with 4+ GiB available; smaller when another job leaves less)
    assert "chunk_size" not in raw["defaults"] and p[0].chunk_size == default_chunk_size(256_000, 2)
    assert plans(AuditSpec(decoder="reference", target="shipped:target", num_draft_tokens=2), 384)[1][0].chunk_size == 500
    explicit = AuditSpec(decoder="reference", target="shipped:target", num_draft_tokens=2, chunk_size=250)
    assert plans(explicit, 256_000)[1][0].chunk_size == 250


def test_blackbox_default_chunk_adapts_to_the_vocabulary():
    from verifier.audit.blackbox import blackbox_audit

    small, large = _Recorder(), _Recorder()
    blackbox_audit(small, _Recorder(), [[0]], SamplingConfig(), num_samples=700, max_new_tokens=1, vocab_size=3, seed=1)
    blackbox_audit(large, _Recorder(), [[0]], SamplingConfig(), num_samples=200, max_new_tokens=1, vocab_size=256_000, seed=1)
    assert [n for n, _ in small.calls] == [500, 200]  # small vocabularies: as before
    from verifier.runner.chunking import default_chunk_size

    rows = default_chunk_size(256_000, 4)  # 87 with 4+ GiB available (1 GiB budget); smaller when another job leaves less
    assert default_chunk_size(256_000, 4, available=16 * 2**30) == 87
    assert [n for n, _ in large.calls] == [rows] * (200 // rows) + ([200 % rows] if 200 % rows else [])
