"""The ``cap`` largest masses of a stream of ``[rows, vocab]`` blocks, for the pooled expected laws.

:func:`verifier.runner.expected.position_laws` keeps, at a level of the target's prefix tree that
does not fit its cap, the target's top prefixes (or joint outcomes) by mass and pools the rest.
The candidates arrive as blocks of ``rows x vocab`` masses (hundreds of millions of entries in all
at V = 256k); :class:`TopMass` keeps the best ``cap`` seen so far and only looks at the entries of
a new block that can still enter them (mass >= the smallest kept mass once ``cap`` are kept), so a
block costs one comparison over its entries instead of a partition of ``cap + block`` entries.

The order is total and data-blind: larger mass first, and among equal masses the smaller key.  So
the kept set and the dropped mass are functions of the target alone -- not of the block sizes (which
follow the memory available) nor of the order the blocks arrive in.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["TopMass", "top_by_mass"]


def top_by_mass(keys: np.ndarray, mass: np.ndarray, cap: int) -> np.ndarray:
    """Boolean mask of the ``cap`` entries ranked first by (mass descending, key ascending).

    Parameters
    ----------
    keys : np.ndarray, shape (m,), int64
        Distinct keys.
    mass : np.ndarray, shape (m,), float64
    cap : int
        Entries to keep (all when ``m <= cap``).

    Returns
    -------
    np.ndarray, shape (m,), bool
    """
    m = len(mass)
    if m <= cap:
        return np.ones(m, dtype=bool)
    if cap <= 0:
        return np.zeros(m, dtype=bool)
    bound = np.partition(mass, m - cap)[m - cap]  # the cap-th largest mass
    keep = mass > bound
    tied = np.flatnonzero(mass == bound)
    need = cap - int(np.count_nonzero(keep))
    keep[tied[np.argsort(keys[tied], kind="stable")[:need]]] = True
    return keep


class TopMass:
    """Running top-``cap`` entries (by mass, ties by smaller key) of a stream, and the mass dropped.

    Parameters
    ----------
    cap : int
        Entries kept.

    Attributes
    ----------
    num_dropped : int
        How many positive entries were offered and not kept.

    The dropped mass (:meth:`result`) is the offered total minus the kept total, both summed exactly
    (``math.fsum``) over units that do not depend on how the stream was cut into blocks (one row of
    a block, one entry of :meth:`offer`): the same float whatever the block sizes.
    """

    def __init__(self, cap: int) -> None:
        self.cap = int(cap)
        self._keys = np.zeros(0, dtype=np.int64)
        self._mass = np.zeros(0)
        self._offered: list[np.ndarray] = []  # mass offered per unit (a block row, an entry)
        self.num_dropped = 0

    @property
    def floor(self) -> float:
        """Smallest mass an offered entry needs to be kept (0 until ``cap`` entries are kept)."""
        return float(self._mass.min()) if len(self._mass) >= self.cap and self.cap > 0 else 0.0

    def offer(self, keys: np.ndarray, mass: np.ndarray) -> None:
        """Offer entries (``keys`` distinct from every key offered before; masses >= 0)."""
        mass = np.asarray(mass, dtype=np.float64)
        self._offered.append(mass)
        self._select(np.asarray(keys, dtype=np.int64), mass)

    def _select(self, keys: np.ndarray, mass: np.ndarray) -> None:
        keys = np.concatenate([self._keys, keys])
        mass = np.concatenate([self._mass, mass])
        keep = top_by_mass(keys, mass, self.cap)
        if not keep.all():
            self.num_dropped += int(np.count_nonzero(mass[~keep] > 0))
            keys, mass = keys[keep], mass[keep]
        self._keys, self._mass = keys, mass

    def offer_block(self, block: np.ndarray, key0: int, vocab: int, exclude_col: int | None = None) -> None:
        """Offer every positive entry of ``block`` (rows, vocab), masses >= 0: entry ``(r, x)`` has
        key ``key0 + r * vocab + x``.

        Entries below :attr:`floor` are dropped without being gathered; column ``exclude_col``
        (e.g. EOS) is not offered.
        """
        floor = self.floor
        mask = block > 0
        if exclude_col is not None:
            mask[:, exclude_col] = False
        rows = block.sum(axis=1)  # one unit per row: the same sum whatever block the row is in
        self._offered.append(rows - block[:, exclude_col] if exclude_col is not None else rows)
        if floor <= 0 and self.cap > 0:
            offered = int(np.count_nonzero(mask))
            if offered > self.cap:  # not full yet, but this block alone fills it: its own cap-th mass is a floor
                vals = np.where(mask, block, 0.0).ravel()
                floor = float(np.partition(vals, vals.size - self.cap)[vals.size - self.cap])
                del vals
        if floor > 0:  # only entries at or above the floor can enter; the rest is dropped here (nothing gathered)
            below = mask & (block < floor)
            self.num_dropped += int(np.count_nonzero(below))
            mask &= ~below
        r, x = np.nonzero(mask)
        self._select(key0 + r.astype(np.int64) * vocab + x, block[r, x])

    def result(self) -> tuple[np.ndarray, np.ndarray, float]:
        """(kept keys ascending, their masses, dropped mass: 0.0 exactly when nothing was dropped)."""
        order = np.argsort(self._keys, kind="stable")
        dropped = 0.0
        if self.num_dropped:
            offered = np.concatenate(self._offered) if self._offered else np.zeros(0)
            dropped = max(0.0, math.fsum(offered) - math.fsum(self._mass))
        return self._keys[order], self._mass[order], dropped
