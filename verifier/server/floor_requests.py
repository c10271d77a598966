"""The numeric floor's one-token logprob requests, posted and journaled (:func:`top_rows`).

Shared by the floor's plain requests (:mod:`verifier.server.floor`) and its ``logit_bias`` sweeps
(:mod:`verifier.server.floor_sweep`): each request's reply is parsed by the dialect, journaled under its own key
(``{"api", "design", "body"}``) as it arrives, and read back from the journal on a resumed run, so nothing already
received is sent again.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["top_rows"]


def top_rows(settings, dialect, jobs: Sequence[tuple[str, dict[str, Any]]], design: str, *, journal=None,
             eos_token_id: int | None = None) -> list[dict[int, float] | None]:
    """Post the one-token logprob requests ``jobs`` and return each reply's top row (None where it has none).

    Parameters
    ----------
    settings : ServerSettings
    dialect : Dialect
    jobs : sequence of (str, dict)
        A label naming each request in errors, and its JSON body (``max_tokens`` 1, top logprobs asked for).
    design : str
        Part of each reply's journal key (``"known-target floor"``, ``"known-target floor sweep"``).
    journal : Journal or None
        Where replies persist and are read back from: a resumed floor resends none of them.
    eos_token_id : int or None

    Returns
    -------
    list of (dict token id -> natural-log prob, or None)
        One per job, in order.

    Raises
    ------
    ServerError, ServerUsageError, ServerReplyError
        As :func:`verifier.server.client.post_all` and :meth:`Dialect.parse`.
    """
    from verifier.server.client import post_all
    from verifier.server.journal import request_key

    keys = [request_key({"api": dialect.name, "design": design, "body": body}) for _, body in jobs]
    got = {i: journal.get(key) for i, key in enumerate(keys)} if journal is not None else {}
    missing = [i for i in range(len(jobs)) if got.get(i) is None]

    def on_reply(m: int, reply: Any, seconds: float) -> None:
        i = missing[m]
        got[i] = dialect.parse(reply, n=1, max_new_tokens=1, eos_token_id=eos_token_id, what=jobs[i][0], logprobs=True)
        if journal is not None:
            journal.append(keys[i], jobs[i][1], got[i], seconds)

    try:
        post_all(settings, dialect.path, [jobs[i] for i in missing], on_reply)
    finally:
        if journal is not None:
            journal.sync()
    return [((got[i][0].top_logprobs or (None,))[0] or None) for i in range(len(jobs))]
