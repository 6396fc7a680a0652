"""C2SP signed notes and tlog checkpoints (c2sp.org/signed-note, c2sp.org/tlog-checkpoint).

Pure logic, standard library and PyNaCl. A checkpoint's text is three lines — the log's origin,
the tree size in decimal, the base64 root hash — and its signature lines follow a blank line:
``— <key name> base64(4-byte key id || 64-byte Ed25519 signature)``. The key id is
``SHA-256(key name || 0x0A || 0x01 || public key)[:4]``. Sill names each site's log (and its
key, as the spec recommends) ``<SILL_AUDIT_ORIGIN>/<site id>``; one Ed25519 key signs every
site's checkpoints, so each site has its own verifier key string (:func:`vkey`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

import nacl.exceptions
import nacl.signing

ED25519 = b"\x01"
# The spec: verifiers "MUST accept at least up to 16 signatures", and "post-quantum signatures
# can be up to nearly 5kB in size" (base64: about 6.7 kB a line): 16 of those and the text fit.
MAX_NOTE_BYTES = 128 * 1024
MAX_SIGNATURES = 16
EM_DASH = "\u2014"


class NoteError(ValueError):
    """A note or checkpoint that is malformed or not signed by the expected key."""


class BadSignature(NoteError):
    """A signature line that names the key and does not verify: the whole note is refused."""


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes

    def text(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode('ascii')}\n"


def key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode("utf-8") + b"\n" + ED25519 + public_key).digest()[:4]


def vkey(name: str, public_key: bytes) -> str:
    """The verifier key string ``<name>+<hex key id>+<base64(0x01 || public key)>``."""
    encoded = base64.b64encode(ED25519 + public_key).decode("ascii")
    return f"{name}+{key_id(name, public_key).hex()}+{encoded}"


def parse_vkey(text: str) -> tuple[str, bytes]:
    """``(name, public key)`` from a verifier key string; :class:`NoteError` if malformed."""
    parts = text.strip().split("+")
    if len(parts) != 3 or not parts[0]:
        raise NoteError("a verifier key is <name>+<key id>+<base64 key>")
    name, hex_id, encoded = parts
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise NoteError("the verifier key is not base64") from None
    if len(raw) != 33 or raw[:1] != ED25519:
        raise NoteError("only Ed25519 verifier keys are supported")
    if key_id(name, raw[1:]).hex() != hex_id:
        raise NoteError("the verifier key's id does not match its name and key")
    return name, raw[1:]


def sign(
    text: str, *, name: str, signing_key: nacl.signing.SigningKey, timestamp: int | None = None
) -> str:
    """``text`` (ending in a newline) as a signed note with one signature by ``name``; with
    ``timestamp`` (POSIX seconds), a second line by the same key: a c2sp.org/tlog-cosignature
    v1 Ed25519 cosignature, which signs that time with the text (:func:`signed_time`)."""
    _check_text(text)
    _check_name(name)
    signature = signing_key.sign(text.encode("utf-8")).signature
    blob = key_id(name, bytes(signing_key.verify_key)) + signature
    lines = f"{EM_DASH} {name} {base64.b64encode(blob).decode('ascii')}\n"
    if timestamp is not None:
        if not 0 <= timestamp <= MAX_TIMESTAMP:
            raise NoteError("a cosignature's time is from 0 to 2**63 - 1")
        cosignature = signing_key.sign(cosigned_message(text, timestamp)).signature
        blob = cosignature_key_id(name, bytes(signing_key.verify_key))
        blob += timestamp.to_bytes(8, "big") + cosignature
        lines += f"{EM_DASH} {name} {base64.b64encode(blob).decode('ascii')}\n"
    return f"{text}\n{lines}"


# c2sp.org/tlog-cosignature, Ed25519 (cosignature/v1): the signer's statement that, at the time
# it signs, this is the largest tree of the log it has seen. Older verifiers skip the line (its
# key id is of another signature type), so a note that carries it still verifies with them.
COSIGNATURE_V1 = b"\x04"
MAX_TIMESTAMP = 2**63 - 1


def cosignature_key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode("utf-8") + b"\n" + COSIGNATURE_V1 + public_key).digest()[:4]


def cosigned_message(text: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n".encode() + text.encode("utf-8")


def signed_time(note: str, *, name: str, public_key: bytes) -> int | None:
    """The time (POSIX seconds) the key ``name`` / ``public_key`` signed ``note`` at, from its
    cosignature/v1 line; None when it has none (a note signed before Sill timed them).
    :class:`BadSignature` when that line does not verify (the whole note is refused, as for
    any signature by a known key)."""
    text, signatures = split_note(note)
    wanted_id = cosignature_key_id(name, public_key)
    found = None
    for signer, blob in signatures:
        if signer != name or blob[:4] != wanted_id:
            continue
        timestamp = int.from_bytes(blob[4:12], "big")
        try:
            if len(blob) != 4 + 8 + 64 or timestamp > MAX_TIMESTAMP:
                raise ValueError("not a cosignature/v1")
            nacl.signing.VerifyKey(public_key).verify(cosigned_message(text, timestamp), blob[12:])
        except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
            raise BadSignature(f"the timed signature by {name} does not verify") from None
        found = timestamp if found is None else max(found, timestamp)
    return found


def open_note(note: str, *, name: str, public_key: bytes) -> str:
    """The text of ``note`` if the key ``name`` / ``public_key`` signed it; else NoteError.

    Signatures by other keys are ignored, as the spec requires; a signature that names this key
    and does not verify refuses the note.
    """
    text, signatures = split_note(note)
    wanted_id = key_id(name, public_key)
    verified = False
    for signer, blob in signatures:
        if signer != name or blob[:4] != wanted_id:
            continue  # someone else's signature (a witness, an older key): not ours to judge
        try:
            nacl.signing.VerifyKey(public_key).verify(text.encode("utf-8"), blob[4:])
        except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
            raise BadSignature(f"the signature by {name} does not verify") from None
        verified = True
    if not verified:
        raise NoteError(f"the note is not signed by {name}")
    return text


def split_note(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    """``(text, [(key name, base64-decoded signature)])`` of a well-formed note, whoever signed
    it; :class:`NoteError` naming what is malformed. Checks no signature."""
    if len(note.encode("utf-8", errors="surrogatepass")) > MAX_NOTE_BYTES:
        raise NoteError("the note is too large")
    if not note.endswith("\n"):
        raise NoteError("a note ends with a newline")
    # The rules bind the whole note, signature lines included (sumdb/note's Open checks them
    # before anything else): a malformed line is not "someone else's signature" to skip.
    _check_text(note)
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("the note has no signature block")
    text, block = note[: split + 1], note[split + 2 :]
    _check_text(text)
    lines = block[:-1].split("\n")
    if not lines or len(lines) > MAX_SIGNATURES:
        raise NoteError("the note has no or too many signatures")
    signatures = []
    for line in lines:
        prefix = f"{EM_DASH} "
        if not line.startswith(prefix):
            raise NoteError("a signature line starts with an em dash and a space")
        signer, _, encoded = line[len(prefix) :].partition(" ")
        if not _valid_name(signer):
            raise NoteError("a signature line is malformed: its key name is not valid")
        try:
            blob = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise NoteError("a signature is not base64") from None
        if len(blob) < 5:
            raise NoteError("a signature is too short")
        signatures.append((signer, blob))
    return text, signatures


def checkpoint_shape(note: str) -> Checkpoint:
    """What a signed checkpoint says, read before any signature is checked: a file that is no
    well-formed signed checkpoint at all (cut short, another kind of file) raises
    :class:`NoteError` here, apart from one whose signatures do not verify."""
    text, _ = split_note(note)
    return parse_checkpoint(text)


def parse_checkpoint(text: str) -> Checkpoint:
    """The origin, size and root of a checkpoint's (verified) text."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
        raise NoteError("a checkpoint has an origin, a size and a root hash line")
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    if (
        not size_text.isascii()
        or not size_text.isdigit()
        or (size_text != "0" and size_text[0] == "0")
    ):
        raise NoteError("the tree size is not a decimal number")
    try:
        root = base64.b64decode(root_text, validate=True)
    except binascii.Error:
        raise NoteError("the root hash is not base64") from None
    if len(root) != 32:
        raise NoteError("the root hash is not 32 bytes")
    return Checkpoint(origin=origin, size=int(size_text), root=root)


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise NoteError("a note's text ends with a newline")
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("a note holds no control characters")


def _valid_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def _check_name(name: str) -> None:
    if not _valid_name(name):
        raise NoteError("a key name is non-empty, without spaces or '+'")
