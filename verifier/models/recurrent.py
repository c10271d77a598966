"""Recurrent (state-space) targets as the stateful models a speculative decoder steps, snapshots and restores.

Issue 29, bug kind 8.  A state-space layer (Mamba, Mamba2, gated delta nets) keeps a fixed-size state per row that
every consumed token overwrites: there is no column to hide, so a rejected draft can only be undone by restoring a
copy of the state.  Two adapters share one small protocol used by :mod:`verifier.decoders.recurrent`:

* :class:`RecurrentStateLM` -- a :class:`~verifier.exact.recurrent.RecurrentLM` (rational finite-state machine) in
  torch: the state is one state id per row; its laws are enumerated exactly by :func:`verifier.exact.recurrent.recurrent_law`;
* :class:`HFStateSpaceLM` -- a Hugging Face state-space causal LM (``MambaForCausalLM``, ``Mamba2ForCausalLM``; the
  torch reference path runs on CPU) whose ``DynamicCache`` holds per layer a ``conv_states`` window (the last
  ``conv_kernel`` inputs: the part a position-based rollback such as ``DynamicCache.crop`` restores) and a
  ``recurrent_states`` SSM state (the part ``crop`` cannot restore: ``is_croppable`` is False once it exists).

Protocol: ``vocab_size``, ``device``, ``min_prompt_len``; ``start(prompt, batch)`` consumes ``prompt[:-1]`` for
``batch`` rows; ``step(tokens (batch,)) -> logits (batch, vocab)`` consumes one token per row and returns the
next-token logits; ``snapshot()`` copies the state; ``restore(snapshot, rows (batch,) bool, parts)`` puts the
snapshot back in the selected rows for the named parts (:data:`STATE_PARTS`).
"""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace
from typing import Sequence

import numpy as np
import torch

from verifier.errors import invalid_argument
from verifier.exact.recurrent import RecurrentLM, parity3
from verifier.exact.tabular import TabularLM

__all__ = ["STATE_PARTS", "RecurrentStateLM", "HFStateSpaceLM", "as_recurrent_target", "random_mamba", "parity3_target",
           "parity3_draft", "random_bigram", "mamba16_target"]

STATE_PARTS = ("conv", "recurrent")  # conv: the sliding window of recent inputs (position-like); recurrent: the SSM state


def _parts_iv(parts: Sequence[str]) -> tuple[str, ...]:
    parts = tuple(parts)
    if not set(parts) <= set(STATE_PARTS):
        raise invalid_argument("parts", parts, f"a subset of {STATE_PARTS}")
    return parts


class RecurrentStateLM(torch.nn.Module):
    """A :class:`~verifier.exact.recurrent.RecurrentLM` as a steppable torch model (state: one id per row).

    Also a causal LM for the runner's reference probs: ``model(input_ids).logits`` (batch, seq, vocab) runs the
    machine from its start state over each row (so a suite names it ``module:factory``, e.g.
    :func:`parity3_target`).

    Parameters
    ----------
    machine : RecurrentLM

    Notes
    -----
    The logits are ``log`` of the float64 rows (``-inf`` at 0), so processed probs at T = 1 are the rows up to
    float64 rounding.  The whole state is ``"recurrent"``: restoring only ``"conv"`` restores nothing.

    Examples
    --------
    >>> from verifier.exact.recurrent import parity3
    >>> lm = RecurrentStateLM(parity3()[0]); lm.start([0, 0], 1)
    >>> [round(v, 3) for v in lm.step(torch.tensor([1])).exp()[0].tolist()]  # state (1, odd)
    [0.1, 0.6, 0.3]
    """

    min_prompt_len = 1
    device = torch.device("cpu")

    def __init__(self, machine: RecurrentLM) -> None:
        super().__init__()
        if not isinstance(machine, RecurrentLM):
            raise invalid_argument("machine", type(machine).__name__, "a verifier.exact.recurrent.RecurrentLM")
        self.machine = machine
        self.vocab_size = machine.vocab_size
        rows = torch.tensor([[float(p) for p in row] for row in machine.rows], dtype=torch.float64)
        table = torch.where(rows > 0, rows.log(), torch.full_like(rows, -math.inf))
        self.logits_table = torch.nn.Parameter(table, requires_grad=False)  # a parameter: the runner reads its device
        self.next_state = torch.tensor(machine.transitions, dtype=torch.int64)
        self.state = torch.zeros(0, dtype=torch.int64)
        self.config = SimpleNamespace(vocab_size=self.vocab_size, eos_token_id=None, name_or_path=f"recurrent:{machine.name}")

    def forward(self, input_ids: torch.Tensor, **kwargs) -> SimpleNamespace:
        """Logits (batch, seq, vocab) after each prefix of ``input_ids``, from the start state (no cache)."""
        state = torch.full((input_ids.shape[0],), self.machine.start_state, dtype=torch.int64)
        out = []
        for j in range(input_ids.shape[1]):
            state = self.next_state[state, input_ids[:, j].cpu()]
            out.append(self.logits_table[state])
        return SimpleNamespace(logits=torch.stack(out, dim=1).detach())

    def start(self, prompt: Sequence[int], batch: int) -> None:
        self.state = torch.full((batch,), self.machine.state_after(list(prompt)[:-1]), dtype=torch.int64)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.state = self.next_state[self.state, tokens]
        return self.logits_table[self.state]

    def snapshot(self) -> torch.Tensor:
        return self.state.clone()

    def restore(self, snapshot: torch.Tensor, rows: torch.Tensor, parts: Sequence[str] = STATE_PARTS) -> None:
        if "recurrent" in _parts_iv(parts):
            self.state = torch.where(rows, snapshot, self.state)


class HFStateSpaceLM:
    """A Hugging Face state-space causal LM stepped one token at a time through its ``DynamicCache``.

    Parameters
    ----------
    model : transformers PreTrainedModel
        A causal LM whose cache layers hold ``conv_states`` / ``recurrent_states`` (transformers >= 5 linear-attention
        cache layers: Mamba, Mamba2, ...), in eval mode.  Checked on random ``MambaForCausalLM`` and
        ``Mamba2ForCausalLM`` (transformers 5.24, torch path on CPU): stepped logits equal a full forward's within
        1e-6, a restored row continues as if the extra token had never been fed (``tests/models/test_recurrent_mamba.py``).

    Raises
    ------
    InvalidArgumentError
        From :meth:`start`: a prompt of fewer than 2 tokens (``prompt[:-1]`` is prefilled), or a model whose cache
        has no state-space layer.
    """

    min_prompt_len = 2

    def __init__(self, model) -> None:
        self.model = model
        self.vocab_size = int(model.config.vocab_size)
        self.device = next(model.parameters()).device
        self.cache = None

    def _layers(self):
        return [layer for layer in self.cache.layers if hasattr(layer, "recurrent_states")]

    @torch.no_grad()
    def start(self, prompt: Sequence[int], batch: int) -> None:
        prompt = list(prompt)
        if len(prompt) < self.min_prompt_len:
            raise invalid_argument("prompt_ids", prompt, f"at least {self.min_prompt_len} tokens (prompt[:-1] is prefilled)")
        ids = torch.tensor([prompt[:-1]] * batch, dtype=torch.int64, device=self.device)
        self.cache = self.model(ids, use_cache=True).cache
        if not self._layers():
            raise invalid_argument("target", type(self.model).__name__, "a state-space model (cache layers with "
                                   "conv_states / recurrent_states: Mamba, Mamba2)")

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        out = self.model(tokens[:, None].to(self.device), cache=self.cache, use_cache=True)
        self.cache = out.cache
        return out.logits[:, -1].to(torch.float64)

    def snapshot(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.conv_states[0].clone(), layer.recurrent_states[0].clone()) for layer in self._layers()]

    def restore(self, snapshot, rows: torch.Tensor, parts: Sequence[str] = STATE_PARTS) -> None:
        parts = _parts_iv(parts)
        for layer, (conv, rec) in zip(self._layers(), snapshot):
            for name, saved, current in (("conv", conv, layer.conv_states[0]), ("recurrent", rec, layer.recurrent_states[0])):
                if name in parts:
                    mask = rows.to(current.device).view(-1, *([1] * (current.dim() - 1)))
                    current.copy_(torch.where(mask, saved, current))  # in place: the cache keeps its tensors


def as_recurrent_target(target):
    """The steppable adapter of ``target``: a RecurrentLM is wrapped, an adapter kept, a transformers model wrapped.

    Raises
    ------
    InvalidArgumentError
        ``target`` is none of these.
    """
    if isinstance(target, RecurrentLM):
        return RecurrentStateLM(target)
    if all(hasattr(target, a) for a in ("start", "step", "snapshot", "restore")):
        return target
    if hasattr(target, "config") and hasattr(target, "forward") and _has_parameters(target):
        return HFStateSpaceLM(target)
    raise invalid_argument("target", type(target).__name__, "a RecurrentLM, a recurrent adapter or a transformers "
                           "state-space causal LM")


def _has_parameters(model) -> bool:
    """Whether ``model`` is a torch module with weights (a tabular model wrapped for decoders has none: no state)."""
    params = getattr(model, "parameters", None)
    return callable(params) and next(iter(params()), None) is not None


def random_mamba(vocab_size: int = 16, *, hidden_size: int = 32, num_layers: int = 2, state_size: int = 8,
                 seed: int = 0, scale: float = 8.0, decay_rate: float = 0.05, input_scale: float = 16.0):
    """A tiny randomly initialised ``MambaForCausalLM`` for CPU tests (the torch reference path).

    Parameters
    ----------
    vocab_size, hidden_size, num_layers, state_size : int
    seed : int, default 0
        ``torch.manual_seed`` for the init.
    scale : float, default 8.0
        Multiplies the output head, so the next-token law is peaked and depends on the state (a random init alone
        gives near-uniform rows, where no state bug is visible).
    decay_rate : float, default 0.05
        Every SSM channel's ``A = -decay_rate`` (``A_log`` filled with its log; the init's ``-1..-state_size``
        forgets within a few tokens).
    input_scale : float, default 16.0
        Multiplies ``x_proj`` (the input-dependent dt, B, C).  What a state that keeps two rejected drafts (conv
        window rolled back, SSM state not) does to the next token's law, mean TV over 256 random (d_1, d_2, y) after
        prompt (1, 2, 3), seed 0: 0.012 with ``input_scale = 4``, 0.065 with 8 (decay 0.02), 0.32 with 16.  With the
        init as it is, two tokens placed beyond the conv window move the law by TV 0.0003: only the conv window
        matters and no state bug is visible.
    Returns
    -------
    transformers.MambaForCausalLM
        In eval mode, float32, on CPU; ``eos_token_id`` None.
    """
    from transformers import MambaConfig, MambaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the "falling back to the reference PyTorch implementation" notes
    torch.manual_seed(seed)
    config = MambaConfig(vocab_size=vocab_size, hidden_size=hidden_size, state_size=state_size,
                         num_hidden_layers=num_layers, conv_kernel=4, expand=2, tie_word_embeddings=False,
                         eos_token_id=None)  # no EOS: the recurrent decoders run every row to max_new_tokens
    model = MambaForCausalLM(config).eval()
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.eos_token_id = None
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
        for layer in model.backbone.layers:  # a state that remembers past the conv window (docstring)
            layer.mixer.A_log.fill_(math.log(decay_rate))
            layer.mixer.x_proj.weight.mul_(input_scale)
    return model


# -- zero-argument factories for suites (``target = "verifier.models.recurrent:parity3_target"``) ---------------------
def parity3_target() -> RecurrentStateLM:
    """The target of :func:`verifier.exact.recurrent.parity3` as a steppable causal LM."""
    return RecurrentStateLM(parity3()[0])


def parity3_draft() -> TabularLM:
    """The bigram draft of :func:`verifier.exact.recurrent.parity3`."""
    return parity3()[1]


def random_bigram(vocab_size: int = 16, seed: int = 0) -> TabularLM:
    """A random rational bigram drafter: row ``a`` has weights ``integers(1, 10)`` (numpy seed ``seed``) over their sum."""
    rng = np.random.default_rng(seed)
    rows = {}
    for a in range(vocab_size):
        w = rng.integers(1, 10, size=vocab_size)
        rows[(a,)] = [Fraction(int(x), int(w.sum())) for x in w]
    return TabularLM(rows, vocab_size=vocab_size, context_len=1, name=f"bigram{vocab_size}")


def mamba16_target():
    """:func:`random_mamba` at its defaults (vocabulary 16, seed 0): pairs with :func:`random_bigram`."""
    return random_mamba(16, seed=0)
