"""Hugging Face transformers' speculative-sampling verify step, behind the kernel protocol.

transformers implements the verify step of assisted generation with ``do_sample=True`` in
``transformers.generation.utils._speculative_sampling(candidate_input_ids, candidate_logits,
candidate_length, new_logits, assistant_ensemble_weight=None) -> (valid_tokens, n_matches)``
(Leviathan et al. 2023, Algorithm 1).  This module exposes it as a
:class:`~verifier.protocols.VerificationKernel` so it can be driven with synthetic processed
probs millions of times (:mod:`verifier.audit.kernel_audit`), and goes the other way too:
:func:`kernel_as_hf_speculative_sampling` turns any kernel (e.g. the decoder engineer's
full-p-fallback mutant) into a drop-in replacement for ``_speculative_sampling``, so a defect can be
injected into transformers' real ``generate`` loop (:func:`patched_speculative_sampling`).

Facts read from the installed source (transformers 5.x):

* The function handles **batch size 1 only**: ``n_matches`` is a ``.sum()`` over the whole
  batch, and the probability gather broadcasts rows against each other.  The adapter therefore
  loops over rows (about 110 us per call on an idle CPU core, ~9k draws/s per core) and can split
  a large batch over worker processes (``make_hf_kernel(num_workers=...)``).
* Its randomness is the global torch RNG (``torch.rand_like``, ``torch.multinomial``); the adapter
  seeds it from the protocol's ``generator`` inside :func:`torch.random.fork_rng`, so results are
  reproducible and the caller's global RNG is untouched.
* ``assistant_ensemble_weight`` (documented lossy option, "static ensemble verification"):
  with weight ``w`` in (0, 1) the draft token is accepted with probability
  ``min(1, 1 - w + w * p(x) / q(x))`` and the residual is still ``[p - q]+``; the output law is
  then :func:`ensemble_step_law`, not the target.  ``None`` keeps decoding lossless.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
from fractions import Fraction
from typing import Callable, Iterator, Sequence

import torch

from verifier.errors import invalid_argument
from verifier.exact.tabular import as_fraction_probs
from verifier.protocols import PADDING_TOKEN_ID, VerificationKernel

__all__ = [
    "hf_speculative_kernel",
    "make_hf_kernel",
    "hf_supports_ensemble_weight",
    "ensemble_step_law",
    "kernel_as_hf_speculative_sampling",
    "patched_speculative_sampling",
]

SEED_BOUND = 2**62  # seeds drawn from the protocol's generator for the global RNG HF uses


def _hf_function() -> Callable:
    from transformers.generation import utils as hf_utils

    return hf_utils._speculative_sampling


def hf_supports_ensemble_weight() -> bool:
    """True when the installed transformers' ``_speculative_sampling`` takes ``assistant_ensemble_weight``."""
    return "assistant_ensemble_weight" in inspect.signature(_hf_function()).parameters


def hf_speculative_kernel(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    generator: torch.Generator,
    *,
    assistant_ensemble_weight: float | None = None,
) -> torch.Tensor:
    """Run transformers' ``_speculative_sampling`` as a verification kernel.

    Parameters
    ----------
    target_probs : torch.Tensor, shape (batch, num_draft_tokens + 1, vocab), float64
        Processed target probs; the ``+ 1`` row is where the bonus token is sampled.
    draft_probs : torch.Tensor, shape (batch, num_draft_tokens, vocab), float64
        Processed draft probs the draft tokens were sampled from.
    draft_token_ids : torch.Tensor, shape (batch, num_draft_tokens), int64
    generator : torch.Generator
        Seeds the global RNG that transformers draws from (inside ``fork_rng``).
    assistant_ensemble_weight : float or None, default None
        Passed through; ``None`` is the lossless path.  A weight in (0, 1) is the documented lossy
        "static ensemble verification".

    Returns
    -------
    torch.Tensor, shape (batch, num_draft_tokens + 1), int64
        Accepted drafts, then the recovered or bonus token, then ``PADDING_TOKEN_ID`` (-1).

    Notes
    -----
    Probs are passed as logits ``log(probs)`` (``-inf`` where a prob is 0); transformers applies
    ``softmax``, which returns the same probs.  Rows are verified one at a time because the
    function only supports batch size 1.

    References
    ----------
    Leviathan, Kalman, Matias (2023), "Fast Inference from Transformers via Speculative
    Decoding", Algorithm 1; transformers ``generation/utils.py::_speculative_sampling``.
    """
    fn = _hf_function()
    batch, k_plus_1, vocab = target_probs.shape
    k = k_plus_1 - 1
    if draft_probs.shape != (batch, k, vocab) or draft_token_ids.shape != (batch, k):
        raise invalid_argument(
            "draft_probs.shape/draft_token_ids.shape", (tuple(draft_probs.shape), tuple(draft_token_ids.shape)),
            f"({batch}, {k}, {vocab}) and ({batch}, {k}) to match target_probs{tuple(target_probs.shape)}",
        )
    kwargs = {}
    if assistant_ensemble_weight is not None:
        if not hf_supports_ensemble_weight():
            raise invalid_argument("assistant_ensemble_weight", assistant_ensemble_weight, "None (this transformers has no ensemble option)")
        kwargs["assistant_ensemble_weight"] = float(assistant_ensemble_weight)
    target_logits = torch.log(target_probs.to(torch.float64).cpu())
    draft_logits = torch.log(draft_probs.to(torch.float64).cpu())
    ids = draft_token_ids.to(torch.int64).cpu()
    out = torch.full((batch, k + 1), PADDING_TOKEN_ID, dtype=torch.int64)
    seed = int(torch.randint(0, SEED_BOUND, (1,), generator=generator))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny per-row ops: intra-op threads only add overhead (25x slower on a busy 2-core box)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for b in range(batch):
                valid, _ = fn(ids[b : b + 1], draft_logits[b : b + 1], k, target_logits[b : b + 1], **kwargs)
                out[b, : valid.shape[1]] = valid[0]
    finally:
        torch.set_num_threads(threads)
    return out


def _hf_chunk(args: tuple) -> torch.Tensor:
    target_probs, draft_probs, draft_token_ids, seed, weight = args
    gen = torch.Generator().manual_seed(seed)
    return hf_speculative_kernel(target_probs, draft_probs, draft_token_ids, gen, assistant_ensemble_weight=weight)


_POOLS: dict[int, "object"] = {}  # process pools by size, shared by every HF kernel of this process


@atexit.register
def _shutdown_pools() -> None:
    """Stop worker processes before interpreter teardown (avoids noisy executor-thread errors at exit)."""
    for pool in list(_POOLS.values()):
        pool.shutdown(wait=True, cancel_futures=True)
    _POOLS.clear()
MIN_ROWS_PER_WORKER = 2000  # below this the pickling and IPC cost more than the parallelism saves


class _HFKernel:
    """``hf_speculative_kernel`` with a fixed ensemble weight (what :func:`make_hf_kernel` returns)."""

    def __init__(self, assistant_ensemble_weight: float | None, num_workers: int = 1) -> None:
        self.assistant_ensemble_weight = assistant_ensemble_weight
        self.num_workers = num_workers
        w = assistant_ensemble_weight
        self.name = "hf_speculative_sampling" if w is None else f"hf_speculative_sampling[assistant_ensemble_weight={w:g}]"

    def __call__(self, target_probs, draft_probs, draft_token_ids, generator):
        batch = draft_token_ids.shape[0]
        workers = min(self.num_workers, batch // MIN_ROWS_PER_WORKER)
        if workers <= 1:
            return hf_speculative_kernel(
                target_probs, draft_probs, draft_token_ids, generator, assistant_ensemble_weight=self.assistant_ensemble_weight
            )
        import concurrent.futures as cf
        import multiprocessing as mp

        pool = _POOLS.get(workers)
        if pool is None:
            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"  # fork: no re-import of torch/transformers
            # one torch thread before any op: a forked child must never enter the parent's OpenMP pool (it would hang)
            pool = _POOLS[workers] = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(method),
                                                             initializer=torch.set_num_threads, initargs=(1,))
        bounds = torch.linspace(0, batch, workers + 1).long().tolist()
        seeds = torch.randint(0, SEED_BOUND, (workers,), generator=generator).tolist()
        tasks = [(target_probs[a:b].cpu(), draft_probs[a:b].cpu(), draft_token_ids[a:b].cpu(), int(seed), self.assistant_ensemble_weight)
                 for (a, b), seed in zip(zip(bounds[:-1], bounds[1:]), seeds)]
        return torch.cat(list(pool.map(_hf_chunk, tasks)), dim=0)


def make_hf_kernel(assistant_ensemble_weight: float | None = None, num_workers: int = 1) -> VerificationKernel:
    """Factory for a plugin spec: ``verifier.engines.hf_kernel:make_hf_kernel``.

    Parameters
    ----------
    assistant_ensemble_weight : float or None, default None
        ``None`` is transformers' lossless path; a weight in (0, 1) its documented lossy option.
    num_workers : int, default 1
        Spawned processes that verify disjoint row ranges of a large batch (the function itself takes
        batch size 1); results depend on the seed and ``num_workers``, not on scheduling.

    Raises
    ------
    InvalidArgumentError
        If the weight is not None and not in the open interval (0, 1), or ``num_workers < 1``.
    """
    w = assistant_ensemble_weight
    if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w < 1):
        raise invalid_argument("assistant_ensemble_weight", w, "None (lossless) or a number in (0, 1)")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise invalid_argument("num_workers", num_workers, "an integer >= 1")
    return _HFKernel(w, num_workers)


def ensemble_step_law(target_probs: Sequence, draft_probs: Sequence, weight) -> tuple[Fraction, ...]:
    """Exact output law of one verify step under transformers' ``assistant_ensemble_weight``.

    The draft token ``x ~ q`` is accepted with probability ``min(1, 1 - w + w p(x)/q(x))`` and a
    rejection samples the residual ``[p - q]+ / sum [p - q]+`` (the target itself when that sum is 0,
    as transformers does), so

    ``law(x) = min(q(x), (1 - w) q(x) + w p(x)) + rejection_prob * residual(x)``.

    Parameters
    ----------
    target_probs, draft_probs : sequence, shape (vocab,)
        Processed target and draft probs (converted to exact fractions; must sum to 1).
    weight : Fraction, str or float
        The ensemble weight ``w``; ``w = 1`` is the canonical (lossless) rule.

    Returns
    -------
    tuple of Fraction, shape (vocab,)

    Examples
    --------
    >>> [str(v) for v in ensemble_step_law(["1/5", "1/2", "3/10"], ["1/2", "3/10", "1/5"], "1/2")]
    ['7/20', '2/5', '1/4']
    """
    p = as_fraction_probs(target_probs, name="target_probs")
    q = as_fraction_probs(draft_probs, name="draft_probs")
    if len(p) != len(q):
        raise invalid_argument("len(draft_probs)", len(q), f"len(target_probs)={len(p)}")
    w = Fraction(repr(weight)) if isinstance(weight, float) else Fraction(weight)
    if not 0 < w <= 1:
        raise invalid_argument("weight", str(w), "a number in (0, 1]")
    accepted = [min(qi, (1 - w) * qi + w * pi) for pi, qi in zip(p, q)]
    rejection = 1 - sum(accepted)
    plus = [max(Fraction(0), pi - qi) for pi, qi in zip(p, q)]
    total = sum(plus)
    residual = [v / total for v in plus] if total > 0 else list(p)
    return tuple(a + rejection * r for a, r in zip(accepted, residual))


def kernel_as_hf_speculative_sampling(kernel: VerificationKernel) -> Callable:
    """Wrap a verification kernel in ``_speculative_sampling``'s signature, for injection into HF ``generate``.

    The returned function softmaxes ``candidate_logits`` (draft) and ``new_logits`` (target) in
    float64, calls ``kernel`` with a generator seeded from the global torch RNG (so transformers'
    per-sample ``torch.manual_seed`` still makes runs reproducible) and returns
    ``(valid_tokens [1, n_matches + 1], n_matches)`` as transformers expects.
    """

    def _speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits, assistant_ensemble_weight=None):
        draft_ids = candidate_input_ids[:, -candidate_length:].cpu()
        draft_probs = candidate_logits.to(torch.float64).softmax(dim=-1).cpu()
        target_probs = new_logits.to(torch.float64).softmax(dim=-1).cpu()
        gen = torch.Generator().manual_seed(int(torch.randint(0, SEED_BOUND, (1,))))
        emitted = kernel(target_probs, draft_probs, draft_ids, gen)[0]
        valid = emitted[emitted != PADDING_TOKEN_ID]
        return valid[None, :].to(candidate_input_ids.device), torch.tensor(valid.numel() - 1)

    _speculative_sampling.__wrapped_kernel__ = kernel  # type: ignore[attr-defined]
    return _speculative_sampling


@contextlib.contextmanager
def patched_speculative_sampling(kernel: VerificationKernel | None) -> Iterator[None]:
    """Replace transformers' ``_speculative_sampling`` by ``kernel`` inside the ``with`` block.

    ``None`` leaves transformers untouched.  Used to inject a mutant kernel into the real assisted
    generation loop (the end-to-end audit must then report BIAS DETECTED).
    """
    if kernel is None:
        yield
        return
    from transformers.generation import utils as hf_utils

    original = hf_utils._speculative_sampling
    hf_utils._speculative_sampling = kernel_as_hf_speculative_sampling(kernel)
    try:
        yield
    finally:
        hf_utils._speculative_sampling = original
