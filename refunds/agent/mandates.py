"""Signed agent mandates: parse, verify and validate a ``POST /api/v1/mandates`` body.

Pure logic: no Django, no ORM. The caller supplies the key store (``key_lookup``) and the
clock (``now``); everything here is a function of ``raw`` and those two.

Order of checks (the first failure wins), so that nothing in ``signed`` is interpreted
before the signature holds, except what is needed to find the key:

1. ``too_large`` (413): ``len(raw) > MAX_BODY_BYTES``, before any parsing.
2. ``malformed`` (400): not UTF-8, not JSON, nested deeper than 32 levels, duplicate keys,
   ``NaN``/``Infinity``, a number JCS cannot write (an integer beyond 2**53 - 1, an
   overflowing float), NUL, lone surrogates (:func:`sill.jsonbody.loads`);
   the top level not exactly ``{"signed": {...}, "envelope": {...}}``; envelope
   ``algorithm``/``key_id``/``signature`` missing or not strings (an empty one is not
   malformed: it earns ``unsupported_algorithm``, ``unknown_key`` or ``bad_signature``);
   ``signed.mandate_id``, ``site_id``, ``agent_id`` missing or not non-empty strings (these
   name the key, so they are shape; their finer rules are schema). An extra envelope key is
   ``unknown_field`` (422), raised at this stage because the envelope is not signed.
3. ``unsupported_algorithm`` (400): ``envelope.algorithm != "ed25519"`` (case-sensitive).
4. ``unknown_key`` (401): no key for (site, agent, key_id); the key is revoked
   (``revoked_at <= now``: a revoked key refuses every mandate verified after revocation,
   even one issued before it; an identical resend is answered from storage by the caller via
   :func:`document_sha256` without calling :func:`verify_mandate`); or ``issued_at`` outside
   ``[valid_from, valid_until)``. ``issued_at`` is read leniently here: if it does not parse,
   the validity window is skipped and the schema step later refuses it as ``invalid_field``
   (so a forged body can only ever earn ``bad_signature``).
5. ``bad_signature`` (401): not exactly 86 base64url characters without padding, not the
   canonical encoding of 64 bytes (the spare low bits of the last character must be zero),
   or strict ed25519 verification of ``DOMAIN_TAG + JCS(signed)`` fails
   (:func:`verify_ed25519`: also a key outside the prime-order subgroup).
6. Schema, in three passes over ``signed``: ``forbidden_field`` (a refund intent carrying
   ``sku``/``line_items``/``quoted_total``/``buyer``), then ``unknown_field`` (any key not in
   the schema, at any depth), then ``invalid_field`` / ``window_too_long`` field by field.
   Window rules: ``replay_window_seconds`` not an integer, or below 1, is ``invalid_field``;
   above ``MAX_REPLAY_WINDOW`` is ``window_too_long``; ``expires_at <= issued_at`` is
   ``invalid_field``; ``expires_at - issued_at > replay_window_seconds`` is
   ``window_too_long``. These do not depend on ``now``, so they run even when
   ``check_time=False``.
7. Time (only when ``check_time``): ``expired`` if ``now > expires_at``; ``not_yet_valid`` if
   ``issued_at > now + SKEW``.

Numbers: the body is read with ``parse_float=Decimal`` so amounts are exact, and signed as a
standard JSON parser reads it: every ``Decimal`` becomes ``float(d)`` before JCS (exactly what
``json.loads`` would have produced, so ``89.00`` is signed as ``89``). Because the signature
then covers a double, an amount is refused (``invalid_field``) unless it is the shortest
decimal for that double; otherwise two different amounts could share one signature.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, NoReturn, TypedDict, TypeGuard, TypeVar

import nacl.bindings
import nacl.exceptions
import nacl.signing
import rfc8785

from sill import jcs, jsonbody
from sill.errors import SillError
from sill.money import KNOWN_CURRENCIES, Money, MoneyError, normalize_currency, parse_major

MAX_BODY_BYTES = 64 * 1024
SKEW = timedelta(seconds=30)
MAX_REPLAY_WINDOW = 300
DOMAIN_TAG = b"sill-mandate-v1:"
ALGORITHM = "ed25519"
MAX_LINE_ITEMS = 100
MAX_TEXT = 255
# A purchase line's quantity is stored in a PositiveIntegerField: PostgreSQL's ``integer``.
MAX_QUANTITY = 2**31 - 1

MANDATE_ID_RE = re.compile(r"\Amnd_[0-9A-HJKMNP-TV-Z]{26}\Z")
NONCE_RE = re.compile(r"\A[A-Za-z0-9_-]{16,128}\Z")
SIGNATURE_RE = re.compile(r"\A[A-Za-z0-9_-]{86}\Z")
_CANONICAL_LAST = frozenset("AQgw")  # base64url digits 0, 16, 32, 48: low 4 bits zero
_TIMESTAMP_RE = re.compile(
    r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})\Z"
)

ACTIONS = ("request_refund", "purchase", "credit_customer")
REASON_CODES = ("requested_by_customer", "defective", "not_received", "wrong_item", "other")
REFUND_FORBIDDEN_FIELDS = ("sku", "line_items", "quoted_total", "buyer")
# The rails a purchase can be charged on. Shopify's, WooCommerce's and PayPal's orders are paid
# at their own checkouts and come to Sill already paid: their rails take no payment from Sill
# (each refuses a charge), so a purchase naming one is refused here, before anything is stored,
# rather than placed and then failed.
PAYMENT_RAILS = ("mock", "stripe")

ERROR_CODES: dict[str, int] = {
    "malformed": 400,
    "too_large": 413,
    "unsupported_algorithm": 400,
    "unknown_key": 401,
    "bad_signature": 401,
    "expired": 400,
    "not_yet_valid": 400,
    "window_too_long": 400,
    # Raised by the service that stores mandates, not here; listed so it can use MandateError.
    "replay": 409,
    "mandate_conflict": 409,
    "forbidden_field": 422,
    "unknown_field": 422,
    "invalid_field": 422,
}

_ENVELOPE_KEYS = ("algorithm", "key_id", "signature")
_IDENTITY_KEYS = ("mandate_id", "site_id", "agent_id")
_SIGNED_KEYS = (
    "mandate_id",
    "site_id",
    "agent_id",
    "issued_at",
    "expires_at",
    "nonce",
    "replay_window_seconds",
    "intent",
)
_SIGNED_OPTIONAL_KEYS = ("principal", "protocol_context")
_PRINCIPAL_KEYS = ("type", "verification")
_PROTOCOL_KEYS = ("protocol", "version")
_INTENT_KEYS = {
    "request_refund": (
        "action",
        "merchant",
        "original_mandate_id",
        "original_order",
        "reason_code",
        "scope",
        "max_amount",
        "currency",
    ),
    "purchase": (
        "action",
        "merchant",
        "line_items",
        "quoted_total",
        "currency",
        "buyer",
        "payment",
    ),
    "credit_customer": ("action", "merchant", "customer", "amount", "currency", "reason_code"),
}
# A Stripe customer id (the customer whose balance a credit_customer intent credits).
CUSTOMER_ID_RE = re.compile(r"\Acus_[A-Za-z0-9]{1,64}\Z")
_SCOPE_ITEM_KEYS = ("sku", "quantity")
_ORIGINAL_ORDER_KEYS = ("rail", "id")
# Stores whose orders do not come from a purchase mandate: a refund names them by the store's
# own order id. Shopify: the numeric id or its gid://shopify/Order/<id> form; WooCommerce: the
# numeric order id.
_STORE_ORDER_IDS = {
    "shopify": re.compile(r"\A(?:gid://shopify/Order/)?([1-9][0-9]{0,18})\Z"),
    # At most 18 digits: the order sync stores it in a 64-bit integer column.
    "woocommerce": re.compile(r"\A([1-9][0-9]{0,17})\Z"),
}
ORIGINAL_ORDER_RAILS = tuple(_STORE_ORDER_IDS)
_LINE_ITEM_KEYS = ("sku", "name", "quantity", "unit_price")
_BUYER_KEYS = ("name", "email")
_PAYMENT_KEYS = ("rail", "payment_method")


class MandateError(SillError):
    """A refused mandate; ``status`` follows ``ERROR_CODES[code]``."""

    def __init__(self, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message, code=code, field=field, status=ERROR_CODES[code])


@dataclass(frozen=True)
class KeyRecord:
    public_key: bytes  # 32 raw ed25519 bytes
    valid_from: datetime  # aware
    valid_until: datetime | None
    revoked_at: datetime | None


class ScopeLine(TypedDict):
    sku: str
    quantity: int  # > 0


@dataclass(frozen=True)
class OriginalOrder:
    """A store's order, as ``original_order`` names it: its rail and the store's order id."""

    rail: str
    order_id: str  # normalised: the store's numeric id


@dataclass(frozen=True)
class RefundIntent:
    merchant: str
    # Exactly one names the original: the purchase mandate that placed it, or the store order.
    original_mandate_id: str
    reason_code: str
    scope: str | list[ScopeLine]  # "full" or the lines to refund
    max_amount: Money
    currency: str
    original_order: OriginalOrder | None = None


@dataclass(frozen=True)
class PurchaseLine:
    sku: str
    name: str
    quantity: int
    unit_price: Money


@dataclass(frozen=True)
class PurchaseIntent:
    merchant: str
    line_items: tuple[PurchaseLine, ...]
    quoted_total: Money
    currency: str
    buyer_name: str
    buyer_email: str
    payment_rail: str
    payment_method: str


@dataclass(frozen=True)
class CreditIntent:
    """Credit ``amount`` to a customer's balance at the rail (Stripe's customer balance)."""

    merchant: str
    customer: str  # the rail's customer id, e.g. Stripe's cus_…
    amount: Money
    currency: str
    reason_code: str


Intent = RefundIntent | PurchaseIntent | CreditIntent


@dataclass(frozen=True)
class VerifiedMandate:
    mandate_id: str
    site_id: str
    agent_id: str
    key_id: str
    nonce: str
    issued_at: datetime
    expires_at: datetime
    replay_window_seconds: int
    action: str  # "request_refund" | "purchase" | "credit_customer"
    intent: Intent
    signed: dict[str, Any]  # as parsed (Decimal amounts)
    raw: bytes  # the exact request body
    body_sha256: str  # hex sha256 of JCS({"signed", "envelope"}); whitespace-insensitive


KeyLookup = Callable[[str, str, str], KeyRecord | None]


# --- canonical form and signing ----------------------------------------------------------


canonicalisable = jcs.canonicalisable  # every Decimal as the float a plain parser reads
_jcs_string = jcs.string


def canonical_json(value: Any) -> bytes:
    """RFC 8785 (JCS) bytes of ``value``; also a valid JSON body for tests and the CLI.

    Exactly ``rfc8785.dumps(canonicalisable(value))``, written by the C JSON encoder when it
    can be (:mod:`sill.jcs`; a test holds the two equal)."""
    return jcs.canonical(value)


def signing_input(signed: Mapping[str, Any]) -> bytes:
    return DOMAIN_TAG + canonical_json(signed)


def document_sha256(doc: Mapping[str, Any]) -> str:
    """Digest telling an identical resend from a conflicting one (whitespace-insensitive)."""
    return hashlib.sha256(canonical_json(doc)).hexdigest()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def sign_mandate(
    signed: dict[str, Any], signing_key: nacl.signing.SigningKey, key_id: str
) -> dict[str, dict[str, Any]]:
    """Wrap ``signed`` in an ed25519 envelope (for ``manage.py agents sign``, tests, bench)."""
    signature = signing_key.sign(signing_input(signed)).signature
    return {
        "signed": signed,
        "envelope": {"algorithm": ALGORITHM, "key_id": key_id, "signature": _b64url(signature)},
    }


# --- parsing and shape -------------------------------------------------------------------


def _fail(code: str, message: str, field: str | None = None) -> NoReturn:
    raise MandateError(code, message, field=field)


_T = TypeVar("_T")


def _frozen(cls: type[_T], values: dict[str, Any]) -> _T:
    """``cls(**values)`` for a frozen dataclass with no ``__post_init__``, given every field:
    the same immutable, equal object, minus the ``object.__setattr__`` call per field that
    a frozen dataclass's ``__init__`` makes (most of its cost; a verification builds three).
    A test holds each such object equal to the constructor's, field for field."""
    obj = object.__new__(cls)
    obj.__dict__.update(values)
    return obj


def _load(raw: bytes) -> LoadedMandate:
    """Parse, shape-check and canonicalise ``raw``, each once.

    The JSON rules (UTF-8, depth, duplicate keys, constants, number range, NUL and lone
    surrogates) are the project's, in :func:`sill.jsonbody.loads`; the depth is counted on
    the raw bytes, so a deeply nested body is refused before anything walks it.

    The document's canonical bytes are put together from its two members' rather than
    written again: JCS writes a member's value exactly as it writes it alone, the shape
    check leaves exactly ``envelope`` and ``signed``, and ``envelope`` sorts first.
    """
    if len(raw) > MAX_BODY_BYTES:
        _fail("too_large", f"The body is larger than {MAX_BODY_BYTES} bytes.")
    try:
        doc = jsonbody.loads(bytes(raw))
    except jsonbody.MalformedJSON as exc:
        _fail("malformed", exc.message)
    identity = _check_shape(doc)
    envelope = doc["envelope"]
    try:
        signed_bytes = canonical_json(doc["signed"])
        # Three strings under fixed keys (the shape check allows no other): JCS escapes a
        # string exactly as the C encoder's encode_basestring does, and nothing is sorted.
        envelope_bytes = (
            f'{{"algorithm":{_jcs_string(envelope["algorithm"])},'
            f'"key_id":{_jcs_string(envelope["key_id"])},'
            f'"signature":{_jcs_string(envelope["signature"])}}}'
        ).encode()
    except (rfc8785.CanonicalizationError, RecursionError, ValueError):
        _fail("malformed", "The body holds a value JSON canonicalisation (RFC 8785) refuses.")
    canonical = b'{"envelope":' + envelope_bytes + b',"signed":' + signed_bytes + b"}"
    return _frozen(
        LoadedMandate,
        {
            "doc": doc,
            "canonical": canonical,
            "sha256": hashlib.sha256(canonical).hexdigest(),
            "signed_bytes": signed_bytes,
            "identity": identity,
        },
    )


_ENVELOPE_FIELDS = frozenset(_ENVELOPE_KEYS)


def _check_shape(doc: Any) -> tuple[str, str, str, str]:
    identity = _well_formed_shape(doc)
    return identity if identity is not None else _check_shape_in_detail(doc)


def _well_formed_shape(doc: Any) -> tuple[str, str, str, str] | None:
    """:func:`_check_shape_in_detail` for a body that passes, each value read once: exactly
    the two objects, exactly the envelope's three strings, the identity's non-empty strings.
    ``None`` otherwise, and the detailed checks find the first error (a test holds the two
    equal)."""
    if isinstance(doc, dict) and len(doc) == 2:
        signed, envelope = doc.get("signed"), doc.get("envelope")
        if (
            isinstance(signed, dict)
            and isinstance(envelope, dict)
            and envelope.keys() == _ENVELOPE_FIELDS
            and isinstance(envelope["algorithm"], str)
            and isinstance(envelope["signature"], str)
        ):
            mandate_id, site_id = signed.get("mandate_id"), signed.get("site_id")
            agent_id, key_id = signed.get("agent_id"), envelope["key_id"]
            if (
                isinstance(mandate_id, str)
                and mandate_id
                and isinstance(site_id, str)
                and site_id
                and isinstance(agent_id, str)
                and agent_id
                and isinstance(key_id, str)
            ):
                return mandate_id, site_id, agent_id, key_id
    return None


def _check_shape_in_detail(doc: Any) -> tuple[str, str, str, str]:
    if not isinstance(doc, dict):
        _fail("malformed", "The body must be a JSON object.")
    for name in ("signed", "envelope"):
        if not isinstance(doc.get(name), dict):
            _fail("malformed", f'"{name}" must be an object.', name)
    for name in doc:
        if name not in ("signed", "envelope"):
            _fail("malformed", 'Only "signed" and "envelope" are allowed at the top level.', name)
    envelope, signed = doc["envelope"], doc["signed"]
    for name in _ENVELOPE_KEYS:
        # Only the type is shape: an empty or odd value earns its own code further on.
        if not isinstance(envelope.get(name), str):
            _fail("malformed", f"envelope.{name} must be a string.", f"envelope.{name}")
    for name in envelope:
        if name not in _ENVELOPE_KEYS:
            _fail("unknown_field", f"envelope.{name} is not a known field.", f"envelope.{name}")
    for name in _IDENTITY_KEYS:
        if not isinstance(signed.get(name), str) or not signed[name]:
            _fail("malformed", f"signed.{name} must be a non-empty string.", f"signed.{name}")
    return signed["mandate_id"], signed["site_id"], signed["agent_id"], envelope["key_id"]


def parse_document(raw: bytes) -> dict[str, Any]:
    """Size, JSON and top-level shape checks only; numbers with a fraction come back Decimal."""
    return _load(raw).doc


@dataclass(frozen=True)
class LoadedMandate:
    """A body parsed and canonicalised once (:func:`load_mandate`): what every later step
    reads instead of parsing or canonicalising it again."""

    doc: dict[str, Any]
    canonical: bytes  # RFC 8785 bytes of the whole document
    sha256: str  # hex digest of ``canonical``: tells an identical resend from another body
    signed_bytes: bytes  # RFC 8785 bytes of ``signed``: what the signature covers
    identity: tuple[str, str, str, str]  # (mandate_id, site_id, agent_id, key_id)


def load_mandate(raw: bytes) -> LoadedMandate:
    """Parse, shape-check and canonicalise ``raw`` once; :class:`MandateError` otherwise."""
    return _load(raw)


def peek_identity(doc: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """``(mandate_id, site_id, agent_id, key_id)`` so the caller can find an earlier copy."""
    return _check_shape(doc)


def peek_original_mandate_id(doc: Mapping[str, Any]) -> str | None:
    """The purchase mandate a refund mandate names as its original, read before verification
    so the key's lookup can read the original's charge with it; None unless the body names one
    well-formed (verification then decides what the body means)."""
    signed = doc.get("signed")
    intent = signed.get("intent") if isinstance(signed, dict) else None
    if not isinstance(intent, dict) or intent.get("action") != "request_refund":
        return None
    original = intent.get("original_mandate_id")
    return original if isinstance(original, str) and MANDATE_ID_RE.match(original) else None


def parse_timestamp(value: Any) -> datetime | None:
    """An RFC 3339 timestamp (``Z`` or an offset) as aware UTC, or ``None``; also ``None``
    for an instant whose UTC date is outside the calendar (``0001-01-01T00:00:00+01:00`` is
    in year 0), which ``datetime`` cannot hold."""
    if not isinstance(value, str):
        return None
    match = _TIMESTAMP_RE.match(value)
    if match is None:
        return None
    fraction = match.group(1) or ""
    # fromisoformat takes at most microseconds on every supported Python: trim, never round.
    text = value.replace(fraction, fraction[:7], 1) if fraction else value
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: the UTC conversion left the calendar
        return None


# --- key and signature -------------------------------------------------------------------


# The words of a revoked key's refusal (also when it is revoked while its mandate is decided:
# refunds.agent.intake).
KEY_REVOKED = "This key has been revoked."


def _check_key(key: KeyRecord | None, *, issued_at: datetime | None, now: datetime) -> KeyRecord:
    field = "envelope.key_id"
    if key is None:
        _fail("unknown_key", "No such key for this agent on this site.", field)
    if key.revoked_at is not None and key.revoked_at <= now:
        _fail("unknown_key", KEY_REVOKED, field)
    if issued_at is not None and (
        issued_at < key.valid_from or (key.valid_until is not None and issued_at >= key.valid_until)
    ):
        _fail("unknown_key", "This key was not valid at issued_at.", field)
    return key


_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


def _decode_signature(text: str) -> bytes:
    field = "envelope.signature"
    if not SIGNATURE_RE.match(text):
        _fail("bad_signature", "The signature must be 86 base64url characters, unpadded.", field)
    # 86 characters carry 516 bits; the 4 spare bits (the low bits of the last character)
    # must be zero or one signature would have 16 spellings (and a resend with another
    # spelling would look like a conflict): A, Q, g and w are the characters whose are.
    if text[-1] not in _CANONICAL_LAST:
        _fail("bad_signature", "The signature is not canonical base64url.", field)
    # base64.urlsafe_b64decode(text + "=="), without its argument checks (the regex did them).
    return binascii.a2b_base64(text.encode("ascii").translate(_FROM_URLSAFE) + b"==")


def verify_ed25519(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is a strict ed25519 signature of ``message`` by ``public_key``.

    The one primitive mandate verification uses (and the Wycheproof suite drives). Never
    raises on hostile input: a key that is not 32 bytes or a signature that is not 64 is
    refused. Stricter than RFC 8032 asks, and exactly as strict as Wycheproof's ``valid``:
    libsodium already refuses a non-canonical ``S`` (malleability), a non-canonical or
    small-order ``R`` or key; the key must also lie in the prime-order subgroup, so a
    mixed-order key (Wycheproof's "acceptable") is refused too. A key made the ordinary way
    (``a * B``) always passes, and a signature Sill accepts is accepted by every RFC 8032
    verifier, cofactored or not (with a torsion-free key, ``R`` then has no torsion either).
    """
    if len(signature) != nacl.bindings.crypto_sign_BYTES:
        return False
    if not _usable_key(bytes(public_key)):
        return False
    try:
        nacl.bindings.crypto_sign_open(bytes(signature) + bytes(message), bytes(public_key))
    except nacl.exceptions.BadSignatureError:
        return False
    return True


@functools.lru_cache(maxsize=1024)
def _usable_key(public_key: bytes) -> bool:
    """Whether ``public_key`` is 32 bytes naming a point of the prime-order subgroup.

    The subgroup check costs about as much as a verification; it depends on the key's bytes
    alone, so each key is checked once per process.
    """
    if len(public_key) != nacl.bindings.crypto_sign_PUBLICKEYBYTES:
        return False
    return bool(nacl.bindings.crypto_core_ed25519_is_valid_point(public_key))


def _check_signature(key: KeyRecord, signed_bytes: bytes, signature: bytes) -> None:
    if not verify_ed25519(key.public_key, DOMAIN_TAG + signed_bytes, signature):
        _fail("bad_signature", "The signature does not match.", "envelope.signature")


# --- schema ------------------------------------------------------------------------------


def _check_forbidden(signed: Mapping[str, Any]) -> None:
    intent = signed.get("intent")
    if isinstance(intent, dict) and intent.get("action") == "request_refund":
        for name in REFUND_FORBIDDEN_FIELDS:
            if name in intent:
                _fail(
                    "forbidden_field",
                    f"A refund may not carry {name}: order details come from Sill's record.",
                    f"signed.intent.{name}",
                )


def _only(obj: Any, allowed: tuple[str, ...], path: str) -> None:
    # The set test runs in C on the keys' cached hashes; only a refusal walks them in order.
    if isinstance(obj, dict) and not obj.keys() <= _as_set(allowed):
        for name in obj:
            if name not in allowed:
                _fail("unknown_field", f"{path}.{name} is not a known field.", f"{path}.{name}")


@functools.cache
def _as_set(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(names)


def _items(value: Any) -> list[tuple[int, Any]]:
    return list(enumerate(value)) if isinstance(value, list) else []


def _check_unknown(signed: Mapping[str, Any]) -> None:
    _only(signed, _SIGNED_KEYS + _SIGNED_OPTIONAL_KEYS, "signed")
    _only(signed.get("principal"), _PRINCIPAL_KEYS, "signed.principal")
    _only(signed.get("protocol_context"), _PROTOCOL_KEYS, "signed.protocol_context")
    intent = signed.get("intent")
    if not isinstance(intent, dict):
        return
    action = intent.get("action")
    if not isinstance(action, str) or action not in _INTENT_KEYS:
        return
    _only(intent, _INTENT_KEYS[action], "signed.intent")
    if action == "request_refund":
        _only(intent.get("original_order"), _ORIGINAL_ORDER_KEYS, "signed.intent.original_order")
        for i, item in _items(intent.get("scope")):
            _only(item, _SCOPE_ITEM_KEYS, f"signed.intent.scope.{i}")
    else:
        for i, item in _items(intent.get("line_items")):
            _only(item, _LINE_ITEM_KEYS, f"signed.intent.line_items.{i}")
        _only(intent.get("buyer"), _BUYER_KEYS, "signed.intent.buyer")
        _only(intent.get("payment"), _PAYMENT_KEYS, "signed.intent.payment")


def _invalid(path: str, message: str) -> NoReturn:
    _fail("invalid_field", f"{path} {message}.", path)


_MISSING: Any = object()


def _get(obj: Mapping[str, Any], name: str, path: str) -> Any:
    value = obj.get(name, _MISSING)
    if value is _MISSING:
        _invalid(f"{path}.{name}", "is required")
    return value


def _object(obj: Mapping[str, Any], name: str, path: str) -> dict[str, Any]:
    value = _get(obj, name, path)
    if not isinstance(value, dict):
        _invalid(f"{path}.{name}", "must be an object")
    return value


def _text(obj: Mapping[str, Any], name: str, path: str) -> str:
    value = _get(obj, name, path)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
        _invalid(f"{path}.{name}", f"must be a non-blank string of at most {MAX_TEXT} characters")
    return value


def _choice(obj: Mapping[str, Any], name: str, path: str, choices: tuple[str, ...]) -> str:
    value = _get(obj, name, path)
    if not isinstance(value, str) or value not in choices:
        _invalid(f"{path}.{name}", f"must be one of {', '.join(choices)}")
    return value


def _positive_int(
    obj: Mapping[str, Any], name: str, path: str, *, maximum: int | None = None
) -> int:
    value = _get(obj, name, path)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _invalid(f"{path}.{name}", "must be a positive integer")
    if maximum is not None and value > maximum:
        _invalid(f"{path}.{name}", f"must be at most {maximum}")
    return value


def _timestamp(obj: Mapping[str, Any], name: str, path: str) -> datetime:
    value = parse_timestamp(_get(obj, name, path))
    if value is None:
        _invalid(f"{path}.{name}", "must be an RFC 3339 timestamp with Z or an offset")
    return value


def _currency(obj: Mapping[str, Any], name: str, path: str) -> str:
    value = _get(obj, name, path)
    try:
        code = normalize_currency(value)
    except MoneyError as exc:
        _invalid(f"{path}.{name}", f"is not usable ({exc})")
    if code != value:
        _invalid(f"{path}.{name}", "must be an upper-case ISO 4217 code")
    return code


_NUMBER_TYPES = (int, Decimal)  # a tuple: isinstance reads it faster than int | Decimal
# An amount of fewer minor units has at most 15 significant digits, and a decimal of at most
# 15 (DBL_DIG) digits, well inside the double range as amounts are, is always the shortest
# decimal of its double: the shortest has no more digits than it, and two such decimals
# never round to the same double. A test holds this over the whole range.
_SHORT_ENOUGH_MINOR = 10**15


# What a JSON value that is not a number is, in words (the parser gives no other types).
_NOT_A_NUMBER = {
    str: "a string",
    bool: "true",
    type(None): "null",
    dict: "an object",
    list: "an array",
}


def _amount(obj: Mapping[str, Any], name: str, path: str, currency: str) -> Money:
    value = _get(obj, name, path)
    if isinstance(value, bool) or not isinstance(value, _NUMBER_TYPES):
        named = "false" if value is False else _NOT_A_NUMBER.get(type(value), "not a number")
        _invalid(f"{path}.{name}", f"must be a JSON number in major units (89.00), not {named}")
    try:
        money = parse_major(value, currency)
    except MoneyError as exc:
        _invalid(f"{path}.{name}", f"is not a valid {currency} amount ({exc})")
    if money.amount_minor <= 0:
        _invalid(f"{path}.{name}", "must be greater than zero")
    # The signature covers float(value); only the shortest decimal of that double is accepted,
    # so no other amount can ride on the same signature. Below _SHORT_ENOUGH_MINOR minor units
    # that always holds, and the test is skipped (it is a third of this function's cost).
    if (
        isinstance(value, Decimal)
        and money.amount_minor >= _SHORT_ENOUGH_MINOR
        and Decimal(repr(float(value))) != value
    ):
        _invalid(f"{path}.{name}", "has more significant digits than a JSON number carries exactly")
    return money


def _refund_intent(intent: Mapping[str, Any], path: str) -> RefundIntent:
    merchant = _text(intent, "merchant", path)
    original, original_order = _original(intent, path)
    reason_code = _choice(intent, "reason_code", path, REASON_CODES)
    scope_value = _get(intent, "scope", path)
    scope: str | list[ScopeLine]
    if scope_value == "full":
        scope = "full"
    elif isinstance(scope_value, list) and 0 < len(scope_value) <= MAX_LINE_ITEMS:
        scope = []
        for i, item in enumerate(scope_value):
            item_path = f"{path}.scope.{i}"
            if not isinstance(item, dict):
                _invalid(item_path, "must be an object with sku and quantity")
            scope.append(
                {
                    "sku": _text(item, "sku", item_path),
                    "quantity": _positive_int(item, "quantity", item_path),
                }
            )
    else:
        _invalid(
            f"{path}.scope",
            f'must be "full" or a list of 1 to {MAX_LINE_ITEMS} {{sku, quantity}} objects',
        )
    currency = _currency(intent, "currency", path)
    max_amount = _amount(intent, "max_amount", path, currency)
    return RefundIntent(
        merchant=merchant,
        original_mandate_id=original,
        reason_code=reason_code,
        scope=scope,
        max_amount=max_amount,
        currency=currency,
        original_order=original_order,
    )


def _original(intent: Mapping[str, Any], path: str) -> tuple[str, OriginalOrder | None]:
    """The original order: ``original_mandate_id`` (an order an agent's purchase placed) or
    ``original_order`` ``{"rail", "id"}`` (an order that came from a store), exactly one."""
    if ("original_order" in intent) == ("original_mandate_id" in intent):
        _invalid(
            f"{path}.original_mandate_id",
            "or original_order is required, exactly one of them, to name the original order",
        )
    if "original_mandate_id" in intent:
        original = intent["original_mandate_id"]
        if not isinstance(original, str) or not MANDATE_ID_RE.match(original):
            _invalid(f"{path}.original_mandate_id", "must be a mandate id (mnd_ + 26-char ULID)")
        return original, None
    named = _object(intent, "original_order", path)
    order_path = f"{path}.original_order"
    rail = _get(named, "rail", order_path)
    if rail not in ORIGINAL_ORDER_RAILS:
        _invalid(
            f"{order_path}.rail",
            f"must be one of {', '.join(ORIGINAL_ORDER_RAILS)} (orders an agent placed are "
            "named by original_mandate_id)",
        )
    order_id = _get(named, "id", order_path)
    found = _STORE_ORDER_IDS[rail].match(order_id) if isinstance(order_id, str) else None
    if found is None:
        _invalid(
            f"{order_path}.id",
            'must be the store\'s order id as a string ("450789469"; on Shopify also '
            '"gid://shopify/Order/450789469")',
        )
    return "", OriginalOrder(rail=rail, order_id=found.group(1))


def _credit_intent(intent: Mapping[str, Any], path: str) -> CreditIntent:
    merchant = _text(intent, "merchant", path)
    customer = _get(intent, "customer", path)
    if not isinstance(customer, str) or not CUSTOMER_ID_RE.match(customer):
        _invalid(f"{path}.customer", "must be the customer's Stripe id (cus_…)")
    currency = _currency(intent, "currency", path)
    return CreditIntent(
        merchant=merchant,
        customer=customer,
        amount=_amount(intent, "amount", path, currency),
        currency=currency,
        reason_code=_choice(intent, "reason_code", path, REASON_CODES),
    )


def _purchase_intent(intent: Mapping[str, Any], path: str) -> PurchaseIntent:
    merchant = _text(intent, "merchant", path)
    currency = _currency(intent, "currency", path)
    items_value = _get(intent, "line_items", path)
    if not isinstance(items_value, list) or not 0 < len(items_value) <= MAX_LINE_ITEMS:
        _invalid(f"{path}.line_items", f"must be a list of 1 to {MAX_LINE_ITEMS} items")
    lines = []
    total = Money.zero(currency)
    for i, item in enumerate(items_value):
        item_path = f"{path}.line_items.{i}"
        if not isinstance(item, dict):
            _invalid(item_path, "must be an object")
        line = PurchaseLine(
            sku=_text(item, "sku", item_path),
            name=_text(item, "name", item_path),
            quantity=_positive_int(item, "quantity", item_path, maximum=MAX_QUANTITY),
            unit_price=_amount(item, "unit_price", item_path, currency),
        )
        lines.append(line)
        total += Money(line.unit_price.amount_minor * line.quantity, currency)
    quoted_total = _amount(intent, "quoted_total", path, currency)
    if quoted_total != total:
        _invalid(
            f"{path}.quoted_total",
            f"must equal the sum of quantity x unit_price ({total.major_str()})",
        )
    buyer = _object(intent, "buyer", path)
    buyer_name = _text(buyer, "name", f"{path}.buyer")
    # Composed (NFC, as RFC 6532 asks of internationalised addresses): the buyer is found by
    # email, and a decomposed é otherwise matched nobody and made a second customer. Before
    # the length checks (intake's column fits), as it is what Sill stores.
    buyer_email = unicodedata.normalize("NFC", _text(buyer, "email", f"{path}.buyer"))
    local, _, domain = buyer_email.partition("@")
    if not local or not domain or "@" in domain or any(c.isspace() for c in buyer_email):
        _invalid(f"{path}.buyer.email", "must be an email address")
    payment = _object(intent, "payment", path)
    return PurchaseIntent(
        merchant=merchant,
        line_items=tuple(lines),
        quoted_total=quoted_total,
        currency=currency,
        buyer_name=buyer_name,
        buyer_email=buyer_email,
        payment_rail=_choice(payment, "rail", f"{path}.payment", PAYMENT_RAILS),
        payment_method=_text(payment, "payment_method", f"{path}.payment"),
    )


# (nonce, issued_at, expires_at, replay_window_seconds, action, intent): internal, a tuple
# because it is built on every verification and read once.
_Checked = tuple[str, datetime, datetime, int, str, Intent]


def _check_schema(signed: Mapping[str, Any], *, issued_at: datetime | None) -> _Checked:
    """The schema passes (module doc, step 6); ``issued_at`` is ``signed["issued_at"]``
    already read by :func:`parse_timestamp` (None: absent or not a timestamp)."""
    checked = _well_formed_refund(signed, issued_at)
    if checked is not None:
        return checked
    return _check_schema_in_detail(signed, issued_at=issued_at)


_SIGNED_FIELDS = frozenset(_SIGNED_KEYS + _SIGNED_OPTIONAL_KEYS)
# The optional objects of ``signed``: each of their fields is required and text.
_SIGNED_OBJECTS = (
    ("principal", frozenset(_PRINCIPAL_KEYS)),
    ("protocol_context", frozenset(_PROTOCOL_KEYS)),
)
_REFUND_FIELDS = frozenset(_INTENT_KEYS["request_refund"])
_ORIGINAL_ORDER_FIELDS = frozenset(_ORIGINAL_ORDER_KEYS)
_SCOPE_ITEM_FIELDS = frozenset(_SCOPE_ITEM_KEYS)


# timedelta(seconds=n) for every window the fast path admits, built once.
_WINDOW_SPANS = tuple(timedelta(seconds=n) for n in range(MAX_REPLAY_WINDOW + 1))


def _is_text(value: Any) -> TypeGuard[str]:
    """What :func:`_text` accepts."""
    return isinstance(value, str) and bool(value.strip()) and len(value) <= MAX_TEXT


def _well_formed_refund(signed: Mapping[str, Any], issued_at: datetime | None) -> _Checked | None:
    """:func:`_check_schema_in_detail` for the common case, a refund mandate that passes:
    each field read once, the tests inline. ``None`` as soon as anything is off (or the
    intent is not a refund), and the detailed passes then find the first error as ever.

    It refuses nothing itself: every test here is one the detailed passes make (or a
    stricter one), so it accepts only what they accept, with the same result. Its only
    call that can raise, :func:`_amount`, is the last check the detailed passes make on a
    refund, reached here only once everything before it holds, so it raises what they
    would. (A test holds the two paths equal over many malformed variants.)"""
    intent = signed.get("intent")
    if (
        issued_at is None
        or not signed.keys() <= _SIGNED_FIELDS
        or not isinstance(intent, dict)
        or intent.get("action") != "request_refund"
        # Also no forbidden field: none of them is a refund's.
        or not intent.keys() <= _REFUND_FIELDS
    ):
        return None
    for name, fields in _SIGNED_OBJECTS:
        if name in signed:
            obj = signed[name]
            # Equal key sets: every field there (all are required) and no other.
            if not isinstance(obj, dict) or obj.keys() != fields:
                return None
            for value in obj.values():
                if not _is_text(value):
                    return None
    mandate_id = signed.get("mandate_id")
    nonce = signed.get("nonce")
    window = signed.get("replay_window_seconds")
    if (
        not isinstance(mandate_id, str)
        or not MANDATE_ID_RE.match(mandate_id)
        or not _is_text(signed.get("site_id"))
        or not _is_text(signed.get("agent_id"))
        or not isinstance(nonce, str)
        or not NONCE_RE.match(nonce)
        or isinstance(window, bool)
        or not isinstance(window, int)
        or not 1 <= window <= MAX_REPLAY_WINDOW
    ):
        return None
    expires_at = parse_timestamp(signed.get("expires_at"))
    if (
        expires_at is None
        or expires_at <= issued_at
        or expires_at - issued_at > _WINDOW_SPANS[window]
    ):
        return None

    path = "signed.intent"
    merchant = intent.get("merchant")
    if not _is_text(merchant):
        return None
    original_order: OriginalOrder | None = None
    if "original_mandate_id" in intent:
        original = intent["original_mandate_id"]
        if (
            "original_order" in intent
            or not isinstance(original, str)
            or not MANDATE_ID_RE.match(original)
        ):
            return None
    else:
        named = intent.get("original_order")
        if not isinstance(named, dict) or named.keys() != _ORIGINAL_ORDER_FIELDS:
            return None
        rail, order_id = named.get("rail"), named.get("id")
        if (
            not isinstance(rail, str)
            or rail not in _STORE_ORDER_IDS
            or not isinstance(order_id, str)
        ):
            return None
        found = _STORE_ORDER_IDS[rail].match(order_id)
        if found is None:
            return None
        original, original_order = "", OriginalOrder(rail=rail, order_id=found.group(1))
    reason_code = intent.get("reason_code")
    if not isinstance(reason_code, str) or reason_code not in REASON_CODES:
        return None
    scope_value = intent.get("scope")
    scope: str | list[ScopeLine]
    if scope_value == "full":
        scope = "full"
    elif isinstance(scope_value, list) and 0 < len(scope_value) <= MAX_LINE_ITEMS:
        scope = []
        for item in scope_value:
            if not isinstance(item, dict) or item.keys() != _SCOPE_ITEM_FIELDS:
                return None
            sku, quantity = item.get("sku"), item.get("quantity")
            if (
                not _is_text(sku)
                or isinstance(quantity, bool)
                or not isinstance(quantity, int)
                or quantity < 1
            ):
                return None
            scope.append({"sku": sku, "quantity": quantity})
    else:
        return None
    currency = intent.get("currency")
    # Exactly what _currency accepts: normalize_currency returns such a code unchanged.
    if type(currency) is not str or currency not in KNOWN_CURRENCIES:
        return None
    max_amount = _amount(intent, "max_amount", path, currency)  # the last check: may raise
    refund = _frozen(
        RefundIntent,
        {
            "merchant": merchant,
            "original_mandate_id": original,
            "reason_code": reason_code,
            "scope": scope,
            "max_amount": max_amount,
            "currency": currency,
            "original_order": original_order,
        },
    )
    return nonce, issued_at, expires_at, window, "request_refund", refund


def _check_schema_in_detail(signed: Mapping[str, Any], *, issued_at: datetime | None) -> _Checked:
    """The schema passes one by one, each refusal with its own code, message and field."""
    _check_forbidden(signed)
    _check_unknown(signed)
    path = "signed"
    if not MANDATE_ID_RE.match(signed["mandate_id"]):
        _invalid("signed.mandate_id", "must be mnd_ followed by a 26-character ULID")
    for name in ("site_id", "agent_id"):
        _text(signed, name, path)
    if issued_at is None:
        _timestamp(signed, "issued_at", path)  # raises: required, or not a timestamp
    assert issued_at is not None
    expires_at = _timestamp(signed, "expires_at", path)
    nonce = _get(signed, "nonce", path)
    if not isinstance(nonce, str) or not NONCE_RE.match(nonce):
        _invalid("signed.nonce", "must be 16 to 128 characters of A-Z a-z 0-9 _ -")
    window = _get(signed, "replay_window_seconds", path)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        _invalid("signed.replay_window_seconds", "must be a positive integer of seconds")
    if window > MAX_REPLAY_WINDOW:
        _fail(
            "window_too_long",
            f"replay_window_seconds may be at most {MAX_REPLAY_WINDOW}.",
            "signed.replay_window_seconds",
        )
    if expires_at <= issued_at:
        _invalid("signed.expires_at", "must be later than issued_at")
    if expires_at - issued_at > timedelta(seconds=window):
        _fail(
            "window_too_long",
            "expires_at - issued_at is longer than replay_window_seconds.",
            "signed.expires_at",
        )
    for name, keys in (("principal", _PRINCIPAL_KEYS), ("protocol_context", _PROTOCOL_KEYS)):
        if name in signed:
            obj = _object(signed, name, path)
            for key in keys:
                _text(obj, key, f"signed.{name}")
    intent_value = _object(signed, "intent", path)
    action = _choice(intent_value, "action", "signed.intent", ACTIONS)
    intent: Intent
    if action == "request_refund":
        intent = _refund_intent(intent_value, "signed.intent")
    elif action == "credit_customer":
        intent = _credit_intent(intent_value, "signed.intent")
    else:
        intent = _purchase_intent(intent_value, "signed.intent")
    return nonce, issued_at, expires_at, window, action, intent


# --- entry point -------------------------------------------------------------------------


def verify_mandate(
    raw: bytes,
    *,
    key_lookup: KeyLookup,
    now: datetime,
    check_time: bool = True,
    loaded: LoadedMandate | None = None,
) -> VerifiedMandate:
    """Verify ``raw`` end to end or raise :class:`MandateError` (order in the module doc).

    ``key_lookup(site_id, agent_id, key_id)`` returns the agent's key or ``None``. With
    ``check_time=False`` only ``expired``/``not_yet_valid`` are skipped. ``loaded`` is
    ``raw`` already parsed and canonicalised by :func:`load_mandate` (the intake does it once
    for the resend check): its bytes serve the signature check and the digest.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    loaded = loaded or load_mandate(raw)
    doc = loaded.doc
    mandate_id, site_id, agent_id, key_id = loaded.identity  # shape checked by load_mandate
    signed, envelope = doc["signed"], doc["envelope"]
    if envelope["algorithm"] != ALGORITHM:
        _fail(
            "unsupported_algorithm",
            f"Only {ALGORITHM} signatures are accepted.",
            "envelope.algorithm",
        )
    issued_at = parse_timestamp(signed.get("issued_at"))  # read once: the key, then the schema
    key = _check_key(key_lookup(site_id, agent_id, key_id), issued_at=issued_at, now=now)
    _check_signature(key, loaded.signed_bytes, _decode_signature(envelope["signature"]))
    nonce, issued_at, expires_at, window, action, intent = _check_schema(
        signed, issued_at=issued_at
    )
    if check_time:
        if now > expires_at:
            _fail("expired", "The mandate has expired.", "signed.expires_at")
        if issued_at > now + SKEW:
            _fail("not_yet_valid", "issued_at is in the future.", "signed.issued_at")
    return _frozen(
        VerifiedMandate,
        {
            "mandate_id": mandate_id,
            "site_id": site_id,
            "agent_id": agent_id,
            "key_id": key_id,
            "nonce": nonce,
            "issued_at": issued_at,
            "expires_at": expires_at,
            "replay_window_seconds": window,
            "action": action,
            "intent": intent,
            "signed": signed,
            "raw": bytes(raw),
            "body_sha256": loaded.sha256,
        },
    )
