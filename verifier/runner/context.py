"""Stage 2 of a run: the suite's models, prompts, sample-set plans and decoders (:class:`SuiteContext`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from verifier._tracebacks import crash_traceback
from verifier.errors import ConfigError, DecoderError
from verifier.runner import guards
from verifier.runner.models import LoadedPair, check_context_fits, encode_prompt, load_pair
from verifier.runner.plan import build_decoder, plan_sample_sets
from verifier.runner.logprob import takes_return_logprobs
from verifier.runner.stop import check_stop_specs, decoder_takes_stop
from verifier.suite.batch import ALL_PROMPTS, filler_prompt_names
from verifier.suite.schema import Suite

__all__ = ["SuiteContext"]


class SuiteContext:
    """Models, prompts and plans of a suite (stage 2).

    Parameters
    ----------
    suite : Suite
        With its profile applied.
    pairs : dict[str, LoadedPair], optional
        Pairs already loaded by the caller (``specverify audit`` plans its n on the same pair): one whose
        ``spec`` equals the suite's ``[models.NAME]`` is used as is instead of loading the models again.

    Attributes
    ----------
    pairs : dict[str, LoadedPair]
        Loaded model pairs by name (only those a decoder uses).
    plans : list[SampleSetPlan]
        Every sample set of the suite.
    expected_cache : dict
        Expected laws shared by decoders with the same (pair, prompt, sampling)
        (:mod:`verifier.runner.cells`).
    warming : list of threading.Thread
        Threads computing the TV cells' sample-independent values while an engine worker samples
        (:func:`verifier.runner.cells.warm_statistics`); the statistics stage joins them first.

    Raises
    ------
    ConfigError, ModelLoadError
        Sizes beyond available memory, a device absent here, a model or prompt that does not load.
    """

    def __init__(self, suite: Suite, pairs: dict[str, LoadedPair] | None = None) -> None:
        for entry in suite.python_path:
            p = str((Path(suite.base_dir) / entry).resolve())
            if p not in sys.path:
                sys.path.insert(0, p)
        self.suite = suite
        guards.check_sizes(suite)  # before any model is loaded or chunk planned
        used = sorted({d.models for d in suite.decoders})
        for name in used:
            guards.check_device(suite.models[name].device, f"{suite.source}: models.{name}.device")
        given = pairs or {}  # pairs the caller already loaded from the same [models.NAME] (an audit's planning pair)
        self.pairs: dict[str, LoadedPair] = {
            name: given[name] if name in given and given[name].spec == suite.models[name] else
            load_pair(suite.models[name], suite.base_dir) for name in used}
        ids = entry_prompt_ids(suite, self.pairs)
        check_stop_specs(suite, self.pairs)  # stop ids inside the vocabulary; a `stop` test that can stop a row
        for d in suite.decoders:  # the greedy cell replaces every cell of a T = 0 set: a logprob test would never run
            greedy = [name for name in d.sampling if suite.sampling[name].greedy]
            if "logprob" in d.tests and greedy:
                raise ConfigError(f"{suite.source}: decoders[{d.name}].tests includes 'logprob' and sampling.{greedy[0]} "
                                  "is greedy (temperature 0); allowed: temperature > 0 with the logprob test (at T = 0 "
                                  "the greedy cell replaces every cell of the set, so the reported logprobs would never "
                                  "be checked), or tests without 'logprob' for greedy configs")
        self.plans = plan_sample_sets(suite, ids, {name: pair.vocab_size for name, pair in self.pairs.items()})
        self._decoders: dict[tuple[str, int], Any] = {}
        self.run_dir: Path | None = None  # set by the sampling stage: decoders with bind_run_dir() persist there
        self.expected_cache: dict = {}  # expected laws, shared by decoders with the same (pair, prompt, sampling)
        self.warming: list = []  # threads warming the statistics' memos while an engine samples (runner.cells.warm_statistics)

    def decoder(self, spec, num_draft_tokens: int) -> Any:
        """The decoder of ``spec`` for one k (built once)."""
        key = (spec.name, num_draft_tokens)
        if key not in self._decoders:
            self._decoders[key] = build_decoder(spec, self.pairs[spec.models], num_draft_tokens, f"decoders[{spec.name}]",
                                                base_dir=self.suite.base_dir)
            decoder_takes_stop(spec, self._decoders[key])  # a stop rule needs generate(..., stop_token_ids=, max_tokens=)
            if "logprob" in spec.tests and not takes_return_logprobs(self._decoders[key]):
                raise ConfigError(f"decoders[{spec.name}] asks for the 'logprob' test, but {type(self._decoders[key]).__name__}"
                                  ".generate takes no return_logprobs keyword; allowed: a decoder whose generate(..., "
                                  "return_logprobs=True) returns (tokens, logprobs) (the registered 'reference', the "
                                  "chain mutants and the logprob zoo) or tests without 'logprob'")
            bind = getattr(self._decoders[key], "bind_run_dir", None)
            if self.run_dir is not None and callable(bind):  # e.g. a URL audit's response journal
                bind(self.run_dir)
        return self._decoders[key]

    def live_decoder(self, spec) -> Any:
        """A decoder of ``spec`` this run already built (any k), else the one for its first k (built now).

        For checks made after sampling with the same engine instance (an engine audit's numeric floor).
        """
        for (name, _k), decoder in self._decoders.items():
            if name == spec.name:
                return decoder
        return self.decoder(spec, spec.num_draft_tokens[0])

    def preflight(self) -> dict[str, dict]:
        """Build every decoder before sampling, so a config error fails before any sample is drawn.

        Raises ConfigError (exit 2); a factory that raises is recorded as that decoder's error.
        """
        errors: dict[str, dict] = {}
        for p in self.plans:
            if p.decoder.name in errors:
                continue
            try:
                self.decoder(p.decoder, p.num_draft_tokens)
            except DecoderError as exc:
                errors[p.decoder.name] = {"decoder": p.decoder.name, "kind": "crash", "type": type(exc).__name__,
                                          "message": str(exc), "traceback": crash_traceback(exc),
                                          "set_id": p.set_id, "set": p.label, "chunk": 0,
                                          "seed": p.chunk_seed(0), "chunks_kept_in_set": 0,
                                          "samples_dir": str(Path("samples") / p.set_id)}
        return errors


def entry_prompt_ids(suite: Suite, pairs: dict[str, LoadedPair]) -> dict[tuple[str, str], tuple[int, ...]]:
    """``(model pair, prompt name) -> token ids`` of every decoder entry on a loaded pair: its prompts and the filler
    prompts of its mixed-prompts levels, each checked to fit the pair's context (the run and ``specverify diagnose``
    plan the same sample sets from it).

    With ``mixed_prompt_lengths = true`` the fillers are the suite prompts this pair can take: one it cannot encode
    (a text prompt on a tabular pair) or whose rows would not fit its context is left out.  A prompt the entry names
    (its own, or a listed filler) must load.

    Raises
    ------
    ConfigError
        A prompt the entry names does not encode for its pair or does not fit its context.
    """
    ids: dict[tuple[str, str], tuple[int, ...]] = {}
    for d in suite.decoders:
        if d.models not in pairs:
            continue
        fillers = filler_prompt_names(d.batch_mixed_prompts, list(suite.prompts))
        optional = set(fillers) - set(d.prompts) if d.batch_mixed_prompts is ALL_PROMPTS else set()
        for prompt in dict.fromkeys([*d.prompts, *fillers]):
            try:
                encoded = encode_prompt(suite.prompts[prompt], pairs[d.models])
                check_context_fits(pairs[d.models], encoded, d.max_new_tokens, max(d.num_draft_tokens),
                                   f"decoders[{d.name}] with prompts.{prompt}")
            except ConfigError:
                if prompt in optional:
                    continue
                raise
            ids[(d.models, prompt)] = encoded
    return ids
