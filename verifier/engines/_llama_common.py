"""What the ``llama.cpp`` and ``llama-cpp-python`` adapters share: one install, one model conversion.

Both drive the llama.cpp vendored in the ``llama-cpp-python==0.3.36`` sdist (llama.cpp commit
0c1e570), installed by ``bash ci/engines/llama-cpp.sh`` into ``engines_dir()/llama-cpp-python-0.3.36/``:

========================  =====================================================================
``src/``                  the sdist, byte for byte (``vendor/llama.cpp/`` and ``llama_cpp/``)
``build/bin/``            the shared libllama/libggml, the original ``llama-speculative`` and ``llama-server``
                          (started by :mod:`verifier.server.launch`)
``bin/``                  ``llama-speculative-ids`` and its controls (``ci/engines/llama_cpp/variants.py``)
``models/{target,draft}.gguf``  the shipped checkpoints in f32, converted by the sdist's converter
``venv/``                 llama-cpp-python's Python dependencies + a ``.pth`` to ``src/``
========================  =====================================================================

Any other Hugging Face checkpoint folder is converted on first use with the same converter
(``ci/engines/llama_cpp/convert.py``) into ``models/converted/<hash>.gguf``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from verifier.engines.base import repo_root
from verifier.errors import DecoderError, invalid_argument

__all__ = ["PACKAGE", "VERSION", "INSTALL_COMMAND", "SOURCE_FILES", "gguf_path", "hf_vocab", "model_spec"]

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
INSTALL_COMMAND = "bash ci/engines/llama-cpp.sh"  # one script installs both adapters' engine
SOURCE_FILES = (  # relative to install_dir()/src: the speculative loop and the samplers it calls
    "vendor/llama.cpp/examples/speculative/speculative.cpp",
    "vendor/llama.cpp/common/sampling.cpp",
    "vendor/llama.cpp/src/llama-sampler.cpp",
)
CONVERT_TIMEOUT_S = 600


def model_spec(model: Any, argument: str) -> str:
    """A model spec string from a spec or a loaded Hugging Face model (``--decoder ...:decoder`` offers the
    suite's loaded models as ``target_model`` / ``draft_model``): its ``config._name_or_path``, the shipped
    folders mapped back to ``shipped:target|draft``.

    Raises
    ------
    InvalidArgumentError
        (exit 2) neither a string nor a model loaded from a local folder (e.g. a tabular model).
    """
    from verifier.models.shipped_paths import shipped_checkpoint

    if isinstance(model, str):
        return model
    path = getattr(getattr(model, "config", None), "_name_or_path", None) or getattr(model, "name_or_path", None)
    if not path or not Path(path).is_dir():
        raise invalid_argument(argument, type(model).__name__, "a model spec (shipped:target, a checkpoint folder) or a "
                               "Hugging Face model loaded from a local folder (outside engines convert checkpoints)")
    for role in ("target", "draft"):
        if Path(path).resolve() == shipped_checkpoint(role).resolve():
            return f"shipped:{role}"
    return str(Path(path).resolve())


def _checkpoint(spec: str, argument: str) -> Path | None:
    """The HF folder of a model spec, or None for the shipped models (converted at install time)."""
    from verifier.engines.decoder import checkpoint_dir

    if spec in ("shipped:target", "shipped:draft"):
        return None
    return checkpoint_dir(spec, argument)


def gguf_path(install_dir: Path, spec: str, argument: str) -> Path:
    """The f32 GGUF file of a model spec (``shipped:target|draft`` or a checkpoint folder).

    Raises
    ------
    InvalidArgumentError
        (exit 2) a tabular model or a folder that is no checkpoint.
    DecoderError
        (exit 3) the engine's converter failed on the checkpoint.
    """
    folder = _checkpoint(spec, argument)
    if folder is None:
        return install_dir / "models" / f"{spec.split(':', 1)[1]}.gguf"
    digest = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.suffix in (".json", ".safetensors", ".txt", ".model"):
            digest.update(f.name.encode() + b"\0" + f.read_bytes())
    out = install_dir / "models" / "converted" / f"{digest.hexdigest()[:16]}.gguf"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        proc = subprocess.run([sys.executable, str(repo_root() / "ci/engines/llama_cpp/convert.py"),
                               str(install_dir / "src/vendor/llama.cpp"), str(folder), str(tmp)],
                              capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if proc.returncode != 0 or not tmp.is_file():
            raise DecoderError(f"llama.cpp's convert_hf_to_gguf.py failed on {str(folder)!r} ({argument}): "
                               f"{proc.stderr.strip()[-2000:]}")
        os.replace(tmp, out)
    return out


def hf_vocab(spec: str) -> tuple[int, int | None]:
    """``(vocab_size, eos_token_id)`` from a checkpoint's config.json (shipped or a folder)."""
    from verifier.engines.decoder import checkpoint_dir

    config = json.loads((checkpoint_dir(spec, "target_model") / "config.json").read_text())
    eos = config.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    if not isinstance(config.get("vocab_size"), int):
        raise invalid_argument("target_model", spec, "a checkpoint whose config.json has an integer vocab_size")
    return int(config["vocab_size"]), eos
