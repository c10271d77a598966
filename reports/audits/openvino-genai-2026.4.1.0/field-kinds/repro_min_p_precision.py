"""Minimal reproduction of the min-p finding (FINDINGS.md in this folder): run with the OpenVINO GenAI venv's python.

    .engines/openvino-genai-2026.4.1.0/venv/bin/python reports/audits/openvino-genai-2026.4.1.0/field-kinds/repro_min_p_precision.py \
        600 MODE PRECISION off .engines/openvino-genai-2026.4.1.0/models

Token 1 of ``LLMPipeline.generate`` on the prompt "def f(x):\\n    return x\\ndef f(" (ids below), T = 1, min_p = 0.1,
rng_seed 1..N, prefix caching off; prints how often 'name' (id 361) is emitted.  Under the f32 target (HF and the
exported IR at f32 agree to 7e-6 in logits) 'name' has p / p_max = 0.1012 >= 0.1 and prob 0.0191 (11.4 expected in
600).  MODE: ``spec`` (draft model, k = 2) or ``plain`` (no draft); PRECISION: ``default`` (the CPU plugin's defaults:
bf16 inference on a CPU with AMX-bf16, u8 KV cache) or ``f32all`` (INFERENCE_PRECISION_HINT and KV_CACHE_PRECISION f32).
Measured 2026-12-03 (N = 600): spec/default 0, plain/default 0, spec/f32all 9.
"""
import sys

import numpy as np
import openvino as ov
import openvino_genai as ovg

N, mode, props, pc, root = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "on", sys.argv[5]
P = {"default": {}, "f32all": {"KV_CACHE_PRECISION": ov.Type.f32, "INFERENCE_PRECISION_HINT": ov.Type.f32}}[props]
sc = ovg.SchedulerConfig()
sc.enable_prefix_caching = pc
kw = {"scheduler_config": sc}
if mode == "spec":
    kw["draft_model"] = ovg.draft_model(f"{root}/draft", "CPU", **P)
pipe = ovg.LLMPipeline(f"{root}/target", "CPU", **kw, **P)
ids = ov.Tensor(np.asarray([[272, 70, 280, 8, 88, 306, 276, 329, 221, 88, 199, 272, 70, 280, 8]], dtype=np.int64))
counts, fails = {}, 0
for s in range(1, N + 1):
    c = ovg.GenerationConfig()
    c.do_sample, c.temperature, c.top_k, c.top_p, c.min_p = True, 1.0, 0, 1.0, 0.1
    c.rng_seed, c.max_new_tokens, c.num_assistant_tokens = s, 3, (2 if mode == "spec" else 0)
    try:
        t = int(pipe.generate(ids, c).tokens[0][0])
    except RuntimeError:
        fails += 1
        continue
    counts[t] = counts.get(t, 0) + 1
core = ov.Core()
print(mode, props, "prefix_caching", pc, "N", N, "fails", fails, "name(361):", counts.get(361, 0), "distinct:", len(counts),
      "| CPU plugin defaults:", core.get_property("CPU", "INFERENCE_PRECISION_HINT"), core.get_property("CPU", "KV_CACHE_PRECISION"))
