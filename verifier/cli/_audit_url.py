"""``specverify audit --url BASE_URL``: audit a running completion server (split from :mod:`verifier.cli.cmd_audit`).

Designs
-------
known target (``--target MODEL``, the open weights the endpoint claims to serve)
    Rewritten to the known-p audit of the plugin ``verifier.server.decoder:decoder`` with the
    server options, so the suite runner, the report, ``--resume`` and the diagnosis are the same
    as for any decoder; the server drafts with its own model (``--draft unknown``).
two-sample (``--reference-url URL``, or ``--reference-off`` on llama-server)
    Speculation on vs off: the same requests to a second server without speculation, or to the
    same server with speculation switched off per request; the black-box cells
    (:func:`verifier.audit.blackbox_audit`).

The token for a protected endpoint is read from the environment variable named by
``--api-key-env``; no flag carries it, so no report, suite or journal does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from verifier.errors import invalid_argument

__all__ = ["add_arguments", "route_url", "bind_blackbox_journals", "URL_DECODER"]

URL_DECODER = "verifier.server.decoder:decoder"  # the plugin factory a URL audit's suite names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--url`` group's options (``--url`` itself is in the audit's mode group)."""
    from verifier.server.dialects import DIALECTS

    group = parser.add_argument_group("URL audit (--url BASE_URL)")
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
                       help="also ask for the top-K logprobs of each emitted token (kept in the response journal). Default: none")
    group.add_argument("--speculation", choices=("server", "on", "off"), default="server",
                       help="llama-server: switch speculation per request (speculative.n_max = --num-draft-tokens, or 0); "
                            "'server' sends no switch. Default: server")
    group.add_argument("--concurrency-levels", default=None, metavar="N,N,...",
                       help="design factor: audit at each number of requests in flight (e.g. 1,4,16), each level its own "
                            "decoder with its own cells and verdict (alpha split over the levels). Default: --num-concurrent only")
    group.add_argument("--mixed-batch", action="store_true",
                       help="design factor: also audit with background requests in flight (greedy and T=0.5 rows, a longer "
                            "prompt) sharing the server's batches with the audited ones")
    group.add_argument("--n-levels", default=None, metavar="N,N,...",
                       help="design factor (openai-completions): completions per request, e.g. 1,4 (`n = 1` vs `n > 1`)")
    group.add_argument("--speculation-unverified", action="store_true",
                       help="accept a PASS from a server that exposes no speculation counters and no per-request draft "
                            "figures (default: such a run is UNDERPOWERED, 'speculation not observable')")
    group.add_argument("--reference-url", default=None, metavar="URL",
                       help="two-sample design: the same target served without speculation; its samples are the reference")
    group.add_argument("--reference-off", action="store_true",
                       help="two-sample design on llama-server: the reference is the same server with speculation off per request")


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
    from verifier.server.dialects import get_dialect

    dialect = get_dialect(args.api)
    if args.option:
        raise invalid_argument("--option", dict(args.option), "no --option with --url (the server options are flags)")
    if args.reference_url and args.reference_off:
        raise invalid_argument("--reference-off", True, "either --reference-url URL or --reference-off, not both")
    if args.reference_off and args.api != "llama-server":
        raise invalid_argument("--reference-off", True, "with --api llama-server (a per-request speculation switch); "
                               "for other servers start one without speculation and give it as --reference-url")
    if args.speculation != "server" and args.api != "llama-server":
        raise invalid_argument("--speculation", args.speculation, "'server' with --api " + args.api + " (no per-request switch)")
    if not 1 <= args.n_per_request <= dialect.max_n:
        raise invalid_argument("--n-per-request", args.n_per_request, f"an integer in 1..{dialect.max_n} for --api {args.api}")
    for url in (args.url, args.reference_url):  # checked here: exit 2 before a model is loaded
        if url is not None:
            ServerSettings(url, num_concurrent=args.num_concurrent, max_retries=args.max_retries,
                           timeout_s=args.request_timeout, api_key_env=args.api_key_env)
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
    if declared:
        options["draft_declared"] = True
    args.decoder, args.option = URL_DECODER, list(options.items())
    if args.reference_url or args.reference_off:
        args.blackbox_reference = URL_DECODER
        ref_options = _server_options(args, args.reference_url or args.url, False if args.reference_off else None)
        args.reference_option = list(ref_options.items())
    args.url_engine = server_description(args.url, args.api, args.api_key_env)  # audit.json: the matrix row
    args.url_variants = _variants(args)
    if (args.concurrency_levels or args.mixed_batch or args.n_levels) and args.url_described["reference"]:
        raise invalid_argument("--concurrency-levels/--mixed-batch/--n-levels", True, "the known-target design (no "
                               "--reference-url/--reference-off): each level is its own decoder against the target law")
    print(f"URL audit of {args.url} ({args.api}" + (f", model {args.model}" if args.model else "") +
          f", {args.num_concurrent} in flight" + (f", two-sample against {args.url_described['reference']}"
                                                   if args.url_described["reference"] else ", known target") + ")")


def server_description(url: str, api: str, api_key_env: str | None = None) -> dict:
    """What the server says it is (best effort: llama-server ``/props`` build, vLLM ``/version``), as an
    engine record for audit.json and the README's audit matrix."""
    import json as _json

    from verifier.server.client import ServerSettings, get_text
    from verifier.server.dialects import get_dialect

    settings = ServerSettings(url, api_key_env=api_key_env)
    version, name = "", f"{api} server"
    for path, key, label in (("/props", "build_info", "llama-server"), ("/version", "version", "vllm")):
        status, text = get_text(settings, path, timeout_s=5.0)
        if status == 200:
            try:
                value = _json.loads(text).get(key)
            except (ValueError, AttributeError):
                continue
            if value:
                version, name = str(value), f"{label} (URL)"
                break
    return {"name": name, "version": version, "entry_point": f"POST {get_dialect(api).path} ({api})",
            "package": "", "options": {}}


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
