"""``mlx-lm``: MLX-LM's speculative decoding loop (``speculative_generate_step``) as a decoder.

Driven code (unmodified, ``mlx-lm==0.32.2`` on ``mlx==0.32.4`` / ``mlx-cpu==0.32.4``):
``mlx_lm/generate.py::speculative_generate_step(prompt, model, draft_model, num_draft_tokens=k,
sampler=make_sampler(temp, top_p, top_k))``, one call per sample after ``mx.random.seed(seed)``, in
the engine's own venv (worker: ``verifier/engines/workers/mlx_lm.py``).  Models: the shipped
checkpoints converted by ``python -m mlx_lm convert --dtype float32`` at install time.

What the source does (read from 0.32.2):

* Verification is *token matching*, not the p/q rule: the draft samples k tokens with the sampler,
  the target scores them in one pass and samples its own token at each of the k+1 positions with
  the same sampler; a draft is accepted iff it equals the target's sample, and the target's sample
  at the first mismatch (or the bonus position) ends the round.  Every emitted token is therefore a
  target sample given the emitted prefix (lossless), but a draft is accepted with probability
  ``sum_x q(x) p(x)`` (rule ``fresh_target_match`` of :mod:`verifier.exact`), not ``sum min(p, q)``.
* ``make_sampler`` applies top-p, then min-p, then top-k to the *untempered* log-probs, then samples
  ``categorical(logprobs / temp)``.  Hugging Face (and :func:`verifier.sampling.processed_probs`)
  applies temperature, then top-k, then top-p.  Top-k commutes with temperature, so T and top-k
  map exactly; top-p alone maps exactly only at T = 1, and top-k with top-p never does (order).
  Those settings are refused (exit 2) rather than audited against a law the engine does not claim.
* ``make_logits_processors(repetition_penalty=...)`` sees only the tokens ``speculative_generate_step``
  feeds through ``_step`` after its prefill -- the prompt's last token and the generated ones, not
  the rest of the prompt -- while Hugging Face penalises every prompt token: refused (exit 2).
* Reported logprobs (the ``logprob`` test, issue 29 kind 4): the generator yields, with every token, the target's
  ``logits - logsumexp(logits)`` row at that position -- after the logits processors, before the sampler's
  temperature / top-k / top-p -- so the emitted token's entry is the processed law's logprob only when the sampler
  changes nothing (T = 1, no top-k / top-p); elsewhere ``return_logprobs`` is refused (exit 2) rather than
  audited against a law the engine does not report.
* Stop rules (issue 29, kind 5): ``speculative_generate_step`` checks ``max_tokens`` per token (``num_draft =
  min(max_tokens - ntoks, k)``, and ``if ntoks == max_tokens: break`` after every accepted draft, generate.py
  lines 621 and 640-646) but no stop token; ``stream_generate`` (lines 739 and 743; last response line 760) checks every token the loop yields --
  accepted drafts one at a time -- ``if token in tokenizer.eos_token_ids: break`` and ``if (n + 1) == max_tokens:
  break``, then yields that token as its last response.  The request's ``stop_token_ids`` therefore go to
  ``tokenizer.eos_token_ids = {EOS, *stop_token_ids}`` (the set mlx_lm's ``--extra-eos-token`` extends; mlx_lm has
  no other per-request stop token on this path -- its stop *strings* live in the server and ``BatchGenerator``, not
  on the speculative loop) and ``max_tokens`` to ``stream_generate(max_tokens=...)``; the worker keeps every
  response's token, uncut.
* Engine statistics: ``from_draft`` of each yielded token (True: an accepted draft; False: the
  target's token that ends a round) gives the accepted drafts of every round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verifier.engines import register_engine
from verifier.engines._decoder_models import converted_model
from verifier.engines.base import Engine
from verifier.errors import invalid_argument, refuse_sampling

__all__ = ["MLXLM", "MLXDecoder", "decoder"]

HANDLER = Path(__file__).resolve().parent / "workers" / "mlx_lm.py"


@register_engine("mlx-lm")
class MLXLM(Engine):
    kind = "decoder"
    worker_decoder = True  # its decoders are EngineDecoder workers (bench engine-alone replays their calls)
    package = "mlx-lm"
    version = "0.32.2"
    entry_point = "mlx_lm/generate.py::speculative_generate_step"
    options = ()
    batching = ("one row per speculative step: the worker runs one speculative_generate_step generator per row (it "
                "takes one sequence; batch_composition levels above 1 row are refused)")

    @classmethod
    def check_sampling(cls, sampling: Any, vocab_size: int = 384) -> None:
        """Refuse (exit 2) what mlx_lm's sampler and logits processors express differently from Hugging Face."""
        rp = getattr(sampling, "repetition_penalty", None)
        if rp is not None and rp != 1.0:
            raise refuse_sampling("repetition-penalty", rp, "not set: mlx_lm's repetition_penalty processor sees only the "
                                   "prompt's last token and the generated ones (Hugging Face penalises every prompt token)")
        t, top_k, top_p = (getattr(sampling, f, None) for f in ("temperature", "top_k", "top_p"))
        active_p = top_p is not None and top_p < 1.0
        if active_p and top_k is not None and top_k < vocab_size:
            raise refuse_sampling("top-p", top_p, "not set together with --top-k: mlx_lm's make_sampler applies top-p "
                                   "before top-k (Hugging Face: top-k, then top-p), a different law")
        if active_p and t is not None and t != 1.0:
            raise refuse_sampling("top-p", top_p, "not set with --temperature other than 1: mlx_lm's make_sampler "
                                   "filters top-p on the untempered probs (Hugging Face: after temperature), a different law")


def _check_raw_logprobs_are_processed(sampling: Any, vocab_size: int) -> None:
    """Refuse (exit 2) reported logprobs under a sampler that changes the law: mlx_lm yields the log-softmax of the
    target's logits before its sampler, which is the processed law only at T = 1 without top-k / top-p."""
    t, top_k, top_p = (getattr(sampling, f, None) for f in ("temperature", "top_k", "top_p"))
    why = ("with the 'logprob' test: mlx_lm yields the target's log-softmax before its sampler's temperature / top-k / "
           "top-p, not the processed law the test checks")
    if t is not None and t != 1.0:
        raise refuse_sampling("temperature", t, f"1 {why}")
    if top_k is not None and top_k < vocab_size:
        raise refuse_sampling("top-k", top_k, f"not set {why}")
    if top_p is not None and top_p < 1.0:
        raise refuse_sampling("top-p", top_p, f"not set {why}")


def _decoder_class() -> type:
    """``MLXDecoder``: :class:`~verifier.engines.decoder.EngineDecoder` refusing what mlx_lm's sampler orders
    differently (built on first use: listing engines must not import numpy)."""
    global MLXDecoder
    if MLXDecoder is None:
        from verifier.engines.decoder import EngineDecoder

        class _MLXDecoder(EngineDecoder):
            def check_sampling(self, sampling: Any) -> dict[str, Any]:
                MLXLM.check_sampling(sampling, self.vocab_size)
                return super().check_sampling(sampling)

            def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed, *, return_logprobs=False,
                         row_temperatures=None, stop_token_ids=(), max_tokens=None):
                """As :meth:`EngineDecoder.generate`; ``return_logprobs`` refused where mlx_lm's sampler processes
                the law (its yielded logprobs are those before the sampler); a stop rule runs the rows through
                ``stream_generate``'s own stop check (module docstring)."""
                if return_logprobs:
                    _check_raw_logprobs_are_processed(sampling, self.vocab_size)
                return super().generate(prompt_ids, num_samples, max_new_tokens, sampling, seed,
                                        return_logprobs=return_logprobs, row_temperatures=row_temperatures,
                                        stop_token_ids=stop_token_ids, max_tokens=max_tokens)

        _MLXDecoder.__name__ = _MLXDecoder.__qualname__ = "MLXDecoder"
        MLXDecoder = _MLXDecoder
    return MLXDecoder


MLXDecoder = None  # the class, once _decoder_class() has built it


def decoder(target_model: str = "shipped:target", draft_model: str = "shipped:draft", num_draft_tokens: int = 3,
            vocab_size: int = 384, eos_token_id: int | None = 0, **options: Any):
    """Plugin factory (``verifier.engines.mlx_lm_engine:decoder``): MLX-LM's speculative loop on the converted models.

    Raises
    ------
    InvalidArgumentError
        (exit 2) an unknown option, a model other than the shipped ones, or k < 1.
    EngineNotInstalledError
        (exit 2) ``bash ci/engines/mlx-lm.sh`` has not run.
    """
    MLXLM.resolve_options(options)
    if int(num_draft_tokens) < 1:
        raise invalid_argument("num_draft_tokens", num_draft_tokens, "an integer >= 1")
    target = converted_model(MLXLM, target_model, "target_model")
    draft = converted_model(MLXLM, draft_model, "draft_model")
    return _decoder_class()(MLXLM, HANDLER, init={"target_dir": str(target), "draft_dir": str(draft),
                                             "num_draft_tokens": int(num_draft_tokens), "eos_token_id": eos_token_id},
                      num_draft_tokens=num_draft_tokens, vocab_size=vocab_size, eos_token_id=eos_token_id,
                      supported={"temperature", "top_k", "top_p"}, greedy_ok=True, generate_keywords=("return_logprobs", "stop_token_ids", "max_tokens"),
                      rows_per_step=1)
