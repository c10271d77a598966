"""``specverify bench gpu``: decoder throughput on CUDA in bf16 with larger random-init models.

A prepared script for a machine with an NVIDIA GPU (none was lent when this was written, so its
figures are not in ``reports/benchmarks.md``).  It builds two Llama models with random weights
(no download): a target of about 100M parameters (hidden 640, 12 layers, vocab 32000) and a draft
of about 10M (hidden 256, 2 layers, tied embeddings, same vocab), casts them to bfloat16 on
``cuda``, and for every batch size in ``--batches`` (default 1, 4, 16, 64, 256, 1024, 4096) times
``AncestralDecoder`` (plain batched sampling) and ``SpeculativeDecoder`` (k = ``--k``) generating
``--max-new-tokens`` tokens at T = 1, with ``torch.cuda.synchronize`` around the timed call and
``torch.cuda.max_memory_allocated`` as the peak.  An out-of-memory batch is recorded, not fatal.
Random weights make target and draft both near-uniform, so the acceptance rate is not
representative of trained models; the figures measure the decoding machinery.

Without CUDA it refuses cleanly: one line on stderr, exit code 2 (``EXIT_USAGE``), nothing run.

Run: ``specverify bench gpu [--batches 1 64 4096] [--max-new-tokens 64] [--k 4] [--out gpu.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from verifier.bench._common import machine_facts, md_table
from verifier.errors import EXIT_USAGE

__all__ = ["HELP", "TARGET_CONFIG", "DRAFT_CONFIG", "build_models", "gpu_throughput", "register", "run"]

HELP = "Decoder throughput on CUDA/bf16 with random-init ~100M target and ~10M draft, batch 1..4096 (needs a GPU)."
VOCAB = 32_000
TARGET_CONFIG = dict(vocab_size=VOCAB, hidden_size=640, intermediate_size=1728, num_hidden_layers=12,
                     num_attention_heads=10, num_key_value_heads=10, max_position_embeddings=2048)  # ~100M params
DRAFT_CONFIG = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                    tie_word_embeddings=True)  # ~10M params
DEFAULT_BATCHES = (1, 4, 16, 64, 256, 1024, 4096)
PROMPT_IDS = (1, 415, 2936, 9060, 285, 1142)  # any ids < VOCAB; random weights give them no meaning


def build_models(device: str = "cuda", dtype: str = "bfloat16", seed: int = 0):
    """Random-init target (~100M) and draft (~10M) Llama models on ``device`` in ``dtype``, eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    models = []
    for cfg in (TARGET_CONFIG, DRAFT_CONFIG):
        m = LlamaForCausalLM(LlamaConfig(bos_token_id=1, eos_token_id=2, **cfg))
        models.append(m.to(device=device, dtype=getattr(torch, dtype)).eval())
    return tuple(models)


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def gpu_throughput(batches=DEFAULT_BATCHES, max_new_tokens: int = 64, num_draft_tokens: int = 4, dtype: str = "bfloat16",
                   seed: int = 0, progress=None) -> dict[str, Any]:
    """Time plain and speculative decoding at each batch size on ``cuda`` (see the module docstring)."""
    import torch

    from verifier.decoders import AncestralDecoder, SpeculativeDecoder
    from verifier.sampling import SamplingConfig

    target, draft = build_models("cuda", dtype, seed)
    sampling = SamplingConfig(temperature=1.0)
    decoders = {"plain": AncestralDecoder(target, eos_token_id=None),
                "speculative": SpeculativeDecoder(target, draft, num_draft_tokens)}
    rows = []
    for b in batches:
        for name, dec in decoders.items():
            row: dict[str, Any] = {"decoder": name, "batch": b}
            try:
                dec.generate(list(PROMPT_IDS), min(b, 4), 4, sampling, seed + 1)  # warm-up (kernels, allocator)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                out = dec.generate(list(PROMPT_IDS), b, max_new_tokens, sampling, seed)
                torch.cuda.synchronize()
                sec = time.perf_counter() - t0
                tokens = int((torch.as_tensor(out) != -1).sum())
                stats = getattr(dec, "last_stats", None)
                row.update(seconds=sec, samples_per_s=b / sec, tokens_per_s=tokens / sec,
                           peak_cuda_mib=torch.cuda.max_memory_allocated() / 2**20,
                           acceptance_rate=float(stats.acceptance_rate) if name == "speculative" and stats is not None else None)
            except torch.cuda.OutOfMemoryError as exc:
                row["error"] = f"out of memory: {str(exc).splitlines()[0]}"
                torch.cuda.empty_cache()
            rows.append(row)
            if progress:
                progress(f"  batch {b:>5} {name:<12} " + (f"{row['samples_per_s']:.1f} samples/s, {row['tokens_per_s']:.0f} tokens/s, "
                         f"peak {row['peak_cuda_mib']:.0f} MiB" if "error" not in row else row["error"]))
    return {"target_params": _params(target), "draft_params": _params(draft), "dtype": dtype, "vocab": VOCAB,
            "max_new_tokens": max_new_tokens, "num_draft_tokens": num_draft_tokens, "rows": rows}


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
    parser.add_argument("--batches", type=int, nargs="+", default=list(DEFAULT_BATCHES), metavar="B",
                        help=f"Batch sizes. Default: {' '.join(map(str, DEFAULT_BATCHES))}.")
    parser.add_argument("--max-new-tokens", type=int, default=64, metavar="L", help="Tokens per sample. Default: 64.")
    parser.add_argument("--k", type=int, default=4, help="num_draft_tokens. Default: 4.")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"), help="Default: bfloat16.")
    parser.add_argument("--out", default=None, metavar="PATH", help="Also write the figures as JSON.")


def run(args: argparse.Namespace) -> int:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        print("specverify bench gpu: no CUDA device is available (torch.cuda.is_available() is False); "
              "this benchmark needs an NVIDIA GPU -- nothing was run", file=sys.stderr)
        return EXIT_USAGE
    res = gpu_throughput(args.batches, args.max_new_tokens, args.k, args.dtype,
                         progress=lambda s: print(s, file=sys.stderr, flush=True))
    res["machine"] = machine_facts()
    print(render_markdown(res))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(res, fh, indent=1)
    return 0
