"""The known-target URL audit's numeric floor, from the command line (split from :mod:`verifier.cli._audit_url`).

:func:`floor_plan` keeps the floor's settings in the run's plan (audit.json, so ``--resume`` measures it too);
:func:`measure_url_floor` measures it after the sampling stage (:mod:`verifier.server.floor`) and applies it to the
report.  ``verifier.cli._audit_url`` re-exports both.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from verifier.errors import InvalidArgumentError

__all__ = ["floor_plan", "floor_logprobs", "measure_url_floor"]


def floor_plan(args: argparse.Namespace) -> dict | None:
    """The known-target floor's settings, kept in the run's plan (audit.json) so ``--resume`` measures it too;
    None for other designs, or with ``--floor-positions 0`` (``{"positions": 0}``: stated as not measured)."""
    from verifier.server.floor import DEFAULT_POSITIONS

    if getattr(args, "design", None) != "known-target" or not getattr(args, "url", None):
        return None
    from verifier.server.dialects import get_dialect

    positions = DEFAULT_POSITIONS if args.floor_positions is None else int(args.floor_positions)
    return {"positions": positions, "logprobs": floor_logprobs(args, get_dialect(args.api))}


def floor_logprobs(args: argparse.Namespace, dialect) -> int:
    """K of the numeric floor's one-token requests: ``--floor-logprobs``, else ``--logprobs``, else the floor's
    default within the dialect's cap.  Raises InvalidArgumentError (exit 2) for a K that is no integer >= 1."""
    from verifier.server.dialects import check_request_logprobs
    from verifier.server.floor import MAX_LOGPROBS

    k = getattr(args, "floor_logprobs", None)
    if k is not None:
        check_request_logprobs("--floor-logprobs", k, "top logprobs of the floor's one-token requests")
        return k
    return int(args.logprobs or min(MAX_LOGPROBS, dialect.max_top_logprobs or MAX_LOGPROBS))


def _sets(run_dir: Path) -> list[dict]:
    """Per stored sample set: its prompt, sampling, server options and first chunk's rows (from the set key)."""
    import json as _json

    from verifier.runner.store import SampleStore
    from verifier.sampling import SamplingConfig

    store, out = SampleStore(run_dir), []
    if not store.samples_dir.is_dir():
        return out
    for set_dir in sorted(p for p in store.samples_dir.iterdir() if p.is_dir()):
        shard = store.read_chunk(set_dir.name, 0)
        key = shard.meta.get("set_key", "") if shard is not None else ""
        parts = dict(part.split("=", 1) for part in key.split("|") if "=" in part)
        try:
            out.append({"prompt": tuple(_json.loads(parts["prompt"])), "sampling": SamplingConfig(**_json.loads(parts["sampling"])),
                        "options": _json.loads(parts["options"]), "rows": shard.tokens})
        except (KeyError, ValueError, TypeError):
            continue
    return out


def measure_url_floor(outcome, plan: dict, suite) -> None:
    """Known-target URL audit: measure the numeric floor (:mod:`verifier.server.floor`) and apply it to the report
    (:func:`verifier.engines.floor.apply_floor`: a floor above the target TV turns PASS into UNDERPOWERED; a BIAS
    stands with the floor beside it); the reports are written again.  A server that cannot answer the floor's
    requests leaves the floor "not measured" (stated; the verdict then assumes it serves --target's law)."""
    from verifier.engines.floor import FLOOR_KEY, apply_floor
    from verifier.reports import write_reports
    from verifier.runner.models import load_pair
    from verifier.server.client import ServerError, ServerSettings, ServerUsageError
    from verifier.server.dialects import ServerReplyError, get_dialect
    from verifier.server.floor import FLOOR_JOURNAL, choose_prefixes, measure_server_floor
    from verifier.server.journal import Journal

    settings_plan = plan["server_floor"]
    report, run_dir = outcome.report, Path(outcome.outcome.run_dir)
    sets = _sets(run_dir)
    from verifier.engines.floor import SERVER_MEASURED as measured

    def unmeasured(floor: dict, hint: str = "") -> None:  # the report says why the floor is missing, and is rewritten
        report[FLOOR_KEY] = floor
        print(f"numeric floor: {floor['source']}{hint}")
        write_reports(report, run_dir)

    if settings_plan["positions"] == 0 or not sets:
        why = "--floor-positions 0" if sets else "no stored samples to take prefixes from"
        return unmeasured({"max_tv": None, "rows": [], "source": f"not measured ({why}): the verdict assumes the "
                           "server serves --target's law"})
    options = sets[0]["options"]
    dialect = get_dialect(options.get("api", "openai-completions"))
    settings = ServerSettings(options["base_url"], num_concurrent=int(options.get("num_concurrent", 4)),
                              max_retries=int(options.get("max_retries", 5)),
                              timeout_s=float(options.get("request_timeout_s", 300.0)), api_key_env=options.get("api_key_env"))
    pair = load_pair(suite.models["audit"], suite.base_dir)
    if dialect.needs_text:
        dialect = dialect.with_text(pair.tokenizer)
    prompts = [tuple(p) for p in plan["prompts"]]
    skipped = []  # drawn prefixes a text-prompt server cannot be sent (their ids do not round-trip as text)

    def sendable(prefix) -> bool:
        try:
            dialect.text_of(prefix, name="a floor prefix")
        except InvalidArgumentError:
            skipped.append(prefix)
            return False
        return True

    jobs, done = [], set()
    for s in sets:
        if (s["prompt"], s["sampling"].label()) in done:
            continue
        done.add((s["prompt"], s["sampling"].label()))
        index = prompts.index(s["prompt"]) if s["prompt"] in prompts else len(prompts)
        if index == len(prompts):
            prompts.append(s["prompt"])
        for prefix in choose_prefixes(s["prompt"], s["rows"], settings_plan["positions"], suite.seed, pair.eos_token_id,
                                      sendable=sendable if dialect.needs_text else None):
            jobs.append((index, prefix, s["sampling"]))
    journal = Journal(run_dir / FLOOR_JOURNAL, server=settings.base_url)
    try:
        floor = measure_server_floor(settings, dialect, pair.reference, jobs, logprobs=settings_plan["logprobs"],
                                     prompt_lengths=[len(p) for p in prompts], journal=journal,
                                     model=options.get("model"), eos_token_id=pair.eos_token_id)
    except InvalidArgumentError as exc:  # e.g. a request option this server cannot take
        return unmeasured({"max_tv": None, "rows": [], "source": f"not measured: a floor request could not be "
                           f"written ({exc}); the verdict assumes the server serves --target's law"})
    except (ServerError, ServerUsageError, ServerReplyError) as exc:
        return unmeasured({"max_tv": None, "rows": [], "source": f"not measured: the server did not answer the floor's "
                           f"one-token logprob requests ({exc}); the verdict assumes it serves --target's law"},
                          " -- give --logprobs K the server allows, or --floor-positions 0")
    finally:
        journal.close()
    if skipped:
        floor["source"] += (f"; {len(skipped)} drawn prefix(es) skipped: their ids do not round-trip as text, which "
                            f"--api {dialect.name} takes (e.g. {list(skipped[0])})")
    if floor["max_tv"] is None:
        floor["source"] += ("; not measured: no row defined a law (" +
                            ", ".join(f"{n} x {r}" for r, n in floor["undefined"].items()) + ")")
        return unmeasured(floor)
    outcome.outcome.exit_code = apply_floor(report, floor, plan["target_tv"], measured=measured)
    above = report[FLOOR_KEY]["above_target"]
    print(f"numeric floor: TV {floor['max_tv']:.3g} at {floor['where']} ({len(floor['rows'])} positions, top-"
          f"{floor['logprobs']} rows; target TV {plan['target_tv']:g}{': ABOVE it -> no PASS' if above else ''})")
    write_reports(report, run_dir)
