"""Diagnosis without the draft (issue 26, "unknown drafts"): it never crashes and localizes with the target alone.

Setting: trigram3, prompt (0, 1), k = 2, 3 tokens, n = 2500 (the ci suite's), T = 1, seed 1507; groups tested at
1e-3 Bonferroni (:data:`verifier.diagnose.localize.LOCALIZE_ALPHA`).  ``hot_target`` samples at 1.6 x T: every
position departs from p (per-position TV ~0.1, far above what n = 2500 detects) and the fitted temperature is ~1.6;
the reference decoder (lossless) gets no flagged group (false-flag rate <= 1e-3).
"""

import pytest

from verifier.decoders.mutants import make_decoder
from verifier.diagnose.no_draft import diagnose_without_draft

from tests.diagnose._helpers import PROMPT, T1, decoder_rows, trigram3, wrapped

pytestmark = pytest.mark.slow


def test_a_hot_sampler_is_localized_at_every_position_with_its_temperature():
    from tests.diagnose import unknown_plugins

    target, _ = wrapped()
    rows = decoder_rows(unknown_plugins.hot_target(target), T1, seed=1507)
    _, tr, _ = trigram3()
    out = diagnose_without_draft(tr, PROMPT, T1, rows)
    groups = out["localization"]["by_position"]
    assert [g["group"] for g in groups] == ["position 1", "position 2", "position 3"]
    assert all(g["biased"] for g in groups), groups
    assert all(1.3 < g["temperature"] < 2.0 and g["temperature_ci"][0] > 1.0 for g in groups), groups
    assert out["localization"]["sentence"].startswith("the bias is at position 1, position 2, position 3")
    assert "draft is unknown" in out["note"] and out["fits"]["temperature"]["temperature"] > 1.3


@pytest.mark.full
def test_a_lossless_decoder_has_no_flagged_position_and_origins_need_q_where_they_do():
    target, draft = wrapped()
    dec = make_decoder("reference", target, draft, 2)
    rows = decoder_rows(dec, T1, seed=1507)
    _, tr, _ = trigram3()
    out = diagnose_without_draft(tr, PROMPT, T1, rows, origins=dec.last_stats.origins)
    loc = out["localization"]
    assert not any(g.get("biased") for g in loc["by_position"] + loc["by_origin"] + loc["by_round_position"]), loc
    assert {g["group"]: g.get("note") for g in loc["by_origin"]}["accepted"].startswith("not tested")
    assert loc["sentence"] == "no emitted position departs from the target law on its own at this n"
