"""Converted model folders of decoder-kind engines (shared by the MLX-LM and OpenVINO GenAI adapters).

Install scripts convert the shipped checkpoints with the engine's own converter into
``<install_dir>/models/{target,draft}``; adapters accept only those (conversion takes an engine
venv and, for OpenVINO, minutes, so it happens once at install time).
"""

from __future__ import annotations

from pathlib import Path

from verifier.errors import invalid_argument

__all__ = ["converted_model"]


def converted_model(engine: type, spec: str, argument: str) -> Path:
    """The engine's converted copy of ``spec`` (``shipped:target`` or ``shipped:draft``).

    Raises
    ------
    InvalidArgumentError
        (exit 2) another model: the engine holds conversions of the shipped checkpoints only.
    EngineNotInstalledError
        (exit 2) the engine (or its converted models) is not installed.
    """
    from verifier.engines.decoder import checkpoint_dir  # numpy: only when a decoder is built

    checkpoint_dir(spec, argument)  # a tabular model or a folder without config.json: its own message
    if spec not in ("shipped:target", "shipped:draft"):
        raise invalid_argument(argument, spec, f"shipped:target or shipped:draft (engine {engine.name!r} converts the "
                               f"shipped checkpoints at install time: `{engine.install_script()}`)")
    folder = engine.require_installed() / "models" / spec.split(":", 1)[1]
    if not folder.is_dir():
        raise invalid_argument(argument, spec, f"a model converted at install time; {str(folder)!r} is missing "
                               f"(reinstall: `{engine.install_script()}`)")
    return folder
