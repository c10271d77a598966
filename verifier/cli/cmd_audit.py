"""``specverify audit``: audit a third-party decoder, kernel or sample file without changing its code.

Modes (exactly one of ``--decoder``, ``--kernel``, ``--samples``, ``--resume``):

* ``--decoder SPEC --target MODEL`` (known-p): an audit suite is built in memory
  (:mod:`verifier.audit.suite_builder`: the suite runner's cells -- gof at every enumerable
  position, joint, surprisal, pit, accepted) with n planned from ``--target-tv``, and run by the
  suite runner (chunked ``generate`` calls with distinct seeds, shards on disk, reports, exit codes
  0 / 1 / 2 / 3 / 4).  ``--sequential`` stops early (:func:`verifier.pipeline.run_audit`).
  ``SPEC`` is a plugin ``module:factory`` / ``path/to/file.py:factory`` or a registered decoder
  name (``reference``, a mutant of the bug zoo).  ``--save-suite FILE`` writes the suite as TOML.
* ``--resume RUN_DIR``: continue an interrupted audit run; a kernel report folder (``--kernel``/``--engine``
  with ``--report-dir``) continues its stored draws (:mod:`verifier.audit.kernel_checkpoint`).
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

from verifier.cli._audit_common import (DEFAULT_REPORT_DIR, _check_model_flags, _check_output_path, _check_prompts,
                                        _option, _pair, _sampling, _settings, _write_json)
from verifier.cli._defaults import KERNEL_TARGET_TV  # kernel/engine mode: a cell that cannot see this TV is UNDERPOWERED (torch-free copy)
from verifier.cli._diagnose_args import with_diagnose_mode
from verifier.errors import EXIT_BIAS, EXIT_OK, EXIT_USAGE, invalid_argument

HELP = "Audit a third-party decoder (module:factory), verification kernel, or imported JSONL samples."


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
    parser.add_argument("--repetition-penalty", type=float, default=None,
                        help="Hugging Face's penalty over prompt + generated tokens (> 0). Default: none")
    parser.add_argument("--presence-penalty", type=float, default=None,
                        help="vLLM's: subtracted once from the logit of each token generated so far (the prompt not "
                             "counted; |value| <= 100). Default: none")
    parser.add_argument("--frequency-penalty", type=float, default=None,
                        help="vLLM's: value x (times generated) subtracted from each logit (the prompt not counted; "
                             "|value| <= 100). Default: none")
    parser.add_argument("--min-p", type=float, default=None,
                        help="after temperature, top-k and top-p keep the tokens with p >= MIN_P x (largest p), in "
                             "[0, 1]. Default: none")
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
    parser.add_argument("--num-draws", type=int, default=None, metavar="N",
                        help="kernel mode: draws per case (with --resume of a kernel audit: the new total). Default: 200000")
    parser.add_argument("--shard", metavar="I/N", default=None,
                        help="kernel mode with --report-dir: draw shard I of N (its own seed, spawned from --seed; 'env': "
                             "the launcher's rank variables); `specverify merge DIR... --out DIR` judges the summed draws. "
                             "Default: one process")
    parser.add_argument("--case", action="append", default=[], metavar="NAME",
                        help="kernel mode: run only these cases (seed-3token, chain-k4, one-hot-blind, adversarial[full_p_fallback]; "
                             "repeatable). Default: all")
    parser.add_argument("--alpha", type=float, default=1e-3, help="family-wise false-alarm rate. Default: 0.001")
    parser.add_argument("--tv-test", choices=("pearson", "weighted", "mixture"), default="pearson",
                        help="test of the TV cells (known-p mode): Pearson's chi-square, the weighted identity test "
                             "(Valiant-Valiant p^-2/3 weights, Monte Carlo null), whose certificate needs 0.57-0.75x "
                             "the samples on the shipped pair (reports/benchmarks.md section 15), or the sign-mixture "
                             "test (sum log cosh, measured power; planning takes minutes per cell: section 25). "
                             "Default: pearson")
    parser.add_argument("--alpha-allocation", choices=("equal", "planned"), default="equal",
                        help="split of the gate's Holm half over the cells (known-p mode): 'equal' (Holm: every cell at "
                             "alpha/(2m)) or 'planned' (weighted Holm, weights fixed from the exact laws before sampling: "
                             "the TV cells' n equalised, the other cells kept at alpha/(2m); same family alpha; "
                             "reports/benchmarks.md section 32). Default: equal")
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


def _run_blackbox(args, decoder, pair, prompts, sampling, vocab, eos, context, num_samples) -> int:
    from verifier.audit.blackbox import blackbox_audit
    from verifier.plugins import load_decoder

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
    from verifier.cli._audit_known_p import _replay_suite_decoder, _run_known_p, _run_replay

    if args.url:
        from verifier.cli._audit_url import route_url

        route_url(args)  # -> --decoder verifier.server.decoder:decoder with the server options (two-sample: a reference too)
        if args.design == "self-reported":  # no local model: verifier.server.self_audit
            from verifier.cli._audit_url import run_self_reported

            return run_self_reported(args)
    else:  # a URL-audit flag without --url would be ignored: refused, naming it (exit 2)
        from verifier.cli._audit_url import check_url_only

        check_url_only(args)
    if args.engine and _route_decoder_engine(args):
        if args.shard:
            raise invalid_argument("--shard", args.shard, "with a kernel engine (a decoder engine's audit shards with "
                                   "`specverify run SUITE --shard I/N`)")
        sampling = _sampling(args)
        args.engine_class.check_sampling(sampling)  # exit 2 before the engine starts
        from verifier.cli._prestart import discard_prestarted, prestart_engine

        prestart_engine(args)  # its start-up runs beside the harness's imports, pair load and plan; the runner adopts it
        try:
            return _run_known_p(args, sampling)
        finally:
            discard_prestarted()  # one no decoder adopted (the audit stopped first) is killed now
    if args.resume:
        from verifier.audit.kernel_checkpoint import is_kernel_checkpoint

        if is_kernel_checkpoint(args.resume):  # a kernel report folder: continue its stored draws
            from verifier.cli._audit_engines import restore_kernel_resume

            restore_kernel_resume(args)
    if args.shard and not (args.kernel or args.engine):
        raise invalid_argument("--shard", args.shard, "with --kernel SPEC or a kernel --engine (decoder audits shard with "
                               "`specverify run SUITE --shard I/N`)")
    if args.kernel or args.engine:
        if args.target_tv is None:
            args.target_tv = KERNEL_TARGET_TV
        return _run_kernel(args)
    sampling = _sampling(args)
    if args.resume or (args.decoder and not (args.blackbox or args.blackbox_reference)):
        return _run_known_p(args, sampling)
    from verifier.plugins import load_decoder

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
            from verifier.cli._audit_url import check_text_prompts

            check_text_prompts(args, pair, prompts)  # two-sample --api mlx-lm: text prompts that round-trip
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


__all__ = ["HELP", "register", "run", "EXIT_USAGE"]
