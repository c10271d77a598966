"""``audit --engine NAME --num-samples N``: the engine draws the audit's chunks while the harness starts up.

Before its first ``generate`` call an engine audit spends several seconds of harness work on one core: importing torch,
transformers and scipy, loading the reference pair, planning the cells (about 6 s on the shipped pair, 2-core
machine).  The engine's worker, started first (:mod:`verifier.cli._prestart`), is idle then.  Here the audit's sample
set is computed without the models or the plan (:func:`verifier.audit.suite_builder.sample_set_preview`: the same
suite builder and sample-set plan the runner uses, so the same keys and chunk seeds), and its ``generate`` calls are
handed to the worker (:meth:`verifier.engines.bridge.EngineWorker.presample`), which makes them in order in the
background.

Nothing here can change a sample: the runner's decoder takes a reply made ahead only for a call whose keywords --
prompt, sampling fields, ``max_new_tokens``, every row's seed -- equal the ones it would send
(:meth:`~verifier.engines.bridge.EngineWorker.take_presampled`); its first call that differs stops the calls ahead
and is made as usual.  A prediction that is off (a text prompt encoded otherwise than by the reference's tokenizer, a
chunk size the runner chooses otherwise) costs the engine time of the calls made for nothing, never a verdict.  The
sampling rate in the report counts the engine's own seconds of each call made ahead, not the runner's wait for it;
those calls share the cores with the harness's start-up, so on a small machine the reported rate is lower than the
engine's alone (a pessimistic "hours still needed", never an optimistic one).

Only a fresh, non-sequential audit of one sample set with no logprob, stop-rule or batch-composition cells and no
``--call-timeout`` (a call made ahead is never waited for, so the limit could not judge it) is drawn ahead.  With a fixed n (``--num-samples``) every chunk's call is handed over; with an n the plan chooses
(``--target-tv``), the first :data:`MAX_GUESSED_CALLS` full chunks are, and :func:`settle_presample` cuts them to the
plan's n once it is known (a chunk beyond it costs the engine time of one call at most).  ``SPECVERIFY_PRESAMPLE=0`` turns it off (the A/B runs of the benchmark).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["start_presample", "settle_presample", "PRESAMPLE_ENV", "MAX_GUESSED_CALLS"]

PRESAMPLE_ENV = "SPECVERIFY_PRESAMPLE"
# calls handed over for a planned n, before the plan says how many chunks there are: the plan takes seconds, in which
# an engine makes a few chunks (vLLM on 2 cores: ~12 of 500 rows in 6 s); settle_presample cuts them to the plan's n
MAX_GUESSED_CALLS = 32
_AHEAD: list = []  # (decoder, chunk size, whether n is planned) of the calls handed to the worker


def start_presample(args: Any, spec: Any) -> int:
    """Hand the prestarted engine worker the ``generate`` calls of the audit's chunks; the number of calls handed
    (0: nothing drawn ahead).  Never raises: anything unexpected leaves the runner to sample as usual."""
    from verifier._call_timeout import CALL_TIMEOUT_ENV
    from verifier.cli._prestart import prestarted_decoder

    _AHEAD.clear()
    decoder = prestarted_decoder()
    if (decoder is None or os.environ.get(PRESAMPLE_ENV, "1") == "0"
            # a call made ahead is never waited for, so --call-timeout could not judge it: the runner makes them all
            or os.environ.get(CALL_TIMEOUT_ENV) or getattr(args, "call_timeout", None)
            or getattr(args, "sequential", False) or getattr(args, "resume", None) or spec.variants
            or spec.stop_token_ids or spec.max_tokens is not None or set(spec.tests) & {"logprob", "stop"}):
        return 0
    try:
        return _start(decoder, spec)
    except Exception:  # noqa: BLE001 - a usage error is the runner's to raise, with its context
        return 0


def _start(decoder: Any, spec: Any) -> int:
    from verifier.audit.suite_builder import sample_set_preview
    from verifier.cli._prestart import checkpoint_info

    info = checkpoint_info(spec.target)
    if info is None:
        return 0
    ids = _prompt_ids(spec)
    if ids is None or any(not 0 <= t < info[0] for p in ids for t in p):
        return 0
    planned = spec.num_samples is None  # n comes from the plan: a guess of full chunks, cut by settle_presample
    if planned:
        from dataclasses import replace

        spec = replace(spec, num_samples=int(spec.max_planned_samples))
    plans = sample_set_preview(spec, ids, info[0])
    if len(plans) != 1 or plans[0].batch_rows is not None or plans[0].filler_prompts:
        return 0
    plan = plans[0]
    calls = min(plan.num_chunks, MAX_GUESSED_CALLS) if planned else plan.num_chunks
    requests = [decoder.request(plan.prompt_ids, plan.chunk_rows(i), plan.max_new_tokens, plan.sampling,
                                plan.chunk_seed(i)) for i in range(calls)]
    if not decoder.presample(requests, guessed=planned):
        return 0
    _AHEAD.append((decoder, plan.chunk_size, planned))
    return len(requests)


def settle_presample(num_samples: int) -> None:
    """After the plan (``num_samples`` per sample set): of the calls guessed for a planned n, keep only the full chunks
    below it (the runner's last chunk may be shorter: it makes that call itself).  Nothing for a fixed n."""
    if _AHEAD and _AHEAD[0][2]:
        decoder, chunk, _ = _AHEAD[0]
        decoder.limit_presample(int(num_samples) // int(chunk))


def _prompt_ids(spec: Any) -> list[tuple[int, ...]] | None:
    """Each prompt's ids: given ids as they are; a text encoded with the checkpoint's ``tokenizer.json``
    (``add_special_tokens=False``, as :func:`verifier.runner.models.encode_prompt`); with no prompt, the default
    one :func:`verifier.audit.suite_builder.default_prompt` gives a checkpoint with a tokenizer.  None when a text
    cannot be encoded here (the runner then samples everything itself)."""
    from verifier.audit.suite_builder import GENERIC_PROMPT, SHIPPED_PROMPT
    from verifier.cli._prestart import checkpoint_folder

    prompts = list(spec.prompts) or [("text", SHIPPED_PROMPT if str(spec.target).startswith("shipped:") else GENERIC_PROMPT)]
    out, tokenizer = [], None
    for kind, value in prompts:
        if kind == "ids":
            out.append(tuple(int(t) for t in value))
            continue
        if tokenizer is None:
            folder = checkpoint_folder(spec.target)
            if folder is None or not (folder / "tokenizer.json").is_file():
                return None
            from tokenizers import Tokenizer  # a Rust extension: milliseconds (transformers' AutoTokenizer: seconds)

            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        encoded = tuple(tokenizer.encode(value, add_special_tokens=False).ids)
        if not encoded:
            return None
        out.append(encoded)
    return out
