"""The suite behind ``specverify audit``: one decoder, one model pair, n planned from the effect to rule out.

``specverify audit``, :func:`verifier.api.check_preserves_target` and the pytest fixtures do not
have statistics of their own: they describe the audit as a suite (the same schema as
``suites/*.toml``) and run it through :func:`verifier.pipeline.run_suite`.  This module builds that
suite.

Cells (the suite runner's, per prompt): ``gof@t`` at every position whose marginal law can be
enumerated (all of them on tabular targets; positions 1-2 at vocab 384 and beyond), ``joint@1..J`` (the
law of the first J tokens; J = min(3, max_new_tokens, gof positions)), ``surprisal@1..J`` and ``pit``
over every emitted token; beside the verdict, the runner's acceptance audit (observed acceptance against
the canonical rule, when the decoder reports ``last_stats``).  At any vocabulary: where a level of the
target's prefix tree or the joint law is too large to enumerate, the laws pool data-blind (the target's
top prefixes / outcomes by mass + "other", :class:`verifier.runner.expected.PositionLaws`), and the plan's
``notes`` say how (``pooled over ...``, with the extra target passes).

Planning by effect
------------------
``target_tv`` is a total variation distance between the decoder's law and the target's processed law
of one TV cell: the first-token law, each later position's marginal law and the first-J-token law.
The rows per sample set are the smallest n at which *every* TV cell's minimum detectable effect
(:func:`verifier.stats.gof.gof_mde`, at power ``power`` and the per-cell level the verdict uses,
:func:`verifier.runner.verdict.cell_level`) is <= ``target_tv``
(:func:`verifier.stats.power.samples_for_mde`), computed on the exact expected laws
(:mod:`verifier.runner.expected`).  A PASS then states "no bias >= target_tv (TV) at alpha"; a
budget below that n is reported UNDERPOWERED with the n needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from verifier.errors import invalid_argument
from verifier.sampling import SamplingConfig

__all__ = ["AuditSpec", "AuditPlan", "plan_audit", "sample_set_preview", "suite_toml", "DEFAULT_TARGET_TV", "DEFAULT_CHUNK_SIZE",
           "default_prompt"]

DEFAULT_TARGET_TV = 0.05  # total variation the audit must be able to see in every TV cell (first token, first J tokens)
DEFAULT_CHUNK_SIZE = 500  # rows per generate() call; every chunk has its own seed (a seed-ignoring decoder repeats chunks)
MAX_JOINT_TOKENS = 3  # the joint cell covers at most the first 3 tokens (beyond 2M categories its law is pooled)
MAX_PLANNED_SAMPLES = 200_000  # default budget cap: beyond it the audit samples this many and reports UNDERPOWERED
SHIPPED_PROMPT = "def "  # the shipped models' corpus is Python-like code; "def " is the ci suite's prompt
GENERIC_PROMPT = "The"  # a checkpoint with a tokenizer: any text works


@dataclass(frozen=True)
class AuditSpec:
    """What to audit (the CLI flags, or the API arguments).

    ``prompts``: each ``("ids", (int, ...))`` or ``("text", str)``; empty -> :func:`default_prompt`.
    ``num_samples`` None -> planned from ``target_tv``.  ``max_new_tokens`` None -> k + 1 (the first
    round including its bonus token).  ``gof_positions`` None -> every enumerable position.
    """

    decoder: str
    target: str
    draft: str | None = None
    prompts: tuple = ()
    sampling: SamplingConfig = SamplingConfig()
    num_draft_tokens: int = 4
    max_new_tokens: int | None = None
    num_samples: int | None = None
    target_tv: float = DEFAULT_TARGET_TV
    alpha: float = 1e-3
    power: float = 0.99
    seed: int = 0
    options: dict = field(default_factory=dict)
    chunk_size: int | None = None  # None: the runner's default for the vocabulary (verifier.runner.chunking)
    tests: tuple = ("gof", "joint", "surprisal", "pit", "accepted")
    gof_positions: tuple | None = None
    name: str = "audit"
    decoder_name: str | None = None  # the decoder's name in the report (default "decoder"; the CLI: its `name`)
    device: str = "cpu"
    dtype: str = "float32"
    max_planned_samples: int = MAX_PLANNED_SAMPLES
    description: str = ""
    plan_n: bool = True  # False: skip the power calculation (n given, no target TV to plan for)
    acceptance: str = "any"  # "canonical": the decoder declares min(1, p/q); its accepted-count law is checked
    tv_test: str = "pearson"  # "weighted" / "mixture": the TV cells take that identity test and n is planned by its power
    # "planned": weighted Holm with weights that equalise the TV cells' n (verifier.audit.alloc_plan); "equal": Holm
    alpha_allocation: str = "equal"
    # design factors: one decoder per (name, option overrides), each with its own cells and verdict (e.g. a URL
    # audit's concurrency levels); empty -> the one decoder.  The caller splits alpha over them.
    variants: tuple = ()
    # the request's stop rule (issue 29 kind 5; a URL audit's --stop-token-ids / --max-tokens): with either set, tests
    # must be ("stop",) and n is planned on the law of the stopping position (verifier.runner.stop)
    stop_token_ids: tuple = ()
    max_tokens: int | None = None


@dataclass
class AuditPlan:
    """The suite and the power calculation behind it.

    Attributes
    ----------
    raw : dict
        The suite as TOML data (``parse_suite`` input; :func:`suite_toml` writes it).
    suite : verifier.suite.Suite
    prompts : list of tuple of int
        Encoded prompts, in suite order.
    gof_positions : list of int
    joint_tokens : int
        J of ``joint@1..J`` (0: no joint cell).
    cell_alpha : float
        Per-cell level of the verdict (strictest Holm step) the plan was made at.
    needed : dict
        ``"<prompt>/<cell>" -> n`` every TV cell needs for ``target_tv`` (None: unreachable).
    num_samples : int
        Rows per sample set that will be drawn.
    n_needed : int or None
        max(needed): rows for every TV cell to be powered (None: some cell never reaches it).
    """

    raw: dict
    suite: Any
    prompts: list
    gof_positions: list
    joint_tokens: int
    cell_alpha: float
    needed: dict
    num_samples: int
    n_needed: int | None
    target_tv: float
    notes: list = field(default_factory=list)
    tests: tuple = AuditSpec.tests  # the suite's tests (the cells describe() lists)
    cell_weights: dict = field(default_factory=dict)  # planned allocation: TV cell label -> weight (x cell_alpha); others 1

    @property
    def powered(self) -> bool:
        return self.n_needed is not None and self.num_samples >= self.n_needed

    def describe(self) -> str:
        """Two lines for the console: cells and the power plan."""
        tests, j = set(self.tests), self.joint_tokens
        cells = [f"gof@{t}" for t in self.gof_positions] if "gof" in tests else []
        cells += [f"{name}@1..{j}" for name in ("joint", "surprisal", "collision") if j and name in tests]
        cells += ["pit"] if "pit" in tests else []
        cells += ["stop-rule", "stop-position@1..L"] if "stop" in tests else []
        beside = " (and the acceptance audit beside the verdict)" if "accepted" in tests else ""
        need = "unreachable" if self.n_needed is None else f"{self.n_needed}"
        where = ("the law of the stopping position" if set(self.tests) == {"stop"} else
                 f"every TV cell (first token, each position, first {self.joint_tokens} tokens)")
        levels = "".join(f", {k} {self.cell_alpha * w:.3g}" for k, w in sorted(self.cell_weights.items()))
        return (f"cells per prompt: {', '.join(cells)}{beside}; "
                f"per-cell alpha {self.cell_alpha:.3g}" + (f" (planned allocation{levels})" if levels else "") + "\n"
                f"plan: TV {self.target_tv:g} in {where} needs n = {need} per prompt; sampling n = {self.num_samples}")


def _draft_for(target: str) -> str:
    return target.replace("shipped:target", "shipped:draft") if target.startswith("shipped:") else target


def default_prompt(target: str, pair: Any) -> tuple[str, Any]:
    """A prompt valid for every shipped and tabular target: ``("ids", ...)`` or ``("text", ...)``.

    tabular:NAME -> the pair's standard prefix (a context the table defines; for an empty one, as for
    other models without a tokenizer, one non-EOS token repeated to the context length); shipped -> "def "
    (the ci suite's prompt; token 0 is the shipped EOS); another checkpoint with a tokenizer -> "The";
    any other model -> one non-EOS token repeated to the context length.
    """
    if target.startswith("tabular:"):
        from verifier.exact import standard_tabular_pairs

        name = target.split(":", 1)[1]
        pairs = standard_tabular_pairs()
        if name in pairs and pairs[name].prefix:  # unigram3's context is empty: a prompt needs >= 1 token
            return "ids", tuple(int(t) for t in pairs[name].prefix)
    if pair.tokenizer is not None:
        return "text", SHIPPED_PROMPT if target.startswith("shipped:") else GENERIC_PROMPT
    ctx = max(getattr(pair.target_model, "context_len", 1), 1)
    token = next(t for t in range(pair.vocab_size) if t != pair.eos_token_id)
    return "ids", (token,) * ctx


def _suite_raw(spec: AuditSpec, prompts: list[tuple[str, Any]], positions: list[int], joint: int,
               num_samples: int, max_new_tokens: int, description: str, weights: dict | None = None) -> dict:
    default = spec.decoder_name or "decoder"
    decoder: dict[str, Any] = {"name": spec.name if spec.name != "audit" else default, "decoder": spec.decoder,
                               "expect": "pass"}
    if spec.acceptance != "any":
        decoder["acceptance"] = spec.acceptance
    if spec.options:
        decoder["options"] = dict(spec.options)
    return {
        "schema_version": 1,
        "name": spec.name,
        "description": description,
        "seed": int(spec.seed),
        "default_profile": "ci",
        "exact": {"enabled": False},
        "models": {"audit": {"target": spec.target, "draft": spec.draft or _draft_for(spec.target),
                             "device": spec.device, "dtype": spec.dtype}},
        "prompts": {f"p{i}": ({"ids": list(v)} if kind == "ids" else {"text": v}) for i, (kind, v) in enumerate(prompts)},
        "sampling": {"s": _sampling_dict(spec.sampling)},
        "defaults": {"models": "audit", "num_draft_tokens": [int(spec.num_draft_tokens)],
                     "max_new_tokens": int(max_new_tokens), "samples": int(num_samples),
                     **({"chunk_size": int(spec.chunk_size)} if spec.chunk_size is not None else {}), "tests": [t for t in spec.tests if t != "joint" or joint >= 2],
                     **({"stop_token_ids": [int(t) for t in spec.stop_token_ids]} if spec.stop_token_ids else {}),
                     **({"max_tokens": int(spec.max_tokens)} if spec.max_tokens is not None else {}),
                     "gof_positions": list(positions), "joint_tokens": max(joint, 2)},
        "decoders": [decoder] if not spec.variants else [
            {**decoder, "name": name, "options": {**dict(spec.options), **dict(override)}} for name, override in spec.variants],
        "stats": {"alpha": float(spec.alpha), "correction": "gate", "target_mde": float(spec.target_tv),
                  "power": float(spec.power), **({"tv_test": spec.tv_test} if spec.tv_test != "pearson" else {}),
                  **({"cell_weights": dict(weights)} if weights else {})},
    }


def _sampling_dict(s: SamplingConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"temperature": float(s.temperature)}
    if s.top_k is not None:
        out["top_k"] = int(s.top_k)
    if s.top_p is not None:
        out["top_p"] = float(s.top_p)
    if s.repetition_penalty is not None:
        out["repetition_penalty"] = float(s.repetition_penalty)
    for key in ("presence_penalty", "frequency_penalty", "min_p"):  # issue 29 kind 3: never dropped from the suite
        if getattr(s, key) is not None:
            out[key] = float(getattr(s, key))
    return out


def _check_spec(spec: AuditSpec) -> int:
    if not (isinstance(spec.target_tv, (int, float)) and 0 < spec.target_tv <= 1):
        raise invalid_argument("--target-tv", spec.target_tv, "a total variation in (0, 1]")
    if not 0 < spec.alpha < 1:
        raise invalid_argument("--alpha", spec.alpha, "a number in (0, 1)")
    if spec.num_draft_tokens < 1:
        raise invalid_argument("--num-draft-tokens", spec.num_draft_tokens, "an integer >= 1")
    if spec.num_samples is not None and spec.num_samples < 1:
        raise invalid_argument("--num-samples", spec.num_samples, "an integer >= 1")
    if spec.chunk_size is not None and spec.chunk_size < 1:
        raise invalid_argument("--chunk-size", spec.chunk_size, "an integer >= 1")
    if spec.tv_test not in ("pearson", "weighted", "mixture"):
        raise invalid_argument("--tv-test", spec.tv_test, "'pearson' | 'weighted' | 'mixture'")
    from verifier.stats.allocation import ALLOCATIONS  # scipy and statsmodels: not before the engine samples

    if spec.alpha_allocation not in ALLOCATIONS:
        raise invalid_argument("--alpha-allocation", spec.alpha_allocation, " | ".join(repr(a) for a in ALLOCATIONS))
    t = _max_new_tokens(spec)
    if t < 1:
        raise invalid_argument("--max-new-tokens", spec.max_new_tokens, "an integer >= 1")
    return t


def _max_new_tokens(spec: AuditSpec) -> int:
    return spec.max_new_tokens if spec.max_new_tokens is not None else spec.num_draft_tokens + 1


def sample_set_preview(spec: AuditSpec, prompt_ids: Sequence[Sequence[int]], vocab_size: int) -> list:
    """The sample sets :func:`plan_audit` gives the runner for ``spec``, without the models or the plan.

    Their keys, chunk sizes and chunk seeds are those of the runner's ``generate`` calls (the same suite builder and
    :func:`verifier.runner.plan.plan_sample_sets`; the cells, which the plan chooses, do not enter a set's key), so an
    engine can draw the first chunks while the harness still imports, loads its reference pair and plans
    (:mod:`verifier.cli._presample`).  Light: no torch, scipy or model load.

    Parameters
    ----------
    spec : AuditSpec
        With ``num_samples`` set (a planned n is known only after the plan).
    prompt_ids : sequence of sequence of int
        Each prompt of ``spec`` encoded (``spec.prompts`` order; the default prompt when ``spec.prompts`` is empty).
    vocab_size : int
        The target's V (the default chunk size depends on it).

    Returns
    -------
    list of verifier.runner.plan.SampleSetPlan
        In run order.

    Raises
    ------
    InvalidArgumentError
        ``spec.num_samples`` is None.
    """
    from verifier.runner.plan import plan_sample_sets
    from verifier.suite.schema import parse_suite

    if spec.num_samples is None:
        raise invalid_argument("spec.num_samples", None, "an integer >= 1 (a planned n is known after the plan only)")
    prompts = list(spec.prompts) or [("ids", tuple(prompt_ids[0]))]
    raw = _suite_raw(spec, [("ids", tuple(p)) for p in prompt_ids] if not spec.prompts else prompts, [1], 2,
                     int(spec.num_samples), _max_new_tokens(spec), "preview")
    suite = parse_suite(raw, source=f"<audit {spec.decoder} preview>", base_dir=Path("."))
    ids = {("audit", f"p{i}"): tuple(int(t) for t in p) for i, p in enumerate(prompt_ids)}
    return plan_sample_sets(suite, ids, {"audit": int(vocab_size)})


def _stop_laws(spec: AuditSpec, pair, prompts, max_new_tokens: int) -> list:
    """The law of the stopping position of every prompt (:func:`verifier.runner.stop.stop_position_law`), at the
    spec's stop rule (the limit: ``max_tokens``, else ``max_new_tokens``)."""
    from verifier.runner import stop

    ends = stop.stop_ends(spec.stop_token_ids, pair.eos_token_id)
    limit = spec.max_tokens or max_new_tokens
    return [stop.stop_position_law(pair.reference, tuple(p), spec.sampling, ends, limit) for p in prompts]


def _laws(pair, prompts, sampling, positions: int, joint: int):
    """Expected laws of every prompt at (positions, J): exact, or pooled where a level does not fit."""
    from verifier.runner import expected

    return [expected.shared_position_laws(pair.reference, p, sampling, positions, joint if joint >= 2 else 0)
            for p in prompts]


def plan_audit(spec: AuditSpec, *, base_dir: str | Path = ".", pair: Any = None) -> AuditPlan:
    """Build the audit suite and plan its sample size.

    Parameters
    ----------
    spec : AuditSpec
    base_dir : path, default "."
        Folder against which relative model paths resolve.
    pair : LoadedPair, optional
        Already loaded model pair (the API passes the live target).

    Returns
    -------
    AuditPlan

    Raises
    ------
    InvalidArgumentError, ConfigError, ModelLoadError
        Bad arguments, a prompt that does not fit the target, a model that does not load.
    """
    from verifier.runner.expected import MAX_PREFIXES
    from verifier.runner.models import check_context_fits, encode_prompt, load_pair
    from verifier.runner.verdict import cell_level
    from verifier.stats.gof import gof_mde
    from verifier.stats.power import samples_for_every_mde, samples_for_mde
    from verifier.suite.schema import MAX_GOF_POSITION, ModelPair, Prompt, parse_suite

    max_new_tokens = _check_spec(spec)
    if pair is None:
        pair = load_pair(ModelPair("audit", spec.target, spec.draft or _draft_for(spec.target), spec.device, spec.dtype),
                         base_dir)
    prompt_specs = list(spec.prompts) or [default_prompt(spec.target, pair)]
    prompts = [encode_prompt(Prompt(f"p{i}", v if k == "text" else None, tuple(v) if k == "ids" else None), pair)
               for i, (k, v) in enumerate(prompt_specs)]
    for i, ids in enumerate(prompts):  # before the laws and the power calculation: a row that cannot fit is refused at once
        check_context_fits(pair, ids, max_new_tokens, spec.num_draft_tokens, f"prompts.p{i}")
    notes = []
    if spec.gof_positions is not None:
        positions = max(spec.gof_positions)
    else:
        # every position whose law is enumerable: guess from the first position's support, then shrink on error
        support = max(int(np.count_nonzero(pair.reference.next_probs(np.asarray([p]), spec.sampling, len(p))[0])) for p in prompts)
        depth = 1
        while depth < min(max_new_tokens, MAX_GOF_POSITION) and support ** depth <= MAX_PREFIXES:
            depth += 1
        positions = depth
    joint = min(MAX_JOINT_TOKENS, max_new_tokens, positions) if {"joint", "surprisal", "collision"} & set(spec.tests) else 0
    # pooled where too large: J is never lowered for V; a stop-only audit needs none of these laws
    laws = _laws(pair, prompts, spec.sampling, positions, joint) if set(spec.tests) - {"stop"} else []
    pooled_cells = [f"gof@{t}" for t in range(1, positions + 1) if any(law.pooled(t) for law in laws)]
    pooled_cells += [f"joint@1..{joint}", f"surprisal@1..{joint}"] + ([f"collision@1..{joint}"] if "collision" in spec.tests else []) if any(law.joint_keys is not None for law in laws) else []
    for note in sorted({law.note() for law in laws if law.note()}):
        notes.append(f"{', '.join(pooled_cells)}: expected laws {note}; these cells test the pooled categories "
                     "(data-blind: chosen from the target alone)")
    gof_positions = sorted(spec.gof_positions) if spec.gof_positions is not None else list(range(1, positions + 1))
    k = spec.num_draft_tokens
    # the bias cells the verdict corrects over (as verifier.runner.cells.count_cells); `accepted` is the
    # acceptance audit beside the verdict, never a bias cell, so it is neither counted nor planned
    per_prompt = (len(gof_positions) * ("gof" in spec.tests) + int("joint" in spec.tests and joint >= 2)
                  + int("surprisal" in spec.tests and joint >= 1) + int("pit" in spec.tests)
                  + int("collision" in spec.tests and joint >= 1) + int("serial" in spec.tests)
                  + 2 * int("stop" in spec.tests))  # stop-rule and stop-position@1..L
    level = cell_level(spec.alpha, per_prompt * len(prompts), "gate")

    needed: dict[str, int | None] = {}
    tv_laws: dict[str, list] = {}  # TV cell label -> its laws (one per prompt), to plan the allocation from
    mde_at: dict[str, Any] = {}  # Pearson TV cell label -> its MDE as a function of n (re-checked at the common n)

    def plan_cell(label: str, law: np.ndarray, level: float = level) -> None:
        if np.count_nonzero(law) < 2:  # one possible outcome: any deviation is a support violation, no n to plan
            return
        if spec.tv_test == "weighted":  # the weighted identity test's own power (verifier.stats.identity)
            from verifier.stats.identity import identity_samples_needed

            needed[label] = identity_samples_needed(law, spec.target_tv, alpha=level, power=spec.power, n_max=10 ** 8)
            return
        if spec.tv_test == "mixture":  # the sign-mixture test's measured power (verifier.stats.identity_mixture)
            from verifier.stats.identity_mixture import mixture_samples_needed

            needed[label] = mixture_samples_needed(law, spec.target_tv, alpha=level, power=spec.power, n_max=10 ** 8)
            return
        mde_at[label] = lambda n: gof_mde(n, law, alpha=level, power=spec.power).tv
        needed[label] = samples_for_mde(mde_at[label], spec.target_tv, n_max=10 ** 8)

    for i, (prompt, law) in enumerate(zip(prompts, laws) if spec.plan_n else ()):
        if "gof" in spec.tests:
            for t in gof_positions:
                tv_laws.setdefault(f"gof@{t}", []).append((i, law.marginals[t]))
        if "joint" in spec.tests and law.joint is not None:
            tv_laws.setdefault(f"joint@1..{joint}", []).append((i, law.joint))
    if "stop" in spec.tests and spec.plan_n:  # the stopping position's law is the stop rule's TV cell
        for i, law in enumerate(_stop_laws(spec, pair, prompts, max_new_tokens)):
            tv_laws.setdefault(f"stop-position@1..{law.limit}", []).append((i, law.probs))
    weights = _planned(spec, tv_laws, level, notes) if spec.alpha_allocation == "planned" else {}
    for name, group in tv_laws.items():
        for i, law in group:
            plan_cell(f"p{i}/{name}", law, level * weights.get(name, 1.0))
    # the Pearson MDE is not monotone in n (pooling regimes): the common n must serve every cell AT that n
    common = samples_for_every_mde(mde_at, spec.target_tv, needed, n_max=10 ** 8) if mde_at else 1
    reachable = [v for v in needed.values() if v is not None]
    n_needed = (max(reachable + [common]) if common is not None and reachable and len(reachable) == len(needed)
                else (None if needed else 1))
    if spec.num_samples is not None:
        num_samples = int(spec.num_samples)
    elif n_needed is None or n_needed > spec.max_planned_samples:
        num_samples = int(spec.max_planned_samples)
        notes.append(f"TV {spec.target_tv:g} needs n = {n_needed or '> 1e8'} per prompt, above the default budget "
                     f"{spec.max_planned_samples}; sampling {num_samples} (expect UNDERPOWERED; raise --target-tv or give --num-samples)")
    else:
        num_samples = int(n_needed)
    description = spec.description or (
        f"audit of {spec.decoder} against {spec.target} ({spec.sampling.label()}, k={k}): n planned so that every TV cell "
        f"sees TV >= {spec.target_tv:g} at power {spec.power:g}, per-cell alpha {level:.3g}"
        + ("".join(f", {k} {level * w:.3g}" for k, w in sorted(weights.items())) + " (planned allocation)" if weights else ""))
    raw = _suite_raw(spec, [("ids", p) for p in prompts] if not spec.prompts else prompt_specs, gof_positions, joint,
                     num_samples, max_new_tokens, description, weights)
    suite = parse_suite(raw, source=f"<audit {spec.decoder}>", base_dir=Path(base_dir))
    return AuditPlan(raw=raw, suite=suite, prompts=prompts, gof_positions=gof_positions, joint_tokens=joint,
                     cell_alpha=level, needed=needed, num_samples=num_samples, n_needed=n_needed,
                     target_tv=spec.target_tv, notes=notes, tests=tuple(spec.tests), cell_weights=weights)


def _planned(spec: AuditSpec, tv_laws: dict, level: float, notes: list) -> dict[str, float]:
    """``--alpha-allocation planned``: the TV cells' weights (:func:`verifier.audit.alloc_plan.planned_weights`)."""
    from verifier.audit.alloc_plan import planned_weights

    groups = {name: [law for _, law in group] for name, group in tv_laws.items()
              if all(np.count_nonzero(law) >= 2 for _, law in group)}
    weights, n = planned_weights(groups, equal_level=level, holm_alpha=spec.alpha / 2, tv_test=spec.tv_test,
                                 target_tv=spec.target_tv, power=spec.power)
    if not weights:
        notes.append("--alpha-allocation planned: no n up to 1e8 equalises the TV cells; equal weights kept")
    else:
        notes.append("alpha allocation planned from the exact laws (weighted Holm): " + ", ".join(
            f"{k} weight {w:.4g} (level {level * w:.3g})" for k, w in sorted(weights.items()))
            + f"; the other cells weight 1 (level {level:.3g}); equalised n {n} under the "
            + ("weighted test's computed power" if spec.tv_test == "mixture" else f"{spec.tv_test} test's power"))
    return weights


# --------------------------------------------------------------------------- TOML out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise invalid_argument("value", v, "a finite number")
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise invalid_argument("value", v, "a TOML scalar, list or table")


def _toml_key(k: str) -> str:
    import re

    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def suite_toml(raw: dict, header: Sequence[str] = ()) -> str:
    """The suite ``raw`` as TOML text that ``specverify run`` reads back to the same suite.

    Top-level scalars first, then ``[table]`` s (one level of sub-tables, e.g. ``[models.audit]``),
    then ``[[decoders]]``.
    """
    lines = [f"# {h}" for h in header]
    tables, arrays = [], []
    for key, value in raw.items():
        if isinstance(value, dict):
            tables.append((key, value))
        elif isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
            arrays.append((key, value))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, table in tables:
        flat = {k: v for k, v in table.items() if not isinstance(v, dict)}
        subs = {k: v for k, v in table.items() if isinstance(v, dict)}
        if flat or not subs:
            lines += ["", f"[{key}]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in flat.items()]
        for sub, body in subs.items():
            lines += ["", f"[{key}.{_toml_key(sub)}]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in body.items()]
    for key, items in arrays:
        for item in items:
            lines += ["", f"[[{key}]]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in item.items()]
    return "\n".join(lines) + "\n"
