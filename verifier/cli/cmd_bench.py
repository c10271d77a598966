"""``specverify bench NAME``: run one benchmark from ``verifier/bench/`` and print its figures."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

HELP = "Run a benchmark (samples/s, time to verdict, samples to detect, calibration) and print the figures."


def _bench_modules():
    import verifier.bench as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            yield info.name.replace("_", "-"), importlib.import_module(f"verifier.bench.{info.name}")


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name, module in _bench_modules():
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.register(p)
        p.set_defaults(_bench_run=module.run)


def run(args: argparse.Namespace) -> int:
    return int(args._bench_run(args))
