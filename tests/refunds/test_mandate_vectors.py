"""docs/mandate-test-vectors.md as an agent author uses it.

The published vectors are checked the way an agent's signer is: with PyNaCl and the ``rfc8785``
package alone, nothing of Sill's (its own signing code is checked against the same vectors in
test_mandates.py). Then the page's signer, copied as printed, is sent to a demo site and
answered what the page says: ``bad_signature`` with the test key, a refund with the demo
agent's key or with the test key registered by the documented ``agents add-key``."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import re
import shlex
from decimal import Decimal
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
import rfc8785
from django.core.management import call_command
from django.test import Client
from pytest_django.fixtures import Settings

HERE = Path(__file__).resolve().parent
PAGE = (HERE.parents[1] / "docs" / "mandate-test-vectors.md").read_text()
VECTORS = json.loads((HERE / "vectors.json").read_text())["vectors"]
DOMAIN = b"sill-mandate-v1:"


def _row(name: str) -> str:
    match = re.search(rf"^\| {re.escape(name)} \| `([^`]+)` \|$", PAGE, re.M)
    assert match, f"the page's key table has no {name!r} row"
    return match.group(1)


def _section(title: str) -> str:
    return PAGE.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_the_published_key_is_the_seeds() -> None:
    seed = bytes.fromhex(_row("seed (32 bytes, hex)"))
    public = _b64url(bytes(nacl.signing.SigningKey(seed).verify_key))
    assert public == _row("public key (base64url)")
    for vector in VECTORS:
        assert (vector["seed_hex"], vector["public_key"]) == (seed.hex(), public)
        assert vector["key_id"] == _row("key_id").split()[0]


def test_vector_1_verifies_as_printed_with_an_independent_implementation() -> None:
    section = _section("Vector 1")
    (signed_text,) = _blocks(section, "json")
    signing_input, signature = (block.strip() for block in _blocks(section, "text"))
    signed = json.loads(signed_text)  # a standard JSON parser: 89.00 is the float 89.0

    assert (DOMAIN + rfc8785.dumps(signed)).decode() == signing_input
    assert '"max_amount":89,' in signing_input  # as the page notes
    assert len(signature) == 86 and "=" not in signature
    verify_key = nacl.signing.VerifyKey(_unb64url(_row("public key (base64url)")))
    verify_key.verify(signing_input.encode(), _unb64url(signature))  # raises if it does not hold
    # Ed25519 is deterministic: the published seed signs to the published signature.
    seed = bytes.fromhex(_row("seed (32 bytes, hex)"))
    assert _b64url(nacl.signing.SigningKey(seed).sign(signing_input.encode()).signature) == (
        signature
    )
    # The machine-readable copy says the same.
    assert (VECTORS[0]["signed"], VECTORS[0]["signing_input"]) == (signed, signing_input)
    assert VECTORS[0]["signature"] == signature


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_each_machine_readable_vector_verifies_independently(vector: dict[str, Any]) -> None:
    signing_input = DOMAIN + rfc8785.dumps(vector["signed"])
    assert signing_input.decode() == vector["signing_input"]
    verify_key = nacl.signing.VerifyKey(_unb64url(vector["public_key"]))
    verify_key.verify(signing_input, _unb64url(vector["signature"]))
    # Sill's digest of the body: the RFC 8785 bytes of the whole mandate, whitespace aside.
    body = {
        "signed": vector["signed"],
        "envelope": {
            "algorithm": "ed25519",
            "key_id": vector["key_id"],
            "signature": vector["signature"],
        },
    }
    assert hashlib.sha256(rfc8785.dumps(body)).hexdigest() == vector["body_sha256"]
    # A signer that keeps amounts as Decimal (as Sill reads them) signs the same bytes.
    exact = json.loads(json.dumps(vector["signed"]), parse_float=Decimal)
    plain = json.loads(json.dumps(exact, default=float))
    assert DOMAIN + rfc8785.dumps(plain) == signing_input


def test_vector_2_is_the_purchase_the_page_describes() -> None:
    section = _section("Vector 2")
    (signature,) = (block.strip() for block in _blocks(section, "text"))
    purchase = next(v for v in VECTORS if v["name"] == "purchase")
    assert purchase["signature"] == signature
    assert purchase["signed"]["mandate_id"] == "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"
    for shown in re.findall(r'`("\w+":[\d.]+)`', section):
        assert shown in purchase["signing_input"], shown
    intent = purchase["signed"]["intent"]
    total = sum(Decimal(str(li["unit_price"])) * li["quantity"] for li in intent["line_items"])
    assert (total, len(intent["line_items"])) == (Decimal("89.00"), 3)
    assert Decimal(str(intent["quoted_total"])) == total


# --- the page's signer against a demo site ---------------------------------------------------

SIGNER = _blocks(_section("Sign a mandate (Python, PyNaCl + rfc8785 + stdlib)"), "python")[0]
TEST_KEY_LINE = (
    "signing_key = nacl.signing.SigningKey(bytes(range(32)))  # the test key: use your own"
)


@pytest.fixture
def demo(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo's data, its key file under ``var/`` of the directory the author works in."""
    from refunds.demo import load_demo

    settings.SILL_DATA_DIR = tmp_path / "var"
    monkeypatch.chdir(tmp_path)
    load_demo()
    return tmp_path


def _run_signer(source: str) -> bytes:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "mandate-test-vectors.md", "exec"), {})
    return out.getvalue().encode()


def _send(body: bytes) -> Any:
    """The page's ``curl -X POST --data-binary @- -H 'Content-Type: application/json'``."""
    return Client().post("/api/v1/mandates", body, content_type="application/json")


@pytest.mark.django_db
def test_the_signer_as_printed_is_answered_bad_signature(demo: Path) -> None:
    assert TEST_KEY_LINE in SIGNER
    answer = _send(_run_signer(SIGNER))
    assert answer.status_code == 401, answer.content
    assert answer.json()["error"]["code"] == "bad_signature"


@pytest.mark.django_db
def test_the_signer_with_the_demo_agents_key_refunds(demo: Path) -> None:
    (line,) = re.findall(r"`(signing_key = nacl\.signing\.SigningKey\(.*?\))`", PAGE, re.S)
    sent = _run_signer(SIGNER.replace(TEST_KEY_LINE, line))
    answer = _send(sent)
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["decision"], body["amount"], body["currency"]) == ("approved", "89.00", "USD")

    # "the same JSON, up to whitespace and key order, returns the stored answer"
    again = _send(json.dumps(json.loads(sent), indent=2, sort_keys=True).encode())
    assert again.status_code == 200 and again.json()["refund_id"] == body["refund_id"]


@pytest.mark.django_db
def test_the_signer_with_the_test_key_registered_as_the_page_says_refunds(demo: Path) -> None:
    (command,) = re.findall(r"`manage\.py (agents add-key [^`]*)`", PAGE.replace("\n", " "))
    args = shlex.split(command)
    call_command(*args, stdout=io.StringIO())
    key_id = args[args.index("--key-id") + 1]
    envelope_key = '"key_id": "acme-2026-10"'  # "put that key id in the envelope"
    assert SIGNER.count(envelope_key) == 1
    answer = _send(_run_signer(SIGNER.replace(envelope_key, f'"key_id": "{key_id}"')))
    assert answer.status_code == 201, answer.content
    assert answer.json()["decision"] == "approved"
