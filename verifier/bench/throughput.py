"""``specverify bench throughput``: samples/s of the batched reference speculative decoder, plain
batched sampling and transformers' assisted generation, on the same models, in the same run.

Method.  Each measurement runs in its own subprocess (``python -m verifier.bench.throughput
--worker SPEC``) so its peak memory (``ru_maxrss`` of the process and its children) is its own
and no decoder warms another's caches.  The subprocess loads the models, makes one small warm-up
call, then times ``generate(prompt, num_samples, max_new_tokens, T=1, seed)`` with
``time.perf_counter``.  Decoders:

* ``plain``: :class:`verifier.decoders.AncestralDecoder` (batched target sampling, KV cache);
* ``speculative``: :class:`verifier.decoders.SpeculativeDecoder` (the reference, batched, k drafts);
* ``hf_assisted``: :class:`verifier.audit.hf_assisted.HFAssistedDecoder` (``target.generate(...,
  assistant_model=draft, do_sample=True)``, one sample per call -- what transformers supports --
  spread over one worker process per core); fewer samples, rate = samples / seconds.

Measurements alternate (plain, speculative, plain, speculative, ...) ``--repeats`` times and the
median rate is reported, so load drift on a shared machine hits both alike.  Goals (issue 7):
speculative >= 0.5x plain and >= 50x HF assisted, samples/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from verifier.bench._common import machine_facts, md_table

__all__ = ["HELP", "GOAL_VS_PLAIN", "GOAL_VS_HF", "measure", "throughput", "register", "run", "render_markdown"]

HELP = "Samples/s of batched speculative vs plain batched sampling vs HF assisted generation (same models, same run)."
GOAL_VS_PLAIN = 0.5  # issue 7: speculative >= 0.5x plain batched samples/s
GOAL_VS_HF = 50.0  # issue 7: speculative >= 50x HF assisted generation samples/s
DEFAULT_PROMPT = "def main():\n    "
DEFAULT_K = 2  # the ci suite's k; on the shipped models k = 4 accepts only ~29% of drafts (measured), k = 2 ~44%


def _load(spec: str, device: str, dtype: str | None):
    from verifier.models import load_model, shipped_checkpoint

    path = shipped_checkpoint(spec.split(":", 1)[1]) if spec.startswith("shipped:") else spec
    return load_model(path, device=device, dtype=dtype)


def _prompt_ids(spec: str, prompt: str) -> list[int]:
    try:
        from verifier.models import load_tokenizer, shipped_checkpoint

        path = shipped_checkpoint(spec.split(":", 1)[1]) if spec.startswith("shipped:") else spec
        ids = list(load_tokenizer(path).encode(prompt))
        if ids:
            return ids
    except Exception:  # no tokenizer shipped with the checkpoint: fixed ids
        pass
    return [1, 2, 3, 4]


def measure(job: dict[str, Any]) -> dict[str, Any]:
    """Run one timed ``generate`` call as described by ``job`` (in this process) and return the figures.

    ``job`` keys: ``decoder`` (plain | speculative | hf_assisted), ``target``, ``draft``,
    ``num_samples``, ``max_new_tokens``, ``num_draft_tokens``, ``device``, ``dtype``, ``seed``, ``prompt``.
    """
    import numpy as np
    import torch

    from verifier.bench._common import peak_rss_mib
    from verifier.sampling import SamplingConfig

    sampling = SamplingConfig(temperature=1.0)
    prompt = _prompt_ids(job["target"], job.get("prompt", DEFAULT_PROMPT))
    kind = job["decoder"]
    if kind == "hf_assisted":
        from verifier.audit.hf_assisted import HFAssistedDecoder

        decoder = HFAssistedDecoder(job["target"], job["draft"], job["num_draft_tokens"], num_workers=job.get("workers"),
                                    device=job["device"], dtype=job.get("dtype"))
    else:
        from verifier.decoders import AncestralDecoder, SpeculativeDecoder

        target = _load(job["target"], job["device"], job.get("dtype"))
        if kind == "plain":
            decoder = AncestralDecoder(target)
        else:
            decoder = SpeculativeDecoder(target, _load(job["draft"], job["device"], job.get("dtype")), job["num_draft_tokens"])
    warm = max(1, min(4, job["num_samples"]))
    decoder.generate(prompt, warm, min(4, job["max_new_tokens"]), sampling, job["seed"] + 1)  # warm-up (and HF workers start)
    if job["device"].startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = decoder.generate(prompt, job["num_samples"], job["max_new_tokens"], sampling, job["seed"])
    if job["device"].startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    tokens = int(np.count_nonzero(np.asarray(out) != -1))
    stats = getattr(decoder, "last_stats", None)
    res = {
        "decoder": kind, "num_samples": job["num_samples"], "max_new_tokens": job["max_new_tokens"],
        "num_draft_tokens": job["num_draft_tokens"] if kind != "plain" else None, "seconds": seconds,
        "samples_per_s": job["num_samples"] / seconds, "tokens_per_s": tokens / seconds,
        "acceptance_rate": (float(stats.acceptance_rate) if kind != "plain" and stats is not None
                            and getattr(stats, "rounds", 0) and np.isfinite(stats.acceptance_rate) else None),
        "peak_rss_mib": peak_rss_mib(), "torch_threads": torch.get_num_threads(), "prompt_len": len(prompt),
    }
    if job["device"].startswith("cuda"):
        res["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
    close = getattr(decoder, "close", None)
    if callable(close):
        close()
    import resource

    if kind == "hf_assisted":  # its worker processes (the batched decoders start none)
        res["peak_rss_children_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    return res


def _subprocess(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "verifier.bench.throughput", "--worker", json.dumps(job)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"decoder": job["decoder"], "error": (proc.stderr or proc.stdout)[-1500:], "returncode": proc.returncode}
    return json.loads(lines[-1])


def throughput(*, target: str = "shipped:target", draft: str = "shipped:draft", num_samples: int = 1024,
               max_new_tokens: int = 32, num_draft_tokens: int = DEFAULT_K, hf_samples: int = 16, repeats: int = 2,
               device: str = "cpu", dtype: str | None = None, seed: int = 0, timeout: float = 900.0,
               progress=None) -> dict[str, Any]:
    """Measure the three decoders (see the module docstring); returns per-run figures, medians and ratios."""
    base = dict(target=target, draft=draft, max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens,
                device=device, dtype=dtype, seed=seed)
    runs: list[dict[str, Any]] = []
    for r in range(repeats):
        for kind in ("plain", "speculative"):
            res = _subprocess({**base, "decoder": kind, "num_samples": num_samples, "seed": seed + r}, timeout)
            runs.append(res)
            if progress:
                progress(f"  {kind:<12} run {r + 1}/{repeats}: " + (f"{res['samples_per_s']:.1f} samples/s, "
                         f"{res['tokens_per_s']:.0f} tokens/s, peak RSS {res['peak_rss_mib']:.0f} MiB"
                         if "error" not in res else f"ERROR {res['error'][-300:]}"))
    if hf_samples:
        res = _subprocess({**base, "decoder": "hf_assisted", "num_samples": hf_samples}, timeout)
        runs.append(res)
        if progress:
            progress("  hf_assisted : " + (f"{res['samples_per_s']:.2f} samples/s ({hf_samples} samples, "
                     f"{res['seconds']:.1f} s)" if "error" not in res else f"ERROR {res['error'][-300:]}"))
    med: dict[str, dict[str, Any]] = {}
    for kind in ("plain", "speculative", "hf_assisted"):
        ok = [x for x in runs if x.get("decoder") == kind and "error" not in x]
        if ok:
            med[kind] = {
                "samples_per_s": statistics.median(x["samples_per_s"] for x in ok),
                "tokens_per_s": statistics.median(x["tokens_per_s"] for x in ok),
                "peak_rss_mib": max(x["peak_rss_mib"] for x in ok),
                "peak_rss_children_mib": max(x.get("peak_rss_children_mib", 0.0) for x in ok),
                "acceptance_rate": ok[0].get("acceptance_rate"), "runs": len(ok), "num_samples": ok[0]["num_samples"],
            }
    ratios = {}
    if "speculative" in med and "plain" in med:
        ratios["speculative_vs_plain"] = med["speculative"]["samples_per_s"] / med["plain"]["samples_per_s"]
    if "speculative" in med and "hf_assisted" in med:
        ratios["speculative_vs_hf_assisted"] = med["speculative"]["samples_per_s"] / med["hf_assisted"]["samples_per_s"]
    return {"settings": {**base, "num_samples": num_samples, "hf_samples": hf_samples, "repeats": repeats,
                         "sampling": "T=1", "prompt": DEFAULT_PROMPT},
            "runs": runs, "median": med, "ratios": ratios,
            "errors": [x for x in runs if "error" in x]}


def render_markdown(res: dict[str, Any]) -> str:
    s = res["settings"]
    lines = [f"Models `{s['target']}` / `{s['draft']}`, device {s['device']}, dtype {s['dtype'] or 'checkpoint'}, "
             f"T=1, max_new_tokens={s['max_new_tokens']}, k={s['num_draft_tokens']}; batched decoders {s['num_samples']} "
             f"samples per call (median of {s['repeats']} alternating runs), HF assisted {s['hf_samples']} samples "
             "(one generate() per sample, one worker process per core).", ""]
    rows = []
    for kind, m in res["median"].items():
        rows.append([kind, f"{m['samples_per_s']:.2f}", f"{m['tokens_per_s']:.0f}",
                     f"{m['acceptance_rate']:.3f}" if m.get("acceptance_rate") is not None else "-",
                     f"{m['peak_rss_mib']:.0f}" + (f" (+ workers {m['peak_rss_children_mib']:.0f})" if m.get("peak_rss_children_mib") else "")])
    lines.append(md_table(["decoder", "samples/s", "tokens/s", "acceptance rate", "peak RSS MiB"], rows))
    lines.append("")
    r = res["ratios"]
    if "speculative_vs_plain" in r:
        v = r["speculative_vs_plain"]
        lines.append(f"- speculative / plain: **{v:.2f}x** (goal >= {GOAL_VS_PLAIN}x: {'met' if v >= GOAL_VS_PLAIN else '**not met**'})")
    if "speculative_vs_hf_assisted" in r:
        v = r["speculative_vs_hf_assisted"]
        lines.append(f"- speculative / HF assisted: **{v:.1f}x** (goal >= {GOAL_VS_HF:.0f}x: {'met' if v >= GOAL_VS_HF else '**not met**'})")
    for e in res["errors"]:
        lines.append(f"- {e['decoder']} failed (exit {e.get('returncode')}): `{e['error'][-300:].strip()}`")
    return "\n".join(lines) + "\n"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="shipped:target", help="Target checkpoint. Default: shipped:target.")
    parser.add_argument("--draft", default="shipped:draft", help="Draft checkpoint. Default: shipped:draft.")
    parser.add_argument("--samples", type=int, default=1024, metavar="N", help="Samples per batched call. Default: 1024.")
    parser.add_argument("--hf-samples", type=int, default=16, metavar="N", help="Samples of HF assisted generation (0 skips). Default: 16.")
    parser.add_argument("--max-new-tokens", type=int, default=32, metavar="L", help="Tokens per sample. Default: 32.")
    parser.add_argument("--num-draft-tokens", type=int, default=DEFAULT_K, metavar="K", help=f"k. Default: {DEFAULT_K}.")
    parser.add_argument("--repeats", type=int, default=2, metavar="R", help="Alternating timed runs per batched decoder. Default: 2.")
    parser.add_argument("--device", default="cpu", help="Device. Default: cpu.")
    parser.add_argument("--dtype", default=None, help="Weight dtype. Default: the checkpoint's.")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="Output format. Default: markdown.")


def run(args: argparse.Namespace) -> int:
    res = throughput(target=args.target, draft=args.draft, num_samples=args.samples, max_new_tokens=args.max_new_tokens,
                     num_draft_tokens=args.num_draft_tokens, hf_samples=args.hf_samples, repeats=args.repeats,
                     device=args.device, dtype=args.dtype, progress=lambda s: print(s, file=sys.stderr, flush=True))
    res["machine"] = machine_facts()
    print(json.dumps(res, indent=1) if args.format == "json" else render_markdown(res))
    return 0 if not res["errors"] else 1


def _worker_main(argv: list[str]) -> int:
    job = json.loads(argv[argv.index("--worker") + 1])
    print(json.dumps(measure(job)), flush=True)
    return 0


if __name__ == "__main__":  # the per-measurement subprocess
    sys.exit(_worker_main(sys.argv))
