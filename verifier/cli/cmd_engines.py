"""``specverify engines``: list the outside engines the harness can audit, installed or not.

For each registered engine (:mod:`verifier.engines`): name, kind, package and version, whether it
is installed (and how long its install took), where it runs (the harness's process, or a decoder
engine's own venv and whether that venv's interpreter exists), the engine entry point driven, its
``--engine-arg`` options, the rate of its largest committed audit (:mod:`verifier.engines.rates`), the command
that installs it, and the audit command.  Nothing is imported from the engines themselves.
"""

from __future__ import annotations

import argparse
import json

from verifier.errors import EXIT_OK

HELP = "List outside speculative-decoding engines (installed or not), versions, options and install commands."


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="*", metavar="NAME", help="only these engines. Default: all")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="Default: table")


def run(args: argparse.Namespace) -> int:
    from verifier.engines import engine_names, engines_dir, get_engine
    from verifier.engines.rates import describe_rate, measured_rate

    rows = [get_engine(n).describe() for n in (args.name or engine_names())]
    for r in rows:
        r["measured_rate"] = measured_rate(r["name"], r["version"])
    if args.format == "json":
        print(json.dumps({"engines_dir": str(engines_dir()), "engines": rows}, indent=2))
        return EXIT_OK
    print(f"engines folder: {engines_dir()} (set SPECVERIFY_ENGINES_DIR to move it)")
    for r in rows:
        took = r["install_seconds"]  # None: installed by hand, not by its install script (nothing recorded)
        state = ((f"installed ({took} s install)" if took is not None else "installed (install time not recorded)")
                 if r["installed"] else f"NOT installed -- install: {r['install']}")
        print(f"\n{r['name']}  [{r['kind']}]  {r['package']}=={r['version']}  {state}")
        print(f"  drives: {r['entry_point']}")
        print(f"  runs: {r.get('runtime', '')}")
        if r.get("batching"):
            print(f"  batching: {r['batching']}")
        print(f"  rate: {describe_rate(r['measured_rate'], r['name'], r['version'])}")
        for name, o in r["options"].items():
            allowed = "|".join(json.dumps(a) for a in o["allowed"]) if o["allowed"] else "any"
            print(f"  --engine-arg {name}={json.dumps(o['default'])}  ({allowed}) {o['help']}")
        folder = f"reports/audits/{r['name']}-{r['version']}"
        where = f"--report-dir {folder}" if r["kind"] == "kernel" else f"--target-tv 0.03 --run-dir {folder}/CONFIG"
        print(f"  audit: specverify audit --engine {r['name']} {where}")
    return EXIT_OK
