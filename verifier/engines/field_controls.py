"""Negative controls of the engines' field audits (issue 29, kind 3): an engine decoder with processors dropped.

:func:`processors_dropped` wraps any decoder plugin and calls it with some sampling fields unset, while the harness
audits the requested config -- the defect "the engine ignores the penalty on its speculative path" (vLLM issue
#18902) or "min-p skipped" made on purpose, on a real engine.  A suite runs it beside the engine's own decoder with
``expect = "detect"``: the penalty cells must reject it at the suite's ``n``, else they have no power against that
defect there (their PASS on the engine then says less).  The wrapper changes nothing else: same engine, seeds,
prompts and k.

Example (``suites/engines/llama-cpp-python-field.toml``)::

    [[decoders]]
    name = "control-penalties-dropped"
    decoder = "verifier.engines.field_controls:processors_dropped"
    options = { decoder = "verifier.engines.llama_cpp_python:decoder", drop = ["presence_penalty", "frequency_penalty"],
                draft = "model" }
    expect = "detect"
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from verifier.errors import invalid_argument

__all__ = ["DROPPABLE", "processors_dropped", "DroppedProcessors"]

DROPPABLE = ("repetition_penalty", "presence_penalty", "frequency_penalty", "min_p", "top_k", "top_p")


class DroppedProcessors:
    """A decoder whose ``generate`` unsets ``drop`` in the sampling config before calling ``inner``.

    Parameters
    ----------
    inner : Decoder
        The wrapped decoder (an engine decoder).
    drop : sequence of str
        Sampling fields set to None in every call (:data:`DROPPABLE`).
    """

    def __init__(self, inner: Any, drop: Sequence[str]) -> None:
        self.inner, self.drop = inner, tuple(drop)
        self.name = f"{getattr(inner, 'name', 'decoder')}[dropped={','.join(self.drop)}]"
        self.settings = {**dict(getattr(inner, "settings", {}) or {}), "control": f"sampling fields dropped: {list(self.drop)}"}

    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: Any, seed: int, **kw: Any):
        """``inner.generate`` with the dropped fields unset (the harness still audits ``sampling``)."""
        return self.inner.generate(prompt_ids, num_samples, max_new_tokens,
                                   dataclasses.replace(sampling, **{f: None for f in self.drop}), seed, **kw)

    @property
    def last_stats(self) -> Any:
        return getattr(self.inner, "last_stats", None)

    def __getattr__(self, name: str) -> Any:  # vocab_size, eos_token_id, num_draft_tokens, close, ...
        if name in ("inner", "drop"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def processors_dropped(decoder: str, drop: Sequence[str] = ("presence_penalty", "frequency_penalty"),
                       num_draft_tokens: int = 4, target: Any = None, draft: Any = None, **options: Any) -> DroppedProcessors:
    """Decoder plugin factory: ``decoder`` called with the fields ``drop`` unset.

    Parameters
    ----------
    decoder : str
        A ``module:factory`` plugin spec (built with ``options`` and ``num_draft_tokens``), or a registered decoder
        name (``"reference"``, a zoo mutant: :func:`verifier.decoders.mutants.make_decoder`), built on the suite's
        ``target`` and ``draft``.
    drop : sequence of str
        Fields of :data:`DROPPABLE`.
    num_draft_tokens : int, default 4
    target, draft : model, optional
        The suite's decoder-ready models (offered by the runner); used by a registered decoder name only.

    Raises
    ------
    InvalidArgumentError
        (exit 2) ``drop`` empty or naming a field outside :data:`DROPPABLE`; ``decoder`` neither a plugin spec nor a
        registered decoder name.
    """
    from verifier.plugins import load_plugin

    drop = [drop] if isinstance(drop, str) else list(drop)
    if not drop or any(f not in DROPPABLE for f in drop):
        raise invalid_argument("drop", drop, f"a non-empty list of {', '.join(DROPPABLE)}")
    if ":" not in decoder:  # a registered decoder of the harness, on the suite's own pair
        from verifier.decoders.mutants import DECODER_REGISTRY, make_decoder

        if decoder not in DECODER_REGISTRY or target is None or draft is None:
            raise invalid_argument("decoder", decoder, "a 'module:factory' plugin spec, or a registered decoder name ("
                                   + ", ".join(sorted(DECODER_REGISTRY)[:6]) + ", ...) run by a suite (its target and draft)")
        return DroppedProcessors(make_decoder(decoder, target, draft, num_draft_tokens, **options), drop)
    return DroppedProcessors(load_plugin(decoder, "decoder", None, num_draft_tokens=num_draft_tokens, **options), drop)
