"""Run the self-reported design of a URL audit end to end: requests, journal, cells, verdict, report.

``specverify audit --url BASE_URL --design self-reported`` (:mod:`verifier.cli._audit_url`) with no
local model.  Per prompt, in this order:

1. the law at the prompt: one speculation-off request of one token with the top-K logprobs
   (``--reference-url``, else the same server with the dialect's per-request switch);
2. n planned from ``--target-tv`` on that law (``gof@1`` sees the target TV at power 0.99 and the
   per-cell alpha), unless ``--num-samples`` is given;
3. the audited sample: n requests with distinct hashed seeds and the top-K logprobs of every
   emitted token; the server's speculation counters read around it;
4. the cells ``gof@1`` and ``pit`` (:mod:`verifier.server.self_reported`), the collision cells
   ``collision-seeded`` / ``collision-unseeded`` (:mod:`verifier.stats.collisions`; ``--collisions N``
   completions each, the second without a seed field) and the ``consistency`` cell
   (:mod:`verifier.server.consistency`; ``--consistency-positions`` re-scored with speculation off).

The bias cells (gof, pit, collisions) are corrected together as every audit's are
(:func:`verifier.runner.verdict.decide`, gate: Holm + Cauchy at the family's alpha); then three
guards may turn the verdict into UNDERPOWERED, never into PASS: too many positions without a
usable reported law, reported logprobs that differ with speculation off, no evidence that
speculation ran.  Every reply is journaled (``RUN_DIR/server/responses.jsonl``; the speculation-off
replies of a ``--reference-url`` in ``server/reference-responses.jsonl``); rerunning the command with
the same ``--run-dir`` sends only what is missing.  The report is the usual report.json / report.md /
report.html / junit.xml; the exit code follows :func:`verifier.runner.verdict.exit_code`.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from verifier.server.client import ServerSettings, post_all
from verifier.server.dialects import Completion, get_dialect
from verifier.server.journal import JOURNAL_NAME, Journal, request_key

__all__ = ["SelfReportedSpec", "run_self_reported", "REFERENCE_JOURNAL"]

REFERENCE_JOURNAL = "server/reference-responses.jsonl"
# an UNDERPOWERED reason's advice (verifier.runner.verdict.more_rows_advice): this command's flag
MORE_ROWS = "rerun with --num-samples {n} (the same --run-dir sends only the missing requests)"
DESIGN = "self-reported"
# llama-server's speculation-off rows: one-token requests, which no build drafts (a draft is capped at n_predict -
# generated - 1, tools/server/server-context.cpp get_n_draft_max); the per-request `speculative.n_max = 0` is sent
# too, but build 0c1e570 parses it inside `#if 0` (tools/server/server-schema.cpp) and ignores it
SAME_SERVER_OFF = ("same server, one-token requests (a server drafts no request's last token; speculative.n_max = 0 "
                   "is sent as well, which llama-server 0c1e570 ignores)")


@dataclass
class SelfReportedSpec:
    """Everything the design needs (the CLI flags of ``specverify audit --url --design self-reported``)."""

    url: str
    api: str
    prompts: list[list[int]]
    sampling: Any
    logprobs: int
    vocab_size: int
    max_new_tokens: int
    num_draft_tokens: int
    run_dir: Path
    eos_token_id: int | None = None
    reference_url: str | None = None
    model: str | None = None
    server: dict[str, Any] = field(default_factory=dict)  # ServerSettings keywords
    n_per_request: int = 1
    speculative: bool | None = None
    num_samples: int | None = None
    target_tv: float = 0.05
    alpha: float = 1e-3
    power: float = 0.99
    seed: int = 0
    collisions: int = 200
    consistency_positions: int = 32
    convention: str | None = None
    require_speculation: bool = True


class _Sender:
    """Requests to one server, each reply parsed, checked and journaled before the next is awaited."""

    def __init__(self, spec: SelfReportedSpec, base_url: str, journal_name: str) -> None:
        self.spec, self.dialect = spec, get_dialect(spec.api)
        self.settings = ServerSettings(base_url, **spec.server)
        self.journal = Journal(spec.run_dir / journal_name, server=base_url)
        for note in self.journal.notes:
            print(f"note: {note}")

    def send(self, role: str, jobs: Sequence[tuple[str, dict, int, int]]) -> list[list[Completion]]:
        """``jobs``: (what, body, n, max_new_tokens); the completions of each, from the journal when there."""
        keys = [request_key({"api": self.spec.api, "design": DESIGN, "role": role, "index": i, "body": body})
                for i, (_w, body, _n, _m) in enumerate(jobs)]
        missing = [i for i, k in enumerate(keys) if self.journal.get(k) is None]
        self.last_sent = len(missing)  # the rest were read back from the journal

        for i, k in enumerate(keys):  # read back from the journal: checked as a fresh reply is, before use
            if self.journal.get(k) is not None:
                what, _body, n, max_new = jobs[i]
                problem = self._problem(self.journal.get(k), n, max_new)
                if problem:
                    from verifier.server.journal import JournalError

                    raise JournalError(f"{self.journal.where(k)}: the journaled reply to {what} holds {problem}; it "
                                       "cannot be a reply to this audit's request (edited, or journaled by a run with "
                                       "other settings, e.g. another --vocab-size) -- restore the journal or start a "
                                       "new run folder")

        def on_reply(j: int, reply: Any, seconds: float) -> None:
            i = missing[j]
            what, body, n, max_new = jobs[i]
            completions = self.dialect.parse(reply, n=n, max_new_tokens=max_new, eos_token_id=self.spec.eos_token_id,
                                             what=what, logprobs=True)
            problem = self._problem(completions, n, max_new)
            if problem:
                from verifier.errors import DecoderOutputError

                raise DecoderOutputError(f"{what}: the server's reply holds {problem}; is it serving another model?")
            self.journal.append(keys[i], body, completions, seconds)

        try:
            post_all(self.settings, self.dialect.path, [(jobs[i][0], jobs[i][1]) for i in missing], on_reply)
        finally:
            self.journal.sync()
        return [self.journal.get(k) for k in keys]

    def _problem(self, completions: list[Completion], n: int, max_new: int) -> str | None:
        """What makes ``completions`` impossible as the reply to a request of ``n`` completions of at most
        ``max_new`` tokens in 0..vocab_size - 1 (emitted ids and the ids of every top-logprobs row), or None."""
        vocab, eos = self.spec.vocab_size, self.spec.eos_token_id
        if len(completions) != n:
            return f"{len(completions)} completions for a request of n={n}"
        for c in completions:
            ids = c.token_ids
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                return f"token id {bad[0]} outside 0..{vocab - 1} (--vocab-size) among the emitted {list(ids)}"
            if not 1 <= len(ids) <= max_new:
                return f"{len(ids)} tokens for max_new_tokens={max_new}"
            if len(ids) < max_new and (eos is None or ids[-1] != eos):
                return f"{len(ids)} of {max_new} tokens without ending at EOS (id {eos})"
            for j, row in enumerate(c.top_logprobs or ()):
                bad = [t for t in row if not 0 <= t < vocab]
                if bad:
                    return (f"top logprobs at emitted position {j + 1} that name token id {bad[0]} outside "
                            f"0..{vocab - 1} (--vocab-size): {_row(row)}")
        return None

    def close(self) -> None:
        self.journal.close()


def _check_run_dir(run_dir: Path) -> None:
    """A run folder of another kind (a suite run or a known-target / two-sample audit: ``run.json``; a report of
    another design) is refused (ConfigError, exit 2): this design would overwrite its reports.  Its own folder is
    continued (the journal)."""
    import json

    from verifier.errors import ConfigError

    other = None
    if (run_dir / "run.json").is_file():
        other = "a run of the suite runner (run.json: a suite, or a known-target / two-sample audit)"
    elif (run_dir / "report.json").is_file():
        try:
            design = json.loads((run_dir / "report.json").read_text()).get("design", {}).get("name")
        except (OSError, ValueError, AttributeError):
            design = "unreadable"
        if design != DESIGN:
            other = f"the report of another audit (report.json design {design!r})"
    if other:
        raise ConfigError(f"--run-dir={str(run_dir)!r} already holds {other}; a self-reported audit would overwrite "
                          "its reports. Allowed: a --run-dir that does not exist yet, or one of a self-reported audit "
                          "to continue it")


def _row(row: dict) -> str:
    """A reported row as an error shows it (ids and logprobs, the first 8)."""
    shown = ", ".join(f"{t}: {v:.4g}" for t, v in list(row.items())[:8])
    return "{" + shown + (", ..." if len(row) > 8 else "") + "}"


def _body(spec: SelfReportedSpec, prompt, max_new: int, seed: int | None, *, n: int = 1, off: bool = False) -> dict:
    switch = 0 if off else (spec.num_draft_tokens if spec.speculative else None)
    return get_dialect(spec.api).request(prompt, spec.sampling, max_new, seed, n=n, logprobs=spec.logprobs,
                                         model=spec.model, draft_tokens=switch)


def _plan_n(spec: SelfReportedSpec, law, cell_alpha: float) -> int:
    from verifier.stats.gof import gof_mde
    from verifier.stats.power import samples_for_mde

    probs = law.dense(spec.vocab_size)
    n = samples_for_mde(lambda m: gof_mde(m, probs, alpha=cell_alpha, power=spec.power).tv, spec.target_tv)
    return int(n) if n is not None else 100_000


def run_self_reported(spec: SelfReportedSpec) -> int:
    """Run the design (module docstring); write the reports into ``spec.run_dir`` and return the exit code.

    Raises
    ------
    ServerUsageError, ServerError, ServerReplyError
        From the client and the dialect (exit 2 / 3), with every reply received so far journaled.
    """
    from verifier.runner import speculation
    from verifier.runner.verdict import cell_level, decide, exit_code, more_rows_advice
    from verifier.server.consistency import (choose_positions, compare, consistency_cell, consistency_guard,
                                             reference_guard)
    from verifier.server.metrics import counter_delta, read_counters
    from verifier.server.reported_law import Undefined, law_tv, rebuild_law
    from verifier.server.self_reported import position_laws, self_reported_cells, undefined_guard

    started = time.monotonic()
    _check_run_dir(spec.run_dir)
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    dialect = get_dialect(spec.api)
    convention = spec.convention or dialect.reported_law
    from verifier.server.client import server_description

    described = server_description(spec.url, spec.api, spec.server.get("api_key_env"))  # report.json design.server
    main = _Sender(spec, spec.url, JOURNAL_NAME)
    off_switch = spec.reference_url is None and spec.api == "llama-server"
    ref = _Sender(spec, spec.reference_url, REFERENCE_JOURNAL) if spec.reference_url else main
    reference = (spec.reference_url if spec.reference_url else
                 SAME_SERVER_OFF if off_switch else None)
    name = spec.api
    label = spec.sampling.label()
    bias_tests = 2 + (2 if spec.collisions >= 2 else 0)
    cell_alpha = cell_level(spec.alpha, bias_tests * len(spec.prompts), "gate")
    cells, extra_cells, sets, laws_all, spec_entries, reference_checks = [], [], [], [], [], []
    from verifier.runner.clock import session_id
    from verifier.server.spec_ledger import SpecLedger

    ledger, session = SpecLedger(spec.run_dir, main.journal), session_id()
    for note in ledger.notes:
        print(f"note: {note}")
    from verifier.server.decoder import request_seed

    for p_index, prompt in enumerate(spec.prompts):
        base = f"{name}/prompt{p_index}/sampling/k={spec.num_draft_tokens}"
        meta = {"decoder": name, "set_id": f"{name}_prompt{p_index}"}
        # 1. the law at the prompt, speculation off
        rseed = request_seed(spec.seed, prompt, label + "|prompt-law", 0)
        prompt_reply = ref.send("prompt-law", [(f"prompt law of prompt {p_index}", _body(spec, prompt, 1, rseed,
                                                                                           off=off_switch), 1, 1)])[0][0]
        prompt_law = rebuild_law((prompt_reply.top_logprobs or [None])[0], spec.sampling, convention,
                                 vocab_size=spec.vocab_size)
        if isinstance(prompt_law, Undefined) and prompt_law.not_a_law:
            from verifier.server.dialects import ServerReplyError

            raise ServerReplyError(f"prompt law of prompt {p_index}: sent a one-token request for prompt {prompt[:8]} "
                                   f"with top-{spec.logprobs} logprobs; the reported row "
                                   f"{_row((prompt_reply.top_logprobs or [{}])[0])} is not the log probabilities of "
                                   f"any law ({prompt_law.reason})")
        if isinstance(prompt_law, Undefined):
            from verifier.errors import SamplingRefusedError

            raise SamplingRefusedError(f"the server's reported logprobs at prompt {prompt[:8]} define no law "
                                       f"({prompt_law.reason}); allowed: a server that reports its top logprobs "
                                       f"(--logprobs K with --top-k <= K)")
        if ref is not main:  # the reference's law must be the audited server's own (consistency.reference_guard)
            own = main.send("prompt-law-own", [(f"own prompt law of prompt {p_index}", _body(spec, prompt, 1, rseed),
                                                1, 1)])[0][0]
            own_law = rebuild_law((own.top_logprobs or [None])[0], spec.sampling, convention, vocab_size=spec.vocab_size)
            reference_checks.append({"where": f"prompt {p_index}", "tv": None if isinstance(own_law, Undefined)
                                     else float(law_tv(own_law, prompt_law))})
        # 2. n
        n = spec.num_samples or _plan_n(spec, prompt_law, cell_alpha)
        print(f"prompt {p_index}: {n} completions of {spec.max_new_tokens} tokens" +
              ("" if spec.num_samples else f" (planned: gof@1 sees TV {spec.target_tv:g} at power {spec.power:g}, "
                                           f"per-cell alpha {cell_alpha:.3g})"))
        # 3. the audited sample
        per = max(1, min(spec.n_per_request, dialect.max_n))
        jobs = []
        for r in range(-(-n // per)):
            k = min(per, n - r * per)
            rs = request_seed(spec.seed, prompt, label, r)
            jobs.append((f"request {r} (seed {rs}, {label}, prompt {p_index})", _body(spec, prompt, spec.max_new_tokens,
                                                                                       rs, n=k), k, spec.max_new_tokens))
        before = read_counters(main.settings, dialect)
        replies = main.send("sample", jobs)
        after = read_counters(main.settings, dialect)
        completions = [c for reply in replies for c in reply]
        drafted = [c.drafted for c in completions]
        entry = {"requests": len(jobs), "requests_sent": main.last_sent, "required": spec.require_speculation,
                 "seed_honoured": None, "counters": counter_delta(before, after).to_json(),
                 "per_request_draft_tokens": None if None in drafted else sum(drafted),
                 "per_request_accepted_tokens": None if None in drafted else sum(c.accepted or 0 for c in completions)}
        # earlier sessions' counter deltas for this phase (a rerun from the journal sends nothing and measures 0)
        spec_entries += ledger.entries(meta["set_id"], entry, len(jobs), session,
                                       phase=ledger.phase_digest(body for _label, body, _n, _m in jobs))
        laws = position_laws(completions, spec.sampling, convention, spec.vocab_size)
        laws_all.append(laws)
        cells += self_reported_cells(completions, laws, prompt_law, vocab_size=spec.vocab_size, cell_alpha=cell_alpha,
                                     power=spec.power, target_mde=spec.target_tv, seed=spec.seed, base=base, **meta)
        # 4. collisions, seeded and unseeded
        if spec.collisions >= 2:
            for kind in ("seeded", "unseeded"):
                cjobs = [(f"collision request {i} ({kind}, prompt {p_index})",
                          _body(spec, prompt, spec.max_new_tokens,
                                request_seed(spec.seed, prompt, label + "|collision", i) if kind == "seeded" else None),
                          1, spec.max_new_tokens) for i in range(spec.collisions)]
                got = [r[0] for r in main.send(f"collision-{kind}", cjobs)]
                cells.append(_collision_cell(f"{base}/collision-{kind}", kind, got, spec, convention, cell_alpha, meta))
        # 5. consistency
        if reference is not None and spec.consistency_positions > 0:
            picks = choose_positions(laws, spec.consistency_positions, spec.seed)
            rjobs = [(f"consistency: completion {i}, position {j + 1} (prompt {p_index})",
                      _body(spec, list(prompt) + list(completions[i].token_ids[:j]), 1,
                            request_seed(spec.seed, prompt, label + "|consistency", q), off=off_switch), 1, 1)
                     for q, (i, j) in enumerate(picks)]
            ref_replies = [r[0] for r in ref.send("consistency", rjobs)]
            result = compare(picks, laws, completions, ref_replies, prompt, spec.sampling, convention,
                             vocab_size=spec.vocab_size, reference=reference)
        else:
            from verifier.server.consistency import ConsistencyResult

            result = ConsistencyResult(reference="not run: no speculation-off reference (--reference-url), and "
                                       f"--api {spec.api} has no per-request switch" if reference is None else
                                       "not run: --consistency-positions 0")
        extra_cells.append(consistency_cell(f"{base}/consistency", result, spec.target_tv, **meta))
        sets.append({"set_id": meta["set_id"], "decoder": name, "prompt": f"prompt{p_index}", "prompt_ids": list(prompt),
                     "sampling": spec.sampling.to_dict(), "sampling_name": "sampling",
                     "num_draft_tokens": spec.num_draft_tokens, "samples": n, "samples_on_disk": n, "samples_missing": 0,
                     "max_new_tokens": spec.max_new_tokens, "models": "reported by the server",
                     "reported_positions": laws.to_dict(), "prompt_law": {str(int(t)): float(p) for t, p in
                                                                          zip(prompt_law.ids, prompt_law.probs)}})
    main.close()
    if ref is not main:
        ref.close()
    with more_rows_advice(MORE_ROWS):
        verdict = decide(name, "pass", cells, alpha=spec.alpha, correction="gate", target_mde=spec.target_tv,
                         max_new_tokens=spec.max_new_tokens)
    for laws in laws_all:
        undefined_guard(verdict, laws, spec.target_tv)
    for cell in extra_cells:
        consistency_guard(verdict, cell, spec.target_tv)
    reference_guard(verdict, reference_checks, spec.target_tv)
    speculation.apply_guard(verdict, speculation.summarize(spec_entries, session=session))
    if verdict.verdict == "BIAS DETECTED" and (spec.sampling.temperature != 1.0 or (spec.sampling.top_p or 1.0) < 1.0):
        # the rebuilt law applies the sampling to the rows when they are raw: rows that were already processed
        # (vLLM --logprobs-mode processed_logprobs) would have it applied twice -- say which convention was assumed
        other = "processed" if convention == "raw" else "raw"
        verdict.reason += (f"; this assumes the server reports {convention} logprobs (--reported-logprobs {convention}); "
                           f"if it reports {other} ones, rerun with --reported-logprobs {other} before concluding")
    verdict.cells = cells + extra_cells
    code = exit_code([verdict])
    report = _report(spec, verdict, sets, code, time.monotonic() - started, reference, convention, reference_checks)
    report["design"]["server"] = described  # what the server says it is (the README audit matrix's version)
    from verifier.reports import write_reports

    write_reports(report, spec.run_dir)
    _print(verdict, report, spec)
    return code


def _collision_cell(cell_id: str, kind: str, got: list[Completion], spec: SelfReportedSpec, convention: str,
                    cell_alpha: float, meta: dict):
    """The collision cell of one kind from its completions (pairs whose first completion has no defined law
    at every position are dropped and counted)."""
    import math

    from verifier.runner.analysis import CellResult, collision_result_cell
    from verifier.stats.collisions import collision_test, identical_pairs
    from verifier.server.self_reported import path_probs, position_laws

    laws = position_laws(got, spec.sampling, convention, spec.vocab_size)
    probs = [path_probs(c, row, spec.max_new_tokens) for c, row in zip(got, laws.laws)]
    same = identical_pairs([c.token_ids for c in got])
    keep = [i for i in range(len(same)) if probs[2 * i] is not None]
    known = [p for p in probs if p is not None]
    how = "distinct hashed seeds" if kind == "seeded" else "no seed field"
    if not keep:
        return CellResult(cell_id, test=f"collision ({kind})", method=f"{len(got)} requests ({how}); no pair has a defined "
                          "reported law", n=0, statistic=math.nan, pvalue=1.0, effect_unit="collision", **meta)
    res = collision_test([probs[2 * i] for i in keep], same[keep], collision_prob=sum(known) / len(known),
                         alpha=cell_alpha, power=spec.power)
    return collision_result_cell(
        cell_id, f"collision ({kind})", res, pairs_of=f"among {len(got)} independent requests ({how})",
        tokens=spec.max_new_tokens, law="the reported law", cell_alpha=cell_alpha,
        dropped=f"; {len(same) - len(keep)} pairs without a defined law dropped",
        extra={"seeded": kind == "seeded", "requests": len(got),
               "distinct_completions": len({tuple(c.token_ids) for c in got})}, **meta)


def _report(spec: SelfReportedSpec, verdict, sets: list[dict], code: int, seconds: float, reference, convention,
            reference_checks: list[dict]) -> dict:
    import importlib.metadata as md
    import os

    from verifier.runner.assemble import OVERALL, REPORT_SCHEMA_VERSION
    from verifier.runner.verdict import session_figures

    versions = {}
    for pkg in ("spec-verifier", "numpy", "scipy", "torch"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    cells = [c.to_dict() for c in verdict.cells]
    mark = "as expected" if verdict.expectation_met else "EXPECTED PASS"
    return {
        "schema_version": REPORT_SCHEMA_VERSION, "tool": "spec-verifier", "verdict": OVERALL.get(code, "ERROR"),
        "exit_code": code, "summary": f"{verdict.decoder}: {verdict.verdict} ({mark}) -> exit {code}",
        "suite": {"name": "url-self-reported", "source": spec.url, "profile": None, "seed": spec.seed,
                  "description": f"self-reported design: {spec.url} ({spec.api}) against the law it reports "
                                 f"(top-{spec.logprobs} logprobs, {convention} convention)",
                  "stats": {"alpha": spec.alpha, "correction": "gate", "target_mde": spec.target_tv, "power": spec.power},
                  "num_sample_sets": len(sets), "num_cells": len(cells)},
        "environment": {"python": platform.python_version(), "platform": platform.platform(), "versions": versions,
                        "devices": [], "dtypes": [], "cpu_count": os.cpu_count()},
        "exact": {"ran": False, "ok": True, "findings": [], "wrong_rules": []},
        "decoders": [verdict.to_dict()], "sample_sets": sets, "cells": cells, "stopped": [],
        "samples_missing": 0, "samples_planned": sum(s["samples"] for s in sets),
        "design": {"name": DESIGN, "url": spec.url, "api": spec.api, "reference": reference, "convention": convention,
                   "reference_prompt_law_tv": reference_checks,
                   "logprobs": spec.logprobs, "collisions": spec.collisions,
                   "consistency_positions": spec.consistency_positions},
        "run": {"run_id": spec.run_dir.name, "stage_seconds": {"audit": seconds},
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **session_figures([verdict])},
    }


def _print(verdict, report: dict, spec: SelfReportedSpec) -> None:
    print()
    for c in verdict.cells:
        if c.support_violation:
            shown = f"support violation: {c.support_violation}"
        elif c.test == "consistency":
            shown = f"max TV {c.effect:.3g}" if c.effect is not None else "not run"
        else:
            shown = f"stat {c.statistic:.4g}, p {c.pvalue:.3g}" + (f", MDE {c.mde:.3g} {c.effect_unit}" if c.mde else "")
        print(f"  {c.verdict or '-':12s} {c.id}: {shown}")
    spec_summary = verdict.speculation
    if spec_summary:
        from verifier.runner.speculation import describe

        print(describe(spec_summary))
    print(f"{verdict.verdict}: {verdict.reason}")
    print(f"report: {spec.run_dir / 'report.md'} (exit {report['exit_code']})")
