"""A site's Merkle tree, kept in the database as records are appended, and its proofs.

:func:`grow` is the append step (pure): given the tree's right edge (the roots of its perfect
subtrees, left to right) and the next leaf, it returns the nodes that leaf completes and the
new edge. :func:`append_leaf` stores them beside the record, under the chain head's lock.
:class:`StoredTree` answers the subtree roots :mod:`audit.merkle` needs for proofs from those
stored nodes, fetching each proof's nodes in one query. :func:`stored_nodes_completed_by` reads
them back a batch at a time, for verification to compare with the tree the records make.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from operator import or_

from django.db.models import Q

from audit import merkle
from audit.models import AuditChainHead, AuditTreeNode


def parse_frontier(text: str) -> list[bytes]:
    return [bytes.fromhex(part) for part in text.split()]


def format_frontier(frontier: Sequence[bytes]) -> str:
    return " ".join(node.hex() for node in frontier)


def grow(
    frontier: Sequence[bytes], size: int, leaf: bytes
) -> tuple[list[tuple[int, int, bytes]], list[bytes]]:
    """Add ``leaf`` as leaf number ``size`` (0-based) of a tree whose edge is ``frontier``.

    Returns the nodes to store as ``(level, index, hash)`` — the leaf and every subtree it
    completes — and the new edge.
    """
    edge = list(frontier)
    nodes = [(0, size, leaf)]
    node, level, index = leaf, 0, size
    while index & 1:  # a right child: it completes its parent
        node = merkle.node_hash(edge.pop(), node)
        level, index = level + 1, index >> 1
        nodes.append((level, index, node))
    edge.append(node)
    return nodes, edge


def root_from_frontier(frontier: Sequence[bytes]) -> bytes:
    """The tree's root from its right edge (the empty tree's root for no edge)."""
    if not frontier:
        return merkle.EMPTY_ROOT
    return reduce(
        lambda right, left: merkle.node_hash(left, right), reversed(frontier[:-1]), frontier[-1]
    )


def append_leaf(*, head: AuditChainHead, payload: str) -> None:
    """Grow ``head``'s tree by the record whose payload is ``payload`` (its seq is
    ``head.last_seq + 1``): store the completed nodes and set ``head.tree_frontier``. The
    caller holds the head's row lock and saves it."""
    nodes, edge = grow(
        parse_frontier(head.tree_frontier), head.last_seq, merkle.record_leaf_hash(payload)
    )
    AuditTreeNode.objects.bulk_create(
        [
            AuditTreeNode(site_id=head.site_id, level=level, index=index, hash=node.hex())
            for level, index, node in nodes
        ]
    )
    head.tree_frontier = format_frontier(edge)


def stored_nodes_completed_by(site_id: str, start: int, end: int) -> dict[tuple[int, int], str]:
    """The stored hashes (as text: hex unless someone changed them) of the nodes leaves
    ``start`` to ``end - 1`` complete (each leaf and every subtree whose last leaf it is),
    keyed ``(level, index)``, in one query: one range of indexes per level.

    A node ``(level, index)`` is completed by leaf ``(index + 1) * 2**level - 1``, so those of
    a level are the indexes from ``start >> level`` to ``(end >> level) - 1``.
    """
    spans = []
    level = 0
    while start >> level < end >> level:
        spans.append(Q(level=level, index__range=(start >> level, (end >> level) - 1)))
        level += 1
    if not spans:
        return {}
    rows = AuditTreeNode.objects.filter(site_id=site_id).filter(reduce(or_, spans))
    return {
        (level, index): node for level, index, node in rows.values_list("level", "index", "hash")
    }


def _blocks(start: int, end: int) -> list[tuple[int, int]]:
    """``[start, end)`` as perfect, aligned subtrees ``(level, index)``, left to right."""
    blocks = []
    while start < end:
        level = (start & -start).bit_length() - 1 if start else (end - start).bit_length() - 1
        while start + (1 << level) > end:
            level -= 1
        blocks.append((level, start >> level))
        start += 1 << level
    return blocks


class StoredTree:
    """The first ``size`` leaves of ``site_id``'s stored tree, for :mod:`audit.merkle`."""

    def __init__(self, site_id: str, size: int) -> None:
        self.site_id = site_id
        self.size = size
        self._nodes: dict[tuple[int, int], bytes] = {}

    def subtree(self, start: int, end: int) -> bytes:
        if not 0 <= start < end <= self.size:
            raise merkle.ProofError(f"no subtree [{start}, {end}) in a tree of {self.size}")
        hashes = [self._nodes[block] for block in _blocks(start, end)]
        return reduce(
            lambda right, left: merkle.node_hash(left, right), reversed(hashes[:-1]), hashes[-1]
        )

    def _load(self, wanted: set[tuple[int, int]]) -> None:
        missing = wanted - self._nodes.keys()
        if not missing:
            return
        rows = AuditTreeNode.objects.filter(site_id=self.site_id).filter(
            reduce(or_, (Q(level=level, index=index) for level, index in missing))
        )
        for level, index, node in rows.values_list("level", "index", "hash"):
            try:
                self._nodes[(level, index)] = bytes.fromhex(node)
            except ValueError:
                # Only an edit of the database writes one: no proof can be built on it.
                raise merkle.ProofError(
                    f"the stored tree's node {(level, index)} is corrupt (not hex)"
                ) from None
        if lost := missing - self._nodes.keys():
            raise merkle.ProofError(f"the stored tree lacks nodes {sorted(lost)[:3]}")

    def _prefetch(self, proof: object) -> None:
        # Run the proof once recording the subtrees it asks for, then fetch them together.
        wanted: set[tuple[int, int]] = set()

        def record(start: int, end: int) -> bytes:
            wanted.update(_blocks(start, end))
            return merkle.EMPTY_ROOT

        assert callable(proof)
        proof(record)
        self._load(wanted)

    def inclusion_proof(self, index: int) -> list[bytes]:
        self._prefetch(lambda sub: merkle.inclusion_proof(index, self.size, sub))
        return merkle.inclusion_proof(index, self.size, self.subtree)

    def consistency_proof(self, size1: int) -> list[bytes]:
        self._prefetch(lambda sub: merkle.consistency_proof(size1, self.size, sub))
        return merkle.consistency_proof(size1, self.size, self.subtree)

    def leaf(self, index: int) -> bytes:
        self._load({(0, index)})
        return self._nodes[(0, index)]

    def root(self) -> bytes:
        if self.size == 0:
            return merkle.EMPTY_ROOT
        self._load(set(_blocks(0, self.size)))
        return self.subtree(0, self.size)
