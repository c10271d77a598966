"""``sglang-kernel``: SGLang's chain verification kernel (Triton) as a verification kernel.

Driven code (unmodified, from the ``sglang==0.5.23`` wheel):
``sglang/kernels/ops/speculative/reject_sampling.py::chain_speculative_sampling_triton``, which
launches the ``@triton.jit`` kernel ``speculative_sampling_classic_kernel``.  The file imports only
``triton``; on a machine without a GPU the adapter sets ``TRITON_INTERPRET=1`` before importing it,
so Triton's interpreter executes the kernel's own code (about 80 verify steps a second).

Two acceptance rules, option ``block_verification``:

* ``False`` (token-wise): accept draft ``x_j`` iff ``u_j * q_j(x_j) < p_j(x_j)``; on rejection
  sample ``max(p - q, 0)`` by inverse CDF with one more uniform; after k acceptances sample the
  bonus token from ``p_{k+1}`` the same way.  The canonical rule.
* ``True``: block verification (Sun et al. 2024, "Block Verification Accelerates Speculative
  Decoding", Algorithm 2): prefix weights ``w_i = min(w_{i-1} p_i(x_i) / q_i(x_i), 1)``, the
  longest accepted prefix is chosen from the end, and the next token comes from
  ``max(w_i p_{i+1} - q_{i+1}, 0)``.  Lossless, but it accepts more than the canonical rule, so the
  accepted-count law differs from the canonical one (see
  :func:`verifier.engines.block_verification.block_verification_law`).

Tensor conventions mapped (read from the source and from SGLang's caller,
``sglang/kernels/ops/speculative/dspark/dspark_accept.py::_accept_sampling_core``):

* ``candidates [B, k+1]`` int64: slot 0 is the root (last verified token, never read), slots 1..k
  the draft tokens.  ``retrive_index [B, k+1]`` int64 = ``arange(B * (k+1))`` (a chain).
* ``target_probs [B, k+1, V]``, ``draft_probs [B, k, V]``: float32 probs (the caller softmaxes).
* ``uniform_samples [B, k]`` and ``uniform_samples_for_final_sampling [B]``: float32
  ``torch.rand`` -- drawn here from ``generator``, as the caller draws them from its own.
* Outputs: ``predicts [B * (k+1)]`` int32, flat, indexed by ``retrive_index``: the accepted drafts
  then the recovered/bonus token; ``accept_token_num [B]`` int32.  Emitted row = ``predicts`` of the
  row's first ``accept_token_num + 1`` slots, -1 after.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from verifier.engines import register_engine
from verifier.engines.base import Engine, EngineOption

__all__ = ["SGLangKernel", "kernel"]

_SOURCE_FILES = ("sglang/kernels/ops/speculative/reject_sampling.py",)


@register_engine("sglang-kernel")
class SGLangKernel(Engine):
    kind = "kernel"
    package = "sglang"
    version = "0.5.23"
    entry_point = "sglang/kernels/ops/speculative/reject_sampling.py::chain_speculative_sampling_triton"
    options = (
        EngineOption("block_verification", False, (False, True), "SGLang's block_verification switch (Algorithm 2 of Sun et al. 2024)"),
    )

    @classmethod
    def source_files(cls) -> list[str]:
        return list(_SOURCE_FILES)

    @classmethod
    def load_function(cls):
        """Import ``chain_speculative_sampling_triton`` (and the installed triton) from the install folder."""
        import torch

        from verifier.engines._source import load_engine_file

        folder = cls.require_installed()
        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"  # read when the kernel is decorated, i.e. at import below
        site = str(folder / "site")
        if site not in sys.path:
            sys.path.insert(0, site)
        module = load_engine_file(f"sglang_{cls.version.replace('.', '_')}", folder / "src",
                                  "sglang.kernels.ops.speculative.reject_sampling")
        return module.chain_speculative_sampling_triton

    @classmethod
    def make(cls, **options: Any):
        opts = cls.resolve_options(options)
        return _SGLangKernel(cls.load_function(), **opts)


class _SGLangKernel:
    """The :class:`~verifier.protocols.VerificationKernel` around ``chain_speculative_sampling_triton``."""

    def __init__(self, function: Any, block_verification: bool) -> None:
        self.function = function
        self.block_verification = block_verification
        self.acceptance_rule = "block_verification" if block_verification else "canonical"  # the lossless rule it claims
        self.name = f"sglang-kernel[{SGLangKernel.version}, block_verification={block_verification}]"
        self.settings = {"engine": "sglang-kernel", "version": SGLangKernel.version, "block_verification": block_verification,
                         "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1"}

    def __call__(self, target_probs, draft_probs, draft_token_ids, generator):
        import torch

        batch, k = draft_token_ids.shape
        slots = k + 1
        device = target_probs.device
        candidates = torch.cat([torch.zeros(batch, 1, dtype=torch.int64, device=device), draft_token_ids.to(torch.int64)], dim=1)
        retrive_index = torch.arange(batch * slots, dtype=torch.int64, device=device).view(batch, slots)
        retrive_next_token = torch.arange(1, slots + 1, dtype=torch.int64, device=device).expand(batch, slots).clone()
        retrive_next_token[:, -1] = -1
        retrive_next_sibling = torch.full((batch, slots), -1, dtype=torch.int64, device=device)
        predicts = torch.full((batch * slots,), -1, dtype=torch.int32, device=device)
        accept_index = torch.full((batch, slots), -1, dtype=torch.int32, device=device)
        accept_token_num = torch.zeros(batch, dtype=torch.int32, device=device)
        uniform = torch.rand((batch, k), dtype=torch.float32, generator=generator).to(device)
        uniform_final = torch.rand((batch,), dtype=torch.float32, generator=generator).to(device)
        self.function(
            predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token, retrive_next_sibling,
            uniform, uniform_final, target_probs.to(torch.float32).contiguous(), draft_probs.to(torch.float32).contiguous(),
            1.0, 1.0, True, block_verification=self.block_verification,
        )
        emitted = predicts.view(batch, slots).to(torch.int64).cpu()
        keep = torch.arange(slots)[None, :] <= accept_token_num.cpu().to(torch.int64)[:, None]
        return torch.where(keep, emitted, torch.full_like(emitted, -1))


def kernel(block_verification: bool = False):
    """Kernel plugin factory: ``specverify audit --kernel verifier.engines.sglang_kernel:kernel``.

    Parameters
    ----------
    block_verification : bool, default False

    Raises
    ------
    EngineNotInstalledError
        (exit 2) SGLang's kernel is not installed; the message names ``bash ci/engines/sglang-kernel.sh``.
    """
    return SGLangKernel.make(block_verification=block_verification)
