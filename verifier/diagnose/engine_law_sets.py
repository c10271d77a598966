"""The engine laws of a run folder's sample sets: their inputs, started early, then ranked after the family's ranking.

An engine's laws (:mod:`verifier.diagnose.engine_laws`) are predicted from the prompt, the sampling config, the
decoder's options and the settings its shards recorded -- never from the rows -- so :func:`start_engine_laws` starts
each set's prediction (``module.engine_laws``) in a thread (:class:`verifier._beside.Beside`) before the whole-row
ranking, and :func:`add_engine_laws` ranks the laws it returns once the ranking is done.  OpenVINO GenAI's law at T = 1
is the engine's own logits after 147,456 contexts, computed in the engine's venv (a subprocess, ~12 s on the 2-core
machine): it then runs while the ranking does (reports/benchmarks.md section 43).  The laws are those computed in turn
(the same call, the same inputs); a prediction that raises raises again where it is used.
"""

from __future__ import annotations

from functools import partial
from typing import Any

__all__ = ["start_engine_laws", "add_engine_laws", "recorded_settings"]


def recorded_settings(store, plan) -> list:
    """The distinct decoder settings the set's readable shards recorded (``meta["decoder"]["settings"]``, normally a
    dict; a damaged value is kept as it is, for the module to name): what the adapter resolved while sampling, e.g. the
    precision OpenVINO's pipeline ran at."""
    out: list = []
    for i in range(plan.num_chunks):
        shard = store.read_chunk(plan.set_id, i)
        if shard is None:
            continue
        decoder = shard.meta.get("decoder")
        settings = decoder.get("settings", {}) if isinstance(decoder, dict) else decoder  # a damaged one kept as is
        if settings not in out:
            out.append(settings)
    return out


def _inputs(module, plan, pairs, store) -> dict[str, Any]:
    """A set's inputs to :func:`verifier.diagnose.engine_laws.engine_law_diagnosis`, without its rows."""
    pair = pairs[plan.pair]
    with_settings = getattr(module, "TAKES_SETTINGS", False)  # the shards' recorded settings, read only where used
    return {"prompt": list(plan.prompt_ids), "sampling": plan.sampling, "label": plan.label,
            "num_draft_tokens": plan.num_draft_tokens, "target": pair.target_model,
            "draft": pair.draft_model if pair.draft_known else None, "options": dict(plan.decoder.options),
            **({"settings": recorded_settings(store, plan)} if with_settings else {})}


def _predicted(module, s: dict[str, Any]) -> bool:
    """Whether :func:`~verifier.diagnose.engine_laws.engine_law_diagnosis` will predict this set's laws (its checks,
    the rows aside: a set it does not rank is only a prediction not used)."""
    kw = {"options": s["options"], **({"settings": s["settings"]} if "settings" in s else {})}
    if s["sampling"].greedy or module.law_unsupported(s["sampling"], s["num_draft_tokens"], **kw) is not None:
        return False
    if s["draft"] is None and getattr(module, "NEEDS_DRAFT", True):
        return False
    if s["sampling"].uses_context and not getattr(module, "TAKES_CONTEXT", False):
        return False
    return callable(s["target"])


def start_engine_laws(engine: str | None, plans, pairs, store) -> dict[str, Any]:
    """Start the law prediction of every set of ``plans`` whose laws will be ranked: set_id -> a started
    :class:`~verifier._beside.Beside` (``.result()`` is ``module.engine_laws(prompt, sampling, target, draft, ...)``).
    Empty when the engine registers no laws."""
    from verifier._beside import Beside
    from verifier.diagnose.engine_laws import engine_module

    module = engine_module(engine)
    if module is None:
        return {}
    out = {}
    for plan in plans:
        s = _inputs(module, plan, pairs, store)
        if _predicted(module, s):
            kw = {"options": s["options"], **({"settings": s["settings"]} if "settings" in s else {})}
            out[plan.set_id] = Beside(partial(module.engine_laws, **kw), s["prompt"], s["sampling"], s["target"],
                                      s["draft"], name="engine-laws")
    return out


def add_engine_laws(item: dict, engine: str | None, plans, pairs, cache, no_draft_rows, biased: bool, store,
                    started: dict[str, Any] | None = None) -> None:
    """Rank the laws ``engine``'s source predicts beside the family on the first tokens
    (:mod:`verifier.diagnose.engine_laws`; with the target alone on the sets whose draft is unknown,
    ``no_draft_rows``); a law named there is the decoder's root cause, in the engine's terms.  ``started``: the
    predictions :func:`start_engine_laws` started (their laws are used instead of predicting them again)."""
    from verifier.diagnose.engine_laws import engine_law_diagnosis, engine_module, law_entry

    module = engine_module(engine)
    if module is None:
        return
    started = started or {}
    sets = []
    for p in plans:
        if p.set_id not in cache and p.set_id not in no_draft_rows:
            continue
        s = {"seqs": cache[p.set_id][0][0] if p.set_id in cache else None, "tokens": no_draft_rows.get(p.set_id),
             **_inputs(module, p, pairs, store)}
        if p.set_id in started:
            s["laws"] = started[p.set_id].result()
        sets.append(s)
    if not sets:
        return
    found = engine_law_diagnosis(engine, sets, bias_detected=biased)
    if found is None:
        return
    item["engine_law"] = found
    if found["named"]:
        rows = item["sentence"]
        item["status"], item["sentence"] = "consistent", f"{found['sentence']}; on whole rows: {rows}"
        item["mechanism"] = [law_entry(engine, n) for n in found["named"]]
    else:
        item["sentence"] += f"; {found['sentence']}"
