"""``specverify audit --url BASE_URL``: audit a running completion server (split from :mod:`verifier.cli.cmd_audit`).

Designs
-------
known target (``--target MODEL``, the open weights the endpoint claims to serve)
    Rewritten to the known-p audit of the plugin ``verifier.server.decoder:decoder`` with the
    server options, so the suite runner, the report, ``--resume`` and the diagnosis are the same
    as for any decoder; the server drafts with its own model (``--draft unknown``).  Then the
    numeric floor (:mod:`verifier.server.floor`, :func:`measure_url_floor`): the server's reported
    law with speculation off vs ``--target``'s at a seeded sample of positions.
two-sample (``--reference-url URL``, or ``--reference-off`` on llama-server)
    Speculation on vs off: the same requests to a second server without speculation, or to the
    same server with speculation switched off per request; the black-box cells
    (:func:`verifier.audit.blackbox_audit`).
self-reported (``--design self-reported``, the default without ``--target`` and reference flags)
    No local model: the law at every emitted position is rebuilt from the top logprobs the server
    returns (``--logprobs K``, ``--top-k <= K``), with a randomized PIT, a first-token chi-square,
    collision cells and a logprob consistency cell (:mod:`verifier.server.self_audit`);
    ``--reference-url`` is then the speculation-off server the consistency cell scores with.

The token for a protected endpoint is read from the environment variable named by
``--api-key-env``; no flag carries it, so no report, suite or journal does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from verifier.cli._audit_url_floor import floor_logprobs, floor_plan, measure_url_floor
from verifier.errors import invalid_argument

__all__ = ["add_arguments", "check_url_only", "check_text_prompts", "check_stop_flags", "route_url", "bind_blackbox_journals", "run_self_reported", "floor_plan",
           "measure_url_floor", "URL_DECODER", "DESIGNS", "URL_TESTS", "SELF_REPORTED_ONLY"]

DESIGNS = ("known-target", "two-sample", "self-reported")

URL_DECODER = "verifier.server.decoder:decoder"  # the plugin factory a URL audit's suite names
# known target: + the independence cells, collision (repeated completions) and serial (correlated requests, rows in
# request order: ServerDecoder returns request r of a chunk as its row r)
URL_TESTS = ("gof", "joint", "surprisal", "pit", "collision", "serial", "accepted")
MAX_FLOOR_POSITIONS = 1000  # --floor-positions: one request each, per prompt and sampling config
# options only --design self-reported reads (the known-target and two-sample designs would ignore them)
SELF_REPORTED_ONLY = ("--collisions", "--consistency-positions", "--reported-logprobs")


SEEN = "url_flags_seen"  # the Namespace attribute: the URL-only flags present on the command line, in order


def _seen_action(base: type) -> type:
    """``base`` (an argparse action class) that also records its flag in ``namespace.url_flags_seen`` when the
    command line holds it -- at any value, the default included (what :func:`check_url_only` refuses)."""

    class Seen(base):  # type: ignore[misc, valid-type]
        def __call__(self, parser, namespace, values, option_string=None):
            super().__call__(parser, namespace, values, option_string)
            setattr(namespace, SEEN, tuple(getattr(namespace, SEEN, ())) + (self.option_strings[0],))

    Seen.__name__ = f"Seen{base.__name__}"
    return Seen


class _Recorded:
    """An argument group that keeps the actions added to it (the URL-only flags :func:`check_url_only` checks) and
    marks each as seen when the command line holds it (:func:`_seen_action`)."""

    def __init__(self, group) -> None:
        self.group, self.actions = group, []

    def add_argument(self, *args, **kwargs):
        action = self.group.add_argument(*args, **kwargs)
        action.__class__ = _seen_action(type(action))  # the same action, plus the record of its presence
        self.actions.append(action)
        return action


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--url`` group's options (``--url`` itself is in the audit's mode group); every one of them is
    URL-only: ``url_only_flags`` (flag, dest, default) lets :func:`check_url_only` refuse them without ``--url``."""
    from verifier.server.dialects import DIALECTS

    group = _Recorded(parser.add_argument_group("URL audit (--url BASE_URL)"))
    group.add_argument("--api", default="openai-completions", metavar="DIALECT",
                       help="request format: " + ", ".join(sorted(DIALECTS)) + ". Default: openai-completions")
    group.add_argument("--model", default=None, metavar="NAME", help="the `model` field of requests (servers with one model ignore it)")
    group.add_argument("--num-concurrent", type=int, default=4, metavar="N", help="requests in flight at once. Default: 4")
    group.add_argument("--max-retries", type=int, default=5, metavar="N",
                       help="retries of a request after a connection error, 429 or 5xx (exponential backoff). Default: 5")
    group.add_argument("--request-timeout", type=float, default=300.0, metavar="SECONDS", help="per request. Default: 300")
    group.add_argument("--api-key-env", default=None, metavar="VAR",
                       help="environment variable holding a bearer token (the token itself never appears in a flag or report)")
    group.add_argument("--n-per-request", type=int, default=1, metavar="N",
                       help="completions per request (`n`; openai-completions only). Default: 1")
    group.add_argument("--logprobs", type=int, default=None, metavar="K",
                       help="also ask for the top-K logprobs of each emitted token (kept in the response journal); known target: "
                            "the numeric floor's K (above the server's cap -- vLLM --max-logprobs, default 20 -- the server refuses the "
                            "request: exit 2). Default: none (the floor asks for 20)")
    group.add_argument("--speculation", choices=("server", "on", "off"), default="server",
                       help="llama-server: switch speculation per request (speculative.n_max = --num-draft-tokens, or 0); "
                            "'server' sends no switch. Default: server")
    group.add_argument("--concurrency-levels", default=None, metavar="N,N,...",
                       help="design factor: audit at each number of requests in flight (e.g. 1,4,16), each level its own "
                            "decoder with its own cells and verdict (alpha split over the levels). Default: --num-concurrent only")
    group.add_argument("--mixed-batch", action="store_true",
                       help="design factor: also audit with background requests in flight (greedy and T=0.5 rows, a longer "
                            "prompt) sharing the server's batches with the audited ones")
    group.add_argument("--unseeded", action="store_true",
                       help="design factor (known target): also audit requests that carry no seed field (the server's own "
                            "randomness); its collision cell sees requests that share one random stream")
    group.add_argument("--n-levels", default=None, metavar="N,N,...",
                       help="design factor (openai-completions): completions per request, e.g. 1,4 (`n = 1` vs `n > 1`)")
    group.add_argument("--speculation-unverified", action="store_true",
                       help="accept a PASS from a server that exposes no speculation counters and no per-request draft "
                            "figures (default: such a run is UNDERPOWERED, 'speculation not observable')")
    group.add_argument("--reference-url", default=None, metavar="URL",
                       help="two-sample design: the same target served without speculation; its samples are the reference")
    group.add_argument("--reference-off", action="store_true",
                       help="two-sample design on llama-server: the reference is the same server with speculation off per request")
    group.add_argument("--design", choices=DESIGNS, default=None,
                       help="known-target (--target loaded here), two-sample (--reference-url / --reference-off) or "
                            "self-reported (no local model: the samples against the top logprobs the server reports; "
                            "needs --logprobs K, --top-k <= K, --vocab-size, --prompt-ids; --reference-url is then the "
                            "speculation-off server of the consistency cell). Default: known-target with --target, "
                            "two-sample with a reference flag, else self-reported")
    group.add_argument("--collisions", type=int, default=200, metavar="N",
                       help="self-reported: completions per collision cell (one seeded, one unseeded; identical disjoint "
                            "pairs against the law's collision probability); 0 skips them. Default: 200")
    group.add_argument("--consistency-positions", type=int, default=32, metavar="N",
                       help="self-reported: emitted positions re-scored with speculation off (uniform, seeded by --seed) "
                            "to check the reported logprobs. Default: 32")
    group.add_argument("--floor-positions", type=int, default=None, metavar="N",
                       help="known target: positions per prompt (the prompt + N-1 emitted prefixes, seeded) at which the "
                            "server's reported top-K law (one-token requests, speculation off; K = --floor-logprobs, --logprobs or 20) is "
                            "compared with --target's -- the numeric floor; a floor above --target-tv turns PASS into "
                            "UNDERPOWERED; 0 skips it. Default: 8")
    group.add_argument("--floor-logprobs", type=int, default=None, metavar="K",
                       help="known target: K of the numeric floor's one-token requests only (the sample requests keep "
                            "--logprobs). K >= the vocabulary size, or --top-k <= K, makes the floor exact; below, the "
                            "mass outside the top K counts as disagreeing (an upper bound). Above the server's cap "
                            "on --api mlx-lm (11), the whole row is rebuilt by logit_bias sweeps (one request per 10 "
                            "ids: exact). Default: --logprobs, else 20 within the server's cap")
    group.add_argument("--reported-logprobs", choices=("raw", "processed"), default=None,
                       help="self-reported: what the server's logprobs are -- raw (temperature 1, before any sampler: vLLM's "
                            "default) or processed (after the sampler chain: llama-server post_sampling_probs, which "
                            "--api llama-server asks for). Default: the dialect's")
    group.add_argument("--stop-token-ids", default=None, metavar="IDS",
                       help="known target: the requests' stop rule (issue 29 kind 5), comma-separated token ids that end "
                            "a completion beside EOS; tests = stop (the deterministic stop-rule cell and the law of the "
                            "stopping position). vLLM gets stop_token_ids; llama-server stop strings, one ASCII "
                            "character per id, mapped with --target's tokenizer (an id set it cannot express: exit 2)")
    group.add_argument("--max-tokens", type=int, default=None, metavar="N",
                       help="known target: the requests' length limit (a stop rule), below --max-new-tokens (the "
                            "rows' width), so a reply past it shows. Given without --max-new-tokens, the rows are "
                            "max(N + 2, K + 2) wide. Default: none (the limit is --max-new-tokens)")
    parser.set_defaults(url_only_flags=tuple((a.option_strings[0], a.dest, a.default) for a in group.actions),
                        **{SEEN: ()})


def _given(args: argparse.Namespace, flags) -> list[tuple[str, object]]:
    """(flag, value) of each of ``flags`` (``url_only_flags`` entries) present on the command line, in the order
    given -- whatever its value: a flag written at its default value is given too (its presence says the user
    meant it for a URL audit)."""
    seen = getattr(args, SEEN, ())
    dests = {flag: dest for flag, dest, _default in flags}
    return [(flag, getattr(args, dests[flag])) for flag in dict.fromkeys(seen) if flag in dests]


def check_url_only(args: argparse.Namespace) -> None:
    """Without ``--url``: refuse every URL-audit option on the command line (exit 2, naming the flag and its
    value), at any value, its default included -- each would be silently ignored.

    Raises
    ------
    InvalidArgumentError
        The first URL-only flag given, with what it needs.
    """
    for flag, value in _given(args, getattr(args, "url_only_flags", ())):
        why = ("with --url BASE_URL (a URL-audit option; --resume continues a URL audit with the options it was "
               "started with)" if args.resume else "with --url BASE_URL (a URL-audit option; without --url it would be ignored)")
        raise invalid_argument(flag, value, why)


def _server_options(args: argparse.Namespace, url: str, speculative: bool | None) -> dict:
    options = {"base_url": url, "api": args.api, "num_concurrent": args.num_concurrent, "max_retries": args.max_retries,
               "request_timeout_s": args.request_timeout, "n_per_request": args.n_per_request}
    for key, value in (("model", args.model), ("api_key_env", args.api_key_env), ("logprobs", args.logprobs),
                       ("speculative", speculative), ("require_speculation", False if args.speculation_unverified else None)):
        if value is not None:
            options[key] = value
    return options


def route_url(args: argparse.Namespace) -> None:
    """Rewrite ``--url`` to the plugin decoder ``verifier.server.decoder:decoder`` with the server options
    (and, for the two-sample design, the reference's), checking every option before any request.

    Raises
    ------
    InvalidArgumentError
        A bad or conflicting option (exit 2).
    """
    from verifier.runner.draft import UNKNOWN_DRAFT, is_unknown
    from verifier.server.client import ServerSettings
    from verifier.server.dialects import check_logprobs, get_dialect

    dialect = get_dialect(args.api)
    if args.option:
        raise invalid_argument("--option", dict(args.option), "no --option with --url (the server options are flags)")
    if args.design is None:
        args.design = ("known-target" if args.target and not (args.reference_url or args.reference_off) else
                       "two-sample" if args.reference_url or args.reference_off else "self-reported")
    if args.design != "self-reported":  # their design would ignore them
        for flag, value in _given(args, [f for f in args.url_only_flags if f[0] in SELF_REPORTED_ONLY]):
            raise invalid_argument(flag, value, f"with --design self-reported (the {args.design} design does not "
                                   "use it)")
    for flag, value in (("--floor-positions", args.floor_positions), ("--floor-logprobs", args.floor_logprobs)):
        if value is not None and args.design != "known-target":
            raise invalid_argument(flag, value, "with the known-target design (--target, no --reference-url/"
                                   "--reference-off): the floor compares the server with --target")
    stop = _stop_flags(args)
    if stop and args.design != "known-target":
        raise invalid_argument("--stop-token-ids" if args.stop_token_ids is not None else "--max-tokens",
                               args.stop_token_ids if args.stop_token_ids is not None else args.max_tokens,
                               "with the known-target design (--target, no --reference-url/--reference-off): the stop "
                               "cells test the rows against --target's law of the stopping position")
    if args.design == "self-reported":
        _check_self_reported(args, dialect)
        return
    if args.design == "two-sample" and not (args.reference_url or args.reference_off):
        raise invalid_argument("--design", "two-sample", "with --reference-url URL or --reference-off")
    if args.design == "known-target" and not args.target:
        raise invalid_argument("--target", None, "the model the server claims to serve, for --design known-target (or "
                               "--design self-reported: no local model)")
    if args.reference_url and args.reference_off:
        raise invalid_argument("--reference-off", True, "either --reference-url URL or --reference-off, not both")
    if args.reference_off and not dialect.has_switch:
        raise invalid_argument("--reference-off", True, "with --api llama-server or mlx-lm (a per-request speculation "
                               "switch); for other servers start one without speculation and give it as --reference-url")
    if args.speculation != "server" and not dialect.has_switch:
        raise invalid_argument("--speculation", args.speculation, "'server' with --api " + args.api + " (no per-request switch)")
    if args.mixed_batch and not dialect.shares_batches:
        raise invalid_argument("--mixed-batch", True, f"not with --api {args.api}: that server serves one request at a time "
                               "(mlx_lm server with a draft model never batches requests), so no background request "
                               "can share a batch with the audited ones")
    if args.concurrency_levels is not None and not dialect.shares_batches:
        raise invalid_argument("--concurrency-levels", args.concurrency_levels, f"not with --api {args.api}: that server "
                               "serves one request at a time (mlx_lm server runs every seeded request, and every request "
                               "with a draft model, alone in its one generation thread; the others wait), so every "
                               "level would audit the same one-at-a-time server while its cells claimed N in flight "
                               "(--num-concurrent N still sets how many requests the client keeps queued)")
    from verifier.cli._audit_common import _sampling

    floor_k = floor_logprobs(args, dialect)
    if (args.floor_logprobs is not None and dialect.max_top_logprobs and floor_k > dialect.max_top_logprobs
            and not dialect.bias_sweep):
        raise invalid_argument("--floor-logprobs", floor_k, f"an integer in 1..{dialect.max_top_logprobs} with --api "
                               f"{args.api} (the server's top-logprobs cap)")
    dialect.check_request_options(_sampling(args), args.logprobs if args.floor_logprobs is not None else floor_k)
    if stop:  # the sample requests' options with the stop rule (llama-server's strings: check_stop_flags)
        from verifier.server.dialects import StopRule

        dialect.check_request_options(_sampling(args), args.logprobs, stop=StopRule(stop[0], stop[1]))
    if dialect.needs_text and (not args.target or args.target.startswith("tabular:")):
        raise invalid_argument("--target", args.target, f"a checkpoint with a tokenizer (e.g. shipped:target) with --api "
                               f"{args.api}: the server takes text prompts, written by the target's tokenizer")
    if not 1 <= args.n_per_request <= dialect.max_n:
        raise invalid_argument("--n-per-request", args.n_per_request, f"an integer in 1..{dialect.max_n} for --api {args.api}")
    if args.floor_positions is not None and not 0 <= args.floor_positions <= MAX_FLOOR_POSITIONS:
        raise invalid_argument("--floor-positions", args.floor_positions, f"an integer in 0..{MAX_FLOOR_POSITIONS} "
                               "(0: no numeric floor)")
    if args.floor_positions == 0 and args.floor_logprobs is not None:  # it would be stored in the plan, never used
        raise invalid_argument("--floor-logprobs", args.floor_logprobs, "not with --floor-positions 0 (no floor is measured)")
    check_logprobs(args.logprobs)
    for url in (args.url, args.reference_url):  # checked here: exit 2 before a model is loaded
        if url is not None:
            ServerSettings(url, num_concurrent=args.num_concurrent, max_retries=args.max_retries,
                           timeout_s=args.request_timeout, api_key_env=args.api_key_env)
    if stop and stop[1] is not None and args.max_new_tokens is None and not args.resume:
        args.max_new_tokens = max(stop[1] + 2, args.num_draft_tokens + 2)
        print(f"note: --max-new-tokens {args.max_new_tokens} (--max-tokens {stop[1]} + 2, at least k + 2: the rows are "
              "wider than the requests' limit, so a reply past it shows)")
    if stop and stop[1] is not None and args.max_new_tokens is not None and stop[1] >= args.max_new_tokens:
        raise invalid_argument("--max-tokens", stop[1], f"an integer in 1..{args.max_new_tokens - 1} (below "
                               f"--max-new-tokens {args.max_new_tokens}, the rows' width, so a reply past the limit "
                               "shows in its row)")
    if args.max_new_tokens is None and not args.resume:
        # servers never draft a request's last token (llama-server caps a draft at n_predict - generated - 1,
        # docs/servers.md): k + 1 tokens would leave k = 1 unspeculated and k > 1 one draft short
        args.max_new_tokens = args.num_draft_tokens + 2
        print(f"note: --max-new-tokens {args.max_new_tokens} (k + 2: a server drafts no request's last token, so a "
              "full round of k drafts needs k + 2 tokens)")
    speculative = {"server": None, "on": True, "off": False}[args.speculation]
    if args.reference_off and speculative is None:
        speculative = True  # the arm under test asks for speculation explicitly, the reference for none
    declared = bool(args.draft) and not is_unknown(args.draft)  # the user names the server's draft: diagnosis can score it
    if not declared:
        args.draft = UNKNOWN_DRAFT
    args.url_described = {"url": args.url, "api": args.api, "model": args.model, "num_concurrent": args.num_concurrent,
                          "n_per_request": args.n_per_request, "speculation": args.speculation,
                          "reference": args.reference_url or ("same server, speculation off" if args.reference_off else None)}
    options = _server_options(args, args.url, speculative)
    if dialect.needs_text or (stop and stop[0] and dialect.stop_as_strings):  # text prompts, or stop ids as strings
        options["tokenizer"] = args.target
    args.url_stop_rule = stop  # (ids, max_tokens) or None: the suite's stop rule (verifier.cli._audit_known_p)
    if declared:
        options["draft_declared"] = True
    args.decoder, args.option = URL_DECODER, list(options.items())
    if args.reference_url or args.reference_off:
        args.blackbox_reference = URL_DECODER
        ref_options = _server_options(args, args.reference_url or args.url, False if args.reference_off else None)
        if dialect.needs_text:
            ref_options["tokenizer"] = args.target
        args.reference_option = list(ref_options.items())
    from verifier.server.client import server_description

    args.url_engine = server_description(args.url, args.api, args.api_key_env)  # audit.json: the matrix row
    args.url_variants = _variants(args)
    if (args.concurrency_levels or args.mixed_batch or args.n_levels or args.unseeded) and args.url_described["reference"]:
        raise invalid_argument("--concurrency-levels/--mixed-batch/--n-levels/--unseeded", True, "the known-target design (no "
                               "--reference-url/--reference-off): each level is its own decoder against the target law")
    print(f"URL audit of {args.url} ({args.api}" + (f", model {args.model}" if args.model else "") +
          f", {args.num_concurrent} in flight" + (f", two-sample against {args.url_described['reference']}"
                                                   if args.url_described["reference"] else ", known target") + ")")


def _stop_flags(args: argparse.Namespace) -> tuple[tuple[int, ...], int | None] | None:
    """``--stop-token-ids`` / ``--max-tokens`` as ``(ids, max_tokens)``, or None when neither is given.

    Raises
    ------
    InvalidArgumentError
        (exit 2) ids that are not comma-separated distinct integers >= 0, a ``--max-tokens`` that is not an integer
        >= 1, a stop rule with ``--sequential`` or temperature 0.
    """
    text, limit = getattr(args, "stop_token_ids", None), getattr(args, "max_tokens", None)
    if text is None and limit is None:
        return None
    ids: tuple[int, ...] = ()
    if text is not None:
        try:
            ids = tuple(int(t) for t in str(text).replace(" ", "").split(",") if t != "")
        except ValueError:
            ids = (-1,)
        if not ids or min(ids) < 0 or len(set(ids)) != len(ids):
            raise invalid_argument("--stop-token-ids", text, "distinct comma-separated token ids >= 0, e.g. 83,262")
    if limit is not None and limit < 1:
        raise invalid_argument("--max-tokens", limit, "an integer >= 1 (the requests' length limit)")
    flag, value = ("--stop-token-ids", text) if text is not None else ("--max-tokens", limit)
    if args.sequential:
        raise invalid_argument(flag, value, "not with --sequential (the sequential stop watches the TV cells; a stop-"
                               "rule audit has only the stop cells)")
    if args.temperature == 0:
        raise invalid_argument(flag, value, "temperature > 0 (the greedy cell compares whole rows with the target's "
                               "greedy output, which has no stop rule)")
    return ids, limit


def check_stop_flags(args: argparse.Namespace, pair) -> None:
    """``--url`` with a stop rule: the ids against ``--target``'s vocabulary and, for a dialect that takes stop strings
    (llama-server), the strings they map to -- checked here, once the target is loaded, before any request.

    Raises
    ------
    InvalidArgumentError, SamplingRefusedError
        (exit 2) an id outside the vocabulary; ids the dialect cannot express (named, with the ids it would also stop
        at).
    """
    stop = getattr(args, "url_stop_rule", None)
    if not getattr(args, "url", None) or not stop:
        return
    from verifier.server.dialects import get_dialect
    from verifier.server.stop_rule import build_stop_rule

    bad = [t for t in stop[0] if t >= pair.vocab_size]
    if bad:
        raise invalid_argument("--stop-token-ids", args.stop_token_ids, f"token ids in 0..{pair.vocab_size - 1} (--target's "
                               f"vocabulary; {bad[0]} is outside it)")
    build_stop_rule(get_dialect(args.api), stop[0], stop[1], tokenizer=args.target, eos_token_id=pair.eos_token_id)


def check_text_prompts(args: argparse.Namespace, pair, prompts=None) -> None:
    """``--url`` with a dialect that takes text prompts (``--api mlx-lm``): every prompt's ids must round-trip
    through ``--target``'s tokenizer (decoded, then encoded to the same ids), checked here, before any request.

    ``prompts``: the audit's prompt ids in flag order (``--prompt-ids`` first, then ``--prompt`` texts; the
    default prompt when neither is given); None: built from the flags as the known-p audit does.

    Raises
    ------
    SamplingRefusedError
        (exit 2) The first prompt that does not round-trip, named by its flag and value, with the text its
        ids decode to and the ids that text encodes back to.
    """
    from verifier.server.dialects import get_dialect

    if not getattr(args, "url", None) or not get_dialect(args.api).needs_text:
        return
    if prompts is None:
        from verifier.audit.suite_builder import default_prompt
        from verifier.runner.models import encode_prompt
        from verifier.suite.schema import Prompt

        specs = [("ids", tuple(p)) for p in args.prompt_ids] + [("text", t) for t in args.prompt]
        prompts = [list(v) if kind == "ids" else list(encode_prompt(Prompt(f"p{i}", v, None), pair))
                   for i, (kind, v) in enumerate(specs or [default_prompt(args.target, pair)])]
    text_of = get_dialect(args.api).with_text(pair.tokenizer).text_of
    ids_given = len(args.prompt_ids)
    for i, ids in enumerate(prompts):
        if i < ids_given:
            flag, shown = "--prompt-ids", ",".join(str(t) for t in ids)
        elif i - ids_given < len(args.prompt):
            flag, shown = "--prompt", args.prompt[i - ids_given]
        else:
            flag, shown = "the default prompt", list(ids)
        text_of(ids, name=flag, shown=shown)


def _check_self_reported(args: argparse.Namespace, dialect) -> None:
    """Every option of the self-reported design checked before any request (exit 2 naming the flag)."""
    from verifier.server.client import ServerSettings
    from verifier.server.dialects import check_logprobs
    from verifier.server.reported_law import check_design

    for flag, bad in (("--target", args.target), ("--reference-off", args.reference_off), ("--resume", args.resume),
                      ("--prompt", args.prompt[:1] or None), ("--concurrency-levels", args.concurrency_levels),
                      ("--mixed-batch", args.mixed_batch or None), ("--n-levels", args.n_levels),
                      ("--unseeded", args.unseeded or None),
                      ("--sequential", args.sequential or None), ("--export", args.export)):
        if bad:
            raise invalid_argument(flag, bad, "not with --design self-reported (no local model; the speculation-off "
                                   "server is --reference-url, or llama-server's per-request switch; rerun with the same "
                                   "--run-dir to continue)")
    if args.vocab_size is None or args.vocab_size < 1:
        raise invalid_argument("--vocab-size", args.vocab_size, "the served model's vocabulary size (an integer >= 1) "
                               "with --design self-reported: emitted ids and reported laws are checked against it")
    if not args.prompt_ids:
        raise invalid_argument("--prompt-ids", None, "token ids (comma-separated, repeatable) with --design "
                               "self-reported: without a local tokenizer prompts are sent as ids")
    check_logprobs(args.logprobs)
    from verifier.cli._audit_common import _sampling

    sampling = _sampling(args)
    check_design(sampling, args.logprobs, args.vocab_size)  # --logprobs, --top-k <= K, no greedy / penalty
    if args.collisions == 1 or args.collisions < 0:
        raise invalid_argument("--collisions", args.collisions, "0 (no collision cells) or an integer >= 2 (pairs)")
    if args.consistency_positions < 0:
        raise invalid_argument("--consistency-positions", args.consistency_positions, "an integer >= 0")
    if args.num_samples is not None and args.num_samples < 1:
        raise invalid_argument("--num-samples", args.num_samples, "an integer >= 1")
    # the statistics' own checks run only after every request was sent: refuse here, before the first one
    import math

    from verifier.stats._validate import check_alpha

    check_alpha(args.alpha, "--alpha")
    if args.target_tv is not None and not (math.isfinite(args.target_tv) and 0 < args.target_tv <= 1):
        raise invalid_argument("--target-tv", args.target_tv, "a total variation in (0, 1]")
    if args.seed < 0:
        raise invalid_argument("--seed", args.seed, "an integer >= 0")
    if args.eos_token_id is not None and not 0 <= args.eos_token_id < args.vocab_size:
        raise invalid_argument("--eos-token-id", args.eos_token_id, f"a token id in 0..{args.vocab_size - 1} "
                               "(--vocab-size), or unset")
    if args.speculation == "off":
        raise invalid_argument("--speculation", "off", "'server' or 'on' with --design self-reported (the audited "
                               "sample is the speculative one)")
    if not dialect.ids_with_top_logprobs:
        raise invalid_argument("--design", "self-reported", f"known-target (--target) or two-sample with --api {args.api}: "
                               "this server cannot return the emitted ids and the top logprobs in one reply")
    if args.speculation != "server" and not dialect.has_switch:
        raise invalid_argument("--speculation", args.speculation, "'server' with --api " + args.api)
    if not 1 <= args.n_per_request <= dialect.max_n:
        raise invalid_argument("--n-per-request", args.n_per_request, f"an integer in 1..{dialect.max_n} for --api {args.api}")
    for url in (args.url, args.reference_url):
        if url is not None:
            ServerSettings(url, num_concurrent=args.num_concurrent, max_retries=args.max_retries,
                           timeout_s=args.request_timeout, api_key_env=args.api_key_env)
    if args.max_new_tokens is None:
        args.max_new_tokens = args.num_draft_tokens + 2
        print(f"note: --max-new-tokens {args.max_new_tokens} (k + 2: a server drafts no request's last token)")
    if args.max_new_tokens < 1:
        raise invalid_argument("--max-new-tokens", args.max_new_tokens, "an integer >= 1")
    if args.reference_url is None and args.api != "llama-server":
        print("note: no --reference-url: the consistency cell cannot score with speculation off on --api "
              f"{args.api} (no per-request switch), so this audit cannot PASS")
    print(f"URL audit of {args.url} ({args.api}, self-reported design: the samples against the top-{args.logprobs} "
          "logprobs the server reports" + (f"; speculation-off reference {args.reference_url}" if args.reference_url else "")
          + ")")


def run_self_reported(args: argparse.Namespace) -> int:
    """Run ``--design self-reported`` (:func:`verifier.server.self_audit.run_self_reported`) with the checked flags."""
    import time

    from verifier.cli._audit_common import DEFAULT_REPORT_DIR, _sampling
    from verifier.server.self_audit import SelfReportedSpec, run_self_reported as run
    from verifier.audit.suite_builder import DEFAULT_TARGET_TV

    run_dir = Path(args.run_dir) if args.run_dir else (Path(args.report_dir or DEFAULT_REPORT_DIR) / "url-self-reported"
                                                       / time.strftime("%Y%m%d-%H%M%S"))
    print(f"audit run -> {run_dir}")
    spec = SelfReportedSpec(
        url=args.url, api=args.api, prompts=[list(p) for p in args.prompt_ids], sampling=_sampling(args),
        logprobs=args.logprobs, vocab_size=args.vocab_size, max_new_tokens=args.max_new_tokens,
        num_draft_tokens=args.num_draft_tokens, run_dir=run_dir, eos_token_id=args.eos_token_id,
        reference_url=args.reference_url, model=args.model,
        server={"num_concurrent": args.num_concurrent, "max_retries": args.max_retries,
                "timeout_s": args.request_timeout, "api_key_env": args.api_key_env},
        n_per_request=args.n_per_request, speculative=True if args.speculation == "on" else None,
        num_samples=args.num_samples, target_tv=DEFAULT_TARGET_TV if args.target_tv is None else args.target_tv,
        alpha=args.alpha, seed=args.seed, collisions=args.collisions, consistency_positions=args.consistency_positions,
        convention=args.reported_logprobs, require_speculation=not args.speculation_unverified)
    return run(spec)


def _levels(flag: str, text: str | None, low: int, high: int) -> list[int]:
    if text is None:
        return []
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(not low <= v <= high for v in values) or len(set(values)) != len(values):
        raise invalid_argument(flag, text, f"distinct comma-separated integers in {low}..{high}, e.g. 1,4,16")
    return values


def _variants(args: argparse.Namespace) -> list[tuple[str, dict]]:
    """The design factors as (decoder name, option overrides): one decoder per level (none: one decoder)."""
    from verifier.server.dialects import get_dialect

    out = [(f"c{c}", {"num_concurrent": c}) for c in _levels("--concurrency-levels", args.concurrency_levels, 1, 256)]
    for n in _levels("--n-levels", args.n_levels, 1, get_dialect(args.api).max_n):
        out.append((f"n{n}", {"n_per_request": n}))
    if args.mixed_batch:
        out.append((f"c{args.num_concurrent}-mixed", {"background": {"concurrent": max(2, args.num_concurrent)}}))
    if getattr(args, "unseeded", False):
        out.append((f"c{args.num_concurrent}-unseeded", {"seeded": False}))
    if out and not any(name == f"c{args.num_concurrent}" for name, _ in out) and not args.concurrency_levels:
        out.insert(0, (f"c{args.num_concurrent}", {}))  # the plain level beside the factor levels
    return out or [(args.api, {})]  # one decoder, named after the server kind (reports, junit, the matrix)


def bind_blackbox_journals(args: argparse.Namespace, decoder, reference) -> Path | None:
    """Two-sample design: each arm's responses persist in ``--run-dir`` (or a new folder under
    ``--report-dir``); rerunning the same command with that ``--run-dir`` sends only what is missing."""
    decoder, reference = getattr(decoder, "inner", decoder), getattr(reference, "inner", reference)  # PluginDecoder wraps
    if not hasattr(decoder, "bind_run_dir"):
        return None
    if args.run_dir:
        folder = Path(args.run_dir)
    else:
        import time

        folder = Path(args.report_dir or "reports") / "url-two-sample" / time.strftime("%Y%m%d-%H%M%S")
    for arm, dec in (("speculative", decoder), ("reference", reference)):
        if hasattr(dec, "bind_run_dir"):
            dec.bind_run_dir(folder / arm)
    print(f"responses: {folder} (rerun with --run-dir {folder} to continue without resampling)")
    return folder
