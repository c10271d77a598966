"""A plugin decoder that loads its own draft (here: the target itself) and declares it: ``draft_known = False``.

Without the declaration the harness analysed the suite's draft (shipped:draft) instead: blind-cell notes and
the canonical acceptance figures were computed for a draft this decoder never uses.
"""

from verifier.decoders.speculative import SpeculativeDecoder


class OwnDraft(SpeculativeDecoder):
    draft_known = False  # verifier.runner.draft: the harness must not analyse models.*.draft for this decoder

    def __init__(self, target, num_draft_tokens=2):
        super().__init__(target, target, num_draft_tokens, name="own-draft (draft = the target)")


class OwnDraftUndeclared(SpeculativeDecoder):
    def __init__(self, target, num_draft_tokens=2):
        super().__init__(target, target, num_draft_tokens, name="own-draft, undeclared")
