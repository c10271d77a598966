"""A URL audit's stop rule as the server takes it (issue 29, bug kind 5; ``--stop-token-ids``, ``--max-tokens``).

The suite states a stop rule as token ids and a length limit (:mod:`verifier.runner.stop`); the runner hands them
to :meth:`verifier.server.decoder.ServerDecoder.generate`, which sends them per request through the dialect
(:class:`verifier.server.dialects.StopRule`): vLLM's ``stop_token_ids`` take the ids as they are; llama-server
takes stop *strings* only, so the ids become one-character strings whose stop set is exactly those ids under the
target's tokenizer (:func:`verifier.engines._stop_strings.stop_strings`), or the rule is refused (exit 2) before
any request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from verifier.errors import refuse_sampling
from verifier.server.dialects import Dialect, StopRule

__all__ = ["build_stop_rule"]


def build_stop_rule(dialect: Dialect, stop_token_ids: Sequence[int], max_tokens: int | None, *,
                    tokenizer: str | None = None, eos_token_id: int | None = None) -> StopRule | None:
    """The :class:`StopRule` of ``dialect`` for a request's stop ids and limit.

    Parameters
    ----------
    dialect : Dialect
        The server's dialect; ``stop_as_strings`` dialects get the ids mapped to stop strings.
    stop_token_ids : sequence of int
        The request's stop tokens beside EOS (checked by :func:`verifier.validation.check_stop_rule`).
    max_tokens : int or None
        The request's length limit (None: the row width).
    tokenizer : str or None
        The target's checkpoint (a folder or ``shipped:NAME``) whose ``tokenizer.json`` gives each token's text;
        required for a ``stop_as_strings`` dialect with stop ids.
    eos_token_id : int or None
        The target's EOS (the server stops there by itself; it gets no string).

    Returns
    -------
    StopRule or None
        None when there is no stop rule (no ids, no limit).

    Raises
    ------
    SamplingRefusedError
        (exit 2) ``--stop-token-ids`` the dialect cannot express: no tokenizer to map them, or ids whose texts are
        not one ASCII character each or not closed under containment (the message names the ids the server would
        also stop at).
    """
    ids = tuple(int(t) for t in stop_token_ids)
    if not ids and max_tokens is None:
        return None
    strings: tuple[str, ...] = ()
    if ids and dialect.stop_as_strings:
        if not tokenizer or str(tokenizer).startswith("tabular:"):
            raise refuse_sampling("--stop-token-ids", list(ids), f"with --target a checkpoint with a tokenizer on --api "
                                  f"{dialect.name} (it takes stop strings, mapped from the target's token texts)")
        from verifier.engines._stop_strings import stop_strings, token_texts

        folder = Path(tokenizer)
        if str(tokenizer).startswith("shipped:"):
            from verifier.models.shipped_paths import shipped_checkpoint

            folder = shipped_checkpoint(str(tokenizer).split(":", 1)[1])
        strings = tuple(stop_strings(ids, token_texts(folder), eos_token_id=eos_token_id, engine=dialect.name,
                                     name="--stop-token-ids"))
    return StopRule(ids, None if max_tokens is None else int(max_tokens), strings)
