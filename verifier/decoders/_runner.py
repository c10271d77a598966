"""Batched incremental forward passes with per-row KV-cache rollback (internal).

Scheme: all rows share the cache's column axis; every forward appends the same number of columns
to every row.  Each row keeps its own *visible* columns in an attention mask and its own position
counter (number of visible tokens), so

* a column that carries no real token for a row (a dummy slot) is appended with mask 0;
* rolling a row back to its retained prefix = setting the mask of its rejected-suffix columns to 0
  and lowering its position counter, so the next tokens reuse those positions and no later query
  ever attends to the discarded keys/values;
* finished rows are dropped from the batch (``select_rows``);
* when masked holes make up too much of the cache it is compacted (visible columns moved left).

This works for any Hugging Face causal LM that takes ``attention_mask`` (batch, past + new) and
``position_ids`` and returns ``past_key_values`` with ``batch_select_indices`` -- and for
:class:`verifier.models.TabularCausalLM`, which honours the same mask semantics.
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch

from verifier.errors import invalid_argument

try:  # transformers >= 4.56: caches made of layers; we replace torch.cat growth by an in-place buffer
    from transformers.cache_utils import DynamicLayer as _DynamicLayer
except ImportError:  # pragma: no cover - older transformers keep the plain (slower) cache
    _DynamicLayer = None

SELECT_HEADROOM = 32  # free KV columns kept when finished rows are dropped (a round of k + 1 <= 32 fits)
DUMMY_TOKEN_ID = 0  # fed in slots whose mask is 0; never visible to any query that matters
COMPACT_HOLE_FRACTION = 0.25  # compact the cache when masked holes exceed this share of its columns (measured best of 0.25/0.5)


def cache_kwarg(model) -> str:
    """Name of the cache argument: ``cache`` (transformers >= 5.2x) or ``past_key_values`` (older)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def output_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def model_device(model) -> torch.device:
    dev = getattr(model, "device", None)
    if dev is not None:
        return torch.device(dev)
    return next(iter(model.parameters())).device


def model_vocab_size(model) -> int:
    return int(model.config.vocab_size)


def model_eos_token_id(model) -> int | None:
    eos = getattr(model.config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return None if eos is None else int(eos)


class CacheRunner:
    """One model's KV cache and per-row visible-column mask for a batch of independent rows.

    Attributes
    ----------
    mask : torch.Tensor, shape (batch, columns), bool
        True where a cached column is visible to later queries.
    lengths : torch.Tensor, shape (batch,), int64
        Visible tokens per row (the next position id).

    ``reserve_columns`` (optional) is the number of cache columns the caller expects to need: the
    KV buffers are allocated that wide at the first growth instead of doubling their way there
    (each doubling copies the whole cache).  Wider needs still grow by doubling.
    """

    def __init__(self, model, device: torch.device, reserve_columns: int = 0) -> None:
        self.model = model
        self.device = device
        self.reserve_columns = int(reserve_columns)
        self.cache = None
        self._cache_kwarg = cache_kwarg(model)
        self.mask = torch.zeros(0, 0, dtype=torch.bool, device=device)
        self.lengths = torch.zeros(0, dtype=torch.int64, device=device)

    @torch.no_grad()
    def prefill(self, context_ids: Sequence[int], batch: int) -> None:
        """Run ``context_ids`` (may be empty) once and replicate its cache to ``batch`` rows."""
        self.cache = None
        self.mask = torch.zeros(batch, 0, dtype=torch.bool, device=self.device)
        self.lengths = torch.zeros(batch, dtype=torch.int64, device=self.device)
        if len(context_ids) == 0:
            return
        ids = torch.as_tensor(list(context_ids), dtype=torch.int64, device=self.device)[None]
        out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids),
                         position_ids=torch.arange(ids.shape[1], device=self.device)[None],
                         use_cache=True, **{self._cache_kwarg: None})
        self.cache = output_cache(out)
        _use_buffered_layers(self.cache, self.reserve_columns)
        if batch != 1:
            self.cache.batch_repeat_interleave(batch)
        self.mask = torch.ones(batch, ids.shape[1], dtype=torch.bool, device=self.device)
        self.lengths = torch.full((batch,), ids.shape[1], dtype=torch.int64, device=self.device)

    @torch.no_grad()
    def prefill_rows(self, contexts: Sequence[Sequence[int]]) -> None:
        """Run a context per row (lengths may differ, any may be empty), left-padded to the longest.

        The padding columns carry :data:`DUMMY_TOKEN_ID` with mask 0 and do not count as positions, so each row's
        real tokens sit at positions ``0..len - 1`` and no later query attends to the padding: a padded batch with an
        attention mask and per-row position ids, as engines run prompts of different lengths in one step.
        """
        batch = len(contexts)
        self.cache = None
        self.mask = torch.zeros(batch, 0, dtype=torch.bool, device=self.device)
        self.lengths = torch.zeros(batch, dtype=torch.int64, device=self.device)
        width = max((len(c) for c in contexts), default=0)
        if width == 0:
            return
        ids = torch.tensor([[DUMMY_TOKEN_ID] * (width - len(c)) + [int(t) for t in c] for c in contexts],
                           dtype=torch.int64, device=self.device)
        visible = torch.tensor([[False] * (width - len(c)) + [True] * len(c) for c in contexts], device=self.device)
        self.append(ids, visible)

    @torch.no_grad()
    def append(self, token_ids: torch.Tensor, visible: torch.Tensor | None = None) -> torch.Tensor:
        """Feed ``token_ids`` (batch, m); return logits (batch, m, vocab) in the model's dtype.

        ``visible`` (batch, m) bool marks real tokens; dummy slots get mask 0 and do not advance
        the row's position counter.
        """
        if visible is None:
            visible = torch.ones_like(token_ids, dtype=torch.bool)
        ids = torch.where(visible, token_ids, torch.full_like(token_ids, DUMMY_TOKEN_ID))
        steps = visible.to(torch.int64).cumsum(dim=1)
        position_ids = (self.lengths[:, None] + steps - 1).clamp(min=0)
        full_mask = torch.cat([self.mask, visible], dim=1)
        out = self.model(input_ids=ids, attention_mask=full_mask.to(torch.int64), position_ids=position_ids,
                         use_cache=True, **{self._cache_kwarg: self.cache})
        if self.cache is None:  # first forward without a prefill (1-token prompt): cache created here
            _use_buffered_layers(output_cache(out), self.reserve_columns)
        self.cache = output_cache(out)
        self.mask = full_mask
        self.lengths = self.lengths + steps[:, -1]
        return out.logits

    def rollback(self, keep: torch.Tensor) -> None:
        """Hide the last ``keep.shape[1]`` columns where ``keep`` (batch, m) is False."""
        m = keep.shape[1]
        if m == 0:
            return
        tail = self.mask[:, -m:]
        hidden = tail & ~keep
        self.mask = torch.cat([self.mask[:, :-m], tail & keep], dim=1)
        self.lengths = self.lengths - hidden.to(torch.int64).sum(dim=1)
        self._maybe_compact()

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (int64 indices) of the batch."""
        if self.cache is not None:
            self.cache.batch_select_indices(rows)
        self.mask = self.mask[rows]
        self.lengths = self.lengths[rows]

    def _maybe_compact(self) -> None:
        """Move every row's visible columns to the left when holes dominate (keeps attention cheap)."""
        cols = self.mask.shape[1]
        if cols == 0 or self.cache is None:
            return
        width = int(self.lengths.max())
        if cols - width <= COMPACT_HOLE_FRACTION * cols:
            return
        # stable order: visible columns first, in their original order
        order = torch.sort((~self.mask).to(torch.int8), dim=1, stable=True).indices[:, :width]
        if hasattr(self.cache, "gather_columns"):
            self.cache.gather_columns(order)
            self.mask = self.mask.gather(1, order)
            return
        layers = getattr(self.cache, "layers", None)
        if layers is None or not all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers):
            return  # unknown cache layout: keep the holes (still correct, only slower)
        for layer in layers:
            if layer.keys is None or layer.keys.numel() == 0:
                continue
            idx = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
            keys, values = layer.keys.gather(2, idx), layer.values.gather(2, idx)
            if hasattr(layer, "adopt"):
                layer.adopt(keys, values)
            else:
                layer.keys, layer.values = keys, values
        self.mask = self.mask.gather(1, order)


if _DynamicLayer is not None:

    class _BufferedLayer(_DynamicLayer):
        """A DynamicLayer whose keys/values are views into a buffer grown by doubling, so a forward
        writes its new columns in place instead of ``torch.cat``-ing the whole cache (measured: the
        cat was the largest single cost of batched decoding on CPU)."""

        min_capacity = 32  # columns allocated at the first growth (CacheRunner's reserve_columns when larger)

        def adopt(self, keys: torch.Tensor, values: torch.Tensor) -> None:
            self._kbuf, self._vbuf = keys, values
            self.keys, self.values = keys, values

        def update(self, key_states, value_states, *args, **kwargs):
            n, m = self.keys.shape[-2], key_states.shape[-2]
            if n + m > self._kbuf.shape[-2]:
                cap = self.min_capacity if n + m <= self.min_capacity else 2 * (n + m)
                kbuf = key_states.new_empty(*key_states.shape[:2], cap, key_states.shape[-1])
                vbuf = value_states.new_empty(*value_states.shape[:2], cap, value_states.shape[-1])
                kbuf[..., :n, :] = self.keys
                vbuf[..., :n, :] = self.values
                self._kbuf, self._vbuf = kbuf, vbuf
            self._kbuf[..., n:n + m, :] = key_states
            self._vbuf[..., n:n + m, :] = value_states
            self.keys, self.values = self._kbuf[..., :n + m, :], self._vbuf[..., :n + m, :]
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            n, m = self.keys.shape[-2], indices.numel()
            moved = (indices != torch.arange(m, device=indices.device)).nonzero()[:, 0]
            src = indices[moved]
            if m <= self._kbuf.shape[0] and (src.numel() == 0 or int(src.min()) >= m):
                # keep the first m rows, overwriting the moved ones from rows beyond m (never read
                # after being written): copies only the moved rows, in place
                for buf in (self._kbuf, self._vbuf):
                    used = buf[..., :n, :]
                    used[moved] = used[src]
                self._kbuf, self._vbuf = self._kbuf[:m], self._vbuf[:m]
                self.keys, self.values = self._kbuf[..., :n, :], self._vbuf[..., :n, :]
                return
            # any other selection: one copy, with a little headroom (no regrow on the next step)
            cap = min(self._kbuf.shape[-2], n + SELECT_HEADROOM)
            self._kbuf = self._kbuf[..., :cap, :].index_select(0, indices)
            self._vbuf = self._vbuf[..., :cap, :].index_select(0, indices)
            self.keys, self.values = self._kbuf[..., :n, :], self._vbuf[..., :n, :]

        def batch_repeat_interleave(self, repeats: int) -> None:
            self.adopt(self.keys.repeat_interleave(repeats, dim=0), self.values.repeat_interleave(repeats, dim=0))


def _use_buffered_layers(cache, min_capacity: int = 0) -> None:
    """Swap plain DynamicLayers of a filled cache for :class:`_BufferedLayer` (same data)."""
    layers = getattr(cache, "layers", None)
    if _DynamicLayer is None or layers is None:
        return
    for i, layer in enumerate(layers):
        if type(layer) is _DynamicLayer and layer.is_initialized and layer.keys is not None and layer.keys.numel():
            new = _BufferedLayer.__new__(_BufferedLayer)
            new.__dict__.update(layer.__dict__)
            new.adopt(layer.keys, layer.values)
            new.min_capacity = max(_BufferedLayer.min_capacity, int(min_capacity))
            layers[i] = new


def check_prompt(prompt_ids: Sequence[int], vocab_size: int, min_len: int) -> list[int]:
    """Validate a prompt: a sequence of at least ``min_len`` token ids in ``0..vocab_size - 1``."""
    try:
        ids = [int(t) for t in prompt_ids]
    except (TypeError, ValueError):
        raise invalid_argument("prompt_ids", prompt_ids, "a sequence of integer token ids") from None
    if len(ids) < min_len:
        raise invalid_argument("prompt_ids", ids, f"at least {min_len} token id(s)")
    if any(t < 0 or t >= vocab_size for t in ids):
        raise invalid_argument("prompt_ids", ids, f"token ids in 0..{vocab_size - 1}")
    return ids
