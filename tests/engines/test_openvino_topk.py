"""OpenVINO GenAI's top-k order and logits (issue 26: the engine law at T = 0.7 with top-k / top-p).

* :func:`verifier.engines.openvino_topk.topk_heap_order` replays libstdc++'s heap algorithms as ``TopKFilter`` runs
  them: checked against the real ``std::make_heap`` / ``pop_heap`` / ``push_heap`` (compiled with g++ when there is
  one), with ties, and its kept set is the top-k set;
* the law of :mod:`verifier.engines.reproductions.openvino_genai` with top-k alone now has the shared-seed coupling
  (walked in heap order, not id order: the two laws differ), and rows drawn from it are named as it;
* :mod:`verifier.engines.openvino_logits` (engine installed): batched contexts give the logits of single ones.
"""

import shutil
import subprocess

import numpy as np
import pytest

from verifier.engines.openvino_topk import topk_heap_order

CPP = r"""
#include <algorithm>
#include <cstdio>
#include <vector>
struct Token { float m_log_prob; long m_index; };
int main() {
  size_t n, k; if (scanf("%zu %zu", &n, &k) != 2) return 1;
  std::vector<float> d(n); for (auto& x : d) if (scanf("%f", &x) != 1) return 1;
  auto min_cmp = [](const Token& a, const Token& b) { return a.m_log_prob > b.m_log_prob; };
  std::vector<Token> v(k);
  for (size_t i = 0; i < k; i++) v[i] = Token{d[i], (long)i};
  std::make_heap(v.begin(), v.end(), min_cmp);
  for (size_t i = k; i < n; i++) if (d[i] > v[0].m_log_prob) {
    std::pop_heap(v.begin(), v.end(), min_cmp); v.back() = Token{d[i], (long)i};
    std::push_heap(v.begin(), v.end(), min_cmp); }
  for (auto& t : v) printf("%ld ", t.m_index);
  printf("\n");
}
"""


def _cases(count=60, seed=0):
    rng = np.random.default_rng(seed)
    for i in range(count):
        n = int(rng.integers(2, 200))
        k = int(rng.integers(1, n))
        d = rng.normal(size=n).astype(np.float32)
        if i % 3 == 0:
            d = np.round(d, 1).astype(np.float32)  # ties: the heap's order among equal logits matters
        yield d, k


def test_kept_tokens_are_the_top_k_and_order_is_not_sorted():
    unsorted = 0
    for d, k in _cases():
        order = topk_heap_order(d, k)
        assert len(order) == k == len(set(order))
        assert np.min(d[order]) >= np.sort(d)[::-1][k - 1]  # the k largest (ties: any of them)
        unsorted += list(order) != sorted(order, key=lambda i: -d[i])
    assert unsorted > 30  # a heap, not a sort: the CDF walk order differs from decreasing prob
    assert topk_heap_order([1.0, 2.0], 5) == [0, 1]  # top_k >= vocab: TopKFilter returns, id order


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build the libstdc++ reference")
def test_heap_order_equals_libstdcxx(tmp_path):
    src, exe = tmp_path / "h.cpp", tmp_path / "h"
    src.write_text(CPP)
    subprocess.run(["g++", "-O1", "-o", str(exe), str(src)], check=True)
    for d, k in _cases(count=80, seed=1):
        text = f"{len(d)} {k}\n" + " ".join(repr(float(x)) for x in d)
        ref = [int(t) for t in subprocess.run([str(exe)], input=text, capture_output=True, text=True,
                                              check=True).stdout.split()]
        assert topk_heap_order(d, k) == ref


def test_top_k_alone_has_the_shared_seed_law_in_heap_order():
    """The shared-seed law with top-k alone is predicted (it was dropped before), and its walk order matters."""
    from verifier.diagnose.engine_laws import ENGINE_LAW_MARK, engine_law_diagnosis
    from verifier.diagnose.sample_set import diagnose_sample_set
    from verifier.engines.reproductions import openvino_genai as ov
    from verifier.models.loading import load_model
    from verifier.runner.models import ReferenceModel, _info
    from verifier.sampling import SamplingConfig

    prompt, s, k = [272, 70, 221], SamplingConfig(temperature=0.7, top_k=8), 3
    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    laws = ov.engine_laws(prompt, s, target, draft)
    shared = laws["as shipped, shared seed"]
    assert np.isclose(shared.sum(), 1.0) and 0.5 * np.abs(shared - laws["target"]).sum() > 0.3
    heap_walk = ov._walk  # the same law walked in decreasing-prob order differs: the order is not a detail
    try:
        ov._walk = lambda probs, logits, sampling: ov.walk_order(probs, True)
        sorted_law = ov.engine_laws(prompt, s, target, draft)["as shipped, shared seed"]
    finally:
        ov._walk = heap_walk
    assert 0.5 * np.abs(sorted_law - shared).sum() > 0.05
    rng = np.random.default_rng(3)
    flat = rng.choice(shared.size, size=1000, p=shared.ravel() / shared.sum())
    tokens = np.stack(np.unravel_index(flat, shared.shape), axis=1).astype(np.int64)
    vocab, eos = _info(target)
    res = diagnose_sample_set(ReferenceModel(target, vocab, eos), ReferenceModel(draft, vocab, eos), tuple(prompt), s, k,
                              tokens, bias_detected=True, with_fits=False)
    found = engine_law_diagnosis("openvino-genai", [{"seqs": res["_seqs"][0], "prompt": prompt, "sampling": s,
                                                     "label": "s", "num_draft_tokens": k, "target": target,
                                                     "draft": draft}], bias_detected=True)
    assert found["named"] == [f"{ENGINE_LAW_MARK}openvino-genai/as shipped, shared seed"], found["sentence"]


def test_engine_logits_batched_equal_single(require_engine):
    require_engine("openvino-genai")
    from verifier.engines import openvino_logits as ol

    if not ol.available():
        pytest.skip("the engine's converted models are missing: bash ci/engines/openvino-genai.sh")
    ctx = [[272, 70, 221, t] for t in (270, 72, 335, 10)] + [[272, 70, 221]]
    batched, precision = ol.engine_logits({"target": ctx, "draft": ctx[:2]})
    single = {}
    saved = ol.BATCH
    try:
        ol.BATCH = 1
        single, _ = ol.engine_logits({"target": ctx, "draft": ctx[:2]})
    finally:
        ol.BATCH = saved
    assert batched["target"].shape == (5, 384) and batched["draft"].shape == (2, 384)
    assert np.array_equal(batched["target"], single["target"]) and np.array_equal(batched["draft"], single["draft"])
    # a full batch against batches of 64 (the size before benchmarks section 43): the request size moves no logit
    many = [[272, 70, 221, a, b] for a in range(3) for b in range(384)][:ol.BATCH + 7]
    big, _ = ol.engine_logits({"target": many})
    try:
        ol.BATCH = 64
        small, _ = ol.engine_logits({"target": many})
    finally:
        ol.BATCH = saved
    assert len(many) > saved and np.array_equal(big["target"], small["target"])
    f32, _ = ol.engine_logits({"target": ctx}, config={"INFERENCE_PRECISION_HINT": "f32"})
    # at f32 the IR is the HF model's (the numeric floor); at a bf16 default the logits move (this machine: 0.07)
    # (the precision is a type name since session 25: "bf16"; "bfloat16" where an older call reported the type's repr)
    low = precision in ("bf16", "f16") or "bfloat16" in precision
    assert low == (np.abs(f32["target"] - batched["target"]).max() > 1e-3), precision
