"""What the whole-run findings share: a decoder's rejected cells split by kind, and their names in a sentence.

The independence, stop-rule, reported-logprob and batch-composition findings
(:mod:`~verifier.diagnose.independence`, :mod:`~verifier.diagnose.stoprule`, :mod:`~verifier.diagnose.logprob`,
:mod:`~verifier.diagnose.batchlevel`) each read report.json's ``cells``: the rejected cells of their own kind make the
finding, the decoder's other rejected cells decide whether the tokens themselves are off too.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from verifier.runner.verdict import CELL_BIAS

__all__ = ["rejected_split", "cell_names"]

NAMES_SHOWN = 4  # cells named in a sentence before ", ..."


def rejected_split(decoder: str, cells: Iterable[dict[str, Any]], mine: Callable[[dict[str, Any]], bool],
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(rejected cells of decoder for which mine(cell), its other rejected cells)``, in report order."""
    rejected = [c for c in cells if c.get("decoder") == decoder and c.get("verdict") == CELL_BIAS]
    return [c for c in rejected if mine(c)], [c for c in rejected if not mine(c)]


def cell_names(cells: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any] = lambda c: c.get("test") or c.get("id"),
               ) -> str:
    """The first :data:`NAMES_SHOWN` cells' names (``test``, else ``id``), ", ..." after them when there are more."""
    return ", ".join(str(key(c)) for c in cells[:NAMES_SHOWN]) + (", ..." if len(cells) > NAMES_SHOWN else "")
