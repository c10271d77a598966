"""Misbehaving decoder plugins for tests/adversarial (written next to a suite as ``plug.py``).

``make(mode=...)`` builds a uniform sampler over ids 0..2 of the bigram4_eos pair (vocab 4, EOS 3;
never EOS), honest about its seed; ``mode`` injects one misbehaviour:

* ``exit_factory``: ``SystemExit(0)`` from the factory;
* ``exit_generate``: ``sys.exit(0)`` from ``generate``;
* ``os_exit``: ``os._exit(0)`` from ``generate`` (the process ends at once, no cleanup);
* ``sleep``: ``generate`` sleeps 120 s (a long job to interrupt);
* ``fra=<int>``: reports ``first_round_accepted`` equal to that value in every row;
* ``counts=<int>``: reports one round with that many accepted drafts per row.
"""

import os
import sys
import time

import numpy as np

from verifier.protocols import DecoderStats


class Uniform:
    vocab_size = 4
    eos_token_id = 3

    def __init__(self, mode, num_draft_tokens):
        self.mode, self.k, self.name, self.last_stats = mode, num_draft_tokens, "uniform", None

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        if self.mode == "exit_generate":
            sys.exit(0)
        if self.mode == "os_exit":
            os._exit(0)
        if self.mode == "sleep":
            time.sleep(120)
        out = np.random.default_rng(seed).integers(0, 3, size=(num_samples, max_new_tokens)).astype(np.int64)
        fra = np.zeros(num_samples, np.int64)
        counts = np.zeros(num_samples, np.int64)
        if self.mode.startswith("fra="):
            fra[:] = int(self.mode[4:])
        if self.mode.startswith("counts="):
            counts[:] = int(self.mode[7:])
        self.last_stats = DecoderStats(rounds=num_samples, accepted_counts=counts, num_draft_tokens=self.k,
                                       first_round_accepted=fra)
        return out


def make(mode="ok", num_draft_tokens=1):
    if mode == "exit_factory":
        raise SystemExit(0)
    return Uniform(mode, num_draft_tokens)
