"""Plugin decoders for the runner tests, loaded by ``module:factory`` from test suites.

They sample directly from a tabular target whose law is exactly known, so the harness itself is
tested without depending on the speculative decoders: a correct sampler must PASS, a biased one
must be DETECTED, a crashing or garbage-returning one must give exit code 3.
"""

from __future__ import annotations

import os
import time

import numpy as np

from verifier.exact.tabular import TabularLM
from verifier.protocols import DecoderStats


class TableSampler:
    """Ancestral sampling from a TabularLM (numpy), optionally mixed with a wrong law.

    ``bias`` > 0 replaces the target row by ``(1 - bias) * target + bias * draft`` at every step:
    a decoder whose output law is at TV ``bias * TV(target, draft)`` from the target's.
    ``sharpen`` != 1 raises every row to that power and renormalises (a temperature error:
    ``sharpen = 1 / T_used`` for a target meant to run at T = 1).
    ``paired_rows`` makes rows ``2i`` and ``2i + 1`` share one random stream (the second repeats the
    first): every marginal and joint law stays the target's, only the collision cell can see it.
    """

    def __init__(self, target_model: TabularLM, draft_model: TabularLM, bias: float = 0.0,
                 crash_after_calls: int | None = None, garbage: bool = False, sleep_s: float = 0.0,
                 report_accepted: bool = False, num_draft_tokens: int = 1, sharpen: float = 1.0,
                 stats_rows: int | None = None, paired_rows: bool = False) -> None:
        self.target, self.draft = target_model, draft_model
        self.table = target_model.float_table()
        mix = draft_model.float_table()
        self.table = (1 - bias) * self.table + bias * mix
        if sharpen != 1.0:
            powered = self.table ** sharpen
            self.table = powered / powered.sum(axis=-1, keepdims=True)
        self.crash_after_calls = crash_after_calls
        self.garbage = garbage
        self.sleep_s = sleep_s
        self.calls = 0
        self.k = num_draft_tokens
        self.report_accepted = report_accepted
        self.stats_rows = stats_rows  # report_accepted with arrays of this length (a malformed figure) instead of num_samples
        self.last_stats = None
        self.paired_rows = paired_rows
        self.name = "table-sampler"

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        self.calls += 1
        if self.crash_after_calls is not None and self.calls > self.crash_after_calls:
            raise RuntimeError(f"injected crash in call {self.calls}")
        if self.sleep_s:
            time.sleep(self.sleep_s)
        rng = np.random.default_rng(seed)
        vocab, c, eos = self.target.vocab_size, self.target.context_len, self.target.eos_token_id
        out = np.full((num_samples, max_new_tokens), -1, dtype=np.int64)
        ctx = np.tile(np.asarray(prompt_ids, dtype=np.int64), (num_samples, 1))
        alive = np.ones(num_samples, dtype=bool)
        for t in range(max_new_tokens):
            idx = np.zeros(num_samples, dtype=np.int64)
            for j in range(c):
                idx = idx * vocab + ctx[:, ctx.shape[1] - c + j]
            cdf = np.cumsum(self.table[idx], axis=1)
            tok = (rng.random(num_samples)[:, None] > cdf).sum(axis=1).clip(0, vocab - 1)
            out[alive, t] = tok[alive]
            ctx = np.concatenate([ctx, tok[:, None]], axis=1)
            if eos is not None:
                alive &= tok != eos
        if self.garbage:
            bad = np.full(out.shape, np.nan)  # a NaN probability row cast to ids
            with np.errstate(invalid="ignore"):
                return bad.astype(np.int64)
        if self.paired_rows:  # BUG on purpose: two requests per random stream
            out[1::2] = out[0:num_samples - 1:2]
        if self.report_accepted:  # a plain sampler "accepts" nothing: a wrong accepted-count law
            rows = num_samples if self.stats_rows is None else self.stats_rows
            self.last_stats = DecoderStats(rounds=num_samples, accepted_counts=np.zeros(rows, np.int64),
                                           num_draft_tokens=self.k, first_round_accepted=np.zeros(rows, np.int64))
        return out


def table_sampler(target_model, draft_model, **options):
    """Factory: ``tests.runner.plugins:table_sampler`` (options as :class:`TableSampler`)."""
    return TableSampler(target_model, draft_model, **options)


def suicidal_sampler(target_model, draft_model, after_calls: int = 2, marker: str = ""):
    """Sample normally, but SIGKILL this process in call ``after_calls + 1`` once ``marker`` is absent
    (the kill-and-resume test creates the marker before resuming)."""
    sampler = TableSampler(target_model, draft_model)
    inner = sampler.generate

    def generate(*args, **kwargs):
        if sampler.calls >= after_calls and marker and not os.path.exists(marker):
            os.kill(os.getpid(), 9)
        return inner(*args, **kwargs)

    sampler.generate = generate
    return sampler


def memory_hog_sampler(target_model, draft_model, after_calls: int = 1):
    """Sample normally, then fail an allocation (``MemoryError``) in call ``after_calls + 1``, as a
    decoder does when ``num_samples x vocab`` outgrows the machine."""
    sampler = TableSampler(target_model, draft_model)
    inner = sampler.generate

    def generate(*args, **kwargs):
        if sampler.calls >= after_calls:
            raise MemoryError("Unable to allocate 14.4 GiB for an array with shape (500, 3, 262144)")
        return inner(*args, **kwargs)

    sampler.generate = generate
    return sampler
