"""Stop token ids as stop *strings*, for an engine whose only per-request stop rule is text (llama-cpp-python,
llama-server).

Issue 29, kind 5.  The harness states a stop rule as token ids (the row ends at its first token in the set);
``Llama.create_completion(stop=[...])`` ends a completion at the first token after which the completion's text
contains a stop string.  The two rules agree exactly when

* every stop string is one ASCII byte (a one-byte string lies inside one token: it cannot be completed across a
  token boundary, and no multi-byte character contains an ASCII byte), and
* the stop set is closed under containment: every token (EOS aside) whose text holds one of those bytes is in it,
  and every stop token's text is exactly its byte.

:func:`stop_strings` maps ids to strings under those two conditions and refuses anything else, naming the ids that
would be missing; :func:`token_texts` reads a checkpoint's token texts from its ``tokenizer.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from verifier.errors import refuse_sampling

__all__ = ["stop_strings", "token_texts"]


def token_texts(checkpoint: Path) -> list[bytes]:
    """Each token's text, UTF-8 bytes, from ``checkpoint/tokenizer.json`` (special tokens: empty).

    Parameters
    ----------
    checkpoint : Path
        A Hugging Face checkpoint folder.

    Returns
    -------
    list of bytes, length vocab
        ``texts[t]`` = token ``t`` decoded alone; a byte token that is not valid UTF-8 on its own decodes to
        U+FFFD (never an ASCII byte, so containment of an ASCII stop byte is still read right).

    Raises
    ------
    InvalidArgumentError
        (exit 2) the folder has no ``tokenizer.json``.
    """
    from tokenizers import Tokenizer

    path = Path(checkpoint) / "tokenizer.json"
    if not path.is_file():
        raise refuse_sampling("target_model", str(checkpoint), "a checkpoint with a tokenizer.json (a stop rule goes "
                               "to llama-cpp-python as stop strings, mapped from the token texts)")
    tok = Tokenizer.from_file(str(path))
    return [tok.decode([t], skip_special_tokens=True).encode("utf-8") for t in range(tok.get_vocab_size())]


def stop_strings(stop_token_ids: Sequence[int], texts: Sequence[bytes], *, eos_token_id: int | None,
                 engine: str = "llama-cpp-python", name: str = "stop_token_ids") -> list[str]:
    """The stop strings that end a completion at exactly the tokens ``stop_token_ids`` (module docstring).

    Parameters
    ----------
    stop_token_ids : sequence of int
        The request's stop tokens (checked by :func:`verifier.validation.check_stop_rule` first).  EOS, if listed,
        is left out: the engine ends at EOS by itself.
    texts : sequence of bytes, length vocab
        Each token's text (:func:`token_texts`, or the engine's own ``detokenize([t])``).
    eos_token_id : int or None
        The model's EOS (its text is empty; the engine's EOS check comes before its stop-string check).
    engine : str, default "llama-cpp-python"
        The engine named in a refusal (``llama-server`` for a URL audit).
    name : str, default "stop_token_ids"
        The argument named in a refusal (``--stop-token-ids`` on the command line).

    Returns
    -------
    list of str
        One one-character string per stop token that is not EOS, in the order given.

    Raises
    ------
    SamplingRefusedError
        (exit 2, also from inside a suite run's ``generate``: a stop rule this engine cannot express, not a crash of
        the decoder) a stop token whose text is not one ASCII byte, or a set not closed under containment (the
        message names the ids the engine would also stop at).

    Examples
    --------
    >>> stop_strings([1], [b"", b"t", b"at", b"b"], eos_token_id=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    verifier.errors.SamplingRefusedError: stop_token_ids=[1] is invalid; allowed: a set closed under containment ...
    >>> stop_strings([1, 2], [b"", b"t", b"at", b"b"], eos_token_id=0)
    ['t']
    """
    ids = [int(t) for t in stop_token_ids if eos_token_id is None or int(t) != int(eos_token_id)]
    single = [t for t in ids if len(texts[t]) == 1 and texts[t][0] < 0x80]
    chars = sorted({texts[t] for t in single})
    engine_set = {t for t, text in enumerate(texts) if t != eos_token_id and any(c in text for c in chars)}
    if not single:
        if not ids:
            return []
        raise refuse_sampling(name, list(stop_token_ids), "ids among which some token's text is one ASCII "
                               f"character ({engine} stops on stop strings; a one-byte string cannot span tokens); "
                               f"texts here: {[texts[t] for t in ids]}")
    if engine_set != set(ids):
        missing, extra = sorted(engine_set - set(ids)), sorted(set(ids) - engine_set)
        raise refuse_sampling(name, list(stop_token_ids), (
            f"a set closed under containment for {engine}'s stop strings {[c.decode() for c in chars]}: every "
            f"token whose text holds one of them, e.g. {sorted(engine_set)}" + (f" (missing {missing}: the engine "
            f"would stop there too)" if missing else "") + (f" (not stoppable by a one-character string: {extra})"
                                                              if extra else "")))
    return [texts[t].decode("ascii") for t in single]
