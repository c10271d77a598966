"""On-disk cache of Monte Carlo null streams (verifier.stats.nullcache): a cached p-value is
bit-identical to the uncached one, a changed key misses, a corrupt entry is recomputed.

The law is the exact 3-token output law of the standard case ``unigram3`` (27 outcomes,
:func:`verifier.exact.target_law`), the null of the ci suite's joint and surprisal cells; the
observed statistics are placed beyond every null draw, as for a biased cell at a gate's level,
so every one of the B draws is simulated (B = 20,000; the store threshold ``MIN_STORE_WORK`` is
lowered to 100,000 draws x categories to keep the tests fast).  "Uncached" is the same call with
``SPECVERIFY_NO_CACHE=1``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verifier.errors import ConfigError
from verifier.exact import standard_cases, target_law
from verifier.stats import montecarlo, nullcache

DRAWS = 20_000  # B: 27 categories x 20k = 540k >= STORE_WORK, so the stream is stored
STORE_WORK = 100_000  # MIN_STORE_WORK in these tests
N = 2500
FAR = 1e9  # an observed statistic beyond every null draw: p = 1 / (1 + B), all B draws simulated


def _law() -> np.ndarray:
    case = next(c for c in standard_cases() if c.name == "unigram3")
    law = target_law(case.target, case.prefix, 3)
    return np.array([float(law[o]) for o in sorted(law)])


LAW = _law()


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(nullcache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(nullcache.NO_CACHE_ENV, raising=False)
    monkeypatch.delenv(nullcache.MAX_BYTES_ENV, raising=False)
    monkeypatch.setattr(nullcache, "MIN_STORE_WORK", STORE_WORK)
    montecarlo._cache.clear()  # the in-process cache would answer before the disk
    yield tmp_path / "cache"
    montecarlo._cache.clear()


def _fresh():
    montecarlo._cache.clear()


def _entries(root: Path) -> list[Path]:
    return sorted((root / nullcache.SUBDIR).glob("*.bin"))


def _uncached(monkeypatch, fn):
    monkeypatch.setenv(nullcache.NO_CACHE_ENV, "1")
    _fresh()
    try:
        return fn()
    finally:
        monkeypatch.delenv(nullcache.NO_CACHE_ENV)
        _fresh()


def _stored_draws(kind="g", probs=LAW, n=N, scores=None) -> int:
    """Draws the stream had from disk when it was created (0 = a miss)."""
    _fresh()
    return montecarlo._stream(kind, probs, n, scores).stored


def test_cached_pvalues_are_bit_identical_to_uncached(cache_dir, monkeypatch):
    scores = -np.log(LAW)
    calls = [lambda: montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS),
             lambda: montecarlo.sequential_pvalue(float(N * scores.max()) * 2, "linear", LAW, N, DRAWS, scores, two_sided=True),
             lambda: montecarlo.null_sample("g", LAW, N, DRAWS).tobytes()]
    want = [_uncached(monkeypatch, c) for c in calls]
    assert _entries(cache_dir) == []  # SPECVERIFY_NO_CACHE: nothing written
    for c, w in zip(calls, want):
        _fresh()
        assert c() == w  # cold: computed, then written
    assert len(_entries(cache_dir)) == 2  # one per (kind, law, n, scores)
    for c, w in zip(calls, want):
        _fresh()
        assert c() == w  # warm: read back -- same p-value, same draws used, same bytes
    assert want[0] == (1 / (1 + DRAWS), DRAWS)


def test_a_longer_stream_continues_from_the_stored_generator_state(monkeypatch):
    montecarlo.null_sample("g", LAW, N, DRAWS)  # stores ~20k draws
    longer = 3 * DRAWS
    want = _uncached(monkeypatch, lambda: montecarlo.null_sample("g", LAW, N, longer).tobytes())
    assert 0 < _stored_draws() < longer
    assert montecarlo.null_sample("g", LAW, N, longer).tobytes() == want  # extended from disk
    assert _stored_draws() >= longer  # and the longer stream written back


def test_hit_miss_and_key_sensitivity():
    assert _stored_draws() == 0  # nothing yet: miss
    montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS)
    assert _stored_draws() >= DRAWS  # hit
    assert _stored_draws(n=N + 1) == 0  # another n: miss
    assert _stored_draws(kind="pearson") == 0  # another statistic: miss
    nudged = LAW.copy()
    nudged[0] = np.nextafter(nudged[0], 1.0)  # the law's bytes differ in one ulp: miss
    assert _stored_draws(probs=nudged) == 0
    assert _stored_draws(kind="linear", scores=-np.log(LAW)) == 0


def test_key_includes_the_code_version(cache_dir):
    key = b"k" * 16
    v1 = nullcache.code_version(montecarlo.statistic)
    assert nullcache.entry_path(key, v1) != nullcache.entry_path(key, nullcache.code_version(montecarlo._Stream))
    assert nullcache.entry_path(key, v1) != nullcache.entry_path(b"j" * 16, v1)
    assert nullcache.entry_path(key, v1).parent == cache_dir / nullcache.SUBDIR


@pytest.mark.parametrize("damage", ["truncate", "flip_payload", "garbage", "bad_state", "empty"])
def test_a_corrupt_entry_is_detected_and_recomputed(cache_dir, monkeypatch, damage):
    want = _uncached(monkeypatch, lambda: montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS))
    montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS)
    (path,) = _entries(cache_dir)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 8 * 1000]
    elif damage == "flip_payload":
        data[-5] ^= 0x40  # one draw changed: the digest no longer matches
    elif damage == "garbage":
        data = bytearray(b"not an entry" * 10)
    elif damage == "bad_state":
        data = data.replace(b'"PCG64"', b'"PCG99"')
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert _stored_draws() == 0  # never trusted (and removed)
    _fresh()
    assert montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS) == want
    assert _stored_draws() >= DRAWS  # rewritten whole


def test_small_streams_are_not_stored(cache_dir):
    montecarlo.sequential_pvalue(FAR, "g", LAW, N, 1000)  # 27k draws x categories: cheaper to recompute
    assert _entries(cache_dir) == []


def test_size_is_bounded_least_recently_used_first(cache_dir, monkeypatch):
    montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS)
    (first,) = _entries(cache_dir)
    size = first.stat().st_size
    monkeypatch.setenv(nullcache.MAX_BYTES_ENV, str(int(size * 1.5)))  # room for one entry
    os.utime(first, (1, 1))  # long unused
    montecarlo.sequential_pvalue(FAR, "g", LAW, N + 1, DRAWS)
    (left,) = _entries(cache_dir)
    assert left != first and not first.exists()


def test_bad_size_bound_is_a_config_error(monkeypatch):
    monkeypatch.setenv(nullcache.MAX_BYTES_ENV, "1GB")
    with pytest.raises(ConfigError, match="SPECVERIFY_CACHE_MAX_BYTES='1GB'.*number of bytes"):
        nullcache.max_bytes()


def test_an_unwritable_cache_never_fails_a_run(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(nullcache.CACHE_DIR_ENV, str(blocker))  # a file where the folder should be
    want = _uncached(monkeypatch, lambda: montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS))
    monkeypatch.setattr(nullcache, "_warned", False)
    assert montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS) == want
    assert "null-stream cache not written" in capsys.readouterr().err


_CHILD = """
import sys
from verifier.stats import montecarlo
from verifier.stats import nullcache
from tests.stats.test_nullcache import LAW, N, DRAWS, FAR, STORE_WORK
nullcache.MIN_STORE_WORK = STORE_WORK
print(repr(montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS)))
"""


def test_concurrent_runs_write_one_valid_entry(cache_dir, monkeypatch):
    want = _uncached(monkeypatch, lambda: montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs == [repr(want)] * 2
    assert len(_entries(cache_dir)) == 1 and not list((cache_dir / nullcache.SUBDIR).glob("*.tmp"))
    assert _stored_draws() >= DRAWS and montecarlo.sequential_pvalue(FAR, "g", LAW, N, DRAWS) == want


def test_stream_g_statistic_is_bit_identical_to_statistic():
    """The stream's table-driven G (montecarlo._Stream._g) equals montecarlo.statistic("g") bit for bit,
    on the ci law and on a law with tiny probs (many zero counts), so stored and older streams agree."""
    rng = np.random.default_rng(20261201)
    for probs, n in ((LAW, N), (rng.dirichlet(np.full(200, 0.05)), 300)):
        stream = montecarlo._Stream(1, "g", probs, n, None)
        counts = rng.multinomial(n, probs, size=5000)
        assert stream._g(counts).tobytes() == montecarlo.statistic("g", counts, probs).tobytes()


@pytest.mark.parametrize("command", ["run", "report"])
def test_no_cache_flag_turns_the_cache_off(command, monkeypatch):
    from verifier.cli import build_parser
    from verifier.cli.cmd_run import _no_cache

    words = [command, "--no-cache", "suites/ci.toml" if command == "run" else "some/run-dir"]
    args = build_parser(command).parse_args(words)
    monkeypatch.setenv(nullcache.NO_CACHE_ENV, "")  # restored after the test
    assert nullcache.enabled()
    _no_cache(args)
    assert not nullcache.enabled()
