"""Hugging Face assisted generation (``generate(..., assistant_model=draft, do_sample=True)``) as a Decoder.

Any (target, assistant) pair that transformers accepts for assisted generation works: the adapter
only calls ``model.generate``.  It sets what that path needs to *actually speculate* with a fixed
``k`` (read from the installed transformers' ``AssistedCandidateGenerator``):

* ``assistant.generation_config.num_assistant_tokens = k`` — the draft length is read from the
  *assistant's* generation config, not from the ``generate`` call;
* ``num_assistant_tokens_schedule = "constant"`` — the default ``"heuristic"`` schedule changes ``k``
  between rounds (and persists it across calls);
* ``assistant_confidence_threshold = 0.0`` — the default 0.4 stops drafting early when the assistant is
  unsure (and is re-tuned online), so fewer than ``k`` tokens would be drafted; ``None`` would be
  replaced by that default, 0 disables the stopping criterion;
* every logits processor the harness does not ask for is switched off explicitly (``top_k=0``
  instead of the global default 50, ``top_p=1``, ``typical_p=1``, ``min_p=None``,
  ``repetition_penalty=1``, ``no_repeat_ngram_size=0``), so the target and the harness's scorer use
  the same processed probs; a set ``min_p`` goes to ``MinPLogitsWarper`` (after temperature, top-k, top-p:
  the harness's order; issue 29 kind 3); presence / frequency penalties are refused (transformers has none);
* ``generate(..., return_logprobs=True)`` also returns the engine's reported logprobs (kind 4):
  ``compute_transition_scores(normalize_logits=True)`` of ``generate(output_scores=True)``'s processed scores;
* ``max_new_tokens`` should exceed ``k``: the assistant drafts ``min(k, tokens left - 1)`` tokens, so a
  shorter generation never runs a full round.  :attr:`HFAssistedDecoder.settings` records a warning.

Everything set is recorded in :attr:`HFAssistedDecoder.settings` (for the report), and each round's
draft length and accepted count are recorded in ``last_stats`` by wrapping
``AssistedCandidateGenerator.update_candidate_strategy`` (read-only observation).

HF assisted generation only takes batch size 1, so samples run one at a time (``rows_per_step = 1``:
``batch_composition`` levels above 1 row are refused, kind 1); ``num_workers``
spawned processes (default: every CPU core, one torch thread each) share the samples.  Sample ``i``
of a call seeds torch with a value derived from ``(seed, i)``, so results do not depend on how
samples are split between workers.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import multiprocessing as mp
import os
from typing import Any, Sequence

import numpy as np
import torch

from verifier.engines.hf_control_patches import CONTROL_PATCHES
from verifier.errors import DecoderError, invalid_argument
from verifier.protocols import PADDING_TOKEN_ID, DecoderStats
from verifier.sampling import SamplingConfig
from verifier.validation import NO_ROUND

__all__ = ["HFAssistedDecoder", "make_hf_assisted_decoder", "sample_seed"]

CHUNKS_PER_WORKER = 4  # work items per worker per call: balances load without much IPC
MODES = {  # mode -> the candidate generator transformers runs (transformers/generation/candidate_generator.py)
    "assisted": "assisted generation (AssistedCandidateGenerator)",
    "prompt_lookup": "prompt-lookup decoding (PromptLookupCandidateGenerator)",
    "assistant_tokenizer": "universal assisted generation (UniversalSpeculativeDecodingGenerator, assistant with its own tokenizer)",
    "gemma4_assistant": "Gemma4 assistant (SinglePositionMultiTokenCandidateGenerator)",
}
MODE_CALLS = {
    "assisted": "target.generate(input_ids, assistant_model=draft, do_sample=True, generation_config=...)",
    "prompt_lookup": "target.generate(input_ids, prompt_lookup_num_tokens=k, max_matching_ngram_size=..., do_sample=True, ...)",
    "assistant_tokenizer": "target.generate(input_ids, assistant_model=draft, tokenizer=target_tokenizer, "
                           "assistant_tokenizer=draft_tokenizer, do_sample=True, ...)",
    "gemma4_assistant": "gemma4_target.generate(input_ids, assistant_model=Gemma4AssistantForCausalLM, do_sample=True, ...)",
}

_WORKER: dict[str, Any] = {}  # per-process state: loaded models and the round recorder
_POOLS: dict[tuple, cf.ProcessPoolExecutor] = {}  # shared by decoders on the same models (k, weight, kernel travel per task)


@atexit.register
def _shutdown_pools() -> None:
    """Stop worker processes before interpreter teardown (avoids noisy executor-thread errors at exit)."""
    for pool in list(_POOLS.values()):
        pool.shutdown(wait=True, cancel_futures=True)
    _POOLS.clear()


def sample_seed(seed: int, index: int) -> int:
    """Torch seed for sample ``index`` of a call with ``seed`` (independent of the worker split)."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1, np.uint64)[0] % (2**63 - 1))


def _load(spec: Any, device: str, dtype: Any) -> torch.nn.Module:
    if isinstance(spec, torch.nn.Module):
        return spec.to(device).eval()
    try:
        from verifier.models import load_model
    except ImportError:  # models package not landed: plain from_pretrained
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(str(spec)).to(device).eval()
    return load_model(spec, device=device, dtype=dtype)


def _portable(spec: Any) -> Any:
    """What a spawned worker can load: a loaded HF model becomes its checkpoint folder when it has one."""
    if spec is None:
        return None
    if isinstance(spec, torch.nn.Module):
        path = getattr(getattr(spec, "config", None), "_name_or_path", "")
        if path and os.path.isdir(path):
            return path
        return spec  # pickled to the workers (fine for tiny models)
    return str(spec)


def _key(spec: Any) -> Any:
    return ("module", id(spec)) if isinstance(spec, torch.nn.Module) else spec


def _install_round_recorder() -> list[tuple[int, int]]:
    """Record (drafted, accepted) of every verification pass of every candidate generator.

    ``GenerationMixin._assisted_decoding`` calls ``candidate_generator.update_candidate_strategy(input_ids,
    new_logits, n_matches)`` once per target pass, for *every* generator type (assisted, prompt lookup,
    different tokenizers, the Gemma4 assistant's ``SinglePositionMultiTokenCandidateGenerator``);
    ``new_logits`` has ``drafted + 1`` positions and ``n_matches`` is the accepted count after the EOS and
    length crops.  So the instance's method is wrapped as each generator is built
    (``_get_candidate_generator``); wrapping one class (``AssistedCandidateGenerator``) missed every
    other generator and reported 0 rounds where rounds ran.  Read-only observation.
    """
    from transformers.generation.utils import GenerationMixin

    if "rounds" in _WORKER:
        return _WORKER["rounds"]
    rounds: list[tuple[int, int]] = []
    original = GenerationMixin._get_candidate_generator

    def recording(self, *args, **kwargs):
        generator = original(self, *args, **kwargs)
        update = generator.update_candidate_strategy

        def observed(input_ids, scores, num_matches):
            rounds.append((int(scores.shape[1]) - 1, int(num_matches)))
            return update(input_ids, scores, num_matches)

        generator.update_candidate_strategy = observed
        return generator

    GenerationMixin._get_candidate_generator = recording
    _WORKER["rounds"] = rounds
    return rounds




def _init_worker(target: Any, draft: Any, device: str, dtype: Any, threads: int, mode: str = "assisted",
                 control_patch: str | None = None, vocab_order_seed: int = 0) -> None:
    torch.set_num_threads(threads)
    if control_patch:
        CONTROL_PATCHES[control_patch]()
    _WORKER["target"] = _load(target, device, dtype)
    _WORKER["draft"] = None if draft is None else _load(draft, device, dtype)
    _WORKER.pop("tokenizers", None)  # an in-process decoder of another mode before this one left its tokenizers
    if mode == "assistant_tokenizer":  # universal assisted generation: both tokenizers, by checkpoint folder
        from verifier.models import load_tokenizer

        from verifier.engines.hf_vocab_order import fix_vocab_order

        assistant = load_tokenizer(_portable(draft))
        # get_vocab() in one seeded order in every process (not the per-process hash order): reproducible samples
        _WORKER["vocab_order"] = fix_vocab_order(assistant, vocab_order_seed)
        _WORKER["tokenizers"] = {"tokenizer": load_tokenizer(_portable(target)), "assistant_tokenizer": assistant}
        _warm_up_universal_assisted()
    _install_round_recorder()


def _warm_up_universal_assisted() -> None:
    """One throwaway universal-assisted ``generate`` call in this process before any sample.

    transformers' first such call in a process builds the vocabulary translator and prunes the assistant's LM head in
    place; that call's sample differs from what later calls draw at the same seed (measured: row 0 of a fresh worker,
    whatever the prompt of the first call).  With several workers the samples then depended on which indices each
    worker happened to draw first (1 run in 3 differed).  After this call every sample depends on its index only.
    """
    target, draft, tokenizers = _WORKER["target"], _WORKER["draft"], _WORKER["tokenizers"]
    ids = tokenizers["tokenizer"]("def ", add_special_tokens=False)["input_ids"] or [0]
    prompt = torch.tensor([ids], dtype=torch.long, device=target.device)
    _set_assistant(draft, 1)
    with torch.inference_mode():
        torch.manual_seed(0)
        target.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                        generation_config=_generation_config(target, SamplingConfig(temperature=1.0), 2, None),
                        assistant_model=draft, **tokenizers)


def _generation_config(target: torch.nn.Module, sampling: SamplingConfig, max_new_tokens: int, weight: float | None):
    from transformers import GenerationConfig

    cfg = target.config
    eos = getattr(target.generation_config, "eos_token_id", None)
    eos = eos if eos is not None else getattr(cfg, "eos_token_id", None)
    pad = getattr(target.generation_config, "pad_token_id", None)
    kwargs: dict[str, Any] = dict(
        do_sample=not sampling.greedy,
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        eos_token_id=eos,
        pad_token_id=pad if pad is not None else eos,
        repetition_penalty=sampling.repetition_penalty if sampling.repetition_penalty is not None else 1.0,
        no_repeat_ngram_size=0,
        num_beams=1,
    )
    if not sampling.greedy:
        kwargs.update(
            temperature=float(sampling.temperature),
            top_k=sampling.top_k if sampling.top_k is not None else 0,  # 0 disables; None means HF's default 50
            top_p=float(sampling.top_p) if sampling.top_p is not None else 1.0,
            typical_p=1.0,
            min_p=float(sampling.min_p) if sampling.min_p else None,  # MinPLogitsWarper, after temperature/top-k/top-p
        )
    if weight is not None:
        kwargs["assistant_ensemble_weight"] = float(weight)
    return GenerationConfig(**kwargs)


def _set_assistant(draft: torch.nn.Module, k: int) -> None:
    gc = draft.generation_config
    gc.num_assistant_tokens = k
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0


def _run_samples(task: dict[str, Any]) -> tuple[np.ndarray, list[tuple[int, int]], list[int], list[list[tuple[int, int]]],
                                                np.ndarray | None]:
    """Generate the samples with indices ``task['indices']`` in this process (batch size 1 each).

    With ``task["return_logprobs"]`` the last element is the engine's reported logprobs: ``generate(...,
    return_dict_in_generate=True, output_scores=True)`` and ``compute_transition_scores(sequences, scores,
    normalize_logits=True)`` (the log-softmax of the processed target scores ``_assisted_decoding`` stores per emitted
    token), NaN after EOS; None otherwise."""
    from verifier.engines.hf_kernel import patched_speculative_sampling

    target, draft = _WORKER["target"], _WORKER["draft"]
    rounds = _install_round_recorder()
    rounds.clear()
    sampling = SamplingConfig(**task["sampling"])
    gen_cfg = _generation_config(target, sampling, task.get("max_tokens") or task["max_new_tokens"], task["weight"])
    if task.get("stop_token_ids"):  # the request's stop tokens beside EOS (issue 29 kind 5): generate stops at any
        eos = gen_cfg.eos_token_id
        gen_cfg.eos_token_id = list(dict.fromkeys([*(eos if isinstance(eos, list) else [] if eos is None else [eos]),
                                                   *task["stop_token_ids"]]))
    mode = task.get("mode", "assisted")
    extra: dict[str, Any] = {}
    if mode == "prompt_lookup":  # PromptLookupCandidateGenerator: drafts copied from the prompt's n-grams
        gen_cfg.prompt_lookup_num_tokens = task["k"]
        gen_cfg.max_matching_ngram_size = task.get("max_matching_ngram_size", 2)
    else:
        _set_assistant(draft, task["k"])
        extra["assistant_model"] = draft
        extra.update(_WORKER.get("tokenizers", {}))
    kernel = None
    if task["inject_kernel"]:
        from verifier.plugins import load_kernel

        kernel = load_kernel(task["inject_kernel"])
    prompt = torch.tensor([task["prompt_ids"]], dtype=torch.long, device=target.device)
    out = np.full((len(task["indices"]), task["max_new_tokens"]), PADDING_TOKEN_ID, dtype=np.int64)
    want_lp = bool(task.get("return_logprobs"))
    logprobs = np.full(out.shape, np.nan) if want_lp else None
    if want_lp:
        extra.update(return_dict_in_generate=True, output_scores=True)
    first_round: list[int] = []  # accepted drafts in each row's first round (-1: no speculative round ran)
    row_rounds: list[list[tuple[int, int]]] = []  # each row's (drafted, accepted) per target pass: DecoderStats.origins
    with torch.inference_mode(), patched_speculative_sampling(kernel):
        for row, index in enumerate(task["indices"]):
            before = len(rounds)
            torch.manual_seed(sample_seed(task["seed"], index))
            seq = target.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=gen_cfg, **extra)
            if want_lp:
                lp = target.compute_transition_scores(seq.sequences, seq.scores, normalize_logits=True)[0]
                seq = seq.sequences
                logprobs[row, : min(len(lp), task["max_new_tokens"])] = lp[: task["max_new_tokens"]].double().cpu().numpy()
            new = seq[0, prompt.shape[1]:].cpu().numpy()
            out[row, : len(new)] = new[: task["max_new_tokens"]]
            drafted = [r for r in rounds[before:] if r[0] > 0]  # passes that verified >= 1 draft (speculative rounds)
            first_round.append(drafted[0][1] if drafted else NO_ROUND)
            row_rounds.append(list(rounds[before:]))
    return out, list(rounds), first_round, row_rounds, logprobs


class HFAssistedDecoder:
    """transformers assisted generation with sampling, as a :class:`~verifier.protocols.Decoder`.

    ``rows_per_step = 1``: assisted generation takes batch size 1, each row its own ``generate`` call
    (:func:`verifier.runner.batch.check_batch_level`).

    Parameters
    ----------
    target, draft : str, pathlib.Path or torch.nn.Module
        Checkpoints (a folder, ``"shipped:target"``/``"shipped:draft"``, or a hub id) loaded with
        :func:`verifier.models.load_model`, or loaded modules (then ``num_workers`` must be 0).
    num_draft_tokens : int
        ``k``: tokens the assistant drafts per round (``num_assistant_tokens``).
    num_workers : int or None, default None
        Worker processes (one torch thread each); ``None`` uses every CPU core; ``0`` runs in this
        process.  The pool is shared by every decoder on the same models.
    start_method : {"fork", "spawn", "forkserver"} or None, default None
        How workers start: ``fork`` on CPU where available (no re-import of torch/transformers: ~1 s
        instead of ~20-40 s on a loaded 2-core machine; workers set one torch thread before any op),
        else ``spawn`` (CUDA cannot be forked; a script then needs the ``if __name__ == "__main__":``
        guard).
    device : str, default "cpu"
    dtype : str or torch.dtype or None, default None
        Weight dtype (``None`` keeps the checkpoint's).
    assistant_ensemble_weight : float or None, default None
        transformers' documented lossy "static ensemble verification" weight; ``None`` is lossless.
    inject_kernel : str or None, default None
        A kernel plugin spec (``"module:factory"``) that replaces transformers'
        ``_speculative_sampling`` inside ``generate`` -- to check that an injected defect (e.g. the
        full-p-fallback mutant) is detected end to end.
    name : str, optional
    mode : {"assisted", "prompt_lookup", "assistant_tokenizer", "gemma4_assistant"}, default "assisted"
        Which candidate generator ``generate`` runs (:data:`MODES`): ``draft`` is the assistant
        (``assistant_model=``); ``prompt_lookup`` drafts ``num_draft_tokens`` tokens from the prompt's
        n-grams (``prompt_lookup_num_tokens=``, no draft model: ``draft`` is ignored);
        ``assistant_tokenizer`` passes ``tokenizer=`` and ``assistant_tokenizer=`` (the draft has its
        own tokenizer; with ``do_sample=True`` transformers runs universal assisted generation);
        ``gemma4_assistant``: ``draft`` is a ``Gemma4AssistantForCausalLM`` of a Gemma4 target.
        Every mode but ``assisted`` has a draft the harness cannot score: ``draft_known`` is False.
    max_matching_ngram_size : int, default 2
        ``prompt_lookup`` only: the longest n-gram matched in the prompt.
    vocab_order_seed : int, default 0
        ``assistant_tokenizer`` only: the assistant tokenizer's ``get_vocab()`` iterates in a permutation drawn from
        this seed, the same in every process (:mod:`verifier.engines.hf_vocab_order`), so a seed gives the same
        samples in every run; ``-1`` keeps the tokenizer's own per-process hash order (not reproducible).  The
        order's digest is in ``settings["assistant_vocab_order"]``.

    Raises
    ------
    InvalidArgumentError
        Invalid ``num_draft_tokens``, ``num_workers``, ensemble weight or mode.
    """

    rows_per_step = 1
    batching = "one row per speculative step: transformers' assisted generation requires batch size 1 (one generate call per row)"

    def __init__(self, target: Any, draft: Any, num_draft_tokens: int, *, num_workers: int | None = None, device: str = "cpu",
                 dtype: Any = None, assistant_ensemble_weight: float | None = None, inject_kernel: str | None = None,
                 name: str | None = None, start_method: str | None = None, mode: str = "assisted",
                 max_matching_ngram_size: int = 2, control_patch: str | None = None, vocab_order_seed: int = 0) -> None:
        if control_patch is not None and control_patch not in CONTROL_PATCHES:
            raise invalid_argument("control_patch", control_patch, "None or one of " + ", ".join(CONTROL_PATCHES))
        self.control_patch = control_patch
        if mode not in MODES:
            raise invalid_argument("mode", mode, " or ".join(repr(m) for m in MODES))
        if assistant_ensemble_weight is not None and mode == "prompt_lookup":
            raise invalid_argument("assistant_ensemble_weight", assistant_ensemble_weight,
                                   "None with mode='prompt_lookup' (it has no draft logits)")
        self.mode = mode
        from verifier.engines.hf_vocab_order import NATIVE_ORDER

        if isinstance(vocab_order_seed, bool) or not isinstance(vocab_order_seed, int) or vocab_order_seed < NATIVE_ORDER:
            raise invalid_argument("vocab_order_seed", vocab_order_seed,
                                   f"an integer >= 0 (a seeded order) or {NATIVE_ORDER} (the tokenizer's own hash order)")
        self.vocab_order_seed = vocab_order_seed
        self.draft_known = mode == "assisted"  # verifier.runner.draft: the harness can score only the plain assistant
        self.max_matching_ngram_size = int(max_matching_ngram_size)
        draft = None if mode == "prompt_lookup" else draft
        if isinstance(num_draft_tokens, bool) or not isinstance(num_draft_tokens, int) or num_draft_tokens < 1:
            raise invalid_argument("num_draft_tokens", num_draft_tokens, "an integer >= 1")
        workers = (os.cpu_count() or 1) if num_workers is None else num_workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise invalid_argument("num_workers", num_workers, "None or an integer >= 0")
        w = assistant_ensemble_weight
        if w is not None and not (isinstance(w, (int, float)) and 0 < w < 1):
            raise invalid_argument("assistant_ensemble_weight", w, "None (lossless) or a number in (0, 1)")
        self.target_spec, self.draft_spec = target, draft
        self.num_draft_tokens = num_draft_tokens
        self.num_workers = workers
        self.device, self.dtype = device, dtype
        self.assistant_ensemble_weight = w
        self.inject_kernel = inject_kernel
        methods = mp.get_all_start_methods()
        default = "fork" if "fork" in methods and str(device) == "cpu" else "spawn"
        if start_method is not None and start_method not in methods:
            raise invalid_argument("start_method", start_method, f"None or one of {methods}")
        self.start_method = start_method or default
        import transformers

        suffix = "" if w is None else f", assistant_ensemble_weight={w:g}"
        suffix += "" if inject_kernel is None else f", injected kernel {inject_kernel}"
        self.name = name or (f"transformers {transformers.__version__} assisted generation (do_sample=True, num_assistant_tokens={num_draft_tokens}, "
                             f"schedule=constant, assistant_confidence_threshold=0{suffix})" if mode == "assisted" else
                             f"transformers {transformers.__version__} {MODES[mode]} (k={num_draft_tokens}{suffix})")
        self.last_stats: DecoderStats | None = None
        self._pool: cf.ProcessPoolExecutor | None = None
        self._local = False
        if workers == 0:
            _init_worker(target, draft, device, dtype, torch.get_num_threads(), mode, control_patch, vocab_order_seed)
            self._local = True
        target_model = _WORKER["target"] if self._local else (target if isinstance(target, torch.nn.Module) else None)
        self.vocab_size, self.eos_token_id = self._read_vocab(target_model)
        self.settings = self._settings()

    def _read_vocab(self, model: torch.nn.Module | None) -> tuple[int, int | None]:
        from transformers import AutoConfig

        if model is not None:
            cfg = model.config
        else:
            spec = str(self.target_spec)
            if spec.startswith("shipped:"):
                from verifier.models import shipped_checkpoint

                spec = str(shipped_checkpoint(spec.split(":", 1)[1]))
            cfg = AutoConfig.from_pretrained(spec)
        eos = getattr(cfg, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        return int(cfg.vocab_size), (int(eos) if eos is not None else None)

    def _settings(self) -> dict[str, Any]:
        import transformers

        return {
            "transformers_version": transformers.__version__,
            "call": MODE_CALLS[self.mode],
            "mode": self.mode,
            "control_patch": self.control_patch,
            **({"assistant_vocab_order": self._vocab_order()} if self.mode == "assistant_tokenizer" else {}),
            "draft_known": self.draft_known,
            "num_assistant_tokens": self.num_draft_tokens,
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0,
            "assistant_ensemble_weight": self.assistant_ensemble_weight,
            "processors_off_unless_requested": {"top_k": 0, "top_p": 1.0, "typical_p": 1.0, "min_p": None,
                                    "repetition_penalty": 1.0, "no_repeat_ngram_size": 0},
            "batch_size": 1,
            "num_workers": self.num_workers,
            "start_method": self.start_method,
            "injected_kernel": self.inject_kernel,
            "warnings": [],
        }

    def _vocab_order(self) -> dict[str, Any]:
        """How the assistant tokenizer's vocabulary was iterated: the seed and, where this process built it, the digest."""
        from verifier.engines.hf_vocab_order import NATIVE_ORDER, order_digest, seeded_vocab
        from verifier.models import load_tokenizer

        if self.vocab_order_seed == NATIVE_ORDER:
            return {"seed": None, "order": "each process's own get_vocab() hash order (not reproducible)"}
        vocab = load_tokenizer(_portable(self.draft_spec)).get_vocab()
        return {"seed": self.vocab_order_seed, "order": "numpy default_rng(seed).permutation of the ids",
                "digest": order_digest(seeded_vocab(vocab, self.vocab_order_seed))}

    def _ensure_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            target, draft = _portable(self.target_spec), _portable(self.draft_spec)
            key = (_key(target), _key(draft), str(self.device), str(self.dtype), self.num_workers, self.start_method, self.mode,
                   self.control_patch, self.vocab_order_seed)
            if key not in _POOLS:
                _POOLS[key] = cf.ProcessPoolExecutor(
                    max_workers=self.num_workers, mp_context=mp.get_context(self.start_method), initializer=_init_worker,
                    initargs=(target, draft, self.device, self.dtype, 1, self.mode, self.control_patch, self.vocab_order_seed),
                )
            self._pool = _POOLS[key]
        return self._pool

    def target_logits(self, prompt_ids: Sequence[int]) -> np.ndarray:
        """The target's logits after ``prompt_ids`` as transformers computes them here (device, dtype of the decoder).

        Returns
        -------
        np.ndarray, shape (vocab,), float64
            The numeric floor's input (:mod:`verifier.engines.floor`).
        """
        if "floor_target" not in self.__dict__:
            self.floor_target = _WORKER["target"] if self._local else _load(_portable(self.target_spec), self.device, self.dtype)
        model = self.floor_target
        ids = torch.tensor([[int(t) for t in prompt_ids]], dtype=torch.long, device=model.device)
        with torch.inference_mode():
            return model(ids).logits[0, -1].to(torch.float64).cpu().numpy()

    def close(self) -> None:
        """Shut down the worker processes this decoder uses (shared with decoders on the same models)."""
        for key, pool in list(_POOLS.items()):
            if pool is self._pool:
                pool.shutdown(wait=True, cancel_futures=True)
                del _POOLS[key]
        self._pool = None

    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: SamplingConfig, seed: int,
                 return_logprobs: bool = False, stop_token_ids: Sequence[int] = (),
                 max_tokens: int | None = None) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Draw ``num_samples`` independent continuations with HF assisted generation.

        Parameters
        ----------
        return_logprobs : bool, default False
            Also return the engine's reported logprobs (issue 29, kind 4): ``compute_transition_scores(...,
            normalize_logits=True)`` of the processed target scores ``generate(output_scores=True)`` returns.
        stop_token_ids, max_tokens : optional
            The request's stop rule (issue 29, kind 5): ``GenerationConfig.eos_token_id = [EOS, *stop_token_ids]`` and
            ``max_new_tokens = max_tokens``, so transformers stops the row itself; the returned rows stay
            ``max_new_tokens`` wide and are not cut here, so a token past a stop or past ``max_tokens`` shows.

        Returns
        -------
        np.ndarray, shape (num_samples, max_new_tokens), int64
            Emitted tokens, -1 after EOS; with ``return_logprobs`` the pair (tokens, logprobs float64, NaN after EOS).

        Raises
        ------
        DecoderError
            transformers raised (the message carries its exception).
        SamplingRefusedError
            A presence / frequency penalty is set (transformers' ``GenerationConfig`` has none).
        """
        from verifier.errors import refuse_sampling

        for name in ("presence_penalty", "frequency_penalty"):  # issue 29 kind 3: never silently dropped
            if getattr(sampling, name, None) is not None:
                raise refuse_sampling(name.replace("_", "-"), getattr(sampling, name), "not set: transformers has no "
                                      "presence or frequency penalty (GenerationConfig has no such field; its "
                                      "repetition_penalty and min_p are expressible)")
        if max_new_tokens <= self.num_draft_tokens:
            msg = (f"max_new_tokens={max_new_tokens} <= num_draft_tokens={self.num_draft_tokens}: the assistant drafts "
                   f"min(k, tokens left - 1) tokens, so no round drafts k tokens")
            if msg not in self.settings["warnings"]:
                self.settings["warnings"].append(msg)
        base = dict(prompt_ids=[int(t) for t in prompt_ids], max_new_tokens=int(max_new_tokens), sampling=sampling.to_dict(),
                    seed=int(seed), k=self.num_draft_tokens, weight=self.assistant_ensemble_weight, inject_kernel=self.inject_kernel,
                    mode=self.mode, max_matching_ngram_size=self.max_matching_ngram_size, return_logprobs=bool(return_logprobs),
                    stop_token_ids=[int(t) for t in stop_token_ids], max_tokens=None if max_tokens is None else int(max_tokens))
        try:
            if self._local:
                parts = [_run_samples({**base, "indices": list(range(num_samples))})]
            else:
                n_chunks = max(1, min(num_samples, self.num_workers * CHUNKS_PER_WORKER))
                chunks = [c.tolist() for c in np.array_split(np.arange(num_samples), n_chunks)]
                pool = self._ensure_pool()
                parts = list(pool.map(_run_samples, [{**base, "indices": c} for c in chunks]))
        except DecoderError:
            raise
        except cf.BrokenExecutor as exc:  # BrokenProcessPool (cf.process is imported lazily)
            self.close()
            raise DecoderError(
                f"{self.name}: a worker process died ({exc}); a script that starts workers needs the "
                "`if __name__ == '__main__':` guard (spawned workers re-import the main module), or use num_workers=0"
            ) from exc
        except Exception as exc:
            raise DecoderError(f"{self.name}: transformers generate raised: {type(exc).__name__}: {exc}") from exc
        out = np.concatenate([p[0] for p in parts], axis=0) if parts else np.zeros((0, max_new_tokens), np.int64)
        passes = [r for p in parts for r in p[1]]
        rounds = [r for r in passes if 0 < r[0] <= self.num_draft_tokens]  # speculative rounds (>= 1 draft verified)
        drafted = np.array([r[0] for r in rounds], dtype=np.int64)
        accepted = np.array([r[1] for r in rounds], dtype=np.int64)
        first = np.array([v for p in parts for v in p[2]], dtype=np.int64)
        over = sum(1 for r in passes if r[0] > self.num_draft_tokens)
        first[first > self.num_draft_tokens] = NO_ROUND  # a first round longer than k (another tokenizer) is no k-round
        from verifier.engines.decoder import origins_from_rounds

        origins = origins_from_rounds([r for p in parts for r in p[3]], out, self.num_draft_tokens)
        self.last_stats = DecoderStats(
            rounds=len(rounds), accepted_counts=accepted, num_draft_tokens=self.num_draft_tokens, first_round_accepted=first,
            extra={"drafted_counts": drafted, "full_rounds": int((drafted == self.num_draft_tokens).sum()),
                   "target_passes": len(passes), "passes_without_draft": sum(1 for r in passes if r[0] == 0),
                   "rounds_longer_than_k": over, "drafted": int(drafted.sum()), "accepted": int(accepted.sum())},
            origins=origins,
        )
        if return_logprobs:
            return out, np.concatenate([p[4] for p in parts], axis=0) if parts else np.zeros(out.shape)
        return out


def make_hf_assisted_decoder(target: str = "shipped:target", draft: str = "shipped:draft", num_draft_tokens: int = 4,
                             **options: Any) -> HFAssistedDecoder:
    """Plugin factory: ``verifier.engines.hf_assisted:make_hf_assisted_decoder`` (options as :class:`HFAssistedDecoder`)."""
    return HFAssistedDecoder(target, draft, num_draft_tokens, **options)
