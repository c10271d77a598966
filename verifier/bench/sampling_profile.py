"""``specverify bench sampling-profile``: where the reference speculative decoder's time goes.

Builds the random-init Llama pair of ``specverify bench scale`` (:func:`verifier.bench.scale.build_pair`;
target hidden 64 x 2 layers, draft hidden 64 x 1 layer, vocabulary ``--vocab``, default 128,256) and
runs :class:`verifier.decoders.SpeculativeDecoder` (k = ``--k``, default 2) for ``--tokens`` new
tokens (default 3) at T = 1 on one batch of ``--batch`` rows (default 1024), ``--repeats`` times
(default 3, after one warm-up call).  Every call of the parts below is timed with a wall clock
(exclusive: a part's time excludes the parts it calls) and the figures are the median over the repeats:

* ``forward`` -- the model forward passes (``CacheRunner.append``: target and draft, output layer included);
* ``processed_probs`` -- logits -> float64 processed probs (:func:`verifier.sampling.processed_probs`);
* ``verify`` -- the verification kernel minus its draw (:func:`verifier.decoders.verify_chain`);
* ``sample`` -- inverse-CDF draws (:func:`verifier.decoders.kernels.sample_from_probs`);
* ``other`` -- the rest of ``generate`` (rollback, pending tokens, output writes, row drops).

``--precision`` picks the decoder's precision (``auto``: float32 above V = 65,536, so float32 at the
default V; the float32 path's parts are timed under the same names).  ``--micro`` adds CPU ns per
element of exp / softmax / sums in float32 and float64 and of the output layer (:func:`micro_floor`),
and the *exp floor*: one float32 exp per logit turned into probs, over the forward's CPU.

Wall and process CPU time (both threads) are reported; on a shared machine the CPU figures are the
steadier.  Harness overhead = (generate - forward) / forward; issue 17's goal is <= 25 % at batch
1024, V = 128k.
Run: ``specverify bench sampling-profile [--vocab 128256] [--batch 1024] [--out profile.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from verifier.bench._common import write_out

__all__ = ["HELP", "micro_floor", "profile_generate", "register", "run"]

HELP = "Split of the reference speculative decoder's time: forward passes vs processed probs, verify, draws (random-init Llama pair)."

PARTS = ("forward", "processed_probs", "verify", "sample", "other")


@contextmanager
def _timed_parts(totals: dict[str, float]):
    """Wrap the decoder's parts with exclusive wall-clock timers that add into ``totals``."""
    import verifier.decoders._runner as runner_mod
    import verifier.decoders.kernels as kernels_mod
    import verifier.decoders.speculative as spec_mod

    stack: list[list] = []  # [name, wall start, CPU start, wall in children, CPU in children]

    def wrap(name, fn):
        def timed(*args, **kwargs):
            stack.append([name, time.perf_counter(), time.process_time(), 0.0, 0.0])
            try:
                out = fn(*args, **kwargs)
                if name == "forward":  # logits produced: rows x positions x V
                    totals["elements:forward"] = totals.get("elements:forward", 0) + out.numel()
                elif name == "processed_probs":  # logits turned into probs (_fast32._weights: logits[rows] when given)
                    rows = args[3] if len(args) > 3 and args[3] is not None else None
                    totals["elements:processed_probs"] = totals.get("elements:processed_probs", 0) + (
                        args[0].numel() if rows is None else rows.numel() * args[0].shape[-1])
                return out
            finally:
                _, start, cpu_start, child, cpu_child = stack.pop()
                spent, cpu = time.perf_counter() - start, time.process_time() - cpu_start
                totals[name] = totals.get(name, 0.0) + spent - child
                totals["cpu:" + name] = totals.get("cpu:" + name, 0.0) + cpu - cpu_child
                if stack:
                    stack[-1][3] += spent
                    stack[-1][4] += cpu
        return timed

    saved = [(runner_mod.CacheRunner, "append", runner_mod.CacheRunner.append),
             (spec_mod, "processed_probs", spec_mod.processed_probs),
             (kernels_mod, "_chain", kernels_mod._chain),
             (spec_mod, "sample_from_probs", spec_mod.sample_from_probs),
             (kernels_mod, "sample_from_probs", kernels_mod.sample_from_probs)]
    try:  # the reference decoder's fused round (verify pass over row blocks), when present
        import verifier.decoders._fused as fused_mod
        saved += [(fused_mod, "processed_probs", fused_mod.processed_probs),
                  (fused_mod, "sample_from_probs", fused_mod.sample_from_probs),
                  (fused_mod, "verify_round", fused_mod.verify_round)]
    except ImportError:
        pass
    try:  # the float32 path (precision = "float32"): processed logits + softmax + block sums, draws, laws
        import verifier.decoders._fast32 as fast_mod
        saved += [(fast_mod, "_weights", fast_mod._weights), (fast_mod, "inverse_cdf", fast_mod.inverse_cdf),
                  (fast_mod, "verify_round", fast_mod.verify_round)]
    except ImportError:
        pass
    names = {"append": "forward", "processed_probs": "processed_probs", "_weights": "processed_probs", "_chain": "verify",
             "verify_round": "verify", "sample_from_probs": "sample", "inverse_cdf": "sample"}
    try:
        for owner, attr, fn in saved:
            setattr(owner, attr, wrap(names[attr], fn))
        yield
    finally:
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)


def profile_generate(vocab: int, batch: int, *, k: int = 2, tokens: int = 3, repeats: int = 3,
                     work_dir: Path | None = None, threads: int | None = None, precision: str = "auto") -> dict[str, Any]:
    """Time one ``SpeculativeDecoder.generate`` call per repeat and split it into :data:`PARTS`.

    Returns
    -------
    dict
        ``vocab, batch, k, tokens, repeats, threads, load_average``; ``seconds`` and ``cpu_seconds``
        (part -> median wall / process CPU seconds per call, plus ``generate``); ``harness_over_forward``
        and ``cpu_harness_over_forward`` ((generate - forward) / forward, wall and CPU).
    """
    import torch

    from verifier.bench.scale import build_pair
    from verifier.decoders.speculative import SpeculativeDecoder
    from verifier.models import load_model
    from verifier.sampling import SamplingConfig

    if threads:
        torch.set_num_threads(threads)
    work = work_dir or Path(tempfile.mkdtemp(prefix="specverify-sprof-"))
    tpath, dpath = build_pair(vocab, work)
    target, draft = load_model(tpath), load_model(dpath)
    decoder = SpeculativeDecoder(target, draft, num_draft_tokens=k, precision=precision)
    sampling = SamplingConfig(temperature=1.0)
    decoder.generate([1, 2, 3], batch, tokens, sampling, seed=0)  # warm-up
    runs = []
    for r in range(repeats):
        totals: dict[str, float] = {}
        with _timed_parts(totals):
            t0, c0 = time.perf_counter(), time.process_time()
            decoder.generate([1, 2, 3], batch, tokens, sampling, seed=r + 1)
            totals["generate"], totals["cpu:generate"] = time.perf_counter() - t0, time.process_time() - c0
        for pre in ("", "cpu:"):
            totals[pre + "other"] = totals[pre + "generate"] - sum(totals.get(pre + p, 0.0) for p in PARTS if p != "other")
        runs.append(totals)
    out: dict[str, Any] = {"vocab": vocab, "batch": batch, "k": k, "tokens": tokens, "repeats": repeats,
                           "precision": decoder.settings["precision"],
                           "threads": torch.get_num_threads(), "load_average": list(os.getloadavg())}
    out["elements"] = {p: int(statistics.median(t.get("elements:" + p, 0) for t in runs)) for p in ("forward", "processed_probs")}
    for pre, key in (("", "seconds"), ("cpu:", "cpu_seconds")):
        med = {p: statistics.median(t.get(pre + p, 0.0) for t in runs) for p in (*PARTS, "generate")}
        out[key] = {p: round(v, 4) for p, v in med.items()}
        out[key.replace("seconds", "harness_over_forward")] = round((med["generate"] - med["forward"]) / med["forward"], 3)
    return out


def micro_floor(vocab: int, *, rows: int = 8, repeats: int = 20, threads: int | None = None) -> dict[str, float]:
    """CPU nanoseconds per element of the operations that bound the per-step work over V.

    Each op runs ``repeats`` times on ``rows`` x ``vocab`` float32 logits of std 1 (after one warm-up);
    ``output layer`` is the ``(256, 64) @ (64, vocab)`` matmul of the bench pair's lm_head, per logit
    produced.  The float32 path needs at least one exp (inside softmax) per logit of every
    target and draft row it processes, so ``softmax f32`` against ``output layer`` bounds its ratio to
    the forward passes from below.

    Returns
    -------
    dict
        Op name -> CPU ns per element (median of 3 batches of ``repeats``).
    """
    import torch

    if threads:
        torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, vocab, generator=g)
    x64 = x.double()
    hidden, head = torch.randn(256, 64, generator=g), torch.randn(vocab, 64, generator=g)  # 256 rows: a batch's matmul
    blocks = x[:, :vocab // 256 * 256].reshape(rows, -1, 256)
    ops = {
        "output layer (hidden 64, 256 rows)": lambda: hidden @ head.T,
        "exp f32": lambda: torch.exp(x),
        "exp f64": lambda: torch.exp(x64),
        "softmax f32": lambda: torch.softmax(x, -1),
        "softmax f64 (from f32 logits)": lambda: torch.softmax(x.double(), -1),
        "logsumexp f32": lambda: torch.logsumexp(x, -1),
        "amax f32": lambda: x.amax(-1),
        "sum f32": lambda: x.sum(-1),
        "block sums f32 (256 wide)": lambda: blocks.sum(-1),
        "cumsum f32": lambda: torch.cumsum(x, -1),
        "cumsum f64": lambda: torch.cumsum(x64, -1),
    }
    out = {}
    for name, fn in ops.items():
        elements = (256 if name.startswith("output layer") else rows) * vocab
        fn()
        per = []
        for _ in range(3):
            c0 = time.process_time()
            for _ in range(repeats):
                fn()
            per.append((time.process_time() - c0) / repeats / elements * 1e9)
        out[name] = round(statistics.median(per), 3)
    return out


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab", type=int, default=128_256, metavar="V", help="Vocabulary size. Default: 128256.")
    parser.add_argument("--batch", type=int, default=1024, metavar="B", help="Rows per generate call. Default: 1024.")
    parser.add_argument("--k", type=int, default=2, help="Draft tokens per round. Default: 2.")
    parser.add_argument("--tokens", type=int, default=3, help="New tokens per row. Default: 3.")
    parser.add_argument("--repeats", type=int, default=3, help="Timed calls (median reported). Default: 3.")
    parser.add_argument("--threads", type=int, default=None, help="torch threads. Default: torch's.")
    parser.add_argument("--work-dir", default=None, metavar="DIR", help="Checkpoints. Default: a temporary folder.")
    parser.add_argument("--precision", choices=("auto", "float64", "float32"), default="auto",
                        help="The decoder's precision (auto: float32 above V = 65,536). Default: auto.")
    parser.add_argument("--micro", action="store_true",
                        help="Also time the per-element floor: exp, softmax, sums in float32/float64 and the output layer.")
    parser.add_argument("--out", default=None, metavar="FILE", help="Also write the result as JSON.")


def run(args: argparse.Namespace) -> int:
    res = profile_generate(args.vocab, args.batch, k=args.k, tokens=args.tokens, repeats=args.repeats,
                           work_dir=Path(args.work_dir) if args.work_dir else None, threads=args.threads,
                           precision=args.precision)
    if args.micro:
        ns = res["ns_per_element"] = micro_floor(args.vocab, threads=args.threads)
        # one exp per logit turned into probs, against the forward's measured CPU: the float32 path's floor
        res["exp_floor_over_forward"] = round(res["elements"]["processed_probs"] * ns["exp f32"] * 1e-9
                                              / res["cpu_seconds"]["forward"], 3)
    print(json.dumps(res))
    s, c = res["seconds"], res["cpu_seconds"]
    print("| part | wall s per call | / forward | CPU s per call | / forward |\n|---|---|---|---|---|")
    for p in PARTS:
        print(f"| {p} | {s[p]:.3f} | {s[p] / s['forward']:.2f} | {c[p]:.3f} | {c[p] / c['forward']:.2f} |")
    print(f"| generate | {s['generate']:.3f} | harness {res['harness_over_forward']:.0%} | {c['generate']:.3f} | "
          f"harness {res['cpu_harness_over_forward']:.0%} |")
    if args.micro:
        print("| op (rows of V float32 logits) | CPU ns per element |\n|---|---|")
        for op, ns in res["ns_per_element"].items():
            print(f"| {op} | {ns:.2f} |")
        e = res["elements"]
        print(f"logits per call: forward {e['forward']:,}, turned into probs {e['processed_probs']:,}; one exp f32 each: "
              f"{res['exp_floor_over_forward']:.0%} of the forward's CPU (the floor of harness / forward)")
    if args.out:
        write_out(args.out, json.dumps(res, indent=1))
    return 0
