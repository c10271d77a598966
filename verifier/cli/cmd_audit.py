"""``specverify audit``: audit a third-party decoder, kernel or sample file without changing its code.

Modes (exactly one of ``--decoder``, ``--kernel``, ``--samples``, ``--resume``):

* ``--decoder SPEC --target MODEL`` (known-p): an audit suite is built in memory
  (:mod:`verifier.audit.suite_builder`: the suite runner's cells -- gof at every enumerable
  position, joint, surprisal, pit, accepted) with n planned from ``--target-tv``, and run by the
  suite runner (chunked ``generate`` calls with distinct seeds, shards on disk, reports, exit codes
  0 / 1 / 2 / 3 / 4).  ``--sequential`` stops early (:mod:`verifier.audit.run_audit`).
  ``SPEC`` is a plugin ``module:factory`` / ``path/to/file.py:factory`` or a registered decoder
  name (``reference``, a mutant of the bug zoo).  ``--save-suite FILE`` writes the suite as TOML.
* ``--resume RUN_DIR``: continue an interrupted audit run.
* ``--blackbox`` / ``--blackbox-reference SPEC``: two-sample tests against plain sampling of the
  target or another plugin (:func:`verifier.audit.blackbox_audit`; no known target law).
* ``--kernel SPEC``: kernel-level audit on synthetic cases (standard + adversarial).
* ``--engine NAME``: the same, for an outside engine's kernel registered in :mod:`verifier.engines`
  (``--engine-arg KEY=VALUE`` are its options; ``specverify engines`` lists names and options).
  ``--report-dir DIR`` writes report.json + report.md (:mod:`verifier.audit.kernel_report`); then the
  exit code is the report's verdict on the emitted-token law (0 PASS, 1 BIAS DETECTED, 4 UNDERPOWERED).
* ``--samples FILE.jsonl``: imported samples, known-p against ``--target`` through the same runner
  (replayed by :class:`verifier.audit.jsonl.ReplayDecoder` in one chunk per prompt), or black-box
  against ``--blackbox-reference``.

``--export FILE.jsonl`` writes the audited decoder's samples in the import format.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from verifier.cli._diagnose_args import with_diagnose_mode
from verifier.cli._rundir import removed_on_usage_error
from verifier.errors import EXIT_BIAS, EXIT_OK, EXIT_UNDERPOWERED, EXIT_USAGE, invalid_argument

HELP = "Audit a third-party decoder (module:factory), verification kernel, or imported JSONL samples."
DEFAULT_REPORT_DIR = "reports"
from verifier.cli._defaults import KERNEL_TARGET_TV  # noqa: E402  kernel/engine mode: a cell that cannot see this TV is UNDERPOWERED (torch-free copy)


def _progress_on(args: argparse.Namespace) -> bool:
    from verifier import progress

    return progress.from_args(args)


def _option(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option {text!r} is invalid; allowed: KEY=VALUE (VALUE parsed as JSON, else a string)")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--prompt-ids {text!r} is invalid; allowed: comma-separated token ids, e.g. 5,2,9") from None
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"--prompt-ids {text!r} is invalid; allowed: at least one token id >= 0")
    return ids


def register(parser: argparse.ArgumentParser) -> None:
    from verifier.cli._defaults import AUDIT_CHUNK_SIZE as DEFAULT_CHUNK_SIZE, AUDIT_TARGET_TV as DEFAULT_TARGET_TV

    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--decoder", metavar="SPEC",
                      help="decoder: package.module:factory, path/to/file.py:factory, or a registered name (reference, full_p_fallback, ...)")
    mode.add_argument("--kernel", metavar="SPEC", help="verification-kernel plugin (the kernel function or a factory)")
    mode.add_argument("--samples", metavar="FILE", help="imported samples, .jsonl or .jsonl.gz (streamed)")
    mode.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted audit run (its stored suite and plan)")
    mode.add_argument("--engine", metavar="NAME", help="outside engine: its verification kernel (kernel audit) or its whole "
                      "speculative decoder (known-p audit); see `specverify engines`")
    mode.add_argument("--url", metavar="BASE_URL", help="a running completion server (OpenAI-compatible or llama-server; "
                      "see --api): known target with --target, two-sample with --reference-url / --reference-off")
    parser.add_argument("--engine-arg", action="append", type=_option, default=[], metavar="KEY=VALUE",
                        help="engine option (repeatable; VALUE is JSON if it parses), e.g. block_verification=true")
    parser.add_argument("--option", action="append", type=_option, default=[], metavar="KEY=VALUE",
                        help="option passed to the plugin factory (repeatable; VALUE is JSON if it parses)")
    parser.add_argument("--target", metavar="MODEL", help="target model: checkpoint folder, shipped:target or tabular:NAME")
    parser.add_argument("--draft", metavar="MODEL", help="draft model offered to factories that take `draft` (default: the target's "
                        "pair); 'unknown' declares a draft the harness cannot score (own tokenizer/vocabulary, an assistant "
                        "class, a draft the decoder loads itself): blind-cell notes and acceptance vs canonical are skipped, stated")
    parser.add_argument("--blackbox", action="store_true", help="two-sample mode: compare with plain sampling of --target")
    parser.add_argument("--blackbox-reference", metavar="SPEC", help="two-sample mode: compare with this plugin decoder")
    parser.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                        help="prompt text, tokenized with the target's tokenizer (repeatable; one set of cells per prompt)")
    parser.add_argument("--prompt-ids", action="append", type=_ids, default=[], metavar="IDS",
                        help="prompt token ids, comma-separated (repeatable). Default: tabular:NAME -> the pair's standard "
                             "context; shipped models -> the text 'def '; other checkpoints -> the text 'The'")
    parser.add_argument("--temperature", type=float, default=1.0, help="Default: 1.0")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--repetition-penalty", type=float, default=None)
    parser.add_argument("--num-draft-tokens", type=int, default=4, metavar="K", help="offered to factories as num_draft_tokens. Default: 4")
    parser.add_argument("--target-tv", type=float, default=None, metavar="TV",
                        help="smallest bias to rule out, as a total variation distance between the decoder's and the "
                             "target's law of the first token, of each later position and of the first J tokens "
                             "(J <= 3); n is planned so every such cell detects it with power 0.99 at its "
                             f"per-cell alpha. Default: {DEFAULT_TARGET_TV} (kernel/engine mode: a case whose cells "
                             f"cannot see TV is UNDERPOWERED; default there {KERNEL_TARGET_TV})")
    parser.add_argument("--num-samples", type=int, default=None, metavar="N",
                        help="samples per prompt (per arm in black-box mode). Default: planned from --target-tv "
                             "(known-p), 2000 (black-box); fewer than planned -> UNDERPOWERED with the n needed")
    parser.add_argument("--sequential", action="store_true",
                        help="sample chunk by chunk and stop as soon as an anytime-valid e-process detects bias "
                             "or every cell is powered (alpha split half/half between e-processes and the fixed-n tests)")
    parser.add_argument("--chunk-size", type=int, default=None, metavar="N",
                        help=f"rows per generate() call, each chunk with its own seed. Default: {DEFAULT_CHUNK_SIZE} up to "
                             "vocabulary ~67k at K = 2, fewer above (the sampler's logits fit 1 GiB: 131 at 256k)")
    parser.add_argument("--max-new-tokens", type=int, default=None, metavar="T",
                        help="Default: K + 1 (the first round with its bonus token); 4 in black-box mode")
    parser.add_argument("--num-draws", type=int, default=200_000, metavar="N", help="kernel mode: draws per case. Default: 200000")
    parser.add_argument("--case", action="append", default=[], metavar="NAME",
                        help="kernel mode: run only these cases (seed-3token, chain-k4, one-hot-blind, adversarial[full_p_fallback]; "
                             "repeatable). Default: all")
    parser.add_argument("--alpha", type=float, default=1e-3, help="family-wise false-alarm rate. Default: 0.001")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0")
    parser.add_argument("--vocab-size", type=int, default=None, help="vocabulary size when no --target gives it")
    parser.add_argument("--eos-token-id", type=int, default=None, help="EOS id when no --target gives it")
    parser.add_argument("--acceptance", choices=("any", "canonical"), default="any",
                        help="'canonical' declares the min(1, p/q) rule, so its accepted-count law is tested "
                             "(acceptance rule conformance, exit 1 on a mismatch); 'any' only reports acceptance beside "
                             "the bias verdict. Default: any")
    parser.add_argument("--blind-tolerance", type=float, default=0.01, metavar="TV",
                        help="flag a prompt's first position as blind to a rule when the rule moves it by <= TV. Default: 0.01")
    parser.add_argument("--blind-rules", default=None, metavar="RULES",
                        help="comma-separated rules of verifier.exact to check for blind cells, or 'all'. Default: the "
                             "decoder's own rule when --decoder names a registered mutant, else none (one summary line)")
    parser.add_argument("--report-dir", metavar="DIR", default=None,
                        help=f"known-p: reports go to DIR/<name>/<run id>/ (default {DEFAULT_REPORT_DIR}); kernel/engine "
                             "mode: write report.json and report.md here (default: none)")
    parser.add_argument("--run-dir", metavar="DIR", default=None, help="exact run folder to create (instead of --report-dir/...)")
    parser.add_argument("--save-suite", metavar="FILE", default=None,
                        help="also write the audit as a suite TOML that `specverify run FILE` reruns (same seed, same samples)")
    parser.add_argument("--device", default="cpu", help="device of the models. Default: cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64", "bfloat16", "float16"), help="Default: float32")
    from verifier import progress
    from verifier.cli import _diagnose_args

    from verifier import _call_timeout

    _call_timeout.add_argument(parser)
    progress.add_arguments(parser)
    _diagnose_args.add_arguments(parser)
    parser.add_argument("--export", metavar="FILE", help="also write the audited decoder's samples as JSONL")
    parser.add_argument("--json", metavar="FILE", help="write the verdict and every cell as JSON")
    from verifier.cli import _audit_url

    _audit_url.add_arguments(parser)


def _sampling(args):
    from verifier.sampling import SamplingConfig

    return SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, repetition_penalty=args.repetition_penalty)


def _draft_spec(args) -> str:
    return args.draft or (args.target.replace("target", "draft") if args.target.startswith("shipped:") else args.target)


def _pair(args):
    if not args.target:
        return None
    from verifier.runner.models import load_pair
    from verifier.suite.schema import ModelPair

    return load_pair(ModelPair(name="audit", target=args.target, draft=_draft_spec(args), device=args.device, dtype=args.dtype))


def _settings(decoder) -> Any:
    while decoder is not None and not hasattr(decoder, "settings"):
        decoder = getattr(decoder, "inner", None)
    return getattr(decoder, "settings", None)


def _check_output_path(flag: str, path: str | None) -> None:
    """Fail before any sampling when an output file cannot be created (exit 2, not a traceback at the end)."""
    import os

    from verifier.errors import ReportWriteError

    if not path:
        return
    folder = Path(path).parent
    if Path(path).is_dir():
        why = "it is a folder"
    elif not folder.is_dir() or not os.access(folder, os.W_OK):
        why = f"{str(folder)!r} is not a writable folder"
    else:  # os.access says yes for root even where creating fails (/proc): try to create it
        existed = Path(path).exists()
        try:
            with open(path, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            why = exc.strerror or str(exc)
        else:
            if not existed:
                Path(path).unlink(missing_ok=True)
            return
    raise ReportWriteError(f"{flag}={path!r} cannot be written: {why}; allowed: a file path in an existing, writable folder")


def _check_model_flags(args, pair) -> None:
    """--vocab-size / --eos-token-id given together with a --target must agree with the target; no
    half-precision --dtype for tabular models."""
    if pair is None:
        return
    if args.dtype in ("float16", "bfloat16") and all(s.startswith("tabular:") for s in (args.target, _draft_spec(args))):
        raise invalid_argument("--dtype", args.dtype, "float32 or float64 for tabular models (they compute in "
                               "float64 and would silently ignore a half-precision dtype)")
    if args.vocab_size is not None and args.vocab_size != pair.vocab_size:
        raise invalid_argument("--vocab-size", args.vocab_size, f"the target's value {pair.vocab_size} (--target "
                               f"{args.target!r} defines it; omit the flag or make it agree)")
    eos = args.eos_token_id
    if eos is not None and pair.eos_token_id is not None and eos != pair.eos_token_id:
        raise invalid_argument("--eos-token-id", eos, f"the target's value {pair.eos_token_id} (--target "
                               f"{args.target!r} defines it; omit the flag or make it agree)")
    if eos is not None and not 0 <= eos < pair.vocab_size:
        raise invalid_argument("--eos-token-id", eos, f"a token id in 0..{pair.vocab_size - 1} (the target's "
                               "vocabulary)")


def _check_prompts(pair, prompts, name: str) -> None:
    """Prompt ids must lie in the target's vocabulary and be as long as a tabular model's context."""
    from verifier.exact.tabular import TabularLM

    for prompt in prompts:
        if not len(prompt):
            raise invalid_argument(name, "", "at least 1 token id (the target is scored after the prompt)")
        bad = [t for t in prompt if not 0 <= t < pair.vocab_size]
        if bad:
            raise invalid_argument(name, ",".join(map(str, prompt)), f"token ids in 0..{pair.vocab_size - 1} (id {bad[0]} is outside the vocabulary)")
        for ref in (pair.reference, pair.draft_reference):
            if ref is not None and isinstance(ref.model, TabularLM) and len(prompt) < ref.model.context_len:
                raise invalid_argument(name, ",".join(map(str, prompt)), f"at least {ref.model.context_len} ids (the tabular context length)")


def _write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        from verifier.errors import ReportWriteError

        try:
            Path(path).write_text(json.dumps(payload, indent=2, default=str) + "\n")
        except OSError as exc:
            raise ReportWriteError(f"--json={path!r} cannot be written: {exc.strerror or exc}") from None


def _draft_unknown_why(pair, decoder: str | None) -> str:
    """Why the audited decoder's draft is unknown ("" when known): ``--draft unknown``, or a factory,
    class or engine that declares ``draft_known = False`` (:mod:`verifier.runner.draft`)."""
    from verifier.runner.draft import declared_draft_known

    if pair is not None and pair.draft_reference is None:
        return "--draft unknown"
    if decoder and ":" in decoder:
        from verifier.audit.plugins import _resolve

        try:
            factory = _resolve(decoder)
        except Exception:  # noqa: BLE001  the runner reports a bad spec with its own exit code
            return ""
        if not declared_draft_known(factory):
            return f"{decoder} declares draft_known = False: it loads its own draft"
    return ""


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
        p = pair.reference.next_probs(ids, sampling)[0]
        q = pair.draft_reference.next_probs(ids, sampling)[0]
        if rules == []:
            count = len(blind_cell_reasons(list(p), list(q), tolerance=tolerance))
            if count:
                notes.append(f"note: position 1 of prompt {i} cannot reveal {count} of the rule zoo's defects at TV > "
                             f"{tolerance:g} (list them: --blind-rules all); later positions and other prompts may")
            continue
        for reason in blind_cell_reasons(list(p), list(q), rules=rules, tolerance=tolerance):
            notes.append(f"blind cell: prompt {i} {list(prompt)[:8]} ({sampling.label()}), position 1: {reason}")
    return notes


def _run_blackbox(args, decoder, pair, prompts, sampling, vocab, eos, context, num_samples) -> int:
    from verifier.audit.blackbox import blackbox_audit
    from verifier.audit.plugins import load_decoder

    if args.blackbox_reference:
        reference = load_decoder(args.blackbox_reference, vocab_size=vocab, eos_token_id=eos, context=context,
                                 **dict(getattr(args, "reference_option", None) or []))
        from verifier.cli._audit_url import bind_blackbox_journals

        bind_blackbox_journals(args, decoder, reference)
    elif pair is not None:
        from verifier.decoders.speculative import AncestralDecoder

        reference = AncestralDecoder(pair.target)
    else:
        raise invalid_argument("--blackbox", True, "with --target (plain sampling of it is the reference) or --blackbox-reference SPEC")
    max_new_tokens = args.max_new_tokens or 4
    result = blackbox_audit(decoder, reference, prompts, sampling, num_samples=num_samples, max_new_tokens=max_new_tokens,
                            vocab_size=decoder.vocab_size, alpha=args.alpha, seed=args.seed, eos_token_id=decoder.eos_token_id,
                            chunk_size=args.chunk_size)
    print(result.summary())
    payload = {"mode": "blackbox", "verdict": result.verdict, "cells": [
        {"prompt": c.prompt_index, "name": c.name, "statistic": c.result.statistic, "pvalue": c.result.pvalue}
        for c in result.cells]}
    payload.update(decoder=decoder.name, sampling=sampling.to_dict(), num_samples=num_samples, seed=args.seed, alpha=args.alpha,
                   settings=_settings(decoder))
    _write_json(args.json, payload)
    return EXIT_OK if result.verdict == "PASS" else EXIT_BIAS if result.verdict == "BIAS DETECTED" else 4


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
        print(f"PASS: no bias >= TV {plan['target_tv']:g} (total variation, in the law of the first token, of each position "
              f"and of the first {plan['joint_tokens']} tokens) at family-wise alpha {alpha:g}, power 0.99")
    elif verdict == "UNDERPOWERED":
        need = plan["n_needed"]
        worst = sorted(((v or 0, k) for k, v in plan["needed"].items()), reverse=True)[:3]
        line = (f"UNDERPOWERED: n = {plan['num_samples']} per prompt cannot see TV {plan['target_tv']:g}; n needed: "
                f"{need if need is not None else '> 1e8'} (" + ", ".join(f"{k} {v}" for v, k in worst) + ")")
        print(line + (f" -- rerun with --num-samples {need}" if need else " -- raise --target-tv"))


def _run_known_p(args, sampling) -> int:
    from verifier.audit.run_audit import PLAN_FILE, plan_record, run_audit
    from verifier.audit.suite_builder import DEFAULT_TARGET_TV, AuditSpec, plan_audit, suite_toml
    from verifier.runner import load_run_suite, new_run_dir

    if args.resume:
        suite, _info = load_run_suite(args.resume)
        try:
            plan = json.loads((Path(args.resume) / PLAN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise invalid_argument("--resume", args.resume, f"a run folder of `specverify audit` (with {PLAN_FILE})") from None
        print(f"resuming audit {args.resume} (seed {suite.seed}, n = {plan['num_samples']} per prompt)")
        run_dir = Path(args.resume)
        seq = bool(plan.get("sequential"))
    else:
        if not args.target:
            raise invalid_argument("--target", None, "a target model for known-p mode (or use --blackbox-reference SPEC)")
        pair = _pair(args)
        _check_model_flags(args, pair)
        prompts = [("ids", tuple(p)) for p in args.prompt_ids] + [("text", t) for t in args.prompt]
        if args.prompt_ids:
            _check_prompts(pair, args.prompt_ids, "--prompt-ids")
        seq = bool(args.sequential)
        from verifier.audit.plugins import plugin_name

        spec = AuditSpec(decoder=args.decoder, decoder_name=plugin_name(args.decoder), target=args.target, draft=_draft_spec(args), prompts=tuple(prompts),
                         sampling=sampling, num_draft_tokens=args.num_draft_tokens, max_new_tokens=args.max_new_tokens,
                         num_samples=args.num_samples,
                         target_tv=DEFAULT_TARGET_TV if args.target_tv is None else args.target_tv,
                         alpha=(args.alpha / 2 if seq else args.alpha) / max(1, len(getattr(args, "url_variants", ()))),
                         variants=tuple(getattr(args, "url_variants", ())), seed=args.seed, options=dict(args.option),
                         chunk_size=args.chunk_size, device=args.device, dtype=args.dtype, acceptance=args.acceptance)
        audit_plan = plan_audit(spec, pair=pair)
        for line in _blind_notes(pair, audit_plan.prompts, sampling, args.blind_tolerance, args.blind_rules, args.decoder):
            print(line)
        print(audit_plan.describe())
        for note in audit_plan.notes:
            print(f"note: {note}")
        plan = plan_record(audit_plan, seq, args.alpha)
        if getattr(args, "engine_described", None) or getattr(args, "url_engine", None):
            plan["engine"] = getattr(args, "engine_described", None) or args.url_engine
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
        run_dir = Path(args.run_dir) if args.run_dir else new_run_dir(args.report_dir or DEFAULT_REPORT_DIR, suite)
        print(f"audit run -> {run_dir}")
    with removed_on_usage_error(run_dir, resume=bool(args.resume)):  # a load error leaves no half-made folder
        outcome = run_audit(suite, run_dir, plan, resume=bool(args.resume), sequential=seq, progress=_progress_on(args))
    if getattr(args, "engine_described", None) and not args.resume:
        _numeric_floor(args, outcome, plan, suite, sampling)
    _print_summary(outcome, plan)
    report = outcome.report
    d = report["decoders"][0] if report["decoders"] else {}
    _write_json(args.json, {"mode": "known-p", "verdict": d.get("verdict", report["verdict"]), "exit_code": outcome.exit_code,
                            "plan": plan, "run_dir": str(outcome.outcome.run_dir), "reason": d.get("reason", ""),
                            "cells": report["cells"], "sequential": outcome.sequential, "seed": suite.seed})
    if args.export:
        _export(args.export, outcome.outcome.run_dir, suite)
    return outcome.exit_code


def _numeric_floor(args, outcome, plan: dict, suite, sampling) -> None:
    """Engine audits: the engine's own target law vs the HF reference on the audit's prompts
    (:mod:`verifier.engines.floor`); a floor above the target TV turns PASS into UNDERPOWERED."""
    from verifier.engines import get_engine
    from verifier.engines.floor import apply_floor, logits_source, measure_floor
    from verifier.reports import write_reports
    from verifier.runner.models import load_pair

    report = outcome.report
    from verifier.audit.plugins import load_plugin

    engine = get_engine(args.engine_described["name"])
    decoder = load_plugin(args.decoder, "decoder", None, **dict(args.option))  # a second instance: the runner's is closed
    try:
        fn = logits_source(decoder)
        if fn is None:
            report["numeric_floor"] = {"max_tv": None, "rows": [], "source": f"engine {engine.name} exposes no target logits: "
                                       "the floor is not measured (the verdict assumes the engine's target law is the reference's)"}
            print(f"numeric floor: not measured ({report['numeric_floor']['source']})")
        else:
            pair = load_pair(suite.models["audit"], suite.base_dir)
            floor = measure_floor(fn, pair.reference, plan["prompts"], [sampling], source=f"{engine.name} target_logits")
            outcome.outcome.exit_code = apply_floor(report, floor, plan["target_tv"])
            print(f"numeric floor: TV {floor['max_tv']:.3g} (engine target law vs HF reference, first token; target TV "
                  f"{plan['target_tv']:g}{': ABOVE it -> no PASS' if report['numeric_floor']['above_target'] else ''})")
        write_reports(report, outcome.outcome.run_dir)
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


@with_diagnose_mode  # --diagnose / --no-diagnosis
def run(args: argparse.Namespace) -> int:
    from verifier import _call_timeout

    _call_timeout.apply(args)  # --call-timeout: checked (exit 2) and handed to the runner
    _check_output_path("--json", args.json)
    _check_output_path("--export", args.export)
    _check_output_path("--save-suite", args.save_suite)
    if args.engine_arg and not (args.engine or args.kernel):
        raise invalid_argument("--engine-arg", args.engine_arg, "with --engine NAME or --kernel SPEC")
    if args.num_draft_tokens < 1:
        raise invalid_argument("--num-draft-tokens", args.num_draft_tokens, "an integer >= 1")
    if not args.blind_tolerance >= 0:
        raise invalid_argument("--blind-tolerance", args.blind_tolerance, "a total variation >= 0")
    from verifier.cli._audit_engines import _route_decoder_engine, _run_kernel

    if args.url:
        from verifier.cli._audit_url import route_url

        route_url(args)  # -> --decoder verifier.server.decoder:decoder with the server options (two-sample: a reference too)
        if args.design == "self-reported":  # no local model: verifier.server.self_audit
            from verifier.cli._audit_url import run_self_reported

            return run_self_reported(args)
    elif args.reference_url or args.reference_off:
        raise invalid_argument("--reference-url" if args.reference_url else "--reference-off",
                               args.reference_url or True, "with --url BASE_URL")
    if args.engine and _route_decoder_engine(args):
        sampling = _sampling(args)
        args.engine_class.check_sampling(sampling)  # exit 2 before the engine starts
        return _run_known_p(args, sampling)
    if args.kernel or args.engine:
        if args.target_tv is None:
            args.target_tv = KERNEL_TARGET_TV
        return _run_kernel(args)
    sampling = _sampling(args)
    if args.resume or (args.decoder and not (args.blackbox or args.blackbox_reference)):
        return _run_known_p(args, sampling)
    from verifier.audit.plugins import load_decoder

    pair = _pair(args)
    _check_model_flags(args, pair)
    vocab = args.vocab_size if args.vocab_size is not None else (pair.vocab_size if pair else None)
    eos = args.eos_token_id if args.eos_token_id is not None else (pair.eos_token_id if pair else None)
    context = {}
    if pair is not None:
        context = {"target": lambda: pair.target, "draft": lambda: pair.draft, "vocab_size": lambda: pair.vocab_size,
                   "eos_token_id": lambda: pair.eos_token_id}
    context["num_draft_tokens"] = lambda: args.num_draft_tokens
    if pair is None:  # no model: --vocab-size / --eos-token-id are what a factory taking them gets
        if vocab is not None:
            context["vocab_size"] = lambda: vocab
        if eos is not None:
            context["eos_token_id"] = lambda: eos
    if args.samples:
        if vocab is None:
            raise invalid_argument("--vocab-size", None, "an integer (or --target) to validate imported token ids")
        decoder, prompts, num_samples, _groups = _replay_suite_decoder(args, pair, sampling, vocab, eos)
        if pair is not None:
            _check_prompts(pair, prompts, "--prompt-ids" if args.prompt_ids else f"prompt_token_ids in {args.samples}")
        if not (args.blackbox or args.blackbox_reference):
            return _run_replay(args, decoder, prompts, num_samples, sampling)
    else:
        decoder = load_decoder(args.decoder, vocab_size=vocab, eos_token_id=eos, context=context, **dict(args.option))
        num_samples = args.num_samples or 2000
        prompts = _blackbox_prompts(args, pair)
        if pair is not None:
            _check_prompts(pair, prompts, "--prompt-ids")
    return _run_blackbox(args, decoder, pair, prompts, sampling, vocab, eos, context, num_samples)


def _blackbox_prompts(args, pair) -> list[list[int]]:
    """--prompt-ids, then --prompt TEXT (target tokenizer); default: the known-p audit's default prompt."""
    from verifier.audit.suite_builder import default_prompt
    from verifier.runner.models import encode_prompt
    from verifier.suite.schema import Prompt

    prompts = [list(p) for p in args.prompt_ids]
    if pair is None:
        if args.prompt:
            raise invalid_argument("--prompt", args.prompt[0], "with --target (its tokenizer encodes the text), or --prompt-ids")
        return prompts or [[0]]
    texts = list(args.prompt)
    if not prompts and not texts:
        kind, value = default_prompt(args.target, pair)
        if kind == "ids":
            return [list(value)]
        texts = [value]
    return prompts + [list(encode_prompt(Prompt(f"prompt{i}", t, None), pair)) for i, t in enumerate(texts)]


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


__all__ = ["HELP", "register", "run", "EXIT_USAGE"]
