"""verifier.stats public API: every name in ``__all__`` exists, and public functions carry numpydoc docstrings."""

from __future__ import annotations

import inspect

import verifier.stats as vs


def test_all_names_exist_and_are_sorted_uniquely():
    assert len(set(vs.__all__)) == len(vs.__all__)
    for name in vs.__all__:
        assert hasattr(vs, name), name


def test_public_functions_have_numpydoc_sections():
    missing = []
    for name in vs.__all__:
        obj = getattr(vs, name)
        if inspect.isfunction(obj):
            doc = inspect.getdoc(obj) or ""
            if "Parameters" not in doc and "Returns" not in doc and "Examples" not in doc:
                missing.append(name)
    assert missing == []


def test_results_unpack_as_statistic_pvalue():
    res = vs.gof_test([200, 500, 300], [0.2, 0.5, 0.3])
    statistic, pvalue = res
    assert (statistic, pvalue) == (res.statistic, res.pvalue)
    tv, w = res.mde
    assert (tv, w) == (res.mde.tv, res.mde.w)
