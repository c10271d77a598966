"""Audit third-party "lossless" claims: test code the harness did not write, without changing it.

What is here
------------
=====================  ======================================================================
plugins                :func:`load_plugin`, :func:`load_decoder`, :func:`load_kernel` --
                       ``"package.module:factory"`` or ``"path/to/file.py:factory"``; output
                       validated (:class:`PluginDecoder`, :class:`PluginKernel`), crashes and
                       invalid output are exit code 3 with the first bad row shown
HF assisted generation :class:`HFAssistedDecoder` -- ``generate(..., assistant_model=draft,
                       do_sample=True)`` with k fixed, confidence threshold off, worker processes
HF verify kernel       :func:`make_hf_kernel` -- transformers' ``_speculative_sampling`` as a
                       kernel; :func:`ensemble_step_law` (its lossy ``assistant_ensemble_weight``);
                       :func:`patched_speculative_sampling` injects any kernel into ``generate``
kernel level           :func:`audit_kernel` on :class:`KernelCase` s (:func:`standard_kernel_cases`,
                       :func:`adversarial_case`), :func:`blind_cell_reasons`
black-box              :func:`blackbox_audit` (two-sample tests vs plain sampling),
                       :func:`blackbox_samples_needed` (about 2x the one-sample n per arm)
sample files           :func:`import_jsonl` / :func:`iter_jsonl_samples` (streamed, validated),
                       :func:`export_jsonl`, :class:`ReplayDecoder`, :func:`compare_target_logprobs`
=====================  ======================================================================

Command line: ``specverify audit --decoder SPEC --target MODEL ...`` (known-p) builds an audit suite
(:mod:`verifier.audit.suite_builder`: the runner's cells, n planned from ``--target-tv``) and runs it
through :func:`verifier.pipeline.run_audit` (fixed n, or ``--sequential``: :mod:`verifier.audit.sequential`);
``--blackbox`` / ``--blackbox-reference SPEC`` (two-sample), ``--kernel SPEC``, ``--samples FILE``.
:func:`verifier.api.assert_preserves_target` and the pytest fixtures run the same suites.

The two plug-in protocols (:mod:`verifier.protocols`)
----------------------------------------------------
**Decoder** -- any object with ``generate(prompt_ids, num_samples, max_new_tokens, sampling, seed)``
returning ``int64`` of shape ``(num_samples, max_new_tokens)``: row i is the i-th independent
continuation of ``prompt_ids``; EOS is emitted, then ``-1`` padding.  ``sampling`` is a
:class:`~verifier.sampling.SamplingConfig` (temperature, top_k, top_p, repetition_penalty) the
decoder must honour; the same ``seed`` must give the same array.  Optional attributes: ``name``,
``vocab_size`` and ``eos_token_id`` (used to validate the output; otherwise taken from the target),
``last_stats`` (:class:`~verifier.protocols.DecoderStats`).  A factory may ask for ``target``,
``draft``, ``num_draft_tokens``, ``vocab_size``, ``eos_token_id`` by naming them.  ``target`` and
``draft`` are callables: ``model(input_ids)`` with int64 ``input_ids`` of shape ``(batch, seq)`` returns
an object whose ``.logits`` has shape ``(batch, seq, vocab)`` (a Hugging Face causal LM, or a tabular
model wrapped as one).  :func:`verifier.sampling.processed_probs` ``(logits, sampling)`` is the float64
distribution to sample -- the harness tests against exactly that law.

A correct speculative decoder in one factory (``examples/plugins/speculative_correct.py`` is the
batched version; ``speculative_buggy.py`` differs in one line and is BIAS DETECTED)::

    import numpy as np, torch
    from verifier.sampling import processed_probs

    class Speculative:
        def __init__(self, target, draft, k, eos):
            self.target, self.draft, self.k, self.eos = target, draft, k, eos

        def law(self, model, ids, sampling, last=1):       # next-token laws after the `last` prefixes
            with torch.no_grad():
                return processed_probs(model(torch.tensor([ids])).logits[0, -last:], sampling).numpy()

        def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
            rng, out = np.random.default_rng(seed), np.full((num_samples, max_new_tokens), -1)
            for row in range(num_samples):
                ids = list(prompt_ids)
                while len(ids) - len(prompt_ids) < max_new_tokens and self.eos not in ids[len(prompt_ids):]:
                    drafts, qs = [], []
                    for _ in range(self.k):                  # draft k tokens from q
                        qs.append(self.law(self.draft, ids + drafts, sampling)[0])
                        drafts.append(rng.choice(len(qs[-1]), p=qs[-1]))
                    ps = self.law(self.target, ids + drafts, sampling, self.k + 1)   # one target pass
                    for p, q, x in zip(ps, qs, drafts):
                        if rng.random() >= min(1, p[x] / q[x]):               # rejected:
                            r = np.maximum(p - q, 0)                          # residual max(0, p - q)
                            ids.append(rng.choice(len(r), p=r / r.sum()))
                            break
                        ids.append(x)                                         # accepted
                        if x == self.eos:
                            break
                    else:
                        ids.append(rng.choice(len(ps[-1]), p=ps[-1]))         # bonus token
                new = ids[len(prompt_ids):][:max_new_tokens]
                new = new[: new.index(self.eos) + 1] if self.eos in new else new
                out[row, : len(new)] = new
            return out

    def make(target, draft, num_draft_tokens, eos_token_id):
        return Speculative(target, draft, num_draft_tokens, eos_token_id)

(The buggy twin: ``r = p`` instead of ``np.maximum(p - q, 0)`` -- the full-p fallback.)

**VerificationKernel** -- a callable ``(target_probs [B, k+1, V] float64, draft_probs [B, k, V]
float64, draft_token_ids [B, k] int64, generator) -> emitted [B, k+1] int64``: accepted drafts,
then the recovered or bonus token, then ``-1``.  The ``torch.Generator`` is its only randomness.

Example adapter (a serving engine with a ``sample`` call; save as ``my_engine_plugin.py`` and run
``specverify audit --decoder my_engine_plugin:make --target path/to/ckpt --option url=...``)::

    import numpy as np
    from my_engine import Client                          # the system under test

    class EngineDecoder:
        name = "my-engine(speculative)"

        def __init__(self, url, vocab_size, eos_token_id):
            self.client, self.vocab_size, self.eos_token_id = Client(url), vocab_size, eos_token_id

        def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
            out = np.full((num_samples, max_new_tokens), -1, dtype=np.int64)
            for i in range(num_samples):
                ids = self.client.sample(prompt_ids, max_tokens=max_new_tokens, seed=seed * 100_003 + i,
                                         temperature=sampling.temperature, top_k=sampling.top_k or 0,
                                         top_p=sampling.top_p or 1.0,
                                         repetition_penalty=sampling.repetition_penalty or 1.0)
                out[i, : len(ids)] = ids                  # ends at EOS or max_new_tokens
            return out

    def make(url, vocab_size, eos_token_id):              # vocab_size/eos_token_id come from --target
        return EngineDecoder(url, vocab_size, eos_token_id)

A kernel adapter is a plain function with the kernel signature, e.g. wrapping a CUDA op:
``def kernel(target_probs, draft_probs, draft_token_ids, generator): return my_op(...)`` and
``specverify audit --kernel my_kernels:kernel``.
"""

from __future__ import annotations

from verifier._lazy import lazy_names

# each public name loads its module on first use (PEP 562): importing a light submodule (the audit spec) does not
# import torch, transformers or scipy through this package
_HOME = {
    "BlackBoxResult": "verifier.audit.blackbox", "blackbox_audit": "verifier.audit.blackbox",
    "blackbox_samples_needed": "verifier.audit.blackbox",
    "HFAssistedDecoder": "verifier.engines.hf_assisted", "make_hf_assisted_decoder": "verifier.engines.hf_assisted",
    **{n: "verifier.engines.hf_kernel" for n in ("ensemble_step_law", "hf_speculative_kernel",
                                                 "hf_supports_ensemble_weight", "kernel_as_hf_speculative_sampling",
                                                 "make_hf_kernel", "patched_speculative_sampling")},
    **{n: "verifier.audit.jsonl" for n in ("ReplayDecoder", "SampleFileError", "compare_target_logprobs",
                                           "export_jsonl", "import_jsonl", "iter_jsonl_samples")},
    **{n: "verifier.audit.kernel_audit" for n in ("KernelAuditResult", "KernelCase", "adversarial_case",
                                                  "audit_kernel", "blind_cell_reasons", "standard_kernel_cases")},
    **{n: "verifier.plugins" for n in ("PluginDecoder", "PluginKernel", "PluginLoadError", "load_decoder",
                                       "load_kernel", "load_plugin")},
    **{n: "verifier.audit.suite_builder" for n in ("AuditPlan", "AuditSpec", "plan_audit")},
}


__getattr__, __dir__ = lazy_names("verifier.audit", _HOME, globals())


__all__ = [
    "AuditPlan",
    "AuditSpec",
    "BlackBoxResult",
    "HFAssistedDecoder",
    "KernelAuditResult",
    "KernelCase",
    "PluginDecoder",
    "PluginKernel",
    "PluginLoadError",
    "ReplayDecoder",
    "SampleFileError",
    "adversarial_case",
    "audit_kernel",
    "blackbox_audit",
    "blackbox_samples_needed",
    "blind_cell_reasons",
    "compare_target_logprobs",
    "ensemble_step_law",
    "export_jsonl",
    "hf_speculative_kernel",
    "hf_supports_ensemble_weight",
    "import_jsonl",
    "iter_jsonl_samples",
    "kernel_as_hf_speculative_sampling",
    "load_decoder",
    "load_kernel",
    "load_plugin",
    "make_hf_assisted_decoder",
    "make_hf_kernel",
    "patched_speculative_sampling",
    "plan_audit",
    "standard_kernel_cases",
]
