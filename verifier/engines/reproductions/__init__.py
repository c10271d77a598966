"""Engine reproductions: an outside engine's sampling law predicted from its source, to score against samples.

Each module rebuilds, on the shipped models, the law an engine's code samples (float64, from the
processed target/draft probs) -- the law a diagnosis can test the engine's own samples against; the
audit reports under ``reports/audits/<engine>-<version>/`` cite their output.  Pure computations here;
reading a run folder's samples is :mod:`verifier.diagnose.reproduce`
(``python -m verifier.diagnose.reproduce ENGINE RUN_DIR ...``).

=====================  ===========================================================================
module                 engine, what it predicts
=====================  ===========================================================================
``llama_cpp``          llama.cpp ``llama-speculative``: token 2 under the source and its 3 controls
                       (:func:`verifier.engines.llama_cpp_repro.speculative_step_law` in float64)
``llama_cpp_python``   llama-cpp-python ``Llama.generate`` with a model draft: first-round acceptance
                       of its target-match rule with greedy proposals
``openvino_genai``     OpenVINO GenAI ``validate_candidate``: tokens 1-2, independent or shared-seed
                       draws (:mod:`verifier.engines.openvino_repro`)
``openvino_replay``    the same engine replayed draw by draw from each call's ``rng_seed`` (needs the
                       engine: ``bash ci/engines/openvino-genai.sh``)
``vllm``               vLLM's first speculative round: greedy-draft vs canonical acceptance
=====================  ===========================================================================
"""

__all__ = ["SCORERS"]

# ENGINE name of `python -m verifier.diagnose.reproduce ENGINE RUN_DIR ...` -> module scoring a run's sample sets
SCORERS = {
    "llama.cpp": "verifier.engines.reproductions.llama_cpp",
    "llama-cpp-python": "verifier.engines.reproductions.llama_cpp_python",
    "openvino-genai": "verifier.engines.reproductions.openvino_genai",
}
