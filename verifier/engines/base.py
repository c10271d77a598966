"""The adapter protocol every outside engine implements, and the install location they share.

An *engine adapter* drives one outside speculative-decoding engine (vLLM, SGLang, LMDeploy, ...)
through the engine's own, unmodified code.  Two kinds exist:

``kind = "kernel"``
    The engine's verification step, exposed as a :class:`verifier.protocols.VerificationKernel`
    (``target_probs [B, k+1, V], draft_probs [B, k, V], draft_token_ids [B, k], generator ->
    emitted [B, k+1]``, -1 padded) so :func:`verifier.audit.kernel_audit.audit_kernel` drives it.
``kind = "decoder"``
    The engine's whole speculative generation loop as a :class:`verifier.protocols.Decoder`
    (:class:`verifier.engines.decoder.EngineDecoder`): the engine runs in its own venv
    (``install_dir() / "venv"``) behind a worker process (:mod:`verifier.engines.bridge`), and the
    adapter module has a plugin factory ``decoder(**options)``, so ``--engine NAME --engine-arg k=v``
    is ``--decoder verifier.engines.<module>:decoder --option k=v`` with the engine described.

An adapter module imports nothing heavy at module level: the engine is located and imported only
when :meth:`Engine.make` is called, so ``specverify engines`` lists every engine, installed or not.

Engines are installed by ``ci/engines/<name>.sh`` into ``engines_dir() / <folder>``, where the
folder is named after the engine's package and version (e.g. ``lmdeploy-0.18.0``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

from verifier.errors import ConfigError, invalid_argument

__all__ = [
    "ENGINES_DIR_ENV",
    "EngineNotInstalledError",
    "EngineOption",
    "Engine",
    "engines_dir",
    "engine_built_path",
    "local_checkpoint",
    "repo_root",
]

ENGINES_DIR_ENV = "SPECVERIFY_ENGINES_DIR"  # where ci/engines/*.sh install; default <repo>/.engines (gitignored)
INSTALL_RECORD = "INSTALLED.json"  # written by each install script: package, version, wheel sha256, seconds


class EngineNotInstalledError(ConfigError):
    """The engine an adapter drives is not installed (exit code 2).

    The message names the install command (``bash ci/engines/<name>.sh``) and the folder the
    adapter looked in; run the command, or point ``SPECVERIFY_ENGINES_DIR`` at an existing install.
    """


def repo_root() -> Path:
    """The checkout that holds ``verifier/`` (and ``ci/engines/``)."""
    return Path(__file__).resolve().parents[2]


def engines_dir() -> Path:
    """Folder the install scripts write to: ``$SPECVERIFY_ENGINES_DIR`` or ``<repo>/.engines``."""
    env = os.environ.get(ENGINES_DIR_ENV)
    return Path(env).expanduser().resolve() if env else repo_root() / ".engines"


def engine_built_path(path: str | os.PathLike) -> Path | None:
    """``path`` re-rooted under this machine's :func:`engines_dir` when it lies under another checkout's ``.engines/``.

    Engines build some checkpoints at install time (``bash ci/engines/transformers.sh``: the Gemma4 pair and the
    different-tokenizer assistant) and an audit records the absolute path it ran with, so a committed report names a
    folder of the machine that ran it; ``specverify report --recompute`` on a fresh clone finds the same checkpoint
    here (the install script rebuilds it from fixed seeds).  None when the path exists, has no ``.engines``
    component, or the re-rooted folder does not exist.
    """
    path = Path(path).expanduser()
    parts = path.parts
    if path.exists() or ".engines" not in parts:
        return None
    tail = parts[len(parts) - parts[::-1].index(".engines"):]
    moved = engines_dir().joinpath(*tail)
    return moved if tail and moved.exists() else None


def local_checkpoint(spec: Any) -> str:
    """``spec`` as a loadable string: its :func:`engine_built_path` where it names a moved engine checkpoint, else itself."""
    moved = engine_built_path(str(spec))  # "shipped:target", "" and hub ids have no .engines part: themselves
    return str(moved) if moved is not None else str(spec)


@dataclass(frozen=True)
class EngineOption:
    """One ``--engine-arg NAME=VALUE`` an adapter accepts.

    Attributes
    ----------
    name : str
    default : object
    allowed : tuple
        The allowed values (empty: any value of ``type(default)``).
    help : str
        One line: what the option changes in the engine call.
    """

    name: str
    default: Any
    allowed: tuple = ()
    help: str = ""

    def check(self, value: Any) -> Any:
        """Return ``value`` if allowed, else raise :class:`~verifier.errors.InvalidArgumentError` naming it."""
        if self.allowed:
            if value not in self.allowed or type(value) is not type(self.default):
                raise invalid_argument(f"--engine-arg {self.name}", value, " or ".join(repr(a) for a in self.allowed))
        elif type(value) is not type(self.default):
            kind = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}
            raise invalid_argument(f"--engine-arg {self.name}", value,
                                   kind.get(type(self.default).__name__, f"a {type(self.default).__name__}"))
        return value


class Engine:
    """Base class of an engine adapter; subclasses are registered with :func:`register_engine`.

    Class attributes
    ----------------
    name : str
        Registry name (``"lmdeploy-sampler"``).
    kind : {"kernel", "decoder"}
    package, version : str
        The PyPI distribution and the version the adapter was written against and is installed at.
    entry_point : str
        The engine's own function or class that is driven (``path.py::Class.method``).
    options : tuple of EngineOption
    batching : str
        How a decoder-kind engine schedules the rows of one ``generate`` call (issue 29, kind 1), e.g. "row by
        row: ..."; empty where not stated.  An engine decoder with ``rows_per_step == 1`` refuses
        ``batch_composition`` levels above 1 row (:func:`verifier.runner.batch.check_batch_level`).
    worker_decoder : bool
        Its decoders are :class:`~verifier.engines.decoder.EngineDecoder` workers (a handler in the engine's own venv):
        ``specverify bench engine-alone`` replays an audit's generate calls on that handler alone.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "kernel"
    package: ClassVar[str] = ""
    version: ClassVar[str] = ""
    entry_point: ClassVar[str] = ""
    options: ClassVar[tuple[EngineOption, ...]] = ()
    batching: ClassVar[str] = ""
    worker_decoder: ClassVar[bool] = False

    # -- install location -------------------------------------------------------------------
    @classmethod
    def install_script(cls) -> str:
        """The command that installs this engine (run from the repository root)."""
        return f"bash ci/engines/{cls.name}.sh"

    @classmethod
    def install_dir(cls) -> Path:
        """``engines_dir() / <package>-<version>``."""
        return engines_dir() / f"{cls.package}-{cls.version}"

    @classmethod
    def python(cls) -> Path:
        """The interpreter of the engine's own venv (``install_dir() / "venv/bin/python"``; decoder-kind engines)."""
        return cls.install_dir() / "venv" / "bin" / "python"

    @classmethod
    def decoder_spec(cls) -> str:
        """Plugin spec of a decoder-kind engine's factory: ``verifier.engines.<module>:decoder``."""
        return f"{cls.__module__}:decoder"

    @classmethod
    def install_record(cls) -> dict[str, Any] | None:
        """The install script's ``INSTALLED.json`` (package, version, sha256, seconds), or None."""
        path = cls.install_dir() / INSTALL_RECORD
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    @classmethod
    def is_installed(cls) -> bool:
        """True when the install script completed (its record names the expected version)."""
        record = cls.install_record()
        return bool(record) and record.get("version") == cls.version

    @classmethod
    def require_installed(cls) -> Path:
        """The install folder, or :class:`EngineNotInstalledError` naming the install command."""
        if not cls.is_installed():
            raise EngineNotInstalledError(
                f"engine {cls.name!r} ({cls.package}=={cls.version}) is not installed in {str(cls.install_dir())!r}; "
                f"install it with `{cls.install_script()}` (or set {ENGINES_DIR_ENV} to the folder that holds "
                f"{cls.install_dir().name}/)"
            )
        return cls.install_dir()

    # -- options ------------------------------------------------------------------------------
    @classmethod
    def resolve_options(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Defaults updated with ``given``; an unknown name or a value not allowed is a usage error (exit 2)."""
        known = {o.name: o for o in cls.options}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise invalid_argument("--engine-arg", unknown[0], f"one of {sorted(known)} for engine {cls.name!r}" if known
                                   else f"no options (engine {cls.name!r} takes none)")
        return {name: (known[name].check(given[name]) if name in given else opt.default) for name, opt in known.items()}

    # -- what subclasses implement --------------------------------------------------------------
    @classmethod
    def source_files(cls) -> list[str]:
        """The engine's files driven, relative to ``install_dir() / "src"`` (hashed into reports)."""
        return []

    @classmethod
    def check_sampling(cls, sampling: Any) -> None:
        """Refuse (:class:`~verifier.errors.InvalidArgumentError`, exit 2) a sampling setting the engine cannot
        express; called by ``specverify audit --engine`` before anything starts.  Default: accept all."""

    @classmethod
    def make(cls, **options: Any) -> Callable[..., Any]:
        """Build the kernel (``kind="kernel"``) or decoder; imports the engine.

        Raises
        ------
        EngineNotInstalledError
            (exit 2) the engine is not installed.
        InvalidArgumentError
            (exit 2) an unknown option or a value not allowed.
        """
        raise NotImplementedError

    @classmethod
    def draft_known(cls, options: dict[str, Any]) -> bool:
        """Whether the engine drafts with the harness's draft model under ``options`` (decoder kind).

        False (an engine that loads its own draft, another vocabulary, or none) makes ``--engine``
        declare ``--draft unknown``: the analyses that need the draft's probs are skipped, stated
        (:mod:`verifier.runner.draft`).  Default True.
        """
        return True

    @classmethod
    def default_target(cls, options: dict[str, Any]) -> str | None:
        """The target model a decoder-kind engine audits when ``--target`` is not given (None: ``shipped:target``)."""
        return None

    @classmethod
    def runtime(cls) -> str:
        """Where the engine's code runs: the harness's process, or a worker in the engine's own venv.

        Decoder engines and kernel engines that set ``uses_venv = True`` (e.g. ``vllm-sampler``) run in a worker.
        """
        if cls.kind != "decoder" and not getattr(cls, "uses_venv", False):
            return "in the harness's process (engine files loaded from the install folder)"
        state = "present" if cls.python().exists() else "MISSING"
        return f"worker process in its own venv: {cls.python()} ({state})"

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Name, kind, package, version, entry point, options and install state (for reports and `specverify engines`)."""
        record = cls.install_record()
        return {
            "name": cls.name, "kind": cls.kind, "package": cls.package, "version": cls.version, "entry_point": cls.entry_point,
            "installed": cls.is_installed(), "install_dir": str(cls.install_dir()), "install": cls.install_script(),
            "install_seconds": (record or {}).get("seconds"), "runtime": cls.runtime(),
            "options": {o.name: {"default": o.default, "allowed": list(o.allowed), "help": o.help} for o in cls.options},
            **({"batching": cls.batching} if cls.batching else {}),
        }
