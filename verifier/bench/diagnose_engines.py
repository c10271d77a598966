"""``specverify bench diagnose-engines``: how often the diagnosis names an engine's own law, and never a wrong one.

Issue 26 ("engine hypotheses"; "n for 95% accuracy per mechanism"): the laws an engine's source predicts
(:data:`verifier.engines.reproductions.LAWS`) are ranked beside the family by :mod:`verifier.diagnose.engine_laws`.
This bench draws rows from each registered law (and from the target's) on the shipped models, at the settings the
audits use, and runs that ranking as a report would:

* OpenVINO GenAI (``validate_candidate``, independent and shared-seed draws), T = 1 with top-p 0.5 (small laws),
  k = 3, rows of 2 tokens: the family is scored too (the draft is known), so a wrong name can be a family member;
* MLX-LM's server (prompt cache trimming the context), T = 0.7 with top-k 8, rows of 3 tokens, draft unknown (a URL
  audit): the laws of the target alone;
* transformers' universal assisted generation (q in another column order), T = 1, draft unknown: needs the
  retokenized draft of ``bash ci/engines/transformers.sh`` (skipped, said so, without it);
* OpenVINO GenAI again at T = 0.7 with top-k 8 alone (the shared seed walks ``TopKFilter``'s heap order);
* transformers' Gemma4 assistant (greedy draft verified against its raw softmax), T = 1, tokens 1-2 on the tiny
  Gemma4 pair of ``bash ci/engines/transformers.sh`` (prompt 2, 5, 7), draft unknown;
* OpenVINO GenAI with prefix caching on (the engine default), T = 0.7 with top-k 8: rows from the shared-seed law at
  a share of 1% and from the target's at the rest (the calls before the pipeline's first ``content_length`` failure,
  then plain target sampling), named as the one-law mixture ``UNTIL_FAILURE``; its null is the target's rows with
  that mixture offered.

Per law and n: accuracy = runs whose named law is this one (alone, or leading a class that contains it); wrong = runs
that name another law or a family hypothesis; "n for 95%" = the smallest n of the grid with accuracy >= 0.95.  Null:
rows from the target's law, a false diagnosis = anything named.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

HELP = "Engine laws in the diagnosis: accuracy per law and n, wrong names, false names on the target's rows."
N_GRID = (250, 500, 1000, 1500)
PROMPT = [272, 70, 221]  # "def " in the shipped vocabulary


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=10, metavar="R", help="Replicates per law and n. Default: 10.")
    parser.add_argument("--n", type=int, nargs="+", default=list(N_GRID), metavar="N",
                        help=f"Rows per run. Default: {' '.join(map(str, N_GRID))}.")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0.")
    parser.add_argument("--only", metavar="TEXT", default=None,
                        help="Only the engine settings whose label contains TEXT (e.g. 'prefix caching on'). Default: all.")


def _rows(law: np.ndarray, n: int, rng, extra_tokens: int = 0) -> np.ndarray:
    """n rows drawn from a joint law of J tokens, padded with ``extra_tokens`` columns of token 7 (summed out)."""
    flat = rng.choice(law.size, size=n, p=law.ravel() / law.sum())
    rows = np.stack(np.unravel_index(flat, law.shape), axis=1).astype(np.int64)
    return np.concatenate([rows, np.full((n, extra_tokens), 7, dtype=np.int64)], axis=1) if extra_tokens else rows


class _Engine:
    """One engine's laws at one setting, and a diagnosis of rows (as a report of that engine's audit runs it)."""

    def __init__(self, name: str, sampling, k: int, laws: dict[str, np.ndarray], target, draft=None,
                 options: dict | None = None, extra_tokens: int = 0, prompt: list[int] | None = None,
                 label: str | None = None, draw_from: list[str] | None = None,
                 mixed: dict[str, tuple[str, float]] | None = None) -> None:
        self.name, self.sampling, self.k, self.target, self.draft = name, sampling, k, target, draft
        self.options, self.extra_tokens, self.prompt = options or {}, extra_tokens, list(prompt or PROMPT)
        self.label = label or name
        self.all_laws = laws
        self.target_law = laws["target"]
        self.laws = {key: v for key, v in laws.items() if key != "target"}
        # the laws rows are drawn from (default every law), and mixtures: name -> (law, its share; the target the rest)
        self.draw_from = list(self.laws) if draw_from is None else list(draw_from)
        self.mixed = dict(mixed or {})

    def source(self, law: str | None) -> np.ndarray:
        """The joint law rows are drawn from for ``law`` (a law, a mixture's name, or None: the target's)."""
        if law is None:
            return self.target_law
        if law in self.mixed:
            part, share = self.mixed[law]
            return share * self.laws[part] + (1.0 - share) * self.target_law
        return self.laws[law]

    def diagnose(self, tokens: np.ndarray) -> dict:
        from verifier.diagnose.engine_laws import engine_law_diagnosis

        s = {"prompt": self.prompt, "sampling": self.sampling, "label": "bench", "num_draft_tokens": self.k,
             "target": self.target, "draft": self.draft, "options": self.options, "seqs": None, "tokens": tokens,
             "laws": self.all_laws}
        if self.draft is not None:  # the draft is known: the family is ranked beside the laws on the same rows
            from verifier.diagnose.sample_set import diagnose_sample_set
            from verifier.runner.models import ReferenceModel, _info

            vocab, eos = _info(self.target)
            res = diagnose_sample_set(ReferenceModel(self.target, vocab, eos), ReferenceModel(self.draft, vocab, eos),
                                      tuple(self.prompt), self.sampling, self.k, tokens, bias_detected=True, with_fits=False)
            s["seqs"] = res["_seqs"][0]
        return engine_law_diagnosis(self.name, [s], bias_detected=True)


def _engines(progress) -> tuple[list[_Engine], list[str]]:
    from verifier.engines.reproductions import mlx_lm_server as mlx
    from verifier.engines.reproductions import openvino_genai as ov
    from verifier.models.loading import load_model
    from verifier.sampling import SamplingConfig

    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    out, skipped = [], []
    s = SamplingConfig(temperature=1.0, top_p=0.5)
    progress("laws: openvino-genai")
    out.append(_Engine("openvino-genai", s, 3, ov.engine_laws(PROMPT, s, target, draft), target, draft,
                       label="openvino-genai (T=1, top-p 0.5)"))
    s = SamplingConfig(temperature=0.7, top_k=8)
    progress("laws: openvino-genai, top-k alone (TopKFilter's heap order)")
    topk = ov.engine_laws(PROMPT, s, target, draft)
    out.append(_Engine("openvino-genai", s, 3, topk, target, draft, label="openvino-genai (T=0.7, top-k 8)"))
    out.append(_Engine("openvino-genai", s, 3, topk, target, draft, options={"prefix_caching": True}, draw_from=[],
                       mixed={ov.UNTIL_FAILURE: ("as shipped, shared seed", 0.01)},
                       label="openvino-genai (T=0.7, top-k 8, prefix caching on; 1% of rows speculating)"))
    s = SamplingConfig(temperature=0.7, top_k=8)
    progress("laws: mlx-lm server")
    out.append(_Engine("mlx-lm server", s, 1, mlx.engine_laws(PROMPT, s, target), target, extra_tokens=1))
    from verifier.engines import get_engine

    eng = get_engine("transformers")
    if (eng.install_dir() / "retokenized-draft").is_dir():
        from verifier.engines.reproductions import transformers as hf

        s = SamplingConfig(temperature=1.0)
        progress("laws: transformers (assistant_tokenizer)")
        opts = {"mode": "assistant_tokenizer", "vocab_order_seed": 0}
        out.append(_Engine("transformers", s, 3, hf.engine_laws(PROMPT, s, target, None, options=opts), target,
                           options=opts, extra_tokens=2))
    else:
        skipped.append(f"transformers: no retokenized draft (`{eng.install_script()}`)")
    if (eng.install_dir() / "gemma4" / "assistant").is_dir():
        from verifier.engines.hf_local import GEMMA4_PROMPT
        from verifier.engines.reproductions import transformers as hf

        s = SamplingConfig(temperature=1.0)
        progress("laws: transformers (gemma4_assistant)")
        opts = {"mode": "gemma4_assistant"}
        g4_target = load_model(str(eng.install_dir() / "gemma4" / "target"))
        out.append(_Engine("transformers", s, 3, hf.engine_laws(list(GEMMA4_PROMPT), s, g4_target, None, options=opts),
                           g4_target, options=opts, extra_tokens=2, prompt=list(GEMMA4_PROMPT),
                           label="transformers (gemma4_assistant)"))
    else:
        skipped.append(f"transformers gemma4_assistant: no tiny Gemma4 pair (`{eng.install_script()}`)")
    return out, skipped


def _outcome(found: dict, law: str | None) -> tuple[bool, bool]:
    """(right, wrong) of one diagnosis for rows drawn from ``law`` (None: the target's)."""
    named = found.get("named") or []
    if law is None:
        return False, bool(named) or (found.get("decision") or {}).get("status") == "consistent"
    right = bool(named) and named[0].split("/", 1)[1] == law
    leading = ((found.get("decision") or {}).get("best") or [])
    wrong = (bool(named) and not right) or (bool(leading) and not named
                                           and (found.get("decision") or {}).get("status") == "consistent")
    return right, wrong


def run(args: argparse.Namespace) -> int:
    import sys

    progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    engines, skipped = _engines(progress)
    engines = [e for e in engines if args.only is None or args.only in e.label]
    print(f"## Engine laws in the diagnosis (`specverify bench diagnose-engines --runs {args.runs}`, seed {args.seed})\n")
    print("| engine | rows from | " + " | ".join(f"n={n}" for n in args.n) + " | n for 95% | wrong (all n) |")
    print("|---|---|" + "---|" * (len(args.n) + 2))
    for e in engines:
        for law in [*e.draw_from, *e.mixed, None]:
            accs, wrong = [], 0
            for n in args.n:
                ok = 0
                for _ in range(args.runs):
                    right, bad = _outcome(e.diagnose(_rows(e.source(law), n, rng, e.extra_tokens)), law)
                    ok, wrong = ok + right, wrong + bad
                accs.append(ok / args.runs)
            label = "the target (null)" if law is None else law
            if law is None:  # the null: the share of runs with something named, and no accuracy
                print(f"| {e.label} | {label} | " + " | ".join("-" for _ in args.n) + f" | - | {wrong} named of "
                      f"{args.runs * len(args.n)} |", flush=True)
                continue
            reach = next((n for n, a in zip(args.n, accs) if a >= 0.95), None)
            print(f"| {e.label} | {label} | " + " | ".join(f"{a:.2f}" for a in accs)
                  + f" | {reach if reach else '> ' + str(max(args.n))} | {wrong} |", flush=True)
    for s in skipped:
        print(f"\nskipped: {s}")
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0
