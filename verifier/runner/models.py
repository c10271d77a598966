"""Resolve a suite's model pairs and compute *reference* target probs from them.

Model spec strings (``[models.NAME] target = ..., draft = ...``):

``shipped:target`` / ``shipped:draft``
    The tiny checkpoints shipped with the package (:func:`verifier.models.shipped_checkpoint`).
``tabular:PAIR``
    The target or draft (by role) of ``verifier.exact.standard_tabular_pairs()[PAIR]``: a rational
    n-gram model whose laws are exactly known; decoders get it as a ``TabularCausalLM``.
``module:attr``
    A :class:`~verifier.exact.tabular.TabularLM` or a torch causal LM, or a zero-argument callable
    returning one (e.g. a test's own table).
anything else
    A local Hugging Face checkpoint folder (relative paths resolve against the suite's folder).

:class:`ReferenceModel` gives the *processed* float64 target probs the statistics compare against:
``next_probs`` for a batch of equal-length prefixes (used to enumerate the expected laws of the
first positions) and ``teacher_forced`` for every position of emitted rows (randomized PIT).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verifier.errors import ConfigError, ModelLoadError, invalid_argument
from verifier.exact.tabular import TabularLM
from verifier.runner.memory import rows_per_batch
from verifier.runner.prefixes import distinct_prefixes, forcing_inputs
from verifier.sampling import GENERATED_STEP, SamplingConfig, processed_probs
from verifier.suite.schema import ModelPair, Prompt

__all__ = ["ReferenceModel", "LoadedPair", "load_pair", "encode_prompt", "check_context_fits"]

_PY_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
ROW_BATCH = 256  # rows per forward pass of a torch model
MIN_EXTEND_ROWS = 8  # fewest rows of an extend_probs forward pass (the CPU kernels of 1-4 rows round differently)


class ReferenceModel:
    """Processed float64 next-token probs of a target (tabular table or torch causal LM).

    Parameters
    ----------
    model : TabularLM or torch.nn.Module
        A rational n-gram model, or a causal LM whose ``model(input_ids).logits`` has shape
        (batch, seq, vocab).
    vocab_size : int
    eos_token_id : int or None
    """

    def __init__(self, model: Any, vocab_size: int, eos_token_id: int | None, name: str = "") -> None:
        self.model = model
        self.vocab_size = int(vocab_size)
        self.eos_token_id = eos_token_id
        self.name = name
        if isinstance(model, TabularLM):
            with np.errstate(divide="ignore"):
                self._log_table = torch.from_numpy(np.log(model.float_table()))

    def _logits(self, seqs: torch.Tensor, keep: int | None = None) -> torch.Tensor:
        """Next-token logits after the prefixes of ``seqs``: (batch, seq) -> (batch, keep or seq, vocab), float64.

        Only the last ``keep`` positions are converted to float64 (and, where the model's forward
        takes ``logits_to_keep``, only they go through the output layer).
        """
        if isinstance(self.model, TabularLM):
            c = self.model.context_len
            part = seqs if keep is None else seqs[:, max(0, seqs.shape[1] - keep - max(c, 1) + 1):]
            idx = torch.zeros(part.shape, dtype=torch.long)
            for j in range(c):  # row index of the context ending at each position (lexicographic)
                shifted = torch.roll(part, shifts=j, dims=1)
                idx += shifted * self.vocab_size ** j
            out = self._log_table[idx]
            return out if keep is None else out[:, -keep:, :]
        return self.float_logits(seqs, keep, dtype=torch.float64)

    def float_logits(self, seqs: torch.Tensor, keep: int | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A torch model's next-token logits after the prefixes of ``seqs``, on the CPU in ``dtype``.

        (batch, seq) -> (batch, keep or seq, vocab); only the last ``keep`` positions go through the
        output layer where the model's forward takes ``logits_to_keep``.
        """
        device = next(self.model.parameters()).device
        kwargs = {"logits_to_keep": keep} if keep is not None and self._takes_logits_to_keep() else {}
        with torch.inference_mode():
            logits = self.model(seqs.to(device), **kwargs).logits
            if keep is not None:
                logits = logits[:, -keep:, :]
            return logits.to(device="cpu", dtype=dtype)

    def _takes_logits_to_keep(self) -> bool:
        if not hasattr(self, "_keep_arg"):
            import inspect

            try:
                self._keep_arg = "logits_to_keep" in inspect.signature(self.model.forward).parameters
            except (TypeError, ValueError):
                self._keep_arg = False
        return self._keep_arg

    def next_probs(self, prefixes: np.ndarray, sampling: SamplingConfig, prompt_len: int | None = None, *,
                   keep: int | None = None) -> np.ndarray:
        """Processed target probs after each prefix (or after each of its last ``keep`` prefixes).

        Parameters
        ----------
        prefixes : np.ndarray, shape (batch, prefix_len), int64
            Equal-length prefixes (prompt + tokens), no padding.
        sampling : SamplingConfig
        prompt_len : int or None, default None
            Tokens of each prefix that are the prompt; required with a presence or frequency penalty (they
            count the generated tokens only, ``prefixes[:, prompt_len:]``).
        keep : int or None, default None
            ``1..prefix_len``: the laws after the last ``keep`` prefixes of each row from the same forward pass,
            position ``i`` the law after ``prefixes[:, :prefix_len - keep + 1 + i]`` (a nested context's own pass
            gives them up to float32 rounding: the same causal computation, other matrix shapes).

        Returns
        -------
        np.ndarray, shape (batch, vocab), or (batch, keep, vocab) with ``keep``, float64

        Raises
        ------
        InvalidArgumentError
            A presence or frequency penalty without ``prompt_len`` (or one outside ``0..prefix_len``); ``keep``
            outside ``1..prefix_len`` (``1..prefix_len - prompt_len + 1`` with such a penalty).
        """
        seqs = torch.as_tensor(np.asarray(prefixes, dtype=np.int64))
        if sampling.counts_generated and (prompt_len is None or not 0 <= prompt_len <= seqs.shape[-1]):
            raise invalid_argument("prompt_len", prompt_len, f"0..{seqs.shape[-1]} (the prompt's length) with a presence "
                                   "or frequency penalty")
        if keep is not None and not 1 <= int(keep) <= seqs.shape[-1] - (max(0, prompt_len - 1) if sampling.counts_generated else 0):
            raise invalid_argument("keep", keep, f"1..{seqs.shape[-1]} (the prefix length; with a presence or frequency "
                                   "penalty, prefixes no shorter than the prompt)")
        last = 1 if keep is None else int(keep)
        out = []
        for start in range(0, len(seqs), ROW_BATCH):
            part = seqs[start:start + ROW_BATCH]
            logits = self._logits(part, keep=last)[:, -last:, :]
            mask = None
            if sampling.counts_generated:
                mask = _context_codes(part, prompt_len, self.vocab_size)[:, -last:, :]
            elif sampling.repetition_penalty:
                mask = _context_mask(part, self.vocab_size)[:, -last:, :]
            flat = processed_probs(logits.reshape(-1, logits.shape[-1]), sampling,
                                   None if mask is None else mask.reshape(-1, mask.shape[-1]))
            out.append(flat.numpy().reshape(logits.shape))
        probs = np.concatenate(out) if out else np.zeros((0, last, self.vocab_size))
        return probs[:, -1] if keep is None else probs

    def can_extend(self, sampling: SamplingConfig) -> bool:
        """True when :meth:`extend_probs` may run: a Hugging Face causal LM that takes a ``DynamicCache`` (keys and
        values per layer).  ``sampling`` is accepted for symmetry with :meth:`next_probs` (penalties are supported)."""
        if isinstance(self.model, TabularLM):
            return False
        if not hasattr(self, "_cache_arg"):
            import inspect

            self._cache_arg = None
            try:
                from transformers import DynamicCache, PreTrainedModel

                if isinstance(self.model, PreTrainedModel) and hasattr(DynamicCache(), "layers"):
                    params = inspect.signature(self.model.forward).parameters
                    self._cache_arg = next((a for a in ("cache", "past_key_values") if a in params), None)
            except (ImportError, TypeError, ValueError):
                pass
        return self._cache_arg is not None

    def extend_probs(self, bases: np.ndarray, tails: np.ndarray, parent: np.ndarray, sampling: SamplingConfig,
                     prompt_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Processed probs after each base and after each prefix of each base's tails, the bases' keys and values
        computed once (a KV cache) and shared by all their tails.

        Parameters
        ----------
        bases : np.ndarray, shape (num_bases, base_len), int64
            Equal-length contexts (prompt included), no padding.
        tails : np.ndarray, shape (num_tails, tail_len), int64
            Tokens after a base.
        parent : np.ndarray, shape (num_tails,), int
            The base each tail follows.
        sampling : SamplingConfig
        prompt_len : int or None, default None
            Tokens of each base that are the prompt; required with a presence or frequency penalty (as
            :meth:`next_probs`: the penalty's context is the whole context, tail included).

        Returns
        -------
        base_probs : np.ndarray, shape (num_bases, vocab), float64
            ``next_probs(bases)``.
        tail_probs : np.ndarray, shape (num_tails, tail_len, vocab), float64
            ``tail_probs[r, j]`` = ``next_probs(bases[parent[r]] + tails[r, :j + 1])``.

        Notes
        -----
        A causal LM's output at a position reads only the positions before it, so these are the probs that
        :meth:`next_probs` gives for each whole context, up to the rounding of the model's dtype: on the CPU a position
        computed after a KV cache is not bit-identical to the same position of a full pass for every shape (float32
        shipped pair: ~1e-7 relative; float64 copies: 1e-12, tests/diagnose/test_fast_oracles.py).  Every forward pass
        has at least :data:`MIN_EXTEND_ROWS` rows (a smaller batch is padded with copies of its first row: the CPU
        kernels of a batch of 1-4 rows round differently from the large batches :meth:`next_probs` mostly runs).
        """
        if not self.can_extend(sampling):
            raise invalid_argument("model", type(self.model).__name__, "a Hugging Face causal LM with a KV cache (can_extend)")
        bases = np.asarray(bases, dtype=np.int64)
        if sampling.counts_generated and (prompt_len is None or not 0 <= prompt_len <= bases.shape[-1]):
            raise invalid_argument("prompt_len", prompt_len, f"0..{bases.shape[-1]} (the prompt's length) with a presence "
                                   "or frequency penalty")
        tails = np.asarray(tails, dtype=np.int64)
        parent = np.asarray(parent, dtype=np.int64).reshape(-1)
        if tails.ndim != 2 or len(tails) != len(parent):
            raise invalid_argument("tails", tails.shape, f"shape (num_tails, tail_len) with num_tails = {len(parent)}")
        vocab, tail_len = self.vocab_size, tails.shape[1]
        base_probs = np.zeros((len(bases), vocab))
        tail_probs = np.zeros((len(tails), tail_len, vocab))
        order = np.argsort(parent, kind="stable")
        bounds = np.searchsorted(parent[order], np.arange(len(bases) + 1))
        # a batch's float64 logits and probs: tail_len x vocab x 8 bytes x 3 per tail row
        step = min(max(ROW_BATCH, rows_per_batch(max(1, tail_len) * vocab * 8 * 3)), 16 * ROW_BATCH)
        for lo in range(0, len(bases), ROW_BATCH):
            hi = min(len(bases), lo + ROW_BATCH)
            head = torch.as_tensor(bases[lo:hi])
            logits, kv = self._forward_cached(head, None, 1)
            base_mask = self._penalty_mask(head, sampling, prompt_len) if sampling.uses_context else None
            base_probs[lo:hi] = processed_probs(logits[:, -1, :], sampling, base_mask).numpy()
            mine = order[bounds[lo]:bounds[hi]] if tail_len else order[:0]
            for start in range(0, len(mine), step):
                rows = mine[start:start + step]
                sel = torch.as_tensor(parent[rows] - lo)
                tail = torch.as_tensor(tails[rows])
                logits, _ = self._forward_cached(tail, [(k[sel], v[sel]) for k, v in kv], tail_len)
                mask = None
                if sampling.uses_context:  # the base's context plus the tail's tokens so far (all generated)
                    seen = torch.nn.functional.one_hot(tail, vocab).to(torch.int32).cumsum(dim=1, dtype=torch.int32)
                    mask = base_mask[sel][:, None, :] + GENERATED_STEP * seen if sampling.counts_generated \
                        else base_mask[sel][:, None, :] | (seen > 0)
                tail_probs[rows] = processed_probs(logits, sampling, mask).numpy()
        return base_probs, tail_probs

    def _penalty_mask(self, seqs: torch.Tensor, sampling: SamplingConfig, prompt_len: int | None) -> torch.Tensor:
        """The penalty's context mask (batch, vocab) after the whole of each row of ``seqs`` (as :meth:`next_probs`)."""
        if sampling.counts_generated:
            return _context_codes(seqs, prompt_len, self.vocab_size)[:, -1, :]
        return _context_mask(seqs, self.vocab_size)[:, -1, :]

    def _forward_cached(self, seqs: torch.Tensor, kv: list | None, keep: int) -> tuple[torch.Tensor, list]:
        """Float64 logits of the last ``keep`` positions of ``seqs`` after the cached keys and values ``kv`` (a list of
        (keys, values) per layer, batch rows aligned with ``seqs``; None: an empty cache), and the new cache."""
        from transformers import DynamicCache

        rows = len(seqs)
        if rows < MIN_EXTEND_ROWS:  # pad with copies of row 0 (see extend_probs)
            pad = torch.zeros(MIN_EXTEND_ROWS - rows, dtype=torch.long)
            seqs = torch.cat([seqs, seqs[pad]])
            kv = None if kv is None else [(torch.cat([k, k[pad]]), torch.cat([v, v[pad]])) for k, v in kv]
        device = next(self.model.parameters()).device
        cache = DynamicCache() if kv is None else DynamicCache(ddp_cache_data=[(k.to(device), v.to(device)) for k, v in kv])
        kwargs = {self._cache_arg: cache, "use_cache": True}
        if self._takes_logits_to_keep():
            kwargs["logits_to_keep"] = keep
        with torch.inference_mode():
            out = self.model(seqs.to(device), **kwargs)
            new = getattr(out, "cache", None) or getattr(out, "past_key_values", None) or cache
            logits = out.logits[:rows, -keep:, :].to(device="cpu", dtype=torch.float64)
            layers = [(layer.keys[:rows].cpu(), layer.values[:rows].cpu()) for layer in new.layers]
        return logits, layers

    def teacher_forced(self, prompt_ids: tuple[int, ...], tokens: np.ndarray, sampling: SamplingConfig):
        """Yield ``(rows, probs)`` per row batch: processed target probs at every emitted position.

        Parameters
        ----------
        prompt_ids : tuple of int
        tokens : np.ndarray, shape (num_samples, max_new_tokens), int64, -1 after EOS

        Yields
        ------
        rows : slice
        probs : np.ndarray, shape (rows, max_new_tokens, vocab), float64
            ``probs[i, t]`` is the target's processed distribution of emitted token ``t`` given the
            prompt and tokens ``< t`` of row ``i`` (meaningless where ``tokens[i, t] == -1``).
        """
        n, steps = tokens.shape
        prompt = torch.as_tensor(prompt_ids, dtype=torch.long)
        # logits, processed probs and their mask of one row: steps x vocab float64 each (the batch fits the
        # memory budget of verifier.runner.memory; a fixed entry budget gave 2 rows per pass at vocab 262k)
        budget = rows = rows_per_batch(steps * self.vocab_size * 8 * 4)
        rows = rows if isinstance(self.model, TabularLM) else min(rows, ROW_BATCH)
        # A context-free table (context_len 0) may be scored after an empty prompt: its rows never read the
        # context, so a placeholder id stands in front (every position needs a prefix); the penalty mask is
        # built from the real tokens only.
        placeholder = not prompt_ids and isinstance(self.model, TabularLM) and self.model.context_len == 0
        if placeholder:
            prompt = torch.zeros(1, dtype=torch.long)
        torch_model = not isinstance(self.model, TabularLM)
        if torch_model and n > rows:  # every distinct prefix of the whole set once, when they fit one batch's budget
            known = _forced_unique(self, prompt, tokens, prompt_ids, steps, sampling, budget)
            if known is not None:
                probs_u, inverse = known
                for start in range(0, n, rows):
                    yield slice(start, min(start + rows, n)), probs_u[inverse[start:start + rows]]
                return
        for start in range(0, n, rows):
            part, seqs = forcing_inputs(prompt, tokens[start:start + rows])
            if torch_model:  # each distinct prefix through the model once (top-k rows repeat: 64 prefixes for 25k rows)
                uniq, inverse = torch.unique(seqs, dim=0, return_inverse=True)
                yield slice(start, start + len(part)), _forced_probs_of(self, uniq, prompt_ids, steps, sampling)[inverse.numpy()]
                continue
            logits = self._logits(seqs, keep=steps)
            mask = None
            if sampling.counts_generated:  # the codes of the real tokens only (a placeholder is no prompt token)
                real = torch.cat([prompt[:0] if placeholder else prompt.expand(len(part), -1), part[:, :-1]], dim=1)
                codes = _context_codes(real, 0 if placeholder else len(prompt_ids), self.vocab_size)
                if placeholder:  # position 0 reads an empty context
                    codes = torch.cat([torch.zeros(len(part), 1, self.vocab_size, dtype=torch.int32), codes], dim=1)
                mask = codes[:, max(len(prompt_ids) - 1, 0) if not placeholder else 0:, :]
            elif sampling.repetition_penalty and placeholder:
                seen = _context_mask(part[:, :-1], self.vocab_size) if steps > 1 else torch.zeros(len(part), 0, self.vocab_size, dtype=torch.bool)
                mask = torch.cat([torch.zeros(len(part), 1, self.vocab_size, dtype=torch.bool), seen], dim=1)
            elif sampling.repetition_penalty:
                mask = _context_mask(seqs, self.vocab_size)[:, len(prompt_ids) - 1:, :]
            yield slice(start, start + len(part)), processed_probs(logits, sampling, mask).numpy()


def _forced_unique(ref, prompt: torch.Tensor, tokens: np.ndarray, prompt_ids: tuple[int, ...], steps: int,
                   sampling: SamplingConfig, budget_rows: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(probs of each distinct prefix (u, steps, vocab) float64, row -> prefix index (n,))`` of a torch model over
    the whole set, or None when the distinct prefixes are more than ``budget_rows`` (one batch's memory budget) or
    no fewer than a batch-by-batch pass would see.  At T < 1 with top-k the rows repeat across batches (64
    prefixes for 25,257 rows at top-k 8, k = 1), so each goes through the model once instead of once per batch."""
    known = distinct_prefixes(prompt, tokens, budget_rows)
    if known is None:
        return None
    uniq, inverse = known
    probs = [_forced_probs_of(ref, uniq[i:i + ROW_BATCH], prompt_ids, steps, sampling)
             for i in range(0, len(uniq), ROW_BATCH)]
    return np.concatenate(probs), inverse


def _forced_probs_of(ref, seqs: torch.Tensor, prompt_ids: tuple[int, ...], steps: int, sampling: SamplingConfig) -> np.ndarray:
    """Processed probs (rows, steps, vocab) float64 after the prefixes ``seqs`` = prompt + tokens[:, :-1] of a torch
    model (no placeholder prompt): the float64 path of :meth:`ReferenceModel.teacher_forced` on each given row."""
    logits = ref._logits(seqs, keep=steps)
    mask = None
    if sampling.counts_generated:
        mask = _context_codes(seqs, len(prompt_ids), ref.vocab_size)[:, max(len(prompt_ids) - 1, 0):, :]
    elif sampling.repetition_penalty:
        mask = _context_mask(seqs, ref.vocab_size)[:, len(prompt_ids) - 1:, :]
    return processed_probs(logits, sampling, mask).numpy()


def _context_codes(seqs: torch.Tensor, prompt_len: int, vocab: int) -> torch.Tensor:
    """(batch, seq, vocab) int32 context codes (:func:`verifier.sampling.context_codes`) after ``seqs[:, :t+1]``:
    bit 0 = in ``seqs[:, :prompt_len]``, plus 2 x times in ``seqs[:, prompt_len:t+1]``."""
    one_hot = torch.nn.functional.one_hot(seqs, vocab).to(torch.int32)
    in_prompt = (one_hot[:, :prompt_len].sum(dim=1, keepdim=True) > 0).to(torch.int32)
    generated = one_hot.clone()
    generated[:, :prompt_len] = 0
    return in_prompt + GENERATED_STEP * torch.cumsum(generated, dim=1, dtype=torch.int32)


def _context_mask(seqs: torch.Tensor, vocab: int) -> torch.Tensor:
    """(batch, seq, vocab) bool: token v occurs in ``seqs[:, :t+1]``."""
    one_hot = torch.nn.functional.one_hot(seqs, vocab)
    return one_hot.cumsum(dim=1) > 0


class LoadedPair:
    """A model pair: raw models (``TabularLM`` or torch LM), reference probs, tokenizer.

    ``target`` / ``draft`` are what decoders get: the torch model itself, or a
    ``verifier.models.TabularCausalLM`` wrapping a tabular model (built on first use).
    A draft declared unknown (``draft = "unknown"``, :mod:`verifier.runner.draft`) has
    ``draft_model is None`` and ``draft_reference is None``; asking for ``draft`` is then a
    :class:`~verifier.errors.ConfigError`.
    """

    def __init__(self, spec: ModelPair, target_model: Any, draft_model: Any, reference: ReferenceModel,
                 draft_reference: ReferenceModel, tokenizer: Any = None) -> None:
        self.spec = spec
        self.target_model, self.draft_model = target_model, draft_model
        self.reference, self.draft_reference = reference, draft_reference
        self.tokenizer = tokenizer
        self._wrapped: dict[str, Any] = {}

    @property
    def draft_known(self) -> bool:
        """False when the pair's draft is declared unknown."""
        return self.draft_reference is not None

    def _decoder_model(self, role: str) -> Any:
        if role == "draft" and not self.draft_known:
            raise ConfigError(f"models.{self.spec.name}.draft is declared unknown, but the decoder asks for the pair's "
                              "draft model; give a draft (models.NAME.draft / --draft MODEL) or a decoder that loads its own")
        if role not in self._wrapped:
            obj = self.target_model if role == "target" else self.draft_model
            if isinstance(obj, TabularLM):
                from verifier.models import TabularCausalLM

                obj = TabularCausalLM(obj)
            self._wrapped[role] = obj
        return self._wrapped[role]

    @property
    def target(self) -> Any:
        return self._decoder_model("target")

    @property
    def draft(self) -> Any:
        return self._decoder_model("draft")

    @property
    def vocab_size(self) -> int:
        return self.reference.vocab_size

    @property
    def eos_token_id(self) -> int | None:
        return self.reference.eos_token_id


def _resolve_one(spec: str, role: str, base_dir: Path, where: str) -> tuple[Any, str | None]:
    """Return (TabularLM or nn.Module, checkpoint path or None)."""
    if spec.startswith("tabular:"):
        from verifier.exact import standard_tabular_pairs

        pairs = standard_tabular_pairs()
        name = spec.split(":", 1)[1]
        if name not in pairs:
            raise ConfigError(f"{where}={spec!r} is invalid; allowed: tabular:NAME with NAME in {sorted(pairs)}")
        return getattr(pairs[name], role), None
    if spec.startswith("shipped:"):
        from verifier.models import shipped_checkpoint

        return None, str(shipped_checkpoint(spec.split(":", 1)[1]))
    if _PY_SPEC.match(spec) and not Path(spec).exists():
        module_name, attr = spec.split(":", 1)
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"{where}={spec!r} cannot be imported: {exc}") from None
        if callable(obj) and not isinstance(obj, (TabularLM, torch.nn.Module)):
            try:
                obj = obj()
            except Exception as exc:  # the user's factory: report it as a config error, not a traceback
                raise ConfigError(f"{where}={spec!r} failed when called with no arguments "
                                  f"({type(exc).__name__}: {exc}); allowed: a TabularLM, a torch causal LM, "
                                  "or a factory that takes no arguments and returns one") from None
        if not isinstance(obj, (TabularLM, torch.nn.Module)):
            raise ConfigError(f"{where}={spec!r} gave {type(obj).__name__}; allowed: a TabularLM or a torch causal LM")
        return obj, None
    path = Path(spec).expanduser()
    try:
        if not path.is_absolute():
            path = (base_dir / path).resolve()
        path.stat()
    except FileNotFoundError:
        pass  # reported just below
    except (RuntimeError, OSError) as exc:  # a symbolic link loop (ELOOP), a permission error
        raise ModelLoadError(f"{where}={spec!r}: model path {str(path)!r} cannot be resolved ({exc}); expected a "
                             "checkpoint folder with config.json and model.safetensors (no symbolic link loop), "
                             "or shipped:target / tabular:NAME") from None
    if not path.exists():
        from verifier.engines.base import engine_built_path

        moved = engine_built_path(path)
        if moved is not None:  # a checkpoint an engine's install script built, recorded on another checkout
            return None, str(moved)
        raise ModelLoadError(f"{where}={spec!r}: model path {str(path)!r} does not exist; expected a checkpoint "
                             "folder with config.json and model.safetensors, or shipped:target / tabular:NAME")
    return None, str(path)


def _info(model: Any, where: str = "model") -> tuple[int, int | None]:
    if isinstance(model, TabularLM):
        return model.vocab_size, model.eos_token_id
    cfg = model.config
    if not isinstance(getattr(cfg, "vocab_size", None), int):  # e.g. Gemma4AssistantConfig: no standalone causal LM
        from verifier.runner.draft import unknown_hint

        raise ModelLoadError(f"{where}: {type(model).__name__} ({type(cfg).__name__}) has no vocab_size, so the harness "
                             f"cannot score it as a causal LM; {unknown_hint()}")
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos = cfg.eos_token_id if eos is None else eos
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    vocab = int(cfg.vocab_size)
    if eos is not None and (isinstance(eos, bool) or not isinstance(eos, int) or not 0 <= eos < vocab):
        raise ModelLoadError(f"{where}: eos_token_id={eos!r} in the checkpoint's config.json / generation_config.json; "
                             f"allowed: a token id in [0, {vocab}) (vocab_size), a list of them, or null")
    return vocab, eos


def load_pair(spec: ModelPair, base_dir: str | Path = ".") -> LoadedPair:
    """Load the target and draft of one ``[models.NAME]`` table.

    Raises
    ------
    ModelLoadError
        A checkpoint path is missing or malformed, or target and draft vocabularies differ.
    ConfigError
        An unknown ``tabular:`` name or an import spec that does not resolve.
    """
    from verifier.runner.draft import is_unknown, unknown_hint

    base = Path(base_dir)
    loaded: dict[str, Any] = {}
    ckpt: dict[str, str | None] = {}
    if is_unknown(spec.target):
        raise ModelLoadError(f"models.{spec.name}.target={spec.target!r}: the target must be known (every verdict "
                             "compares with its law); only the draft may be declared unknown")
    draft_unknown = is_unknown(spec.draft)
    for role in ("target",) if draft_unknown else ("target", "draft"):
        where = f"models.{spec.name}.{role}"
        obj, path = _resolve_one(getattr(spec, role), role, base, where)
        if path is not None:
            from verifier.models import load_model

            obj = load_model(path, device=spec.device, dtype=spec.dtype)
        loaded[role], ckpt[role] = obj, path
    tv, teos = _info(loaded["target"], f"models.{spec.name}.target")
    dv, deos = (tv, teos) if draft_unknown else _info(loaded["draft"], f"models.{spec.name}.draft")
    if tv != dv:
        raise ModelLoadError(
            f"models.{spec.name}: target vocab_size={tv} but draft vocab_size={dv}; the harness scores drafts on the "
            f"target's vocabulary only; {unknown_hint()}"
        )
    tokenizer = None
    if ckpt["target"] is not None:
        from verifier.models import load_tokenizer

        try:
            tokenizer = load_tokenizer(ckpt["target"])
        except ModelLoadError:
            tokenizer = None  # prompts must then be given as ids
    return LoadedPair(
        spec, loaded["target"], None if draft_unknown else loaded["draft"],
        reference=ReferenceModel(loaded["target"], tv, teos, name=spec.target),
        draft_reference=None if draft_unknown else ReferenceModel(loaded["draft"], dv, deos, name=spec.draft),
        tokenizer=tokenizer,
    )


def encode_prompt(prompt: Prompt, pair: LoadedPair) -> tuple[int, ...]:
    """Token ids of a prompt, checked against the pair's vocabulary.

    Raises
    ------
    ConfigError
        A text prompt without a tokenizer, an empty encoding, an id outside the vocabulary, or a
        prompt shorter than a tabular model's context.
    """
    where = f"prompts.{prompt.name}"
    if prompt.ids is not None:
        ids = tuple(prompt.ids)
    else:
        if pair.tokenizer is None:
            raise ConfigError(f"{where}.text={prompt.text!r} needs a tokenizer, but model pair "
                              f"{pair.spec.name!r} has none; give token ids: {where}.ids = [...]")
        ids = tuple(int(t) for t in pair.tokenizer(prompt.text, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ConfigError(f"{where}.text={prompt.text!r} encodes to no tokens; allowed: a non-empty prompt")
    bad = [t for t in ids if not 0 <= t < pair.vocab_size]
    if bad:
        raise ConfigError(f"{where}.ids={list(ids)!r} is invalid: token id {bad[0]} is outside the "
                          f"vocabulary of model pair {pair.spec.name!r}; allowed: ids in 0..{pair.vocab_size - 1}")
    for ref in (pair.reference, pair.draft_reference):
        if ref is not None and isinstance(ref.model, TabularLM) and len(ids) < ref.model.context_len:
            raise ConfigError(f"{where}.ids={list(ids)!r} is shorter than the tabular context length "
                              f"{ref.model.context_len}; allowed: at least {ref.model.context_len} ids")
    return ids


def check_context_fits(pair: LoadedPair, ids: tuple[int, ...], max_new_tokens: int, num_draft_tokens: int, where: str) -> None:
    """Refuse a prompt + ``max_new_tokens`` (+ one round's ``num_draft_tokens``) longer than a model's context.

    A transformer with ``config.max_position_embeddings`` positions cannot score longer rows; without
    this check such a suite runs for minutes and then fails inside the model (or silently extrapolates).

    Raises
    ------
    ConfigError
        (exit 2) naming ``max_new_tokens``, its value and the largest value that fits.
    """
    for role, model in (("target", pair.target_model), ("draft", pair.draft_model)):
        limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        if not isinstance(limit, int) or isinstance(model, TabularLM):
            continue
        need = len(ids) + max_new_tokens + num_draft_tokens
        if need > limit:
            fits = limit - len(ids) - num_draft_tokens
            raise ConfigError(f"{where}: max_new_tokens={max_new_tokens} is too long: the {len(ids)}-token prompt plus "
                              f"{max_new_tokens} new tokens plus {num_draft_tokens} draft tokens need {need} positions, but "
                              f"the {role} model of pair {pair.spec.name!r} has max_position_embeddings={limit}; allowed: "
                              f"max_new_tokens <= {max(fits, 0)}")
