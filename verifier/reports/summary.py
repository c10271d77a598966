"""Plain-language parts of report.md / report.html: one line per decoder, its most telling cell,
a legend for cell ids and decimal display of exact fractions.

Everything here reads the report.json dictionary only (no statistics are computed): the line
of a decoder quotes the numbers its cells already carry (effect with its interval, MDE, alpha).

Cell ids read ``decoder/prompt/sampling/k=K/test``; :func:`cell_legend` explains each part from
the report's own sample sets.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

__all__ = ["decoder_line", "most_telling_cell", "cell_legend", "decimal", "test_phrase", "set_label"]

DECIMAL_DIGITS = 4  # significant digits shown for an exact fraction (the fraction itself is in report.json and on hover)
TV_UNITS = ("tv",)


def decimal(value: Any, digits: int = DECIMAL_DIGITS) -> str:
    """A number (float, int or an exact fraction written ``"a/b"``) as a short decimal.

    >>> decimal("1/3"), decimal("0"), decimal(0.000012345), decimal("22/7", 3)
    ('0.3333', '0', '1.234e-05', '3.14')
    """
    if value is None or value == "":
        return ""
    try:
        x = Fraction(value) if isinstance(value, str) else value
        f = float(x)
    except (TypeError, ValueError, ZeroDivisionError):
        return str(value)
    if f == 0:
        return "0"
    if not math.isfinite(f):
        return str(f)
    return f"{f:.{digits}g}"


def _real(value: Any) -> float | None:
    """A number of report.json as a float: strict JSON writes infinities as "inf" / "-inf"; None stays None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _alpha_text(alpha: float) -> str:
    exp = math.log10(alpha) if alpha > 0 else 0
    return f"1e{int(round(exp))}" if alpha > 0 and abs(exp - round(exp)) < 1e-9 else f"{alpha:g}"


def test_phrase(test: str) -> str:
    """What a cell's test looks at, in words: ``gof@1`` -> 'first-token', ``joint@1..3`` -> 'first 3 tokens'."""
    if test.startswith("gof@"):
        t = test[4:]
        return "first-token" if t == "1" else f"token-{t}"
    if test.startswith("joint@1.."):
        return f"first {test[len('joint@1..'):]} tokens (joint)"
    if test.startswith("surprisal@1.."):
        return f"mean surprisal of the first {test[len('surprisal@1..'):]} tokens"
    if test == "pit":
        return "randomized PIT"
    if test == "greedy":
        return "greedy output"
    if test.startswith("collision@1.."):
        return f"collision cell (identical pairs of the first {test[len('collision@1..'):]} tokens)"
    return test


def set_label(cell: dict, sets: dict[str, dict]) -> str:
    """'prompt ctx01, T=0.7 top_k=2, k=2' for the cell's sample set (the id parts, spelled out)."""
    s = sets.get(cell.get("set_id", ""))
    if not s:
        return ""
    samp = s.get("sampling") or {}
    parts = [f"T={samp.get('temperature'):g}" if samp.get("temperature") is not None else ""]
    parts += [f"{k}={samp[k]:g}" for k in ("top_k", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                                           "min_p") if samp.get(k) is not None]
    return f"prompt {s.get('prompt')}, {' '.join(p for p in parts if p)}, k={s.get('num_draft_tokens')}"


def _tells(cell: dict) -> tuple:
    """Sort key: support violations first, then smallest p, token cells before PIT and surprisal, then the largest
    effect lower bound per MDE."""
    ci = [_real(v) for v in (cell.get("effect_ci") or [None, None])] + [None, None]
    lo, hi = (v if v is not None and math.isfinite(v) else 0.0 for v in ci[:2])
    low = lo
    if cell.get("effect_unit") == "nats":
        low = max(abs(lo), abs(hi)) if lo * hi > 0 else 0.0
    mde = _real(cell.get("mde"))
    mde = mde if mde and math.isfinite(mde) else 1.0
    p = _real(cell.get("pvalue"))
    unit = {"tv": 0, "ks": 1, "nats": 2}.get(cell.get("effect_unit"), 3)  # token bars show a violation best
    return (0 if cell.get("support_violation") else 1, p if p is not None else 1.0, unit, -(low / mde if mde else low))


def most_telling_cell(cells: list[dict]) -> dict | None:
    """The cell a reader should look at first: a biased cell (support violation, then smallest p,
    then largest effect lower bound relative to its MDE); without one, the cell closest to rejection."""
    if not cells:
        return None
    biased = [c for c in cells if c.get("verdict") == "BIAS"]
    pool = biased or cells
    return sorted(pool, key=_tells)[0]


def _pass_line(d: dict, cells: list[dict], alpha: float, target_mde: float | None = None) -> str:
    """The PASS claim in the words and with the number of the verdict's reason on the CLI
    (:func:`verifier.runner.coverage.pass_reason`): "no bias >= TV <target_mde>" -- every TV cell's MDE
    is at most the suite's target, so that is the claim; the largest MDE only without a target."""
    tv = [c for c in cells if c.get("effect_unit") in TV_UNITS and _real(c.get("mde")) is not None]
    joint = [c for c in tv if str(c.get("test", "")).startswith("joint@1..")]
    at = f" at alpha {_alpha_text(alpha)}"

    def bound(worst: dict) -> str:
        return f"{target_mde:g}" if _real(target_mde) is not None else f"{_real(worst['mde']):.2g}"

    if joint:
        worst = max(joint, key=lambda c: _real(c["mde"]))
        j = worst["test"][len("joint@1.."):]
        return f"no bias >= TV {bound(worst)} on the first {j} tokens{at} (power 0.99)"
    if tv:
        worst = max(tv, key=lambda c: _real(c["mde"]))
        return f"no bias >= TV {bound(worst)} at any tested token position{at} (power 0.99)"
    greedy = [c for c in cells if c.get("test") == "greedy"]
    if greedy:
        return f"every row equals the target's greedy output ({sum(c.get('n') or 0 for c in greedy)} rows)"
    return f"no cell rejected{at}"


def _effect_text(c: dict) -> str:
    ci = c.get("effect_ci")
    interval = f" [{decimal(ci[0], 2)}, {decimal(ci[1], 2)}]" if ci else ""
    unit = c.get("effect_unit")
    effect = _real(c.get("effect"))
    effect = 0.0 if effect is None else effect
    if unit == "tv":
        return f"{test_phrase(c.get('test', ''))} TV {effect:.3f}{interval}".replace("  ", " ")
    if unit == "nats":
        e = effect
        side = "above" if e > 0 else "below"
        return f"{test_phrase(c.get('test', ''))} {abs(e):.3f} nats {side} the entropy{interval}"
    if unit == "ks":
        return f"randomized PIT KS distance {effect:.3f}{interval}"
    return f"{test_phrase(c.get('test', ''))} p={decimal(c.get('pvalue'), 2)}"


def decoder_line(d: dict, cells: list[dict], sets: dict[str, dict], alpha: float,
                 target_mde: float | None = None) -> str:
    """One plain sentence for a decoder, without the multiple-testing wording (that goes to the details).

    PASS: 'no bias >= TV 0.1 on the first 3 tokens at alpha 1e-3 (power 0.99)' (the suite's target_mde, as
    the CLI states it);
    BIAS DETECTED: 'biased: first-token TV 0.054 [0.037, 0.070] (prompt ctx01, T=1, k=2)';
    UNDERPOWERED: the cell that cannot see the target and the n it needs; ERROR: the error.
    """
    verdict = d.get("verdict")
    if d.get("error") or verdict == "ERROR":
        err = d.get("error") or {}
        return f"error: {err.get('type', 'DecoderError')}: {err.get('message', d.get('reason', ''))}"
    if verdict == "PASS":
        return _pass_line(d, cells, alpha, target_mde)
    if verdict == "UNDERPOWERED":
        # a cell with an MDE names what more rows buy; one without (n = 0, a consistency check) says nothing: the
        # decoder's reason does (a guard's: rows without a reported law, speculation never ran)
        under = [c for c in cells if c.get("verdict") == "UNDERPOWERED" and _real(c.get("mde")) is not None]
        from verifier.runner.verdict import BLIND_AT

        blind = [c for c in under if c.get("effect_unit") in BLIND_AT]  # MDE 1: it detects nothing, no TV to name
        under = [c for c in under if c not in blind]
        if blind and not under:
            c = blind[0]
            if c.get("effect_unit") == "collision":
                return (f"underpowered: {test_phrase(c.get('test', ''))} detects nothing with n = {c.get('n')} pairs (not "
                        "even every pair identical would reject)")
            return f"underpowered: {test_phrase(c.get('test', ''))} detects nothing with n = {c.get('n')} (its MDE is 1)"
        if under:
            c = max(under, key=lambda c: _real(c.get("mde")) or 0.0)
            need = f"; needs n >= {c['n_needed']} rows per sample set" if c.get("n_needed") is not None else ""
            return (f"underpowered: {test_phrase(c.get('test', ''))} can only see TV >= {decimal(c.get('mde'), 2)} with "
                    f"n = {c.get('n')}{need}")
        return f"underpowered: {d.get('reason', '')}"
    c = most_telling_cell(cells)
    if c is None:
        return d.get("reason", "")
    where = set_label(c, sets)
    where = f" ({where})" if where else ""
    if c.get("support_violation"):
        return f"biased: {c['support_violation']} ({test_phrase(c.get('test', ''))}{', ' + where[2:-1] if where else ''})"
    return f"biased: {_effect_text(c)}{where}"


def cell_legend(report: dict) -> dict[str, list[tuple[str, str]]]:
    """Rows explaining each part of the cell ids in this report: prompts, sampling configs, tests."""
    prompts, samplings, tests = {}, {}, {}
    for s in report.get("sample_sets", []):
        ids = s.get("prompt_ids")
        prompts.setdefault(s.get("prompt"), f"prompt token ids {ids}" if ids is not None else "")
        samp = s.get("sampling") or {}
        text = ", ".join(f"{k}={v:g}" for k, v in samp.items() if v is not None) or "defaults"
        samplings.setdefault(s.get("sampling_name"), f"sampling config: {text}")
    meaning = {  # id form -> what it tests
        "gof@": ("gof@t", "chi-square of token t's marginal law against its exact law"),
        "joint@": ("joint@1..J", "chi-square of the joint law of the first J tokens against its exact law"),
        "surprisal@": ("surprisal@1..J", "mean surprisal (-log target prob) of the first J tokens against the exact entropy"),
        "pit": ("pit", "randomized probability integral transform of every emitted token, KS against Uniform(0,1)"),
        "greedy": ("greedy", "temperature 0: every row must equal the target's greedy output"),
        "collision@": ("collision@1..J", "identical disjoint pairs of rows (first J tokens) against the law's collision "
                       "probability: shared or correlated randomness across rows"),
        "stop-rule": ("stop-rule", "every row checked: no token after its first stop token or EOS, none past max_tokens "
                      "(one violating row is BIAS)"),
        "logprob": ("logprob", "every emitted token's reported logprob against the reference's log p at the same prefix "
                    "(one wrong token is BIAS; per position: tokens, wrong, max |difference|)"),
        "stop-position@": ("stop-position@1..L", "chi-square of the stopping position (first stop token or EOS within "
                           "max_tokens = L, or none) against its exact law"),
    }
    for c in report.get("cells", []):
        t = c.get("test", "")
        for prefix, (form, text) in meaning.items():
            if t.startswith(prefix):
                tests.setdefault(form, text)
    return {
        "parts": [("decoder", "the decoder's name in the suite"), ("prompt", "a [prompts.NAME] of the suite"),
                  ("sampling", "a [sampling.NAME] config of the suite"), ("k=K", "num_draft_tokens"),
                  ("test", "the statistic (below)")],
        "prompts": sorted((str(k), v) for k, v in prompts.items()),
        "samplings": sorted((str(k), v) for k, v in samplings.items()),
        "tests": list(tests.items()),
    }
