"""One exception hierarchy for the whole harness, rooted at :class:`VerifierError`.

Every error a user can cause names the argument, the value it got (``name=value!r``) and what
was allowed.  ``assert`` is used only for internal invariants, never for user input.

The CLI maps each class to an exit code (``exit_code``), so a CI gate can tell a usage error
(2) from a decoder that crashed or returned invalid output (3).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EXIT_OK",
    "EXIT_BIAS",
    "EXIT_USAGE",
    "EXIT_DECODER",
    "EXIT_UNDERPOWERED",
    "VerifierError",
    "InvalidArgumentError",
    "SamplingRefusedError",
    "ConfigError",
    "ModelLoadError",
    "DecoderError",
    "DecoderOutputError",
    "ReportWriteError",
    "StoredSampleError",
    "invalid_argument",
    "printable",
    "refuse_sampling",
]

EXIT_OK = 0  # every expectation met: no bias where `pass`, every mutant detected, every cell powered
EXIT_BIAS = 1  # bias detected where `pass` was expected, or a mutant went undetected
EXIT_USAGE = 2  # usage or configuration error
EXIT_DECODER = 3  # the decoder under test crashed or returned invalid output
EXIT_UNDERPOWERED = 4  # some cell's minimum detectable effect is above the suite's target


class VerifierError(Exception):
    """Root of every error raised by spec-verifier.  Catch this to catch them all.

    String arguments are made printable: a lone surrogate (``"\\udcff"``, e.g. from a plugin's
    exception text or a file name decoded with ``surrogateescape``) becomes its backslash escape,
    so the message can always be printed and written to a UTF-8 report.
    """

    exit_code: int = EXIT_USAGE

    def __init__(self, *args: Any) -> None:
        super().__init__(*(printable(a) if isinstance(a, str) else a for a in args))


def printable(text: str) -> str:
    """``text`` with every lone surrogate replaced by its backslash escape (valid UTF-8 throughout).

    >>> printable("bad \\udcff byte")
    'bad \\\\udcff byte'
    """
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class InvalidArgumentError(VerifierError, ValueError):
    """A public function got an argument outside its domain.

    The message names the argument, its value and what is allowed; fix the call.
    """


class SamplingRefusedError(InvalidArgumentError):
    """A decoder (an outside engine) cannot express a sampling setting (or a prompt: an engine that takes
    text only and tokenizes it to other ids) and refuses it rather than silently sampling another law.  A usage error (exit 2) wherever it is raised, also from inside
    ``generate`` during a suite run (the runner lets it through instead of calling it a crash).
    """


class ConfigError(VerifierError):
    """A suite file (TOML) is malformed, has an unknown key or a value of the wrong type.

    The message names the file, the key path and the allowed keys or values; edit the suite.
    """


class ModelLoadError(VerifierError):
    """A model checkpoint is missing or malformed, or target and draft do not share a vocabulary.

    Point the suite or the ``--target``/``--draft`` options at a Hugging Face checkpoint folder
    holding ``config.json`` and ``model.safetensors``.
    """


class DecoderError(VerifierError):
    """The decoder under test raised.  Samples produced before the failure are kept on disk."""

    exit_code = EXIT_DECODER


class DecoderOutputError(DecoderError):
    """The decoder returned invalid output: wrong shape or dtype, token ids out of range,
    tokens after EOS, or values derived from NaN.  The message shows the first bad row."""


class ResourceError(VerifierError):
    """The machine ran out of memory at the configured sizes (an allocation failed inside a
    ``generate`` call or a statistics batch): no verdict about the decoder.  The message names the
    size to lower (``chunk_size`` / ``--chunk-size``: rows per ``generate`` call) and its value."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure (``MemoryError``, torch's ``OutOfMemoryError`` or its
    CPU allocator's "not enough memory"), as opposed to a bug in the code that raised it."""
    if isinstance(exc, MemoryError):
        return True
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower() if isinstance(exc, RuntimeError) else ""
    return "out of memory" in text or "not enough memory" in text or "failed to allocate" in text


class StoredSampleError(VerifierError):
    """A stored sample shard (``RUN_DIR/samples/<set>/chunk-*.npz``) holds values no decoder run could
    have written there -- an id outside the vocabulary, padding before EOS, a row of the wrong length:
    the file was edited or corrupted after the run.  A storage error (exit 2) naming the chunk file,
    never a verdict: delete that file and sample it again with ``specverify run --resume RUN_DIR`` (an audit's run
    folder: ``specverify audit --resume RUN_DIR``)."""


class ReportWriteError(VerifierError):
    """The report directory cannot be written (read-only, disk full).  Samples already on disk
    are kept; rerun ``specverify report RUN_DIR`` once the directory is writable."""


def invalid_argument(name: str, value: Any, allowed: str, *, where: str | None = None) -> InvalidArgumentError:
    """Build an :class:`InvalidArgumentError` with the house message format.

    >>> str(invalid_argument("num_draft_tokens", 0, "an integer >= 1"))
    'num_draft_tokens=0 is invalid; allowed: an integer >= 1'
    >>> str(invalid_argument("--target", None, "a model"))  # a flag that was not given
    '--target is missing; allowed: a model'
    """
    prefix = f"{where}: " if where else ""
    if value is None and name.startswith("--"):  # a command-line flag not given: never "--target=None"
        return InvalidArgumentError(f"{prefix}{name} is missing; allowed: {allowed}")
    return InvalidArgumentError(f"{prefix}{name}={value!r} is invalid; allowed: {allowed}")


def refuse_sampling(name: str, value: Any, allowed: str) -> SamplingRefusedError:
    """Build a :class:`SamplingRefusedError` (exit 2) in the house message format.

    >>> str(refuse_sampling("top-p", 0.9, "not set with temperature 0.7"))
    'top-p=0.9 is invalid; allowed: not set with temperature 0.7'
    """
    return SamplingRefusedError(f"{name}={value!r} is invalid; allowed: {allowed}")
