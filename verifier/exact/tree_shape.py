"""Static draft-tree shapes: a nested-tuple value, a one-line text form and the parent-index form.

A *shape* says how many draft tokens hang below every node, not which tokens they are (the
verification rule's proposal fills them in).  It is a nested tuple: a node is the tuple of its
children, so ``()`` is a leaf, ``((), ())`` a root with two leaf children and ``(((),),)`` a chain
of two draft tokens.  The root is the last emitted token (the context); it carries no draft token.

Text form (:func:`parse_tree`, :func:`tree_label`): the number of children of every node, level by
level in breadth-first order, levels separated by ``;``, e.g. ``"2;1,1"`` = two children at the
root, each with one child; ``"1;1"`` = the chain of k = 2.  Trailing zeros may be left out.

Parent-index form (:func:`parent_ids`): nodes in breadth-first order, node 0 the root,
``parent[i] < i`` and siblings contiguous in their verification order -- the form the tree
verification kernels (:mod:`verifier.decoders.tree_kernels`) take.
"""

from __future__ import annotations

from typing import Sequence

from verifier.errors import invalid_argument

__all__ = ["TreeShape", "parse_tree", "tree_label", "chain_shape", "tree_depth", "num_draft_nodes", "parent_ids", "bfs_nodes"]

TreeShape = tuple  # nested tuple of child shapes; () is a leaf
MAX_TREE_NODES = 64  # the exact enumerators are exponential in the tree size; kernels take any size


def chain_shape(num_draft_tokens: int) -> TreeShape:
    """The chain of ``num_draft_tokens`` draft tokens as a tree (every node has one child).

    >>> tree_label(chain_shape(3))
    '1;1;1'
    """
    if isinstance(num_draft_tokens, bool) or not isinstance(num_draft_tokens, int) or num_draft_tokens < 1:
        raise invalid_argument("num_draft_tokens", num_draft_tokens, "an integer >= 1", where="chain_shape")
    shape: TreeShape = ()
    for _ in range(num_draft_tokens):
        shape = (shape,)
    return shape


def parse_tree(spec: str | TreeShape) -> TreeShape:
    """Parse the text form (``"2;2,1"``) into a nested-tuple shape; a shape is returned unchanged.

    Raises
    ------
    InvalidArgumentError
        Malformed text, a level whose count of entries differs from the number of nodes on the
        level above, a root without children, or more than ``MAX_TREE_NODES`` nodes.

    Examples
    --------
    >>> parse_tree("2;1,1")
    (((),), ((),))
    >>> parse_tree("3")
    ((), (), ())
    """
    if isinstance(spec, tuple):
        _shape_iv(spec)
        return spec
    allowed = "child counts per level, breadth-first, e.g. '2;1,1' (root: 2 children, each with 1)"
    if not isinstance(spec, str) or not spec.strip():
        raise invalid_argument("tree", spec, allowed)
    try:
        levels = [[int(c) for c in level.split(",")] for level in spec.replace(" ", "").split(";")]
    except ValueError:
        raise invalid_argument("tree", spec, allowed) from None
    if len(levels[0]) != 1 or levels[0][0] < 1 or any(c < 0 for level in levels for c in level):
        raise invalid_argument("tree", spec, allowed + "; the root needs >= 1 child, counts >= 0")
    # build breadth-first: children lists per node
    children: list[list[int]] = [[]]
    frontier = [0]
    for depth, counts in enumerate(levels):
        if len(counts) > len(frontier):
            raise invalid_argument("tree", spec, f"level {depth + 1} lists {len(counts)} counts but level {depth} has {len(frontier)} nodes")
        counts = counts + [0] * (len(frontier) - len(counts))
        next_frontier = []
        for node, c in zip(frontier, counts):
            for _ in range(c):
                children.append([])
                children[node].append(len(children) - 1)
                next_frontier.append(len(children) - 1)
        frontier = next_frontier
        if len(children) - 1 > MAX_TREE_NODES:
            raise invalid_argument("tree", spec, f"at most {MAX_TREE_NODES} draft nodes")

    def build(node: int) -> TreeShape:
        return tuple(build(c) for c in children[node])

    return build(0)


def _shape_iv(shape) -> None:
    def check(node, depth):
        if not isinstance(node, tuple) or any(not isinstance(c, tuple) for c in node):
            raise invalid_argument("tree", shape, "a nested tuple of child shapes (() is a leaf) or text like '2;1,1'")
        for c in node:
            check(c, depth + 1)

    check(shape, 0)
    if not shape:
        raise invalid_argument("tree", shape, "a root with at least one child")
    if num_draft_nodes(shape) > MAX_TREE_NODES:
        raise invalid_argument("tree", tree_label(shape), f"at most {MAX_TREE_NODES} draft nodes")


def bfs_nodes(shape: TreeShape) -> list[tuple[int, TreeShape, int]]:
    """``(parent index, node shape, depth)`` of every node in breadth-first order (node 0 = root, parent -1)."""
    out = [(-1, shape, 0)]
    i = 0
    while i < len(out):
        _, node, depth = out[i]
        out.extend((i, child, depth + 1) for child in node)
        i += 1
    return out


def parent_ids(shape: TreeShape) -> list[int]:
    """Parent index of every node in breadth-first order; ``[-1, 0, 0, 1, 2]`` for ``"2;1,1"``.

    >>> parent_ids(parse_tree("2;1,1"))
    [-1, 0, 0, 1, 2]
    """
    return [p for p, _, _ in bfs_nodes(parse_tree(shape))]


def tree_depth(shape: TreeShape) -> int:
    """Number of draft tokens on the longest root-to-leaf path (the chain's k)."""
    return 0 if not shape else 1 + max(tree_depth(c) for c in shape)


def num_draft_nodes(shape: TreeShape) -> int:
    """Number of draft tokens in the tree (the root not counted)."""
    return sum(1 + num_draft_nodes(c) for c in shape)


def tree_label(shape: TreeShape) -> str:
    """Text form of a shape (inverse of :func:`parse_tree`); ``"2;1,1"``."""
    levels: list[list[int]] = []
    frontier: Sequence[TreeShape] = [shape]
    while frontier and any(frontier):
        levels.append([len(n) for n in frontier])
        frontier = [c for n in frontier for c in n]
    for level in levels:  # trailing zeros are implied
        while len(level) > 1 and level[-1] == 0:
            level.pop()
    return ";".join(",".join(str(c) for c in level) for level in levels)
