"""``specverify serve``: a registered decoder of the harness behind a real completion server.

Serves the reference speculative decoder (or a mutant of the bug zoo, whose defect is known) on a
model pair over HTTP, in both dialects ``specverify audit --url`` speaks (:mod:`verifier.server.serve`).
Runs until Ctrl-C (or ``--duration`` seconds).  Exit 0 after a clean stop; 2 on bad options.
"""

from __future__ import annotations

import argparse

from verifier.errors import EXIT_OK, invalid_argument

HELP = "Serve a harness decoder (reference or a bug-zoo mutant) as an OpenAI / llama-server completion endpoint."


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--decoder", default="reference", metavar="NAME",
                        help="registered decoder: reference or a mutant (see `specverify exact`, README). Default: reference")
    parser.add_argument("--target", default="shipped:target", metavar="MODEL",
                        help="target model: shipped:target, tabular:NAME or a checkpoint folder. Default: shipped:target")
    parser.add_argument("--draft", default=None, metavar="MODEL", help="draft model. Default: the target's pair")
    parser.add_argument("--num-draft-tokens", type=int, default=3, metavar="K",
                        help="0 serves plain target sampling (a speculation-off reference server). Default: 3")
    parser.add_argument("--host", default="127.0.0.1", help="Default: 127.0.0.1 (loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port. Default: 8000")
    parser.add_argument("--busy-decoder", default=None, metavar="NAME",
                        help="a concurrency-dependent defect on purpose: requests that arrive with more than --busy-above "
                             "in flight are served by this registered decoder (e.g. full_p_fallback). Default: none")
    parser.add_argument("--busy-above", type=int, default=2, metavar="N", help="with --busy-decoder. Default: 2")
    parser.add_argument("--defect", action="append", default=[], metavar="NAME",
                        choices=("shared-seed", "spec-logprobs", "cold-logprobs", "paired-unseeded"),
                        help="a field bug on purpose (repeatable): shared-seed = every request sampled with one seed "
                             "(request seeds ignored, unseeded requests too); spec-logprobs = logprobs reported from the "
                             "draft when speculation is on; cold-logprobs = logprobs reported at 0.4x the temperature "
                             "(sampling unchanged: another numeric path); paired-unseeded = unseeded requests share one "
                             "random stream per two arrivals (seeded requests correct). Default: none")
    parser.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                        help="stop after this many seconds. Default: until Ctrl-C")


def run(args: argparse.Namespace) -> int:
    import time

    if args.num_draft_tokens < 0:
        raise invalid_argument("--num-draft-tokens", args.num_draft_tokens, "an integer >= 0 (0: no speculation)")
    if not 0 <= args.port <= 65535:
        raise invalid_argument("--port", args.port, "0..65535 (0 = a free port)")
    if args.duration is not None and not args.duration > 0:
        raise invalid_argument("--duration", args.duration, "seconds > 0")
    from verifier.server.serve import serve_decoder

    try:
        if args.busy_above < 0:
            raise invalid_argument("--busy-above", args.busy_above, "an integer >= 0")
        server = serve_decoder(args.decoder, args.target, args.draft, num_draft_tokens=args.num_draft_tokens,
                               host=args.host, port=args.port, busy_decoder=args.busy_decoder,
                               busy_above=args.busy_above if args.busy_decoder else None, defects=tuple(args.defect))
    except OSError as exc:
        raise invalid_argument("--port", args.port, f"a free port on {args.host} ({exc.strerror or exc})") from None
    except (KeyError, TypeError) as exc:
        raise invalid_argument("--decoder", args.decoder, f"a registered decoder name ({exc})") from None
    print(f"serving {args.decoder} (k={args.num_draft_tokens}, target {args.target}, vocab {server.vocab_size}, "
          f"eos {server.eos}" + "".join(f", DEFECT {d}" for d in args.defect) + f") at {server.base_url}", flush=True)
    print(f"audit it: specverify audit --url {server.base_url} --api openai-completions --target {args.target} "
          f"--num-draft-tokens {args.num_draft_tokens}", flush=True)
    server.start()
    try:
        if args.duration is None:
            while True:
                time.sleep(3600)
        time.sleep(args.duration)
    except KeyboardInterrupt:
        print("specverify serve: stopped (Ctrl-C)", flush=True)
    finally:
        server.stop()
    return EXIT_OK
