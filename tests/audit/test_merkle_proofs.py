"""Sill's own proofs: every proof it makes verifies (in Sill and in the standalone verifier),
and each corruption of transparency-dev's catalogue is refused by both."""

from __future__ import annotations

import pytest

from audit import merkle, verify_export

LEAVES = [merkle.leaf_hash(f"record {i}".encode()) for i in range(70)]
SUB = merkle.list_subtree(LEAVES)
VERIFIERS = {"sill": merkle, "standalone": verify_export}


def _flip(h: bytes, bit: int = 3) -> bytes:
    return bytes([h[0] ^ (1 << bit)]) + h[1:]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 70])
def test_it_proves_every_leaf_of_every_tree(size):
    root = merkle.root_of(LEAVES[:size])
    for index in range(size):
        proof = merkle.inclusion_proof(index, size, SUB)
        for verifier in VERIFIERS.values():
            verifier.verify_inclusion(index, size, LEAVES[index], proof, root)


@pytest.mark.parametrize("size2", [2, 3, 5, 8, 9, 16, 21, 70])
def test_it_proves_every_prefix_consistent(size2):
    root2 = merkle.root_of(LEAVES[:size2])
    for size1 in range(1, size2 + 1):
        proof = merkle.consistency_proof(size1, size2, SUB)
        root1 = merkle.root_of(LEAVES[:size1])
        for verifier in VERIFIERS.values():
            verifier.verify_consistency(size1, size2, root1, root2, proof)


def _inclusion_corruptions(index, size, leaf, proof, root):
    yield "index + 1", (index + 1, size, leaf, proof, root)
    if index > 0:
        yield "index - 1", (index - 1, size, leaf, proof, root)
    yield "size * 2", (index, size * 2, leaf, proof, root)
    yield "size // 2", (index, size // 2, leaf, proof, root)
    yield "wrong leaf", (index, size, _flip(leaf, 0), proof, root)
    yield "wrong root", (index, size, leaf, proof, _flip(root, 7))
    yield "root as leaf", (index, size, root, proof, leaf)
    for i in range(len(proof)):
        for bit in (0, 4):
            bad = [*proof[:i], _flip(proof[i], bit), *proof[i + 1 :]]
            yield f"bit {bit} of proof[{i}]", (index, size, leaf, bad, root)
        yield f"proof[{i}] dropped", (index, size, leaf, proof[:i] + proof[i + 1 :], root)
    for i in range(len(proof) + 1):
        yield (
            f"component inserted at {i}",
            (index, size, leaf, [*proof[:i], leaf, *proof[i:]], root),
        )
    yield "empty proof", (index, size, leaf, [], root)
    yield "trailing root", (index, size, leaf, [*proof, root], root)
    yield "preceding root", (index, size, leaf, [root, *proof], root)
    yield "short hash", (index, size, leaf, [p[:31] for p in proof], root)


@pytest.mark.parametrize("name", list(VERIFIERS))
@pytest.mark.parametrize(("index", "size"), [(0, 2), (3, 8), (5, 7), (16, 17), (40, 70), (69, 70)])
def test_it_refuses_every_corrupted_inclusion_proof(name, index, size):
    verifier = VERIFIERS[name]
    proof = merkle.inclusion_proof(index, size, SUB)
    root = merkle.root_of(LEAVES[:size])
    for what, args in _inclusion_corruptions(index, size, LEAVES[index], proof, root):
        with pytest.raises(ValueError):
            verifier.verify_inclusion(*args)
            pytest.fail(f"{name} accepted an inclusion proof with {what}")


def _consistency_corruptions(size1, size2, root1, root2, proof):
    yield "size1 + 1", (size1 + 1, size2, root1, root2, proof)
    yield "size1 - 1", (size1 - 1, size2, root1, root2, proof)
    yield "size2 * 2", (size1, size2 * 2, root1, root2, proof)
    yield "size2 // 2", (size1, size2 // 2, root1, root2, proof)
    yield "size1 > size2", (size2 + 1, size2, root1, root2, proof)
    yield "swapped roots", (size1, size2, root2, root1, proof)
    yield "wrong root1", (size1, size2, _flip(root1), root2, proof)
    yield "wrong root2", (size1, size2, root1, _flip(root2), proof)
    for i in range(len(proof)):
        for bit in (0, 4):
            bad = [*proof[:i], _flip(proof[i], bit), *proof[i + 1 :]]
            yield f"bit {bit} of proof[{i}]", (size1, size2, root1, root2, bad)
        yield f"proof[{i}] dropped", (size1, size2, root1, root2, proof[:i] + proof[i + 1 :])
    for i in range(len(proof) + 1):
        bad = [*proof[:i], root1, *proof[i:]]
        yield f"component inserted at {i}", (size1, size2, root1, root2, bad)
    yield "empty proof", (size1, size2, root1, root2, [])
    yield "trailing garbage", (size1, size2, root1, root2, [*proof, b"\x00" * 32])


@pytest.mark.parametrize("name", list(VERIFIERS))
@pytest.mark.parametrize(
    ("size1", "size2"), [(1, 2), (3, 8), (4, 8), (5, 7), (6, 21), (16, 70), (33, 70)]
)
def test_it_refuses_every_corrupted_consistency_proof(name, size1, size2):
    verifier = VERIFIERS[name]
    proof = merkle.consistency_proof(size1, size2, SUB)
    root1, root2 = merkle.root_of(LEAVES[:size1]), merkle.root_of(LEAVES[:size2])
    for what, args in _consistency_corruptions(size1, size2, root1, root2, proof):
        with pytest.raises(ValueError):
            verifier.verify_consistency(*args)
            pytest.fail(f"{name} accepted a consistency proof with {what}")


def test_it_makes_no_proof_it_cannot_make():
    with pytest.raises(merkle.ProofError):
        merkle.inclusion_proof(8, 8, SUB)
    with pytest.raises(merkle.ProofError):
        merkle.consistency_proof(0, 8, SUB)
    with pytest.raises(merkle.ProofError):
        merkle.consistency_proof(9, 8, SUB)
    assert merkle.consistency_proof(8, 8, SUB) == []
