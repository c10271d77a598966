"""Replay OpenVINO GenAI's tokens 1-2 draw by draw from each call's ``rng_seed`` and compare with the engine.

Usage: python -m verifier.engines.reproductions.openvino_replay [--k 3] [--temperature 1] [--top-k K] [--top-p P]
       [--seeds 1-40] [--prefix-caching on|off]

Needs the engine installed (``bash ci/engines/openvino-genai.sh``).

1. Runs the engine (its venv, ``SPECVERIFY_ENGINES_DIR``) once per seed: one fresh ``generate`` per seed on one
   pipeline, ``max_new_tokens = k + 1`` (k + 2 for k = 1: with k + 1 = 2 the draft proposes nothing).
2. Replays, with the shipped HF models (float32 probs, the engine's sampler arithmetic), what sampler.cpp does
   with two ``std::mt19937(rng_seed)`` streams -- M (target) and D (draft); numpy's legacy ``RandomState(seed)``
   is the same generator with the same seeding:
     token 1   = F_p1^-1(M.u)                   (target, prompt step: M's 1st uniform)
     cand. 1   = F_q^-1(D.u)                    (draft: D's 1st uniform = the number that drew token 1)
     y         = F_p^-1(M.u)                    (validate_candidate's fresh target sample, M's 2nd)
     r         = uniform_int(0, 100)(M) / 100   (M's 3rd; libstdc++ Lemire reduction)
     token 2   = cand. 1 if r <= q(cand. 1) / p(y) else F_{p after cand. 1}^-1(M.u)   (M's 4th)
   ``u = float(32-bit draw) / 2**32`` (libstdc++ ``generate_canonical<float>``); the CDF walk is id order, or
   decreasing prob after top-p, or ``TopKFilter``'s heap order with top-k alone
   (:func:`verifier.engines.openvino_topk.topk_heap_order`).
3. Prints each seed's engine and replayed tokens 1-2 and how many agree.  Agreement on every seed establishes
   the mechanism draw by draw; ``--independent-draft`` replays with the draft on its own stream instead
   (D seeded differently) to show that the shared seed is needed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from verifier.engines.base import engines_dir
from verifier.engines.openvino_topk import topk_heap_order
from verifier.engines.reproductions._common import SHIPPED_PROMPT
from verifier.models.loading import load_model

__all__ = ["MT", "processed", "draw", "replay", "main"]

PROMPT = SHIPPED_PROMPT  # "def "
ENGINE_FOLDER = "openvino-genai-2026.4.1.0"
_PACKAGE = Path(__file__).resolve().parents[2]  # verifier/
WORKER = _PACKAGE / "engines" / "workers" / "openvino_genai.py"
IMPORT_FILE = _PACKAGE / "_import_file.py"  # run by path in the engine's Python (no verifier package there)

PROBE = """
import json, runpy, sys
w = runpy.run_path(sys.argv[3])["import_file"]("ov_worker", sys.argv[1])
a = json.loads(sys.argv[2])
h = w.Handler(a["models"] + "/target", a["models"] + "/draft", a["k"], eos_token_id=0, prefix_caching=a["prefix_caching"])
for s in a["seeds"]:
    out = h.probe(a["prompt"], a["max_new_tokens"], a["sampling"], s)
    print(json.dumps({"seed": s, "tokens": out["tokens"][0], "accepted": out.get("accepted")}), flush=True)
"""


class MT:
    """std::mt19937(seed) with libstdc++'s uniform_real_distribution<float>(0, 1) and uniform_int_distribution<int>(0, 100)."""

    def __init__(self, seed):
        self.rs = np.random.RandomState(seed)

    def raw(self):
        return int(self.rs.randint(0, 2**32, dtype=np.uint32))

    def u(self):
        v = np.float32(self.raw()) / np.float32(4294967296.0)
        return min(v, np.nextafter(np.float32(1), np.float32(0)))

    def int101(self):
        while True:  # Lemire's nearly divisionless reduction (libstdc++ >= 11)
            prod = self.raw() * 101
            low = prod & 0xFFFFFFFF
            if low >= 101 or low >= (2**32 - 101) % 101:
                return prod >> 32


def processed(model, ctx, t, top_k, top_p):
    """(order, probs float32) as sampler.cpp holds them: top-k (heap order), temperature softmax, top-p (sorted, kept,
    not renormalised)."""
    with torch.no_grad():
        logits = model(torch.tensor([ctx])).logits[0, -1].numpy().astype(np.float32)
    ids = np.arange(len(logits))
    if top_k and top_k < len(logits):  # TopKFilter's heap order (the draw walks it as is when top-p does not sort)
        ids = np.asarray(topk_heap_order(logits, top_k))
    z = logits[ids] / np.float32(t)
    e = np.exp(z - z.max()).astype(np.float32)
    probs = (e / e.sum(dtype=np.float32)).astype(np.float32)
    if top_p is not None and top_p < 1:
        o = np.lexsort((ids, -probs))
        ids, probs = ids[o], probs[o]
        c = np.cumsum(probs, dtype=np.float32)
        keep = int(np.argmax(c > np.float32(top_p))) + 1 if (c > np.float32(top_p)).any() else len(probs)
        ids, probs = ids[:keep], probs[:keep]
    return ids, probs


def draw(ids, probs, u):
    total = np.float32(probs.sum(dtype=np.float32))
    r, c = np.float32(total * u), np.float32(0)
    for i, v in zip(ids, probs):
        c = np.float32(c + v)
        if c > r:
            return int(i), float(v / total)
    return int(ids[-1]), float(probs[-1] / total)


def replay(seed, target, draft, t, top_k, top_p, independent_draft=False):
    m, d = MT(seed), MT(seed + 7919 if independent_draft else seed)
    t1, _ = draw(*processed(target, PROMPT, t, top_k, top_p), m.u())
    x, qx = draw(*processed(draft, PROMPT + [t1], t, top_k, top_p), d.u())
    y, py = draw(*processed(target, PROMPT + [t1], t, top_k, top_p), m.u())
    r = np.float32(m.int101()) / np.float32(100)
    if r <= np.float32(qx) / np.float32(py):
        return [t1, x], "accepted"
    t2, _ = draw(*processed(target, PROMPT + [t1, x], t, top_k, top_p), m.u())
    return [t1, t2], "replaced"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m verifier.engines.reproductions.openvino_replay")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--seeds", default="1-40")
    ap.add_argument("--prefix-caching", default="off", choices=("on", "off"))
    ap.add_argument("--independent-draft", action="store_true")
    a = ap.parse_args(argv)
    engine_dir = engines_dir() / ENGINE_FOLDER
    lo, hi = (int(v) for v in a.seeds.split("-"))
    sampling = {"temperature": a.temperature, "top_k": a.top_k, "top_p": a.top_p}
    args = {"models": str(engine_dir / "models"), "k": a.k, "prefix_caching": a.prefix_caching == "on", "prompt": PROMPT,
            "max_new_tokens": a.k + 1 if a.k > 1 else 3, "sampling": sampling, "seeds": list(range(lo, hi + 1))}
    out = subprocess.run([str(engine_dir / "venv" / "bin" / "python"), "-c", PROBE, str(WORKER), json.dumps(args),
                          str(IMPORT_FILE)],
                         capture_output=True, text=True, check=True).stdout
    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    agree = 0
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for row in rows:
        mine, how = replay(row["seed"], target, draft, a.temperature, a.top_k, a.top_p, a.independent_draft)
        same = mine == row["tokens"][:2]
        agree += same
        print(f"seed {row['seed']:5d}: engine {row['tokens'][:2]}  replay {mine} ({how})  {'=' if same else 'DIFFERENT'}")
    print(f"{agree} of {len(rows)} calls: engine tokens 1-2 == replay ({json.dumps(sampling)}, k = {a.k}, "
          f"prefix caching {a.prefix_caching}{', independent draft stream' if a.independent_draft else ''})")


if __name__ == "__main__":
    sys.exit(main())
