"""``specverify bench stats``: time the whole statistics pass over N samples x C cells.

Synthetic samples of realistic shape (defaults: 100k samples, 48 cells = 6 prompts x 8
positions, vocab 500 with a Zipf(1.1) target law permuted per prompt).  Position-0 cells have a
fixed target law (known-p GOF with bootstrap TV and MDE, randomized PIT with KS and binned
chi-square, e-process over the stream); positions 1..7 have teacher-forced per-row target probs
(randomized PIT, KS and binned chi-square).  Then the suite-wide gate (Holm + Cauchy).  With
``--black-box`` every cell also gets a 2 x K permutation chi-square against a second arm.
Generating samples and per-row probs is not timed (that is the decoder's and scorer's job).

The DESIGN goal is statistics <= 5% of the time taken to sample the same tokens with the
reference decoder; pass that time with ``--sampling-seconds`` (from ``specverify bench
decoders``), or let ``--measure-sampling M`` measure it with ``verifier.bench.decoders``
(reference speculative decoder, shipped models, batch M, T new tokens; N x prompts / samples-per-s),
to print the ratio.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

HELP = "Time the statistics pass (GOF, PIT, e-process, gate) over N samples x C cells and compare with sampling time."

_LAW_POOL = 64  # distinct per-row target laws for later positions (materialised in chunks, untimed)
_CHUNK_ROWS = 20_000  # rows of per-row probs materialised at once: 20k x 500 x 8 B = 80 MB


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=100_000, metavar="N", help="Samples per cell. Default: 100000.")
    parser.add_argument("--cells", type=int, default=48, metavar="C", help="Cells (prompts x positions). Default: 48.")
    parser.add_argument("--positions", type=int, default=8, metavar="T", help="Positions per prompt. Default: 8.")
    parser.add_argument("--vocab", type=int, default=500, metavar="V", help="Vocabulary size. Default: 500.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the synthetic samples. Default: 0.")
    parser.add_argument("--black-box", action="store_true", help="Also time 2 x K permutation chi-square per cell.")
    parser.add_argument("--sampling-seconds", type=float, default=None, metavar="S",
                        help="Seconds the reference decoder takes to sample the same tokens (from 'specverify bench decoders'); prints the ratio.")
    parser.add_argument("--measure-sampling", type=int, default=0, metavar="M",
                        help="Measure the reference speculative decoder's samples/s with 'bench decoders' code (shipped models, T=1) "
                             "at batch M and T new tokens, and convert to the time for N samples x (C / T) prompts. Default: 0 (off).")
    parser.add_argument("--out", default=None, metavar="PATH", help="Also write the figures as JSON. Default: none.")


def _zipf(vocab: int, s: float = 1.1) -> np.ndarray:
    w = 1.0 / np.arange(1, vocab + 1) ** s
    return w / w.sum()


SAMPLING_K = 2  # num_draft_tokens of the reference decoder timed by --measure-sampling (best for the shipped pair)


def _measure_sampling(batch: int, positions: int, seed: int) -> tuple[float, dict]:
    """Speculative samples/s of the reference decoder, measured by ``verifier.bench.decoders.bench_decoders``
    (shipped models, k = SAMPLING_K, T = 1) at batch ``batch`` and ``positions`` new tokens; returns (samples/s, rows)."""
    from verifier.bench.decoders import bench_decoders

    figures = bench_decoders(batches=(batch,), num_draft_tokens=(SAMPLING_K,), max_new_tokens=positions, repeats=1, seed=seed)
    spec = next(r for r in figures["rows"] if str(r["decoder"]).startswith("speculative"))
    return float(spec["samples_per_s"]), {"settings": figures["settings"], "rows": figures["rows"]}


def run(args: argparse.Namespace) -> int:
    """Time the pass; an allocation failure is a :class:`~verifier.errors.ResourceError` (exit 2), never exit 1 (bias)."""
    from verifier.errors import ResourceError

    try:
        return _run(args)
    except MemoryError as exc:
        raise ResourceError(f"bench stats ran out of memory at --samples={args.samples} --vocab={args.vocab} "
                            f"({exc}); allowed: a smaller --samples or --vocab, or a machine with more memory") from None


def _run(args: argparse.Namespace) -> int:
    from verifier.bench._common import machine_facts
    from verifier.runner.memory import rows_per_batch
    from verifier.stats import adjust, e_process, gof_test, pit_chi2_test, pit_ks_test, randomized_pit, token_counts, two_sample_chi2_test

    rng = np.random.default_rng(args.seed)
    base = _zipf(args.vocab)
    timers: dict[str, float] = {}
    counts_of: dict[str, int] = {}

    def timed(name, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        timers[name] = timers.get(name, 0.0) + time.perf_counter() - t0
        counts_of[name] = counts_of.get(name, 0) + 1
        return out

    cell_alpha = 1e-3 / 2 / args.cells  # Holm's smallest threshold in a 1e-3 gate, as the runner uses it
    results = []
    stat_rng = np.random.default_rng(args.seed + 1)  # independent of the synthetic "decoder"
    for cell in range(args.cells):
        prompt, position = divmod(cell, args.positions)
        law = rng.permutation(base)
        if position == 0:
            tokens = rng.choice(args.vocab, size=args.samples, p=law)
            counts = timed("token counts", token_counts, tokens, args.vocab)
            results.append(timed("GOF (Pearson, pooled, TV CI, MDE)", gof_test, counts, law, alpha=cell_alpha, rng=stat_rng))
            u, _ = timed("randomized PIT (fixed law)", randomized_pit, tokens, law, stat_rng)
            results.append(timed("PIT KS", pit_ks_test, u))
            results.append(timed("PIT binned chi-square", pit_chi2_test, u))
            results.append(timed("e-process", e_process, tokens, law, alpha=cell_alpha))
        else:
            laws = np.stack([rng.permutation(base) for _ in range(_LAW_POOL)])
            which = rng.integers(_LAW_POOL, size=args.samples)
            cum = laws.cumsum(axis=1)
            draws = rng.random(args.samples)
            tokens = np.empty(args.samples, dtype=np.int64)  # inverse CDF per law: O(n log V), never an n x V array
            for j in range(_LAW_POOL):
                mine = which == j
                tokens[mine] = np.searchsorted(cum[j], draws[mine], side="left")
            tokens = np.minimum(tokens, args.vocab - 1)
            us = []
            chunk = rows_per_batch(args.vocab * 8 * 3, cap=_CHUNK_ROWS)  # rows x V float64 probs + the PIT's temporaries
            for s in range(0, args.samples, chunk):
                rows = laws[which[s:s + chunk]]  # materialised outside the timer (the scorer's output)
                us.append(timed("randomized PIT (per-row probs)", randomized_pit, tokens[s:s + chunk], rows, stat_rng)[0])
            u = np.concatenate(us)
            counts_of["randomized PIT (per-row probs)"] -= len(us) - 1
            results.append(timed("PIT KS", pit_ks_test, u))
            results.append(timed("PIT binned chi-square", pit_chi2_test, u))
        if args.black_box:  # second arm ("plain sampling") from the same law as the first
            if position == 0:
                other = rng.multinomial(args.samples, law)
            else:
                mix = np.bincount(rng.integers(_LAW_POOL, size=args.samples), minlength=_LAW_POOL)
                other = sum(rng.multinomial(int(m), laws[j]) for j, m in enumerate(mix))
            results.append(timed("two-sample chi-square (permutation)", two_sample_chi2_test, np.bincount(tokens, minlength=args.vocab), other, alpha=cell_alpha, rng=stat_rng))
    gate = timed("gate (Holm + Cauchy over all tests)", adjust, results, alpha=1e-3, mode="gate", dependent=True)
    total = sum(timers.values())

    print(f"statistics pass: {args.samples} samples x {args.cells} cells ({args.cells // args.positions} prompts x {args.positions} positions), "
          f"vocab {args.vocab}, cell alpha {cell_alpha:.3g}")
    width = max(len(k) for k in timers)
    for name, sec in timers.items():
        print(f"  {name:<{width}}  {sec:8.3f} s  ({counts_of[name]} calls, {1e3 * sec / max(counts_of[name], 1):.1f} ms each)")
    print(f"  {'TOTAL':<{width}}  {total:8.3f} s  ({len(results)} tests; gate rejected: {int(gate.rejected.sum())} — synthetic data is unbiased)")
    figures = {"samples": args.samples, "cells": args.cells, "vocab": args.vocab, "positions": args.positions,
               "stats_seconds": total, "components": timers, "machine": machine_facts()}
    if args.measure_sampling and not args.sampling_seconds:
        rate, detail = _measure_sampling(args.measure_sampling, args.positions, args.seed)
        prompts = max(args.cells // args.positions, 1)
        args.sampling_seconds = args.samples * prompts / rate
        figures.update(sampling_measured=detail)
        for row in detail["rows"]:
            print(f"  {row['decoder']:<16} batch {row['batch']}: {row['samples_per_s']:.1f} samples/s (verifier.bench.decoders)")
        print(f"reference speculative decoder (k={SAMPLING_K}, batch {args.measure_sampling}, "
              f"{args.positions} new tokens): {rate:.1f} samples/s -> {args.samples} samples x {prompts} prompts: {args.sampling_seconds:.1f} s")
    if args.sampling_seconds:
        ratio = total / args.sampling_seconds
        figures.update(sampling_seconds=args.sampling_seconds, ratio=ratio)
        print(f"sampling time: {args.sampling_seconds:.3f} s -> statistics / sampling = {100 * ratio:.2f}% (goal <= 5%)")
    else:
        print("sampling time: not given; run 'specverify bench decoders' and pass its time for the same tokens with --sampling-seconds S")
    if args.out:
        from verifier.bench._common import write_out

        write_out(args.out, json.dumps(figures, indent=2, default=str))
    return 0
