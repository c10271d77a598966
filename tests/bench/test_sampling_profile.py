"""``specverify bench sampling-profile`` (issue 17 part 3): every part is timed and the parts add up to the call."""

from verifier.bench.sampling_profile import PARTS, micro_floor, profile_generate


def test_profile_splits_generate_into_its_parts(tmp_path):
    res = profile_generate(96, 8, repeats=1, work_dir=tmp_path, threads=1)
    for key in ("seconds", "cpu_seconds"):
        s = res[key]
        assert all(s[p] > 0 for p in ("forward", "processed_probs", "verify", "sample")), s  # the fused round is timed
        assert abs(sum(s[p] for p in PARTS) - s["generate"]) < 1e-3
    g, f = res["seconds"]["generate"], res["seconds"]["forward"]
    # the ratio is computed before the seconds are rounded to 1e-4 s: allow that rounding's effect (and the ratio's own 1e-3)
    assert abs(res["harness_over_forward"] - (g - f) / f) <= 1e-4 * (1 + g / f) / f + 1e-3


def test_float32_profile_times_the_fast_path_and_counts_logits(tmp_path):
    res = profile_generate(96, 8, repeats=1, work_dir=tmp_path, threads=1, precision="float32")
    assert res["precision"] == "float32"
    s = res["cpu_seconds"]
    assert all(s[p] > 0 for p in ("forward", "processed_probs", "verify", "sample")), s  # _fast32's parts are wrapped
    e = res["elements"]
    assert e["forward"] > 0 and 0 < e["processed_probs"] <= e["forward"], e  # every draft row, target rows up to the rejection
    assert e["processed_probs"] % 96 == 0


def test_micro_floor_reports_every_op():
    ns = micro_floor(512, rows=2, repeats=1, threads=1)
    assert {"exp f32", "softmax f32", "output layer (hidden 64, 256 rows)"} <= set(ns)
    assert all(v >= 0 for v in ns.values())
