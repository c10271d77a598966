"""The engine laws of a run folder's sample sets: each set's inputs, ranked after the family's whole-row ranking.

An engine's laws (:mod:`verifier.diagnose.engine_laws`) are predicted from the prompt, the sampling config, the
decoder's options and the settings its shards recorded (:func:`recorded_settings`); :func:`add_engine_laws` ranks them
beside the family on the first tokens of the rows the diagnosis read and adds the finding to the decoder's entry.
"""

from __future__ import annotations

from typing import Any

__all__ = ["add_engine_laws", "recorded_settings"]


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


def add_engine_laws(item: dict, engine: str | None, plans, pairs, cache, no_draft_rows, biased: bool, store) -> None:
    """Rank the laws ``engine``'s source predicts beside the family on the first tokens
    (:mod:`verifier.diagnose.engine_laws`; with the target alone on the sets whose draft is unknown,
    ``no_draft_rows``); a law named there is the decoder's root cause, in the engine's terms."""
    from verifier.diagnose.engine_laws import engine_law_diagnosis, engine_module, law_entry

    module = engine_module(engine)
    if module is None:
        return
    sets = []
    for p in plans:
        if p.set_id not in cache and p.set_id not in no_draft_rows:
            continue
        s = {"seqs": cache[p.set_id][0][0] if p.set_id in cache else None, "tokens": no_draft_rows.get(p.set_id),
             **_inputs(module, p, pairs, store)}
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
