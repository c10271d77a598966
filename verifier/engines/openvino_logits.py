"""The logits OpenVINO GenAI's pipeline samples from: the converted IR at the CPU plugin's default precision.

``LLMPipeline(target, "CPU", draft_model=draft_model(draft, "CPU"))`` compiles both IRs with no
``INFERENCE_PRECISION_HINT``, so the CPU plugin's default applies: ``bf16`` on CPUs with AMX / AVX512_BF16 (this
machine: ``core.get_property("CPU", "INFERENCE_PRECISION_HINT")`` is ``bfloat16``), ``f32`` elsewhere.  In bf16 the
target's logits move by up to 0.04 from the fp32 model's: at T = 0.7 with top-k 50 and top-p 0.9 the prompt's
top-p set then keeps 12 tokens instead of 11 (the 12th, '*', emitted at position 1 at fp32 target prob 0) and puts
token 76 before 71 in the CDF walk.  The law of :mod:`verifier.engines.reproductions.openvino_genai` is the
source's rule on the probs the pipeline samples from, so it takes the logits from here: the same IR files, compiled
by the engine's own ``openvino`` at the default precision, contexts of one length batched in plain inference requests
(``reset_state`` between requests, ``beam_idx`` one state per row; the pipeline's paged-attention transformation is not reproduced, so two logits
within bf16's rounding of each other can still compare differently there).

Needs the engine installed (``bash ci/engines/openvino-genai.sh``): :func:`engine_logits` runs the engine venv's
Python in a subprocess; :func:`available` says whether it can.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = ["ENGINE_FOLDER", "available", "engine_logits", "resolved_precision"]

ENGINE_FOLDER = "openvino-genai-2026.4.1.0"
BATCH = 1024  # contexts of one length per inference request: the same logits bit for bit as 64 or 1 a request
# (tests/engines/test_openvino_topk.py) and 1.7x faster than 64 on the 147,456 contexts of a T = 1 engine law (benchmarks 43)

_SCRIPT = """
import json, sys
import numpy as np, openvino as ov
a = json.load(open(sys.argv[1]))
core = ov.Core()
out = {"precision": core.get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name(), "resolved": {}}
for role, ctxs in a["contexts"].items():
    model = core.compile_model(a["dirs"][role] + "/openvino_model.xml", "CPU", a.get("config") or {})
    out["resolved"][role] = model.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # what it computes at
    req = model.create_infer_request()
    rows = [None] * len(ctxs)
    by_len = {}
    for i, ctx in enumerate(ctxs):
        by_len.setdefault(len(ctx), []).append(i)
    for n, idx in by_len.items():  # contexts of one length in batches (beam_idx: each row its own state)
        for s in range(0, len(idx), a["batch"]):
            part = idx[s:s + a["batch"]]
            ids = np.asarray([ctxs[i] for i in part], dtype=np.int64)
            req.reset_state()
            res = req.infer({"input_ids": ids, "attention_mask": np.ones_like(ids),
                             "position_ids": np.tile(np.arange(n, dtype=np.int64), (len(part), 1)),
                             "beam_idx": np.arange(len(part), dtype=np.int32)})
            last = np.asarray(res[model.output(0)][:, -1], dtype=np.float32)
            for j, i in enumerate(part):
                rows[i] = last[j]
    np.save(a["out"] + "/" + role + ".npy", np.stack(rows) if rows else np.zeros((0, 0), np.float32))
json.dump(out, open(a["out"] + "/meta.json", "w"))
"""


def _dir() -> Path:
    from verifier.engines.base import engines_dir

    return engines_dir() / ENGINE_FOLDER


def available() -> bool:
    """Whether the engine's venv and converted models are installed here."""
    d = _dir()
    return (d / "venv" / "bin" / "python").is_file() and (d / "models" / "target" / "openvino_model.xml").is_file()


def _run(contexts: dict[str, list[list[int]]], config: dict) -> tuple[dict[str, np.ndarray], dict]:
    d = _dir()
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"contexts": contexts, "dirs": {r: str(d / "models" / r) for r in contexts}, "out": tmp,
                "config": config, "batch": BATCH}
        Path(tmp, "in.json").write_text(json.dumps(spec))
        subprocess.run([str(d / "venv" / "bin" / "python"), "-c", _SCRIPT, str(Path(tmp, "in.json"))],
                       check=True, capture_output=True, text=True)
        meta = json.loads(Path(tmp, "meta.json").read_text())
        return {r: np.load(Path(tmp, f"{r}.npy")) for r in contexts}, meta


def engine_logits(contexts: dict[str, list[list[int]]], config: dict | None = None, *,
                  precision: str | None = None) -> tuple[dict[str, np.ndarray], str]:
    """Last-position logits of the engine's IRs after each context.

    Parameters
    ----------
    contexts : dict
        ``{"target": [ids, ...], "draft": [ids, ...]}`` (either may be missing).
    config : dict, optional
        ``compile_model`` properties; default none (the CPU plugin's default precision, as ``LLMPipeline`` compiles).
    precision : str, optional
        ``INFERENCE_PRECISION_HINT`` to compile at (``"f32"``, ``"bf16"``: the precision an audit's pipeline sampled at,
        recorded in its shards); default the CPU plugin's default.

    Returns
    -------
    (logits, precision) : dict role -> float32 array (contexts, vocab), and the precision the IRs computed at
        (OpenVINO's type name, e.g. ``"f32"``, ``"bf16"``; the compiled models' own ``INFERENCE_PRECISION_HINT``).

    Raises
    ------
    RuntimeError
        ``precision`` given and this CPU computes the IRs at another one (a ``bf16`` hint on a CPU without native bf16
        compiles at ``f32``): logits at the wrong precision are never returned.
    """
    cfg = {**(config or {}), **({"INFERENCE_PRECISION_HINT": precision} if precision else {})}
    logits, meta = _run(contexts, cfg)
    got = sorted(set(meta["resolved"].values())) or [meta["precision"]]
    if precision and got != [precision]:
        raise RuntimeError(f"precision={precision!r}: this CPU compiles the OpenVINO IRs at {', '.join(got)} "
                           f"(no native {precision}); the logits the pipeline sampled from cannot be computed here")
    return logits, got[0]


@lru_cache(maxsize=None)
def resolved_precision(precision: str | None = None) -> str:
    """The precision this CPU computes the engine's draft IR at when compiled with ``precision`` as its
    ``INFERENCE_PRECISION_HINT`` (default: the CPU plugin's default), e.g. ``"bf16"`` on a CPU with AMX, ``"f32"``
    on one without native bf16 whatever is asked.  Runs the engine venv's Python once per hint."""
    _, meta = _run({"draft": []}, {"INFERENCE_PRECISION_HINT": precision} if precision else {})
    return meta["resolved"]["draft"]
