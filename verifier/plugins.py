"""Load third-party decoders and verification kernels by ``module:factory`` and guard their output.

A *plugin spec* is ``"package.module:factory"`` (imported with :func:`importlib.import_module`)
or ``"path/to/file.py:factory"`` (a file anywhere on disk, imported by path).  ``factory`` may be
dotted (``"mod:Class.from_config"``).  The attribute is

* for a decoder: a callable returning an object with a ``generate`` method (called with the
  plugin options), or already such an object (then no options may be given);
* for a kernel: the kernel function itself (four positional parameters ``target_probs,
  draft_probs, draft_token_ids, generator``), or a factory returning one.

What goes wrong is reported by exit code, as the CLI contract says:

* the spec is malformed, the module or attribute does not exist, or the object does not implement
  the protocol -> :class:`PluginLoadError` (a :class:`~verifier.errors.ConfigError`, exit 2);
* the plugin raises (while being imported, built, or called) -> :class:`~verifier.errors.DecoderError`
  (exit 3) naming the plugin and the exception -- any ``BaseException``, ``SystemExit`` included
  (a plugin calling ``sys.exit(0)`` must not end the run as a success); only ``KeyboardInterrupt``
  passes through, so Ctrl-C still stops the job;
* the plugin returns the wrong shape or dtype, out-of-range ids, tokens after EOS -> 
  :class:`~verifier.errors.DecoderOutputError` (exit 3) showing the first bad row
  (:func:`verifier.validation.check_emitted_tokens`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from verifier._import_file import import_file
from verifier.errors import (ConfigError, DecoderError, DecoderOutputError, ResourceError, SamplingRefusedError,
                             VerifierError, is_out_of_memory)
from verifier.protocols import PADDING_TOKEN_ID, DecoderStats
from verifier.sampling import SamplingConfig
from verifier.validation import check_emitted_tokens, plugin_attribute

if TYPE_CHECKING:
    import torch

__all__ = [
    "PluginLoadError",
    "PluginDecoder",
    "PluginKernel",
    "load_plugin",
    "load_decoder",
    "load_kernel",
    "check_kernel_output",
    "make_speculative_with_kernel",
    "resolve_plugin_spec",
    "plugin_source",
    "file_sha256",
    "plugin_name",
]

KERNEL_ARITY = 4  # (target_probs, draft_probs, draft_token_ids, generator)
KERNEL_PARAMETER_NAMES = frozenset({"target_probs", "draft_probs", "draft_token_ids", "generator"})
# factory arguments the harness fills by name when it knows them (verifier.runner.plan.build_decoder)
OFFERED_ARGUMENTS = ("target", "draft", "target_model", "draft_model", "num_draft_tokens", "vocab_size", "eos_token_id")


class PluginLoadError(ConfigError):
    """A ``module:factory`` plugin spec cannot be resolved to a decoder or kernel (exit code 2).

    The message says which part failed (spec syntax, module import, attribute lookup, protocol) and
    what was expected; fix the spec or the plugin's module.
    """


def _split_spec(spec: str) -> tuple[str, str]:
    if not isinstance(spec, str) or spec.count(":") < 1:
        raise PluginLoadError(f"plugin spec={spec!r} is invalid; allowed: 'package.module:factory' or 'path/to/file.py:factory'")
    module_part, attr = spec.rsplit(":", 1)
    if not module_part or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise PluginLoadError(f"plugin spec={spec!r} is invalid; allowed: 'package.module:factory' with a dotted Python name after ':'")
    return module_part, attr


def _import_module(module_part: str, spec: str):
    is_path = _is_path(module_part)
    if is_path:
        path = _resolved_file(module_part, spec)
        if path.suffix != ".py":
            raise PluginLoadError(f"plugin spec={spec!r}: {str(path)!r} is not a Python source file; "
                                  "allowed: a path ending in .py, or an importable package.module")
        if not path.is_file():
            raise PluginLoadError(f"plugin spec={spec!r}: file {str(path)!r} does not exist; allowed: an existing .py file")
        # A stable, unique module name per file so two plugins called `plugin.py` do not collide.
        name = f"_specverify_plugin_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
        if name in sys.modules:
            return sys.modules[name]
        folder = str(path.parent)
        sys.path.insert(0, folder)  # as `python plugin.py` does: its sibling modules import (`from helper import f`)
        try:
            module = import_file(name, path)  # (a failed import leaves no sys.modules entry)
        except KeyboardInterrupt:
            raise
        except ModuleNotFoundError as exc:  # a dependency, not a crash: one clear load error (exit 2)
            raise _missing_module(spec, exc, folder) from None
        except BaseException as exc:  # the plugin's own code failed (SystemExit included)
            raise DecoderError(f"plugin {spec!r} raised while being imported: {type(exc).__name__}: {exc}") from exc
        finally:
            if folder in sys.path:  # (unless the plugin took it off itself)
                sys.path.remove(folder)
            if folder not in sys.path:  # last, so a sibling imported later (inside generate) is found but shadows nothing
                sys.path.append(folder)
        return module
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as exc:
        if exc.name and (module_part == exc.name or module_part.startswith(exc.name + ".")):
            raise PluginLoadError(
                f"plugin spec={spec!r}: module {module_part!r} not found (is it installed or on PYTHONPATH?); "
                "allowed: an importable module or a path to a .py file"
            ) from None
        raise _missing_module(spec, exc, None) from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included
        raise DecoderError(f"plugin {spec!r} raised while being imported: {type(exc).__name__}: {exc}") from exc


def _missing_module(spec: str, exc: ModuleNotFoundError, folder: str | None) -> PluginLoadError:
    """A module the plugin imports is not found: a load error naming it and where it was looked for."""
    where = f"the plugin's folder {folder!r}, " if folder else ""
    return PluginLoadError(
        f"plugin spec={spec!r} imports module {exc.name!r}, which is not found ({where}PYTHONPATH and the installed "
        f"packages were searched); allowed: a module installed in this environment, beside the plugin file, or on "
        f"PYTHONPATH (a suite: python_path = [...])")


def _resolved_file(module_part: str, spec: str) -> Path:
    """The absolute path of a plugin file; :class:`PluginLoadError` for a symlink loop or a path
    that cannot be resolved (``Path.resolve`` raises RuntimeError / OSError then)."""
    try:
        path = Path(module_part).expanduser().resolve()
        path.is_file()  # ELOOP on the last component shows here
        return path
    except (RuntimeError, OSError) as exc:
        raise PluginLoadError(f"plugin spec={spec!r}: path {module_part!r} cannot be resolved ({exc}); "
                              "allowed: an existing .py file (no symbolic link loop)") from None


def _is_path(module_part: str) -> bool:
    return module_part.endswith(".py") or "/" in module_part or "\\" in module_part


def resolve_plugin_spec(spec: str, base_dir: str | Path) -> str:
    """``spec`` with a relative ``file.py`` part made absolute against ``base_dir``.

    A suite's ``decoder = "plug.py:make"`` means the ``plug.py`` beside the suite file, never one
    in the working directory (which would run whatever file the cwd happens to hold).

    >>> resolve_plugin_spec("plug.py:make", "/suites")
    '/suites/plug.py:make'
    >>> resolve_plugin_spec("pkg.mod:make", "/suites")
    'pkg.mod:make'
    """
    if not isinstance(spec, str) or ":" not in spec:
        return spec
    module_part, attr = spec.rsplit(":", 1)
    if not _is_path(module_part):
        return spec
    path = Path(module_part).expanduser()
    if not path.is_absolute():
        path = Path(base_dir) / path
    return f"{path}:{attr}"


def plugin_source(spec: str) -> Path | None:
    """The Python file a plugin spec runs: the ``file.py`` itself, or the module's origin.

    Returns None when it cannot be found without running plugin code that fails (the build then
    reports that failure).  Call after the suite's ``python_path`` is on ``sys.path``.
    """
    try:
        module_part, _ = _split_spec(spec)
    except PluginLoadError:
        return None
    if _is_path(module_part):
        try:
            path = _resolved_file(module_part, spec)
            return path if path.is_file() else None
        except PluginLoadError:  # the build reports it
            return None
    try:
        found = importlib.util.find_spec(module_part)
    except KeyboardInterrupt:
        raise
    except BaseException:  # a parent package that fails to import: the build reports it
        return None
    origin = getattr(found, "origin", None)
    return Path(origin) if origin and Path(origin).is_file() else None


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _resolve(spec: str) -> Any:
    module_part, attr = _split_spec(spec)
    obj: Any = _import_module(module_part, spec)
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(obj) if not n.startswith("_"))[:12]
            raise PluginLoadError(f"plugin spec={spec!r}: {part!r} not found in {module_part!r}; available: {public}")
        obj = getattr(obj, part)
    return obj


def plugin_name(spec: str) -> str | None:
    """The name a decoder plugin gives itself, found without building it (building may load models):
    the ``name`` attribute of the class or decoder object the spec names; for a factory function, the
    class attribute ``name`` of the class it is annotated to return, else of the one decoder class
    (a class with ``generate``) its module defines; else a class's own name.  None when none is
    known or the plugin does not import (the load itself then reports why).  Used by
    ``specverify audit`` to name the decoder in its report."""
    try:
        obj = _resolve(spec)
    except Exception:  # noqa: BLE001 - the runner loads it again and reports the error properly
        return None
    if inspect.isfunction(obj):
        returned = inspect.signature(obj).return_annotation
        returned = None if returned is inspect.Signature.empty else returned
        module = sys.modules.get(getattr(obj, "__module__", "") or "")
        if isinstance(returned, str) and module is not None:
            returned = getattr(module, returned, None)
        if not inspect.isclass(returned) and module is not None:
            classes = [c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == module.__name__
                       and callable(getattr(c, "generate", None)) and isinstance(getattr(c, "name", None), str)]
            returned = classes[0] if len(classes) == 1 else None
        obj = returned if inspect.isclass(returned) else None
    name = getattr(obj, "name", None) if obj is not None else None
    if isinstance(name, str) and name.strip():
        return name.strip().replace("/", "_")
    return obj.__name__ if inspect.isclass(obj) else None


def _is_kernel_function(obj: Any) -> bool:
    if not callable(obj) or inspect.isclass(obj):
        return False
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature: assume a factory
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    return len(required) == KERNEL_ARITY or (len(required) < KERNEL_ARITY <= len(positional))


def options_shown(options: dict[str, Any]) -> str:
    """The user's options as written (models offered by the harness are not repeated)."""
    return repr({k: v for k, v in options.items() if isinstance(v, (str, int, float, bool, type(None), list, tuple, dict))})


def _build(spec: str, factory: Callable[..., Any], options: dict[str, Any], context: dict[str, Callable[[], Any]] | None = None) -> Any:
    if context:
        try:
            params = inspect.signature(factory).parameters
        except (TypeError, ValueError):
            params = {}
        offered = {k: make() for k, make in context.items() if k in params and k not in options}
        options = {**offered, **options}
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as exc:
        params = inspect.signature(factory).parameters
        offered = sorted(context) if context else list(OFFERED_ARGUMENTS)
        if "unexpected keyword" in str(exc):
            names = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            hint = f" -- allowed options: {names}"
        elif KERNEL_PARAMETER_NAMES & set(params) and _is_kernel_function(factory):
            hint = " -- it looks like a VerificationKernel (four positional arguments), not a Decoder factory"
        elif "missing" in str(exc):
            missing = [n for n, p in params.items() if p.default is p.empty and n not in options
                       and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            hint = (f" -- the harness passes a factory argument by its name, and offers only {offered} (each when "
                    f"known: a model from `specverify audit --target MODEL` or a suite's [models]); give {missing} "
                    "another way: --option NAME=VALUE, a suite's options = {...}, or a default value")
            if "k" in missing:
                hint += "; the number of draft tokens is offered as `num_draft_tokens`, not `k`"
        else:
            hint = ""
        raise PluginLoadError(f"plugin {spec!r} cannot be built from options {sorted(options)}: {exc}{hint}") from None
    except ValueError:  # no introspectable signature (some builtins): just call it
        pass
    try:
        return factory(**options)
    except TypeError as exc:  # a factory forwarding **options to a constructor that does not take them
        raise PluginLoadError(f"plugin {spec!r}: factory rejected options {options_shown(options)}: {exc}") from None
    except KeyboardInterrupt:
        raise
    except VerifierError:  # the factory's own usage error (bad option value, engine not installed): keep its exit code
        raise
    except BaseException as exc:  # SystemExit included
        raise DecoderError(f"plugin {spec!r} raised while being built: {type(exc).__name__}: {exc}") from exc


def load_plugin(spec: str, kind: str = "decoder", context: dict[str, Callable[[], Any]] | None = None, /, **options: Any) -> Any:
    """Import a plugin by ``module:factory`` and return the (unwrapped) decoder or kernel.

    Parameters
    ----------
    spec : str
        ``"package.module:factory"`` or ``"path/to/file.py:factory"`` (``factory`` may be dotted).
    kind : {"decoder", "kernel"}, default "decoder"
        Which protocol the result must implement: :class:`verifier.protocols.Decoder` (a
        ``generate`` method) or :class:`verifier.protocols.VerificationKernel` (a callable of four
        positional arguments).
    context : dict of str to zero-argument callable, optional
        Values offered to the factory by parameter name, built only if the factory's signature names
        them and ``options`` does not set them -- the same convention as the suite runner:
        ``target``, ``draft`` (decoder-ready models), ``num_draft_tokens``, ``vocab_size``,
        ``eos_token_id``.
    **options
        Keyword arguments passed to the factory (e.g. ``num_draft_tokens=4``).

    Returns
    -------
    object
        The decoder or kernel the factory returned.  Use :func:`load_decoder` /
        :func:`load_kernel` to get it wrapped so every output is validated.

    Raises
    ------
    PluginLoadError
        (exit 2) malformed spec, module or attribute not found, options not accepted, or the
        object does not implement the protocol.
    DecoderError
        (exit 3) the plugin raised while being imported or built.

    Examples
    --------
    >>> kernel = load_plugin("verifier.engines.hf_kernel:hf_speculative_kernel", "kernel")
    >>> callable(kernel)
    True
    """
    if kind not in ("decoder", "kernel"):
        raise PluginLoadError(f"plugin kind={kind!r} is invalid; allowed: 'decoder' or 'kernel'")
    target = _resolve(spec)
    if kind == "decoder":
        if callable(getattr(target, "generate", None)) and not inspect.isclass(target):
            if options:
                raise PluginLoadError(f"plugin {spec!r} is a decoder object, not a factory; it takes no options (got {sorted(options)})")
            obj = target
        elif callable(target):
            obj = _build(spec, target, options, context)
        else:
            raise PluginLoadError(f"plugin {spec!r} is a {type(target).__name__}; allowed: a decoder factory or an object with generate()")
        if not callable(getattr(obj, "generate", None)):
            raise PluginLoadError(
                f"plugin {spec!r} returned {type(obj).__name__}, which does not implement the Decoder protocol; "
                "allowed: an object with generate(prompt_ids, num_samples, max_new_tokens, sampling, seed)"
            )
        return obj
    if _is_kernel_function(target) and not options:
        return target
    if not callable(target):
        raise PluginLoadError(f"plugin {spec!r} is a {type(target).__name__}; allowed: a kernel function or a kernel factory")
    obj = _build(spec, target, options, context)
    if not _is_kernel_function(obj):
        raise PluginLoadError(
            f"plugin {spec!r} returned {type(obj).__name__}, which does not implement the VerificationKernel protocol; "
            "allowed: a callable (target_probs, draft_probs, draft_token_ids, generator) -> emitted"
        )
    return obj


class PluginDecoder:
    """A third-party decoder wrapped so that a crash or invalid output becomes exit code 3.

    Parameters
    ----------
    decoder : object with ``generate``
        The decoder under test (see :class:`verifier.protocols.Decoder`).
    vocab_size : int, optional
        Valid ids are ``0 .. vocab_size - 1``; defaults to ``decoder.vocab_size``.
    eos_token_id : int or None, optional
        Defaults to ``decoder.eos_token_id`` (or None).
    name : str, optional
        Shown in reports and error messages; defaults to ``decoder.name`` or the plugin spec.

    Raises
    ------
    PluginLoadError
        If no vocabulary size is known (neither given nor a ``vocab_size`` attribute).
    """

    def __init__(self, decoder: Any, *, vocab_size: int | None = None, eos_token_id: int | None = None, name: str | None = None) -> None:
        self.inner = decoder
        self.name = name or str(plugin_attribute(decoder, "name", type(decoder).__name__, decoder_name=type(decoder).__name__))
        vs = vocab_size if vocab_size is not None else plugin_attribute(decoder, "vocab_size", None, decoder_name=self.name)
        if not isinstance(vs, int) or isinstance(vs, bool) or vs < 1:
            raise PluginLoadError(
                f"decoder {self.name!r} has vocab_size={vs!r}; allowed: an integer >= 1 (set a `vocab_size` attribute or pass vocab_size=)"
            )
        self.vocab_size = vs
        self.eos_token_id = eos_token_id if eos_token_id is not None else plugin_attribute(decoder, "eos_token_id", None, decoder_name=self.name)

    @property
    def last_stats(self) -> DecoderStats | None:
        """The inner decoder's ``last_stats`` if it has one."""
        return plugin_attribute(self.inner, "last_stats", None, decoder_name=self.name)

    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: SamplingConfig, seed: int) -> np.ndarray:
        """Call the plugin's ``generate`` and validate the result (shape, dtype, ids, EOS padding).

        Raises
        ------
        DecoderError
            The plugin raised (exit 3).
        DecoderOutputError
            The plugin returned invalid output; the message shows the first bad row (exit 3).
        """
        from verifier._call_timeout import CallTimeout, call_deadline

        try:
            with call_deadline(f"{self.name}: generate(prompt_ids={list(prompt_ids)[:8]}, num_samples={num_samples}, "
                               f"max_new_tokens={max_new_tokens}, sampling={sampling.label()}, seed={seed})"):
                out = self.inner.generate(list(prompt_ids), num_samples, max_new_tokens, sampling, seed)
        except (KeyboardInterrupt, SamplingRefusedError):  # a refused setting is usage (exit 2) wherever raised
            raise
        except CallTimeout as exc:  # --call-timeout
            raise DecoderError(str(exc)) from None
        except BaseException as exc:  # SystemExit included
            if isinstance(exc, VerifierError) and type(self.inner).__module__.startswith("verifier."):
                raise  # the harness's own decoders (a URL audit's server) raise errors that name what went wrong
            if is_out_of_memory(exc):  # the machine, not the decoder: no exit 3
                raise ResourceError(
                    f"{self.name}: generate(num_samples={num_samples}, max_new_tokens={max_new_tokens}) ran out of "
                    f"memory ({type(exc).__name__}: {exc}); allowed: fewer rows per generate call "
                    f"(--chunk-size / chunk_size below {num_samples}) or a machine with more memory") from exc
            raise DecoderError(
                f"{self.name} raised in generate(prompt_ids={list(prompt_ids)[:8]}, num_samples={num_samples}, "
                f"max_new_tokens={max_new_tokens}, sampling={sampling.label()}, seed={seed}): {type(exc).__name__}: {exc}"
            ) from exc
        return check_emitted_tokens(
            out, num_samples=num_samples, max_new_tokens=max_new_tokens, vocab_size=self.vocab_size,
            eos_token_id=self.eos_token_id, decoder_name=self.name,
        )


def check_kernel_output(emitted: Any, *, batch: int, num_draft_tokens: int, vocab_size: int, kernel_name: str = "kernel") -> torch.Tensor:
    """Validate one :class:`~verifier.protocols.VerificationKernel` result.

    Parameters
    ----------
    emitted : torch.Tensor, shape (batch, num_draft_tokens + 1), int64
        Accepted drafts, then the recovered or bonus token, then ``PADDING_TOKEN_ID`` (-1).
    batch, num_draft_tokens, vocab_size : int
        What the kernel was called with.
    kernel_name : str
        Named in the error message.

    Returns
    -------
    torch.Tensor, shape (batch, num_draft_tokens + 1), int64, on CPU

    Raises
    ------
    DecoderOutputError
        Not an int64 tensor/array of that shape, an id outside ``[0, vocab_size)``, a row with no
        emitted token, or a token after padding.  The message shows the first bad row.
    """
    import torch  # here, not at import: plugin_name runs before an engine audit's presample, which waits for it

    arr = emitted
    if isinstance(arr, np.ndarray):
        arr = torch.from_numpy(arr)
    if not isinstance(arr, torch.Tensor):
        raise DecoderOutputError(f"{kernel_name} returned {type(emitted).__name__}; allowed: torch.Tensor of int64")
    if arr.dtype != torch.int64:
        raise DecoderOutputError(f"{kernel_name} returned dtype={arr.dtype}; allowed: torch.int64")
    want = (batch, num_draft_tokens + 1)
    if tuple(arr.shape) != want:
        raise DecoderOutputError(f"{kernel_name} returned shape={tuple(arr.shape)}; allowed: (batch, num_draft_tokens + 1)={want}")
    arr = arr.detach().cpu()
    pad = arr == PADDING_TOKEN_ID
    bad_id = ~pad & ((arr < 0) | (arr >= vocab_size))
    after_pad = ~pad & (torch.cumsum(pad.long(), dim=1) > 0)
    empty = pad[:, :1].expand_as(pad) & (torch.arange(arr.shape[1]) == 0)
    bad = bad_id | after_pad | empty
    if bool(bad.any()):
        row, col = (int(v) for v in torch.nonzero(bad)[0])
        if bad_id[row, col]:
            why = f"token id {int(arr[row, col])} at position {col} is outside 0..{vocab_size - 1}"
        elif empty[row, col]:
            why = "no emitted token (a round always emits at least the recovered or bonus token)"
        else:
            why = f"token {int(arr[row, col])} at position {col} comes after padding -1"
        raise DecoderOutputError(f"{kernel_name} returned invalid output in row {row}: {why}; row {row} = {arr[row].tolist()}")
    return arr


class PluginKernel:
    """A third-party verification kernel wrapped so that a crash or invalid output is exit code 3.

    Calling it has the :class:`~verifier.protocols.VerificationKernel` signature; the result is
    validated by :func:`check_kernel_output`.
    """

    def __init__(self, kernel: Callable[..., Any], *, name: str | None = None) -> None:
        self.inner = kernel
        self.name = name or getattr(kernel, "__name__", type(kernel).__name__)

    def __call__(self, target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_token_ids: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        try:
            out = self.inner(target_probs, draft_probs, draft_token_ids, generator)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit included
            raise DecoderError(
                f"kernel {self.name} raised on target_probs{tuple(target_probs.shape)}, draft_probs{tuple(draft_probs.shape)}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return check_kernel_output(
            out, batch=draft_token_ids.shape[0], num_draft_tokens=draft_token_ids.shape[1],
            vocab_size=target_probs.shape[-1], kernel_name=self.name,
        )


def load_decoder(spec: str, /, *, vocab_size: int | None = None, eos_token_id: int | None = None,
                 context: dict[str, Callable[[], Any]] | None = None, **options: Any) -> PluginDecoder:
    """Load a decoder plugin and wrap it in a :class:`PluginDecoder` (output validated, crashes -> exit 3).

    Parameters
    ----------
    spec : str
        ``"module:factory"`` or ``"file.py:factory"``; see :func:`load_plugin`.
    vocab_size, eos_token_id : optional
        Override the decoder's own ``vocab_size`` / ``eos_token_id`` attributes.
    context : dict, optional
        Values offered to the factory by parameter name (see :func:`load_plugin`).
    **options
        Passed to the factory.

    Raises
    ------
    PluginLoadError, DecoderError
        As :func:`load_plugin`.
    """
    dec = load_plugin(spec, "decoder", context, **options)
    name = plugin_attribute(dec, "name", None, decoder_name=spec)
    return PluginDecoder(dec, vocab_size=vocab_size, eos_token_id=eos_token_id, name=str(name) if name else spec)


def load_kernel(spec: str, /, **options: Any) -> PluginKernel:
    """Load a verification-kernel plugin and wrap it in a :class:`PluginKernel`.

    Raises
    ------
    PluginLoadError, DecoderError
        As :func:`load_plugin`.
    """
    kern = load_plugin(spec, "kernel", None, **options)
    return PluginKernel(kern, name=getattr(kern, "name", None) or spec)


def make_speculative_with_kernel(target: Any, draft: Any, num_draft_tokens: int, kernel: str, **kernel_options: Any):
    """Suite factory: the reference :class:`~verifier.decoders.speculative.SpeculativeDecoder` with a kernel plugin.

    Puts any third-party verification kernel inside the reference decoding loop, so a suite can
    test it end to end (cache rollback, bonus position, EOS) as well as at kernel level::

        [[decoders]]
        decoder = "verifier.plugins:make_speculative_with_kernel"
        options = { kernel = "my_kernels:verify" }

    Parameters
    ----------
    target, draft : causal LM
        Offered by the runner (and by ``specverify audit --target``).
    num_draft_tokens : int
    kernel : str
        Kernel plugin spec (``"module:function"`` or ``"module:factory"``).
    **kernel_options
        Passed to the kernel factory.
    """
    from verifier.decoders.speculative import SpeculativeDecoder

    guarded = load_kernel(kernel, **kernel_options)
    return SpeculativeDecoder(target, draft, num_draft_tokens, kernel=guarded, name=f"speculative[kernel={kernel}]")
