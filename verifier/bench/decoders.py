"""``specverify bench decoders``: samples/s and tokens/s of plain and speculative decoding.

Method.  Loads the target and draft once (default: the shipped checkpoints), then for each batch
size B (default 1, 64, 1024) times ``generate(prompt, B, max_new_tokens, T=1, seed)`` of

* ``plain``: :class:`verifier.decoders.AncestralDecoder` (batched target sampling, KV cache);
* ``speculative``: :class:`verifier.decoders.SpeculativeDecoder` (the reference, k drafts).

Batch 1 is a loop of ``--loop-samples`` calls with ``num_samples=1`` (what a caller without
batching does).  Plain and speculative alternate ``--repeats`` times and the median rate is
reported, so load drift on a shared machine hits both alike.  tokens/s counts emitted tokens
(EOS included, padding not).  Memory: on CUDA the peak allocated bytes of each measurement; on
CPU the process peak RSS after the measurement (monotone: it includes earlier measurements).
Goals (issue 3): batched speculative >= 0.5x batched plain samples/s and >= 20x the batch-1
speculative loop, at the largest batch, reported for each k (default k = 1 and 2: the shipped
draft's per-token acceptance is ~0.55, so each extra draft position mostly adds target work).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from verifier.bench._common import machine_facts, md_table, peak_rss_mib

__all__ = ["HELP", "GOAL_VS_PLAIN", "GOAL_VS_LOOP", "bench_decoders", "register", "run"]

HELP = "Samples/s and tokens/s of plain vs speculative decoding at batch 1, 64, 1024 on the shipped models."
GOAL_VS_PLAIN = 0.5  # batched speculative samples/s >= 0.5x batched plain
GOAL_VS_LOOP = 20.0  # batched speculative samples/s >= 20x a batch-1 speculative loop
DEFAULT_PROMPT = "def main():\n    "


def _measure(decoder, prompt: list[int], batch: int, max_new_tokens: int, seed: int, loop_samples: int, device: str) -> dict[str, Any]:
    import numpy as np
    import torch

    from verifier.sampling import SamplingConfig

    sampling = SamplingConfig(temperature=1.0)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    tokens, accepted, proposed = 0, 0, 0
    calls = [(batch, seed)] if batch > 1 else [(1, seed + i) for i in range(loop_samples)]
    for n, s in calls:
        out = decoder.generate(prompt, n, max_new_tokens, sampling, s)
        tokens += int(np.count_nonzero(out != -1))
        st = decoder.last_stats
        if st is not None and st.num_draft_tokens:
            accepted += int(st.accepted_counts.sum())
            proposed += st.num_draft_tokens * len(st.accepted_counts)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    samples = sum(n for n, _ in calls)
    res = {"samples": samples, "seconds": seconds, "samples_per_s": samples / seconds, "tokens_per_s": tokens / seconds,
           "acceptance_rate": accepted / proposed if proposed else None}
    res["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else peak_rss_mib()
    return res


def bench_decoders(target: str = "shipped:target", draft: str = "shipped:draft", batches=(1, 64, 1024),
                   num_draft_tokens=(1, 2), max_new_tokens: int = 64, repeats: int = 3, loop_samples: int = 16,
                   device: str = "cpu", dtype: str | None = None, threads: int | None = None,
                   prompt: str = DEFAULT_PROMPT, seed: int = 0) -> dict[str, Any]:
    """Run the benchmark and return ``{"machine", "settings", "rows", "goals"}`` (see module docstring)."""
    import torch

    from verifier.decoders import AncestralDecoder, SpeculativeDecoder
    from verifier.models import load_model, load_tokenizer
    from verifier.sampling import SamplingConfig

    if threads:
        torch.set_num_threads(threads)
    t_model, d_model = load_model(target, device, dtype), load_model(draft, device, dtype)
    prompt_ids = list(load_tokenizer(target).encode(prompt))
    ks = (num_draft_tokens,) if isinstance(num_draft_tokens, int) else tuple(num_draft_tokens)
    decoders = {"plain": AncestralDecoder(t_model)}
    decoders.update({f"speculative k={k}": SpeculativeDecoder(t_model, d_model, k) for k in ks})
    for dec in decoders.values():  # warm-up
        dec.generate(prompt_ids, 2, 4, SamplingConfig(), seed)
    rows = []
    for batch in batches:
        runs: dict[str, list] = {name: [] for name in decoders}
        for r in range(repeats):
            for name, dec in decoders.items():
                runs[name].append(_measure(dec, prompt_ids, batch, max_new_tokens, seed + 1000 * r, loop_samples, device))
        for name, results in runs.items():
            rate = statistics.median(x["samples_per_s"] for x in results)
            acc = [x["acceptance_rate"] for x in results if x["acceptance_rate"] is not None]
            rows.append({"decoder": name, "batch": batch, "samples_per_s": rate,
                         "tokens_per_s": statistics.median(x["tokens_per_s"] for x in results),
                         "acceptance_rate": statistics.median(acc) if acc else None,
                         "peak_mib": max(x["peak_mib"] for x in results), "repeats": len(results)})

    def rate(name, batch):
        return next(r["samples_per_s"] for r in rows if r["decoder"] == name and r["batch"] == batch)

    big = max(batches)
    goals = {"largest_batch": big, "per_k": {}}
    for k in ks:
        name = f"speculative k={k}"
        g = {"spec_vs_plain": rate(name, big) / rate("plain", big)}
        if 1 in batches:
            g["spec_vs_spec_batch1_loop"] = rate(name, big) / rate(name, 1)
        g["met"] = g["spec_vs_plain"] >= GOAL_VS_PLAIN and g.get("spec_vs_spec_batch1_loop", GOAL_VS_LOOP) >= GOAL_VS_LOOP
        goals["per_k"][k] = g
    goals["met_for_k"] = [k for k, g in goals["per_k"].items() if g["met"]]
    settings = {"target": target, "draft": draft, "num_draft_tokens": list(ks), "max_new_tokens": max_new_tokens,
                "repeats": repeats, "loop_samples": loop_samples, "device": device, "dtype": dtype, "prompt_len": len(prompt_ids),
                "sampling": "T=1"}
    return {"machine": machine_facts(), "settings": settings, "rows": rows, "goals": goals}


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="shipped:target", help="Target checkpoint (folder, shipped:NAME or hub id). Default: shipped:target")
    parser.add_argument("--draft", default="shipped:draft", help="Draft checkpoint. Default: shipped:draft")
    parser.add_argument("--batches", default="1,64,1024", metavar="B,B,...", help="Batch sizes. Default: 1,64,1024")
    parser.add_argument("--num-draft-tokens", default="1,2", metavar="K,K,...",
                        help="k values of the speculative decoder (the shipped pair accepts ~0.55 per token, so small k "
                             "is fastest). Default: 1,2")
    parser.add_argument("--max-new-tokens", type=int, default=64, metavar="TOKENS", help="Default: 64")
    parser.add_argument("--repeats", type=int, default=3, help="Alternating repeats; the median is reported. Default: 3")
    parser.add_argument("--loop-samples", type=int, default=16, metavar="N", help="Calls of the batch-1 loop. Default: 16")
    parser.add_argument("--device", default="cpu", help="Default: cpu")
    parser.add_argument("--dtype", default=None, help="e.g. bfloat16. Default: the checkpoint's")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads. Default: 1 (as bench throughput: threads spin against other load on a shared machine).")
    parser.add_argument("--json", default=None, metavar="PATH", help="Also write the figures as JSON here.")


def run(args: argparse.Namespace) -> int:
    from verifier.errors import invalid_argument

    try:
        batches = tuple(int(b) for b in args.batches.split(","))
    except ValueError:
        raise invalid_argument("--batches", args.batches, "comma-separated integers, e.g. 1,64,1024") from None
    try:
        ks = tuple(int(k) for k in str(args.num_draft_tokens).split(","))
    except ValueError:
        raise invalid_argument("--num-draft-tokens", args.num_draft_tokens, "comma-separated integers, e.g. 1,2") from None
    res = bench_decoders(args.target, args.draft, batches, ks, args.max_new_tokens, args.repeats,
                         args.loop_samples, args.device, args.dtype, args.threads)
    m, s = res["machine"], res["settings"]
    print(f"machine: {m.get('cpu')}, {m.get('usable_cores', m.get('logical_cores'))} cores, torch threads "
          f"{m.get('torch_threads')}, load {m.get('load_average')}; device {s['device']} dtype {s['dtype']}")
    print(f"k={s['num_draft_tokens']}, max_new_tokens={s['max_new_tokens']}, T=1, median of {s['repeats']} alternating repeats; "
          f"batch 1 = loop of {s['loop_samples']} calls")
    table = [[r["decoder"], r["batch"], f"{r['samples_per_s']:.1f}", f"{r['tokens_per_s']:.0f}",
              "" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.3f}", f"{r['peak_mib']:.0f}"] for r in res["rows"]]
    print(md_table(["decoder", "batch", "samples/s", "tokens/s", "acceptance", "peak MiB"], table))
    big = res["goals"]["largest_batch"]
    for k, g in res["goals"]["per_k"].items():
        line = f"k={k}: speculative/plain at batch {big}: {g['spec_vs_plain']:.2f}x (goal >= {GOAL_VS_PLAIN}x)"
        if "spec_vs_spec_batch1_loop" in g:
            line += f"; batch {big} / batch-1 loop: {g['spec_vs_spec_batch1_loop']:.1f}x (goal >= {GOAL_VS_LOOP:.0f}x)"
        print(line + ("; goals met" if g["met"] else "; goals NOT met"))
    if args.json:
        from verifier.bench._common import write_out

        write_out(args.json, json.dumps(res, indent=2), "--json")
    return 0
