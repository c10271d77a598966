"""The suite file: a strict, versioned TOML schema with sample-budget profiles.

A suite names the exact-stage rules and cases, the model pairs, the prompts, the sampling configs,
the decoders under test (a registered name or a plugin ``module:factory``, each with an
expectation ``pass`` or ``detect``), the per-decoder sampling grid (``num_draft_tokens`` values,
``max_new_tokens``, samples per sample set, which tests), the statistics settings (alpha,
correction ``gate`` or ``audit``, target minimum detectable effect) and named profiles
(``ci``, ``nightly``, ``audit``) that scale the sample budgets.

Strictness: an unknown key is a :class:`~verifier.errors.ConfigError` naming the key path and the
allowed keys; a value of the wrong type names the key, the value and the allowed type.  Relative
model paths, ``file.py:factory`` decoder plugins and ``python_path`` entries are resolved against the
suite file's folder.

Schema (version 1)::

    schema_version = 1
    name = "ci"                       # reports go to reports/<name>/<run-id>/
    seed = 1234                        # every chunk seed derives from it
    default_profile = "ci"
    python_path = ["plugins"]          # prepended to sys.path for module:factory plugins

    [exact]          enabled = true, rules = [] (all), cases = [] (standard), trees = false (also the tree rules)
    [models.NAME]    target = "shipped:target" | "tabular:PAIR" | "module:factory" | "path/to/ckpt"
                     draft = ..., device = "cpu", dtype = "float32"
    [prompts.NAME]   text = "def " | ids = [1, 2]
    [sampling.NAME]  temperature = 1.0, top_k, top_p, repetition_penalty, presence_penalty, frequency_penalty, min_p
    [defaults]       any per-decoder grid key below
    [[decoders]]     name, decoder, expect, options, models, prompts, sampling, num_draft_tokens,
                     max_new_tokens, samples, chunk_size, tests, gof_positions, joint_tokens,
                     acceptance = "any" | "canonical" (declare the canonical min(1, p/q) rule: its
                     first-round accepted-count law is then checked as acceptance rule conformance),
                     stop_token_ids = [] (the request's stop tokens beside EOS), max_tokens (the request's
                     length limit, <= max_new_tokens; default max_new_tokens): the stop rule passed to
                     generate; with either set, tests = ["stop"] (the other cells' laws end rows at EOS only)
                     batch_composition = { rows = [1, 2, 4, 16], mixed_temperature = 0.5,
                     mixed_prompt_lengths = true } (rows per generate call, a sample set per level;
                     mixed levels with filler rows at another temperature / with other prompts of other
                     lengths: verifier.suite.batch)
    [stats]          alpha = 1e-3, correction = "gate", target_mde = 0.1, power = 0.99, tv_test = "pearson",
                     cell_weights = { "joint@1..2" = 1.9, "gof@1" = 0.4 } (weighted Holm, gate only: each
                     cell's weight, unlisted 1; `audit --alpha-allocation planned` writes it: verifier.stats.allocation)
    [profiles.NAME]  sample_scale = 1.0, alpha, correction, target_mde
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import stat
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from verifier.errors import ConfigError
from verifier.sampling import SamplingConfig
from verifier.suite.batch import parse_batch_composition
from verifier.suite.reader import _check_choice, _no_duplicates, _positive, _Reader

__all__ = [
    "SCHEMA_VERSION",
    "BUILTIN_PROFILES",
    "TEST_NAMES",
    "DEFAULT_TESTS",
    "Suite",
    "ModelPair",
    "Prompt",
    "DecoderSpec",
    "StatsSettings",
    "Profile",
    "load_suite",
    "parse_suite",
]

SCHEMA_VERSION = 1  # bump when a key changes meaning; old files then fail with a clear message
TEST_NAMES = ("gof", "joint", "surprisal", "pit", "collision", "serial", "stop", "logprob", "accepted")  # per-sample-set statistics a decoder can ask for
# without a `tests` key: the row-at-a-time cells and the acceptance audit; "collision" and "serial" look across rows
# (independence of requests), "stop" at the request's stop rule (issue 29, bug kind 5) and "logprob" at the logprobs the
# decoder reports (kind 4: generate(..., return_logprobs=True), verifier.runner.logprob): all four are opted into by name
DEFAULT_TESTS = ("gof", "joint", "surprisal", "pit", "accepted")
TV_TESTS = ("pearson", "weighted", "mixture")  # stats.tv_test: Pearson's chi-square, the weighted identity test (verifier.stats.identity)
# or the sign-mixture identity test (verifier.stats.identity_mixture)
CORRECTIONS = ("gate", "audit")  # gate: Holm(alpha/2) + Cauchy combination(alpha/2); audit: Benjamini-Yekutieli (the cells share samples)
EXPECTATIONS = ("pass", "detect")
ACCEPTANCE_RULES = ("any", "canonical")  # "canonical": the accepted-count law is checked (acceptance rule conformance)
MAX_GOF_POSITION = 8  # expected marginals are enumerated over the target's prefix tree

# Built-in profiles; a suite may redefine any of them or add its own.
BUILTIN_PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"sample_scale": 1.0},
    "nightly": {"sample_scale": 8.0},
    "audit": {"sample_scale": 4.0, "correction": "audit", "alpha": 0.05},  # BH/BY at q = 0.05 (docs/ARCHITECTURE.md "Statistical defaults")
}

TOP_LEVEL_KEYS = (
    "schema_version", "name", "seed", "description", "default_profile", "python_path", "exact",
    "models", "prompts", "sampling", "defaults", "decoders", "stats", "profiles",
)
_NUMBER = (int, float)
_MODULE_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class ModelPair:
    """A target and a draft model, as specs resolved by :mod:`verifier.runner.models`."""

    name: str
    target: str
    draft: str
    device: str = "cpu"
    dtype: str = "float32"


@dataclass(frozen=True)
class Prompt:
    """A fixed prompt: ``text`` (tokenized with the target's tokenizer) or token ``ids``."""

    name: str
    text: str | None = None
    ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class DecoderSpec:
    """One decoder under test and the grid of sample sets it is run on.

    ``decoder`` is a registered decoder name (``verifier.decoders``) or ``module:factory``.
    ``samples`` is the per-sample-set budget at profile scale 1.
    """

    name: str
    decoder: str
    expect: str
    options: dict[str, Any]
    models: str
    prompts: tuple[str, ...]
    sampling: tuple[str, ...]
    num_draft_tokens: tuple[int, ...]
    max_new_tokens: int
    samples: int
    chunk_size: int
    tests: tuple[str, ...]
    gof_positions: tuple[int, ...]
    joint_tokens: int = 2
    acceptance: str = "any"  # "canonical": the decoder declares the min(1, p/q) rule (verifier.runner.acceptance)
    stop_token_ids: tuple[int, ...] = ()  # the request's stop tokens beside EOS (generate's stop_token_ids)
    max_tokens: int | None = None  # the request's length limit (generate's max_tokens); None: max_new_tokens
    chunk_size_set: bool = True  # False: no chunk_size in the suite; the runner sizes chunks from V (verifier.runner.chunking)
    batch_composition: tuple[int, ...] = ()  # rows-per-call levels, each a sample set (verifier.suite.batch)
    batch_mixed_temperature: float | None = None  # filler rows' temperature of the mixed levels (verifier.suite.batch)
    batch_mixed_prompts: tuple[str, ...] | bool | None = None  # filler prompts of the mixed-prompts levels (True: all)

    @property
    def is_plugin(self) -> bool:
        return bool(_MODULE_FACTORY.match(self.decoder))

    @property
    def has_stop_rule(self) -> bool:
        """Whether ``generate`` gets a stop rule (``stop_token_ids`` or ``max_tokens``)."""
        return bool(self.stop_token_ids) or self.max_tokens is not None


@dataclass(frozen=True)
class StatsSettings:
    """Family-wise settings of the statistics stage."""

    alpha: float = 1e-3
    correction: str = "gate"
    target_mde: float = 0.1  # total-variation distance every `pass` cell must be able to see
    power: float = 0.99
    tv_test: str = "pearson"  # the test of the TV cells (gof@t, joint@1..J): "pearson" or the opt-in "weighted" / "mixture" (issue 27)
    # planned alpha allocation (issue 27, verifier.stats.allocation): ((cell test, weight), ...) -- the gate's Holm half
    # is weighted Holm with each cell's weight (those not listed: 1), fixed before sampling; empty: equal weights
    cell_weights: tuple[tuple[str, float], ...] = ()

    def weight_of(self, test: str) -> float:
        """The Holm weight of a cell whose ``test`` label is ``test`` (1 unless ``cell_weights`` lists it)."""
        return dict(self.cell_weights).get(test, 1.0)


@dataclass(frozen=True)
class Profile:
    name: str
    sample_scale: float = 1.0
    alpha: float | None = None
    correction: str | None = None
    target_mde: float | None = None


@dataclass
class Suite:
    """A parsed suite.  Build with :func:`load_suite`; :meth:`with_profile` applies a profile."""

    name: str
    seed: int
    description: str
    default_profile: str
    python_path: tuple[str, ...]
    exact: dict[str, Any]
    models: dict[str, ModelPair]
    prompts: dict[str, Prompt]
    sampling: dict[str, SamplingConfig]
    decoders: list[DecoderSpec]
    stats: StatsSettings
    profiles: dict[str, Profile]
    source: str = ""
    profile: str | None = None  # set by with_profile
    base_dir: str = "."
    raw: dict[str, Any] = field(default_factory=dict)

    def with_profile(self, name: str | None = None) -> "Suite":
        """Return a copy whose sample budgets and stats settings follow profile ``name``.

        Raises
        ------
        ConfigError
            If the profile is not defined.
        """
        name = name or self.default_profile
        if name not in self.profiles:
            raise ConfigError(f"{self.source}: profile={name!r} is not defined; allowed: {sorted(self.profiles)}")
        prof = self.profiles[name]
        out = copy.deepcopy(self)
        out.profile = name
        out.decoders = [
            _replace(d, samples=max(1, int(round(d.samples * prof.sample_scale)))) for d in self.decoders
        ]
        out.stats = dataclasses.replace(
            self.stats,
            alpha=prof.alpha if prof.alpha is not None else self.stats.alpha,
            correction=prof.correction or self.stats.correction,
            target_mde=prof.target_mde if prof.target_mde is not None else self.stats.target_mde,
        )
        if out.stats.cell_weights and out.stats.correction != "gate":
            raise ConfigError(f"{self.source}: profile {name!r} sets correction={out.stats.correction!r}; stats.cell_weights "
                              "(weighted Holm) needs correction = 'gate'")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (stored in ``run.json`` so a resume uses the very same suite)."""
        return {
            "raw": self.raw,
            "source": self.source,
            "base_dir": self.base_dir,
            "profile": self.profile,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Suite":
        suite = parse_suite(data["raw"], source=data["source"], base_dir=Path(data["base_dir"]))
        return suite.with_profile(data["profile"]) if data.get("profile") else suite


def _replace(spec: DecoderSpec, **changes: Any) -> DecoderSpec:
    d = asdict(spec)
    d.update(changes)
    return DecoderSpec(**d)


# --------------------------------------------------------------------------- loading


MAX_SUITE_BYTES = 16 * 2**20  # a suite is a few KiB of TOML; anything far larger is the wrong file


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def load_suite(path: str | Path, profile: str | None = None) -> Suite:
    """Read and validate a suite TOML file.

    Parameters
    ----------
    path : str or Path
        The suite file.
    profile : str, optional
        Profile to apply (``ci``, ``nightly``, ``audit`` or one the suite defines).
        Default: the suite's ``default_profile``.

    Returns
    -------
    Suite

    Raises
    ------
    ConfigError
        The file is missing, is not valid TOML, has an unknown key, a value of the wrong type,
        a reference to an undefined model pair, prompt or sampling config, or an unknown profile.
    """
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO blocks, /dev/zero never ends, a folder is no file
            raise ConfigError(f"suite file {str(path)!r} is {_file_kind(info.st_mode)}, not a regular file; "
                              "allowed: a TOML file such as suites/ci.toml")
        if info.st_size > MAX_SUITE_BYTES:
            raise ConfigError(f"suite file {str(path)!r} is {info.st_size} bytes; allowed: a TOML file of at most "
                              f"{MAX_SUITE_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"suite file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"suite file {str(path)!r} cannot be read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None
    suite = parse_suite(data, source=str(path), base_dir=path.resolve().parent)
    return suite.with_profile(profile)


_HALF = ("float16", "bfloat16")  # dtypes a tabular pair cannot honour (it computes in float64)


DEFAULT_GOF_POSITIONS = (1, 2)  # per-position cells by default; beyond max_new_tokens they are skipped, not refused


def _parse_decoder_grid(r: _Reader, base: Mapping[str, Any]) -> dict[str, Any]:
    """Grid keys shared by ``[defaults]`` and each ``[[decoders]]`` entry."""
    g: dict[str, Any] = {}
    g["models"] = r.get("models", str, base.get("models"))
    g["prompts"] = r.get_list("prompts", str, base.get("prompts"))
    g["sampling"] = r.get_list("sampling", str, base.get("sampling"))
    g["num_draft_tokens"] = r.get_list("num_draft_tokens", int, base.get("num_draft_tokens", [1]))
    if not g["num_draft_tokens"]:
        r._fail(r.path("num_draft_tokens"), g["num_draft_tokens"], "a non-empty list of integers >= 1")
    for k in g["num_draft_tokens"]:
        _positive(r, "num_draft_tokens", k)
    g["max_new_tokens"] = r.get("max_new_tokens", int, base.get("max_new_tokens", 4))
    _positive(r, "max_new_tokens", g["max_new_tokens"])
    g["samples"] = r.get("samples", int, base.get("samples", 2000))
    _positive(r, "samples", g["samples"])
    g["chunk_size_set"] = "chunk_size" in r.data or base.get("chunk_size_set", False)
    g["chunk_size"] = r.get("chunk_size", int, base.get("chunk_size", 500))  # 500: what guards assume until V is known
    _positive(r, "chunk_size", g["chunk_size"])
    g["tests"] = r.get_list("tests", str, base.get("tests", list(DEFAULT_TESTS)))
    if not g["tests"]:
        r._fail(r.path("tests"), g["tests"], "a non-empty list of " + " | ".join(map(repr, TEST_NAMES)))
    for t in g["tests"]:
        _check_choice(r, "tests", t, TEST_NAMES)
    g["gof_positions"] = r.get_list("gof_positions", int, base.get("gof_positions", list(DEFAULT_GOF_POSITIONS)))
    for t in g["gof_positions"]:
        if not 1 <= t <= MAX_GOF_POSITION:
            r._fail(r.path("gof_positions"), g["gof_positions"], f"positions in 1..{MAX_GOF_POSITION}")
    beyond = [t for t in g["gof_positions"] if t > g["max_new_tokens"]]
    if beyond and list(g["gof_positions"]) != list(DEFAULT_GOF_POSITIONS):  # a chosen position no row reaches: no cell
        r._fail(r.path("gof_positions"), g["gof_positions"],
                f"positions in 1..max_new_tokens={g['max_new_tokens']} (position {beyond[0]} is never emitted, so its "
                "cell would silently not exist); raise max_new_tokens or drop the position")
    g["joint_tokens"] = r.get("joint_tokens", int, base.get("joint_tokens", 2))
    if not 2 <= g["joint_tokens"] <= MAX_GOF_POSITION:
        r._fail(r.path("joint_tokens"), g["joint_tokens"], f"an integer in 2..{MAX_GOF_POSITION}")
    g["acceptance"] = r.get("acceptance", str, base.get("acceptance", "any"), " | ".join(map(repr, ACCEPTANCE_RULES)))
    _check_choice(r, "acceptance", g["acceptance"], ACCEPTANCE_RULES)
    _parse_stop_rule(r, base, g)
    (g["batch_composition"], g["batch_mixed_temperature"],
     g["batch_mixed_prompts"]) = parse_batch_composition(r, base)  # issue 29, bug kind 1
    for key in ("prompts", "sampling", "num_draft_tokens", "tests", "gof_positions", "stop_token_ids"):
        _no_duplicates(r, key, g[key])
    return g


def _cell_weights(st: _Reader) -> tuple[tuple[str, float], ...]:
    """``[stats] cell_weights``: a table of cell test label (``"gof@1"``, ``"joint@1..2"``, ``"pit"``) -> weight > 0."""
    table = st.get("cell_weights", dict, {}, "a table of cell test label -> weight > 0")
    out = []
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, _NUMBER) or not math.isfinite(value) or value <= 0:
            st._fail(f"{st.path('cell_weights')}.{key}", value, "a finite number > 0 (the cell's Holm weight; 1 = equal)")
        out.append((str(key), float(value)))
    return tuple(sorted(out))


def _parse_stop_rule(r: _Reader, base: Mapping[str, Any], g: dict[str, Any]) -> None:
    """``stop_token_ids`` and ``max_tokens``: the request's stop rule (issue 29, bug kind 5); ids below the vocabulary
    size are checked once the models are loaded (:mod:`verifier.runner.stop`)."""
    g["stop_token_ids"] = r.get_list("stop_token_ids", int, base.get("stop_token_ids", []), "a list of token ids >= 0")
    for t in g["stop_token_ids"]:
        if t < 0:
            r._fail(r.path("stop_token_ids"), g["stop_token_ids"], "a list of token ids >= 0")
    g["max_tokens"] = r.get("max_tokens", int, base.get("max_tokens"), "an integer in 1..max_new_tokens")
    if g["max_tokens"] is not None and not 1 <= g["max_tokens"] <= g["max_new_tokens"]:
        r._fail(r.path("max_tokens"), g["max_tokens"], f"an integer in 1..max_new_tokens={g['max_new_tokens']} (the "
                "request's length limit; max_new_tokens is the width of the returned array)")
    if (g["stop_token_ids"] or g["max_tokens"] is not None) and list(g["tests"]) != ["stop"]:
        r._fail(r.path("tests"), g["tests"], "['stop'] with stop_token_ids or max_tokens set (the other cells' laws end "
                "rows at the model's EOS only); test the same decoder without a stop rule in another [[decoders]] entry")


def parse_suite(data: Mapping[str, Any], *, source: str = "<suite>", base_dir: Path | str = ".") -> Suite:
    """Validate a suite already parsed from TOML (see :func:`load_suite`)."""
    raw = copy.deepcopy(dict(data))
    top = _Reader(dict(data), "", source)
    unknown = sorted(set(top.data) - set(TOP_LEVEL_KEYS))
    if unknown:  # report a typo before complaining about anything it may have caused
        raise ConfigError(f"{source}: unknown key {unknown[0]!r}; allowed keys: {sorted(TOP_LEVEL_KEYS)}")
    version = top.get("schema_version", int)
    if version != SCHEMA_VERSION:
        top._fail("schema_version", version, f"{SCHEMA_VERSION} (this spec-verifier reads schema version {SCHEMA_VERSION})")
    name = top.get("name", str)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or set(name) == {"."}:
        top._fail("name", name, "a plain folder name: letters, digits, '_', '-', '.', not '.' or '..' "
                  "(it names the report folder)")
    seed = top.get("seed", int, 0)
    if seed < 0:
        top._fail("seed", seed, "an integer >= 0")
    description = top.get("description", str, "")
    default_profile = top.get("default_profile", str, "ci")
    python_path = tuple(top.get_list("python_path", str, []))

    # exact stage
    ex = _Reader(top.get("exact", dict, {}), "exact", source)
    exact = {
        "enabled": ex.get("enabled", bool, True),
        "rules": list(ex.get_list("rules", str, [])),
        "cases": list(ex.get_list("cases", str, [])),
        "trees": ex.get("trees", bool, False),  # also every tree rule on the standard tree cases (~7 s)
    }
    ex.done()

    # models
    models: dict[str, ModelPair] = {}
    for mname, mdata in top.get("models", dict, {}).items():
        m = _Reader(mdata, f"models.{mname}", source)
        pair = ModelPair(
            name=mname,
            target=m.get("target", str),
            draft=m.get("draft", str),
            device=m.get("device", str, "cpu"),
            dtype=m.get("dtype", str, "float32"),
        )
        _check_choice(m, "dtype", pair.dtype, ("float32", "float64", "bfloat16", "float16"))
        if pair.dtype in _HALF and pair.target.startswith("tabular:") and pair.draft.startswith("tabular:"):
            m._fail(m.path("dtype"), pair.dtype, "'float32' (the default), 'float64' or no dtype key: tabular "
                    "models compute in float64 and would silently ignore a half-precision dtype")
        m.done()
        models[mname] = pair

    # prompts
    prompts: dict[str, Prompt] = {}
    for pname, pdata in top.get("prompts", dict, {}).items():
        p = _Reader(pdata, f"prompts.{pname}", source)
        text = p.get("text", str, None)
        ids = p.get_list("ids", int, None)
        p.done()
        if (text is None) == (ids is None):
            p._fail(f"prompts.{pname}", pdata, "exactly one of 'text' or 'ids'")
        if ids is not None and (not ids or min(ids) < 0):
            p._fail(f"prompts.{pname}.ids", ids, "a non-empty list of token ids >= 0")
        prompts[pname] = Prompt(pname, text, tuple(ids) if ids is not None else None)

    # sampling configs
    sampling: dict[str, SamplingConfig] = {}
    for sname, sdata in top.get("sampling", dict, {}).items():
        s = _Reader(sdata, f"sampling.{sname}", source)
        kwargs = {
            "temperature": s.get("temperature", _NUMBER, 1.0, "a number >= 0"),
            "top_k": s.get("top_k", int, None),
            "top_p": s.get("top_p", _NUMBER, None, "a number in (0, 1]"),
            "repetition_penalty": s.get("repetition_penalty", _NUMBER, None, "a number > 0"),
            "presence_penalty": s.get("presence_penalty", _NUMBER, None, "a number in [-100, 100]"),
            "frequency_penalty": s.get("frequency_penalty", _NUMBER, None, "a number in [-100, 100]"),
            "min_p": s.get("min_p", _NUMBER, None, "a number in [0, 1]"),
        }
        s.done()
        try:
            sampling[sname] = SamplingConfig(**{k: (float(v) if isinstance(v, float) else v) for k, v in kwargs.items()})
        except ValueError as exc:
            raise ConfigError(f"{source}: [sampling.{sname}]: {exc}") from None

    # defaults + decoders
    dr = _Reader(top.get("defaults", dict, {}), "defaults", source)
    defaults = _parse_decoder_grid(dr, {})
    dr.done()
    decoders: list[DecoderSpec] = []
    names: set[str] = set()
    for i, ddata in enumerate(top.get_list("decoders", dict, [], "an array of tables [[decoders]]")):
        d = _Reader(ddata, f"decoders[{i}]", source)
        dname = d.get("name", str)
        if dname in names:
            d._fail(d.path("name"), dname, "a name not used by another decoder")
        names.add(dname)
        decoder = d.get("decoder", str, dname)
        expect = d.get("expect", str, "pass")
        _check_choice(d, "expect", expect, EXPECTATIONS)
        options = d.get("options", dict, {})
        grid = _parse_decoder_grid(d, defaults)
        d.done()
        grid["models"] = grid["models"] or (next(iter(models)) if models else None)
        if grid["models"] not in models:
            d._fail(d.path("models"), grid["models"], f"a model pair defined under [models]: {sorted(models)}")
        if "joint" in grid["tests"] and grid["joint_tokens"] > grid["max_new_tokens"]:
            d._fail(d.path("joint_tokens"), grid["joint_tokens"],
                    f"at most max_new_tokens={grid['max_new_tokens']} (the joint cell tests the first joint_tokens "
                    "tokens of each row); lower joint_tokens, raise max_new_tokens, or drop 'joint' from tests")
        grid["prompts"] = grid["prompts"] or list(prompts)
        grid["sampling"] = grid["sampling"] or list(sampling)
        for key, table in (("prompts", prompts), ("sampling", sampling)):
            if not grid[key]:
                d._fail(d.path(key), grid[key], f"at least one entry; define [{key}.NAME]")
            for ref in grid[key]:
                if ref not in table:
                    d._fail(d.path(key), ref, f"names defined under [{key}]: {sorted(table)}")
        if isinstance(grid["batch_mixed_prompts"], (list, tuple)):  # filler prompts of the mixed-prompts levels
            for ref in grid["batch_mixed_prompts"]:
                if ref not in prompts:
                    d._fail(d.path("batch_composition") + ".mixed_prompt_lengths", ref,
                            f"names defined under [prompts]: {sorted(prompts)}")
        decoders.append(
            DecoderSpec(
                name=dname, decoder=decoder, expect=expect, options=dict(options),
                **{k: (tuple(v) if isinstance(v, list) else v) for k, v in grid.items()},
            )
        )
    if not decoders and not exact["enabled"]:
        top._fail("decoders", [], "at least one [[decoders]] entry (or an enabled [exact] stage)")

    # stats
    st = _Reader(top.get("stats", dict, {}), "stats", source)
    stats = StatsSettings(
        alpha=float(st.get("alpha", _NUMBER, 1e-3, "a number in (0, 1)")),
        correction=st.get("correction", str, "gate"),
        target_mde=float(st.get("target_mde", _NUMBER, 0.1, "a number in (0, 1]")),
        power=float(st.get("power", _NUMBER, 0.99, "a number in (0, 1)")),
        tv_test=st.get("tv_test", str, "pearson"),
        cell_weights=_cell_weights(st),
    )
    _check_choice(st, "correction", stats.correction, CORRECTIONS)
    if stats.cell_weights and stats.correction != "gate":
        st._fail(st.path("cell_weights"), dict(stats.cell_weights), "weights only with correction = 'gate' (weighted Holm)")
    _check_choice(st, "tv_test", stats.tv_test, TV_TESTS)
    for key, val, hi_ok in (("alpha", stats.alpha, False), ("target_mde", stats.target_mde, True), ("power", stats.power, False)):
        if not (0 < val < 1 or (hi_ok and val == 1)) or not math.isfinite(val):
            st._fail(st.path(key), val, "a number in (0, 1]" if hi_ok else "a number in (0, 1)")
    st.done()

    # profiles
    profiles = {n: Profile(n, **v) for n, v in BUILTIN_PROFILES.items()}
    for pname, pdata in top.get("profiles", dict, {}).items():
        pr = _Reader(pdata, f"profiles.{pname}", source)
        prof = Profile(
            pname,
            sample_scale=float(pr.get("sample_scale", _NUMBER, 1.0)),
            alpha=pr.get("alpha", _NUMBER, None),
            correction=pr.get("correction", str, None),
            target_mde=pr.get("target_mde", _NUMBER, None),
        )
        if not (math.isfinite(prof.sample_scale) and prof.sample_scale > 0):
            pr._fail(pr.path("sample_scale"), prof.sample_scale, "a finite number > 0")
        for key, val, hi_ok in (("alpha", prof.alpha, False), ("target_mde", prof.target_mde, True)):
            if val is not None and not (math.isfinite(val) and (0 < val < 1 or (hi_ok and val == 1))):
                pr._fail(pr.path(key), val, "a number in (0, 1]" if hi_ok else "a number in (0, 1)")
        if prof.correction is not None:
            _check_choice(pr, "correction", prof.correction, CORRECTIONS)
        pr.done()
        profiles[pname] = prof
    top.done()
    if default_profile not in profiles:
        top._fail("default_profile", default_profile, f"one of {sorted(profiles)}")

    return Suite(
        name=name, seed=seed, description=description, default_profile=default_profile,
        python_path=python_path, exact=exact, models=models, prompts=prompts, sampling=sampling,
        decoders=decoders, stats=stats, profiles=profiles, source=source, base_dir=str(base_dir), raw=raw,
    )
