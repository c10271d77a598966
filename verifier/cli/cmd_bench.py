"""``specverify bench NAME``: run one benchmark from ``verifier/bench/`` and print its figures.

Benchmark modules import numpy/scipy/torch at module level, so none is imported while the parser
is built: each module's one-line ``HELP`` is read from its source (``ast``), and its options are
registered only when ``NAME`` is the one being parsed (:class:`_LazyBenchAction`).  This keeps
``specverify --help`` and ``specverify bench --help`` torch-free.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
from pathlib import Path

HELP = "Run a benchmark (samples/s, time to verdict, samples to detect, calibration, --help time) and print the figures."


def _bench_names() -> dict[str, Path]:
    """Benchmark name (``time-to-verdict``) -> its module file, without importing any."""
    import verifier.bench as pkg

    folder = Path(pkg.__file__).parent
    return {info.name.replace("_", "-"): folder / f"{info.name}.py"
            for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name) if not info.name.startswith("_")}


def _module_help(path: Path) -> str:
    """The module's ``HELP = "..."`` string constant, read from its source ('' when absent)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return ""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "HELP" for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return ""


class _LazyBenchAction(argparse._SubParsersAction):
    """Sub-parsers action that imports and registers a benchmark module only when it is chosen."""

    def __call__(self, parser, namespace, values, option_string=None):
        name = values[0] if values else None
        sub = self._name_parser_map.get(name)
        if sub is not None and not getattr(sub, "_bench_registered", False):
            module = importlib.import_module(f"verifier.bench.{name.replace('-', '_')}")
            module.register(sub)
            sub.set_defaults(_bench_run=module.run)
            sub._bench_registered = True
        super().__call__(parser, namespace, values, option_string)


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="NAME", required=True, action=_LazyBenchAction)
    for name, path in _bench_names().items():
        text = _module_help(path)
        sub.add_parser(name, help=text.replace("%", "%%"), description=text)  # argparse %-formats help strings


def _check_out(args: argparse.Namespace) -> None:
    """``--out FILE`` (and ``--json FILE``) is checked before the benchmark runs (minutes of work must not end in a traceback): not a
    folder, and in a writable folder (``bench all`` creates its folder).  Raises InvalidArgumentError (exit 2)."""
    import os

    from verifier.errors import invalid_argument

    for flag in ("--out", "--json"):  # --json: bench all and bench decoders write it after the run too
        out = getattr(args, flag[2:], None)
        if not out:
            continue
        path = Path(out)
        if path.is_dir():
            raise invalid_argument(flag, out, "a file path, not a folder")
        folder = path.resolve().parent
        if args.bench == "all" and not folder.exists():
            continue  # bench all makes the folder
        if not folder.is_dir() or not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise invalid_argument(flag, out, "a writable file in an existing folder (checked before the benchmark runs)")


def run(args: argparse.Namespace) -> int:
    _check_out(args)
    return int(args._bench_run(args))
