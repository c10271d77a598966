"""Plain (ancestral) sampling and the reference speculative decoder, batched over samples.

Both follow :class:`verifier.protocols.Decoder`: ``generate(prompt_ids, num_samples,
max_new_tokens, sampling, seed)`` returns int64 (num_samples, max_new_tokens), ``-1`` after EOS.
Both turn logits into probs with :func:`verifier.sampling.processed_probs` (float64) for target
and draft, with the context-token mask that a repetition penalty needs.

Rows are independent samples: in :class:`SpeculativeDecoder` every row accepts, rejects and
advances on its own; the target and draft KV caches are rolled back to each row's retained prefix
by hiding the rejected suffix in a per-row attention mask (see ``_runner.CacheRunner``).  Rows
that emitted EOS or reached ``max_new_tokens`` leave the batch.  Works on any device and model
dtype; all accept/reject arithmetic is float64.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch

from verifier.decoders import _fast32, _fused, _row_prompts
from verifier.decoders._runner import (COMPACT_HOLE_FRACTION, CacheRunner, check_prompt, model_device, model_eos_token_id,
                                       model_vocab_size)
from verifier.decoders.kernels import sample_from_probs, verify_chain
from verifier.errors import ModelLoadError, invalid_argument
from verifier.protocols import PADDING_TOKEN_ID, DecoderStats
from verifier.sampling import SamplingConfig, add_generated, processed_probs
from verifier.validation import check_stop_rule

__all__ = ["AncestralDecoder", "SpeculativeDecoder", "MAX_NUM_DRAFT_TOKENS", "row_logit_scale"]

MAX_NUM_DRAFT_TOKENS = 32  # beyond this the verify pass costs more than it can save
DROP_FRACTION = 0.125  # finished rows leave the batch once they are 1/8 of it (each drop copies the caches)
_FROM_CONFIG = object()  # sentinel: take eos_token_id from the target's config


def bind_model_pair(decoder, target, draft, eos_token_id=_FROM_CONFIG) -> None:
    """Set ``target, draft, device, vocab_size, eos_token_id, min_prompt_len`` on a chain or tree decoder.

    Raises
    ------
    ModelLoadError
        The draft is on another device than the target, or has another vocabulary size.
    """
    decoder.target, decoder.draft = target, draft
    decoder.device = model_device(target)
    if model_device(draft) != decoder.device:
        raise ModelLoadError(f"draft is on {model_device(draft)} but target on {decoder.device}; load both on one device")
    decoder.vocab_size = model_vocab_size(target)
    if model_vocab_size(draft) != decoder.vocab_size:
        raise ModelLoadError(f"target vocab_size={decoder.vocab_size} but draft vocab_size={model_vocab_size(draft)}; "
                             "speculative decoding needs one shared vocabulary")
    decoder.eos_token_id = model_eos_token_id(target) if eos_token_id is _FROM_CONFIG else eos_token_id
    decoder.min_prompt_len = max(int(getattr(m, "min_prompt_len", 1)) for m in (target, draft))


def _generate_iv(prompt_ids, num_samples, max_new_tokens, sampling, seed, vocab_size, min_prompt_len):
    for name, value, low in (("num_samples", num_samples, 1), ("max_new_tokens", max_new_tokens, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise invalid_argument(name, value, f"an integer >= {low}")
    if not isinstance(sampling, SamplingConfig):
        raise invalid_argument("sampling", sampling, "a verifier.SamplingConfig")
    return check_prompt(prompt_ids, vocab_size, min_prompt_len)


def row_logit_scale(row_temperatures, num_samples: int, sampling: SamplingConfig, device) -> torch.Tensor | None:
    """Per-row logit factors ``sampling.temperature / t_r`` for ``generate(..., row_temperatures=)``, or None.

    Row ``r`` then samples at temperature ``t_r`` with the rest of ``sampling``: the processed probs of
    ``logits * T / t_r`` at temperature ``T`` are those of ``logits`` at ``t_r`` (top-k keeps the same set, top-p
    cuts the rescaled probs, a repetition penalty commutes with a positive factor).  The batch-composition axis's
    filler rows at another temperature (issue 29, bug kind 1; :mod:`verifier.runner.batch`).

    Raises
    ------
    InvalidArgumentError
        Not ``num_samples`` finite numbers > 0, or ``sampling`` is greedy (T = 0 has no factor).
    """
    from verifier.validation import check_row_temperatures

    temps = check_row_temperatures(row_temperatures, num_samples, sampling)
    if temps is None:
        return None
    return torch.tensor([sampling.temperature / t for t in temps], dtype=torch.float64, device=device)


def _scaled(logits: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """``logits`` (batch, ..., vocab) times each row's factor (rows at their own temperature); as is without one."""
    if scale is None:
        return logits
    return logits * scale.view(-1, *([1] * (logits.ndim - 1))).to(logits.dtype)




def _work_path(settings: dict, sampling: SamplingConfig):
    """The per-step path over V: :mod:`_fast32` at float32 precision, :mod:`_fused` (float64) otherwise and whenever
    a presence / frequency penalty or min-p is set (the float32 path implements neither; float64 is exact there)."""
    if settings["precision"] == "float32" and not sampling.counts_generated and not sampling.min_p:
        return _fast32
    return _fused


def _right_aligned(emitted: torch.Tensor, start: torch.Tensor, stop: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``emitted[i, start_i:stop_i]`` per row, right-aligned in a (batch, max width) tensor + visible mask."""
    width = int((stop - start).max())
    offs = torch.arange(width, device=emitted.device)[None] - width  # -width .. -1
    src = stop[:, None] + offs
    visible = src >= start[:, None]
    tokens = emitted.gather(1, src.clamp(min=0))
    return torch.where(visible, tokens, torch.zeros_like(tokens)), visible


def _rows_to_keep(live: torch.Tensor) -> torch.Tensor | None:
    """Batch positions of the live rows when enough rows finished to be worth dropping, else None.

    Order (a swap-remove): the first ``num_live`` positions keep their row when it is live; each
    finished row among them is replaced by one of the live rows beyond ``num_live``, in order.  A
    cache then copies only the moved rows, in place (``_runner.CacheRunner.select_rows``), not
    every live row.  Rows are independent samples and each round draws fresh uniforms, so which
    batch position a row occupies does not change its law.
    """
    num_live = int(live.sum())
    dead = live.numel() - num_live
    if dead == 0 or (dead < DROP_FRACTION * live.numel() and dead < live.numel()):
        return None
    keep = torch.arange(num_live, device=live.device)
    holes = (~live[:num_live]).nonzero()[:, 0]
    keep[holes] = live[num_live:].nonzero()[:, 0] + num_live  # as many live rows beyond num_live as holes before it
    return keep


class _Output:
    """The (num_samples, max_new_tokens) result array and each row's write position.

    A row ends at its first EOS or request stop token (emitted, then padding) and after ``max_tokens`` emitted tokens
    (``max_new_tokens`` by default): the stop rule holds inside a round's block, not only at its end.  The stop-rule
    mutants (:mod:`verifier.decoders.stop_mutants`) override :meth:`_stop_cut` / :meth:`_room`.
    """

    def __init__(self, num_samples: int, max_new_tokens: int, eos_token_id: int | None, device,
                 stop_token_ids: Sequence[int] = (), max_tokens: int | None = None) -> None:
        self.tokens = torch.full((num_samples, max_new_tokens), PADDING_TOKEN_ID, dtype=torch.int64, device=device)
        self.origins = torch.full((num_samples, max_new_tokens), PADDING_TOKEN_ID, dtype=torch.int8, device=device)
        self.written = torch.zeros(num_samples, dtype=torch.int64, device=device)
        self.max_new_tokens = max_new_tokens
        self.limit = max_new_tokens if max_tokens is None else max_tokens  # the request's max_tokens
        self.eos_token_id = eos_token_id
        ends = set(stop_token_ids) | ({eos_token_id} if eos_token_id is not None else set())
        self.stop_ids = torch.tensor(sorted(ends), dtype=torch.int64, device=device)
        self.eos_ids = torch.tensor([] if eos_token_id is None else [eos_token_id], dtype=torch.int64, device=device)
        self.logprobs: torch.Tensor | None = None  # (num_samples, max_new_tokens) float64, NaN padding: return_logprobs

    def keep_logprobs(self) -> None:
        """Also record the reported logprob of every written token (``generate(..., return_logprobs=True)``)."""
        self.logprobs = torch.full(self.tokens.shape, float("nan"), dtype=torch.float64, device=self.tokens.device)

    def _stop_cut(self, emitted: torch.Tensor, count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(count cut after the first EOS or stop token among the first ``count``, whether one was written)."""
        cols = torch.arange(emitted.shape[1], device=emitted.device)[None]
        is_end = torch.isin(emitted, self.stop_ids) & (cols < count[:, None])
        hit = is_end.any(dim=1)
        return torch.where(hit, is_end.to(torch.int8).argmax(dim=1) + 1, count), hit

    def _room(self, written: torch.Tensor) -> torch.Tensor:
        """Tokens a row may still take: up to the request's limit."""
        return self.limit - written

    def write(self, rows: torch.Tensor, emitted: torch.Tensor, count: torch.Tensor,
              origins: torch.Tensor | None = None, logprobs: torch.Tensor | None = None) -> torch.Tensor:
        """Append the first ``count`` tokens of ``emitted`` (active, m) to ``rows``; cut at EOS, at a stop
        token and at the limit; ``origins`` / ``logprobs`` (active, m) go beside them.  Returns a bool (active,)
        mask of rows that are now finished."""
        m = emitted.shape[1]
        cols = torch.arange(m, device=emitted.device)[None]
        count, hit_eos = self._stop_cut(emitted, count)
        written = self.written[rows]
        count = torch.minimum(torch.minimum(count, self._room(written)), self.max_new_tokens - written)
        take = cols < count[:, None]
        r = rows[:, None].expand(-1, m)[take]
        self.tokens[r, (written[:, None] + cols).expand_as(take)[take]] = emitted[take]
        if origins is not None:  # DecoderStats.origins: where each emitted token came from
            self.origins[r, (written[:, None] + cols).expand_as(take)[take]] = origins[take]
        if logprobs is not None and self.logprobs is not None:  # the reported logprob of each emitted token
            self.logprobs[r, (written[:, None] + cols).expand_as(take)[take]] = logprobs[take]
        self.written[rows] = written + count
        return hit_eos | (written + count >= self.limit)


class AncestralDecoder:
    """Plain target sampling with a KV cache, batched over independent samples.

    Parameters
    ----------
    target : causal LM
        A Hugging Face causal LM (see :func:`verifier.models.load_model`) or a
        :class:`verifier.models.TabularCausalLM`, on any device/dtype.
    eos_token_id : int or None, optional
        Token that ends a row; default: the target config's ``eos_token_id``.
    name : str, default "ancestral"
    precision : {"auto", "float64", "float32"}, default "auto"
        Float type of the per-step work over V (:mod:`verifier.decoders._fast32`): ``"auto"`` is
        float64 up to V = 65,536 and float32 above; the one used is ``settings["precision"]``.

    Raises
    ------
    InvalidArgumentError
        ``precision`` is not one of the three.

    Notes
    -----
    Each step: logits of the last token -> :func:`verifier.sampling.processed_probs` -> one
    inverse-CDF draw per row from the seeded generator.  ``last_stats.rounds`` counts forward
    steps summed over rows.
    """

    def __init__(self, target, *, eos_token_id=_FROM_CONFIG, name: str = "ancestral", precision: str = "auto") -> None:
        self.target = target
        self.device = model_device(target)
        self.vocab_size = model_vocab_size(target)
        self.settings = {"precision": _fast32.resolve_precision(precision, self.vocab_size), "precision_option": precision}
        self.eos_token_id = model_eos_token_id(target) if eos_token_id is _FROM_CONFIG else eos_token_id
        self.min_prompt_len = int(getattr(target, "min_prompt_len", 1))
        self.name = name
        self.last_stats: DecoderStats | None = None

    def _uniforms(self, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """This step's uniform of each live row, float64 (live,): ``rows`` holds their indices in the call.  One
        fresh draw per row; the stream mutants (:mod:`verifier.decoders.stream_mutants`) override it."""
        return torch.rand(rows.numel(), dtype=torch.float64, device=self.device, generator=gen)

    def _output(self, num_samples: int, max_new_tokens: int, stop_token_ids: tuple[int, ...],
                max_tokens: int | None) -> _Output:
        """The result array and its stop rule (one token a step: the cut is the same per step or per round)."""
        return _Output(num_samples, max_new_tokens, self.eos_token_id, self.device, stop_token_ids, max_tokens)

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int,
                 sampling: SamplingConfig, seed: int, *, stop_token_ids: Sequence[int] = (),
                 max_tokens: int | None = None, row_temperatures: Sequence[float] | None = None,
                 row_prompts: Sequence[Sequence[int]] | None = None) -> np.ndarray:
        """Sample ``num_samples`` continuations of ``prompt_ids`` from the target.

        ``stop_token_ids`` / ``max_tokens``: the request's stop rule; ``row_temperatures``: a temperature per row;
        ``row_prompts``: a prompt per row (one padded batch); all as for :meth:`SpeculativeDecoder.generate`.

        Returns
        -------
        np.ndarray, shape (num_samples, max_new_tokens), int64
            Emitted tokens, ``-1`` after EOS (or a stop token, or ``max_tokens`` tokens).

        Raises
        ------
        InvalidArgumentError
            Bad prompt (empty, out-of-vocabulary id), counts < 1, seed < 0, not a SamplingConfig, a bad stop
            rule (:func:`verifier.validation.check_stop_rule`), bad ``row_temperatures`` (:func:`row_logit_scale`)
            or bad ``row_prompts`` (:func:`verifier.validation.check_row_prompts`).
        """
        prompt = _generate_iv(prompt_ids, num_samples, max_new_tokens, sampling, seed, self.vocab_size, self.min_prompt_len)
        stops, limit = check_stop_rule(stop_token_ids, max_tokens, max_new_tokens=max_new_tokens, vocab_size=self.vocab_size)
        scale = row_logit_scale(row_temperatures, num_samples, sampling, self.device)
        prompts = _row_prompts.row_prompt_list(prompt, row_prompts, num_samples, self.vocab_size, self.min_prompt_len)
        t0 = time.perf_counter()
        gen = torch.Generator(device=self.device).manual_seed(int(seed))
        width = max(len(p) for p in prompts)
        runner = CacheRunner(self.target, self.device, reserve_columns=width + max_new_tokens)  # one column a step
        _row_prompts.prefill(runner, prompts)
        rows = torch.arange(num_samples, device=self.device)
        live = torch.ones(num_samples, dtype=torch.bool, device=self.device)
        pending = _row_prompts.last_tokens(prompts, self.device)
        out = self._output(num_samples, max_new_tokens, stops, limit)
        use_seen = sampling.uses_context
        seen = _row_prompts.row_context(prompts, self.vocab_size, self.device, sampling)  # None without penalties
        steps = 0
        while rows.numel():
            logits = _scaled(runner.append(pending[:, None])[:, -1], scale)
            uniforms = self._uniforms(rows, gen)
            path = _work_path(self.settings, sampling)
            token = path.propose(logits, sampling, seen, uniforms)[0]  # _fused: = sample_from_probs(processed_probs(...)), in row blocks
            steps += int(live.sum())
            live = live & ~out.write(rows, token[:, None], live.to(torch.int64))
            if use_seen:
                add_generated(seen, torch.arange(rows.numel(), device=self.device), token)
            keep = _rows_to_keep(live)
            if keep is not None:
                runner.select_rows(keep)
                rows, token, live = rows[keep], token[keep], live[keep]
                scale = scale[keep] if scale is not None else None
                seen = seen[keep] if use_seen else None
            pending = token
        self.last_stats = DecoderStats(rounds=steps, num_draft_tokens=0,
                                       extra={"seconds": time.perf_counter() - t0, "device": str(self.device)})
        return out.tokens.cpu().numpy()


class SpeculativeDecoder:
    """Reference speculative decoder (Leviathan et al. 2023 Alg. 1; Chen et al. 2023 Alg. 2), batched.

    Parameters
    ----------
    target, draft : causal LM
        Hugging Face causal LMs or :class:`verifier.models.TabularCausalLM` with the same logits
        width (vocabulary), on the same device; any dtype.
    num_draft_tokens : int, default 4
        k, draft tokens proposed per round, 1..32.
    kernel : VerificationKernel, default :func:`verifier.decoders.verify_chain`
        The verify step; mutants plug in a different one.
    eos_token_id : int or None, optional
        Default: the target config's ``eos_token_id``.
    name : str, default "speculative"
    precision : {"auto", "float64", "float32"}, default "auto"
        Float type of the reference round's work over V: ``"float64"`` (bit-identical to the
        general path), ``"float32"`` (:mod:`verifier.decoders._fast32`: the float32 law, exact
        speculative sampling on it) or ``"auto"`` (float64 up to V = 65,536, float32 above).  Only
        the reference hooks and kernel have a float32 path; the one used is ``settings["precision"]``.

    Attributes
    ----------
    last_stats : DecoderStats
        After ``generate``: rounds (summed over rows), accepted count of every round, accepted
        count of each row's first round, acceptance rate.

    Raises
    ------
    InvalidArgumentError
        If ``num_draft_tokens`` is not an integer in 1..32, ``precision`` is not one of the three, or
        ``precision="float32"`` with hooks or a kernel other than the reference's.
    ModelLoadError
        If target and draft vocabularies or devices differ.

    Notes
    -----
    One round per active row (:meth:`_round`): the draft proposes d_1..d_k from its processed
    probs q; the target scores ``[x, d_1..d_k]`` in one pass giving processed probs p at k + 1
    positions; the kernel accepts a prefix, emits the recovered or bonus token; both caches hide
    the rejected suffix.  The emitted law equals plain target sampling for every k, sampling
    config and batch size; at T = 0 the output equals the target's greedy output.
    """

    roll_back_caches = True  # the "KV cache not rolled back" mutant sets this to False

    def __init__(self, target, draft, num_draft_tokens: int = 4, *, kernel: Callable = verify_chain,
                 eos_token_id=_FROM_CONFIG, name: str = "speculative", precision: str = "auto") -> None:
        k = num_draft_tokens
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_NUM_DRAFT_TOKENS:
            raise invalid_argument("num_draft_tokens", k, f"an integer in 1..{MAX_NUM_DRAFT_TOKENS}")
        self.num_draft_tokens, self.kernel = int(k), kernel
        bind_model_pair(self, target, draft, eos_token_id)
        used = _fast32.resolve_precision(precision, self.vocab_size)
        if used == "float32" and not self._fused():
            if precision == "float32":
                raise invalid_argument("precision", precision, "'auto' or 'float64' for this decoder (only the reference "
                                       "hooks and kernel have a float32 path)")
            used = "float64"  # auto: the mutants' hooks work on float64 processed probs
        self.settings = {"precision": used, "precision_option": precision}
        self.name = name
        self.last_stats: DecoderStats | None = None

    # -- hooks that mutants override (each is one line of the reference) --------------------
    def _propose(self, logits: torch.Tensor, sampling: SamplingConfig, seen, gen) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft token ~ q and the q handed to the kernel: (token (B,), q (B, V) float64)."""
        q = processed_probs(logits, sampling, seen)
        return sample_from_probs(q, torch.rand(q.shape[0], dtype=torch.float64, device=q.device, generator=gen)), q

    def _target_probs(self, logits: torch.Tensor, sampling: SamplingConfig, seen) -> torch.Tensor:
        """Processed target probs p (B, k + 1, V) float64."""
        return processed_probs(logits, sampling, seen)

    def _row_scale(self, scale: torch.Tensor | None) -> torch.Tensor | None:
        """Each row's logit factor (``row_temperatures``); the ``mixed_temperature_leak`` mutant returns row 0's."""
        return scale

    def _row_prompts(self, prompts: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """Each row's prompt as the call runs it (``row_prompts``); the ``prompt_length_leak`` mutant cuts or pads
        every row to slot 0's length."""
        return prompts

    def _fused(self) -> bool:
        """True when the hooks and kernel are the reference's: the round then runs in row blocks
        (:mod:`verifier.decoders._fused`, same tokens for the same seed, no (batch, k, vocab) probs)."""
        cls = type(self)
        return (self.kernel is verify_chain and cls._propose is SpeculativeDecoder._propose
                and cls._target_probs is SpeculativeDecoder._target_probs)

    # -- the algorithm ----------------------------------------------------------------------
    def _round(self, st: dict, sampling: SamplingConfig, gen: torch.Generator) -> torch.Tensor:
        """One round for every active row; returns emitted (active, k + 1), -1 padded."""
        k, dev = self.num_draft_tokens, self.device
        batch = st["target_pending"].shape[0]
        seen = st["seen"]  # (B, V) context (bool mask or codes, verifier.sampling.context_codes), only with a penalty
        ctx = [seen]  # ctx[j]: context mask after d_1..d_j
        # 1. draft: feed the emitted tokens it has not seen yet, then propose d_1..d_k ~ q
        fused = self._fused()
        path = _work_path(self.settings, sampling)
        logits = _scaled(st["draft"].append(st["draft_pending"], st["draft_pending_visible"])[:, -1], st.get("scale"))
        drafts, qs, draft_logits = [], [], []
        for j in range(k):
            if fused:  # q(d_j) only; the draft's logits stay for the residual of the rows that reject at j
                uniforms = torch.rand(batch, dtype=torch.float64, device=dev, generator=gen)
                token, q = path.propose(logits, sampling, ctx[j] if seen is not None else None, uniforms)
                draft_logits.append(logits)
            else:
                token, q = self._propose(logits, sampling, ctx[j] if seen is not None else None, gen)
            drafts.append(token)
            qs.append(q)
            if seen is not None:
                ctx.append(add_generated(ctx[j].clone(), torch.arange(batch, device=dev), token))
            if j < k - 1:
                logits = _scaled(st["draft"].append(token[:, None])[:, -1], st.get("scale"))
        draft_ids = torch.stack(drafts, dim=1)  # (B, k)
        # 2. target: one pass over [pending, d_1..d_k] gives p at the k draft positions and the bonus position
        t_logits = _scaled(st["target"].append(torch.cat([st["target_pending"], draft_ids], dim=1),
                                               torch.cat([st["target_pending_visible"],
                                                          torch.ones_like(draft_ids, dtype=torch.bool)], dim=1)),
                           st.get("scale"))
        # 3. verify: accepted prefix, then the recovered (residual) or bonus token
        if fused:
            emitted = path.verify_round(t_logits[:, -(k + 1):], draft_logits, torch.stack(qs, dim=1), draft_ids,
                                          sampling, ctx if seen is not None else None, gen)
        else:
            seen_stack = torch.stack(ctx, dim=1) if seen is not None else None
            target_probs = self._target_probs(t_logits[:, -(k + 1):], sampling, seen_stack)
            emitted = self.kernel(target_probs, torch.stack(qs, dim=1), draft_ids, gen)
        num_emitted = (emitted != PADDING_TOKEN_ID).sum(dim=1)
        # 4. roll back: keep the fed drafts that agree with the emitted tokens (the accepted prefix),
        #    hide the rejected suffix in both caches (target fed d_1..d_k, draft d_1..d_{k-1})
        agree = (emitted[:, :k] == draft_ids).to(torch.int64).cumprod(dim=1).sum(dim=1)
        retained = torch.minimum(agree, num_emitted - 1)  # the last emitted token is always fed next round
        if self.roll_back_caches:
            st["target"].rollback(torch.arange(k, device=dev)[None] < retained[:, None])
            st["draft"].rollback(torch.arange(k - 1, device=dev)[None] < retained[:, None])
        # 5. pending: emitted tokens each cache has not seen (1 for the target; the draft also lacks d_k)
        st["target_pending"], st["target_pending_visible"] = _right_aligned(emitted, retained, num_emitted)
        st["draft_pending"], st["draft_pending_visible"] = _right_aligned(emitted, retained.clamp(max=k - 1), num_emitted)
        st["retained"] = retained
        # origin of each emitted column: accepted drafts, then the recovered (or bonus) token, then any
        # draft suffix a mutant emits.  A recovered token equal to the rejected draft (impossible under
        # the canonical rule, whose residual is 0 there) is counted as accepted.
        cols = torch.arange(k + 1, device=dev)[None]
        last = torch.where(retained == k, 2, 1).to(torch.int8)[:, None]
        st["origins"] = torch.where(cols < retained[:, None], torch.zeros_like(cols, dtype=torch.int8),
                                    torch.where(cols == retained[:, None], last, torch.full_like(last, 3)))
        if st.get("want_logprobs"):  # generate(..., return_logprobs=True): log p of every emitted column
            if fused:
                lp_target = torch.stack([processed_probs(t_logits[:, j - (k + 1)], sampling, ctx[j] if seen is not None
                                                         else None).gather(-1, emitted[:, j:j + 1].clamp(min=0))[:, 0]
                                         for j in range(k + 1)], dim=1)
            else:
                lp_target = target_probs.gather(-1, emitted.clamp(min=0)[..., None])[..., 0]
            q_drafts = torch.stack([q if q.dim() == 1 else q.gather(-1, d[:, None])[:, 0] for q, d in zip(qs, drafts)], 1)
            st["round_logprobs"] = self._reported_logprobs(torch.log(lp_target), torch.log(q_drafts), retained)
        return emitted

    def _reported_logprobs(self, target_logprobs: torch.Tensor, draft_logprobs: torch.Tensor,
                           retained: torch.Tensor) -> torch.Tensor:
        """The logprob reported for each emitted column of a round (``return_logprobs``).

        ``target_logprobs`` (B, k + 1): log p of the emitted token at each column, the processed target prob given
        its prefix (the right value); ``draft_logprobs`` (B, k): log q(d_j) of each draft token; ``retained`` (B,):
        accepted drafts (the columns before it are accepted drafts, the column at it the recovered or bonus token).
        The reference reports ``target_logprobs``; the logprob zoo (:mod:`verifier.decoders.logprob_mutants`)
        overrides this hook.  Columns past the emitted ones are ignored."""
        return target_logprobs

    def _output(self, num_samples: int, max_new_tokens: int, stop_token_ids: tuple[int, ...],
                max_tokens: int | None) -> _Output:
        """The result array and its stop rule (the stop-rule mutants return one that checks it only per round)."""
        return _Output(num_samples, max_new_tokens, self.eos_token_id, self.device, stop_token_ids, max_tokens)

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int,
                 sampling: SamplingConfig, seed: int, *, stop_token_ids: Sequence[int] = (),
                 max_tokens: int | None = None, row_temperatures: Sequence[float] | None = None,
                 row_prompts: Sequence[Sequence[int]] | None = None, return_logprobs: bool = False):
        """Sample ``num_samples`` continuations of ``prompt_ids`` by speculative decoding.

        Parameters
        ----------
        prompt_ids : sequence of int
            At least one token (at least ``context_len`` for tabular models).
        num_samples : int
            Independent rows, all run as one batch.
        max_new_tokens : int
            Exact number of columns returned; tokens beyond it are discarded.
        sampling : SamplingConfig
        seed : int
            Seeds a ``torch.Generator`` on the models' device; same seed, same array.
        stop_token_ids : sequence of int, default ()
            The request's stop tokens beside EOS: a row ends at the first one it emits (emitted, then padding),
            also inside a round's accepted block (issue 29, bug kind 5).
        max_tokens : int or None, default None
            The request's length limit, at most ``max_new_tokens``: a row holds at most this many tokens, also
            when the last round's block would run past it.  None: ``max_new_tokens``.
        return_logprobs : bool, default False
            Also return the logprob reported for each emitted token (issue 29, bug kind 4): the natural log of its
            *processed* target prob (after temperature, top-k / top-p, repetition penalty) given the prompt and
            the row's earlier tokens, read off the verification pass's target probs -- the value an engine with
            speculation off reports in a processed logprobs mode (vLLM: ``--logprobs-mode processed_logprobs``;
            its default ``raw_logprobs`` is the temperature-1 softmax before any processor).
        row_temperatures : sequence of float or None, default None
            A temperature per row (> 0) in place of ``sampling.temperature``, the rest of ``sampling`` shared: a batch
            of rows at other temperatures (issue 29, bug kind 1: the ``batch_composition`` axis's filler rows).  Each
            row's target and draft logits are multiplied by ``sampling.temperature / t_r``
            (:func:`row_logit_scale`).  None: every row at ``sampling``.
        row_prompts : sequence of sequence of int, or None, default None
            A prompt per row in place of ``prompt_ids`` (issue 29, bug kind 1: the ``batch_composition`` axis's
            mixed-prompts levels, filler rows with prompts of other lengths).  The call runs as one padded batch: each
            row's context left-padded to the longest with a masked dummy token, its own position ids, last prompt
            token and penalty context (:mod:`verifier.decoders._row_prompts`), so row ``r`` is exact speculative
            sampling after ``row_prompts[r]``.  Rows sharing one prompt are the call without it, token for token.

        Returns
        -------
        np.ndarray, shape (num_samples, max_new_tokens), int64
            Emitted tokens, ``-1`` after EOS (EOS itself is emitted), a stop token or ``max_tokens`` tokens.
            With ``return_logprobs``: ``(tokens, logprobs)``, logprobs float64 of the same shape, NaN at padding.

        Raises
        ------
        InvalidArgumentError
            Bad prompt, counts < 1, seed < 0, ``sampling`` not a SamplingConfig, a bad stop rule
            (:func:`verifier.validation.check_stop_rule`), bad ``row_temperatures`` (:func:`row_logit_scale`) or
            bad ``row_prompts`` (:func:`verifier.validation.check_row_prompts`).
        """
        prompt = _generate_iv(prompt_ids, num_samples, max_new_tokens, sampling, seed, self.vocab_size, self.min_prompt_len)
        stops, limit = check_stop_rule(stop_token_ids, max_tokens, max_new_tokens=max_new_tokens, vocab_size=self.vocab_size)
        scale = self._row_scale(row_logit_scale(row_temperatures, num_samples, sampling, self.device))
        prompts = self._row_prompts(_row_prompts.row_prompt_list(prompt, row_prompts, num_samples, self.vocab_size,
                                                                 self.min_prompt_len))
        t0 = time.perf_counter()
        dev = self.device
        gen = torch.Generator(device=dev).manual_seed(int(seed))
        # cache columns: visible tokens (prompt + emitted, up to k + 1 past max_new_tokens) plus the
        # masked holes, at most COMPACT_HOLE_FRACTION of the columns after a rollback, plus one round
        k = self.num_draft_tokens
        width = max(len(p) for p in prompts)  # the longest row's prompt (rows with shorter ones are left-padded)
        reserve = int((width + max_new_tokens + k + 1) / (1 - COMPACT_HOLE_FRACTION)) + k + 1
        st = {"target": CacheRunner(self.target, dev, reserve), "draft": CacheRunner(self.draft, dev, reserve)}
        _row_prompts.prefill(st["target"], prompts)
        _row_prompts.prefill(st["draft"], prompts)
        last = _row_prompts.last_tokens(prompts, dev)
        st["target_pending"] = st["draft_pending"] = last[:, None]
        st["target_pending_visible"] = st["draft_pending_visible"] = torch.ones_like(last[:, None], dtype=torch.bool)
        st["seen"] = _row_prompts.row_context(prompts, self.vocab_size, dev, sampling)  # None without penalties
        st["scale"] = scale
        rows = torch.arange(num_samples, device=dev)  # original index of each batch row
        st["rows"] = rows  # a row's slot in the call, for hooks that depend on it (verifier.decoders.batch_mutants)
        live = torch.ones(num_samples, dtype=torch.bool, device=dev)  # finished rows idle until dropped
        out = self._output(num_samples, max_new_tokens, stops, limit)
        if return_logprobs:
            out.keep_logprobs()
            st["want_logprobs"] = True
        accepted_counts, first_round = [], None
        while rows.numel():
            emitted = self._round(st, sampling, gen)
            num_emitted = (emitted != PADDING_TOKEN_ID).sum(dim=1)
            num_accepted = st["retained"]
            if self.eos_token_id is not None:
                # drafts after an accepted EOS are never emitted: count accepted drafts up to and
                # including the EOS, as verifier.exact.accepted_count_law does
                pos = torch.arange(1, k + 1, device=dev)
                first_eos = torch.where(emitted[:, :k] == self.eos_token_id, pos, k + 1).amin(dim=1)
                num_accepted = torch.minimum(num_accepted, first_eos)
            accepted_counts.append(num_accepted[live])
            if first_round is None:
                first_round = num_accepted.clone()
            if st["seen"] is not None:
                valid = emitted != PADDING_TOKEN_ID
                r = torch.arange(rows.numel(), device=dev)[:, None].expand_as(emitted)[valid]
                add_generated(st["seen"], r, emitted[valid])
            live = live & ~out.write(rows, emitted, torch.where(live, num_emitted, 0), st.get("origins"),
                                     st.get("round_logprobs"))
            keep = _rows_to_keep(live)
            if keep is not None:
                rows, live = rows[keep], live[keep]
                st["rows"] = rows
                st["target"].select_rows(keep)
                st["draft"].select_rows(keep)
                for key in ("target_pending", "target_pending_visible", "draft_pending", "draft_pending_visible", "seen",
                            "scale"):
                    if st[key] is not None:
                        st[key] = st[key][keep]
        counts = torch.cat(accepted_counts).cpu().numpy().astype(np.int64)
        self.last_stats = DecoderStats(
            rounds=int(counts.size), accepted_counts=counts, num_draft_tokens=self.num_draft_tokens,
            first_round_accepted=first_round.cpu().numpy().astype(np.int64),
            extra={"seconds": time.perf_counter() - t0, "device": str(dev)},
            origins=out.origins.cpu().numpy(),
        )
        if return_logprobs:
            return out.tokens.cpu().numpy(), out.logprobs.cpu().numpy()
        return out.tokens.cpu().numpy()
