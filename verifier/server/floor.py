"""The numeric floor of a known-target URL audit: the law the server reports vs the local ``--target``'s.

A known-target URL audit (``specverify audit --url URL --target MODEL``) tests the server's samples
against the processed law the harness computes from ``--target`` (:class:`verifier.runner.models.ReferenceModel`).
That verdict is about the right law only if the server runs the same weights and numerics: one serving
another quantisation, dtype or checkpoint samples from a law that differs from ``--target``'s even
when its speculative decoding is lossless.  This module measures that gap, as
:mod:`verifier.engines.floor` does for engine adapters, from the top-K logprobs the server reports
with speculation off::

    floor = max over the checked positions of TV(server's reported law, --target's law)

Positions (:func:`choose_prefixes`)
    Per prompt and sampling config of the audit: the prompt itself, then up to ``positions - 1``
    distinct emitted prefixes ``prompt + row[:j]`` (``1 <= j < len(row)``, nothing after EOS), drawn
    uniformly without replacement among the (row, j) pairs of the audit's stored samples (the first
    chunk of each sample set) with ``numpy.random.default_rng([seed, STREAM])``.
Requests
    One per position, to the audited server, with ``max_tokens = 1`` and the audit's sampling and
    ``logprobs = K``: a one-token request is never drafted (a server drafts no request's last token,
    docs/servers.md), so the row is the target's without speculation; on llama-server the per-request
    ``speculative.n_max = 0`` is sent as well (build 0c1e570 ignores it).  Replies are journaled in
    ``RUN_DIR/server/floor-responses.jsonl``.  A K above the server's top-logprobs cap on a server whose
    logprobs follow ``logit_bias`` (mlx_lm: cap 11) asks for the cap, then rebuilds the whole row by one
    biased request per ``cap - 1`` ids (:mod:`verifier.server.floor_sweep`), which makes the floor exact.
Comparison (:func:`compare_row`)
    The server's processed law is rebuilt from the row with :func:`verifier.server.reported_law.rebuild_law`
    (the dialect's convention).  When the row defines it (it holds the whole kept set: ``--top-k <= K``,
    a vocabulary of at most K, or a row whose mass is 1) the TV against ``--target``'s processed law
    (:meth:`~verifier.runner.models.ReferenceModel.next_probs`, float64) is exact.  Otherwise the two
    laws are compared in the row's own convention (raw rows: temperature 1, no truncation, where the
    reported logprobs are exact; processed rows: the processed law) on the row's ids plus one bucket
    "everything else", and **the mass outside the row is counted as disagreeing in full**::

        tv = 1/2 (sum over the row's ids |server - local| + server's unseen mass + local's unseen mass)

    an upper bound of the TV (``tv_measured``, the TV of the coarsened laws, is its lower bound).
    Conservative: a floor the rows cannot see is assumed, never assumed away; give ``--top-k <= K`` to
    make it exact.  A row that defines no law at all (no row, a mass above 1) is counted per reason.

The report entry (``report.json`` ``numeric_floor``) has the fields of the engine floor (``rows``,
``max_tv``, ``source``, ``method``, ``target_tv``, ``above_target``) plus ``where``, ``logprobs``,
``positions`` and ``undefined``; :func:`verifier.engines.floor.apply_floor` applies the rule (a floor
above the target TV turns PASS into UNDERPOWERED; a BIAS stands with the floor beside it).
"""

from __future__ import annotations

import math
import time
from typing import Any, Sequence

import numpy as np

from verifier.server.floor_requests import top_rows
from verifier.server.floor_sweep import SWEEP_BIAS
from verifier.server.reported_law import MASS_TOL, ReportedLaw, rebuild_law

__all__ = ["choose_prefixes", "compare_row", "measure_server_floor", "DEFAULT_POSITIONS", "MAX_LOGPROBS",
           "FLOOR_JOURNAL", "STREAM"]

STREAM = 0xF1002  # the floor's position sample: its own generator stream beside the audit seed
DEFAULT_POSITIONS = 8  # per prompt and sampling config: the prompt + 7 emitted prefixes
MAX_LOGPROBS = 20  # K asked for when --logprobs is not given (vLLM's default --max-logprobs; llama-server any)
FLOOR_JOURNAL = "server/floor-responses.jsonl"
FLOOR_SEED = 1  # the one-token requests' seed (the row does not depend on it)


def choose_prefixes(prompt: Sequence[int], rows: np.ndarray | None, count: int, seed: int,
                    eos_token_id: int | None = None, sendable=None) -> list[tuple[int, ...]]:
    """The prompt, then up to ``count - 1`` distinct emitted prefixes of ``rows`` (module docstring).

    Parameters
    ----------
    prompt : sequence of int
    rows : ndarray (n, T) of int, or None
        Emitted tokens of the audit (padding < 0 after EOS).
    count : int
        Positions wanted (>= 1; the prompt is the first).
    seed : int
        The audit seed.
    eos_token_id : int or None
        A prefix never runs past EOS.
    sendable : callable or None
        ``sendable(prefix) -> bool``: False skips a drawn prefix the server cannot be sent (a text-prompt server,
        ``--api mlx-lm``, where the prefix's ids do not round-trip through the tokenizer) and the draw goes on, so
        the floor still checks ``count`` positions where the rows allow.  None: every prefix.

    Returns
    -------
    list of tuple of int
        Prefixes (prompt included), the prompt first, then in draw order.

    Examples
    --------
    >>> choose_prefixes([0, 1], np.array([[2, 2, 0], [1, -1, -1]]), 3, seed=0)[0]
    (0, 1)
    >>> len(choose_prefixes([0, 1], np.array([[2, 2, 0]]), 5, seed=0))  # (0,1), (0,1,2), (0,1,2,2)
    3
    """
    base = tuple(int(t) for t in prompt)
    out = [base]
    if rows is None or count <= 1 or len(rows) == 0:
        return out
    rows = np.asarray(rows)
    pairs = []
    for i, row in enumerate(rows):
        valid = [int(t) for t in row if t >= 0]
        if eos_token_id is not None and eos_token_id in valid:
            valid = valid[: valid.index(eos_token_id) + 1]
        pairs.extend((i, j) for j in range(1, len(valid)) if not (eos_token_id is not None and valid[j - 1] == eos_token_id))
    if not pairs:
        return out
    rng = np.random.default_rng([int(seed), STREAM])
    seen = {base}
    for k in rng.permutation(len(pairs)):
        i, j = pairs[int(k)]
        prefix = base + tuple(int(t) for t in rows[i][:j])
        if prefix not in seen:
            seen.add(prefix)
            if sendable is not None and not sendable(prefix):
                continue
            out.append(prefix)
            if len(out) >= count:
                break
    return out


def compare_row(row: dict[int, float] | None, local_processed: np.ndarray, local_raw: np.ndarray, sampling,
                convention: str, vocab_size: int) -> dict[str, Any]:
    """TV between one reported row and ``--target``'s law at the same prefix (module docstring).

    Parameters
    ----------
    row : mapping token id -> natural-log prob, or None
        The server's top-K row at the prefix.
    local_processed, local_raw : ndarray (vocab,)
        ``--target``'s processed law at the audit's sampling and its raw law (temperature 1).
    sampling : SamplingConfig
    convention : {"raw", "processed"}
    vocab_size : int

    Returns
    -------
    dict
        ``tv`` (the floor's value: exact, or the upper bound), ``tv_measured`` (the lower bound; = ``tv`` when
        exact), ``unseen`` (the server's and the local mass outside the row, summed), ``how`` ("exact" or
        "bounded: ..."); or ``{"undefined": reason}`` when the row defines no law.

    Examples
    --------
    >>> from verifier.sampling import SamplingConfig
    >>> p = np.array([0.5, 0.3, 0.2])
    >>> r = compare_row({0: math.log(0.5), 1: math.log(0.3), 2: math.log(0.2)}, p, p, SamplingConfig(), "raw", 3)
    >>> round(r["tv"], 12), r["how"]
    (0.0, 'exact')
    >>> r = compare_row({0: math.log(0.5)}, p, p, SamplingConfig(), "raw", 3)  # 0.5 unseen on each side
    >>> r["tv"], r["tv_measured"]
    (0.5, 0.0)
    """
    # a context-dependent law (repetition / presence / frequency penalty) is not rebuilt from a row (a raw row is before
    # the penalty, which needs the prefix): compared in the row's own convention below -- raw rows with the local
    # temperature-1 law, processed rows with the local processed law at the same prefix
    law = rebuild_law(row, sampling, convention, vocab_size=vocab_size) if not sampling.uses_context else None
    size = max(int(vocab_size), local_processed.size)
    if isinstance(law, ReportedLaw):
        if law.ids.size and int(law.ids.max()) >= size:  # an id --target does not have: all its mass disagrees
            size = int(law.ids.max()) + 1
        mine = np.zeros(size)
        mine[law.ids] = law.probs
        ref = np.zeros(size)
        ref[: local_processed.size] = local_processed
        tv = float(0.5 * np.abs(mine - ref).sum())
        return {"tv": tv, "tv_measured": tv, "unseen": 0.0, "how": "exact"}
    if not row:
        return {"undefined": "no reported logprobs at this position"}
    ids = np.fromiter(row.keys(), dtype=np.int64, count=len(row))
    probs = np.exp(np.fromiter(row.values(), dtype=np.float64, count=len(row)))
    mass = float(probs.sum())
    if not np.isfinite(probs).all() or mass > 1 + MASS_TOL:
        return {"undefined": f"the reported probs sum to {mass:.6g} > 1 (not one law)"}
    local = local_raw if convention == "raw" else local_processed
    inside = np.array([float(local[t]) if 0 <= t < local.size else 0.0 for t in ids])
    diff = float(np.abs(probs - inside).sum())
    unseen_server, unseen_local = max(0.0, 1.0 - mass), max(0.0, 1.0 - float(inside.sum()))
    lower = 0.5 * (diff + abs(unseen_server - unseen_local))
    upper = min(1.0, 0.5 * (diff + unseen_server + unseen_local))
    law_name = "temperature-1 law" if convention == "raw" else "processed law"
    return {"tv": upper, "tv_measured": lower, "unseen": unseen_server + unseen_local,
            "how": f"bounded: {law_name} on the {len(ids)} reported ids, {unseen_server:.3g} (server) + "
                   f"{unseen_local:.3g} (local) unseen counted as disagreeing"}


def measure_server_floor(settings, dialect, reference, jobs: Sequence[tuple[int, tuple[int, ...], Any]], *,
                         logprobs: int, prompt_lengths: Sequence[int], journal=None, model: str | None = None,
                         eos_token_id: int | None = None) -> dict[str, Any]:
    """Ask the server for its top-``logprobs`` row at each prefix and compare it with ``reference``'s law.

    Parameters
    ----------
    settings : ServerSettings
        The audited server.
    dialect : Dialect
    reference : ReferenceModel
        ``--target`` (``next_probs(prefixes (1, P), sampling) -> (1, vocab)``, float64).
    jobs : sequence of (prompt index, prefix, SamplingConfig)
        :func:`choose_prefixes` per prompt and sampling config.
    logprobs : int
        K.
    prompt_lengths : sequence of int
        Per prompt index (a position is ``len(prefix) - len(prompt) + 1``).
    journal : Journal or None
        Where replies persist (and are read back from).
    model : str or None
        The request's ``model`` field.
    eos_token_id : int or None

    Returns
    -------
    dict
        The engine floor's fields (``rows``, ``max_tv``, ``source``, ``method``) plus ``where``, ``logprobs``,
        ``positions``, ``undefined`` (reason -> count).

    Raises
    ------
    ServerError, ServerUsageError, ServerReplyError
        As :func:`verifier.server.client.post_all` and :meth:`Dialect.parse`.
    """
    from verifier.sampling import SamplingConfig

    switch = 0 if dialect.has_switch else None
    cap = dialect.max_top_logprobs
    sweep = bool(dialect.bias_sweep and cap and int(logprobs) > cap)  # the whole row by logit_bias sweeps
    plain_k = min(int(logprobs), cap) if cap else int(logprobs)
    bodies = [dialect.request(list(prefix), sampling, 1, FLOOR_SEED, n=1, logprobs=plain_k, model=model,
                              draft_tokens=switch) for _, prefix, sampling in jobs]
    started = time.monotonic()
    plain_rows = top_rows(settings, dialect, [(f"numeric floor request {j} (prefix {list(jobs[j][1])[:12]})", b)
                                              for j, b in enumerate(bodies)],
                          "known-target floor", journal=journal, eos_token_id=eos_token_id)
    swept = [(None, {})] * len(jobs)
    too_many = ""
    if sweep:
        from verifier.server.floor_sweep import run_sweeps, sweep_budget_note

        too_many = sweep_budget_note(reference.vocab_size, cap, len(jobs))
        swept = [(None, {"why": too_many})] * len(jobs) if too_many else run_sweeps(  # too many: bounded rows, stated
            settings, dialect, bodies, plain_rows, reference.vocab_size, journal=journal, eos_token_id=eos_token_id,
            labels=[f"prefix {list(p)[:12]}" for _, p, _ in jobs])
    rows, undefined = [], {}
    best, where = None, ""
    raw = SamplingConfig()
    for j, (i, prefix, sampling) in enumerate(jobs):
        ids = np.asarray([list(prefix)], dtype=np.int64)
        processed = reference.next_probs(ids, sampling, int(prompt_lengths[i]))[0]  # penalties count the output only
        local_raw = reference.next_probs(ids, raw)[0]
        whole, info = swept[j]
        result = compare_row(whole if whole is not None else plain_rows[j], processed, local_raw, sampling,
                             dialect.reported_law, reference.vocab_size)
        if whole is not None and "undefined" not in result:
            result["tv"] = min(1.0, result["tv"] + info["unseen"])  # mass outside the sweep disagrees in full
            result["unseen"] = info["unseen"]
            result["how"] = (f"exact: the whole row by {info['requests']} logit_bias sweep requests ({info['missing']} "
                             f"ids below e^-{SWEEP_BIAS:g} set to 0, {info['unseen']:.2g} outside the sweep, plain row "
                             f"agrees to {info['deviation']:.2g})")
        elif sweep and "undefined" not in result:
            result["how"] += f"; sweep not used: {info.get('why', 'no sweep')}"
        if "undefined" in result:
            undefined[result["undefined"]] = undefined.get(result["undefined"], 0) + 1
            continue
        position = len(prefix) - int(prompt_lengths[i]) + 1
        rows.append({"prompt": i, "prompt_ids": [int(t) for t in prefix][:16], "position": position,
                     "sampling": sampling.label(), **result})
        if best is None or result["tv"] > best:
            best = result["tv"]
            where = (f"prompt {i}, position {position} (prefix {list(prefix)[:12]}{'...' if len(prefix) > 12 else ''}, "
                     f"{sampling.label()}; {result['how']})")
    bounded = sum(1 for r in rows if not r["how"].startswith("exact"))  # a swept row's how: "exact: the whole row ..."
    how_k = (f"top-{plain_k} logprobs and the whole row by logit_bias sweeps of {cap}" if sweep and not too_many
             else f"top-{plain_k} logprobs")
    return {"source": f"{dialect.name} {settings.base_url}, one-token requests with {how_k}",
            "rows": rows, "max_tv": best, "where": where, "logprobs": int(logprobs), "positions": len(jobs),
            "undefined": undefined, "seconds": round(time.monotonic() - started, 3),
            "method": ("TV between the processed law the server reports at one-token requests (speculation off: a "
                       "server drafts no request's last token) and --target's processed law (float64), per checked "
                       f"position; {len(rows) - bounded} exact, {bounded} bounded (the row does not hold the kept set: "
                       "compared in the row's own convention with the mass outside the row counted as disagreeing"
                       + ("; --floor-logprobs at the vocabulary size, where the server allows it, makes it exact)"
                          if bounded else ")")
                       + (f"; rows beyond the server's top-{cap} cap rebuilt by logit_bias sweeps (verifier/server/"
                          "floor_sweep.py)" if sweep else ""))}

