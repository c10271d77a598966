"""A :class:`~verifier.exact.tabular.TabularLM` as a torch causal LM that runs through the real decoders.

:class:`TabularCausalLM` has the call interface and cache semantics the decoders use on Hugging
Face models: ``model(input_ids, attention_mask=..., position_ids=..., cache=..., use_cache=True)``
returns an object with ``.logits`` (batch, new_tokens, vocab) and ``.cache``; the cache supports ``get_seq_length``, ``batch_select_indices``,
``batch_repeat_interleave`` and ``crop``.  The attention mask covers cached plus new columns, and
a column whose mask is 0 is invisible to every later query -- exactly as a masked key/value pair
is invisible in attention.  So a decoder that forgets to mask a rejected draft suffix gets the
wrong context here too.

The logits are ``log`` of the float64 table row (``-inf`` where the rational entry is 0), so
:func:`verifier.sampling.processed_probs` recovers the table row up to float64 rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from verifier.errors import invalid_argument
from verifier.exact.tabular import TabularLM
from verifier.sampling import SamplingConfig, processed_probs

__all__ = ["TabularCausalLM", "TabularCache", "processed_tabular"]


@dataclass
class TabularCache:
    """The "KV cache" of a :class:`TabularCausalLM`: every token id fed so far, one column each.

    Attributes
    ----------
    token_ids : torch.Tensor, shape (batch, seq), int64
    mask : torch.Tensor, shape (batch, seq), bool
        The attention mask last seen for these columns (True = visible).
    """

    token_ids: torch.Tensor
    mask: torch.Tensor

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return int(self.token_ids.shape[1])

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.token_ids = self.token_ids[indices]
        self.mask = self.mask[indices]

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.token_ids = self.token_ids.repeat_interleave(repeats, dim=0)
        self.mask = self.mask.repeat_interleave(repeats, dim=0)

    def gather_columns(self, order: torch.Tensor) -> None:
        """Reorder/shrink the columns of every row: ``order`` (batch, new_columns) int64."""
        self.token_ids = self.token_ids.gather(1, order)
        self.mask = self.mask.gather(1, order)

    def crop(self, max_length: int) -> None:
        self.token_ids = self.token_ids[:, :max_length]
        self.mask = self.mask[:, :max_length]


class TabularCausalLM(torch.nn.Module):
    """A rational n-gram model (:class:`~verifier.exact.tabular.TabularLM`) as a causal LM.

    Parameters
    ----------
    tabular : TabularLM
        The table; its ``vocab_size``, ``context_len`` and ``eos_token_id`` are kept.
    dtype : torch.dtype, default torch.float64
        dtype of the logits (float64 keeps processed probs within float64 rounding of the table).

    Attributes
    ----------
    config : SimpleNamespace
        ``vocab_size`` and ``eos_token_id``, like a Hugging Face config.
    min_prompt_len : int
        ``max(1, context_len)``: decoders refuse shorter prompts.

    Notes
    -----
    The logits at a column depend on that column's token and the ``context_len - 1`` visible
    tokens before it; position ids are accepted and ignored (an n-gram has no positions).  Missing
    context at the very start of a sequence is read as token 0; decoders never use those logits
    because prompts are at least ``min_prompt_len`` long.

    Examples
    --------
    >>> lm = TabularLM({(0,): ["1/2", "1/2"], (1,): ["1/4", "3/4"]}, vocab_size=2, context_len=1)
    >>> out = TabularCausalLM(lm)(torch.tensor([[1]]))
    >>> [round(v, 4) for v in out.logits.exp()[0, 0].tolist()]
    [0.25, 0.75]
    """

    def __init__(self, tabular: TabularLM, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        if not isinstance(tabular, TabularLM):
            raise invalid_argument("tabular", type(tabular).__name__, "a verifier.exact.TabularLM")
        self.tabular = tabular
        self.context_len = tabular.context_len
        self.vocab_size = tabular.vocab_size
        self.min_prompt_len = max(1, tabular.context_len)
        table = torch.as_tensor(tabular.float_table(), dtype=torch.float64)
        logits = torch.where(table > 0, table.log(), torch.full_like(table, -math.inf))
        self.register_buffer("table_logits", logits.to(dtype), persistent=False)
        self.config = SimpleNamespace(vocab_size=tabular.vocab_size, eos_token_id=tabular.eos_token_id,
                                      name_or_path=f"tabular:{tabular.name}")

    @property
    def device(self) -> torch.device:
        return self.table_logits.device

    @property
    def dtype(self) -> torch.dtype:
        return self.table_logits.dtype

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: TabularCache | None = None,
                use_cache: bool = True, past_key_values: TabularCache | None = None, **unused) -> SimpleNamespace:
        """Logits for every new column.

        Parameters
        ----------
        input_ids : torch.Tensor, shape (batch, new_tokens), int64
        attention_mask : torch.Tensor, shape (batch, cached + new_tokens) or (batch, 1, new_tokens, cached + new_tokens), optional
            1/True = visible column; ``None`` = all visible.  A 4-D mask is per query (tree
            attention; bool True or additive 0 = visible).
        position_ids : ignored
        cache : TabularCache or None
            The cache from the previous call (``past_key_values`` is accepted as an alias, the
            older Hugging Face name).
        use_cache : bool, default True

        Returns
        -------
        SimpleNamespace
            ``logits`` (batch, new_tokens, vocab) and ``cache`` (a :class:`TabularCache`; also
            as ``past_key_values``).
        """
        past_key_values = cache if cache is not None else past_key_values
        input_ids = input_ids.to(self.device)
        batch, new = input_ids.shape
        past_ids = past_key_values.token_ids if past_key_values is not None else input_ids[:, :0]
        ids = torch.cat([past_ids, input_ids], dim=1)
        if attention_mask is None:
            mask = torch.ones_like(ids, dtype=torch.bool)
            if past_key_values is not None:
                mask[:, :past_ids.shape[1]] = past_key_values.mask
        elif attention_mask.ndim == 4:  # a per-query mask (tree attention): see _tree_forward
            return self._tree_forward(ids, input_ids, attention_mask, past_key_values, use_cache)
        else:
            mask = attention_mask.to(self.device).bool()
            if mask.shape != ids.shape:
                raise invalid_argument("attention_mask.shape", tuple(mask.shape), f"(batch, cached + new) = {tuple(ids.shape)}")
        row = torch.zeros(batch, new, dtype=torch.long, device=self.device)
        cols = torch.arange(ids.shape[1], device=self.device)
        if self.context_len >= 1:
            row = input_ids.clone()
        if self.context_len == 2:
            # previous visible column strictly before each new column (-1 if none)
            visible_idx = torch.where(mask, cols.expand_as(ids), torch.full_like(ids, -1))
            prev = torch.cummax(visible_idx, dim=1).values  # last visible column <= c
            prev_excl = torch.cat([torch.full_like(prev[:, :1], -1), prev[:, :-1]], dim=1)[:, -new:]
            prev_tok = torch.where(prev_excl >= 0, ids.gather(1, prev_excl.clamp(min=0)), torch.zeros_like(prev_excl))
            row = prev_tok * self.vocab_size + input_ids
        logits = self.table_logits[row]
        new_cache = TabularCache(ids, mask) if use_cache else None
        return SimpleNamespace(logits=logits, cache=new_cache, past_key_values=new_cache)

    def _tree_forward(self, ids, input_ids, attention_mask, past_key_values, use_cache) -> SimpleNamespace:
        """Forward with a 4-D per-query mask ``(batch, 1, new, cached + new)``, as Hugging Face models take it.

        Bool masks: True = visible; float (additive) masks: 0 = visible.  Each new column's logits
        read its own token and, for ``context_len == 2``, the last column *that query* sees before
        it -- so a tree attention mask gives every draft node its own path as context, and a mask
        that lets a node see its sibling gives it the sibling as context, as attention would.
        """
        batch, new = input_ids.shape
        mask4 = attention_mask.to(self.device)
        if tuple(mask4.shape) != (batch, 1, new, ids.shape[1]):
            raise invalid_argument("attention_mask.shape", tuple(mask4.shape), f"(batch, 1, new, cached + new) = {(batch, 1, new, ids.shape[1])}")
        visible = mask4[:, 0].bool() if mask4.dtype == torch.bool else mask4[:, 0] == 0  # (batch, new, cached + new)
        row = torch.zeros(batch, new, dtype=torch.long, device=self.device)
        if self.context_len >= 1:
            row = input_ids.clone()
        if self.context_len == 2:
            cols = torch.arange(ids.shape[1], device=self.device)
            own = cols[None, None, :] < (ids.shape[1] - new + torch.arange(new, device=self.device))[None, :, None]
            prev = torch.where(visible & own, cols[None, None, :], torch.full_like(cols, -1)[None, None, :]).amax(dim=2)
            prev_tok = torch.where(prev >= 0, ids.gather(1, prev.clamp(min=0)), torch.zeros_like(prev))
            row = prev_tok * self.vocab_size + input_ids
        past_mask = past_key_values.mask if past_key_values is not None else ids[:, :0].bool()
        new_cache = TabularCache(ids, torch.cat([past_mask, torch.ones_like(input_ids, dtype=torch.bool)], dim=1)) if use_cache else None
        return SimpleNamespace(logits=self.table_logits[row], cache=new_cache, past_key_values=new_cache)


def processed_tabular(lm: TabularLM, sampling: SamplingConfig) -> TabularLM:
    """The table a decoder actually samples from under ``sampling``, as exact rationals.

    Each row goes through :func:`verifier.sampling.processed_probs` on ``log(row)`` (float64); the
    float64 entries are converted to Fractions exactly and renormalised, so the result differs from
    a decoder's float64 processed probs by float64 rounding only.  Feed it to ``verifier.exact``
    (``target_law``, ``n_token_law``) to get the exact law of a decoder at T != 1 or with top-k/top-p.

    Parameters
    ----------
    lm : TabularLM
        The unprocessed table.
    sampling : SamplingConfig
        Must not set ``repetition_penalty``, ``presence_penalty`` or ``frequency_penalty`` (they depend on the whole
        context, not a table row: :class:`verifier.exact.penalties.HistoryProcessedLM`); ``min_p`` is row-wise.

    Returns
    -------
    TabularLM
        Same vocabulary, context length and EOS; name ``"<name>|<sampling label>"``.

    Raises
    ------
    InvalidArgumentError
        If one of the three penalties is set.
    """
    from fractions import Fraction

    if sampling.repetition_penalty is not None:
        raise invalid_argument("sampling.repetition_penalty", sampling.repetition_penalty,
                               "None (a repetition penalty depends on the whole context, not one table row)")
    for key in ("presence_penalty", "frequency_penalty"):
        if getattr(sampling, key) is not None:
            raise invalid_argument(f"sampling.{key}", getattr(sampling, key), "None (it depends on the generated tokens, "
                                   "not one table row: verifier.exact.penalties.HistoryProcessedLM)")
    table = {}
    for ctx in lm.contexts:
        row = torch.tensor([float(f) for f in lm.probs(ctx)], dtype=torch.float64)
        logits = torch.where(row > 0, row.log(), torch.full_like(row, -float("inf")))
        probs = [Fraction(float(v)) for v in processed_probs(logits, sampling).tolist()]
        total = sum(probs)
        table[ctx] = [v / total for v in probs]
    return TabularLM(table, lm.vocab_size, lm.context_len, eos_token_id=lm.eos_token_id,
                     name=f"{lm.name}|{sampling.label()}")
