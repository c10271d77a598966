"""``specverify audit-tree``: kernel-level audit of a tree (multi-draft) verification kernel.

The kernel is a built-in name from :data:`verifier.decoders.tree_kernels.TREE_KERNELS` (the
reference kernels and the tree mutants) or a plugin ``module:attr`` implementing
:class:`verifier.protocols.TreeVerificationKernel` (a kernel function of five positional
arguments, or a factory taking ``--option`` values).  It is driven on synthetic tabular cases
(:func:`verifier.audit.tree_kernel_audit.standard_tree_kernel_cases`) whose expected laws come
from the exact tree enumerator.  Exit 0 when every case passes, 1 when bias is detected on a case
(or, with ``--rule``, the acceptance does not conform to it), 2 on a usage error, 3 when the kernel
crashes or returns invalid output, 4 when a case's cells cannot see ``--target-tv`` (UNDERPOWERED,
with the draws needed).
"""

from __future__ import annotations

import argparse
import json

from verifier.errors import EXIT_BIAS, EXIT_OK

HELP = "Audit a tree / multi-draft verification kernel (built-in name or module:attr) on synthetic tree cases."


def register(parser: argparse.ArgumentParser) -> None:
    from verifier.cli._audit_common import _option

    parser.add_argument("--kernel", required=True, metavar="NAME|SPEC",
                        help="built-in tree kernel (iid_multi_draft, wor_recursive_rejection, topk_target_only, or a tree mutant) "
                             "or a plugin module:attr")
    parser.add_argument("--option", action="append", type=_option, default=[], metavar="KEY=VALUE",
                        help="option passed to a plugin factory (repeatable; VALUE is JSON if it parses)")
    parser.add_argument("--proposal", choices=("iid", "without_replacement", "top_k"), default=None,
                        help="how the children are drafted. Default: the rule's (built-in kernels: their own), else iid")
    parser.add_argument("--rule", metavar="NAME", default=None,
                        help="tree rule the kernel claims to implement: also checks acceptance rule conformance (accepted-count law; "
                             "exit 1 on a mismatch, reported apart from bias). Default: none")
    parser.add_argument("--expected", choices=("target", "rule"), default="target",
                        help="law of the first N tokens: the target's (lossless claim) or --rule's. Default: target")
    parser.add_argument("--case", action="append", default=[], metavar="NAME",
                        help="run only these cases (unigram3/3, trigram3/2;2,2; repeatable). Default: all")
    parser.add_argument("--num-draws", type=int, default=50_000, metavar="N", help="rows per case. Default: 50000")
    from verifier.cli._defaults import KERNEL_TARGET_TV

    parser.add_argument("--target-tv", type=float, default=KERNEL_TARGET_TV, metavar="TV",
                        help="smallest bias (total variation of the first N tokens' law) a case must see; a case that "
                             f"cannot is UNDERPOWERED (exit 4). Default: {KERNEL_TARGET_TV}")
    parser.add_argument("--alpha", type=float, default=1e-3, help="family-wise false-alarm rate per case. Default: 0.001")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0")
    parser.add_argument("--json", metavar="FILE", help="write the verdict and every cell as JSON")


def _load(spec: str, options: dict):
    from verifier.plugins import _resolve
    from verifier.decoders.tree_kernels import TREE_KERNELS
    from verifier.plugins import PluginLoadError

    name = spec.replace("-", "_")
    if name in TREE_KERNELS:
        return TREE_KERNELS[name], name
    if ":" not in spec:
        raise PluginLoadError(f"--kernel {spec!r} is invalid; allowed: one of {', '.join(TREE_KERNELS)} or a plugin module:attr")
    obj = _resolve(spec)
    if options:
        obj = obj(**options)
    if not callable(obj):
        raise PluginLoadError(f"--kernel {spec!r} is a {type(obj).__name__}; allowed: a tree kernel function or a factory returning one")
    return obj, None


def run(args: argparse.Namespace) -> int:
    from verifier.audit.tree_kernel_audit import audit_tree_kernel, standard_tree_kernel_cases
    from verifier.errors import invalid_argument
    from verifier.exact.tree_rules import TREE_RULES

    kernel, builtin = _load(args.kernel, dict(args.option))
    cases = standard_tree_kernel_cases()
    if args.case:
        by_name = {c.name: c for c in cases}
        unknown = [c for c in args.case if c not in by_name]
        if unknown:
            raise invalid_argument("--case", unknown[0], "one of " + ", ".join(by_name))
        cases = [by_name[c] for c in args.case]
    proposal = args.proposal or (TREE_RULES[builtin].proposal if builtin and not args.rule else None)
    results = [audit_tree_kernel(kernel, c, proposal=proposal, rule=args.rule, expected=args.expected, num_draws=args.num_draws,
                                 seed=args.seed, alpha=args.alpha, name=args.kernel, target_tv=args.target_tv) for c in cases]
    for r in results:
        print(r.summary())
        if r.power_note():
            print(f"  {r.power_note()}")
        for cell, p_adj in zip(r.cells, r.adjustment.adjusted_pvalues):
            print(f"  {cell.name}: statistic={cell.result.statistic:.4g} p={cell.result.pvalue:.3g} p_adj={p_adj:.3g}")
        if r.conforms is not None:
            print(f"  acceptance rule conformance (declared {r.rule}): {'CONFORMS' if r.conforms else 'NONCONFORMING'} "
                  f"(p={r.conformance.result.pvalue:.3g}, alpha={r.alpha:g}; not distribution bias)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"mode": "tree-kernel", "kernel": args.kernel, "results": [
                {"case": r.case.name, "proposal": r.proposal, "rule": r.rule, "expected": r.expected, "verdict": r.verdict,
                 "target_tv": r.target_tv, "draws_needed": r.draws_needed() if r.verdict == "UNDERPOWERED" else None,
                 "num_draws": r.num_draws, "seed": r.seed, "alpha": r.alpha,
                 "cells": [{"name": c.name, "statistic": c.result.statistic, "pvalue": c.result.pvalue, "p_adj": float(p)}
                           for c, p in zip(r.cells, r.adjustment.adjusted_pvalues)],
                 "acceptance_conformance": None if r.conforms is None else
                 {"verdict": "CONFORMS" if r.conforms else "NONCONFORMING", "pvalue": r.conformance.result.pvalue}} for r in results]},
                fh, indent=2)
    from verifier.cli._audit_engines import _kernel_exit

    return _kernel_exit(results)
