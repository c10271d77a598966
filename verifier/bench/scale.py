"""``specverify bench scale``: wall time per stage and peak memory of a default suite at real vocabularies.

For every vocabulary V in ``--vocab`` (default 384, 32000, 128256, 256000) and sample count n in
``--samples`` (default 2000, 20000, 100000) it runs ``specverify run`` in a child process on a suite
with the default cells (gof@1, gof@2, joint@1..2, surprisal@1..2, pit, accepted), the reference
speculative decoder, k = 2, 3 new tokens, T = 1, on a pair of **random-init Hugging Face Llama
checkpoints of tiny compute** (target hidden 64, 2 layers; draft hidden 64, 1 layer; no download:
built here with ``transformers.LlamaConfig`` and saved under ``--work-dir``), and records the
runner's ``stage_seconds``, the child's wall time, its CPU time and peak RSS (``wait4``), exit code and verdict.
Random weights make both models near-uniform over V: the worst case for the statistics (no mass
concentrates on a few prefixes), not a measure of acceptance rates.

The suite sets no chunk size: the runner's default (:func:`verifier.runner.chunking.default_chunk_size`,
500 rows up to V = 67k at k = 2, 131 at V = 256k) is what is measured.

``--quick`` runs V in {384, 32000} x n = 2000.  ``--device cuda --dtype bfloat16`` runs the same
grid on a GPU (refused cleanly, exit 2, without CUDA).  Cells over the time limit
(``--timeout``, default 900 s + 0.05 s per sample) are recorded as such.  Each row records the load
average before and after (``load_avg``): on a shared machine CPU time is the comparable figure.

Run: ``specverify bench scale [--quick] [--vocab 384 32000] [--samples 2000] [--out scale.json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from verifier.errors import EXIT_USAGE, invalid_argument

__all__ = ["HELP", "build_pair", "scale_suite", "measure", "memory_plan", "default_timeout", "register", "run"]

HELP = "Wall time per stage and peak RSS of the default cells at V = 384..256k, n = 2k..100k (random-init Llama pair)."

VOCABS = (384, 32_000, 128_256, 256_000)
SAMPLES = (2_000, 20_000, 100_000)
QUICK = ((384, 2_000), (32_000, 2_000))
PROMPT = (1, 2, 3)
MIN_VOCAB = 8  # the prompt ids 1..3 and EOS = V - 1 must be distinct tokens of a non-trivial law
DTYPES = ("float32", "float64", "bfloat16", "float16")  # as `specverify run --dtype`


def build_pair(vocab: int, work_dir: Path, seed: int = 0) -> tuple[Path, Path]:
    """Random-init Llama target (hidden 64, 2 layers) and draft (hidden 64, 1 layer) of vocabulary ``vocab``,
    saved as safetensors checkpoints under ``work_dir`` (reused when present)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = []
    for role, layers in (("target", 2), ("draft", 1)):
        path = work_dir / f"llama-v{vocab}-{role}"
        if not (path / "model.safetensors").is_file():
            torch.manual_seed(seed + layers)
            cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                              num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                              bos_token_id=0, eos_token_id=vocab - 1, pad_token_id=None, tie_word_embeddings=False)
            LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
        out.append(path)
    return out[0], out[1]


def scale_suite(target: Path, draft: Path, vocab: int, samples: int, device: str = "cpu", dtype: str = "float32") -> str:
    """The benchmark suite (TOML text) for one grid point."""
    return f"""schema_version = 1
name = "scale-v{vocab}-n{samples}"
seed = 17

[exact]
enabled = false

[models.llama]
target = {json.dumps(str(target))}
draft = {json.dumps(str(draft))}
device = "{device}"
dtype = "{dtype}"

[prompts.p]
ids = {list(PROMPT)}

[sampling.t1]
temperature = 1.0

[defaults]
max_new_tokens = 3
samples = {samples}

[[decoders]]
name = "reference"
decoder = "reference"
models = "llama"
num_draft_tokens = [2]
expect = "pass"
"""


def measure(vocab: int, samples: int, work_dir: Path, *, device: str = "cpu", dtype: str = "float32",
            timeout: float = 900.0, threads: int = 1) -> dict[str, Any]:
    """Run one grid point in a child process; returns wall time, stage seconds, peak RSS (GiB), exit code, verdict.

    ``threads`` is passed on as ``specverify run --threads`` (torch intra-op threads of the models'
    forward passes and the sampler; default 1, the run's own default)."""
    target, draft = build_pair(vocab, work_dir)
    point = work_dir / f"v{vocab}-n{samples}-{int(time.time())}"
    point.mkdir(parents=True)
    suite = point / "suite.toml"
    suite.write_text(scale_suite(target, draft, vocab, samples, device, dtype), encoding="utf-8")
    cmd = [sys.executable, "-m", "verifier.cli", "run", str(suite), "--run-dir", str(point / "run"), "--no-progress",
           "--threads", str(int(threads))]
    import threading

    load_before = round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    log = point / "run.log"
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        # the run isolates itself in a grandchild (verifier.cli._isolate): end the whole group on timeout
        timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, 9))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS, not the max over all children
        finally:
            timer.cancel()
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    timed_out = wall >= timeout and code < 0
    output = log.read_text(encoding="utf-8", errors="replace")
    peak_kib = usage.ru_maxrss
    row: dict[str, Any] = {"vocab": vocab, "samples": samples, "wall_s": round(wall, 1), "exit_code": code,
                           "timed_out": timed_out, "peak_rss_gib": round(peak_kib / 2**20, 2), "device": device,
                           "threads": int(threads),
                           "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),  # CPU time: wall on a shared machine overstates
                           "load_avg": [load_before, round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None]}
    report = point / "run" / "report.json"
    if report.is_file():
        rep = json.loads(report.read_text(encoding="utf-8"))
        row["stage_seconds"] = {k: round(v, 1) for k, v in rep["run"]["stage_seconds"].items()}
        row["verdict"] = rep.get("verdict")
        row["cells"] = {c["id"].rsplit("/", 1)[-1]: c.get("method", "") for c in rep.get("cells", [])}
    else:
        row["error"] = output.strip().splitlines()[-3:] if output else []
    return row


def memory_plan(vocab: int, samples: int, num_draft_tokens: int = 2, max_new_tokens: int = 3,
                available: int | None = -1) -> dict[str, int]:
    """Bytes of the largest working arrays of each stage of one grid point (a dry estimate, no model run).

    Parameters
    ----------
    vocab, samples : int
        V and n of the grid point.
    num_draft_tokens, max_new_tokens : int, defaults 2 and 3
    available : int or None
        Bytes of memory available (default -1: measured now; None: unknown) -- the batch budgets follow it.

    Returns
    -------
    dict
        ``sampler_chunk`` (float32 logits of one default chunk), ``models_batch`` (one batch of the
        expected laws, float64), ``joint_law`` (kept joint outcomes: keys + masses), ``pit_batch``
        (float32 logits of one PIT row batch, x 2 for the model's transients), ``per_sample`` (tokens,
        PIT u's, accepted counts: O(n x T)), ``largest`` (the largest stage array plus ``per_sample``).
        Nothing grows as n x V.
    """
    from verifier.runner import expected, memory, pitscore
    from verifier.runner.chunking import default_chunk_size, sampler_bytes_per_row
    from verifier.runner.guards import available_memory

    avail = available_memory() if available == -1 else available
    k, steps = int(num_draft_tokens), int(max_new_tokens)
    chunk = default_chunk_size(vocab, k, avail)
    law_rows = memory.rows_per_batch(vocab * 8 * 4, available=avail)
    pit_rows = min(memory.rows_per_batch(steps * vocab * 4 * 2, available=avail), pitscore.MAX_ROWS)
    plan = {"sampler_chunk": chunk * sampler_bytes_per_row(vocab, k),
            "models_batch": law_rows * vocab * 8 * 4,
            "joint_law": min(expected.MAX_JOINT_CATEGORIES, (vocab + 1) ** 2) * 16,
            "pit_batch": pit_rows * steps * vocab * 4 * 2,
            "per_sample": int(samples) * (steps * 8 * 2 + 8 * 2 * (k + 1))}
    plan["largest"] = max(v for key, v in plan.items() if key != "per_sample") + plan["per_sample"]
    return plan


def default_timeout(samples: int) -> float:
    """Seconds a grid point may run by default: 900 + 0.05 s per sample (the n = 100k point needs more than 900)."""
    return 900.0 + 0.05 * int(samples)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab", type=int, nargs="+", default=None, metavar="V", help=f"Vocabulary sizes. Default: {' '.join(map(str, VOCABS))}.")
    parser.add_argument("--samples", type=int, nargs="+", default=None, metavar="N", help=f"Samples per point. Default: {' '.join(map(str, SAMPLES))}.")
    parser.add_argument("--quick", action="store_true", help="Only V in {384, 32000} at n = 2000.")
    parser.add_argument("--device", default="cpu", help="torch device of the models. Default: cpu.")
    parser.add_argument("--dtype", default="float32", help="Model dtype (bfloat16 on cuda). Default: float32.")
    parser.add_argument("--work-dir", default=None, metavar="DIR", help="Checkpoints and runs. Default: a temporary folder.")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="Seconds per grid point. Default: 900 + 0.05 x n (n = 100k: 5,900 s; a safety net, not the goal).")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="torch threads of each run (`specverify run --threads`): 2 uses both cores of a 2-core "
                             "machine for the forward passes (idle machine only). Default: 1, the run's default.")
    parser.add_argument("--out", default=None, metavar="FILE", help="Also write the rows as JSON.")


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| V | n | threads | wall s | CPU s | models s | sampling s | statistics s | reports s | peak RSS GiB | exit | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        st = r.get("stage_seconds", {})
        lines.append(f"| {r['vocab']:,} | {r['samples']:,} | {r.get('threads', 1)} | {r['wall_s']}{' (timeout)' if r['timed_out'] else ''} | {r.get('cpu_s', '-')} | "
                     f"{st.get('models', '-')} | {st.get('sampling', '-')} | {st.get('statistics', '-')} | "
                     f"{st.get('reports', '-')} | {r['peak_rss_gib']} | {r['exit_code']} | {r.get('verdict', '-')} |")
    return "\n".join(lines)


def _run_iv(args: argparse.Namespace) -> None:
    """Refuse bad arguments before the first checkpoint is built (a grid point can take an hour).

    Raises
    ------
    InvalidArgumentError
        ``--vocab`` below :data:`MIN_VOCAB`, ``--samples`` below 1, a ``--timeout`` that is not a finite
        number > 0, ``--threads`` below 1, a ``--dtype`` not in :data:`DTYPES`, a ``--device`` torch does not parse, a
        ``--work-dir`` that is a file, or an ``--out`` whose folder does not exist.
    """
    for v in args.vocab or ():
        if v < MIN_VOCAB:
            raise invalid_argument("--vocab", v, f"integers >= {MIN_VOCAB}")
    for n in args.samples or ():
        if n < 1:
            raise invalid_argument("--samples", n, "integers >= 1")
    from verifier._threads import max_threads

    if not 1 <= args.threads <= max_threads():  # passed on to `specverify run --threads`, which allows this much
        raise invalid_argument("--threads", args.threads, f"a whole number 1..{max_threads()}")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise invalid_argument("--timeout", args.timeout, "a finite number of seconds > 0")
    if args.dtype not in DTYPES:
        raise invalid_argument("--dtype", args.dtype, " | ".join(DTYPES))
    import torch

    try:
        torch.device(args.device)
    except (RuntimeError, ValueError):
        raise invalid_argument("--device", args.device, "a torch device: cpu, cuda, cuda:N") from None
    if args.work_dir and Path(args.work_dir).exists() and not Path(args.work_dir).is_dir():
        raise invalid_argument("--work-dir", args.work_dir, "a folder (or a path to create one)")


def run(args: argparse.Namespace) -> int:
    _run_iv(args)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(f"specverify bench scale: --device={args.device!r} but CUDA is not available here; allowed: "
                  "--device cpu, or run on a machine with an NVIDIA GPU", file=sys.stderr)
            return EXIT_USAGE
    grid = list(QUICK) if args.quick else [(v, n) for v in (args.vocab or VOCABS) for n in (args.samples or SAMPLES)]
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="specverify-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for vocab, samples in grid:
        timeout = args.timeout if args.timeout is not None else default_timeout(samples)
        row = measure(vocab, samples, work, device=args.device, dtype=args.dtype, timeout=timeout, threads=args.threads)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(_markdown(rows))
    if args.out:
        from verifier.bench._common import write_out

        write_out(args.out, json.dumps(rows, indent=1))
    return 0
