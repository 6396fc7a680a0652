"""RFC 6962 Merkle trees over a site's audit records: hashes, proofs and their verification.

Pure logic, standard library only. Hashes are 32 raw bytes:

- leaf ``SHA-256(0x00 || record bytes)`` — a record's bytes are its payload, the exact RFC
  8785 text that its chain hash covers (:func:`record_leaf_hash`);
- node ``SHA-256(0x01 || left || right)``; the empty tree's root is ``SHA-256("")``;
- a tree of ``n`` leaves splits at ``k``, the largest power of two below ``n`` (RFC 6962
  §2.1), so every prefix of the log is a tree whose root a checkpoint can sign.

Proof generation takes a ``subtree(start, end)`` callable that returns the root of leaves
``[start, end)`` (``end - start`` a power of two, ``start`` a multiple of it, or any range
ending at the tree's size): :mod:`audit.tree` answers it from stored nodes; tests answer it
from a list. Verification follows transparency-dev/merkle's ``proof`` package (RFC 9162
§2.1.3.2 and §2.1.4.2), and refuses anything malformed with :class:`ProofError`.

``audit/verify_export.py`` verifies the same proofs without Sill (an independent copy, on
purpose: an outsider should not have to trust this module); keep the two in step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

Subtree = Callable[[int, int], bytes]


class ProofError(ValueError):
    """A proof that does not prove what it claims (the message says why)."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def record_leaf_hash(payload: str) -> bytes:
    """The leaf hash of an audit record: its canonical payload text, UTF-8."""
    return leaf_hash(payload.encode("utf-8"))


def split_point(size: int) -> int:
    """The largest power of two strictly below ``size`` (``size`` ≥ 2)."""
    return 1 << ((size - 1).bit_length() - 1)


def root_of(leaves: Sequence[bytes]) -> bytes:
    """The root of a tree over ``leaves`` (leaf hashes), computed from scratch."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = split_point(len(leaves))
    return node_hash(root_of(leaves[:k]), root_of(leaves[k:]))


def list_subtree(leaves: Sequence[bytes]) -> Subtree:
    """A ``subtree`` callable over an in-memory list of leaf hashes."""
    return lambda start, end: root_of(leaves[start:end])


# -- proofs -------------------------------------------------------------------------------


def inclusion_proof(index: int, size: int, subtree: Subtree) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``size`` leaves (RFC 6962 §2.1.1)."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is not in a tree of size {size}")
    return _path(index, 0, size, subtree)


def _path(index: int, start: int, end: int, subtree: Subtree) -> list[bytes]:
    if end - start == 1:
        return []
    k = split_point(end - start)
    if index < start + k:
        return [*_path(index, start, start + k, subtree), subtree(start + k, end)]
    return [*_path(index, start + k, end, subtree), subtree(start, start + k)]


def consistency_proof(size1: int, size2: int, subtree: Subtree) -> list[bytes]:
    """The proof that the tree of ``size1`` leaves is a prefix of that of ``size2``
    (RFC 6962 §2.1.2); empty when the sizes are equal."""
    if not 0 < size1 <= size2:
        raise ProofError(f"no consistency proof from size {size1} to size {size2}")
    if size1 == size2:
        return []
    return _subproof(size1, 0, size2, True, subtree)


def _subproof(m: int, start: int, end: int, whole: bool, subtree: Subtree) -> list[bytes]:
    n = end - start
    if m == n:
        return [] if whole else [subtree(start, end)]
    k = split_point(n)
    if m <= k:
        return [*_subproof(m, start, start + k, whole, subtree), subtree(start + k, end)]
    return [*_subproof(m - k, start + k, end, False, subtree), subtree(start, start + k)]


# -- verification -------------------------------------------------------------------------


def root_from_inclusion_proof(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    if not 0 <= index < size:
        raise ProofError(f"index {index} is beyond size {size}")
    _check_hashes([leaf], "leaf hash")
    _check_hashes(proof, "proof hash")
    inner, border = _decompose(index, size)
    if len(proof) != inner + border:
        raise ProofError(f"wrong proof size {len(proof)}, want {inner + border}")
    node = _chain_inner(leaf, proof[:inner], index)
    return _chain_border_right(node, proof[inner:])


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise :class:`ProofError` unless ``proof`` puts ``leaf`` at ``index`` of the tree of
    ``size`` leaves whose root is ``root``."""
    _check_hashes([root], "root")
    if root_from_inclusion_proof(index, size, leaf, proof) != root:
        raise ProofError("the inclusion proof leads to another root")


def verify_consistency(
    size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]
) -> None:
    """Raise :class:`ProofError` unless ``proof`` shows the tree of ``size1`` leaves with
    ``root1`` is a prefix of the tree of ``size2`` leaves with ``root2``."""
    if size2 < size1:
        raise ProofError(f"size2 ({size2}) < size1 ({size1})")
    if size1 == 0:
        # Every tree extends the empty one; a proof from it proves nothing and is refused.
        raise ProofError("a consistency proof from the empty tree is meaningless")
    if size1 == size2:
        if proof:
            raise ProofError("equal sizes, but the proof is not empty")
        if root1 != root2:
            raise ProofError("equal sizes, but the roots differ")
        return
    _check_hashes([root1, root2], "root")
    _check_hashes(proof, "proof hash")
    if not proof:
        raise ProofError("empty proof")
    inner, border = _decompose(size1 - 1, size2)
    shift = (size1 & -size1).bit_length() - 1  # trailing zero bits of size1
    inner -= shift
    # The first hash is the root of the rightmost perfect subtree of the old tree, unless the
    # old tree is itself perfect: then its root (root1) is that hash and is not in the proof.
    seed, rest = (root1, proof) if size1 == 1 << shift else (proof[0], proof[1:])
    if len(rest) != inner + border:
        raise ProofError(
            f"wrong proof size {len(proof)}, want {len(proof) - len(rest) + inner + border}"
        )
    mask = (size1 - 1) >> shift
    old = _chain_border_right(_chain_inner_right(seed, rest[:inner], mask), rest[inner:])
    if old != root1:
        raise ProofError("the consistency proof does not lead to the old root")
    new = _chain_border_right(_chain_inner(seed, rest[:inner], mask), rest[inner:])
    if new != root2:
        raise ProofError("the consistency proof does not lead to the new root")


def _decompose(index: int, size: int) -> tuple[int, int]:
    # Where the paths to leaves ``index`` and ``size - 1`` part: below, the proof holds inner
    # siblings (left or right); above, only left siblings along the right border.
    inner = (index ^ (size - 1)).bit_length()
    border = bin(index >> inner).count("1")
    return inner, border


def _chain_inner(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    for i, sibling in enumerate(proof):
        seed = node_hash(seed, sibling) if (index >> i) & 1 == 0 else node_hash(sibling, seed)
    return seed


def _chain_inner_right(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    for i, sibling in enumerate(proof):
        if (index >> i) & 1 == 1:
            seed = node_hash(sibling, seed)
    return seed


def _chain_border_right(seed: bytes, proof: Sequence[bytes]) -> bytes:
    for sibling in proof:
        seed = node_hash(sibling, seed)
    return seed


def _check_hashes(hashes: Sequence[bytes], what: str) -> None:
    for value in hashes:
        if not isinstance(value, bytes) or len(value) != HASH_SIZE:
            raise ProofError(f"{what} is not {HASH_SIZE} bytes")
