"""Signed mandate parsing and verification (pure: no Django, no database)."""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refunds.agent.mandates import (
    DOMAIN_TAG,
    ERROR_CODES,
    MANDATE_ID_RE,
    MAX_BODY_BYTES,
    REASON_CODES,
    REFUND_FORBIDDEN_FIELDS,
    KeyRecord,
    MandateError,
    PurchaseIntent,
    PurchaseLine,
    RefundIntent,
    VerifiedMandate,
    canonical_json,
    document_sha256,
    parse_document,
    peek_identity,
    sign_mandate,
    signing_input,
    verify_mandate,
)
from sill.errors import SillError
from sill.money import Money

HERE = Path(__file__).parent
SEED = bytes(range(32))
KEY = nacl.signing.SigningKey(SEED)
OTHER_KEY = nacl.signing.SigningKey(bytes(range(1, 33)))
KEY_ID = "acme-2026-10"
SITE = "01JDEMOSITE00000000000MAIN"
AGENT = "agent_acme_shopper"
ISSUED = datetime(2026, 9, 30, 15, 38, tzinfo=UTC)
NOW = ISSUED + timedelta(seconds=10)
B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def refund_signed(**intent: Any) -> dict[str, Any]:
    return {
        "mandate_id": "mnd_01K6HBK7MK753DH3YBX4NVCYTT",
        "site_id": SITE,
        "agent_id": AGENT,
        "issued_at": stamp(ISSUED),
        "expires_at": stamp(ISSUED + timedelta(seconds=30)),
        "nonce": "Q8sLm2Vx7Tb4Nc1Rp9Kd3w",
        "replay_window_seconds": 30,
        "principal": {"type": "human", "verification": "delegated"},
        "intent": {
            "action": "request_refund",
            "merchant": "northwind-coffee.example",
            "original_mandate_id": "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN",
            "reason_code": "wrong_item",
            "scope": "full",
            "max_amount": Decimal("89.00"),
            "currency": "USD",
            **intent,
        },
        "protocol_context": {"protocol": "a2a", "version": "1.2"},
    }


def purchase_signed() -> dict[str, Any]:
    signed = refund_signed()
    signed["mandate_id"] = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"
    signed["intent"] = {
        "action": "purchase",
        "merchant": "northwind-coffee.example",
        "line_items": [
            {
                "sku": "ETH-250",
                "name": "Ethiopia 250 g",
                "quantity": 2,
                "unit_price": Decimal("24.50"),
            },
            {
                "sku": "COL-500",
                "name": "Colombia 500 g",
                "quantity": 1,
                "unit_price": Decimal("27.50"),
            },
            {
                "sku": "V60-100",
                "name": "V60 filters",
                "quantity": 1,
                "unit_price": Decimal("12.50"),
            },
        ],
        "quoted_total": Decimal("89.00"),
        "currency": "USD",
        "buyer": {"name": "Ada Lovelace", "email": "ada@example.com"},
        "payment": {"rail": "mock", "payment_method": "pm_card_visa"},
    }
    return signed


def _order_refund() -> dict[str, Any]:
    signed = refund_signed(
        original_order={"rail": "shopify", "id": "gid://shopify/Order/450789469"},
        scope=[{"sku": "ETH-250", "quantity": 2}, {"sku": "COL-500", "quantity": 1}],
    )
    del signed["intent"]["original_mandate_id"]
    return signed


def _credit() -> dict[str, Any]:
    signed = refund_signed()
    signed["intent"] = {
        "action": "credit_customer",
        "merchant": "northwind-coffee.example",
        "customer": "cus_Q8sLm2Vx7Tb4",
        "amount": Decimal("5.00"),
        "currency": "USD",
        "reason_code": "other",
    }
    return signed


def body(signed: dict[str, Any], *, key: nacl.signing.SigningKey = KEY) -> bytes:
    return canonical_json(sign_mandate(signed, key, KEY_ID))


def record(**overrides: Any) -> KeyRecord:
    fields = {
        "public_key": bytes(KEY.verify_key),
        "valid_from": ISSUED - timedelta(days=30),
        "valid_until": None,
        "revoked_at": None,
    }
    return KeyRecord(**{**fields, **overrides})


def lookup_for(key: KeyRecord | None) -> Callable[[str, str, str], KeyRecord | None]:
    def lookup(site_id: str, agent_id: str, key_id: str) -> KeyRecord | None:
        return key if (site_id, agent_id, key_id) == (SITE, AGENT, KEY_ID) else None

    return lookup


def verify(raw: bytes, *, key: KeyRecord | None = None, now: datetime = NOW, **kw: Any):
    return verify_mandate(raw, key_lookup=lookup_for(key or record()), now=now, **kw)


def refusal(raw: bytes, **kw: Any) -> MandateError:
    with pytest.raises(MandateError) as info:
        verify(raw, **kw)
    return info.value


def mutated(signed: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``signed`` with the dotted ``path`` set to ``value`` (``DELETE`` removes it)."""
    signed = copy.deepcopy(signed)
    *parents, last = path.split(".")
    target: Any = signed
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if value is DELETE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return signed


DELETE = object()


# --- happy paths -------------------------------------------------------------------------


def test_it_verifies_a_refund_mandate() -> None:
    raw = body(refund_signed())
    mandate = verify(raw)

    assert isinstance(mandate, VerifiedMandate)
    assert (mandate.mandate_id, mandate.site_id, mandate.agent_id, mandate.key_id) == (
        "mnd_01K6HBK7MK753DH3YBX4NVCYTT",
        SITE,
        AGENT,
        KEY_ID,
    )
    assert mandate.nonce == "Q8sLm2Vx7Tb4Nc1Rp9Kd3w"
    assert mandate.issued_at == ISSUED
    assert mandate.expires_at == ISSUED + timedelta(seconds=30)
    assert mandate.replay_window_seconds == 30
    assert mandate.action == "request_refund"
    assert mandate.intent == RefundIntent(
        merchant="northwind-coffee.example",
        original_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN",
        reason_code="wrong_item",
        scope="full",
        max_amount=Money(8900, "USD"),
        currency="USD",
    )
    assert mandate.raw == raw
    assert mandate.signed["intent"]["max_amount"] == Decimal(89)
    assert mandate.body_sha256 == document_sha256(parse_document(raw))


def test_it_verifies_a_purchase_mandate() -> None:
    mandate = verify(body(purchase_signed()))

    assert mandate.action == "purchase"
    assert mandate.intent == PurchaseIntent(
        merchant="northwind-coffee.example",
        line_items=(
            PurchaseLine("ETH-250", "Ethiopia 250 g", 2, Money(2450, "USD")),
            PurchaseLine("COL-500", "Colombia 500 g", 1, Money(2750, "USD")),
            PurchaseLine("V60-100", "V60 filters", 1, Money(1250, "USD")),
        ),
        quoted_total=Money(8900, "USD"),
        currency="USD",
        buyer_name="Ada Lovelace",
        buyer_email="ada@example.com",
        payment_rail="mock",
        payment_method="pm_card_visa",
    )


def test_it_accepts_a_mandate_without_the_optional_objects() -> None:
    signed = refund_signed()
    del signed["principal"], signed["protocol_context"]

    assert verify(body(signed)).action == "request_refund"


def test_it_accepts_a_scope_list() -> None:
    scope = [{"sku": "ETH-250", "quantity": 1}, {"sku": "V60-100", "quantity": 2}]

    assert verify(body(refund_signed(scope=scope))).intent.scope == scope


def test_it_reads_the_amount_text_exactly_whatever_its_spelling() -> None:
    for text in ("89", "89.0", "89.00", "8.9e1", "8900E-2"):
        raw = body(refund_signed()).replace(b'"max_amount":89', f'"max_amount":{text}'.encode())

        assert verify(raw).intent.max_amount == Money(8900, "USD"), text


def test_it_refuses_an_amount_text_with_sub_cent_digits_past_the_28th() -> None:
    """Thirty digits and more were rounded to 28 and read as $89.00."""
    text = "89." + "0" * 30 + "1"
    raw = body(refund_signed()).replace(b'"max_amount":89', f'"max_amount":{text}'.encode())

    error = refusal(raw)

    assert (error.code, error.field) == ("invalid_field", "signed.intent.max_amount")
    assert "at most 2 decimal place(s)" in error.message


def test_it_accepts_timestamps_with_offsets_and_fractions() -> None:
    signed = refund_signed()
    signed["issued_at"] = "2026-09-30T17:38:00+02:00"
    signed["expires_at"] = "2026-09-30T15:38:29.999999999Z"

    mandate = verify(body(signed))

    assert mandate.issued_at == ISSUED
    assert mandate.issued_at.tzinfo == UTC
    assert mandate.expires_at == ISSUED + timedelta(seconds=29, microseconds=999999)


def test_it_exports_the_constants_others_use() -> None:
    assert MANDATE_ID_RE.match("mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN")
    assert not MANDATE_ID_RE.match("mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN\n")
    assert "wrong_item" in REASON_CODES
    assert set(REFUND_FORBIDDEN_FIELDS) == {"sku", "line_items", "quoted_total", "buyer"}
    assert ERROR_CODES["too_large"] == 413
    assert ERROR_CODES["bad_signature"] == 401
    error = MandateError("invalid_field", "nope", field="signed.nonce")
    assert isinstance(error, SillError)
    assert error.as_dict() == {
        "error": {"code": "invalid_field", "message": "nope", "field": "signed.nonce"}
    }
    assert error.status == 422


# --- canonical numbers -------------------------------------------------------------------


@pytest.mark.parametrize(
    "number",
    [
        "89.00",
        "89.5",
        "0.1",
        "1e2",
        "1E+2",
        "100",
        "9007199254740991",
        "-0.0",
        "12.340",
        "1e21",
        "5e-7",
        "123456789.123",
        "1234567890123456.7",
    ],
)
def test_it_signs_numbers_as_a_plain_json_parser_reads_them(number: str) -> None:
    text = f'{{"b": [{number}, {{"x": {number}}}], "a": {number}, "é": "ü"}}'

    ours = signing_input(json.loads(text, parse_float=Decimal))

    assert ours == DOMAIN_TAG + rfc8785.dumps(json.loads(text))


JSON_NUMBER = r"-?(0|[1-9][0-9]{0,19})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?"


@settings(max_examples=300)
@given(st.from_regex(rf"\A{JSON_NUMBER}\Z"))
def test_it_signs_any_json_number_as_a_plain_json_parser_reads_it(number: str) -> None:
    text = f'{{"n": {number}}}'
    try:
        expected: bytes | None = DOMAIN_TAG + rfc8785.dumps(json.loads(text))
    except rfc8785.CanonicalizationError:
        expected = None
    try:
        ours: bytes | None = signing_input(json.loads(text, parse_float=Decimal))
    except rfc8785.CanonicalizationError:
        ours = None

    assert ours == expected


def test_it_refuses_an_amount_another_amount_could_share_a_signature_with() -> None:
    # Both spellings are the same double, so one signature covers both texts.
    raw = body(refund_signed(max_amount=Decimal("1234567890123456.8")))
    assert verify(raw).intent.max_amount == Money(123456789012345680, "USD")

    forged = raw.replace(b"1234567890123456.8", b"1234567890123456.7")
    assert forged != raw

    error = refusal(forged)
    assert (error.code, error.field) == ("invalid_field", "signed.intent.max_amount")


# --- money ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "currency", "expected"),
    [
        ("89.00", "USD", Money(8900, "USD")),
        ("1.234", "KWD", Money(1234, "KWD")),
        ("1200", "JPY", Money(1200, "JPY")),
        ("0.01", "EUR", Money(1, "EUR")),
    ],
)
def test_it_converts_major_units_exactly(amount: str, currency: str, expected: Money) -> None:
    raw = body(refund_signed(max_amount=Decimal(amount), currency=currency))

    assert verify(raw).intent.max_amount == expected


@pytest.mark.parametrize(
    ("amount", "currency"),
    [("1.001", "USD"), ("1.5", "JPY"), ("1.2345", "KWD"), ("0", "USD"), ("-5", "USD")],
)
def test_it_refuses_amounts_the_currency_cannot_hold(amount: str, currency: str) -> None:
    error = refusal(body(refund_signed(max_amount=Decimal(amount), currency=currency)))

    assert (error.code, error.status, error.field) == (
        "invalid_field",
        422,
        "signed.intent.max_amount",
    )


@pytest.mark.parametrize(
    ("value", "named"),
    [("89.00", "a string"), (True, "true"), (None, "null"), ({"amount": 89}, "an object"),
     ([89], "an array")],
)  # fmt: skip
def test_an_amount_that_is_not_a_number_is_refused_naming_what_it_is(value: Any, named: str):
    """Every amount that was not a number was refused as "…, not a string": an agent that
    sent ``true``, ``null`` or an object was told it had sent a string."""
    error = refusal(body(refund_signed(max_amount=value)))

    assert (error.code, error.field) == ("invalid_field", "signed.intent.max_amount")
    assert str(error).endswith(f"must be a JSON number in major units (89.00), not {named}.")


# --- malformed and too large ---------------------------------------------------------------

GOOD = body(refund_signed()).decode()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"\xff\xfe{}", None),
        (b"not json", None),
        ("\ufeff{}".encode(), None),
        ('{"signed":{}, "envelope":{}}'.encode("utf-16"), None),
        (b"[]", None),
        (b'"signed"', None),
        (b"{}", "signed"),
        (b'{"signed": "x", "envelope": {}}', "signed"),
        (b'{"signed": {}, "envelope": []}', "envelope"),
        (GOOD[:-1].encode() + b',"extra":1}', "extra"),
        (GOOD.replace('"signature":', '"sig":').encode(), "envelope.signature"),
        (re.sub(r'"signature":"[^"]+"', '"signature":86', GOOD).encode(), "envelope.signature"),
        (GOOD.replace('"algorithm":"ed25519",', "").encode(), "envelope.algorithm"),
        (GOOD.replace(f'"site_id":"{SITE}"', '"site_id":7').encode(), "signed.site_id"),
        (GOOD.replace(f'"agent_id":"{AGENT}",', "").encode(), "signed.agent_id"),
        (
            GOOD.replace(
                '"mandate_id":"mnd_01K6HBK7MK753DH3YBX4NVCYTT"', '"mandate_id":null'
            ).encode(),
            "signed.mandate_id",
        ),
        (GOOD.replace('"max_amount":89', '"max_amount":NaN').encode(), None),
        (GOOD.replace('"max_amount":89', '"max_amount":Infinity').encode(), None),
        (GOOD.replace('"max_amount":89', '"max_amount":1e400').encode(), None),
        (GOOD.replace('"max_amount":89', '"max_amount":9007199254740993').encode(), None),
        (GOOD.replace('"scope":"full"', '"scope":"\\ud800"').encode(), None),
        (GOOD.replace('"scope":"full"', '"scope":"full","scope":"full"').encode(), None),
        (GOOD.replace('"signed":{', '"signed":{"nonce":"x",').encode(), None),
        (b"[" * 30000 + b"]" * 30000, None),
    ],
)
def test_it_refuses_malformed_bodies(raw: bytes, field: str | None) -> None:
    error = refusal(raw[:MAX_BODY_BYTES])

    assert (error.code, error.status, error.field) == ("malformed", 400, field)


def test_it_refuses_a_body_over_64_kib_before_reading_it() -> None:
    error = refusal(b"\xff" * (MAX_BODY_BYTES + 1))

    assert (error.code, error.status) == ("too_large", 413)


def test_it_accepts_a_body_of_exactly_64_kib() -> None:
    raw = body(refund_signed())
    padded = raw[:-1] + b" " * (MAX_BODY_BYTES - len(raw)) + b"}"

    assert len(padded) == MAX_BODY_BYTES
    assert verify(padded).body_sha256 == verify(raw).body_sha256


def test_it_peeks_at_the_identity_before_any_time_check() -> None:
    doc = parse_document(body(refund_signed()))

    assert peek_identity(doc) == ("mnd_01K6HBK7MK753DH3YBX4NVCYTT", SITE, AGENT, KEY_ID)
    assert doc["signed"]["intent"]["max_amount"] == Decimal(89)


# --- algorithm, key and signature ------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["Ed25519", "hmac-sha256", "ES256"])
def test_it_refuses_other_algorithms(algorithm: str) -> None:
    raw = GOOD.replace('"algorithm":"ed25519"', f'"algorithm":"{algorithm}"').encode()
    error = refusal(raw)

    assert (error.code, error.status, error.field) == (
        "unsupported_algorithm",
        400,
        "envelope.algorithm",
    )


def test_it_refuses_an_unknown_envelope_field() -> None:
    error = refusal(GOOD.replace('"envelope":{', '"envelope":{"kid":"x",').encode())

    assert (error.code, error.field) == ("unknown_field", "envelope.kid")


def test_it_treats_empty_envelope_strings_as_their_own_failures() -> None:
    assert refusal(GOOD.replace('"key_id":"acme-2026-10"', '"key_id":""').encode()).code == (
        "unknown_key"
    )
    assert refusal(GOOD.replace('"algorithm":"ed25519"', '"algorithm":""').encode()).code == (
        "unsupported_algorithm"
    )


def test_it_looks_the_key_up_by_site_agent_and_key_id() -> None:
    calls = []

    def lookup(site_id: str, agent_id: str, key_id: str) -> KeyRecord | None:
        calls.append((site_id, agent_id, key_id))
        return None

    with pytest.raises(MandateError) as info:
        verify_mandate(body(refund_signed()), key_lookup=lookup, now=NOW)

    assert calls == [(SITE, AGENT, KEY_ID)]
    assert (info.value.code, info.value.status, info.value.field) == (
        "unknown_key",
        401,
        "envelope.key_id",
    )


@pytest.mark.parametrize(
    ("key", "accepted"),
    [
        (record(valid_from=ISSUED), True),
        (record(valid_from=ISSUED + timedelta(milliseconds=1)), False),
        (record(valid_until=ISSUED + timedelta(milliseconds=1)), True),
        (record(valid_until=ISSUED), False),
        (record(revoked_at=NOW + timedelta(seconds=1)), True),
        (record(revoked_at=NOW), False),
        (record(revoked_at=ISSUED - timedelta(days=1)), False),
    ],
)
def test_it_uses_only_keys_valid_at_issued_at_and_not_revoked(
    key: KeyRecord, accepted: bool
) -> None:
    raw = body(refund_signed())
    if accepted:
        assert verify(raw, key=key).mandate_id
    else:
        assert refusal(raw, key=key).code == "unknown_key"


def test_it_refuses_a_revoked_key_even_without_time_checks() -> None:
    raw = body(refund_signed())
    key = record(revoked_at=ISSUED + timedelta(seconds=5))

    assert refusal(raw, key=key, check_time=False).code == "unknown_key"


def _with_signature(signature: str) -> bytes:
    return re.sub(r'"signature":"[^"]+"', f'"signature":"{signature}"', GOOD).encode()


def _signature_of(raw: bytes) -> str:
    return json.loads(raw)["envelope"]["signature"]


@pytest.mark.parametrize(
    "signature",
    [
        "",
        "A" * 85,
        "A" * 87,
        "A" * 86 + "==",
        _signature_of(GOOD.encode()) + "==",
        _signature_of(GOOD.encode())[:-1],
        _signature_of(GOOD.encode()).replace("_", "/").replace("-", "+"),
        " " + _signature_of(GOOD.encode())[1:],
        base64.b64encode(bytes(64)).decode().rstrip("="),
    ],
)
def test_it_insists_on_86_base64url_characters(signature: str) -> None:
    error = refusal(_with_signature(signature))

    assert (error.code, error.status, error.field) == (
        "bad_signature",
        401,
        "envelope.signature",
    )


def test_it_refuses_a_non_canonical_spelling_of_the_right_signature() -> None:
    signature = _signature_of(GOOD.encode())
    last = B64URL.index(signature[-1])
    assert last % 16 == 0  # the 4 spare bits are zero in the canonical form
    spelled = signature[:-1] + B64URL[last + 1]

    assert base64.urlsafe_b64decode(spelled + "==") == base64.urlsafe_b64decode(signature + "==")
    assert refusal(_with_signature(spelled)).code == "bad_signature"


def test_it_refuses_a_signature_of_the_right_length_by_another_key() -> None:
    error = refusal(body(refund_signed(), key=OTHER_KEY))

    assert error.code == "bad_signature"


def test_it_refuses_a_signature_over_another_domain_tag() -> None:
    signed = refund_signed()
    message = b"sill-mandate-v0:" + canonical_json(signed)
    signature = base64.urlsafe_b64encode(KEY.sign(message).signature).rstrip(b"=").decode()
    doc = {
        "signed": signed,
        "envelope": {"algorithm": "ed25519", "key_id": KEY_ID, "signature": signature},
    }

    assert len(signature) == 86
    assert refusal(canonical_json(doc)).code == "bad_signature"


def test_it_refuses_a_body_changed_after_signing() -> None:
    raw = body(refund_signed()).replace(b'"max_amount":89', b'"max_amount":890')

    assert refusal(raw).code == "bad_signature"


def test_it_checks_the_signature_before_the_schema() -> None:
    signed = refund_signed(sku="ETH-250")
    signed["issued_at"] = "yesterday"

    assert refusal(body(signed, key=OTHER_KEY)).code == "bad_signature"
    assert refusal(body(signed)).code == "forbidden_field"


def test_it_refuses_an_unparsable_issued_at_after_the_signature_holds() -> None:
    signed = refund_signed()
    signed["issued_at"] = "2026-09-30 15:38:00"

    error = refusal(body(signed))

    assert (error.code, error.field) == ("invalid_field", "signed.issued_at")


# --- schema ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sku", "line_items", "quoted_total", "buyer"])
def test_it_forbids_order_fields_on_a_refund(name: str) -> None:
    error = refusal(body(refund_signed(**{name: "x"}, note="also unknown")))

    assert (error.code, error.status, error.field) == (
        "forbidden_field",
        422,
        f"signed.intent.{name}",
    )


REFUND = refund_signed()
PURCHASE = purchase_signed()
ORDER_REFUND = _order_refund()
CREDIT = _credit()


@pytest.mark.parametrize(
    ("signed", "field"),
    [
        (mutated(REFUND, "extra", 1), "signed.extra"),
        (mutated(REFUND, "intent.note", "hi"), "signed.intent.note"),
        (mutated(REFUND, "intent.payment", {}), "signed.intent.payment"),
        (mutated(REFUND, "principal.level", "x"), "signed.principal.level"),
        (mutated(REFUND, "protocol_context.trace_id", "x"), "signed.protocol_context.trace_id"),
        (
            mutated(REFUND, "intent.scope", [{"sku": "A", "quantity": 1, "price": 1}]),
            "signed.intent.scope.0.price",
        ),
        (
            mutated(PURCHASE, "intent.original_mandate_id", "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"),
            "signed.intent.original_mandate_id",
        ),
        (mutated(PURCHASE, "intent.max_amount", 1), "signed.intent.max_amount"),
        (mutated(PURCHASE, "intent.reason_code", "other"), "signed.intent.reason_code"),
        (mutated(PURCHASE, "intent.scope", "full"), "signed.intent.scope"),
        (
            mutated(PURCHASE, "intent.line_items.1.discount", 1),
            "signed.intent.line_items.1.discount",
        ),
        (mutated(PURCHASE, "intent.buyer.phone", "555"), "signed.intent.buyer.phone"),
        (mutated(PURCHASE, "intent.payment.token", "t"), "signed.intent.payment.token"),
    ],
)
def test_it_refuses_unknown_fields(signed: dict[str, Any], field: str) -> None:
    error = refusal(body(signed))

    assert (error.code, error.status, error.field) == ("unknown_field", 422, field)


LATER = stamp(ISSUED + timedelta(seconds=30))


@pytest.mark.parametrize(
    ("signed", "field"),
    [
        (mutated(REFUND, "mandate_id", "mnd_123"), "signed.mandate_id"),
        (mutated(REFUND, "mandate_id", "mnd_01k6hbk7mk753dh3yb4nvcytt1"), "signed.mandate_id"),
        (mutated(REFUND, "mandate_id", "mnd_01K6HBK7MK753DH3YBX4NVCYTU"), "signed.mandate_id"),
        (mutated(REFUND, "nonce", "short"), "signed.nonce"),
        (mutated(REFUND, "nonce", "Q8sLm2Vx7Tb4Nc1Rp9Kd3w!"), "signed.nonce"),
        (mutated(REFUND, "nonce", "x" * 129), "signed.nonce"),
        (mutated(REFUND, "nonce", DELETE), "signed.nonce"),
        (mutated(REFUND, "issued_at", "2026-09-30T15:38:00"), "signed.issued_at"),
        # A well-formed instant whose UTC date is outside the calendar (years 0 and 10000).
        (mutated(REFUND, "issued_at", "0001-01-01T00:00:00+01:00"), "signed.issued_at"),
        (mutated(REFUND, "issued_at", "9999-12-31T23:59:59-01:00"), "signed.issued_at"),
        (mutated(REFUND, "expires_at", "0001-01-01T00:00:00+01:00"), "signed.expires_at"),
        (mutated(REFUND, "expires_at", "9999-12-31T23:59:59-01:00"), "signed.expires_at"),
        (mutated(REFUND, "expires_at", 1790000000), "signed.expires_at"),
        (mutated(REFUND, "expires_at", "2026-09-30T15:38:60Z"), "signed.expires_at"),
        (mutated(REFUND, "expires_at", stamp(ISSUED)), "signed.expires_at"),
        (mutated(REFUND, "replay_window_seconds", "30"), "signed.replay_window_seconds"),
        (mutated(REFUND, "replay_window_seconds", True), "signed.replay_window_seconds"),
        (mutated(REFUND, "replay_window_seconds", 0), "signed.replay_window_seconds"),
        (mutated(REFUND, "principal", "human"), "signed.principal"),
        (mutated(REFUND, "principal.verification", DELETE), "signed.principal.verification"),
        (
            mutated(REFUND, "protocol_context.version", Decimal("1.2")),
            "signed.protocol_context.version",
        ),
        (mutated(REFUND, "intent", []), "signed.intent"),
        (mutated(REFUND, "intent.action", "cancel"), "signed.intent.action"),
        (mutated(REFUND, "intent.action", DELETE), "signed.intent.action"),
        (mutated(REFUND, "intent.merchant", ""), "signed.intent.merchant"),
        (
            mutated(REFUND, "intent.original_mandate_id", "order-1"),
            "signed.intent.original_mandate_id",
        ),
        # Ids end at the end of the text: "$" would also let a final newline through.
        (
            mutated(ORDER_REFUND, "intent.original_order.id", "450789469\n"),
            "signed.intent.original_order.id",
        ),
        (
            mutated(ORDER_REFUND, "intent.original_order.id", "gid://shopify/Order/450789469\n"),
            "signed.intent.original_order.id",
        ),
        (
            mutated(ORDER_REFUND, "intent.original_order", {"rail": "woocommerce", "id": "1234\n"}),
            "signed.intent.original_order.id",
        ),
        (mutated(CREDIT, "intent.customer", "cus_NffrFeUfNV2Hib\n"), "signed.intent.customer"),
        (mutated(REFUND, "intent.reason_code", "changed_mind"), "signed.intent.reason_code"),
        (mutated(REFUND, "intent.scope", "partial"), "signed.intent.scope"),
        (mutated(REFUND, "intent.scope", []), "signed.intent.scope"),
        (mutated(REFUND, "intent.scope", ["ETH-250"]), "signed.intent.scope.0"),
        (
            mutated(REFUND, "intent.scope", [{"sku": "", "quantity": 1}]),
            "signed.intent.scope.0.sku",
        ),
        (
            mutated(REFUND, "intent.scope", [{"sku": "A", "quantity": 0}]),
            "signed.intent.scope.0.quantity",
        ),
        (mutated(REFUND, "intent.scope", [{"sku": "A"}]), "signed.intent.scope.0.quantity"),
        (mutated(REFUND, "intent.max_amount", "89.00"), "signed.intent.max_amount"),
        (mutated(REFUND, "intent.max_amount", True), "signed.intent.max_amount"),
        (mutated(REFUND, "intent.max_amount", DELETE), "signed.intent.max_amount"),
        (mutated(REFUND, "intent.currency", "usd"), "signed.intent.currency"),
        (mutated(REFUND, "intent.currency", "XYZ"), "signed.intent.currency"),
        (mutated(REFUND, "intent.currency", 840), "signed.intent.currency"),
        (mutated(PURCHASE, "intent.quoted_total", Decimal("89.01")), "signed.intent.quoted_total"),
        (mutated(PURCHASE, "intent.line_items", []), "signed.intent.line_items"),
        (
            mutated(PURCHASE, "intent.line_items", PURCHASE["intent"]["line_items"] * 34),
            "signed.intent.line_items",
        ),
        (
            mutated(PURCHASE, "intent.line_items.0.quantity", 0),
            "signed.intent.line_items.0.quantity",
        ),
        (
            mutated(PURCHASE, "intent.line_items.2.unit_price", "12.50"),
            "signed.intent.line_items.2.unit_price",
        ),
        (
            mutated(PURCHASE, "intent.line_items.2.unit_price", Decimal("12.505")),
            "signed.intent.line_items.2.unit_price",
        ),
        (mutated(PURCHASE, "intent.line_items.1.name", DELETE), "signed.intent.line_items.1.name"),
        (mutated(PURCHASE, "intent.buyer", DELETE), "signed.intent.buyer"),
        (mutated(PURCHASE, "intent.buyer.email", "ada.example.com"), "signed.intent.buyer.email"),
        (mutated(PURCHASE, "intent.buyer.email", "a@b@example.com"), "signed.intent.buyer.email"),
        (mutated(PURCHASE, "intent.buyer.email", "ada@"), "signed.intent.buyer.email"),
        (mutated(PURCHASE, "intent.payment.rail", "bitcoin"), "signed.intent.payment.rail"),
        (
            mutated(PURCHASE, "intent.payment.payment_method", ""),
            "signed.intent.payment.payment_method",
        ),
    ],
)
def test_it_refuses_invalid_fields(signed: dict[str, Any], field: str) -> None:
    error = refusal(body(signed))

    assert (error.code, error.status, error.field) == ("invalid_field", 422, field)
    assert error.message


@pytest.mark.parametrize(
    ("signed", "text", "field"),
    [
        (REFUND, '"replay_window_seconds":30', "signed.replay_window_seconds"),
        (PURCHASE, '"quantity":2', "signed.intent.line_items.0.quantity"),
    ],
)
def test_it_refuses_a_float_where_an_integer_belongs(
    signed: dict[str, Any], text: str, field: str
) -> None:
    raw = body(signed)
    # JCS writes 30.0 as 30, so the signature still holds: the schema must refuse it.
    error = refusal(raw.replace(text.encode(), text.encode() + b".0"))

    assert (error.code, error.field) == ("invalid_field", field)


def test_it_accepts_a_hundred_line_items() -> None:
    signed = mutated(PURCHASE, "intent.line_items", PURCHASE["intent"]["line_items"] * 33)
    signed["intent"]["line_items"].append(signed["intent"]["line_items"][0])
    signed["intent"]["quoted_total"] = Decimal("89.00") * 33 + Decimal("49.00")

    assert len(verify(body(signed)).intent.line_items) == 100


# --- time --------------------------------------------------------------------------------------


def _timed(issued: datetime, expires: datetime, window: int = 30) -> bytes:
    signed = refund_signed()
    signed.update(issued_at=stamp(issued), expires_at=stamp(expires), replay_window_seconds=window)
    return body(signed)


def test_it_allows_thirty_seconds_of_clock_skew() -> None:
    assert verify(_timed(NOW + timedelta(seconds=30), NOW + timedelta(seconds=40))).mandate_id

    error = refusal(_timed(NOW + timedelta(seconds=31), NOW + timedelta(seconds=40)))
    assert (error.code, error.status, error.field) == ("not_yet_valid", 400, "signed.issued_at")


def test_it_accepts_a_mandate_until_its_expiry_instant() -> None:
    raw = _timed(ISSUED, ISSUED + timedelta(seconds=30))

    assert verify(raw, now=ISSUED + timedelta(seconds=30)).mandate_id
    error = refusal(raw, now=ISSUED + timedelta(seconds=30, milliseconds=1))
    assert (error.code, error.status, error.field) == ("expired", 400, "signed.expires_at")


def test_it_skips_the_clock_when_asked() -> None:
    raw = _timed(ISSUED, ISSUED + timedelta(seconds=30))

    assert verify(raw, now=ISSUED + timedelta(days=400), check_time=False).mandate_id
    assert verify(raw, now=ISSUED - timedelta(days=1), check_time=False).mandate_id


@pytest.mark.parametrize(
    ("seconds", "window", "code"),
    [
        (30, 30, None),
        (300, 300, None),
        (1, 300, None),
        (31, 30, "window_too_long"),
        (300, 301, "window_too_long"),
        (30, 10_000, "window_too_long"),
        (0, 30, "invalid_field"),
        (-5, 30, "invalid_field"),
    ],
)
def test_it_bounds_the_replay_window(seconds: int, window: int, code: str | None) -> None:
    raw = _timed(ISSUED, ISSUED + timedelta(seconds=seconds), window)
    if code is None:
        assert verify(raw, now=ISSUED).replay_window_seconds == window
    else:
        error = refusal(raw, now=ISSUED)
        assert (error.code, error.status) == (code, ERROR_CODES[code])
        # a static property of the mandate: refused even when the clock is not checked
        assert refusal(raw, now=ISSUED, check_time=False).code == code


def test_it_needs_an_aware_now() -> None:
    with pytest.raises(ValueError, match="aware"):
        verify(body(refund_signed()), now=NOW.replace(tzinfo=None))


# --- body digest -----------------------------------------------------------------------------


def test_it_digests_the_document_not_its_whitespace_or_key_order() -> None:
    raw = body(refund_signed())
    doc = json.loads(raw)
    pretty = json.dumps(dict(reversed(list(doc.items()))), indent=4).encode()
    spelled = raw.replace(b'"max_amount":89', b'"max_amount":89.00')

    assert pretty != raw
    assert verify(pretty).body_sha256 == verify(raw).body_sha256
    assert verify(spelled).body_sha256 == verify(raw).body_sha256


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("nonce", "Q8sLm2Vx7Tb4Nc1Rp9Kd3x"),
        ("intent.max_amount", Decimal("88.99")),
        ("intent.reason_code", "defective"),
        ("expires_at", stamp(ISSUED + timedelta(seconds=29))),
    ],
)
def test_it_digests_every_signed_byte(path: str, value: Any) -> None:
    assert (
        verify(body(mutated(REFUND, path, value))).body_sha256 != verify(body(REFUND)).body_sha256
    )


# --- properties --------------------------------------------------------------------------------

CURRENCIES = {"USD": 2, "EUR": 2, "JPY": 0, "KWD": 3, "GBP": 2}
TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=20,
).filter(str.strip)
SKU = st.from_regex(r"\A[A-Z0-9-]{1,12}\Z")


@st.composite
def refund_intents(draw: st.DrawFn) -> dict[str, Any]:
    currency = draw(st.sampled_from(sorted(CURRENCIES)))
    minor = draw(st.integers(1, 10**12))
    scope = draw(
        st.one_of(
            st.just("full"),
            st.lists(
                st.fixed_dictionaries({"sku": SKU, "quantity": st.integers(1, 10**6)}),
                min_size=1,
                max_size=5,
            ),
        )
    )
    return {
        "action": "request_refund",
        "merchant": draw(TEXT),
        "original_mandate_id": "mnd_" + draw(st.from_regex(r"\A[0-9A-HJKMNP-TV-Z]{26}\Z")),
        "reason_code": draw(st.sampled_from(REASON_CODES)),
        "scope": scope,
        "max_amount": Decimal(minor).scaleb(-CURRENCIES[currency]),
        "currency": currency,
    }


@st.composite
def purchase_intents(draw: st.DrawFn) -> dict[str, Any]:
    currency = draw(st.sampled_from(sorted(CURRENCIES)))
    exp = CURRENCIES[currency]
    lines = draw(
        st.lists(
            st.tuples(SKU, TEXT, st.integers(1, 1000), st.integers(1, 10**7)),
            min_size=1,
            max_size=8,
        )
    )
    total = sum(quantity * minor for _, _, quantity, minor in lines)
    return {
        "action": "purchase",
        "merchant": draw(TEXT),
        "line_items": [
            {"sku": sku, "name": name, "quantity": q, "unit_price": Decimal(m).scaleb(-exp)}
            for sku, name, q, m in lines
        ],
        "quoted_total": Decimal(total).scaleb(-exp),
        "currency": currency,
        "buyer": {"name": draw(TEXT), "email": "buyer@example.com"},
        "payment": {
            "rail": draw(st.sampled_from(["mock", "stripe"])),
            "payment_method": "pm_x",
        },
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(refund_intents(), purchase_intents()), st.booleans())
def test_it_round_trips_any_valid_intent(intent: dict[str, Any], pretty: bool) -> None:
    signed = refund_signed()
    signed["intent"] = intent
    doc = sign_mandate(signed, KEY, KEY_ID)
    raw = json.dumps(json.loads(canonical_json(doc)), indent=2 if pretty else None)

    mandate = verify(raw.encode())

    assert mandate.action == intent["action"]
    if isinstance(mandate.intent, RefundIntent):
        assert mandate.intent.max_amount.amount == intent["max_amount"]
        assert mandate.intent.scope == intent["scope"]
        assert mandate.intent.merchant == intent["merchant"]
    else:
        assert mandate.intent.quoted_total.amount == intent["quoted_total"]
        assert [line.unit_price.amount for line in mandate.intent.line_items] == [
            item["unit_price"] for item in intent["line_items"]
        ]
    assert mandate.body_sha256 == document_sha256(doc)


SIGNED_RAW = body(refund_signed())
SIGNATURE = _signature_of(SIGNED_RAW)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 85), st.sampled_from(B64URL))
def test_it_refuses_any_one_character_change_to_the_signature(index: int, char: str) -> None:
    if SIGNATURE[index] == char:
        char = B64URL[(B64URL.index(char) + 1) % 64]
    flipped = SIGNATURE[:index] + char + SIGNATURE[index + 1 :]

    raw = SIGNED_RAW.replace(SIGNATURE.encode(), flipped.encode())

    assert refusal(raw).code == "bad_signature"


# --- published vectors ---------------------------------------------------------------------------

VECTORS_TEXT = (HERE / "vectors.json").read_text()
VECTORS = json.loads(VECTORS_TEXT, parse_float=Decimal)["vectors"]
PLAIN_VECTORS = {v["name"]: v for v in json.loads(VECTORS_TEXT)["vectors"]}


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_it_matches_the_published_vectors(vector: dict[str, Any]) -> None:
    key = nacl.signing.SigningKey(bytes.fromhex(vector["seed_hex"]))
    public = base64.urlsafe_b64encode(bytes(key.verify_key)).rstrip(b"=").decode()
    assert public == vector["public_key"]

    expected = vector["signing_input"].encode()
    assert signing_input(vector["signed"]) == expected
    # what an agent computes with a plain JSON parser
    assert DOMAIN_TAG + rfc8785.dumps(PLAIN_VECTORS[vector["name"]]["signed"]) == expected

    doc = sign_mandate(vector["signed"], key, vector["key_id"])
    assert doc["envelope"]["signature"] == vector["signature"]

    keys = {vector["key_id"]: record(public_key=bytes(key.verify_key))}
    mandate = verify_mandate(
        canonical_json(doc),
        key_lookup=lambda site, agent, key_id: keys.get(key_id),
        now=datetime.fromisoformat(vector["verify_at"]),
    )
    assert mandate.body_sha256 == vector["body_sha256"]


def test_it_publishes_the_same_vectors_in_the_docs() -> None:
    doc = (HERE.parents[1] / "docs" / "mandate-test-vectors.md").read_text()
    for vector in VECTORS:
        assert vector["signature"] in doc
        assert vector["public_key"] in doc
        assert vector["seed_hex"] in doc
    assert VECTORS[0]["signing_input"] in doc


def test_it_verifies_what_the_documented_snippet_signs() -> None:
    doc = (HERE.parents[1] / "docs" / "mandate-test-vectors.md").read_text()
    (snippet,) = re.findall(r"```python\n(.*?)```", doc, flags=re.DOTALL)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet, "mandate-test-vectors.md", "exec"), {})

    key = record(valid_from=datetime(2000, 1, 1, tzinfo=UTC))
    mandate = verify(out.getvalue().encode(), key=key, now=datetime.now(UTC))

    assert mandate.intent.max_amount == Money(8900, "USD")
    assert MANDATE_ID_RE.match(mandate.mandate_id)


@pytest.mark.parametrize(
    "signed",
    [
        {"b": 1, "a": "x"},
        {"emoji": "\U0001f600", "é": [1, {"z": None, "a": True}], "n": -0},
        {"deep": {"x": {"y": {"z": "a NUL-free 'quoted' \\ line"}}}},
    ],
)
def test_the_signed_bytes_cut_from_the_document_are_its_own_canonical_bytes(signed):
    from refunds.agent import mandates

    envelope = {"algorithm": "ed25519", "key_id": "k", "signature": "s"}
    signed = {"mandate_id": "mnd_1", "site_id": "S", "agent_id": "a", **signed}
    loaded = mandates.load_mandate(json.dumps({"signed": signed, "envelope": envelope}).encode())
    assert loaded.signed_bytes == mandates.canonical_json(loaded.doc["signed"])
    assert loaded.sha256 == mandates.document_sha256(loaded.doc)


@pytest.mark.parametrize(
    "key_id", ["k", 'quote " and \\ backslash', "tab\tnew\nline\x01", "é \u2028 \ufffd \U0001f600"]
)
def test_the_document_bytes_put_together_are_its_canonical_bytes(key_id: str) -> None:
    from refunds.agent import mandates

    envelope = {"signature": "s", "key_id": key_id, "algorithm": "ed25519"}
    signed = {"mandate_id": "mnd_1", "site_id": "S", "agent_id": "a", "n": Decimal("89.00")}
    raw = json.dumps({"envelope": envelope, "signed": mandates.canonicalisable(signed)}).encode()
    loaded = mandates.load_mandate(raw)
    assert loaded.canonical == rfc8785.dumps(mandates.canonicalisable(loaded.doc))
    assert loaded.signed_bytes == rfc8785.dumps(mandates.canonicalisable(loaded.doc["signed"]))
    assert loaded.identity == ("mnd_1", "S", "a", key_id)


# --- fast paths: the same answer as the detailed checks, for every input ------------------


def _bare_refund() -> dict[str, Any]:
    signed = refund_signed(max_amount=Decimal("1234567890123456.8"))
    del signed["principal"], signed["protocol_context"]
    return signed


SCHEMA_BASES = [refund_signed(), _order_refund(), _bare_refund(), _credit(), purchase_signed()]
# Values each field is set to in turn: wrong types, edge lengths, and values right for some
# other field, so that a variant can get far into the checks.
ODD_VALUES: list[Any] = [
    DELETE,
    None,
    True,
    False,
    0,
    1,
    -1,
    30,
    300,
    301,
    10**15,
    Decimal("0"),
    Decimal("-1"),
    Decimal("20.50"),
    Decimal("20.5000"),
    Decimal("1.001"),
    Decimal("1E+2"),
    Decimal("30.0"),
    Decimal("1234567890123456.7"),
    "",
    " ",
    "\u2003",
    "x",
    "x" * 255,
    "x" * 256,
    "full",
    "partial",
    "USD",
    "usd",
    "JPY",
    "XYZ",
    "request_refund",
    "purchase",
    "wrong_item",
    "shopify",
    "woocommerce",
    "450789469",
    "0450789469",
    "gid://shopify/Order/450789469",
    "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN",
    "mnd_123",
    "Q8sLm2Vx7Tb4Nc1Rp9Kd3w",
    "cus_Q8sLm2Vx7Tb4",
    stamp(ISSUED - timedelta(seconds=1)),
    stamp(ISSUED),
    stamp(ISSUED + timedelta(seconds=29, microseconds=999999)),
    stamp(ISSUED + timedelta(seconds=30)),
    stamp(ISSUED + timedelta(seconds=31)),
    "2026-09-30T15:38:30.000000001+00:00",
    "2026-09-30T15:38:30",
    [],
    ["ETH-250"],
    [{}],
    [{"sku": "ETH-250", "quantity": 1}],
    [{"sku": "ETH-250", "quantity": 1, "price": 1}],
    [{"sku": "ETH-250", "quantity": 1}] * 101,
    {},
    {"x": "y"},
    {"type": "human", "verification": "delegated"},
    {"protocol": "a2a", "version": "1.2"},
    {"rail": "shopify", "id": "450789469"},
    {"rail": "shopify", "id": "450789469", "x": 1},
    {"rail": "mock", "id": "450789469"},
]


INTENT_EXTRAS = (*REFUND_FORBIDDEN_FIELDS, "original_order", "original_mandate_id")


def _paths(value: Any, prefix: str = "") -> list[str]:
    """Every dotted path into ``value``, and a new key under each object."""
    found: list[str] = []
    if isinstance(value, dict):
        # Under an intent, also the fields a refund must not carry, and both ways of naming
        # the original order (a refund takes exactly one).
        added = INTENT_EXTRAS if "action" in value else ()
        names = [*value, "extra", *(name for name in added if name not in value)]
        for name in names:
            found.append(f"{prefix}{name}")
            if name in value:
                found += _paths(value[name], f"{prefix}{name}.")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.append(f"{prefix}{i}")
            found += _paths(item, f"{prefix}{i}.")
    return found


def _outcome(check: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return check(*args, **kwargs)
    except MandateError as exc:
        return (exc.code, exc.message, exc.field, exc.status)


def _variants(base: dict[str, Any]) -> list[dict[str, Any]]:
    """``base``, and ``base`` with each of its paths set to each odd value (or removed)."""
    variants = [base]
    for path in _paths(base):
        *parents, last = path.split(".")
        parent: Any = base
        for part in parents:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        removable = isinstance(parent, dict) and last in parent
        variants += [
            mutated(base, path, value) for value in ODD_VALUES if value is not DELETE or removable
        ]
    return variants


@pytest.mark.parametrize("base", SCHEMA_BASES, ids=lambda s: s["intent"]["action"])
def test_the_schema_fast_path_answers_as_the_detailed_checks(base: dict[str, Any]) -> None:
    from refunds.agent import mandates

    envelope = {"algorithm": "ed25519", "key_id": KEY_ID, "signature": "s"}
    fast = 0
    for signed in _variants(base):
        try:  # the schema only ever sees what the shape check lets through
            peek_identity({"signed": signed, "envelope": envelope})
        except MandateError:
            continue
        issued_at = mandates.parse_timestamp(signed.get("issued_at"))
        expected = _outcome(mandates._check_schema_in_detail, signed, issued_at=issued_at)
        assert _outcome(mandates._check_schema, signed, issued_at=issued_at) == expected, signed
        answer = _outcome(mandates._well_formed_refund, signed, issued_at)
        if answer is not None:  # it answered itself (None: it left the input to the rest)
            assert answer == expected, signed
            fast += isinstance(answer[-1], RefundIntent)
    # The fast path took the refund variants that pass, so the loop above held it to account.
    assert (fast > 50) == (base["intent"]["action"] == "request_refund")


def test_the_shape_fast_path_answers_as_the_detailed_checks() -> None:
    from refunds.agent import mandates

    base = {
        "signed": {"mandate_id": "mnd_1", "site_id": SITE, "agent_id": AGENT, "nonce": "n"},
        "envelope": {"algorithm": "ed25519", "key_id": KEY_ID, "signature": "s"},
    }
    for doc in [*_variants(base), [], "signed", {"signed": base["signed"]}]:
        expected = _outcome(mandates._check_shape_in_detail, doc)
        assert _outcome(mandates._check_shape, doc) == expected, doc
    assert mandates._well_formed_shape(base) == ("mnd_1", SITE, AGENT, KEY_ID)


@settings(max_examples=1000)
@given(st.integers(min_value=1, max_value=10**15 - 1), st.sampled_from([0, 2, 3, 4]))
def test_an_amount_below_the_bound_is_always_the_shortest_decimal_of_its_double(
    minor: int, exponent: int
) -> None:
    from refunds.agent import mandates

    # What lets _amount skip its shortest-decimal test below the bound.
    assert minor < mandates._SHORT_ENOUGH_MINOR == 10**15
    for amount in (Decimal(minor).scaleb(-exponent), Decimal(f"{minor}.000e-{exponent}")):
        assert Decimal(repr(float(amount))) == amount


def test_it_builds_its_records_equal_to_their_constructors() -> None:
    import dataclasses

    from refunds.agent import mandates

    raw = body(_order_refund())
    mandate = verify(raw)
    for built in (mandates.load_mandate(raw), mandate, mandate.intent, verify(body(REFUND)).intent):
        rebuilt = dataclasses.replace(built)  # through the dataclass's own __init__
        assert rebuilt == built
        assert vars(rebuilt) == vars(built)
        assert list(vars(built)) == [field.name for field in dataclasses.fields(built)]
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(built, dataclasses.fields(built)[0].name, None)
