"""Where vLLM as shipped reports NaN logprobs (processed_logprobs mode, T = 1, k = 3): positions, and whether any
accompany a finite value in the control."""
import time
import numpy as np
from verifier.engines import make_engine
from verifier.sampling import SamplingConfig

t0 = time.time()
for name, opts in (("shipped", {}), ):
    d = make_engine("vllm", num_draft_tokens=3, logprobs_mode="processed_logprobs", **opts)
    try:
        for label, prompt, sampling, n in (("T=1", [272, 70, 221], SamplingConfig(), 500),
                                            ("T=1, 1 request per call", [272, 70, 221], SamplingConfig(), 1),
                                            ("penalties", [272, 70, 221, 272, 70, 221],
                                             SamplingConfig(repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.5), 500)):
            nan = np.zeros(5, dtype=int); tot = np.zeros(5, dtype=int)
            for rep in range(1 if n > 1 else 20):
                tok, lp = d.generate(prompt, n, 4, sampling, 11 + rep, return_logprobs=True)
                live = tok != -1
                nan[:4] += (np.isnan(lp) & live).sum(0); tot[:4] += live.sum(0)
            print(name, label, "NaN logprobs per position:", nan[:4].tolist(), "of", tot[:4].tolist(), flush=True)
    finally:
        d.close()
print(f"wall {time.time() - t0:.1f} s")
