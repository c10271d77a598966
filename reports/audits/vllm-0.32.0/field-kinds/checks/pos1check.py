"""Replay the shipped-penalties chunk 0 call (seed from shipped/stopped.json) with the worker's entry check."""
import numpy as np
from verifier.engines import make_engine
from verifier.sampling import SamplingConfig
d = make_engine("vllm", num_draft_tokens=3, logprobs_mode="processed_logprobs")
try:
    for rep in range(2):
        tok, lp = d.generate([272, 70, 221, 272, 70, 221], 500, 5,
                             SamplingConfig(repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.5),
                             4308649836741208281, return_logprobs=True)
        live = tok != -1
        print("replay", rep, "NaN per position:", (np.isnan(lp) & live).sum(0).tolist(), "rows with NaN at position 1:",
              np.flatnonzero(np.isnan(lp[:, 0]))[:10].tolist(), "row 1 token 1:", int(tok[1, 0]), flush=True)
finally:
    d.close()
