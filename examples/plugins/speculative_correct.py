"""A correct speculative decoder as a `specverify audit` plugin (Leviathan et al. 2023, Algorithm 1).

    specverify audit --decoder examples/plugins/speculative_correct.py:make --target tabular:trigram3

`target` and `draft` are callables: `model(input_ids)` with int64 input_ids of shape (batch, seq) returns an
object whose `.logits` has shape (batch, seq, vocab).  `verifier.sampling.processed_probs(logits, sampling)`
turns logits into the float64 distribution to sample (temperature, top-k, top-p applied).  Rows of equal
length run one round together; no KV cache (every call sees the whole sequence).
speculative_buggy.py is this file with one line changed.
"""
import numpy as np
import torch

from verifier.protocols import DecoderStats
from verifier.sampling import processed_probs


def sample(probs, rng):  # one token per row of probs (rows, vocab) by inverse CDF
    return (probs.cumsum(-1) < rng.random((len(probs), 1))).sum(-1).clip(max=probs.shape[-1] - 1)


class SpeculativePlugin:
    name = "example-speculative"

    def __init__(self, target, draft, num_draft_tokens, eos_token_id):
        self.target, self.draft, self.k, self.eos = target, draft, num_draft_tokens, eos_token_id
        self.last_stats = None  # DecoderStats of the last generate call: the report's acceptance figures

    def probs(self, model, ids, sampling, last):  # (rows, last, vocab): next-token laws after the `last` prefixes
        with torch.no_grad():
            return processed_probs(model(torch.from_numpy(ids)).logits[:, -last:], sampling).numpy()

    def round(self, ids, sampling, rng):  # one draft-verify round for rows of equal length -> (emitted, accepted) per row
        drafts, qs = ids, []
        for _ in range(self.k):  # draft k tokens from q
            qs.append(self.probs(self.draft, drafts, sampling, 1)[:, 0])
            drafts = np.concatenate([drafts, sample(qs[-1], rng)[:, None]], axis=1)
        ps = self.probs(self.target, drafts, sampling, self.k + 1)  # one target pass scores every draft
        out = []
        for r in range(len(ids)):
            emitted, accepted = [], 0
            for i, x in enumerate(drafts[r, ids.shape[1]:]):
                if rng.random() < min(1.0, ps[r, i, x] / qs[i][r, x]):  # accept with prob min(1, p/q)
                    emitted.append(int(x))
                    accepted += 1
                    if x == self.eos:
                        break
                else:  # rejected: recover from the residual max(0, p - q), normalised
                    residual = np.maximum(ps[r, i] - qs[i][r], 0.0)
                    emitted.append(int(sample(residual[None] / residual.sum(), rng)[0]))
                    break
            else:  # every draft accepted: bonus token from the target's last row
                emitted.append(int(sample(ps[r, -1:], rng)[0]))
            out.append((emitted, accepted))
        return out

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        rng = np.random.default_rng(seed)
        rows = [[] for _ in range(num_samples)]
        first, counts = np.full(num_samples, -1, dtype=np.int64), []  # -1: no round ran for that row
        while live := [r for r in range(num_samples) if len(rows[r]) < max_new_tokens and self.eos not in rows[r]]:
            for length in sorted({len(rows[r]) for r in live}):
                group = [r for r in live if len(rows[r]) == length]
                ids = np.array([list(prompt_ids) + rows[r] for r in group], dtype=np.int64)
                for r, (emitted, accepted) in zip(group, self.round(ids, sampling, rng)):
                    first[r] = accepted if first[r] < 0 else first[r]
                    counts.append(accepted)
                    rows[r] += emitted
        out = np.full((num_samples, max_new_tokens), -1, dtype=np.int64)
        for r, emitted in enumerate(rows):
            emitted = emitted[: emitted.index(self.eos) + 1] if self.eos in emitted else emitted
            out[r, : min(len(emitted), max_new_tokens)] = emitted[:max_new_tokens]
        self.last_stats = DecoderStats(rounds=len(counts), accepted_counts=np.array(counts, dtype=np.int64),
                                       num_draft_tokens=self.k, first_round_accepted=first)
        return out


def make(target, draft, num_draft_tokens, eos_token_id):
    return SpeculativePlugin(target, draft, num_draft_tokens, eos_token_id)
