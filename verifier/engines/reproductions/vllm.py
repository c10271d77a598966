"""Exact acceptance of vLLM's first speculative round (token 2), to set beside the engine's spec-decode counters.

vLLM samples token 1 in the prefill step and drafts from token 2 on, so the harness's first-round acceptance audit
(drafting at the prompt) does not apply. With k = 1 and max_new_tokens = 2 every request has exactly one round, at
context prompt + x1 with x1 ~ p(. | prompt). :func:`first_round_acceptance` enumerates x1 (V forward passes of each
model, float64 processed probs) and gives, for the sampling config (the audits: T = 1):

* vLLM's default greedy-draft rule (draft = argmax q, accept iff u <= p(draft)): E_x1[p(argmax q | prompt, x1)];
* the canonical rule with q sampled: E_x1[sum_y min(p, q)].

Usage: ``python -m verifier.engines.reproductions.vllm`` (about 10 s; cited by reports/audits/vllm-0.32.0/FINDINGS.md
and reports/audits/llama-server-0c1e570/README.md).
"""

from __future__ import annotations

import torch

from verifier.engines.reproductions._common import SHIPPED_PROMPT
from verifier.sampling import SamplingConfig, processed_probs

__all__ = ["first_round_acceptance", "main", "LAW_TOKENS", "NEEDS_DRAFT", "PREDICTS_LAWS", "LAW_SOURCE", "LAW_POINTER",
           "law_unsupported", "engine_laws"]

# the diagnosis's engine entry (verifier.diagnose.engine_laws): vLLM-CPU's defect has no law to predict -- the rejection
# sampler divides the target logits by a per-token temperature the CPU fallback of expand_kernel never writes, so the
# law depends on whatever memory new_empty returned (reports/audits/vllm-0.32.0/FINDINGS.md); the report says so
LAW_TOKENS = 2
NEEDS_DRAFT = False
PREDICTS_LAWS = False  # no law is ranked: the whole-row ranking keeps its full alpha
LAW_SOURCE: dict[str, str] = {}
LAW_POINTER = ("vllm/utils/cpu_triton_utils.py::_expand_kernel_impl (writes into a temporary int64 copy), "
               "vllm/v1/sample/rejection_sampler.py::expand_batch_to_tokens (x.new_empty) and apply_sampling_constraints")
_UNPREDICTABLE = (
    "vLLM-CPU's rejection sampler divides the target logits by a per-token temperature that the CPU fallback of "
    "expand_kernel (vllm/utils/cpu_triton_utils.py::_expand_kernel_impl) never writes, so every verification step uses "
    "whatever memory new_empty returned (NaN, inf, 1e11, ...): the emitted law depends on memory contents and no law "
    "can be predicted from the source (FINDINGS.md; the control --engine-arg patch_cpu_expand=true rejects no cell)")


def law_unsupported(sampling, num_draft_tokens: int, options=None) -> str | None:
    """Why no law is predicted: always (the defect reads uninitialized memory); under the control, the law is the
    target's."""
    if (options or {}).get("patch_cpu_expand"):
        return "patch_cpu_expand=true: the control writes the temperature, and the source then predicts the target's law"
    return _UNPREDICTABLE


def engine_laws(prompt, sampling, target, draft=None, options=None) -> dict:
    """Never called (:func:`law_unsupported` always answers)."""
    return {}


def first_round_acceptance(target, draft, prompt=SHIPPED_PROMPT, sampling: SamplingConfig = SamplingConfig(temperature=1.0)) -> dict:
    """``{"greedy_draft": P(accept), "canonical": P(accept)}`` of draft position 1 after token 1."""
    with torch.no_grad():
        p0 = processed_probs(target(torch.tensor([list(prompt)])).logits[0, -1], sampling)
        ctx = torch.tensor([list(prompt) + [x] for x in range(p0.numel())])
        p1 = processed_probs(target(ctx).logits[:, -1], sampling)
        q1 = processed_probs(draft(ctx).logits[:, -1], sampling)
    greedy = p1.gather(1, q1.argmax(1, keepdim=True)).squeeze(1)
    canonical = torch.minimum(p1, q1).sum(1)
    return {"greedy_draft": float((p0 * greedy).sum()), "canonical": float((p0 * canonical).sum())}


def main() -> None:
    from verifier.models.loading import load_model

    acc = first_round_acceptance(load_model("shipped:target"), load_model("shipped:draft"))
    print(f"greedy-draft rule (vLLM default): P(accept) = {acc['greedy_draft']:.4f}")
    print(f"canonical rule, sampled draft:    P(accept) = {acc['canonical']:.4f}")


if __name__ == "__main__":
    main()
