"""Seed derivation is a pure function of (suite seed, set key, chunk); shards round-trip atomically."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from verifier.runner.seeds import chunk_seed, key_words, stream_seed
from verifier.runner.store import SampleStore, Shard


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), key=st.text(max_size=40), chunk=st.integers(0, 10**6))
def test_chunk_seed_is_pure_and_in_range(seed, key, chunk):
    s = chunk_seed(seed, key, chunk)
    assert s == chunk_seed(seed, key, chunk)
    assert 0 <= s < 2**63


def test_chunk_seed_is_the_spawned_child_keyed_by_cell():
    expected = np.random.SeedSequence(5, spawn_key=key_words("samples|cell-a") + (3,)).generate_state(1, np.uint64)[0]
    assert chunk_seed(5, "cell-a", 3) == int(expected) & (2**63 - 1)


def test_seeds_differ_across_chunks_keys_and_suite_seeds():
    seeds = {chunk_seed(s, k, i) for s in (0, 1) for k in ("a", "b") for i in range(50)}
    assert len(seeds) == 200
    assert stream_seed(0, "a") != chunk_seed(0, "a", 0)  # analysis streams are separate from sampling


def test_shard_round_trip_and_no_temporary_left(tmp_path):
    store = SampleStore(tmp_path)
    tokens = np.array([[1, 3, -1], [0, 0, 1]], dtype=np.int64)
    meta = {"seed": 42, "set_key": "k", "decoder": {"name": "d"}}
    path = store.write_chunk("set", 0, Shard(tokens, np.array([1, 0]), np.array([1, 0, 1]), meta))
    assert path.name == "chunk-000000.npz" and [p.name for p in path.parent.iterdir()] == [path.name]
    shard = store.read_chunk("set", 0)
    np.testing.assert_array_equal(shard.tokens, tokens)
    np.testing.assert_array_equal(shard.first_round_accepted, [1, 0])
    assert shard.meta["seed"] == 42 and shard.meta["decoder"] == {"name": "d"}
    store.write_chunk("set", 1, Shard(tokens, None, np.zeros(0, np.int64), meta))
    assert store.read_chunk("set", 1).first_round_accepted is None


def test_missing_or_corrupt_shard_reads_as_absent(tmp_path):
    store = SampleStore(tmp_path)
    assert store.read_chunk("set", 0) is None
    store.chunk_path("set", 0).parent.mkdir(parents=True)
    store.chunk_path("set", 0).write_bytes(b"truncated")
    assert store.read_chunk("set", 0) is None
