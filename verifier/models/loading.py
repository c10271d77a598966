"""Load causal LMs and tokenizers (safetensors only) and locate the shipped checkpoints.

The same code path takes the shipped tiny models, any local Hugging Face checkpoint folder, or a
hub id where a hub is reachable, on any device and dtype (``device="cuda", dtype="bfloat16"``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from verifier.errors import ModelLoadError, invalid_argument
from verifier.models.shipped_paths import SHIPPED_NAMES, shipped_checkpoint

__all__ = ["load_model", "load_tokenizer", "shipped_checkpoint", "resolve_dtype", "SHIPPED_NAMES"]

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float64": torch.float64, "fp64": torch.float64, "double": torch.float64,
}
_EXPECTED = "a Hugging Face checkpoint folder with config.json and model.safetensors (or a reachable hub id)"


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """Map ``None``, a ``torch.dtype`` or a name such as ``"bfloat16"`` to a floating ``torch.dtype``.

    Raises
    ------
    InvalidArgumentError
        If ``dtype`` is neither ``None``, a floating ``torch.dtype`` nor one of the known names.
    """
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return dtype
    if isinstance(dtype, str) and dtype.lower().removeprefix("torch.") in _DTYPES:
        return _DTYPES[dtype.lower().removeprefix("torch.")]
    raise invalid_argument("dtype", dtype, f"None, a floating torch.dtype or one of {sorted(_DTYPES)}")


def _check_local(path: Path) -> None:
    if not path.is_dir():
        raise ModelLoadError(f"checkpoint path {str(path)!r} is not a folder; expected {_EXPECTED}")
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"checkpoint {str(path)!r} has no config.json; expected {_EXPECTED}")
    if not ((path / "model.safetensors").is_file() or (path / "model.safetensors.index.json").is_file()):
        found = sorted(p.name for p in path.iterdir())
        raise ModelLoadError(f"checkpoint {str(path)!r} has no model.safetensors (found {found}); expected {_EXPECTED} "
                             "-- weights are loaded from safetensors only")
    index = path / "model.safetensors.index.json"
    if index.is_file() and not (path / "model.safetensors").is_file():
        _check_index(path, index)


def _check_index(path: Path, index: Path) -> None:
    """Every weight file a sharded checkpoint's index names must be a ``.safetensors`` file inside
    the folder: an index pointing at ``pytorch_model.bin`` would be read with ``torch.load`` (pickle)."""
    import json

    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelLoadError(f"checkpoint {str(path)!r}: {index.name} is unreadable or has no weight_map ({exc}); "
                             f"expected {_EXPECTED}") from None
    root = path.resolve()
    for name in files:
        target = (path / str(name)).resolve()
        if not isinstance(name, str) or not name.endswith(".safetensors") or root not in target.parents:
            raise ModelLoadError(f"checkpoint {str(path)!r}: {index.name} maps weights to {name!r}; allowed: "
                                 ".safetensors files inside the checkpoint folder -- weights are loaded from "
                                 "safetensors only (no pickle-based .bin/.pt files)")
        if not target.is_file():
            raise ModelLoadError(f"checkpoint {str(path)!r}: {index.name} names {name!r}, which is missing; "
                                 f"expected {_EXPECTED}")


def load_model(path_or_id: str | Path, device: str | torch.device = "cpu",
               dtype: str | torch.dtype | None = None) -> torch.nn.Module:
    """Load a causal LM with ``AutoModelForCausalLM.from_pretrained(..., use_safetensors=True)``.

    Parameters
    ----------
    path_or_id : str or pathlib.Path
        A local checkpoint folder (``config.json`` + ``model.safetensors``), ``"shipped:target"`` /
        ``"shipped:draft"``, or a hub id (only where a hub is reachable).
    device : str or torch.device, default "cpu"
        Where the weights go (``"cuda"`` works unchanged when a GPU exists).
    dtype : None, torch.dtype or str, default None
        Weight dtype (``"bfloat16"``, ``torch.float32``, ...); ``None`` keeps the checkpoint's.

    Returns
    -------
    torch.nn.Module
        The model in eval mode on ``device``.

    Raises
    ------
    ModelLoadError
        If the folder is missing, has no ``config.json`` or ``model.safetensors``, or loading fails
        (malformed config or weights, unknown hub id); the message names the path and what was
        expected.
    InvalidArgumentError
        If ``dtype`` is not understood.
    """
    from transformers import AutoModelForCausalLM

    torch_dtype = resolve_dtype(dtype)
    spec = str(path_or_id)
    if spec.startswith("shipped:"):
        path_or_id = shipped_checkpoint(spec.split(":", 1)[1])
    path = Path(path_or_id).expanduser()
    local = path.exists() or isinstance(path_or_id, Path) or spec.startswith((".", "/", "~")) or spec.count("/") > 1
    if local:
        _check_local(path)
    kwargs = {"use_safetensors": True}
    if torch_dtype is not None:
        kwargs["dtype"] = torch_dtype
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars would bury the harness's own progress output
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path) if local else spec, **kwargs)
    except Exception as exc:  # transformers raises OSError/ValueError/KeyError/safetensors errors
        raise ModelLoadError(f"could not load a causal LM from {spec!r}: {type(exc).__name__}: {exc}; "
                             f"expected {_EXPECTED}") from exc
    try:
        model = model.to(device)
    except (RuntimeError, AssertionError) as exc:
        raise ModelLoadError(f"could not move {spec!r} to device={str(device)!r}: {exc}") from exc
    return model.eval()


def load_tokenizer(path_or_id: str | Path):
    """Load the tokenizer of a checkpoint with ``AutoTokenizer.from_pretrained``.

    Raises
    ------
    ModelLoadError
        If there is no usable tokenizer at ``path_or_id``.
    """
    from transformers import AutoTokenizer

    spec = str(path_or_id)
    if spec.startswith("shipped:"):
        path_or_id = shipped_checkpoint(spec.split(":", 1)[1])
    try:
        return AutoTokenizer.from_pretrained(str(path_or_id))
    except Exception as exc:
        raise ModelLoadError(f"could not load a tokenizer from {spec!r}: {type(exc).__name__}: {exc}; "
                             "expected tokenizer.json + tokenizer_config.json") from exc
