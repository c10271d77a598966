"""JSONL import of samples produced elsewhere (e.g. a serving engine), and export in the same format.

One line per sample, one JSON object per line (a ``.gz`` file is read and written through gzip)::

    {"prompt_id": "p0", "prompt_token_ids": [5, 2], "emitted_token_ids": [7, 1, 3],
     "target_logprobs": [-0.51, -1.2, -0.03], "sampling": {"temperature": 0.7, "top_k": 5},
     "seed": 17, "decoder": "my-engine"}

Fields
------
prompt_id : str, required
    Groups the samples into cells (with ``sampling``).
emitted_token_ids : list of int, required, length >= 1
    The emitted tokens, ending at EOS or at ``max_new_tokens``; no padding.
target_logprobs : list of (float or null), optional
    Natural-log target probability of each emitted token, same length (``null`` = not reported).
    Cross-checked against the harness's own scorer when a target model is available.
prompt_token_ids : list of int, optional
    The prompt; must be identical on every line with the same ``prompt_id``.
sampling : object, optional
    :class:`~verifier.sampling.SamplingConfig` fields; default T=1 with no truncation.
seed : int, optional;  decoder : str, optional
    Provenance, carried into reports.

Any other key is an error.  Files are streamed line by line (never read whole); every error names
the line number and the field.  A malformed line is a :class:`SampleFileError` (exit 2); an id
outside the vocabulary, a token after EOS or a row longer than ``max_new_tokens`` is invalid output
of the system that produced it, a :class:`~verifier.errors.DecoderOutputError` (exit 3).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from verifier.errors import ConfigError, DecoderOutputError, InvalidArgumentError, SamplingRefusedError, invalid_argument
from verifier.protocols import PADDING_TOKEN_ID
from verifier.sampling import SamplingConfig

__all__ = [
    "SampleFileError",
    "ImportedSample",
    "SampleGroup",
    "iter_jsonl_samples",
    "import_jsonl",
    "export_jsonl",
    "ReplayDecoder",
    "ReplayPlan",
    "replay_plan",
    "LogprobCheck",
    "compare_target_logprobs",
]

REQUIRED_FIELDS = ("prompt_id", "emitted_token_ids")
OPTIONAL_FIELDS = ("target_logprobs", "prompt_token_ids", "sampling", "seed", "decoder")
# SamplingConfig's fields, the issue 29 kind 3 ones included (presence / frequency over the emitted tokens, min-p)
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                   "min_p")
LOGPROB_ATOL = 1e-6  # a logprob up to this much above 0 is float rounding of log(1)
LOGPROB_AGREEMENT_ATOL = 1e-2  # engines report logprobs from bf16/fp32 logits; larger gaps mean a different target or processing


class SampleFileError(ConfigError):
    """A sample file line is not valid JSON or does not match the schema (exit 2).

    The message names the file, the line number and the field; fix the exporter that wrote it.
    """


@dataclass(frozen=True)
class ImportedSample:
    """One validated line of a sample file."""

    line: int
    prompt_id: str
    emitted_token_ids: tuple[int, ...]
    target_logprobs: tuple[float, ...] | None = None  # NaN where the line had null
    prompt_token_ids: tuple[int, ...] | None = None
    sampling: SamplingConfig = SamplingConfig()
    seed: int | None = None
    decoder: str | None = None


@dataclass
class SampleGroup:
    """All imported samples of one cell: one ``prompt_id`` and one sampling config.

    Attributes
    ----------
    emitted : np.ndarray, shape (num_samples, max_new_tokens), int64
        Emitted tokens, -1 after EOS (the :class:`~verifier.protocols.Decoder` output format).
    target_logprobs : np.ndarray, shape (num_samples, max_new_tokens), float64, or None
        NaN where not reported or after EOS; None when no line of the group reported any.
    lines : np.ndarray, shape (num_samples,), int64
        Line number of each row in the file (for error messages).
    """

    prompt_id: str
    sampling: SamplingConfig
    prompt_token_ids: tuple[int, ...] | None
    emitted: np.ndarray
    target_logprobs: np.ndarray | None
    lines: np.ndarray
    decoders: list[str] = field(default_factory=list)

    @property
    def num_samples(self) -> int:
        return int(self.emitted.shape[0])


def _open_text(path: Path, mode: str) -> io.TextIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8")  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8")


def _int_list(value: Any, where: str, name: str, *, allow_empty: bool) -> tuple[int, ...]:
    if not isinstance(value, list) or (not value and not allow_empty):
        raise SampleFileError(f"{where}: field {name!r}={value!r} is invalid; allowed: a {'' if allow_empty else 'non-empty '}list of integers")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise SampleFileError(f"{where}: field {name!r}[{i}]={v!r} is invalid; allowed: an integer token id >= 0")
    return tuple(value)


def _parse_line(obj: Any, where: str, vocab_size: int | None, eos_token_id: int | None) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise SampleFileError(f"{where}: a {type(obj).__name__} is invalid; allowed: one JSON object per line")
    unknown = sorted(set(obj) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        raise SampleFileError(f"{where}: unknown field {unknown[0]!r}; allowed: {list(REQUIRED_FIELDS + OPTIONAL_FIELDS)}")
    for name in REQUIRED_FIELDS:
        if name not in obj:
            raise SampleFileError(f"{where}: required field {name!r} is missing")
    pid = obj["prompt_id"]
    if not isinstance(pid, str) or not pid:
        raise SampleFileError(f"{where}: field 'prompt_id'={pid!r} is invalid; allowed: a non-empty string")
    emitted = _int_list(obj["emitted_token_ids"], where, "emitted_token_ids", allow_empty=False)
    if vocab_size is not None:
        bad = [i for i, t in enumerate(emitted) if t >= vocab_size]
        if bad:
            raise DecoderOutputError(f"{where}: emitted_token_ids[{bad[0]}]={emitted[bad[0]]} is outside 0..{vocab_size - 1}; row = {list(emitted)}")
    if eos_token_id is not None and eos_token_id in emitted[:-1]:
        pos = emitted.index(eos_token_id)
        raise DecoderOutputError(f"{where}: emitted_token_ids[{pos + 1}]={emitted[pos + 1]} comes after EOS (id {eos_token_id}); row = {list(emitted)}")
    out: dict[str, Any] = {"prompt_id": pid, "emitted_token_ids": emitted}
    if obj.get("target_logprobs") is not None:
        lp = obj["target_logprobs"]
        if not isinstance(lp, list) or len(lp) != len(emitted):
            raise SampleFileError(f"{where}: field 'target_logprobs' is invalid; allowed: a list of {len(emitted)} numbers or nulls (one per emitted token)")
        vals = []
        for i, v in enumerate(lp):
            if v is None:
                vals.append(math.nan)
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or v > LOGPROB_ATOL:
                raise SampleFileError(f"{where}: field 'target_logprobs'[{i}]={v!r} is invalid; allowed: a log-probability <= 0 or null")
            else:
                vals.append(float(v))
        out["target_logprobs"] = tuple(vals)
    if obj.get("prompt_token_ids") is not None:
        out["prompt_token_ids"] = _int_list(obj["prompt_token_ids"], where, "prompt_token_ids", allow_empty=True)
    if obj.get("sampling") is not None:
        s = obj["sampling"]
        if not isinstance(s, dict) or set(s) - set(SAMPLING_FIELDS):
            extra = sorted(set(s) - set(SAMPLING_FIELDS)) if isinstance(s, dict) else s
            raise SampleFileError(f"{where}: field 'sampling' has {extra!r}; allowed: an object with keys {list(SAMPLING_FIELDS)}")
        try:
            out["sampling"] = SamplingConfig(**s)
        except InvalidArgumentError as exc:
            raise SampleFileError(f"{where}: field 'sampling': {exc}") from None
    if obj.get("seed") is not None:
        if isinstance(obj["seed"], bool) or not isinstance(obj["seed"], int):
            raise SampleFileError(f"{where}: field 'seed'={obj['seed']!r} is invalid; allowed: an integer")
        out["seed"] = obj["seed"]
    if obj.get("decoder") is not None:
        if not isinstance(obj["decoder"], str):
            raise SampleFileError(f"{where}: field 'decoder'={obj['decoder']!r} is invalid; allowed: a string")
        out["decoder"] = obj["decoder"]
    return out


def iter_jsonl_samples(path: str | Path, *, vocab_size: int | None = None, eos_token_id: int | None = None) -> Iterator[ImportedSample]:
    """Stream and validate a sample file, one :class:`ImportedSample` per non-blank line.

    Parameters
    ----------
    path : str or pathlib.Path
        ``.jsonl`` or ``.jsonl.gz``.
    vocab_size : int, optional
        When given, ids must be ``< vocab_size``.
    eos_token_id : int, optional
        When given, EOS may only be the last emitted token.

    Yields
    ------
    ImportedSample

    Raises
    ------
    SampleFileError
        (exit 2) the file is missing, a line is not JSON or breaks the schema; names line and field.
    DecoderOutputError
        (exit 3) an id outside the vocabulary or a token after EOS; names the line.
    """
    p = Path(path)
    if not p.is_file():
        raise SampleFileError(f"sample file {str(p)!r} does not exist; allowed: a .jsonl or .jsonl.gz file")
    number = 0
    try:
        with (gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")) as fh:
            for number, raw in enumerate(fh, start=1):
                try:
                    text = raw.decode("utf-8")  # per line, so a bad byte is reported at its own line
                except UnicodeDecodeError as exc:
                    raise SampleFileError(f"{p.name} line {number}: unreadable (UnicodeDecodeError: {exc}); "
                                          "allowed: UTF-8 JSON lines") from None
                if not text.strip():
                    continue
                where = f"{p.name} line {number}"
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise SampleFileError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
                yield ImportedSample(line=number, **_parse_line(obj, where, vocab_size, eos_token_id))
    except (OSError, EOFError, zlib.error) as exc:  # unreadable, not gzip, truncated gzip
        raise SampleFileError(f"{p.name} line {number + 1}: unreadable ({type(exc).__name__}: {exc}); allowed: UTF-8 "
                              "JSON lines, gzip-compressed when the name ends in .gz") from None


def import_jsonl(path: str | Path, *, max_new_tokens: int | None = None, vocab_size: int | None = None,
                 eos_token_id: int | None = None) -> dict[tuple[str, SamplingConfig], SampleGroup]:
    """Import a sample file into one :class:`SampleGroup` per (prompt_id, sampling) cell.

    The file is streamed; memory grows with the number of samples, not the file's text.

    Parameters
    ----------
    path : str or pathlib.Path
    max_new_tokens : int, optional
        Row width.  Rows must be exactly this long unless they end at EOS.  Default: the longest
        row of each group.
    vocab_size, eos_token_id : optional
        As :func:`iter_jsonl_samples`.  Without ``eos_token_id`` every row must have full length.

    Returns
    -------
    dict mapping (prompt_id, SamplingConfig) to SampleGroup, in order of first appearance

    Raises
    ------
    SampleFileError
        Schema errors, an empty file, or lines of one prompt_id with different prompt_token_ids.
    DecoderOutputError
        Invalid ids, tokens after EOS, a row longer than ``max_new_tokens``, or a row that stops
        early without EOS.  Each message names the line.  Also rows of a cell that recur as
        identical consecutive blocks (not independent samples; the message gives the duplicate count).
    """
    if max_new_tokens is not None and (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1):
        raise invalid_argument("max_new_tokens", max_new_tokens, "None or an integer >= 1")
    rows: dict[tuple[str, SamplingConfig], list[ImportedSample]] = {}
    prompts: dict[str, tuple[tuple[int, ...] | None, int]] = {}
    fits = False  # a row within max_new_tokens was seen: a longer one is then the decoder's, not the flag's
    for s in iter_jsonl_samples(path, vocab_size=vocab_size, eos_token_id=eos_token_id):
        if max_new_tokens is not None and len(s.emitted_token_ids) > max_new_tokens:
            if not fits:  # every row so far is longer: the stated length is wrong (usage, exit 2)
                raise SampleFileError(f"{Path(path).name} line {s.line}: {len(s.emitted_token_ids)} emitted tokens > "
                                      f"max_new_tokens={max_new_tokens} (--max-new-tokens), and no earlier row fits; "
                                      "allowed: the max_new_tokens the samples were generated with")
            raise DecoderOutputError(f"{Path(path).name} line {s.line}: {len(s.emitted_token_ids)} emitted tokens > max_new_tokens={max_new_tokens}")
        fits = fits or max_new_tokens is not None
        known = prompts.setdefault(s.prompt_id, (s.prompt_token_ids, s.line))
        if s.prompt_token_ids is not None and known[0] is not None and known[0] != s.prompt_token_ids:
            raise SampleFileError(f"{Path(path).name} line {s.line}: field 'prompt_token_ids' differs from line {known[1]} for prompt_id={s.prompt_id!r}")
        if known[0] is None and s.prompt_token_ids is not None:
            prompts[s.prompt_id] = (s.prompt_token_ids, s.line)
        rows.setdefault((s.prompt_id, s.sampling), []).append(s)
    if not rows:
        raise SampleFileError(f"sample file {str(path)!r} holds no samples")
    groups = {}
    for key, samples in rows.items():
        longest = max(len(s.emitted_token_ids) for s in samples)
        width = max_new_tokens or longest
        if longest < width and (eos_token_id is None or all(s.emitted_token_ids[-1] != eos_token_id for s in samples)):
            raise SampleFileError(f"{Path(path).name}: every row of prompt_id={key[0]!r} ({key[1].label()}) is at most {longest} "
                                  f"tokens long without EOS, but max_new_tokens={max_new_tokens} (--max-new-tokens); "
                                  f"allowed: max_new_tokens <= {longest}, the length the samples were generated with")
        emitted = np.full((len(samples), width), PADDING_TOKEN_ID, dtype=np.int64)
        has_lp = any(s.target_logprobs is not None for s in samples)
        logprobs = np.full((len(samples), width), np.nan) if has_lp else None
        for i, s in enumerate(samples):
            n = len(s.emitted_token_ids)
            if n < width and (eos_token_id is None or s.emitted_token_ids[-1] != eos_token_id):
                raise DecoderOutputError(
                    f"{Path(path).name} line {s.line}: {n} emitted tokens without EOS, but rows of prompt_id={key[0]!r} are {width} long; "
                    f"row = {list(s.emitted_token_ids)}"
                )
            emitted[i, :n] = s.emitted_token_ids
            if logprobs is not None and s.target_logprobs is not None:
                logprobs[i, :n] = s.target_logprobs
        _check_not_replayed(path, key[0], emitted, samples)
        groups[key] = SampleGroup(
            prompt_id=key[0], sampling=key[1], prompt_token_ids=prompts[key[0]][0], emitted=emitted, target_logprobs=logprobs,
            lines=np.array([s.line for s in samples], dtype=np.int64), decoders=sorted({s.decoder for s in samples if s.decoder}),
        )
    return groups


def _check_not_replayed(path: str | Path, prompt_id: str, emitted: np.ndarray, samples: list[ImportedSample]) -> None:
    """Rows repeated as identical consecutive blocks (a file concatenated with itself, a replayed batch)
    are not independent samples: counted as such they fake a verdict (an exact decoder's rows repeated 8
    times gave BIAS DETECTED).  :class:`~verifier.errors.DecoderOutputError` (exit 3, like the runner's
    check on a decoder that replays rows) when an i.i.d. sampler repeats them with probability
    ``<= exp(-REPLAY_NATS)`` (:func:`verifier.validation.repeated_block`)."""
    from verifier.validation import repeated_block

    found = repeated_block(emitted)
    if found is None:
        return
    m, r, nats = found
    lines = [s.line for s in samples]
    raise DecoderOutputError(
        f"{Path(path).name}: the {m} rows of prompt_id={prompt_id!r} on lines {lines[0]}..{lines[m - 1]} recur as "
        f"{r - 1} identical block(s) (lines {lines[m]}..{lines[r * m - 1]}): {(r - 1) * m} of {len(samples)} rows are "
        f"duplicates, which independent samples of any law repeat with probability <= exp(-{nats:.0f}); allowed: "
        "independent samples, each row drawn once (was the file concatenated with itself, or a seed reused?)")

DEFAULT_REPLAY_TOKENS = 4  # tokens audited per row when --max-new-tokens is not given (fewer if the rows are shorter)


@dataclass(frozen=True)
class ReplayPlan:
    """What a known-p audit of imported samples replays: checked against the file before any run."""

    prompts: list[list[int]]
    num_samples: int
    max_new_tokens: int
    notes: list[str]


def replay_plan(groups: dict[tuple[str, SamplingConfig], SampleGroup], sampling: SamplingConfig, *,
                prompt_ids: Sequence[Sequence[int]] = (), max_new_tokens: int | None = None,
                source: str = "sample file") -> ReplayPlan:
    """The prompts, rows per prompt and tokens per row to audit, or a usage error before sampling.

    Rows of another sampling config (or of prompts not in ``prompt_ids``) are not audited; each such
    group gets a note saying so.

    Raises
    ------
    SampleFileError
        (exit 2) no rows with ``sampling``; a prompt of ``prompt_ids`` with no rows for it;
        ``max_new_tokens`` beyond the rows' length.
    """
    audited = [g for g in groups.values() if g.sampling == sampling]
    if not audited:
        held = sorted({g.sampling.label() for g in groups.values()})
        raise SampleFileError(f"{source}: no rows with sampling {sampling.label()} (the --temperature / --top-k / --top-p "
                              f"/ --repetition-penalty / --presence-penalty / --frequency-penalty / --min-p given); the file holds {held}; allowed: the sampling options of one of them")
    if prompt_ids:
        have = {g.prompt_token_ids: g for g in audited}
        missing = [list(p) for p in prompt_ids if tuple(int(t) for t in p) not in have]
        if missing:
            raise SampleFileError(f"{source}: --prompt-ids {missing[0]} has no rows with sampling {sampling.label()}; "
                                  f"allowed: prompt ids the file holds for it: {[list(k) for k in have if k is not None]}")
        audited = [have[tuple(int(t) for t in p)] for p in prompt_ids]
    width = min(g.emitted.shape[1] for g in audited)
    if max_new_tokens is None:
        max_new_tokens = min(DEFAULT_REPLAY_TOKENS, width)
    elif max_new_tokens > width:
        narrow = min(audited, key=lambda g: g.emitted.shape[1])
        raise SampleFileError(f"{source}: --max-new-tokens={max_new_tokens} but the rows of prompt_id={narrow.prompt_id!r} "
                              f"are {width} tokens long; allowed: --max-new-tokens <= {width}")
    notes = [f"{g.num_samples} rows of prompt_id={g.prompt_id!r} with sampling {g.sampling.label()} are not audited "
             f"(this audit: sampling {sampling.label()}{', --prompt-ids' if prompt_ids else ''}); audit them with their "
             "own sampling options" for g in groups.values() if not any(g is a for a in audited)]
    return ReplayPlan([list(g.prompt_token_ids) if g.prompt_token_ids is not None else [] for g in audited],
                      min(g.num_samples for g in audited), max_new_tokens, notes)


def export_jsonl(path: str | Path, emitted: np.ndarray, *, prompt_id: str, prompt_token_ids: Sequence[int] | None = None,
                 sampling: SamplingConfig | None = None, target_logprobs: np.ndarray | None = None, seed: int | None = None,
                 decoder: str | None = None, append: bool = False) -> int:
    """Write decoder samples (the ``Decoder.generate`` format) as sample-file lines.

    Parameters
    ----------
    path : str or pathlib.Path
        ``.jsonl`` (or ``.jsonl.gz``).
    emitted : np.ndarray, shape (num_samples, max_new_tokens), int64
        Rows padded with -1 after EOS; the padding is not written.
    prompt_id : str
    prompt_token_ids, sampling, seed, decoder : optional
        Written on every line.
    target_logprobs : np.ndarray, shape (num_samples, max_new_tokens), optional
        Written for the emitted positions (NaN -> null).
    append : bool, default False
        Append instead of overwrite (to write several cells into one file).

    Returns
    -------
    int
        Number of lines written.
    """
    arr = np.asarray(emitted)
    if arr.ndim != 2 or arr.dtype.kind not in "iu":
        raise invalid_argument("emitted", f"<array shape={arr.shape} dtype={arr.dtype}>", "an int array (num_samples, max_new_tokens)")
    if not isinstance(prompt_id, str) or not prompt_id:
        raise invalid_argument("prompt_id", prompt_id, "a non-empty string")
    base: dict[str, Any] = {"prompt_id": prompt_id}
    if prompt_token_ids is not None:
        base["prompt_token_ids"] = [int(t) for t in prompt_token_ids]
    if sampling is not None:
        base["sampling"] = {k: v for k, v in sampling.to_dict().items() if v is not None}
    if seed is not None:
        base["seed"] = int(seed)
    if decoder is not None:
        base["decoder"] = decoder
    p = Path(path)
    with _open_text(p, "a" if append else "w") as fh:
        for i, row in enumerate(arr):
            n = int(np.argmax(row == PADDING_TOKEN_ID)) if (row == PADDING_TOKEN_ID).any() else row.shape[0]
            line = dict(base, emitted_token_ids=[int(t) for t in row[:n]])
            if target_logprobs is not None:
                line["target_logprobs"] = [None if math.isnan(v) else float(v) for v in target_logprobs[i, :n]]
            fh.write(json.dumps(line, separators=(",", ":")) + "\n")
    return int(arr.shape[0])


class ReplayDecoder:
    """Imported samples replayed through the :class:`~verifier.protocols.Decoder` protocol.

    Lets samples produced elsewhere flow through the same audit, runner and reports as a live
    decoder.  ``generate`` returns the next ``num_samples`` unread stored rows of the group whose
    prompt tokens equal ``prompt_ids`` and whose sampling config equals ``sampling``: the runner asks
    in chunks with distinct seeds, and each new seed gets the rows after the previous chunk's (a
    seed asked again gets the same rows again).  The randomness was spent when the samples were
    produced, so the seed only names the chunk.

    Parameters
    ----------
    groups : dict from :func:`import_jsonl`
        Every group must carry ``prompt_token_ids``.
    vocab_size : int
    eos_token_id : int or None
    name : str, default "imported"
    """

    def __init__(self, groups: dict[tuple[str, SamplingConfig], SampleGroup], *, vocab_size: int, eos_token_id: int | None,
                 name: str = "imported") -> None:
        missing = [g.prompt_id for g in groups.values() if g.prompt_token_ids is None]
        if missing:
            raise SampleFileError(f"prompt_id={missing[0]!r} has no prompt_token_ids; replaying needs them on at least one line")
        self._by_prompt = {(g.prompt_token_ids, g.sampling): g for g in groups.values()}
        self.vocab_size, self.eos_token_id, self.name = vocab_size, eos_token_id, name
        self._offsets: dict[tuple, dict[int, tuple[int, int]]] = {}  # (prompt, sampling) -> seed -> (first row, rows)

    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: SamplingConfig, seed: int) -> np.ndarray:
        """Return stored rows (shape ``(num_samples, max_new_tokens)``, int64).

        Raises
        ------
        SamplingRefusedError
            No group for this prompt and sampling config, too few samples, or rows narrower than
            ``max_new_tokens`` (a usage error, exit 2: :func:`replay_plan` checks these up front).
        """
        key = (tuple(int(t) for t in prompt_ids), sampling)
        group = self._by_prompt.get(key)
        if group is None:  # SamplingRefusedError: exit 2 even from inside generate (the runner lets it through)
            raise SamplingRefusedError(f"no imported samples for prompt_token_ids={list(key[0])} with sampling {sampling.label()}; "
                                  f"available: {[(list(k[0]), k[1].label()) for k in self._by_prompt]}")
        served = self._offsets.setdefault(key, {})
        if seed not in served:
            served[seed] = max((o + n for o, n in served.values()), default=0), num_samples
        start = served[seed][0]
        if group.num_samples < start + num_samples or group.emitted.shape[1] < max_new_tokens:
            raise SamplingRefusedError(f"prompt_id={group.prompt_id!r} has {group.num_samples} samples x {group.emitted.shape[1]} tokens; "
                                  f"asked for rows {start}..{start + num_samples - 1} x {max_new_tokens} tokens")
        return group.emitted[start:start + num_samples, :max_new_tokens].copy()


@dataclass(frozen=True)
class LogprobCheck:
    """Agreement of imported ``target_logprobs`` with the harness's own processed target probs."""

    prompt_id: str
    num_tokens: int
    max_abs_diff: float
    num_disagreeing: int
    tolerance: float
    first_disagreement: str = ""

    @property
    def agrees(self) -> bool:
        return self.num_disagreeing == 0

    def summary(self) -> str:
        if self.num_tokens == 0:
            return f"prompt_id={self.prompt_id!r}: no target_logprobs reported"
        head = (f"prompt_id={self.prompt_id!r}: {self.num_tokens} reported target logprobs, max |diff| = {self.max_abs_diff:.3g} "
                f"vs the harness's processed target probs")
        if self.agrees:
            return head + f" (all within {self.tolerance:g})"
        return head + (f"; {self.num_disagreeing} differ by more than {self.tolerance:g} (first: {self.first_disagreement}) -- "
                       "the engine's target or its logits processing differs from the audited one")


def compare_target_logprobs(group: SampleGroup, reference, *, tolerance: float = LOGPROB_AGREEMENT_ATOL) -> LogprobCheck:
    """Compare a group's reported ``target_logprobs`` with teacher-forced processed target probs.

    Parameters
    ----------
    group : SampleGroup
        Must carry ``prompt_token_ids``.
    reference : verifier.runner.models.ReferenceModel
        The target as the harness scores it (``teacher_forced`` gives processed float64 probs).
    tolerance : float, default 1e-2
        Absolute tolerance on natural-log probabilities.

    Returns
    -------
    LogprobCheck
        A reported logprob that disagrees beyond ``tolerance`` means the samples were scored under a
        different target or sampling config than the audit assumes; the verdict is still computed
        from the harness's own probs.
    """
    if group.target_logprobs is None or group.prompt_token_ids is None:
        return LogprobCheck(group.prompt_id, 0, math.nan, 0, tolerance)
    ours = np.full(group.emitted.shape, np.nan)
    for rows, probs in reference.teacher_forced(group.prompt_token_ids, group.emitted, group.sampling):
        tokens = group.emitted[rows]
        safe = np.where(tokens == PADDING_TOKEN_ID, 0, tokens)
        with np.errstate(divide="ignore"):
            ours[rows] = np.log(np.take_along_axis(probs, safe[..., None], axis=-1)[..., 0])
    reported = ~np.isnan(group.target_logprobs) & (group.emitted != PADDING_TOKEN_ID)
    with np.errstate(invalid="ignore"):
        d = np.where(reported, np.nan_to_num(np.abs(ours - group.target_logprobs), nan=np.inf), 0.0)
    bad = reported & (d > tolerance)
    first = ""
    if bad.any():
        i, t = (int(v) for v in np.argwhere(bad)[0])
        first = f"line {int(group.lines[i])} position {t}: reported {group.target_logprobs[i, t]:.4g}, harness {ours[i, t]:.4g}"
    return LogprobCheck(group.prompt_id, int(reported.sum()), float(d[reported].max()) if reported.any() else math.nan,
                        int(bad.sum()), tolerance, first)
