"""What the logprob cell measures in vLLM's default raw_logprobs mode (control decoder): the reported value vs the
processed reference, at T = 1 without processors and with the penalties."""
import numpy as np
from verifier.engines import make_engine
from verifier.runner.logprob import reference_logprobs
from verifier.runner.models import load_pair
from verifier.sampling import SamplingConfig
from verifier.suite.schema import ModelPair

pair = load_pair(ModelPair(name="shipped", target="shipped:target", draft="shipped:draft"))
d = make_engine("vllm", num_draft_tokens=3, patch_cpu_expand=True)  # logprobs_mode: vLLM's default raw_logprobs
try:
    for label, prompt, s in (("T=1", [272, 70, 221], SamplingConfig()),
                             ("penalties", [272, 70, 221, 272, 70, 221],
                              SamplingConfig(repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.5)),
                             ("T=0.7", [272, 70, 221], SamplingConfig(temperature=0.7))):
        tok, lp = d.generate(prompt, 200, 4, s, 5, return_logprobs=True)
        ref = reference_logprobs(pair.reference, prompt, tok, s)
        live = tok != -1
        diff = np.abs(lp - ref)[live]
        print(f"raw_logprobs, {label}: {int((diff > 1e-4).sum())} of {int(live.sum())} tokens off the processed law by > 1e-4 "
              f"(max {diff.max():.3g} nats)", flush=True)
finally:
    d.close()
