"""Sharded kernel audits: ``specverify audit --kernel/--engine ... --shard I/N --report-dir DIR_I``, then ``specverify merge``.

Each shard draws with its own seed, :func:`shard_seed` (``numpy.random.SeedSequence(seed, spawn_key=(I,))``,
the suite seed's I-th spawned child), into its own report folder (checkpointed and resumable like an
unsharded audit, :mod:`verifier.audit.kernel_checkpoint`).  :func:`merge_kernel_shards` checks that the
folders are shards of one audit (same identity but for the shard index and ``num_draws``; every shard
index once), concatenates each case's draws in shard order, and judges them as one sample
(:func:`verifier.audit.kernel_audit.judge_kernel_draws`): the cells count the summed draws.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from verifier.errors import ConfigError, invalid_argument

__all__ = ["shard_seed", "merge_kernel_shards"]

_PER_SHARD = ("shard", "draw_seed", "num_draws")  # identity fields that differ between the shards of one audit


def shard_seed(seed: int, index: int) -> int:
    """The draw seed of shard ``index``: a 32-bit word of ``SeedSequence(seed, spawn_key=(index,))``.

    >>> shard_seed(0, 0) != shard_seed(0, 1)
    True
    """
    return int(np.random.SeedSequence(int(seed), spawn_key=(int(index),)).generate_state(1, np.uint32)[0])


def merge_kernel_shards(folders, out: str | os.PathLike, *, allow_partial: bool = False) -> dict:
    """Merge the report folders of a sharded kernel audit into one kernel report in ``out``.

    Parameters
    ----------
    folders : sequence of path
        Report folders written by ``specverify audit ... --shard I/N --report-dir DIR``.
    out : path
        Folder of the merged report.json and report.md (created).
    allow_partial : bool, default False
        Merge the shards present even when some of the N are missing.

    Returns
    -------
    dict
        The merged report (:func:`verifier.audit.kernel_report.kernel_audit_report`).

    Raises
    ------
    InvalidArgumentError
        A folder is not a shard, two folders hold the same shard, or the shards are of different audits
        (naming the field).
    ConfigError
        Shards are missing (without ``allow_partial``), or a case's draws are missing in a shard.
    """
    from verifier.audit.kernel_audit import adversarial_case, judge_kernel_draws, standard_kernel_cases
    from verifier.audit.kernel_checkpoint import case_digest, read_identity, stored_draws
    from verifier.audit.kernel_report import kernel_audit_report, write_kernel_report

    identities = {}
    first = None
    for folder in folders:
        ident = read_identity(folder)
        if not ident.get("shard"):
            raise invalid_argument("RUN_DIR", str(folder), "a kernel report folder written with --shard I/N")
        index, count = (int(x) for x in ident["shard"].split("/"))
        if index in identities:
            raise invalid_argument("RUN_DIR", str(folder), f"one folder per shard (shard {ident['shard']} is also "
                                   f"{identities[index][0]}; merging both would count draws of one seed twice)")
        if first is None:
            first = ident
        for key in sorted(set(first) | set(ident)):
            if key not in _PER_SHARD and first.get(key) != ident.get(key):
                raise invalid_argument(f"{key} of {folder}", ident.get(key), f"the {first.get(key)!r} of the other shards")
        if int(first["shard"].split("/")[1]) != count:
            raise invalid_argument(f"shard of {folder}", ident["shard"], f"a shard of {first['shard'].split('/')[1]}")
        identities[index] = (str(folder), ident)
    missing = sorted(set(range(count)) - set(identities))
    if missing and not allow_partial:
        raise ConfigError(f"shards missing: {', '.join(f'{i}/{count}' for i in missing)}; run them, or merge with --allow-partial")
    cases = {c.name: c for c in standard_kernel_cases() + [adversarial_case("full_p_fallback", seed=first["seed"])[0]]}
    label = first["engine"] or first["kernel"]
    results = []
    for entry in first["cases"]:
        case = cases.get(entry["name"])
        if case is None or case_digest(case) != entry["sha256"]:
            raise ConfigError(f"case {entry['name']!r} of the shards is not this version's case of that name (its probs differ)")
        parts = []
        for i in sorted(identities):
            draws = stored_draws(identities[i][0], case.name)
            if len(draws) < identities[i][1]["num_draws"]:
                raise ConfigError(f"{identities[i][0]}: case {case.name} has {len(draws)} of {identities[i][1]['num_draws']} draws; "
                                  f"finish it with `specverify audit --resume {identities[i][0]}`")
            parts.append(draws)
        results.append(judge_kernel_draws(np.concatenate(parts), case, label=label, seed=first["seed"], alpha=first["alpha"],
                                          acceptance=first["acceptance"], target_tv=first["target_tv"]))
    shard_report = json.loads((Path(identities[min(identities)][0]) / "report.json").read_text()) \
        if (Path(identities[min(identities)][0]) / "report.json").is_file() else {}
    report = kernel_audit_report(results, kernel=label, settings=shard_report.get("settings"), engine=shard_report.get("engine"),
                                 target_tv=first["target_tv"], acceptance_rule=shard_report.get("acceptance_rule", "canonical"),
                                 command="specverify merge " + " ".join(identities[i][0] for i in sorted(identities)))
    report["shards"] = [{"shard": identities[i][1]["shard"], "folder": identities[i][0], "draw_seed": identities[i][1]["draw_seed"],
                         "num_draws": identities[i][1]["num_draws"]} for i in sorted(identities)]
    write_kernel_report(report, out)
    return report
