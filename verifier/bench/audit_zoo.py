"""`specverify audit` on the bug zoo: verdict parity with the ci suite and the saving of ``--sequential``.

    specverify bench audit-zoo [--parity] [--sequential] [--seeds 2]

Parity: every decoder of ``suites/ci.toml`` audited alone with the ci suite's settings (trigram3, k = 2,
3 tokens, T = 1 and T = 0.7/top-k 2; the shipped pair at T = 1 for its two decoders) at the audit
defaults (``--target-tv 0.05``, planned n); a decoder's audit verdict is BIAS DETECTED when any of its
configs is, PASS when all are.  Sequential: for each decoder-level mutant on trigram3 (the config where
the ci comment says it is visible), the rows ``--sequential`` draws before it stops, against the planned
fixed n at the same family alpha, over ``--seeds`` seeds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

T1 = ("t1", {})
T07K2 = ("t07k2", {"temperature": 0.7, "top_k": 2})
PROCESSING_ONLY = {"draft_raw_q", "target_unprocessed"}  # visible only under processing (suites/ci.toml)


def _audit(decoder: str, target: str, sampling: dict, seed: int, sequential: bool, run_dir: Path, k: int = 2,
           max_new_tokens: int = 3, prompts=()) -> tuple[str, dict, float]:
    from verifier.audit.sequential import plan_record
    from verifier.pipeline import run_audit
    from verifier.audit.suite_builder import AuditSpec, plan_audit
    from verifier.sampling import SamplingConfig

    alpha = 1e-3
    start = time.perf_counter()
    spec = AuditSpec(decoder=decoder, target=target, sampling=SamplingConfig(**sampling), num_draft_tokens=k,
                     max_new_tokens=max_new_tokens, seed=seed, alpha=alpha / 2 if sequential else alpha, prompts=prompts)
    plan = plan_audit(spec)
    out = run_audit(plan.suite, run_dir, plan_record(plan, sequential, alpha), sequential=sequential, progress=False,
                    log=lambda _m: None)
    d = out.report["decoders"][0]
    info = {"planned": plan.num_samples, "drawn": (out.sequential or {}).get("samples", plan.num_samples),
            "crossed": bool((out.sequential or {}).get("crossed"))}
    return d["verdict"], info, time.perf_counter() - start


def _ci_decoders():
    from verifier.suite import load_suite

    root = Path(__file__).resolve().parents[2]
    suite = load_suite(root / "suites" / "ci.toml")
    return [(d.name, d.decoder, d.expect, d.models) for d in suite.decoders]


def parity(tmp: Path, seed: int = 0, only: set | None = None) -> list[dict]:
    rows = []
    for name, decoder, expect, models in _ci_decoders():
        if only and name not in only:
            continue
        if models == "shipped":
            configs, target, prompts = [T1], "shipped:target", (("text", "def "),)
        else:
            configs, target, prompts = [T1, T07K2], "tabular:trigram3", ()
        verdicts, seconds = [], 0.0
        for label, sampling in configs:
            v, info, s = _audit(decoder, target, sampling, seed, False, tmp / f"{name}-{label}", prompts=prompts)
            verdicts.append(f"{label}: {v} (n={info['planned']})")
            seconds += s
        detected = any("BIAS DETECTED" in v for v in verdicts)
        audit = "BIAS DETECTED" if detected else ("PASS" if all(": PASS" in v for v in verdicts) else "other")
        ci = "PASS" if expect == "pass" else "BIAS DETECTED"
        rows.append({"decoder": name, "ci": ci, "audit": audit, "same": audit == ci, "configs": "; ".join(verdicts),
                     "seconds": round(seconds, 1)})
        print(rows[-1], flush=True)
    return rows


def sequential(tmp: Path, seeds: int) -> list[dict]:
    rows = []
    for name, decoder, expect, models in _ci_decoders():
        if models != "trigram3":
            continue
        label, sampling = T07K2 if decoder in PROCESSING_ONLY else T1
        drawn, crossed, verdicts = [], 0, []
        planned_fixed = None
        for seed in range(seeds):
            v, info, _s = _audit(decoder, "tabular:trigram3", sampling, seed, True, tmp / f"seq-{name}-{seed}")
            drawn.append(info["drawn"])
            crossed += info["crossed"]
            verdicts.append(v)
            if planned_fixed is None:
                _v, fixed, _s2 = _audit(decoder, "tabular:trigram3", sampling, seed, False, tmp / f"fix-{name}-{seed}")
                planned_fixed = fixed["planned"]
                planned_seq = info["planned"]
        rows.append({"decoder": name, "config": label, "fixed_n": planned_fixed, "sequential_max_n": planned_seq,
                     "mean_drawn": round(statistics.mean(drawn)), "saving": round(1 - statistics.mean(drawn) / planned_fixed, 3),
                     "stopped_early": f"{crossed}/{seeds}", "verdicts": ", ".join(sorted(set(verdicts)))})
        print(rows[-1], flush=True)
    return rows


def _markdown(rows: list[dict]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


HELP = "specverify audit on the ci suite's decoders: verdict parity with the suite, and rows saved by --sequential."


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, default=2, help="seeds per mutant for --sequential. Default: 2")
    parser.add_argument("--parity", action="store_true", help="audit every ci-suite decoder and compare verdicts")
    parser.add_argument("--sequential", action="store_true", help="rows drawn by --sequential vs the fixed plan")
    parser.add_argument("--only", default="", metavar="NAMES", help="comma-separated ci decoder names (parity). Default: all")


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="audit-zoo-") as tmp:
        if args.parity:
            rows = parity(Path(tmp), only={n for n in args.only.split(",") if n})
            print(_markdown(rows))
            print(f"same verdict as the ci suite: {sum(r['same'] for r in rows)} of {len(rows)} decoders")
        if args.sequential:
            print(_markdown(sequential(Path(tmp), args.seeds)))
    return 0
