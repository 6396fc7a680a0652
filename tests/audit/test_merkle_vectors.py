"""transparency-dev/merkle's proof probes (happy paths and their corruptions) and RFC 6962's
known-answer hashes, against Sill's Merkle module and the standalone verifier's own copy."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from audit import merkle, verify_export

VECTORS = Path(__file__).parent / "vectors" / "transparency-dev-merkle" / "testdata"
INCLUSION = sorted((VECTORS / "inclusion").rglob("*.json"))
CONSISTENCY = sorted((VECTORS / "consistency").rglob("*.json"))


def _b(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _probe_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_the_probe_sets_are_all_there():
    assert len(INCLUSION) == 98 and len(CONSISTENCY) == 98


@pytest.mark.parametrize("verify", [merkle.verify_inclusion, verify_export.verify_inclusion])
@pytest.mark.parametrize("path", INCLUSION, ids=_probe_id)
def test_it_judges_each_inclusion_probe_as_transparency_dev_does(path, verify):
    p = json.loads(path.read_text())
    proof = [_b(h) for h in p["proof"] or []]
    args = (p["leafIdx"], p["treeSize"], _b(p["leafHash"]), proof, _b(p["root"]))
    if p["wantErr"]:
        with pytest.raises(ValueError):
            verify(*args)
    else:
        verify(*args)


@pytest.mark.parametrize("verify", [merkle.verify_consistency, verify_export.verify_consistency])
@pytest.mark.parametrize("path", CONSISTENCY, ids=_probe_id)
def test_it_judges_each_consistency_probe_as_transparency_dev_does(path, verify):
    p = json.loads(path.read_text())
    proof = [_b(h) for h in p["proof"] or []]
    args = (p["size1"], p["size2"], _b(p["root1"]), _b(p["root2"]), proof)
    if p["wantErr"]:
        with pytest.raises(ValueError):
            verify(*args)
    else:
        verify(*args)


def test_it_hashes_as_rfc_6962_says():
    # The known answers of transparency-dev/merkle's rfc6962 tests.
    assert merkle.EMPTY_ROOT.hex() == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    assert merkle.leaf_hash(b"").hex() == (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )
    assert merkle.leaf_hash(b"L123456").hex() == (
        "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"
    )
    assert merkle.node_hash(b"N123", b"N456").hex() == (
        "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb"
    )


# RFC 6962's reference tree: the eight leaves of transparency-dev's tests and the roots of
# each prefix (merkle/testonly/constants.go).
LEAVES = [
    bytes.fromhex(h)
    for h in [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
]
ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def test_it_finds_the_reference_roots_of_every_prefix():
    hashes = [merkle.leaf_hash(leaf) for leaf in LEAVES]
    assert [merkle.root_of(hashes[:n]).hex() for n in range(1, 9)] == ROOTS
