"""Exact acceptance of vLLM's first speculative round (token 2), to set beside the engine's spec-decode counters.

vLLM samples token 1 in the prefill step and drafts from token 2 on, so the harness's first-round acceptance audit
(drafting at the prompt) does not apply. With k = 1 and max_new_tokens = 2 every request has exactly one round, at
context prompt + x1 with x1 ~ p(. | prompt). This script enumerates x1 (V forward passes of each shipped model,
float64 processed probs) and prints, for T = 1:

* vLLM's default greedy-draft rule (draft = argmax q, accept iff u <= p(draft)): E_x1[p(argmax q | prompt, x1)];
* the canonical rule with q sampled: E_x1[sum_y min(p, q)].

Usage: python reports/audits/vllm-0.32.0/acceptance.py  (about 10 s)
"""
import torch

from verifier.models.loading import load_model, shipped_checkpoint
from verifier.sampling import SamplingConfig, processed_probs

PROMPT = [272, 70, 221]  # "def " in the shipped tokenizer (the audit's default prompt)
cfg = SamplingConfig(temperature=1.0)
target, draft = (load_model(f"shipped:{n}") for n in ("target", "draft"))
with torch.no_grad():
    p0 = processed_probs(target(torch.tensor([PROMPT])).logits[0, -1], cfg)
    ctx = torch.tensor([PROMPT + [x] for x in range(p0.numel())])
    p1 = processed_probs(target(ctx).logits[:, -1], cfg)
    q1 = processed_probs(draft(ctx).logits[:, -1], cfg)
greedy = p1.gather(1, q1.argmax(1, keepdim=True)).squeeze(1)
canonical = torch.minimum(p1, q1).sum(1)
print(f"greedy-draft rule (vLLM default): P(accept) = {float((p0 * greedy).sum()):.4f}")
print(f"canonical rule, sampled draft:    P(accept) = {float((p0 * canonical).sum()):.4f}")
