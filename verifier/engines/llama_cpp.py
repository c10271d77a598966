"""``llama.cpp``: the ``llama-speculative`` example binary (stochastic verification) as a decoder.

Driven code: ``examples/speculative/speculative.cpp`` of llama.cpp 0c1e570 (vendored in the
``llama-cpp-python==0.3.36`` sdist) with ``common/sampling.cpp`` and ``src/llama-sampler.cpp``,
built by ``bash ci/engines/llama-cpp.sh``.  The binary prints text, so the adapter runs a copy
(``bin/llama-speculative-ids``) with two ``fprintf`` lines added -- the prompt ids it tokenized, and
each emitted token id with its accept flag next to ``++n_predict`` -- and nothing else changed
(``ci/engines/llama_cpp/variants.py``; the report carries the sha256 of both files).

One process per sample: ``-m TARGET.gguf -md DRAFT.gguf --spec-draft-n-max K -p TEXT -n T-1
-s SEED --temp T --top-k K' --top-p P --min-p 0 --samplers top_k;temperature;top_p -t 1``.
Several processes run at once (option ``processes``); every sample's seed is hashed from the chunk
seed (:func:`verifier.engines.bridge.hashed_seeds`): the binary feeds it to
``std::default_random_engine`` (minstd), whose first draws for consecutive seeds are correlated.

Mapping of :class:`~verifier.sampling.SamplingConfig` (Hugging Face order: temperature, top-k, top-p):

* ``--samplers top_k;temperature;top_p`` -- llama.cpp's default chain applies top-p *before*
  temperature (and adds penalties, DRY, typical, min-p, XTC); top-k commutes with temperature, top-p
  does not, so the order is set explicitly and every other sampler is left out of the chain;
* ``top_k=None`` -> ``--top-k 0``, ``top_p=None`` -> ``--top-p 1``, ``--min-p 0``;
* ``repetition_penalty`` is refused: llama.cpp's penalty window holds only generated tokens (the
  example never feeds the prompt to the sampler), the Hugging Face penalty covers the whole context;
* ``presence_penalty`` / ``frequency_penalty`` (issue 29 kind 3): that same window is the harness's (vLLM's) --
  generated tokens only -- so they go in as ``penalties`` first in ``--samplers`` (``--repeat-last-n`` covering
  every generated token); ``min_p`` as ``min_p`` after ``top_p`` (the harness applies it after temperature, top-k
  and top-p; llama.cpp's keeps ``p >= min_p x max p``, the same set);
* temperature 0 runs the binary's greedy verification path.

The prompt goes in as text (the binary has no id input): the target's Hugging Face tokenizer decodes
the prompt ids, and every run's printed prompt ids must equal them (else the run is refused).

Output: the first ``max_new_tokens`` printed ids, ``-1`` after the first EOS (the binary keeps
printing the drafts accepted after an EOS until its round ends).  The first token is a plain target
sample (the binary drafts only after it), so round 1 starts after token 1.  Engine statistics:
per-round accepted counts from the accept flags, and ``n_drafted`` / ``n_accept`` as the binary
prints them (``DecoderStats.extra``).  ``first_round_accepted`` is not reported: the harness's
canonical first-round law is at the prompt, this engine's first round is one token later.  Per-token
origins (:func:`verifier.engines._llama_cpp_run.token_origins`) come from the accept flags; :mod:`verifier.engines.reproductions.llama_cpp`
(``python -m verifier.diagnose.reproduce llama.cpp RUN_DIR``) turns them into the first round's acceptance next to canonical.

``control`` (off by default) selects a copy with one defect patched (see the audit report):
``sampled_draft`` (draft token = the draft sampler's sample, not the most probable candidate),
``residual_by_id`` (residual subtracts the draft prob of the same token id), ``both``.
"""

from __future__ import annotations

from verifier.engines import register_engine
from verifier.engines._llama_common import INSTALL_COMMAND, PACKAGE, SOURCE_FILES, VERSION, gguf_path, hf_vocab, model_spec
from verifier.engines.base import Engine, EngineOption
from verifier.errors import invalid_argument

__all__ = ["LlamaCpp", "decoder"]

CONTROLS = ("none", "sampled_draft", "residual_by_id", "both")  # binaries: _llama_cpp_run.CONTROLS


@register_engine("llama.cpp")
class LlamaCpp(Engine):
    kind = "decoder"
    package = PACKAGE
    version = VERSION
    entry_point = "vendor/llama.cpp/examples/speculative/speculative.cpp::main (llama-speculative; run as bin/llama-speculative-ids)"
    batching = "one row per speculative step: one llama-speculative process per row (batch_composition levels above 1 row are refused)"
    options = (
        EngineOption("control", "none", tuple(CONTROLS), "'none': the engine as shipped; otherwise a CONTROL copy with one "
                     "defect patched: 'sampled_draft', 'residual_by_id' or 'both' (see the audit report)"),
        EngineOption("processes", 2, (), "binary processes run at once (one sample each)"),
        EngineOption("threads", 1, (), "-t of each process"),
        EngineOption("ctx_size", 0, (), "-c of each process; 0: prompt + max_new_tokens + 2k + 16"),
    )

    @classmethod
    def install_script(cls) -> str:
        return INSTALL_COMMAND

    @classmethod
    def source_files(cls) -> list[str]:
        return list(SOURCE_FILES)


def decoder(target_model: str = "shipped:target", draft_model: str = "shipped:draft", num_draft_tokens: int = 4,
            vocab_size: int | None = None, eos_token_id: int | None = None, control: str = "none", processes: int = 2,
            threads: int = 1, ctx_size: int = 0):
    """Decoder plugin factory: ``specverify audit --engine llama.cpp`` (= ``--decoder verifier.engines.llama_cpp:decoder``).

    Parameters
    ----------
    target_model, draft_model : str
        ``shipped:target`` / ``shipped:draft`` (converted at install time) or Hugging Face checkpoint
        folders (converted on first use with llama.cpp's converter, f32).
    num_draft_tokens : int, default 4
        k, ``--spec-draft-n-max``.
    vocab_size, eos_token_id : int, optional
        Default: the target checkpoint's config.
    control : {"none", "sampled_draft", "residual_by_id", "both"}, default "none"
        Which binary: the engine as shipped, or a CONTROL copy with one defect patched.
    processes, threads, ctx_size : int
        Processes at once (>= 1), ``-t`` (>= 1) and ``-c`` (0: automatic) of each process.

    Raises
    ------
    EngineNotInstalledError
        (exit 2) not installed; names ``bash ci/engines/llama-cpp.sh``.
    InvalidArgumentError
        (exit 2) an option value not allowed, a tabular model.
    """
    opts = LlamaCpp.resolve_options({"control": control, "processes": processes, "threads": threads, "ctx_size": ctx_size})
    for name in ("processes", "threads"):
        if opts[name] < 1:
            raise invalid_argument(f"--engine-arg {name}", opts[name], "an integer >= 1")
    if opts["ctx_size"] < 0:
        raise invalid_argument("--engine-arg ctx_size", opts["ctx_size"], "0 (automatic) or a context length >= 1")
    if not isinstance(num_draft_tokens, int) or num_draft_tokens < 1:
        raise invalid_argument("num_draft_tokens", num_draft_tokens, "an integer >= 1")
    root = LlamaCpp.require_installed()
    target_model, draft_model = model_spec(target_model, "target_model"), model_spec(draft_model, "draft_model")
    from verifier.engines._llama_cpp_run import CONTROLS as BINARIES, LlamaCppDecoder
    from verifier.models.loading import load_tokenizer

    vocab, eos = hf_vocab(target_model)
    return LlamaCppDecoder(
        target_gguf=gguf_path(root, target_model, "target_model"), draft_gguf=gguf_path(root, draft_model, "draft_model"),
        tokenizer=load_tokenizer(target_model), num_draft_tokens=num_draft_tokens,
        vocab_size=vocab if vocab_size is None else vocab_size, eos_token_id=eos if eos_token_id is None else eos_token_id,
        binary=root / "bin" / BINARIES[opts["control"]], processes=opts["processes"], threads=opts["threads"],
        ctx_size=opts["ctx_size"], settings={"control": opts["control"], "target_model": target_model, "draft_model": draft_model})
