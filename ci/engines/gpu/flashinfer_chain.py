"""FlashInfer's ``chain_speculative_sampling`` as a :class:`verifier.protocols.VerificationKernel` (CUDA only).

Used by ``ci/engines/gpu-audit.sh``: ``specverify audit --kernel ci/engines/gpu/flashinfer_chain.py:kernel``.
Prepared without a GPU (none was lent while it was written): the call follows FlashInfer's documented
signature ``chain_speculative_sampling(draft_probs [B, k, V], draft_token_ids [B, k], target_probs
[B, k+1, V], ..., deterministic=True, generator=None) -> output_token_ids [B, k+1]`` (-1 padded).
"""

import torch


def kernel(target_probs, draft_probs, draft_token_ids, generator):
    import flashinfer.sampling as fs

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    out = fs.chain_speculative_sampling(draft_probs.to(dev, torch.float32), draft_token_ids.to(dev, torch.int32),
                                        target_probs.to(dev, torch.float32), deterministic=True, generator=gen)
    out = out[0] if isinstance(out, tuple) else out
    return out.to("cpu", torch.int64)
