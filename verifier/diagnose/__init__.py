"""Diagnosis: which known mechanism of bias explains a biased decoder's emitted tokens, and where.

One job per module: ``mechanisms`` (the zoo as float64 chain rules), ``likelihood`` (per-sequence
likelihood by a forward recursion over round structures), ``late`` (``recovered_one_late``'s recovered laws after
each latent rejected draft token, at the emitted token), ``inputs`` (teacher-forced probs, a
mechanism's J-token law), ``rank`` (log likelihood ratios, threshold, sentences), ``fit`` (effective
temperature and sampling settings), ``localize`` (bias per position / round position / origin),
``run_dir`` (diagnose the sample sets of a run folder).
"""

from verifier.diagnose.likelihood import SequenceProbs, log_likelihood, target_log_likelihood
from verifier.diagnose.mechanisms import MECHANISMS, UNMODELLED, Mechanism, mechanism_for_decoder

__all__ = ["SequenceProbs", "log_likelihood", "target_log_likelihood", "MECHANISMS", "UNMODELLED", "Mechanism",
           "mechanism_for_decoder"]
