"""``lmdeploy-sampler``: LMDeploy's portable rejection sampler as a verification kernel.

Driven code (unmodified, from the ``lmdeploy==0.18.0`` wheel):
``lmdeploy/pytorch/backends/default/rejection_sampling.py::DefaultRejectionSamplingImpl.forward``.
The engine itself needs CUDA or Ascend; this file is pure torch.  Its only import outside torch is
``from .base import BuildSpec`` (in ``backends/rejection_sampling.py``), whose real module imports
LMDeploy's runtime config; it is replaced by a one-class stub (``BuildSpec`` is only a type tag for
the backend builder and plays no part in sampling).

Tensor conventions mapped (read from the source):

* ``target_logits [B, k, V]``: processed target logits at the k draft positions; the engine takes
  ``softmax(dtype=float32)``.  We pass ``log(target_probs)`` (``-inf`` where the prob is 0) in
  ``logits_dtype``, so the engine's probs equal ours up to float32 rounding.
* ``draft_probs [B, k, V]`` (float32, as the engine's draft sampler returns them) or ``None``
  (the n-gram path: accept iff ``u <= p(x)``, recovered token from ``p`` with the draft token
  removed).  Option ``draft_probs="given"|"none"``.  The ``None`` path is lossless for *any* draft
  law (``P(y) = q(y) p(y) + p(y) sum_{x != y} q(x) = p(y)``) but accepts with prob
  ``sum_x q(x) p(x)``, less than the canonical ``sum_x min(p(x), q(x))`` unless the draft is one-hot:
  the report states its acceptance against that rule (``"target_only"``).
* ``bonus_token_ids [B]``: sampled by the *caller* from the target row k+1 before verification;
  the adapter samples it with ``torch.multinomial`` from ``generator``.
* Randomness: the engine draws ``torch.rand`` (float64 uniforms, one per draft position) and
  ``exponential_()`` (float32, one ``[B, V]`` tensor shared by all positions: the recovered token
  is ``argmax(max(p - q, 0) / E)``, an exponential race) from torch's *global* CPU generator.  The
  adapter seeds that generator from ``generator`` inside ``torch.random.fork_rng`` (state restored
  afterwards), so equal generator states give equal output.
* Output ``[B, k+1]``: accepted prefix, the recovered token at the first rejected position, the bonus
  token when all k are accepted, ``PLACEHOLDER_TOKEN_ID = -1`` elsewhere -- our emitted layout.
"""

from __future__ import annotations

import types
from typing import Any, Generic, TypeVar

from verifier.engines import register_engine
from verifier.engines.base import Engine, EngineOption

__all__ = ["LMDeploySampler", "kernel"]

_SOURCE_FILES = ("lmdeploy/pytorch/backends/rejection_sampling.py", "lmdeploy/pytorch/backends/default/rejection_sampling.py")
_DTYPES = ("float32", "float16", "bfloat16", "float64")


def _base_stub() -> types.ModuleType:
    """Stands in for ``lmdeploy/pytorch/backends/base.py`` (which imports LMDeploy's runtime config)."""
    ImplT = TypeVar("ImplT")

    class BuildSpec(Generic[ImplT]):
        """Build request whose type parameter is the result interface (same as LMDeploy's)."""

    stub = types.ModuleType("base")
    stub.BuildSpec = BuildSpec
    return stub


@register_engine("lmdeploy-sampler")
class LMDeploySampler(Engine):
    kind = "kernel"
    package = "lmdeploy"
    version = "0.18.0"
    entry_point = "lmdeploy/pytorch/backends/default/rejection_sampling.py::DefaultRejectionSamplingImpl.forward"
    options = (
        EngineOption("logits_dtype", "float32", _DTYPES, "dtype of the target logits handed to forward (the engine's softmax is float32)"),
        EngineOption("draft_probs", "given", ("given", "none"),
                     "'given': pass draft_probs (draft-model methods); 'none': the n-gram path (accept with prob p(x))"),
    )

    @classmethod
    def source_files(cls) -> list[str]:
        return list(_SOURCE_FILES)

    @classmethod
    def load_impl_class(cls) -> type:
        """Import the engine's ``DefaultRejectionSamplingImpl`` from the install folder."""
        from verifier.engines._source import load_engine_file

        src = cls.require_installed() / "src"
        module = load_engine_file(f"lmdeploy_{cls.version.replace('.', '_')}", src,
                                  "lmdeploy.pytorch.backends.default.rejection_sampling",
                                  stubs={"lmdeploy.pytorch.backends.base": _base_stub()})
        return module.DefaultRejectionSamplingImpl

    @classmethod
    def make(cls, **options: Any):
        opts = cls.resolve_options(options)
        impl = cls.load_impl_class()()
        return _LMDeployKernel(impl, **opts)


class _LMDeployKernel:
    """The :class:`~verifier.protocols.VerificationKernel` around ``DefaultRejectionSamplingImpl.forward``."""

    def __init__(self, impl: Any, logits_dtype: str, draft_probs: str) -> None:
        import torch

        self.impl = impl
        self.logits_dtype = getattr(torch, logits_dtype)
        self.pass_draft_probs = draft_probs == "given"
        self.acceptance_rule = "canonical" if self.pass_draft_probs else "target_only"  # the lossless rule it implements
        self.name = f"lmdeploy-sampler[{LMDeploySampler.version}, logits_dtype={logits_dtype}, draft_probs={draft_probs}]"
        self.settings = {"engine": "lmdeploy-sampler", "version": LMDeploySampler.version, "logits_dtype": logits_dtype,
                         "draft_probs": draft_probs}

    def __call__(self, target_probs, draft_probs, draft_token_ids, generator):
        import torch

        k = draft_token_ids.shape[1]
        bonus = torch.multinomial(target_probs[:, k], 1, generator=generator).squeeze(1)  # the caller's bonus sample
        logits = target_probs[:, :k].log().to(self.logits_dtype)  # softmax(log p) = p; log 0 = -inf
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out, _num_rejected, _last = self.impl.forward(
                logits, draft_token_ids, bonus, is_greedy=None,
                draft_probs=draft_probs.to(torch.float32) if self.pass_draft_probs else None,
            )
        return out.to(torch.int64)


def kernel(logits_dtype: str = "float32", draft_probs: str = "given"):
    """Kernel plugin factory: ``specverify audit --kernel verifier.engines.lmdeploy_sampler:kernel``.

    Parameters
    ----------
    logits_dtype : {"float32", "float16", "bfloat16", "float64"}, default "float32"
    draft_probs : {"given", "none"}, default "given"

    Raises
    ------
    EngineNotInstalledError
        (exit 2) LMDeploy is not installed; the message names ``bash ci/engines/lmdeploy-sampler.sh``.
    """
    return LMDeploySampler.make(logits_dtype=logits_dtype, draft_probs=draft_probs)
