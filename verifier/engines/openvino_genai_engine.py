"""``openvino-genai``: OpenVINO GenAI's speculative decoding pipeline (``LLMPipeline`` with a draft model).

Driven code (unmodified, ``openvino-genai==2026.4.1.0``; models exported by ``optimum-intel==2.2.0``
with ``--weight-format fp32``): ``openvino_genai.LLMPipeline(TARGET_IR, "CPU",
draft_model=openvino_genai.draft_model(DRAFT_IR, "CPU")).generate(input_ids, GenerationConfig(
do_sample=True, num_assistant_tokens=k, temperature, top_k, top_p, repetition_penalty, rng_seed))``,
one call per sample, in the engine's own venv (worker: ``verifier/engines/workers/openvino_genai.py``).
On CPU this runs the continuous-batching speculative pipeline
(``src/cpp/src/speculative_decoding/continuous_batching/``); the draft candidates are validated in
``src/cpp/src/sampling/sampler.cpp`` (``Sampler::validate_candidate`` and ``get_p_prime``).

Sampling options map one to one (OpenVINO's logit processor applies top-k, temperature, top-p in
Hugging Face's effective order; the repetition penalty covers prompt and generated tokens, as the harness's).
Issue 29, kind 3 (``LogitProcessor`` in ``src/cpp/src/sampling/logit_processor.hpp``, read at openvino.genai
0731d8ec; the wheel ships no source, its library has the same ``LogitTransformers::MinPFilter``): ``min_p`` is sent
as ``GenerationConfig.min_p`` (min-p after temperature, on normalised probs: the harness's rule), but refused with
``top_p < 1`` (OpenVINO runs min-p before top-p, the harness after); ``presence_penalty`` and ``frequency_penalty``
are refused: OpenVINO moves a generated token's logit toward 0 (``logit -= penalty`` when ``logit >= 0``, ``+=``
otherwise), not the OpenAI / vLLM law the harness audits.

Logprobs (kind 4): not returned on this path -- ``LLMPipeline.generate`` returns ``EncodedResults.scores``, one sum
per sequence; per-token ``generated_log_probs`` exist only on ``ContinuousBatchingPipeline``'s ``GenerationOutput``
(another entry point), and ``LogitProcessor`` normalises them over the raw logits (a raw mode).

Stop rules (kind 5): the request's ``stop_token_ids`` go to ``GenerationConfig.stop_token_ids`` and ``max_tokens`` to
``max_new_tokens`` (``generate_keywords``); the engine emits the stop token and ends the row, and the worker returns
each row as emitted (never cut), so a token past a stop accepted mid-block, or past ``max_tokens``, would show.

Batching (kind 1): the worker makes one ``generate`` call per row (``rows_per_step = 1``), so ``batch_composition``
levels above 1 row are refused.

Engine statistics: the pipeline exposes only a per-call total of accepted drafts
(``SDPerModelsPerfMetrics.get_num_accepted_tokens()``) and the tokens each main-model step emitted;
no per-round accepted counts and no first-round count, so the acceptance audit says "not reported"
and the totals go into the report's extra fields.  Per call the worker also counts the draft tokens the main model
verified (a step of size b > 1 verifies b - 1) and records them for the speculation guard
(:mod:`verifier.runner.speculation`): calls that verified none sampled the target alone (with prefix caching on, every
call after the pipeline's first ``content_length`` failure; at k = 1 with two new tokens, every call), so an audit in
which no call drafted is UNDERPOWERED "speculation never ran", never PASS, and the report says in how many calls
drafts were verified.

Numeric floor: ``target_logits`` runs the exported target IR with OpenVINO's CPU plugin at f32 (one plain
inference request; ``LLMPipeline`` exposes no logits).  The pipeline itself runs at the plugin's default precision
(option ``precision="engine"``): bf16 inference and a u8 KV cache on a CPU with native bf16 (AMX here), so the floor
understates the pipeline's distance from the f32 target; with min-p that moved a token across the threshold
(field-kinds/FINDINGS.md).  ``precision="f32"`` sets both to f32 (the control).  At k = 1 use ``max_new_tokens >= 3``: with k + 1 = 2
the draft proposes nothing and the audit sees plain target sampling (the guard then says so).  The speculative law is reproduced
exactly in :mod:`verifier.engines.openvino_repro` (FINDINGS.md).

Known engine error: about 1 call in 200 raises ``RuntimeError: Check 'content_length <= ...'``.
The worker retries the sample with a new, hash-derived seed (an independent draw) and returns every
failure with the tokens streamed before it; see the worker's docstring and ``FINDINGS.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verifier.engines import register_engine
from verifier.engines._decoder_models import converted_model
from verifier.engines.base import Engine, EngineOption
from verifier.errors import invalid_argument

__all__ = ["OpenVINOGenAI", "decoder"]

HANDLER = Path(__file__).resolve().parent / "workers" / "openvino_genai.py"


@register_engine("openvino-genai")
class OpenVINOGenAI(Engine):
    kind = "decoder"
    worker_decoder = True  # its decoders are EngineDecoder workers (bench engine-alone replays their calls)
    package = "openvino-genai"
    version = "2026.4.1.0"
    entry_point = "openvino_genai.LLMPipeline(target, 'CPU', draft_model=...).generate (sampler.cpp::Sampler::validate_candidate)"
    batching = ("one row per speculative step: the worker makes one LLMPipeline.generate call per row (batch_composition "
                "levels above 1 row are refused)")
    options = (EngineOption("prefix_caching", True, (True, False),
                            "SchedulerConfig.enable_prefix_caching (engine default on; the content_length errors were seen only with it on)"),
               EngineOption("precision", "engine", ("engine", "f32"),
                            "'engine': the CPU plugin's defaults (bf16 inference on CPUs with native bf16, u8 KV cache); "
                            "'f32': INFERENCE_PRECISION_HINT and KV_CACHE_PRECISION f32 for both models (the control of "
                            "the min-p finding, field-kinds/FINDINGS.md)"),
               EngineOption("failure_log", "", (), "JSONL file to append each retried engine failure to (seed, attempt, "
                            "tokens streamed before it); empty: not logged"))


def decoder(target_model: str = "shipped:target", draft_model: str = "shipped:draft", num_draft_tokens: int = 3,
            vocab_size: int = 384, eos_token_id: int | None = 0, **options: Any):
    """Plugin factory (``verifier.engines.openvino_genai_engine:decoder``): OpenVINO GenAI's speculative pipeline.

    Raises
    ------
    InvalidArgumentError
        (exit 2) an unknown option, a model other than the shipped ones, or k < 1.
    EngineNotInstalledError
        (exit 2) ``bash ci/engines/openvino-genai.sh`` has not run.
    """
    from verifier.engines._openvino_decoder import PENALTY_REFUSAL, OpenVINODecoder  # numpy: only when a decoder is built

    options = OpenVINOGenAI.resolve_options(options)
    if int(num_draft_tokens) < 1:
        raise invalid_argument("num_draft_tokens", num_draft_tokens, "an integer >= 1")
    target = converted_model(OpenVINOGenAI, target_model, "target_model")
    draft = converted_model(OpenVINOGenAI, draft_model, "draft_model")
    return OpenVINODecoder(OpenVINOGenAI, HANDLER,
                         init={"target_dir": str(target), "draft_dir": str(draft), "num_draft_tokens": int(num_draft_tokens),
                               "eos_token_id": eos_token_id, "vocab_size": int(vocab_size),
                               "prefix_caching": bool(options["prefix_caching"]), "failure_log": str(options["failure_log"]),
                               "precision": str(options["precision"])},
                         num_draft_tokens=num_draft_tokens, vocab_size=vocab_size, eos_token_id=eos_token_id,
                         greedy_ok=True, supported={"temperature", "top_k", "top_p", "repetition_penalty", "min_p"},
                         refusals={"presence_penalty": PENALTY_REFUSAL.format(name="PresencePenaltyTransform"),
                                   "frequency_penalty": PENALTY_REFUSAL.format(name="FrequencyPenaltyTransform")},
                         rows_per_step=1, generate_keywords=("stop_token_ids", "max_tokens"))
