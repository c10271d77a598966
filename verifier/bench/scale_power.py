"""``specverify bench scale-power``: detection rate of each default cell at a real vocabulary (V = 32k).

Issue 17 asks which cells to rely on at large V: the count cells (``gof@1``, ``gof@2``,
``joint@1..2``, ``surprisal@1..2``) are built on the target's prefix tree and, past
:func:`verifier.runner.expected.prefix_cap`, pool the target's low-mass prefixes into "other";
``pit`` needs only the probs along each emitted prefix.  This benchmark measures, for the
reference decoder (false-alarm rate) and zoo mutants with a known defect
(:mod:`verifier.decoders.mutants`), how often the runner reports each cell as BIAS.

Method.  One model pair of vocabulary ``--vocab`` (default 32,000) built here, no download: a
random-init Hugging Face Llama of tiny compute (hidden 64, 2 layers, as ``bench scale``) whose
output layer is multiplied by ``--head-scale`` (default 20), so its next-token law is peaked
(random init alone gives logits of std ~0.16: near-uniform, where every cell is powerless); the
draft is the same network with output layer ``head_scale * (W + draft_noise * W')``, ``W'`` an
independent copy of the initial law (``--draft-noise``, default 0.5: a draft correlated with the
target, as a real one is).  The target's entropy at the first position and the mass the pooled
cells put in "other" are printed with the table.  Sampling at T = ``--temperature`` (default 0.8,
so the temperature-mismatch mutant ``target_unprocessed`` is visible), k = 2, 3 new tokens, one
prompt.  For each decoder, ``--seeds`` independent sample sets of n rows each (own chunk seeds,
own analysis seeds) go through the runner's own cells (:func:`verifier.runner.cells.set_cells`)
and verdict (:func:`verifier.runner.verdict.decide`: gate, alpha 1e-3, Holm + Cauchy over the 5
cells).  A cell "detects" when the runner marks it BIAS; "decoder" is the BIAS verdict.  The
expected laws are enumerated once (shared by all sets, as in a run).

Run: ``specverify bench scale-power [--vocab 32000] [--samples 2000 20000] [--seeds 10] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from verifier.bench._common import check_seeds, md_table, names_from, write_out
from verifier.errors import invalid_argument

__all__ = ["HELP", "DEFAULT_DECODERS", "build_peaked_pair", "power_suite", "power_rows", "render_markdown", "register",
           "run"]

HELP = "Detection rate of each default cell (gof@1, gof@2, joint, surprisal, pit) at V = 32k: zoo mutants vs the reference."

DEFAULT_DECODERS = ("reference", "full_p_fallback", "target_unprocessed", "draft_suffix_kept")
DEFAULT_VOCAB = 32_000
DEFAULT_SAMPLES = (2_000,)
DEFAULT_SEEDS = 8
DEFAULT_HEAD_SCALE = 20.0  # logits std ~0.16 * 20 ~ 3 at T = 1: first-token entropy 4.2 nats at V = 32k, T = 0.8 (stated with the table)
DEFAULT_DRAFT_NOISE = 0.5  # draft head = target head + 0.5 x an independent one: a correlated, imperfect draft
DEFAULT_TEMPERATURE = 0.8
PROMPT = (1, 2, 3)
CELLS = ("gof@1", "gof@2", "joint@1..2", "surprisal@1..2", "pit")


def build_peaked_pair(vocab: int, work_dir: Path, *, head_scale: float = DEFAULT_HEAD_SCALE,
                      draft_noise: float = DEFAULT_DRAFT_NOISE, seed: int = 0) -> tuple[Path, Path]:
    """Target and draft checkpoints with a peaked next-token law (module docstring), reused when present.

    Parameters
    ----------
    vocab : int
        Vocabulary size V (EOS = V - 1).
    work_dir : Path
        Folder for the two safetensors checkpoints.
    head_scale : float
        Factor on the output layer (logit scale).
    draft_noise : float
        Weight of the draft's independent output-layer perturbation.
    seed : int
        torch seed of the initial weights.

    Returns
    -------
    (target_path, draft_path)
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tag = f"llama-v{vocab}-peaked{head_scale:g}-noise{draft_noise:g}-s{seed}"
    paths = work_dir / f"{tag}-target", work_dir / f"{tag}-draft"
    if all((p / "model.safetensors").is_file() for p in paths):
        return paths
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                      bos_token_id=0, eos_token_id=vocab - 1, pad_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    head = model.lm_head.weight.data.clone()
    other = torch.randn_like(head) * head.std()
    with torch.no_grad():
        model.lm_head.weight.copy_(head_scale * head)
        model.save_pretrained(paths[0], safe_serialization=True)
        model.lm_head.weight.copy_(head_scale * (head + draft_noise * other))
        model.save_pretrained(paths[1], safe_serialization=True)
    return paths


def power_suite(target: Path, draft: Path, decoders: Sequence[str], samples: int, temperature: float,
                chunk_size: int) -> str:
    """The suite (TOML text) whose plans and cells the benchmark uses: one prompt, T, k = 2, 3 tokens."""
    blocks = "".join(f"""
[[decoders]]
name = "{d}"
decoder = "{d}"
models = "m"
num_draft_tokens = [2]
expect = "{'pass' if d == 'reference' else 'detect'}"
""" for d in decoders)
    return f"""schema_version = 1
name = "scale-power"
seed = 0

[exact]
enabled = false

[models.m]
target = {json.dumps(str(target))}
draft = {json.dumps(str(draft))}

[prompts.p]
ids = {list(PROMPT)}

[sampling.t]
temperature = {float(temperature)!r}

[defaults]
max_new_tokens = 3
samples = {samples}
chunk_size = {chunk_size}
tests = ["gof", "joint", "surprisal", "pit"]
gof_positions = [1, 2]
joint_tokens = 2
{blocks}"""


def _target_facts(ctx, plan) -> dict[str, Any]:
    """First-token entropy (nats) of the processed target, and the pooling of the expected laws."""
    from verifier.runner.cells import expected_laws

    laws = expected_laws(ctx, plan)
    p1 = laws.marginals[1]
    nz = p1[p1 > 0]
    facts = {"entropy_1_nats": float(-(nz * np.log(nz)).sum()), "pooling": laws.note() or "exact",
             "target_passes": laws.target_passes}
    if laws.pooled(2):
        facts["other_mass_2"] = float(laws.marginals[2][-1])
    if laws.joint_keys is not None:
        facts["other_mass_joint"] = float(laws.joint[-1])
    return facts


def power_rows(vocab: int = DEFAULT_VOCAB, samples: Sequence[int] = DEFAULT_SAMPLES, *, seeds: int = DEFAULT_SEEDS,
               decoders: Sequence[str] = DEFAULT_DECODERS, head_scale: float = DEFAULT_HEAD_SCALE,
               draft_noise: float = DEFAULT_DRAFT_NOISE, temperature: float = DEFAULT_TEMPERATURE,
               work_dir: Path | None = None, seed: int = 0, progress=None, partial=None) -> dict[str, Any]:
    """Detection rate of every default cell per (decoder, n) over ``seeds`` sample sets.

    Parameters
    ----------
    vocab : int, default 32000
    samples : sequence of int, default (2000,)
        Rows per sample set n.
    seeds : int, default 8
        Independent sample sets per (decoder, n).
    decoders : sequence of str
        Names from :data:`verifier.decoders.mutants.DECODER_REGISTRY`.
    head_scale, draft_noise : float
        The pair (:func:`build_peaked_pair`).
    temperature : float, default 0.8
    work_dir : Path, optional
        Checkpoints; default a temporary folder.
    seed : int
        Base of the sample-set seeds (set s of n uses suite seed ``seed + 1000 * n_index + s``).
    progress : callable(str) or None
    partial : callable(rows) or None
        Called with the rows so far after every round of sets (one set per decoder).

    Returns
    -------
    dict
        ``rows``: one per (decoder, n) with ``detected`` {cell: sets flagged BIAS}, ``verdict_bias``
        (sets with decoder verdict BIAS), ``seeds``, ``seconds``; ``target``: :func:`_target_facts`.

    Raises
    ------
    InvalidArgumentError
        An unknown decoder, vocab < 8, seeds < 1 or a sample size < 1.
    """
    from verifier.decoders.mutants import DECODER_REGISTRY
    from verifier.runner.cells import count_cells, set_cells
    from verifier.runner.context import SuiteContext
    from verifier.runner.seeds import chunk_seed
    from verifier.runner.verdict import BIAS, CELL_BIAS, cell_level, decide
    from verifier.suite.schema import parse_suite

    names_from("decoders", decoders, DECODER_REGISTRY)
    check_seeds(seeds)
    if not (isinstance(vocab, int) and vocab >= 8):
        raise invalid_argument("vocab", vocab, "an integer >= 8")
    for n in samples:
        if not (isinstance(n, int) and n >= 1):
            raise invalid_argument("samples", n, "integers >= 1")
    import tomllib

    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="specverify-scale-power-"))
    work.mkdir(parents=True, exist_ok=True)
    target, draft = build_peaked_pair(vocab, work, head_scale=head_scale, draft_noise=draft_noise)
    chunk = max(50, min(500, 2**24 // vocab))
    log = progress or (lambda s: None)
    rows: list[dict[str, Any]] = []
    facts: dict[str, Any] = {}
    ctx = None
    for ni, n in enumerate(samples):
        text = power_suite(target, draft, decoders, n, temperature, chunk)
        suite = parse_suite(tomllib.loads(text), source="<bench scale-power>", base_dir=work).with_profile("ci")
        if ctx is None:
            ctx = SuiteContext(suite)
        else:  # keep the loaded models and the enumerated laws; new plans for this n
            ctx = _context_like(suite, ctx.pairs, ctx.expected_cache)
        if not facts:
            t0 = time.perf_counter()
            saved = work / f"laws-{target.name}-T{temperature:g}.pkl"  # the enumeration is the costly part: reuse it
            if saved.is_file():
                ctx.expected_cache.update(pickle.loads(saved.read_bytes()))
            facts = _target_facts(ctx, ctx.plans[0])
            facts["laws_seconds"] = round(time.perf_counter() - t0, 1)
            saved.write_bytes(pickle.dumps(ctx.expected_cache))
            log(f"target: {facts}")
        level = {p.set_id: cell_level(suite.stats.alpha, count_cells(p), suite.stats.correction) for p in ctx.plans}
        by_plan = {p.set_id: {"decoder": p.decoder.name, "n": n, "seeds": 0, "detected": {c: 0 for c in CELLS},
                              "verdict_bias": 0, "pvalues": {c: [] for c in CELLS}, "seconds": 0.0} for p in ctx.plans}
        rows += list(by_plan.values())
        for s in range(seeds):  # seeds outermost: a run cut short still has the same sets for every decoder
            set_seed = seed + 1000 * ni + s
            for plan in ctx.plans:
                row, t0 = by_plan[plan.set_id], time.perf_counter()
                decoder = ctx.decoder(plan.decoder, plan.num_draft_tokens)
                parts = [decoder.generate(list(plan.prompt_ids), plan.chunk_rows(i), plan.max_new_tokens, plan.sampling,
                                          chunk_seed(set_seed, plan.key, i)) for i in range(plan.num_chunks)]
                ctx.suite = replace(suite, seed=set_seed)  # own analysis / PIT streams per set
                cells = set_cells(ctx, plan, np.concatenate(parts), lambda _i, lv=level[plan.set_id]: lv)
                verdict = decide(plan.decoder.name, plan.decoder.expect, cells, alpha=suite.stats.alpha,
                                 correction=suite.stats.correction, target_mde=suite.stats.target_mde)
                for c in cells:
                    if c.test in row["detected"]:
                        row["detected"][c.test] += int(c.verdict == CELL_BIAS)
                        row["pvalues"][c.test].append(float(c.pvalue))
                row["verdict_bias"] += int(verdict.verdict == BIAS)
                row["seeds"] += 1
                row["seconds"] = round(row["seconds"] + time.perf_counter() - t0, 1)
                log(f"{row['decoder']:>22} n={n} set {s + 1}/{seeds}: "
                    + ", ".join(f"{c.test} {'BIAS' if c.verdict == CELL_BIAS else 'pass'} p={c.pvalue:.2g}" for c in cells)
                    + f"; verdict {verdict.verdict} ({time.perf_counter() - t0:.0f} s)")
            if partial is not None:
                partial(rows)
    return {"vocab": vocab, "head_scale": head_scale, "draft_noise": draft_noise, "temperature": temperature,
            "num_draft_tokens": 2, "max_new_tokens": 3, "alpha": 1e-3, "target": facts, "rows": rows}


def _context_like(suite, pairs, cache):
    """A :class:`SuiteContext` for ``suite`` reusing loaded ``pairs`` and the expected-law ``cache``."""
    from verifier.runner.context import SuiteContext
    from verifier.runner.models import encode_prompt
    from verifier.runner.plan import plan_sample_sets

    ctx = SuiteContext.__new__(SuiteContext)
    ctx.suite, ctx.pairs, ctx.expected_cache, ctx._decoders = suite, pairs, cache, {}
    ids = {(d.models, p): encode_prompt(suite.prompts[p], pairs[d.models]) for d in suite.decoders for p in d.prompts}
    ctx.plans = plan_sample_sets(suite, ids)
    return ctx


def render_markdown(res: dict[str, Any]) -> str:
    t = res["target"]
    head = (f"V = {res['vocab']:,}, random-init Llama (hidden 64, 2 layers) with output layer x {res['head_scale']:g}; draft = "
            f"same network, head + {res['draft_noise']:g} x an independent one; T = {res['temperature']:g}, k = 2, 3 new tokens; "
            f"first-token entropy {t.get('entropy_1_nats', float('nan')):.2f} nats; expected laws: {t.get('pooling')}"
            + (f"; 'other' mass at position 2: {t['other_mass_2']:.3f}" if "other_mass_2" in t else "")
            + (f", in the joint: {t['other_mass_joint']:.3f}" if "other_mass_joint" in t else "")
            + f". Gate alpha {res['alpha']:g} over the 5 cells; sets flagged BIAS / sets.\n\n")
    table = [[r["decoder"], f"{r['n']:,}"] + [f"{r['detected'][c]}/{r['seeds']}" for c in CELLS]
             + [f"{r['verdict_bias']}/{r['seeds']}", r["seconds"]] for r in res["rows"]]
    return head + md_table(["decoder", "n"] + list(CELLS) + ["verdict BIAS", "seconds"], table) + "\n"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab", type=int, default=DEFAULT_VOCAB, metavar="V", help=f"Vocabulary size. Default: {DEFAULT_VOCAB}.")
    parser.add_argument("--samples", type=int, nargs="+", default=list(DEFAULT_SAMPLES), metavar="N",
                        help=f"Rows per sample set. Default: {' '.join(map(str, DEFAULT_SAMPLES))}.")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, metavar="S", help=f"Sample sets per (decoder, n). Default: {DEFAULT_SEEDS}.")
    parser.add_argument("--decoder", action="append", dest="decoders", metavar="NAME",
                        help=f"Registered decoder (repeatable). Default: {' '.join(DEFAULT_DECODERS)}.")
    parser.add_argument("--head-scale", type=float, default=DEFAULT_HEAD_SCALE, metavar="X",
                        help=f"Factor on the output layer (peakedness). Default: {DEFAULT_HEAD_SCALE:g}.")
    parser.add_argument("--draft-noise", type=float, default=DEFAULT_DRAFT_NOISE, metavar="X",
                        help=f"Draft head = target head + X times an independent one. Default: {DEFAULT_DRAFT_NOISE:g}.")
    parser.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, metavar="T", help=f"Default: {DEFAULT_TEMPERATURE:g}.")
    parser.add_argument("--seed", type=int, default=0, help="Base of the sample-set seeds (runs with other bases are independent). Default: 0.")
    parser.add_argument("--work-dir", default=None, metavar="DIR", help="Checkpoints. Default: a temporary folder.")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="Output format. Default: markdown.")
    parser.add_argument("--out", metavar="PATH", help="Also write the output to PATH.")


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    def partial(rows) -> None:  # the rows so far, in case the run is stopped
        if args.out:
            write_out(args.out + ".partial.json", json.dumps(rows, indent=1))

    res = power_rows(args.vocab, args.samples, seeds=args.seeds, decoders=args.decoders or DEFAULT_DECODERS,
                     head_scale=args.head_scale, draft_noise=args.draft_noise, temperature=args.temperature,
                     work_dir=args.work_dir, seed=args.seed, progress=lambda s: print(s, file=sys.stderr, flush=True),
                     partial=partial)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(res, indent=1) if args.format == "json" else render_markdown(res) + f"\n_{res['seconds']:.0f} s_\n"
    print(text)
    if args.out:
        write_out(args.out, text)
    return 0
