"""``llama-cpp-python``: ``Llama(model_path=..., draft_model=...)`` and ``Llama.generate`` as a decoder.

Driven code (unmodified, from the ``llama-cpp-python==0.3.36`` sdist, on the libllama that
``bash ci/engines/llama-cpp.sh`` builds once for both llama.cpp adapters, via ``LLAMA_CPP_LIB_PATH``):
``llama_cpp/llama.py::Llama.generate`` with a ``llama_cpp/llama_speculative.py::LlamaDraftModel``.

What "speculative" means in this library (read from the source): ``draft_model`` is not a second
GGUF model but any ``LlamaDraftModel`` -- a callable that returns proposed token ids (the library
ships ``LlamaPromptLookupDecoding``).  ``generate`` evaluates the proposals with the target in one
batch, then samples the target at each position with its ordinary sampler chain and keeps going
while the sample equals the proposal; at the first mismatch it keeps the sample and rolls the KV
cache back.  That is the "accept iff the draft equals a fresh target sample" rule: lossless for any
proposals, with acceptance ``p(proposal)`` per position.  Option ``draft``:

* ``prompt_lookup`` (default) -- the library's ``LlamaPromptLookupDecoding(max_ngram_size,
  num_pred_tokens=k)``; it proposes only where the last n-gram recurs in the context, so audit it
  on a prompt with repeats (``suites/engines/llama-cpp-python.toml``);
* ``model`` -- k greedy tokens of the draft GGUF (a second ``Llama``), wrapped as a ``LlamaDraftModel``.
  The package ships no model-backed draft (``llama_speculative.py`` has only the abstract
  ``LlamaDraftModel`` and ``LlamaPromptLookupDecoding``; the sdist's ``examples/server`` has its own
  prompt-lookup and MTP-head providers, outside the package): this subclass, defined in the worker,
  uses the package's extension point, it is not a shipped class.

The engine runs in its own venv behind a worker (:mod:`verifier.engines.bridge`,
``verifier/engines/workers/llama_cpp_python.py``): one ``Llama`` per decoder, reused across samples
(``set_seed`` with a hashed seed per sample, ``generate(reset=True)``).

Sampling: ``generate(temp=T, top_k=K or 0, top_p=P or 1, min_p=M or 0, typical_p=1, repeat_penalty=1,
frequency_penalty=F or 0, presence_penalty=PR or 0)``.  The library's chain is fixed (``Llama._init_sampler``):
penalties, then top-k, typical, top-p, min-p, **then** temperature, then the dist sampler.  Top-p and min-p before
temperature are not Hugging Face's law (vendored ``llama-sampler.cpp``: min-p keeps ``logit >= max logit + log(min_p)``
on the unscaled logits), so ``top_p < 1`` or ``min_p`` together with ``temperature`` other than 0 or 1 is refused.
Penalties (issue 29, kind 3; vendored ``llama_sampler_penalties_apply``): repetition (CTRL rule), then
``logit -= count * frequency + (count > 0) * presence`` -- the harness's order and rule -- over the tokens the
sampler has *accepted*: ``generate`` builds a fresh sampler chain per call and ``llama_sampler_sample`` accepts only
the tokens it samples, so the prompt never counts, and only the last ``last_n_tokens_size`` (64) sampled tokens do.
Presence and frequency therefore match the harness's law (generated tokens only) up to 64 emitted tokens (more is
refused); ``repetition_penalty`` is refused (the harness's repetition penalty also reads the prompt, the library's
does not).  Temperature 0 is the library's greedy sampler (penalties, then argmax).

Logprobs (kind 4): ``Llama.generate`` yields token ids only; ``create_completion(logprobs=N)`` reports
``Llama.logits_to_logprobs`` of the raw logits (a raw mode, not the processed law), so the adapter reports none.

Stop rules (kind 5): ``Llama.generate`` has no stop check of its own (it yields every sampled token, accepted
proposals one at a time); ``Llama._create_completion`` checks each yielded token -- EOS (``llama_vocab_is_eog``), then
the stop *strings* on the completion's text, then ``max_tokens`` -- and ``break``s.  Strings are its only per-request
stop mechanism, so a stop rule runs each row through ``create_completion(stop=STRINGS, max_tokens=...)`` with
one-character strings whose stop set is exactly the request's ``stop_token_ids`` (:mod:`verifier.engines._stop_strings`;
any other set is refused, exit 2, before the engine starts); the worker keeps every token ``generate`` yielded to it.
Known defect there: after a token ending in an incomplete UTF-8 lead byte, ``multibyte_fix`` ``continue``s past the
stop-string and ``max_tokens`` checks for the next token, so one token can follow a stop string and ``max_tokens``
can be overshot by one (``reports/audits/llama-cpp-python-0.3.36/field-kinds/stop/FINDINGS.md``).

Batching (kind 1): the worker runs the rows of a call one at a time (one ``Llama``, one ``generate`` per row), so
``batch_composition`` levels above 1 row are refused (:func:`verifier.runner.batch.check_batch_level`).

Engine statistics (the library reports none): each draft call is a round, its accepted count is how
many proposals the emitted tokens matched (``DecoderStats.accepted_counts``).  The first token is a
plain target sample (drafting starts after it) and the proposals are not the harness's draft, so
``first_round_accepted`` is not reported; per-token origins are (0 a proposal the target's sample matched,
1 the sample that differed, 2 a target sample with no proposal left to check, token 1 included).  Numeric floor: ``target_logits(prompt_ids)`` returns
``Llama.scores`` (the engine's own float32 logits) after the prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verifier.engines import register_engine
from verifier.engines._llama_common import INSTALL_COMMAND, PACKAGE, VERSION, gguf_path, hf_vocab, model_spec
from verifier.engines.base import Engine, EngineOption
from verifier.errors import invalid_argument

__all__ = ["LlamaCppPython", "decoder"]

HANDLER = Path(__file__).resolve().parent / "workers" / "llama_cpp_python.py"
PY_SOURCE_FILES = ("llama_cpp/llama.py", "llama_cpp/llama_speculative.py", "llama_cpp/_internals.py")


@register_engine("llama-cpp-python")
class LlamaCppPython(Engine):
    kind = "decoder"
    worker_decoder = True  # its decoders are EngineDecoder workers (bench engine-alone replays their calls)
    package = PACKAGE
    version = VERSION
    entry_point = "llama_cpp/llama.py::Llama.generate with draft_model=llama_cpp/llama_speculative.py::LlamaDraftModel"
    batching = ("one row per speculative step: the worker calls Llama.generate once per row (batch_composition "
                "levels above 1 row are refused)")
    options = (
        EngineOption("draft", "prompt_lookup", ("prompt_lookup", "model"),
                     "'prompt_lookup': the library's LlamaPromptLookupDecoding; 'model': k greedy tokens of the draft GGUF"),
        EngineOption("max_ngram_size", 2, (), "LlamaPromptLookupDecoding(max_ngram_size=...)"),
        EngineOption("n_ctx", 512, (), "Llama(n_ctx=...)"),
        EngineOption("threads", 1, (), "Llama(n_threads=...)"),
    )

    @classmethod
    def install_script(cls) -> str:
        return INSTALL_COMMAND

    @classmethod
    def source_files(cls) -> list[str]:
        return list(PY_SOURCE_FILES)


def decoder(target_model: str = "shipped:target", draft_model: str = "shipped:draft", num_draft_tokens: int = 4,
            vocab_size: int | None = None, eos_token_id: int | None = None, draft: str = "prompt_lookup",
            max_ngram_size: int = 2, n_ctx: int = 512, threads: int = 1):
    """Decoder plugin factory: ``specverify audit --engine llama-cpp-python`` (= ``--decoder verifier.engines.llama_cpp_python:decoder``).

    Parameters
    ----------
    target_model, draft_model : str
        ``shipped:target`` / ``shipped:draft`` or Hugging Face checkpoint folders (converted to f32
        GGUF with llama.cpp's converter); the draft GGUF is used only with ``draft="model"``.
    num_draft_tokens : int, default 4
        k: proposals per draft call (``num_pred_tokens`` of the prompt-lookup draft).
    draft : {"prompt_lookup", "model"}, default "prompt_lookup"
    max_ngram_size, n_ctx, threads : int

    Raises
    ------
    EngineNotInstalledError
        (exit 2) not installed; names ``bash ci/engines/llama-cpp.sh``.
    InvalidArgumentError
        (exit 2) an option value not allowed, a tabular model.
    """
    opts = LlamaCppPython.resolve_options({"draft": draft, "max_ngram_size": max_ngram_size, "n_ctx": n_ctx, "threads": threads})
    for name in ("max_ngram_size", "n_ctx", "threads"):
        if opts[name] < 1:
            raise invalid_argument(f"--engine-arg {name}", opts[name], "an integer >= 1")
    if not isinstance(num_draft_tokens, int) or num_draft_tokens < 1:
        raise invalid_argument("num_draft_tokens", num_draft_tokens, "an integer >= 1")
    root = LlamaCppPython.require_installed()
    target_model, draft_model = model_spec(target_model, "target_model"), model_spec(draft_model, "draft_model")
    from verifier.engines._llama_cpp_python_decoder import LlamaCppPythonDecoder
    from verifier.engines.decoder import checkpoint_dir

    vocab, eos = hf_vocab(target_model)
    eos = eos if eos_token_id is None else eos_token_id
    init = {"eos_token_id": eos, "target_gguf": str(gguf_path(root, target_model, "target_model")), "draft": opts["draft"],
            "num_draft_tokens": num_draft_tokens, "n_ctx": opts["n_ctx"], "max_ngram_size": opts["max_ngram_size"],
            "threads": opts["threads"]}
    if opts["draft"] == "model":
        init["draft_gguf"] = str(gguf_path(root, draft_model, "draft_model"))
    dec = LlamaCppPythonDecoder(LlamaCppPython, HANDLER, init=init, num_draft_tokens=num_draft_tokens,
                                vocab_size=vocab if vocab_size is None else vocab_size,
                                eos_token_id=eos,
                                supported={"temperature", "top_k", "top_p", "presence_penalty", "frequency_penalty", "min_p"},
                                env={"LLAMA_CPP_LIB_PATH": str(root / "build" / "bin")}, rows_per_step=1,
                                generate_keywords=("stop_token_ids", "max_tokens"))
    dec.checkpoint = checkpoint_dir(target_model, "target_model")
    dec.settings.update(target_model=target_model, draft_model=draft_model if opts["draft"] == "model" else None)
    return dec
