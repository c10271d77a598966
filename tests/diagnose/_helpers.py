"""Draw emitted rows on the trigram3 pair (the ci suite's model pair, prompt, k and n) and diagnose them; distinct rows
of a decoder on the shipped transformers pair with their teacher-forced probs and oracles (:func:`shipped_seqs`)."""

import numpy as np

from verifier.diagnose.sample_set import diagnose_sample_set
from verifier.exact import standard_tabular_pairs
from verifier.models import TabularCausalLM
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig

CI_N, CI_K, CI_TOKENS, PROMPT = 2500, 2, 3, (0, 1)  # suites/ci.toml: samples, num_draft_tokens, max_new_tokens, ctx01
CI_CHUNK = 500  # suites/ci.toml chunk_size: rows per generate call
T1 = SamplingConfig(temperature=1.0)
T07K2 = SamplingConfig(temperature=0.7, top_k=2)


def trigram3():
    pair = standard_tabular_pairs()["trigram3"]
    t, d = pair.target, pair.draft
    return pair, ReferenceModel(t, 3, None), ReferenceModel(d, 3, None)


def decoder_rows(decoder, sampling, seed, n=CI_N):
    return decoder.generate(PROMPT, n, CI_TOKENS, sampling, seed)


def decoder_calls(decoder, sampling, seed, n=CI_N, chunk=CI_CHUNK):
    """Rows drawn as the runner draws them (generate calls of ``chunk`` rows) and each row's call index."""
    sizes = [min(chunk, n - lo) for lo in range(0, n, chunk)]
    rows = np.concatenate([decoder.generate(PROMPT, m, CI_TOKENS, sampling, seed * 1000 + i) for i, m in enumerate(sizes)])
    return rows, np.repeat(np.arange(len(sizes)), sizes)


def wrapped():
    pair, _, _ = trigram3()
    return TabularCausalLM(pair.target), TabularCausalLM(pair.draft)


def law_rows(law: dict, n: int, seed: int) -> np.ndarray:
    """n rows drawn from an exact tuple law (outcome -> Fraction)."""
    outcomes = list(law)
    probs = np.array([float(law[o]) for o in outcomes])
    idx = np.random.default_rng(seed).choice(len(outcomes), size=n, p=probs / probs.sum())
    return np.array(outcomes, dtype=np.int64)[idx]


def diagnose(rows, sampling, *, bias=True, **kw):
    """Diagnose rows of one generate call (``calls`` = 0 for every row unless given)."""
    _, tr, dr = trigram3()
    kw.setdefault("calls", np.zeros(len(rows), dtype=np.int64))
    return diagnose_sample_set(tr, dr, PROMPT, sampling, CI_K, rows, bias_detected=bias, **kw)


SHIPPED_PROMPT = (272, 70, 221)  # "def " in the shipped tokenizer


def shipped_seqs(decoder: str, k: int, n: int, tokens: int, seed: int, sampling: SamplingConfig = T1):
    """``sequence_probs`` of the distinct rows ``decoder`` draws on the shipped pair (prompt "def ", torch on one
    thread, as the diagnosis runs it): SequenceProbs with the target and draft oracles (a KV cache: ``extend``)."""
    import torch

    from verifier.decoders import make_decoder
    from verifier.diagnose.inputs import sequence_probs
    from verifier.models import load_model, shipped_checkpoint

    torch.set_num_threads(1)
    target, draft = load_model(shipped_checkpoint("target")), load_model(shipped_checkpoint("draft"))
    vocab, eos = target.config.vocab_size, target.config.eos_token_id
    rows = make_decoder(decoder, target, draft, k).generate(SHIPPED_PROMPT, n, tokens, sampling, seed)
    uniq = np.unique(np.asarray(rows, dtype=np.int64), axis=0)
    return sequence_probs(ReferenceModel(target, vocab, eos, "target"), ReferenceModel(draft, vocab, eos, "draft"),
                          SHIPPED_PROMPT, uniq, sampling)
