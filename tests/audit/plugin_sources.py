"""Source text of third-party plugins that tests write into ``tmp_path`` (outside the package).

Kept as strings so each test imports them from a fresh file, exactly as a user's plugin would be.
"""

# A self-contained speculative sampler over a fixed 3-token unigram target: it knows nothing of
# spec-verifier.  ``make_correct`` recovers rejected positions from the residual (Leviathan et al.
# 2023, Alg. 1); ``make_biased`` falls back to the full target (the full-p-fallback bug).
TINY_SPEC_PLUGIN = '''
import numpy as np

TARGET = np.array([0.2, 0.5, 0.3])
DRAFT = np.array([0.5, 0.3, 0.2])


class TinySpec:
    vocab_size = 3
    eos_token_id = None

    def __init__(self, num_draft_tokens=2, fallback="residual"):
        self.k, self.fallback = num_draft_tokens, fallback
        self.name = f"tiny-spec[{fallback}]"

    def _recover(self, rng):
        r = np.maximum(TARGET - DRAFT, 0.0) if self.fallback == "residual" else TARGET
        return int(rng.choice(3, p=r / r.sum()))

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        rng = np.random.default_rng(seed)
        out = np.empty((num_samples, max_new_tokens), dtype=np.int64)
        for i in range(num_samples):
            row = []
            while len(row) < max_new_tokens:
                for x in rng.choice(3, size=self.k, p=DRAFT):
                    if rng.random() < min(1.0, TARGET[x] / DRAFT[x]):
                        row.append(int(x))
                    else:
                        row.append(self._recover(rng))
                        break
                else:
                    row.append(int(rng.choice(3, p=TARGET)))
            out[i] = row[:max_new_tokens]
        return out


def make_correct(num_draft_tokens=2):
    return TinySpec(num_draft_tokens)


def make_biased(num_draft_tokens=2):
    return TinySpec(num_draft_tokens, fallback="full_p")
'''

# Plugins that break the Decoder contract in each way the harness must report as exit code 3.
BROKEN_PLUGIN = '''
import numpy as np


class _Broken:
    vocab_size = 4
    eos_token_id = 3

    def __init__(self, mode):
        self.mode, self.name = mode, f"broken[{mode}]"

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        out = np.zeros((num_samples, max_new_tokens), dtype=np.int64)
        if self.mode == "shape":
            return out[:, :-1]
        if self.mode == "dtype":
            return out.astype(np.float32)
        if self.mode == "range":
            out[1, 1] = 9
        if self.mode == "after_eos":
            out[2, 0] = 3
            out[2, 1] = 1
        if self.mode == "raises":
            raise RuntimeError("CUDA exploded")
        return out


def make(mode="ok"):
    return _Broken(mode)


def make_raises_in_factory():
    raise ValueError("bad weights path")


NOT_A_DECODER = 42
'''

BAD_IMPORT_PLUGIN = '''
raise ImportError("plugin needs a GPU library that is not installed")
'''

# A verification kernel that emits an id outside the vocabulary in row 1.
BAD_KERNEL_PLUGIN = '''
import torch


def verify(target_probs, draft_probs, draft_token_ids, generator):
    out = torch.full((draft_token_ids.shape[0], draft_token_ids.shape[1] + 1), -1, dtype=torch.int64)
    out[:, 0] = 0
    out[1, 0] = target_probs.shape[-1] + 5
    return out
'''
