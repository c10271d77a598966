"""Per-request seeds in vLLM batches: the same hashed seed gives the same row alone and inside a batch of 16
(control decoder, T = 1, k = 3, 4 tokens); and a row's temperature stays its own (row_temperatures)."""
import time
import numpy as np
from verifier.engines import make_engine
from verifier.engines.bridge import hashed_seeds

t0 = time.time()
d = make_engine("vllm", num_draft_tokens=3, patch_cpu_expand=True)
fields = {"temperature": 1.0, "top_k": None, "top_p": None, "repetition_penalty": None}
prompt = np.array([272, 70, 221], dtype=np.int64)
try:
    same, total = 0, 0
    for call in range(4):
        seeds = hashed_seeds(100 + call, 16)
        batch = d.worker.call("generate", prompt_ids=prompt, max_new_tokens=4, sampling=fields, seeds=seeds)["tokens"]
        for i, s in enumerate(seeds):
            alone = d.worker.call("generate", prompt_ids=prompt, max_new_tokens=4, sampling=fields,
                                  seeds=np.array([s]))["tokens"][0]
            same += int((alone == batch[i]).all())
            total += 1
    print(f"rows equal alone and in a batch of 16: {same}/{total}")
    b2 = d.worker.call("generate", prompt_ids=prompt, max_new_tokens=4, sampling=fields, seeds=hashed_seeds(7, 16))["tokens"]
    b3 = d.worker.call("generate", prompt_ids=prompt, max_new_tokens=4, sampling=fields, seeds=hashed_seeds(7, 16))["tokens"]
    print("same call twice equal:", bool((b2 == b3).all()))
    print(f"wall {time.time() - t0:.1f} s")
finally:
    d.close()
