"""``specverify bench gpu``: the ``bench scale`` grid on CUDA in bf16, then decoder throughput.

A prepared script for a machine with an NVIDIA GPU, kept under 10 minutes as one command:

1. **Scale grid** (issue 17 part 6): the grid of ``specverify bench scale`` -- the default cells,
   reference decoder, k = 2, 3 new tokens, T = 1, on random-init tiny-compute Llama pairs of real
   vocabularies (:func:`verifier.bench.scale.measure`, each point a ``specverify run`` in a child
   process) -- with ``device = "cuda"``, ``dtype = "bfloat16"``: V x n in :data:`GRID` (384..256k,
   2k..100k), in that order, within ``--budget`` seconds (default 420): each point gets the time
   left as its timeout and a point that would start with under :data:`MIN_POINT_S` left is
   recorded "not run (budget)".
2. **Throughput**: two Llama models with random weights (no download), a target of about 100M
   parameters (hidden 640, 12 layers, vocab 32000) and a draft of about 10M (hidden 256, 2 layers,
   tied embeddings, same vocab), in bfloat16; for every batch size in ``--batches`` (default 1, 4,
   16, 64, 256, 1024, 4096) it times ``AncestralDecoder`` (plain batched sampling) and
   ``SpeculativeDecoder`` (k = ``--k``) generating ``--max-new-tokens`` tokens at T = 1, with
   ``torch.cuda.synchronize`` around the timed call and ``torch.cuda.max_memory_allocated`` as the
   peak.  An out-of-memory batch is recorded, not fatal.  Random weights make target and draft
   both near-uniform, so the acceptance rate is not representative of trained models.

``--device cpu`` is a dry run of the same code path (a test runs it): the grid :data:`DRY_RUN_GRID`,
and throughput with :data:`DRY_RUN_TARGET` / :data:`DRY_RUN_DRAFT` (vocab 256) at batch 1 and 4,
float32.  With ``--device cuda`` (the default) and no CUDA it refuses cleanly: one line on stderr,
exit code 2 (``EXIT_USAGE``), nothing run.

Run: ``specverify bench gpu [--budget 420] [--batches 1 64 4096] [--out gpu.json]``;
``specverify bench gpu --device cpu`` (dry run).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from verifier.bench._common import machine_facts, md_table, write_out
from verifier.errors import EXIT_USAGE

__all__ = ["HELP", "TARGET_CONFIG", "DRAFT_CONFIG", "GRID", "DRY_RUN_GRID", "build_models", "scale_grid", "gpu_throughput",
           "register", "run"]

HELP = "The bench-scale grid (V 384..256k) on CUDA/bf16 within a time budget, then decoder throughput batch 1..4096 (needs a GPU; --device cpu: dry run)."
VOCAB = 32_000
TARGET_CONFIG = dict(vocab_size=VOCAB, hidden_size=640, intermediate_size=1728, num_hidden_layers=12,
                     num_attention_heads=10, num_key_value_heads=10, max_position_embeddings=2048)  # ~100M params
DRAFT_CONFIG = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                    tie_word_embeddings=True)  # ~10M params
DEFAULT_BATCHES = (1, 4, 16, 64, 256, 1024, 4096)
PROMPT_IDS = (1, 415, 2936, 9060, 285, 1142)  # any ids < VOCAB; random weights give them no meaning
GRID = ((384, 2_000), (32_000, 2_000), (128_256, 2_000), (256_000, 2_000), (32_000, 20_000), (128_256, 20_000),
        (256_000, 20_000), (256_000, 100_000))  # (V, n), cheapest first: the budget cuts the tail
DRY_RUN_GRID = ((256, 200),)
DEFAULT_BUDGET_S = 420.0  # grid seconds; + the throughput table (~1-2 min on a datacenter GPU) stays under 10 min
MIN_POINT_S = 30.0  # a grid point is not started with less time left
DRY_RUN_VOCAB = 256
DRY_RUN_TARGET = dict(vocab_size=DRY_RUN_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128)
DRY_RUN_DRAFT = dict(DRY_RUN_TARGET, hidden_size=32, intermediate_size=64, tie_word_embeddings=True)
DRY_RUN_BATCHES = (1, 4)


def build_models(device: str = "cuda", dtype: str = "bfloat16", seed: int = 0, configs=(TARGET_CONFIG, DRAFT_CONFIG)):
    """Random-init target (~100M) and draft (~10M) Llama models (or ``configs``) on ``device`` in ``dtype``, eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    models = []
    for cfg in configs:
        m = LlamaForCausalLM(LlamaConfig(bos_token_id=1, eos_token_id=2, **cfg))
        models.append(m.to(device=device, dtype=getattr(torch, dtype)).eval())
    return tuple(models)


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def scale_grid(grid=GRID, *, device: str = "cuda", dtype: str = "bfloat16", budget: float = DEFAULT_BUDGET_S,
               work_dir: Path | None = None, progress=None) -> list[dict[str, Any]]:
    """Run the ``bench scale`` grid points in order within ``budget`` seconds (module docstring).

    Returns
    -------
    list of dict
        :func:`verifier.bench.scale.measure` rows; a point not started for lack of time has
        ``"not_run": "budget"``.
    """
    from verifier.bench.scale import measure

    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="specverify-gpu-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    t0, rows = time.perf_counter(), []
    for vocab, samples in grid:
        left = budget - (time.perf_counter() - t0)
        if left < MIN_POINT_S:
            rows.append({"vocab": vocab, "samples": samples, "device": device, "not_run": "budget"})
        else:
            rows.append(measure(vocab, samples, work, device=device, dtype=dtype, timeout=left))
        if progress:
            progress(json.dumps(rows[-1]))
    return rows


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def gpu_throughput(batches=DEFAULT_BATCHES, max_new_tokens: int = 64, num_draft_tokens: int = 4, dtype: str = "bfloat16",
                   seed: int = 0, progress=None, device: str = "cuda", configs=(TARGET_CONFIG, DRAFT_CONFIG)) -> dict[str, Any]:
    """Time plain and speculative decoding at each batch size on ``device`` (see the module docstring)."""
    import torch

    from verifier.decoders import AncestralDecoder, SpeculativeDecoder
    from verifier.sampling import SamplingConfig

    cuda = device.startswith("cuda")
    target, draft = build_models(device, dtype, seed, configs)
    sampling = SamplingConfig(temperature=1.0)
    decoders = {"plain": AncestralDecoder(target, eos_token_id=None),
                "speculative": SpeculativeDecoder(target, draft, num_draft_tokens)}
    vocab = configs[0]["vocab_size"]
    prompt = [t % vocab for t in PROMPT_IDS]
    rows = []
    for b in batches:
        for name, dec in decoders.items():
            row: dict[str, Any] = {"decoder": name, "batch": b}
            try:
                dec.generate(prompt, min(b, 4), 4, sampling, seed + 1)  # warm-up (kernels, allocator)
                _sync(device)
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                out = dec.generate(prompt, b, max_new_tokens, sampling, seed)
                _sync(device)
                sec = time.perf_counter() - t0
                tokens = int((torch.as_tensor(out) != -1).sum())
                stats = getattr(dec, "last_stats", None)
                row.update(seconds=sec, samples_per_s=b / sec, tokens_per_s=tokens / sec,
                           peak_cuda_mib=torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0,
                           acceptance_rate=float(stats.acceptance_rate) if name == "speculative" and stats is not None else None)
            except torch.cuda.OutOfMemoryError as exc:
                row["error"] = f"out of memory: {str(exc).splitlines()[0]}"
                torch.cuda.empty_cache()
            rows.append(row)
            if progress:
                progress(f"  batch {b:>5} {name:<12} " + (f"{row['samples_per_s']:.1f} samples/s, {row['tokens_per_s']:.0f} tokens/s, "
                         f"peak {row['peak_cuda_mib']:.0f} MiB" if "error" not in row else row["error"]))
    return {"target_params": _params(target), "draft_params": _params(draft), "dtype": dtype, "vocab": vocab, "device": device,
            "max_new_tokens": max_new_tokens, "num_draft_tokens": num_draft_tokens, "rows": rows}


def render_grid(rows: list[dict[str, Any]]) -> str:
    """The scale grid as a markdown table (as ``bench scale``, with points not run for lack of time)."""
    table = []
    for r in rows:
        st = r.get("stage_seconds", {})
        if r.get("not_run"):
            table.append([f"{r['vocab']:,}", f"{r['samples']:,}"] + ["-"] * 7 + [f"not run ({r['not_run']})"])
            continue
        table.append([f"{r['vocab']:,}", f"{r['samples']:,}", f"{r['wall_s']}{' (timeout)' if r.get('timed_out') else ''}",
                      st.get("models", "-"), st.get("sampling", "-"), st.get("statistics", "-"), st.get("reports", "-"),
                      r["peak_rss_gib"], r["exit_code"], r.get("verdict", "-")])
    return md_table(["V", "n", "wall s", "models s", "sampling s", "statistics s", "reports s", "peak RSS GiB", "exit",
                     "verdict"], table) + "\n"


def render_markdown(res: dict[str, Any]) -> str:
    head = (f"Random-init Llama target {res['target_params'] / 1e6:.0f}M / draft {res['draft_params'] / 1e6:.1f}M params, "
            f"{res['dtype']}, T=1, {res['max_new_tokens']} new tokens, k={res['num_draft_tokens']}.\n\n")
    by = {(r["batch"], r["decoder"]): r for r in res["rows"]}
    table = []
    for b in sorted({r["batch"] for r in res["rows"]}):
        p, s = by.get((b, "plain"), {}), by.get((b, "speculative"), {})
        ratio = s["samples_per_s"] / p["samples_per_s"] if "samples_per_s" in s and "samples_per_s" in p else None
        table.append([b, f"{p['samples_per_s']:.1f}" if "samples_per_s" in p else p.get("error", "-"),
                      f"{s['samples_per_s']:.1f}" if "samples_per_s" in s else s.get("error", "-"),
                      f"{ratio:.2f}x" if ratio else "-", f"{s.get('acceptance_rate') or 0:.3f}",
                      f"{max(p.get('peak_cuda_mib', 0), s.get('peak_cuda_mib', 0)):.0f}"])
    return head + md_table(["batch", "plain samples/s", "speculative samples/s", "spec / plain", "acceptance",
                            "peak CUDA MiB"], table) + "\n"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cuda: the benchmark; cpu: a dry run of the same code path (tiny grid and models). Default: cuda.")
    parser.add_argument("--budget", type=float, default=None, metavar="S",
                        help=f"Seconds for the scale grid (points left are not run). Default: {DEFAULT_BUDGET_S:g} (cuda), 300 (cpu).")
    parser.add_argument("--no-grid", action="store_true", help="Skip the scale grid (throughput only).")
    parser.add_argument("--batches", type=int, nargs="+", default=None, metavar="B",
                        help=f"Batch sizes. Default: {' '.join(map(str, DEFAULT_BATCHES))} (cuda), "
                             f"{' '.join(map(str, DRY_RUN_BATCHES))} (cpu).")
    parser.add_argument("--max-new-tokens", type=int, default=None, metavar="L", help="Tokens per sample. Default: 64 (cuda), 4 (cpu).")
    parser.add_argument("--k", type=int, default=4, help="num_draft_tokens. Default: 4.")
    parser.add_argument("--dtype", default=None, choices=("bfloat16", "float16", "float32"),
                        help="Default: bfloat16 (cuda), float32 (cpu).")
    parser.add_argument("--work-dir", default=None, metavar="DIR", help="Grid checkpoints and runs. Default: a temporary folder.")
    parser.add_argument("--out", default=None, metavar="PATH", help="Also write the figures as JSON.")


def run(args: argparse.Namespace) -> int:
    cpu = args.device == "cpu"
    if not cpu:
        try:
            import torch

            has_cuda = torch.cuda.is_available()
        except ImportError:
            has_cuda = False
        if not has_cuda:
            print("specverify bench gpu: no CUDA device is available (torch.cuda.is_available() is False); "
                  "this benchmark needs an NVIDIA GPU (or --device cpu for a dry run) -- nothing was run", file=sys.stderr)
            return EXIT_USAGE
    dtype = args.dtype or ("float32" if cpu else "bfloat16")
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    res: dict[str, Any] = {"device": args.device, "dtype": dtype, "grid": []}
    if not args.no_grid:
        res["grid"] = scale_grid(DRY_RUN_GRID if cpu else GRID, device=args.device, dtype=dtype,
                                 budget=args.budget if args.budget is not None else (300.0 if cpu else DEFAULT_BUDGET_S),
                                 work_dir=args.work_dir, progress=log)
    res["throughput"] = gpu_throughput(args.batches or (DRY_RUN_BATCHES if cpu else DEFAULT_BATCHES),
                                       args.max_new_tokens or (4 if cpu else 64), args.k, dtype, progress=log,
                                       device=args.device,
                                       configs=(DRY_RUN_TARGET, DRY_RUN_DRAFT) if cpu else (TARGET_CONFIG, DRAFT_CONFIG))
    res["machine"] = machine_facts()
    parts = []
    if res["grid"]:
        parts.append(f"**Scale grid** (`bench scale` suite on {args.device}/{dtype}):\n\n" + render_grid(res["grid"]))
    parts.append("**Throughput**: " + render_markdown(res["throughput"]))
    print("\n".join(parts))
    if args.out:
        write_out(args.out, json.dumps(res, indent=1))
    return 0
