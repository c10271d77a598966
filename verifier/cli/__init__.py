"""``specverify`` command line.

Each sub-command lives in its own module ``verifier/cli/cmd_<name>.py`` that defines::

    HELP = "one line shown in `specverify --help`"
    def register(parser: argparse.ArgumentParser) -> None   # add the sub-command's options
    def run(args: argparse.Namespace) -> int                # return an exit code (verifier.errors.EXIT_*)

Modules are discovered at start-up, so adding a command touches no shared file.  Keep heavy
imports (torch, transformers) inside ``run`` so ``specverify --help`` stays fast.

Exit codes: 0 every expectation met, 1 bias detected (or a mutant undetected), 2 usage or
configuration error, 3 the decoder under test crashed or returned invalid output, 4 underpowered.

From the command line (``main()`` without ``argv``), the commands that run plugin code (``run``,
``audit``, ``report``, ``merge``) execute in a child process whose exit counts only with the
verdict file it writes last (:mod:`verifier.cli._isolate`): plugin code that ends the process
(``os._exit(0)``) gives exit 3, never 0.  ``main(argv)`` with an explicit list runs in-process.
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()  # `specverify run` reports wall time including start-up and imports

import argparse
import importlib
import pkgutil
import sys
from typing import Sequence

from verifier.errors import EXIT_USAGE, VerifierError

__all__ = ["main", "build_parser"]


def _command_names() -> dict[str, str]:
    """Sub-command name -> module name, without importing any command module."""
    import verifier.cli as pkg

    return {info.name[len("cmd_"):].replace("_", "-"): info.name
            for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name) if info.name.startswith("cmd_")}


def _command_modules(only: str | None = None):
    for name, module in _command_names().items():
        if only is None or name == only:
            yield name, importlib.import_module(f"verifier.cli.{module}")


def _version() -> str:
    import verifier

    return verifier.__version__


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``specverify`` parser; ``only`` registers just that sub-command (imports one module)."""
    parser = argparse.ArgumentParser(
        prog="specverify",
        description="Prove or refute, with exact enumeration and statistical evidence, that a "
        "speculative decoder samples from its target model's distribution.",
        epilog="Exit codes: 0 every expectation met; 1 bias detected (or a mutant undetected); "
        "2 usage/config error; 3 decoder under test crashed or returned invalid output; 4 underpowered.",
    )
    parser.add_argument("--version", action="version", version=f"specverify {_version()}")
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print the full traceback (harness frames included); may follow the command too. "
                        "Default: the error line and the plugin's own frames")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _command_modules(only):
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.register(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``specverify`` console script; returns the exit code.

    ``--debug`` anywhere on the line: full tracebacks on errors (default: the plugin's own frames).
    """
    import os

    from verifier.cli import _isolate

    if argv is None and os.environ.get(_isolate.VERDICT_ENV):  # a job child: ends with its verdict
        _isolate.child_setup()
        try:
            code = _main_words(argv)
        except SystemExit as exc:  # argparse (usage error, --help): the verdict is written
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
        _isolate.child_exit(code)
    return _main_words(argv)


def _main_words(argv: Sequence[str] | None) -> int:
    import os

    words = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in words  # anywhere on the line
    words = [w for w in words if w != "--debug"]
    if not debug:
        return _main(words, argv, False)
    from verifier._tracebacks import DEBUG_ENV

    old = os.environ.get(DEBUG_ENV)
    os.environ[DEBUG_ENV] = "1"  # recorded decoder crashes keep every frame; a job process inherits it
    try:
        return _main(words, argv, True)
    finally:
        if argv is not None:  # in-process: leave the environment as it was
            if old is None:
                os.environ.pop(DEBUG_ENV, None)
            else:
                os.environ[DEBUG_ENV] = old


def _main(words: list[str], argv: Sequence[str] | None, debug: bool) -> int:
    import os

    from verifier.cli import _isolate

    command = next((w for w in words if not w.startswith("-")), None)
    asks_help = any(w in ("-h", "--help") for w in words)  # parsed here: no job process for --help
    if argv is None and command in _isolate.ISOLATED_COMMANDS and not asks_help and not os.environ.get(_isolate.VERDICT_ENV):
        return _isolate.run_in_child(words, command)  # the child parses (usage errors, --help) and runs
    if argv is None:
        _isolate.child_signals()  # a child job process: a forwarded SIGINT must interrupt it
    parser = build_parser(command if command in _command_names() else None)
    try:
        args = parser.parse_args(words)  # argparse exits with code 2 on usage errors, 0 after --help
    except SystemExit as exc:
        _isolate.write_verdict(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE))
        raise
    if not getattr(args, "_run", None):
        parser.print_help()
        _isolate.write_verdict(EXIT_USAGE)
        return EXIT_USAGE
    code = _dispatch(args, debug)
    _isolate.write_verdict(code)  # the last act of a child job process (no-op in-process)
    return code


def _dispatch(args: argparse.Namespace, debug: bool = False) -> int:
    try:
        return int(args._run(args))
    except VerifierError as exc:
        from verifier._tracebacks import format_error

        print(format_error(exc, args.command, debug=debug), file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # e.g. `specverify exact | head`: the reader left; not an error of ours
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        import os
        import signal

        from verifier.cli._isolate import VERDICT_ENV

        if os.environ.get(VERDICT_ENV):  # a child job process: a second Ctrl-C must not become a traceback
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(f"specverify {args.command}: interrupted; samples written so far, if any, are kept on disk", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
