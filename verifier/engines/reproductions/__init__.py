"""Engine reproductions: an outside engine's sampling law predicted from its source, to score against samples.

Each module rebuilds, on the shipped models, the law an engine's code samples (float64, from the
processed target/draft probs) -- the law a diagnosis can test the engine's own samples against; the
audit reports under ``reports/audits/<engine>-<version>/`` cite their output.  Pure computations here;
reading a run folder's samples is :mod:`verifier.diagnose.reproduce`
(``python -m verifier.diagnose.reproduce ENGINE RUN_DIR ...``).

========================  ===========================================================================
module                    engine, what it predicts
========================  ===========================================================================
``llama_cpp``             llama.cpp ``llama-speculative``: token 2 under the source and its 3 controls
                          (:func:`verifier.engines.llama_cpp_repro.speculative_step_law` in float64)
``llama_cpp_python``      llama-cpp-python ``Llama.generate`` with a model draft: first-round acceptance
                          of its target-match rule with greedy proposals
``openvino_genai``        OpenVINO GenAI ``validate_candidate``: tokens 1-2, independent or shared-seed
                          draws (:mod:`verifier.engines.openvino_repro`)
``openvino_replay``       the same engine replayed draw by draw from each call's ``rng_seed`` (needs the
                          engine: ``bash ci/engines/openvino-genai.sh``)
``transformers``          transformers' universal assisted generation (``mode=assistant_tokenizer``): token 1
                          with q in the translator's other column order (:mod:`verifier.engines.hf_vocab_order`)
``transformers_gemma4``   transformers' Gemma4 assistant (``mode=gemma4_assistant``): tokens 1-2, the greedy draft
                          verified against softmax of the raw assistant logits (dispatched by ``transformers``)
``vllm``                  vLLM-CPU: tokens 1-2 per class of the unwritten temperature (and their mixture);
                          the first speculative round's greedy-draft vs canonical acceptance
========================  ===========================================================================
"""

__all__ = ["SCORERS", "LAWS", "PREDICTED", "source_explanation"]

# ENGINE name of `python -m verifier.diagnose.reproduce ENGINE RUN_DIR ...` -> module scoring a run's sample sets
SCORERS = {
    "llama.cpp": "verifier.engines.reproductions.llama_cpp",
    "llama-cpp-python": "verifier.engines.reproductions.llama_cpp_python",
    "openvino-genai": "verifier.engines.reproductions.openvino_genai",
}

# ENGINE -> module predicting, from the engine's source, the joint law of the first LAW_TOKENS emitted tokens
# (engine_laws, law_unsupported, LAW_SOURCE, LAW_POINTER; engine_laws and law_unsupported take the decoder's options
# as the keyword ``options``, the engine arguments of the audit): ranked beside the family by the diagnosis of that engine's
# audits (verifier.diagnose.engine_laws), so a law that is no family hypothesis can still be named
LAWS = {
    "openvino-genai": "verifier.engines.reproductions.openvino_genai",
    "mlx-lm server": "verifier.engines.reproductions.mlx_lm_server",  # a URL audit's engine name (audit.json)
    "transformers": "verifier.engines.reproductions.transformers",  # assistant_tokenizer, gemma4_assistant (the decoder's options)
    "vllm": "verifier.engines.reproductions.vllm",  # the unwritten temperature's classes and their mixture
    "vllm (URL)": "verifier.engines.reproductions.vllm",
}

# ENGINE -> {hypothesis of verifier.diagnose.family whose law the engine's source predicts: what the source does}.
# When the diagnosis of that engine's audit names the hypothesis, the report names the root cause in the engine's
# own terms (verifier.diagnose.run_dir); the engine's control runs patch exactly these lines.
PREDICTED = {
    "llama.cpp": {
        "greedy_draft+residual_by_index@prefill": (
            "the law llama.cpp's source predicts (verifier/engines/llama_cpp_repro.py): examples/speculative/"
            "speculative.cpp samples the first token from the prompt step, drafts cur_p->data[0].id (the draft's most "
            "probable token) but accepts it with p/q as if sampled, and on a rejection subtracts dist_dft.data[i].p by "
            "array index after sorting both candidate arrays by id; controls: --engine-arg control=sampled_draft, "
            "residual_by_id, both"),
        "greedy_draft@prefill": (
            "the law llama.cpp's source predicts without top-k/top-p (verifier/engines/llama_cpp_repro.py): "
            "speculative.cpp drafts cur_p->data[0].id (the draft's most probable token) but accepts it with p/q as if "
            "sampled, after a first token from the prompt step (the by-index residual equals the residual when every "
            "token is kept); control: --engine-arg control=sampled_draft"),
    },
}


def source_explanation(engine: str | None, hypothesis: str) -> str | None:
    """What ``engine``'s source does that gives ``hypothesis``'s law (:data:`PREDICTED`), or None."""
    return PREDICTED.get(engine or "", {}).get(hypothesis)
