"""The process runner behind the ``llama.cpp`` adapter (:mod:`verifier.engines.llama_cpp`); imports numpy."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from verifier.engines._llama_common import INSTALL_COMMAND, VERSION
from verifier.errors import DecoderError, DecoderOutputError, refuse_sampling
from verifier.protocols import PADDING_TOKEN_ID, DecoderStats

__all__ = ["LlamaCppDecoder", "CONTROLS", "SAMPLER_ORDER", "token_origins"]

ENGINE_NAME = "llama.cpp"
CONTROLS = {"none": "llama-speculative-ids", "sampled_draft": "llama-speculative-ids-ctl-draft",
            "residual_by_id": "llama-speculative-ids-ctl-residual", "both": "llama-speculative-ids-ctl-both"}
SAMPLER_ORDER = "top_k;temperature;top_p"  # Hugging Face's order (top-k commutes with temperature; top-p does not)
RUN_TIMEOUT_S = 120  # one sample's process; the shipped models take well under a second
_TOKEN = re.compile(r"\[specverify\] token (\d+) ([01])$", re.M)  # no ^: a log line without newline may precede
_PROMPT = re.compile(r"\[specverify\] prompt((?: \d+)*)$", re.M)
_STAT = re.compile(r"n_(drafted|accept)\s*=\s*(\d+)")


def token_origins(flags: Sequence[int], num_draft_tokens: int) -> np.ndarray:
    """Origin code of each printed token (:data:`verifier.protocols.ORIGIN_CODES`) from its accept flag.

    Token 1 is a plain target sample (the binary drafts only after it): code 2 ("bonus", a target
    sample after a round of zero drafts).  Later, flag 1 is an accepted draft (0); flag 0 ends a
    round: the bonus (2) after ``num_draft_tokens`` accepted drafts (every round drafts exactly k
    with ``-np 1``), else the token sampled from the residual (1, "recovered").

    >>> token_origins([0, 1, 0, 0, 1, 1, 1, 0], 3).tolist()
    [2, 0, 1, 1, 0, 0, 0, 2]
    """
    out, run = np.full(len(flags), 2, dtype=np.int8), 0
    for i, flag in enumerate(flags[1:], start=1):
        if flag:
            out[i], run = 0, run + 1
        else:
            out[i], run = (2 if run >= num_draft_tokens else 1), 0
    return out


class LlamaCppDecoder:
    """:class:`verifier.protocols.Decoder` over the ``llama-speculative-ids`` binary (see the module docstring).

    Parameters
    ----------
    target_gguf, draft_gguf : Path
        f32 GGUF files of the target and draft.
    tokenizer : transformers tokenizer
        The target's Hugging Face tokenizer (decodes prompt ids to the text the binary tokenizes).
    num_draft_tokens : int
        k (``--spec-draft-n-max``).
    vocab_size : int
    eos_token_id : int or None
    binary : Path
    processes, threads, ctx_size : int
    """

    def __init__(self, *, target_gguf: Path, draft_gguf: Path, tokenizer: Any, num_draft_tokens: int, vocab_size: int,
                 eos_token_id: int | None, binary: Path, processes: int = 2, threads: int = 1, ctx_size: int = 0,
                 settings: dict[str, Any] | None = None) -> None:
        self.target_gguf, self.draft_gguf, self.binary = Path(target_gguf), Path(draft_gguf), Path(binary)
        self.tokenizer = tokenizer
        self.num_draft_tokens = int(num_draft_tokens)
        self.vocab_size = int(vocab_size)
        self.eos_token_id = eos_token_id
        self.processes, self.threads, self.ctx_size = int(processes), int(threads), int(ctx_size)
        self.name = ENGINE_NAME if binary.name == CONTROLS["none"] else f"{ENGINE_NAME}[control={binary.name}]"
        self.settings = {"engine": ENGINE_NAME, "version": VERSION, "binary": binary.name, "num_draft_tokens": self.num_draft_tokens,
                         "samplers": SAMPLER_ORDER, "processes": self.processes, "threads": self.threads, **(settings or {})}
        self.last_stats: DecoderStats | None = None

    rows_per_step = 1  # one process per row: batch_composition levels above 1 row are refused
    batching = "one row per speculative step: one llama-speculative process per row"

    # -- options -----------------------------------------------------------------------------
    def sampling_args(self, sampling: Any) -> list[str]:
        """The binary's sampling flags for ``sampling``, or SamplingRefusedError (exit 2) for what it cannot express."""
        penalty = getattr(sampling, "repetition_penalty", None)
        if penalty is not None and penalty != 1.0:
            raise refuse_sampling("repetition-penalty", penalty, "not set: llama.cpp's penalty window holds only generated "
                                   "tokens (llama-speculative never feeds the prompt to its sampler), Hugging Face's the whole context")
        top_k = sampling.top_k if sampling.top_k is not None else 0
        top_p = sampling.top_p if sampling.top_p is not None else 1.0
        presence = float(getattr(sampling, "presence_penalty", None) or 0.0)
        frequency = float(getattr(sampling, "frequency_penalty", None) or 0.0)
        min_p = float(getattr(sampling, "min_p", None) or 0.0)
        # issue 29 kind 3, the harness's (vLLM's) semantics: ``penalties`` first -- llama_sampler_penalties_apply
        # subtracts frequency x count + presence x [count > 0] from each logit, counted over the tokens accepted into
        # the sampler, which in llama-speculative are the generated ones only (the prompt is never accepted) -- and
        # ``min_p`` last, after temperature / top-k / top-p (keeps p >= min_p x max p, as the harness); a window
        # covering every generated token is set per process (command)
        samplers = ("penalties;" if presence or frequency else "") + SAMPLER_ORDER + (";min_p" if min_p else "")
        return ["--temp", repr(float(sampling.temperature)), "--top-k", str(int(top_k)), "--top-p", repr(float(top_p)),
                "--min-p", repr(min_p), "--presence-penalty", repr(presence), "--frequency-penalty", repr(frequency),
                "--repeat-penalty", "1.0", "--samplers", samplers]

    def command(self, text: str, max_new_tokens: int, sampling_args: list[str], seed: int, prompt_len: int) -> list[str]:
        """The argv of one sample's process."""
        ctx = self.ctx_size or prompt_len + max_new_tokens + 2 * self.num_draft_tokens + 16
        return [str(self.binary), "-m", str(self.target_gguf), "-md", str(self.draft_gguf),
                "--spec-draft-n-max", str(self.num_draft_tokens), "-p", text, "-n", str(max(max_new_tokens - 1, 0)),
                "-s", str(int(seed)), *sampling_args, "--repeat-last-n", str(max(64, max_new_tokens)),
                "-t", str(self.threads), "-c", str(ctx), "-np", "1"]

    # -- one process -------------------------------------------------------------------------
    def _run_one(self, argv: list[str]) -> tuple[list[int], list[tuple[int, int]], dict[str, int]]:
        try:
            # errors="replace": the binary prints the generated text piece by piece, a piece may end inside a UTF-8
            # character (seen at T = 1); the ids come from the ASCII [specverify] lines
            proc = subprocess.run(argv, capture_output=True, text=True, encoding="utf-8", errors="replace",
                                  timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise DecoderError(f"llama-speculative ran past {RUN_TIMEOUT_S} s: {' '.join(argv[:12])} ...") from None
        except OSError as exc:
            raise DecoderError(f"cannot run {argv[0]!r}: {exc} (reinstall: {INSTALL_COMMAND})") from None
        if proc.returncode != 0:
            raise DecoderError(f"llama-speculative exited with status {proc.returncode} (seed {argv[argv.index('-s') + 1]}); "
                               f"its stderr ends with:\n{proc.stderr[-3000:]}")
        prompt = _PROMPT.search(proc.stderr)
        tokens = [(int(t), int(a)) for t, a in _TOKEN.findall(proc.stderr)]
        if prompt is None or not tokens:
            raise DecoderOutputError(f"llama-speculative printed no [specverify] lines (is {argv[0]!r} the ids copy?); "
                                     f"stderr ends with:\n{proc.stderr[-2000:]}")
        stats = {k: int(v) for k, v in _STAT.findall(proc.stderr + proc.stdout)}
        return [int(t) for t in prompt.group(1).split()], tokens, stats

    # -- the Decoder protocol ------------------------------------------------------------------
    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: Any, seed: int) -> np.ndarray:
        """Emitted tokens, int64 (num_samples, max_new_tokens), -1 after EOS; one binary process per sample.

        Raises
        ------
        SamplingRefusedError
            (exit 2, from ``audit`` and inside a suite run) a sampling setting llama.cpp cannot express, or a
            prompt whose text the binary tokenizes to other ids than ``prompt_ids``.
        DecoderError
            A process exits non-zero (exit 3 of the audit), with its stderr.
        """
        from verifier.engines.bridge import hashed_seeds

        args = self.sampling_args(sampling)
        prompt = [int(t) for t in prompt_ids]
        text = self.tokenizer.decode(prompt, clean_up_tokenization_spaces=False)
        seeds = hashed_seeds(seed, num_samples)
        argvs = [self.command(text, max_new_tokens, args, int(s), len(prompt)) for s in seeds]
        with ThreadPoolExecutor(max_workers=max(1, self.processes)) as pool:
            results = list(pool.map(self._run_one, argvs))
        out = np.full((num_samples, max_new_tokens), PADDING_TOKEN_ID, dtype=np.int64)
        origins = np.full((num_samples, max_new_tokens), PADDING_TOKEN_ID, dtype=np.int8)
        counts: list[int] = []
        drafted = accepted = flagged = unreported = 0
        for row, (seen_prompt, tokens, stats) in enumerate(results):
            if seen_prompt != prompt:
                raise refuse_sampling("prompt_ids", prompt, f"a prompt whose text {text!r} llama.cpp tokenizes back to the same ids "
                                       f"(it gives {seen_prompt}); llama-speculative takes text only")
            ids = [t for t, _ in tokens]
            if self.eos_token_id is not None and self.eos_token_id in ids:
                ids = ids[: ids.index(self.eos_token_id) + 1]
            ids = ids[:max_new_tokens]
            out[row, : len(ids)] = ids
            origins[row, : len(ids)] = token_origins([f for _, f in tokens], self.num_draft_tokens)[: len(ids)]
            run = 0
            for _token, flag in tokens[1:]:  # token 1 is a plain target sample; then each round ends with a 0 flag
                if flag:
                    run += 1
                else:
                    counts.append(run)
                    run = 0
            flagged += sum(f for _, f in tokens)
            # The final n_drafted/n_accept lines are sometimes missing from a process's log (seen: about 1 row in
            # 6 in a fresh CI build; the same argv rerun prints them; llama.cpp logs through an asynchronous log
            # thread). Such a row's totals are "not reported" (counted in the stats), never added as 0.
            if stats.get("accept") is None:
                unreported += 1
                continue
            drafted += stats.get("drafted", 0)
            accepted += stats["accept"]
            if stats["accept"] != sum(f for _, f in tokens):
                raise DecoderOutputError(f"llama-speculative printed n_accept = {stats['accept']} but flagged "
                                         f"{sum(f for _, f in tokens)} accepted tokens (seed {seeds[row]})")
        self.last_stats = DecoderStats(
            rounds=len(counts), accepted_counts=np.asarray(counts, dtype=np.int64), num_draft_tokens=self.num_draft_tokens,
            first_round_accepted=None, origins=origins,
            extra={"engine_drafted": drafted, "engine_accepted": accepted, "processes": num_samples,
                   "flagged_accepted": flagged, "rows_without_engine_totals": unreported,
                   "note": "round 1 starts after token 1 (a plain target sample): first_round_accepted not reported"})
        return out

