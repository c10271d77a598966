"""``transformers``: Hugging Face ``generate`` speculative paths, in-process (transformers is a harness dependency).

``specverify audit --engine transformers --engine-arg mode=MODE`` drives
:class:`verifier.engines.hf_assisted.HFAssistedDecoder` (``do_sample=True``, batch size 1, a fixed ``k``):

=======================  ==================================================================================
``assisted``             ``generate(assistant_model=draft)``: ``AssistedCandidateGenerator`` + ``_speculative_sampling``
                         (min(1, p/q) on the assistant's processed probs).  The draft is the harness's draft.
``prompt_lookup``        ``generate(prompt_lookup_num_tokens=k)``: ``PromptLookupCandidateGenerator`` copies the
                         continuation of the last n-gram's earlier occurrence; it has no candidate logits, so
                         ``_assisted_decoding`` samples every position from the target and keeps drafts while
                         they equal the sample (lossless for any draft).  No draft model: draft unknown.
``assistant_tokenizer``  ``generate(assistant_model=draft, tokenizer=, assistant_tokenizer=)``: with
                         ``do_sample=True``, ``UniversalSpeculativeDecodingGenerator`` maps the assistant's
                         vocabulary onto the target's by token string (its LM head pruned to the shared
                         strings) and verifies with ``_speculative_sampling``.  Default draft: the shipped draft
                         retokenized (:func:`verifier.engines.hf_local.retokenized_draft`).  Draft unknown.
``gemma4_assistant``     ``Gemma4ForCausalLM.generate(assistant_model=Gemma4AssistantForCausalLM)``:
                         ``SinglePositionMultiTokenCandidateGenerator``.  Default pair: the tiny random Gemma4
                         target + assistant (:func:`verifier.engines.hf_local.tiny_gemma4`); the assistant is no
                         standalone causal LM: draft unknown.
=======================  ==================================================================================

"Installing" builds the local checkpoints the last two modes use (``bash ci/engines/transformers.sh``).
The engine's target logits are the model's own (:meth:`TransformersEngine.target_logits` is the
numeric floor's input; transformers computes the HF reference, so the floor is 0 up to the dtype).
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

from verifier.engines import register_engine
from verifier.engines.base import Engine, EngineNotInstalledError, EngineOption
from verifier.errors import invalid_argument

__all__ = ["TransformersEngine", "decoder", "assistant_checkpoint"]

try:
    _VERSION = metadata.version("transformers")
except metadata.PackageNotFoundError:  # pragma: no cover - transformers is a dependency
    _VERSION = "not installed"

MODE_DEFAULT_MODELS = {  # mode -> (target, draft) when the user gives none; paths relative to install_dir()
    "assistant_tokenizer": (None, "retokenized-draft"),
    "gemma4_assistant": ("gemma4/target", "gemma4/assistant"),
}


@register_engine("transformers")
class TransformersEngine(Engine):
    kind = "decoder"
    package = "transformers"
    version = _VERSION
    entry_point = "transformers.GenerationMixin.generate (_assisted_decoding; candidate generator per mode)"
    batching = ("one row per speculative step: assisted generation requires batch size 1, one generate call per row "
                "(batch_composition levels above 1 row are refused)")
    options = (
        EngineOption("mode", "assisted", ("assisted", "prompt_lookup", "assistant_tokenizer", "gemma4_assistant"),
                     "which candidate generator generate() runs (see verifier/engines/hf_transformers.py)"),
        EngineOption("max_matching_ngram_size", 2, (), "prompt_lookup: longest prompt n-gram matched"),
        EngineOption("assistant_model", "", (), "assistant_tokenizer / gemma4_assistant: the assistant checkpoint "
                     "(default: the local one built by ci/engines/transformers.sh)"),
        EngineOption("num_workers", 0, (), "worker processes (0: every CPU core)"),
        EngineOption("control_patch", "", ("", "usd_logit_order", "gemma4_greedy_q", "draft_warpers_once"),
                     "CONTROL of a finding, off by default: 'usd_logit_order' fixes the q column order of universal "
                     "assisted generation; 'gemma4_greedy_q' hands the Gemma4 assistant's point-mass q over; "
                     "'draft_warpers_once' applies the assistant's temperature/top-k/top-p once (FINDINGS.md)"),
        EngineOption("vocab_order_seed", 0, (), "assistant_tokenizer: the assistant vocabulary's get_vocab() order, a "
                     "permutation drawn from this seed in every process (reproducible samples); -1: each process's "
                     "own hash order"),
    )

    @classmethod
    def is_installed(cls) -> bool:
        """transformers is a harness dependency: installed when importable (the local checkpoints are separate)."""
        return _VERSION != "not installed"

    @classmethod
    def runtime(cls) -> str:
        built = "built" if (cls.install_dir() / "INSTALLED.json").is_file() else "NOT built"
        return (f"in the harness's process (transformers is a dependency); local checkpoints for assistant_tokenizer / "
                f"gemma4_assistant: {cls.install_dir()} ({built}: `{cls.install_script()}`)")

    @classmethod
    def local_models(cls) -> Path:
        """The folder of the local checkpoints, or :class:`EngineNotInstalledError` naming the script that builds them."""
        folder = cls.install_dir()
        if not (folder / "INSTALLED.json").is_file():
            raise EngineNotInstalledError(f"the transformers engine's local checkpoints (retokenized draft, tiny Gemma4 pair) are "
                                          f"not built in {str(folder)!r}; build them with `{cls.install_script()}` (offline, ~30 s)")
        return folder

    @classmethod
    def draft_known(cls, options: dict[str, Any]) -> bool:
        """Only ``mode=assisted`` uses a draft the harness can score (:mod:`verifier.runner.draft`)."""
        return options.get("mode", "assisted") == "assisted"

    @classmethod
    def default_target(cls, options: dict[str, Any]) -> str | None:
        """The target a mode audits when none is given (the Gemma4 pair for ``gemma4_assistant``)."""
        target = MODE_DEFAULT_MODELS.get(options.get("mode", ""), (None, None))[0]
        return str(cls.install_dir() / target) if target else None

    @classmethod
    def source_files(cls) -> list[str]:
        return ["generation/utils.py", "generation/candidate_generator.py"]

    @classmethod
    def make(cls, **options: Any):
        return decoder(**options)


def decoder(target_model: str = "shipped:target", draft_model: str = "shipped:draft", num_draft_tokens: int = 4,
            vocab_size: int | None = None, eos_token_id: int | None = None, mode: str = "assisted",
            max_matching_ngram_size: int = 2, assistant_model: str = "", num_workers: int = 0, control_patch: str = "",
            vocab_order_seed: int = 0):
    """Plugin factory of the ``transformers`` engine (``--engine transformers --engine-arg mode=...``).

    Parameters
    ----------
    target_model, draft_model : str
        ``shipped:target`` / ``shipped:draft`` or checkpoint folders; ``draft_model`` is the assistant of
        ``mode=assisted`` (and of the other modes when ``assistant_model`` is empty and it is a folder).
    num_draft_tokens : int
        k: ``num_assistant_tokens`` or ``prompt_lookup_num_tokens``.
    vocab_size, eos_token_id : optional
        Offered by the harness; the target's own values are used.
    mode, max_matching_ngram_size, assistant_model, num_workers, control_patch, vocab_order_seed
        The engine options (:class:`TransformersEngine`); ``control_patch`` is the control of a finding (off by default).

    Raises
    ------
    EngineNotInstalledError
        (exit 2) a mode whose default local checkpoints are not built (``bash ci/engines/transformers.sh``).
    InvalidArgumentError
        (exit 2) a bad option value.
    """
    from verifier.engines.hf_assisted import HFAssistedDecoder

    opts = TransformersEngine.resolve_options({"mode": mode, "max_matching_ngram_size": max_matching_ngram_size,
                                               "assistant_model": assistant_model, "num_workers": num_workers,
                                               "control_patch": control_patch, "vocab_order_seed": vocab_order_seed})
    draft = assistant_checkpoint(mode, draft_model, assistant_model)
    if mode == "gemma4_assistant" and "gemma4" not in _model_type(target_model):
        raise invalid_argument("--target", target_model, "a Gemma4 (or Gemma3n) checkpoint with mode=gemma4_assistant "
                               "(transformers requires it: the assistant drafts from the target's shared KV states); "
                               f"default: {TransformersEngine.install_dir() / MODE_DEFAULT_MODELS[mode][0]}")
    dec = HFAssistedDecoder(target_model, draft, num_draft_tokens, num_workers=opts["num_workers"] or None, mode=mode,
                            max_matching_ngram_size=opts["max_matching_ngram_size"], control_patch=control_patch or None,
                            vocab_order_seed=opts["vocab_order_seed"])
    dec.settings["engine"] = {"name": "transformers", "version": _VERSION, "mode": mode,
                              "assistant": None if mode == "prompt_lookup" else str(draft)}
    return dec


def assistant_checkpoint(mode: str, draft_model: Any = "shipped:draft", assistant_model: str = "") -> Any:
    """The assistant a mode runs: ``assistant_model``, else ``draft_model`` when it is a folder, else the local one
    (:data:`MODE_DEFAULT_MODELS`) -- for modes with their own assistant; ``draft_model`` for the others."""
    if mode not in MODE_DEFAULT_MODELS:
        return draft_model
    draft = assistant_model or (draft_model if Path(str(draft_model)).is_dir() else "")
    return draft or str(TransformersEngine.local_models() / MODE_DEFAULT_MODELS[mode][1])


def _model_type(spec: str) -> str:
    import json

    from verifier.engines.decoder import checkpoint_dir

    try:
        return str(json.loads((checkpoint_dir(spec, "--target") / "config.json").read_text()).get("model_type", ""))
    except (OSError, ValueError):
        return ""
