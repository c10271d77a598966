"""The order OpenVINO GenAI's ``TopKFilter`` leaves the kept tokens in: libstdc++'s heap algorithms, replayed.

Source: ``openvinotoolkit/openvino.genai`` ``src/cpp/src/sampling/logit_transformers.hpp`` (master da1db864d),
``TopKFilter::apply``, fast path (no logprobs requested: ``m_vector`` not initialised): the first K tokens
``(logit, id)`` seed a heap built by ``std::make_heap`` with ``min_cmp(a, b) = a.logit > b.logit`` (a min-heap on the
logit); every later token whose logit beats the root replaces it (``std::pop_heap`` over the K slots, the new token
written to the last slot, ``std::push_heap``).  The K kept tokens stay in that heap order: with top-k alone
(``top_p == 1``, no min-p) ``TemperatureLogitTransform`` defers the softmax and ``Sampler::_multinomial_sample``
walks the CDF over ``m_vector`` in this order (the fused ``sum_run > r`` scan); with top-p, ``TopPFilter`` sorts
them by decreasing prob first (:func:`verifier.engines.openvino_repro.walk_order`).

The functions below are libstdc++'s ``std::make_heap`` / ``std::pop_heap`` / ``std::push_heap``
(``bits/stl_heap.h``: ``__adjust_heap`` moves the hole to a leaf along the larger child, then ``__push_heap`` sifts
the value up), on a Python list, so the order is a function of the float32 logits alone.  Where two logits are within
the engine's float error of each other the replayed comparisons can differ from the engine's (the same limit as the
replay's, :mod:`verifier.engines.reproductions.openvino_replay`).

>>> topk_heap_order([0.0, 3.0, 1.0, 2.0, 5.0], 3)   # kept: ids 4, 1, 3 in the heap's slot order
[3, 1, 4]
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = ["make_heap", "pop_heap", "push_heap", "topk_heap_order"]

Less = Callable[[tuple, tuple], bool]


def _push_up(a: list, hole: int, top: int, value, less: Less) -> None:
    """libstdc++ ``__push_heap``: sift ``value`` up from ``hole`` towards ``top``."""
    parent = (hole - 1) // 2
    while hole > top and less(a[parent], value):
        a[hole] = a[parent]
        hole = parent
        parent = (hole - 1) // 2
    a[hole] = value


def _adjust(a: list, hole: int, length: int, value, less: Less) -> None:
    """libstdc++ ``__adjust_heap`` on ``a[:length]``: move the hole at ``hole`` down to a leaf, then push ``value`` up."""
    top, child = hole, hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if less(a[child], a[child - 1]):
            child -= 1
        a[hole] = a[child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        a[hole] = a[child - 1]
        hole = child - 1
    _push_up(a, hole, top, value, less)


def make_heap(a: list, less: Less) -> None:
    """``std::make_heap(a.begin(), a.end(), less)`` in place."""
    n = len(a)
    if n < 2:
        return
    for parent in range((n - 2) // 2, -1, -1):
        _adjust(a, parent, n, a[parent], less)


def pop_heap(a: list, less: Less) -> None:
    """``std::pop_heap(a.begin(), a.end(), less)`` in place: the root goes to the last slot."""
    n = len(a)
    if n > 1:
        value = a[n - 1]
        a[n - 1] = a[0]
        _adjust(a, 0, n - 1, value, less)


def push_heap(a: list, less: Less) -> None:
    """``std::push_heap(a.begin(), a.end(), less)`` in place: the last slot's value joins the heap."""
    _push_up(a, len(a) - 1, 0, a[-1], less)


def _min_cmp(x: tuple, y: tuple) -> bool:
    return x[0] > y[0]  # TopKFilter's min_cmp: inverted, so the std::*_heap functions keep a min-heap on the logit


def topk_heap_order(logits: Sequence[float], k: int) -> list[int]:
    """Token ids of the K kept tokens in the slot order ``TopKFilter`` leaves them in (fast path).

    Parameters
    ----------
    logits : sequence of float, shape (vocab,)
        The raw logits of the position (compared as float32, like the engine's ``m_data``).
    k : int
        ``top_k``; at or above the vocabulary size ``TopKFilter`` returns without touching anything (id order).

    Returns
    -------
    list of int, length min(k, vocab)
    """
    data = np.asarray(logits, dtype=np.float32)
    if k >= len(data):
        return list(range(len(data)))
    heap = [(float(data[i]), i) for i in range(k)]
    make_heap(heap, _min_cmp)
    for i in range(k, len(data)):
        if data[i] > heap[0][0]:
            pop_heap(heap, _min_cmp)
            heap[-1] = (float(data[i]), i)
            push_heap(heap, _min_cmp)
    return [i for _, i in heap]
