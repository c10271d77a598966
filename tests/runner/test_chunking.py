"""Default chunk size (verifier/runner/chunking.py): adapts to V, keeps 500 at small V, loses to an explicit chunk_size."""

import tomllib

import pytest

from verifier.runner.chunking import DEFAULT_CHUNK_SIZE, MIN_CHUNK_SIZE, default_chunk_size, sampler_bytes_per_row
from verifier.runner.plan import plan_sample_sets
from verifier.suite.schema import parse_suite

GIB = 2**30


@pytest.mark.parametrize("vocab", [2, 16, 384, 1000, 4096])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_small_vocabularies_keep_the_old_default(vocab, k):
    for available in (None, 8 * GIB, 64 * GIB):
        assert default_chunk_size(vocab, k, available) == DEFAULT_CHUNK_SIZE == 500


def test_llama2_vocabulary_keeps_500_at_small_k():
    assert default_chunk_size(32_000, 2, None) == default_chunk_size(32_000, 4, 64 * GIB) == 500


def test_large_vocabularies_get_rows_that_fit_the_sampler_budget():
    assert default_chunk_size(128_256, 2, 64 * GIB) == GIB // (8 * 128_256 * 4) == 261
    assert default_chunk_size(256_000, 2, 64 * GIB) == 131
    assert default_chunk_size(256_000, 2, None) == 131  # unknown memory: the fixed budget
    for vocab in (50_000, 100_000, 152_064, 256_000, 1_000_000):
        rows = default_chunk_size(vocab, 2, 64 * GIB)
        assert rows * sampler_bytes_per_row(vocab, 2) <= GIB or rows == MIN_CHUNK_SIZE


def test_short_memory_shrinks_the_budget_and_never_goes_below_the_minimum():
    # 400 MiB available: budget 100 MiB = 102 rows of 1 MiB at V = 32k, k = 2 (8 x 32000 x 4 bytes a row)
    assert default_chunk_size(32_000, 2, 400 * 2**20) == (100 * 2**20) // (8 * 32_000 * 4) == 102
    assert default_chunk_size(256_000, 2, 2**20) == MIN_CHUNK_SIZE


def _suite(chunk_line: str):
    text = f"""schema_version = 1
name = "t"
[models.m]
target = "tabular:a"
draft = "tabular:b"
[prompts.p]
ids = [1, 2]
[sampling.t1]
temperature = 1.0
[defaults]
samples = 1200
{chunk_line}
[[decoders]]
name = "reference"
decoder = "reference"
num_draft_tokens = [1, 2]
"""
    return parse_suite(tomllib.loads(text))


def test_plans_use_the_default_only_when_the_suite_sets_no_chunk_size():
    ids = {("m", "p"): (1, 2)}
    default, explicit = _suite(""), _suite("chunk_size = 700")
    assert not default.decoders[0].chunk_size_set and explicit.decoders[0].chunk_size_set
    big = {"m": 256_000}
    assert [p.chunk_size for p in plan_sample_sets(default, ids, big)] == [default_chunk_size(256_000, k) for k in (1, 2)]
    assert [p.chunk_size for p in plan_sample_sets(explicit, ids, big)] == [700, 700]
    # small V (every ci-suite vocabulary): the same plans -- keys, set ids, chunk seeds -- as an explicit 500
    same = _suite("chunk_size = 500")
    for small in ({"m": 384}, {"m": 1000}, None):
        got, want = plan_sample_sets(default, ids, small), plan_sample_sets(same, ids, small)
        assert [(p.key, p.set_id, p.chunk_size, p.num_chunks, p.chunk_seed(1)) for p in got] == \
               [(p.key, p.set_id, p.chunk_size, p.num_chunks, p.chunk_seed(1)) for p in want]
