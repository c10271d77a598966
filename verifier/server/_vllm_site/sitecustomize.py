"""Applies the offline ``vllm`` adapter's fixes of vLLM's CPU defects in every Python process of a vLLM server.

Not a module of the harness: :func:`verifier.server.launch.launch_vllm_server` puts this folder first on the
``PYTHONPATH`` of a CONTROL server (``patches=...``), and Python's ``site`` imports this file at the start of
every interpreter of that server -- the API server and the processes vLLM *spawns* (its EngineCore runs the
rejection sampler in a spawned process, so a patch applied in the API server alone never reaches it).

Environment: ``SPECVERIFY_VLLM_PATCHES`` (comma-separated names: ``cpu_expand``, ``empty_top_k``) and
``SPECVERIFY_VLLM_FIXES`` (the file holding the fixes, ``verifier/engines/workers/vllm_llm.py``).  Processes
without vLLM (the launcher's supervisor) are left alone.
"""

import os

_PATCHES = set(filter(None, os.environ.get("SPECVERIFY_VLLM_PATCHES", "").split(",")))

if _PATCHES:
    try:
        from vllm.utils import cpu_triton_utils
        from vllm.v1.sample.ops import topk_topp_sampler
    except ImportError:  # not a vLLM interpreter
        pass
    else:
        import importlib.util
        import sys

        _spec = importlib.util.spec_from_file_location("_specverify_vllm_fixes", os.environ["SPECVERIFY_VLLM_FIXES"])
        _fixes = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_fixes)
        if "cpu_expand" in _PATCHES:
            cpu_triton_utils._expand_kernel_impl = _fixes._fixed_expand_kernel_impl
        if "empty_top_k" in _PATCHES:
            topk_topp_sampler.apply_top_k_only = _fixes._guard_empty_top_k(topk_topp_sampler.apply_top_k_only)
        print(f"specverify: vLLM patches {sorted(_PATCHES)} applied in pid {os.getpid()}", file=sys.stderr, flush=True)
