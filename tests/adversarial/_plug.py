"""Misbehaving decoder plugins for tests/adversarial (written next to a suite as ``plug.py``).

``make(mode=...)`` builds a uniform sampler over ids 0..2 of the bigram4_eos pair (vocab 4, EOS 3;
never EOS), honest about its seed; ``mode`` injects one misbehaviour:

* ``exit_factory``: ``SystemExit(0)`` from the factory;
* ``exit_generate``: ``sys.exit(0)`` from ``generate``;
* ``os_exit``: ``os._exit(0)`` from ``generate`` (the process ends at once, no cleanup);
* ``sleep``: ``generate`` sleeps 120 s (a long job to interrupt); with ``PLUG_PID_FILE`` set in the
  environment it first writes its process id there;
* ``block_alarm``: ``generate`` blocks SIGALRM, then sleeps 120 s (a call that never comes back to
  the interpreter's signal handlers);
* ``thread``: ``generate`` leaves a non-daemon thread sleeping 600 s behind;
* ``stats_raises`` / ``name_raises``: the ``last_stats`` / ``name`` property raises;
* ``meta``: ``generate`` returns an int64 tensor on the ``meta`` device;
* ``surrogate``: ``generate`` raises with a lone surrogate in its message;
* ``close_stdout`` / ``close_fd1``: ``generate`` closes ``sys.stdout`` / file descriptor 1;
* ``fra=<int>``: reports ``first_round_accepted`` equal to that value in every row;
* ``counts=<int>``: reports one round with that many accepted drafts per row.
"""

import os
import sys
import threading
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
            if os.environ.get("PLUG_PID_FILE"):
                with open(os.environ["PLUG_PID_FILE"], "w") as fh:
                    fh.write(str(os.getpid()))
            time.sleep(120)
        if self.mode == "block_alarm":
            import signal

            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(120)
        if self.mode == "thread":
            threading.Thread(target=time.sleep, args=(600,), daemon=False).start()
        if self.mode == "surrogate":
            raise RuntimeError("bad \udcff text")
        if self.mode == "close_stdout":
            sys.stdout.close()
        if self.mode == "close_fd1":
            try:
                os.close(1)
            except OSError:  # closed by the previous call already
                pass
        if self.mode == "meta":
            import torch

            return torch.empty((num_samples, max_new_tokens), dtype=torch.int64, device="meta")
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


class RaisingProperty(Uniform):
    """``last_stats`` or ``name`` is a property that raises when read."""

    def __init__(self, mode, num_draft_tokens):
        self.mode, self.k, self._stats = mode, num_draft_tokens, None

    @property
    def last_stats(self):
        if self.mode == "stats_raises":
            raise RuntimeError("stats exploded")
        return self._stats

    @last_stats.setter
    def last_stats(self, value):
        self._stats = value

    @property
    def name(self):
        if self.mode == "name_raises":
            raise RuntimeError("name exploded")
        return "uniform"


def make(mode="ok", num_draft_tokens=1):
    if mode == "exit_factory":
        raise SystemExit(0)
    if mode in ("stats_raises", "name_raises"):
        return RaisingProperty(mode, num_draft_tokens)
    return Uniform(mode, num_draft_tokens)
