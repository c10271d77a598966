"""Known-p mode of ``specverify audit`` (split from :mod:`verifier.cli.cmd_audit`).

``--decoder SPEC --target MODEL``, ``--resume RUN_DIR`` and ``--samples FILE`` against ``--target``:
an audit suite is planned (:mod:`verifier.audit.suite_builder`), run by :func:`verifier.pipeline.run_audit`
(fixed n or ``--sequential``), summarised, and optionally exported as JSONL; an ``--engine`` decoder
audit then measures its numeric floor (:mod:`verifier.engines.floor`), a known-target ``--url`` audit
the server's (:mod:`verifier.server.floor`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

from verifier.cli._audit_common import (DEFAULT_REPORT_DIR, _check_model_flags, _check_prompts, _draft_spec,
                                        _draft_unknown_why, _pair, _progress_on, _write_json)
from verifier.cli._rundir import removed_on_usage_error
from verifier.errors import invalid_argument


def _blind_notes(pair, prompts, sampling, tolerance: float, rules_arg: str | None, decoder: str | None) -> list[str]:
    """Blind-cell notes for the rules relevant to the decoder under test only.

    Relevant: ``--blind-rules`` (or ``all``), else the decoder's own rule when ``--decoder`` names a
    registered mutant whose rule is in :data:`verifier.exact.RULES`.  Otherwise one summary line per
    prompt counts the zoo's rules its first position cannot reveal (the harness's own mutants are
    not the decoder under test).
    """
    import numpy as np

    from verifier.audit.kernel_audit import blind_cell_reasons
    from verifier.exact import RULES

    if sampling.greedy:
        return []
    unknown = _draft_unknown_why(pair, decoder)
    if unknown:
        from verifier.runner.draft import skipped

        return [f"note: {skipped('blind_cells', unknown)}"]
    if rules_arg == "all":
        rules = None
    elif rules_arg:
        rules = [r.strip() for r in rules_arg.split(",") if r.strip()]
        unknown = [r for r in rules if r not in RULES]
        if unknown:
            raise invalid_argument("--blind-rules", rules_arg, "'all' or comma-separated rules of: " + ", ".join(sorted(RULES)))
    elif decoder in RULES and RULES[decoder].declared != "exact":
        rules = [decoder]
    else:
        rules = []
    notes = []
    for i, prompt in enumerate(prompts):
        ids = np.asarray([prompt], dtype=np.int64)
        p = pair.reference.next_probs(ids, sampling, len(prompt))[0]  # a penalty counts the output only
        q = pair.draft_reference.next_probs(ids, sampling, len(prompt))[0]
        if rules == []:
            count = len(blind_cell_reasons(list(p), list(q), tolerance=tolerance))
            if count:
                notes.append(f"note: position 1 of prompt {i} cannot reveal {count} of the rule zoo's defects at TV > "
                             f"{tolerance:g} (list them: --blind-rules all); later positions and other prompts may")
            continue
        for reason in blind_cell_reasons(list(p), list(q), rules=rules, tolerance=tolerance):
            notes.append(f"blind cell: prompt {i} {list(prompt)[:8]} ({sampling.label()}), position 1: {reason}")
    return notes


def _absolute_specs(raw: dict, base: Path) -> dict:
    """A saved suite must not depend on the working directory: file plugins and checkpoint paths absolute."""
    import copy

    raw = copy.deepcopy(raw)
    for d in raw.get("decoders", []):
        spec = d["decoder"]
        if ":" in spec and spec.rsplit(":", 1)[0].endswith(".py"):
            path, attr = spec.rsplit(":", 1)
            d["decoder"] = f"{(base / path).resolve()}:{attr}"
    for m in raw.get("models", {}).values():
        for role in ("target", "draft"):
            spec = m[role]
            if not spec.startswith(("tabular:", "shipped:")) and (base / spec).exists():
                m[role] = str((base / spec).resolve())
    return raw


def _print_summary(outcome, plan: dict) -> None:
    from verifier.cli._summary import print_outcome

    report = outcome.report
    d = report["decoders"][0] if report["decoders"] else {}
    verdict = d.get("verdict", report["verdict"])
    if len(report["decoders"]) > 1:  # design factors (URL audit levels): PASS only when every level passes
        verdicts = {x.get("verdict") for x in report["decoders"]}
        verdict = "PASS" if verdicts == {"PASS"} else "UNDERPOWERED" if verdicts <= {"PASS", "UNDERPOWERED"} else "BIAS DETECTED"
    alpha = report["suite"]["stats"]["alpha"] if not plan.get("sequential") else plan["family_alpha"]
    print()
    print_outcome(outcome.outcome)
    seq = outcome.sequential
    if seq is not None:
        stop = (f"stopped at n = {seq['samples']} of {seq['planned_samples']}: e-process of {seq['crossed']['cell']} crossed"
                if seq["crossed"] else f"no e-process crossed; sampled the planned n = {seq['samples']}")
        print(f"sequential: {stop}")
    if verdict == "PASS":
        where = ("in the law of the stopping position, and no row broke the stop rule" if report["cells"] and all(str(c.get("test", "")).startswith("stop") for c in report["cells"])
                 else f"in the law of the first token, of each position and of the first {plan['joint_tokens']} tokens")
        print(f"PASS: no bias >= TV {plan['target_tv']:g} (total variation, {where}) at family-wise alpha {alpha:g}, "
              "power 0.99")
        floor = (report.get("numeric_floor") or {}).get("max_tv")
        if floor is not None:  # the law audited is --target's; the engine's/server's own law is within the floor of it
            print(f"numeric floor TV {floor:.3g} <= target TV: the decoder's own target law is within {floor:.3g} of "
                  f"--target's at the checked positions, so against it this PASS rules out biases >= TV "
                  f"{plan['target_tv'] + floor:.3g} (target TV + floor)")
    elif verdict == "UNDERPOWERED" and (report.get("numeric_floor") or {}).get("above_target"):
        f = report["numeric_floor"]
        print(f"UNDERPOWERED: numeric floor TV {f['max_tv']:.3g} > target TV {plan['target_tv']:g}"
              + (f" at {f['where']}" if f.get("where") else "") + ": the law audited is not the one the decoder's own "
              "target gives, so more samples cannot PASS -- audit the exact weights/numerics of --target, or a "
              "--target-tv above the floor")
    elif verdict == "UNDERPOWERED" and not any(c.get("verdict") == "UNDERPOWERED" and c.get("effect_unit") == "tv"
                                               for c in report["cells"]):
        # no TV cell is short of power (a collision cell that detects nothing, a guard): the plan line would be wrong
        weak = next(x for x in report["decoders"] if x.get("verdict") == "UNDERPOWERED")
        print(f"UNDERPOWERED: {weak['reason']}")
    elif verdict == "UNDERPOWERED":
        need = plan["n_needed"]
        needed = dict(plan["needed"])
        for c in report["cells"]:  # a cell the plan sized too small says its own n (the n that cell needs as run)
            if c.get("verdict") == "UNDERPOWERED" and c.get("effect_unit") == "tv" and c.get("n_needed"):
                parts = str(c.get("id", "")).split("/")  # decoder/PROMPT/SAMPLING/k=K/CELL -> the plan's PROMPT/CELL
                key = f"{parts[1]}/{parts[-1]}" if len(parts) >= 3 else parts[-1]
                needed[key] = max(int(c["n_needed"]), needed.get(key) or 0)
                need = None if need is None else max(need, int(c["n_needed"]))
        worst = sorted(((v or 0, k) for k, v in needed.items()), reverse=True)[:3]
        line = (f"UNDERPOWERED: n = {plan['num_samples']} per prompt cannot see TV {plan['target_tv']:g}; n needed: "
                f"{need if need is not None else '> 1e8'} (" + ", ".join(f"{k} {v}" for v, k in worst) + ")")
        print(line + (f" -- rerun with --num-samples {need}" if need else " -- raise --target-tv"))


def _run_known_p(args, sampling) -> int:
    # only light imports before start_presample: the engine's worker waits for its calls until then, and
    # verifier.pipeline / verifier.runner.run pull in torch, transformers' helpers and statsmodels (3-4 s on 2 cores)
    from verifier.audit.sequential import PLAN_FILE, plan_record
    from verifier.audit.suite_builder import plan_audit, suite_toml

    if args.resume:
        from verifier.runner.run import load_run_suite

        suite, _info = load_run_suite(args.resume)
        try:
            plan = json.loads((Path(args.resume) / PLAN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise invalid_argument("--resume", args.resume, f"a run folder of `specverify audit` (with {PLAN_FILE})") from None
        print(f"resuming audit {args.resume} (seed {suite.seed}, n = {plan['num_samples']} per prompt)")
        run_dir = Path(args.resume)
        seq = bool(plan.get("sequential"))
        pair = None  # the run loads its pair from the stored suite
    else:
        if not args.target:
            raise invalid_argument("--target", None, "a target model for known-p mode (or use --blackbox-reference SPEC)")
        if args.run_dir:  # refused before the models load and the plan prints (run_audit checks it again)
            from verifier.runner import guards

            guards.check_fresh_run_dir(args.run_dir, guards.RUN_FILE)
        prompts = [("ids", tuple(p)) for p in args.prompt_ids] + [("text", t) for t in args.prompt]
        if not getattr(args, "url", None):  # an engine started ahead draws the first chunks while the pair loads
            from verifier.cli._presample import start_presample

            start_presample(args, _audit_spec(args, sampling, prompts, bool(args.sequential)))
        pair = _pair(args)
        _check_model_flags(args, pair)
        if args.prompt_ids:
            _check_prompts(pair, args.prompt_ids, "--prompt-ids")
        from verifier.cli._audit_url import check_stop_flags, check_text_prompts

        check_text_prompts(args, pair)  # --api mlx-lm: prompts that do not round-trip as text, before any request
        check_stop_flags(args, pair)  # --stop-token-ids: in the vocabulary, expressible by the dialect (exit 2)
        seq = bool(args.sequential)
        spec = _audit_spec(args, sampling, prompts, seq)
        audit_plan = plan_audit(spec, pair=pair)
        if not getattr(args, "url", None):
            from verifier.cli._presample import settle_presample

            settle_presample(audit_plan.num_samples)
        for line in _blind_notes(pair, audit_plan.prompts, sampling, args.blind_tolerance, args.blind_rules, args.decoder):
            print(line)
        print(audit_plan.describe())
        for note in audit_plan.notes:
            print(f"note: {note}")
        plan = plan_record(audit_plan, seq, args.alpha)
        if getattr(args, "engine_described", None) or getattr(args, "url_engine", None):
            plan["engine"] = getattr(args, "engine_described", None) or args.url_engine
        from verifier.cli._audit_url import floor_plan

        if floor_plan(args) is not None:  # known-target URL audit: kept in audit.json, so --resume measures it too
            plan["server_floor"] = floor_plan(args)
        suite = audit_plan.suite
        if args.save_suite:
            from verifier.errors import ReportWriteError

            header = [f"specverify audit as a suite: `specverify run {args.save_suite}` draws the same samples (seed {args.seed})",
                      audit_plan.describe().replace("\n", "\n# ")]
            try:
                Path(args.save_suite).write_text(suite_toml(_absolute_specs(audit_plan.raw, Path.cwd()), header), encoding="utf-8")
            except OSError as exc:
                raise ReportWriteError(f"--save-suite={args.save_suite!r} cannot be written: {exc.strerror or exc}") from None
            print(f"suite written to {args.save_suite}")
        from verifier.runner.run import new_run_dir

        run_dir = Path(args.run_dir) if args.run_dir else new_run_dir(args.report_dir or DEFAULT_REPORT_DIR, suite)
        print(f"audit run -> {run_dir}")
    from verifier.pipeline import run_audit
    from verifier.runner.run import verdict_pending

    # an engine audit measures its floor on the runner's own engine instance before the verdict (_floor_probe);
    # a URL audit's floor asks the server after it
    engine = plan.get("engine") if not plan.get("server_floor") and not getattr(args, "url", None) else None
    probe = (_floor_probe(engine["name"], plan["prompts"], plan["target_tv"])
             if isinstance(engine, dict) and engine.get("kind") == "decoder" and engine.get("name") else None)
    with removed_on_usage_error(run_dir, resume=bool(args.resume)), (  # a load error leaves no half-made folder
            verdict_pending("the numeric floor") if plan.get("server_floor") else contextlib.nullcontext()):
        outcome = run_audit(suite, run_dir, plan, resume=bool(args.resume), sequential=seq, progress=_progress_on(args),
                            floor_probe=probe, pairs={"audit": pair} if pair is not None else None)
    if probe is None and plan.get("server_floor") and outcome.report.get("decoders"):
        from verifier.cli._audit_url import measure_url_floor

        measure_url_floor(outcome, plan, suite)
    _print_summary(outcome, plan)
    report = outcome.report
    d = report["decoders"][0] if report["decoders"] else {}
    _write_json(args.json, {"mode": "known-p", "verdict": d.get("verdict", report["verdict"]), "exit_code": outcome.exit_code,
                            "plan": plan, "run_dir": str(outcome.outcome.run_dir), "reason": d.get("reason", ""),
                            "cells": report["cells"], "sequential": outcome.sequential, "seed": suite.seed,
                            "numeric_floor": report.get("numeric_floor")})
    if args.export:
        _export(args.export, outcome.outcome.run_dir, suite)
    return outcome.exit_code


def _audit_spec(args, sampling, prompts: list, seq: bool):
    """The :class:`~verifier.audit.suite_builder.AuditSpec` of a known-p audit's flags (no model needed)."""
    from verifier.audit.suite_builder import DEFAULT_TARGET_TV, AuditSpec
    from verifier.cli._audit_url import URL_TESTS
    from verifier.plugins import plugin_name

    stop = getattr(args, "url_stop_rule", None)  # --url --stop-token-ids / --max-tokens: (ids, max_tokens)
    return AuditSpec(decoder=args.decoder, decoder_name=plugin_name(args.decoder), target=args.target, draft=_draft_spec(args),
                     prompts=tuple(prompts),
                     sampling=sampling, num_draft_tokens=args.num_draft_tokens, max_new_tokens=args.max_new_tokens,
                     num_samples=args.num_samples,
                     target_tv=DEFAULT_TARGET_TV if args.target_tv is None else args.target_tv,
                     alpha=(args.alpha / 2 if seq else args.alpha) / max(1, len(getattr(args, "url_variants", ()))),
                     variants=tuple(getattr(args, "url_variants", ())), seed=args.seed, options=dict(args.option),
                     chunk_size=args.chunk_size, device=args.device, dtype=args.dtype, acceptance=args.acceptance,
                     tv_test=getattr(args, "tv_test", "pearson"),
                     alpha_allocation=getattr(args, "alpha_allocation", "equal"),
                     # a URL audit also tests independence: identical pairs of requests vs the exact collision prob;
                     # with a stop rule only the stop cells (the other cells' laws end rows at EOS only)
                     **({"tests": URL_TESTS} if getattr(args, "url", None) and not stop else {}),
                     **({"tests": ("stop",), "stop_token_ids": stop[0], "max_tokens": stop[1]} if stop else {}))


def _floor_probe(engine_name: str, prompts: list, target_tv: float):
    """Engine audits: the numeric floor (:mod:`verifier.engines.floor`), the engine's own target law vs the HF
    reference on the audit's ``prompts`` (token ids) and its sampling configs, measured by the pipeline right after
    sampling on the engine instance that drew the samples (``floor_probe`` of :func:`verifier.pipeline.run_audit`: no
    second engine start; a resumed folder without a measured floor gets one too); a floor above ``target_tv`` turns
    PASS into UNDERPOWERED.  Returns the probe: live SuiteContext -> floor record."""

    def probe(ctx) -> dict:
        spec = ctx.suite.decoders[0]
        reference = ctx.pairs[spec.models].reference
        samplings = [ctx.suite.sampling[name] for name in spec.sampling]
        try:
            floor = _floor_of(ctx.live_decoder(spec), engine_name, reference, prompts, samplings)
        except Exception as exc:  # noqa: BLE001 - the run's instance failed (e.g. its worker died while sampling)
            print(f"numeric floor: the run's {engine_name} instance cannot answer ({type(exc).__name__}: {exc}); "
                  "measuring it on a fresh instance")
            floor = _fresh_instance_floor(spec, engine_name, reference, prompts, samplings)
        if floor["max_tv"] is None:
            print(f"numeric floor: not measured ({floor['source']})")
            return floor
        above = floor["max_tv"] > target_tv
        print(f"numeric floor: TV {floor['max_tv']:.3g} (engine target law vs HF reference, first token; target TV "
              f"{target_tv:g}{': ABOVE it -> no PASS' if above else ''})")
        return {**floor, "target_tv": float(target_tv)}
    return probe


def _floor_of(decoder, engine_name: str, reference, prompts: list, samplings: list) -> dict:
    """The floor record of one engine instance: measured from its ``target_logits``, or stated as not measured
    (``max_tv`` None) when it exposes none."""
    from verifier.engines.floor import logits_source, measure_floor

    fn = logits_source(decoder)
    if fn is None:
        return {"max_tv": None, "rows": [], "source": f"engine {engine_name} exposes no target logits: the floor is not "
                "measured (the verdict assumes the engine's target law is the reference's)"}
    return measure_floor(fn, reference, prompts, samplings, source=f"{engine_name} target_logits")


def _fresh_instance_floor(spec, engine_name: str, reference, prompts: list, samplings: list) -> dict:
    """The floor on a second engine instance (the run's could not answer); its own failure propagates as before."""
    from verifier.plugins import load_plugin

    decoder = load_plugin(spec.decoder, "decoder", None, **dict(spec.options))
    try:
        return _floor_of(decoder, engine_name, reference, prompts, samplings)
    finally:
        close = getattr(decoder, "close", None)
        if callable(close):
            close()


def _export(path: str, run_dir: Path, suite) -> None:
    """Write every stored sample of the run, in chunk order, as JSONL (one prompt_id per prompt)."""
    from verifier.audit.jsonl import export_jsonl
    from verifier.runner.store import SampleStore

    store = SampleStore(run_dir)
    total, first = 0, True
    for set_dir in sorted(p for p in store.samples_dir.iterdir() if p.is_dir()):
        i = 0
        while (shard := store.read_chunk(set_dir.name, i)) is not None:
            prompt = shard.meta.get("set_key", "").split("|prompt=", 1)[-1].split("|", 1)[0]
            ids = json.loads(prompt) if prompt.startswith("[") else None
            sampling = None
            from verifier.sampling import SamplingConfig

            key = shard.meta.get("set_key", "")
            if "|sampling=" in key:
                sampling = SamplingConfig(**json.loads(key.split("|sampling=", 1)[1].split("|", 1)[0]))
            export_jsonl(path, shard.tokens, prompt_id=set_dir.name, prompt_token_ids=ids,
                         sampling=sampling, seed=int(shard.meta.get("seed", 0)), decoder=shard.meta.get("decoder", {}).get("name", ""),
                         append=not first)
            first, total, i = False, total + len(shard.tokens), i + 1
    print(f"exported {total} samples to {path}")


def _replay_suite_decoder(args, pair, sampling, vocab, eos):
    """--samples in known-p mode: the imported rows, replayed through the runner (one chunk per prompt)."""
    from verifier.audit.jsonl import ReplayDecoder, compare_target_logprobs, import_jsonl, replay_plan

    groups = import_jsonl(args.samples, max_new_tokens=args.max_new_tokens, vocab_size=vocab, eos_token_id=eos)
    decoder = ReplayDecoder(groups, vocab_size=vocab, eos_token_id=eos, name=f"imported:{Path(args.samples).name}")
    plan = replay_plan(groups, sampling, prompt_ids=args.prompt_ids, max_new_tokens=args.max_new_tokens,
                       source=Path(args.samples).name)  # usage mismatches: exit 2 before any run
    for note in plan.notes:
        print(f"note: {note}")
    args.max_new_tokens = plan.max_new_tokens
    prompts, counts = plan.prompts, [plan.num_samples]
    if pair is not None:
        for g in groups.values():
            if g.target_logprobs is not None:
                print(compare_target_logprobs(g, pair.reference).summary())
    return decoder, prompts, (min(counts) if counts else (args.num_samples or 2000)), groups


def _run_replay(args, decoder, prompts, num_samples, sampling) -> int:
    """Known-p audit of imported samples: the replay decoder lent to the runner (chunk = all rows of a prompt)."""
    from verifier.audit._live import lending

    if not args.target:
        raise invalid_argument("--target", None, "a target model for known-p mode (or use --blackbox-reference SPEC)")
    with lending(imported=decoder) as specs:
        ns = argparse.Namespace(**vars(args))
        ns.decoder, ns.prompt_ids, ns.prompt, ns.resume = specs["imported"], [list(p) for p in prompts], [], None
        ns.num_samples, ns.chunk_size, ns.sequential, ns.save_suite = num_samples, num_samples, False, None
        return _run_known_p(ns, sampling)

