"""The sampling plan of a suite: sample sets, their chunks and seeds, and decoder construction.

A *sample set* is one (decoder, model pair, prompt, sampling config, num_draft_tokens) unit; its
``samples`` rows are drawn in chunks of ``chunk_size``, chunk ``i`` with seed
:func:`verifier.runner.seeds.chunk_seed` ``(suite seed, set key, i)``.  The cells (one hypothesis
test each) are statistics of a sample set: ``gof@t``, ``joint@1..J``, ``surprisal@1..J``, ``pit`` (``accepted`` asks for the acceptance audit, no bias cell).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from verifier.errors import ConfigError, VerifierError
from verifier.runner.seeds import chunk_seed
from verifier.runner.store import set_id_for
from verifier.sampling import SamplingConfig
from verifier.suite.schema import DecoderSpec, Suite

__all__ = ["SampleSetPlan", "plan_sample_sets", "build_decoder", "decoder_identity"]


@dataclass(frozen=True)
class SampleSetPlan:
    """One sample set: what to sample, how many rows, in which chunks with which seeds."""

    decoder: DecoderSpec
    pair: str
    prompt: str
    prompt_ids: tuple[int, ...]
    sampling_name: str
    sampling: SamplingConfig
    num_draft_tokens: int
    max_new_tokens: int
    samples: int
    chunk_size: int
    key: str
    set_id: str
    suite_seed: int
    batch_rows: int | None = None  # rows per generate call at this batch_composition level; None: chunks as before
    filler_temperature: float | None = None  # a mixed level: the even slots' temperature (their rows discarded)
    filler_prompts: tuple[tuple[int, ...], ...] = ()  # a mixed-prompts level: the even slots' prompts, in turn
    filler_prompt_names: tuple[str, ...] = ()  # their names under [prompts]

    @property
    def mixed(self) -> bool:
        """A mixed level: filler rows in the even slots of every call (their rows discarded)."""
        return self.filler_temperature is not None or bool(self.filler_prompts)

    @property
    def level_name(self) -> str | None:
        """The batch level as findings name it (``"4 mixed prompts"``: :func:`verifier.suite.batch.level_name`)."""
        from verifier.suite.batch import level_name

        if self.batch_rows is None:
            return None
        return level_name(self.batch_rows, self.filler_temperature, bool(self.filler_prompts))

    @property
    def num_chunks(self) -> int:
        return -(-self.samples // self.chunk_size)

    def chunk_rows(self, index: int) -> int:
        return min(self.chunk_size, self.samples - index * self.chunk_size)

    def chunk_seed(self, index: int) -> int:
        return chunk_seed(self.suite_seed, self.key, index)

    @property
    def cell_base(self) -> str:
        """The id prefix of the set's cells (``decoder/prompt/sampling/k=K``; each cell appends ``/test@...``)."""
        return f"{self.decoder.name}/{self.prompt}/{self.sampling_name}/k={self.num_draft_tokens}"

    @property
    def label(self) -> str:
        level = f" | batch={self.level_name}" if self.batch_rows is not None else ""
        return f"{self.decoder.name} | {self.prompt} | {self.sampling.label()} | k={self.num_draft_tokens}{level}"

    def describe(self) -> dict[str, Any]:
        return {
            "set_id": self.set_id, "decoder": self.decoder.name, "models": self.pair, "prompt": self.prompt,
            "prompt_ids": list(self.prompt_ids), "sampling": self.sampling.to_dict(),
            "sampling_name": self.sampling_name, "num_draft_tokens": self.num_draft_tokens,
            "max_new_tokens": self.max_new_tokens, "samples": self.samples, "chunk_size": self.chunk_size,
            "num_chunks": self.num_chunks,
            **({"stop_token_ids": list(self.decoder.stop_token_ids), "max_tokens": self.decoder.max_tokens}
               if self.decoder.has_stop_rule else {}),
            **({"batch_rows": self.batch_rows, "filler_temperature": self.filler_temperature}
               if self.batch_rows is not None else {}),
            **({"filler_prompts": list(self.filler_prompt_names),
                "filler_prompt_ids": [list(p) for p in self.filler_prompts]} if self.filler_prompts else {}),
        }

    def stop_kwargs(self) -> dict[str, Any]:
        """The keywords ``generate`` gets for the request's stop rule (empty without one: the plain protocol call)."""
        d = self.decoder
        return {"stop_token_ids": list(d.stop_token_ids), "max_tokens": d.max_tokens} if d.has_stop_rule else {}


def plan_sample_sets(suite: Suite, prompt_ids: dict[tuple[str, str], tuple[int, ...]],
                     vocab_sizes: dict[str, int] | None = None) -> list[SampleSetPlan]:
    """Every sample set of the suite, in run order (decoders, prompts, sampling configs, k).

    Parameters
    ----------
    prompt_ids : dict
        ``(model pair, prompt name) -> token ids`` (prompts are encoded per pair); with ``mixed_prompt_lengths``
        also the entry's filler prompts (:func:`verifier.suite.batch.filler_prompt_names`).
    vocab_sizes : dict, optional
        ``model pair -> V``; a decoder entry without ``chunk_size`` gets
        :func:`verifier.runner.chunking.default_chunk_size` of its pair's V and k (500 at V <= 67k).
        Without it (or for a pair not in it) such entries keep 500.

    Raises
    ------
    ConfigError
        A mixed-prompts level left without a filler prompt of another length (:func:`verifier.suite.batch.resolve_fillers`).
    """
    from verifier.runner.chunking import default_chunk_size
    from verifier.suite.batch import audited_rows, batch_levels, filler_prompt_names, level_chunk_size, resolve_fillers

    plans = []
    for d in suite.decoders:
        for prompt in d.prompts:
            ids = prompt_ids[(d.models, prompt)]
            for sname in d.sampling:
                sampling = suite.sampling[sname]
                for k in d.num_draft_tokens:
                    levels = (batch_levels(d.batch_composition, d.batch_mixed_temperature, d.batch_mixed_prompts)
                              or [(None, None, False)])
                    for level, filler, mixed_prompts in levels:  # batch_composition: a sample set per level
                        names, fillers = (resolve_fillers(
                            d.batch_mixed_prompts, ids,
                            {n: prompt_ids[(d.models, n)] for n in filler_prompt_names(d.batch_mixed_prompts,
                                                                                        list(suite.prompts))
                             if (d.models, n) in prompt_ids},  # `true` skips the prompts this pair cannot take
                            f"decoders[{d.name}] with prompts.{prompt}") if mixed_prompts else ((), ()))
                        chunk = d.chunk_size
                        if not d.chunk_size_set and vocab_sizes and d.models in vocab_sizes:
                            chunk = default_chunk_size(vocab_sizes[d.models], k)
                        samples = d.samples
                        if level is not None:  # whole calls of `level` rows in every chunk (`per` of them kept)
                            per = audited_rows(level, filler is not None or mixed_prompts)
                            chunk, samples = level_chunk_size(per, chunk), -(-d.samples // per) * per
                        key = "|".join([
                            f"decoder={d.name}", f"impl={d.decoder}", f"options={json.dumps(d.options, sort_keys=True)}",
                            f"models={d.models}", f"prompt={list(ids)}", f"sampling={json.dumps(sampling.to_dict(), sort_keys=True)}",
                            f"k={k}", f"max_new_tokens={d.max_new_tokens}", f"chunk_size={chunk}",
                        ] + ([f"stop_token_ids={list(d.stop_token_ids)}", f"max_tokens={d.max_tokens}"] if d.has_stop_rule else [])
                          + ([f"batch_rows={level}"] if level is not None else [])
                          + ([f"filler_temperature={filler!r}"] if filler is not None else [])
                          + ([f"filler_prompts={[list(f) for f in fillers]}"] if fillers else []))
                        label = (f"{d.name}_{prompt}_{sname}_k{k}" + (f"_b{level}" if level is not None else "")
                                 + (f"_mixed{filler:g}" if filler is not None else "")
                                 + ("_mixedprompts" if fillers else ""))
                        plans.append(SampleSetPlan(
                            decoder=d, pair=d.models, prompt=prompt, prompt_ids=ids, sampling_name=sname,
                            sampling=sampling, num_draft_tokens=k, max_new_tokens=d.max_new_tokens,
                            samples=samples, chunk_size=chunk, key=key, set_id=set_id_for(key, label),
                            suite_seed=suite.seed, batch_rows=level, filler_temperature=filler,
                            filler_prompts=fillers, filler_prompt_names=names,
                        ))
    return plans


def build_decoder(spec: DecoderSpec, pair: Any, num_draft_tokens: int, where: str, base_dir: str | None = None) -> Any:
    """Construct the decoder of ``spec`` for one k.

    A plugin ``module:factory`` (or ``path/to/file.py:factory``) is called with the suite's
    ``options`` plus whichever of ``target``, ``draft`` (decoder-ready torch models),
    ``target_model``, ``draft_model`` (as loaded: ``TabularLM`` or torch), ``num_draft_tokens``,
    ``vocab_size``, ``eos_token_id`` its signature names; a registered name goes to
    ``verifier.decoders.make_decoder``.  A relative ``file.py`` resolves against ``base_dir`` (the
    suite file's folder), not the working directory; so does an option value of the form
    ``"file.py:name"`` (e.g. ``inject_kernel``).

    Raises
    ------
    ConfigError
        Unknown decoder name, import failure, or an object without ``generate``.
    DecoderError
        The plugin's factory raised.
    """
    context = {
        "target": lambda: pair.target, "draft": lambda: pair.draft, "num_draft_tokens": lambda: num_draft_tokens,
        "vocab_size": lambda: pair.vocab_size, "eos_token_id": lambda: pair.eos_token_id,
        "target_model": lambda: pair.target_model, "draft_model": lambda: pair.draft_model,
    }
    if not getattr(pair, "draft_known", True):  # draft = "unknown": nothing to offer (verifier.runner.draft)
        context.pop("draft"), context.pop("draft_model")
    from verifier.plugins import load_plugin, resolve_plugin_spec  # one loader for suites and audit

    # an option naming a plugin file (e.g. inject_kernel = "kern.py:fn") is the file beside the suite, too
    options = {key: resolve_plugin_spec(value, base_dir or ".")
               if isinstance(value, str) and ":" in value and value.rsplit(":", 1)[0].endswith(".py") else value
               for key, value in spec.options.items()}
    if ":" in spec.decoder:
        try:
            decoder = load_plugin(resolve_plugin_spec(spec.decoder, base_dir or "."), "decoder", context, **options)
        except VerifierError as exc:
            exc.args = (f"{where}: {exc}",)
            raise
    else:
        try:
            from verifier.decoders import make_decoder
        except ImportError as exc:  # pragma: no cover - the decoders package ships with the harness
            raise ConfigError(f"{where}={spec.decoder!r}: registered decoders are unavailable ({exc})") from None
        failure = None
        try:
            decoder = make_decoder(spec.decoder, target=pair.target, draft=pair.draft,
                                   num_draft_tokens=num_draft_tokens, **options)
        except (KeyError, ValueError, TypeError) as exc:
            failure = exc
        if failure is not None:  # outside the handler: CPython 3.11 reports a keyword clash there as a KeyError
            raise ConfigError(_unknown_option(where, spec, failure, pair, num_draft_tokens)
                              or f"{where}={spec.decoder!r}: {failure}") from None
    if not callable(getattr(decoder, "generate", None)):
        raise ConfigError(f"{where}={spec.decoder!r} gave {type(decoder).__name__}, which has no generate(); "
                          "allowed: an object implementing verifier.protocols.Decoder")
    return decoder


_NOT_AN_OPTION = re.compile(r"got an unexpected keyword argument '(\w+)'|got multiple values for (?:keyword )?argument '(\w+)'")


def _unknown_option(where: str, spec: DecoderSpec, exc: Exception, pair: Any, num_draft_tokens: int) -> str | None:
    """The message for an option a built-in decoder does not take -- a keyword its constructor does not know, or one
    its registered factory sets itself (``kernel`` of a mutant, ``rule`` of a tree decoder): the option, its value
    and the options that decoder takes (None when ``exc`` is not about such a keyword)."""
    m = _NOT_AN_OPTION.search(str(exc))
    if not isinstance(exc, TypeError) or m is None:
        return None
    key = m.group(1) or m.group(2)
    allowed = _decoder_options(spec.decoder, pair, num_draft_tokens)
    how = "is set by that decoder itself" if m.group(2) else "is not an option of that decoder"
    return (f"{where}: options.{key} = {spec.options.get(key)!r} {how} (decoder {spec.decoder!r}); "
            f"allowed: {', '.join(allowed) if allowed else 'no options'}")


def _decoder_options(name: str, pair: Any, num_draft_tokens: int) -> list[str]:
    """The options registered decoder ``name`` takes: each keyword of its factory and of its class's constructors
    (the whole MRO) that the factory accepts from a suite -- probed with a placeholder value: a keyword the factory
    also sets, or one no constructor knows, fails with a TypeError naming it; any other outcome (a built decoder, a
    check of the value) means the option exists."""
    import inspect

    from verifier.decoders import make_decoder
    from verifier.decoders.mutants import registered_spec

    def build(**options):
        return make_decoder(name, target=pair.target, draft=pair.draft, num_draft_tokens=num_draft_tokens, **options)

    factory = registered_spec(name).factory
    try:
        classes = type(build()).__mro__
    except Exception:  # noqa: BLE001 - the defaults do not build on this pair: the classes the factory holds
        cells = [c.cell_contents for c in getattr(factory, "__closure__", None) or ()]
        classes = tuple(k for c in cells if inspect.isclass(c) for k in c.__mro__)
    candidates: list[str] = []
    for fn in (factory, *(c.__init__ for c in classes if "__init__" in vars(c))):
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            continue
        candidates += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                       and p.name not in candidates]
    allowed = []
    for key in candidates:
        if key in ("self", "target", "draft", "k", "num_draft_tokens", "name"):  # given by the runner / make_decoder
            continue
        try:
            build(**{key: _PROBE})
        except TypeError as exc:
            if _NOT_AN_OPTION.search(str(exc)):
                continue
        except KeyError as exc:  # CPython 3.11's keyword clash inside an exception handler
            if exc.args == (key,):
                continue
        except Exception:  # noqa: BLE001 - the value was checked: the option exists
            pass
        allowed.append(key)
    return allowed


class _Probe:
    """A placeholder option value (:func:`_decoder_options`)."""

    def __repr__(self) -> str:
        return "<probe>"


_PROBE = _Probe()


def decoder_identity(spec: DecoderSpec, decoder: Any, num_draft_tokens: int) -> dict[str, Any]:
    """What a shard records about the decoder that produced it."""
    from verifier.runner.draft import declared_draft_known

    from verifier.validation import plugin_attribute

    cls = type(decoder)
    return {
        "name": spec.name, "decoder": spec.decoder, "options": spec.options,
        "class": f"{cls.__module__}.{cls.__qualname__}", "num_draft_tokens": num_draft_tokens,
        # read from plugin code: a property that raises is a decoder error (exit 3) naming it
        "reported_name": str(plugin_attribute(decoder, "name", "", decoder_name=spec.name)),
        # what an adapter forced (e.g. HF assisted generation)
        "settings": _json_safe(plugin_attribute(decoder, "settings", None, decoder_name=spec.name)),
        "draft_known": declared_draft_known(decoder),  # False: it loads its own draft (verifier.runner.draft)
    }


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)
