"""C2SP signed notes and checkpoints: the spec's own example verifies, and what is not a
signature by the expected key is refused (or, for someone else's signature, ignored)."""

from __future__ import annotations

import base64

import nacl.signing
import pytest

from audit import note

# c2sp.org/signed-note's example: this verifier key signs this note.
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = (
    "This is an example message.\n\n"
    "\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)


def test_the_specs_example_verifies():
    name, key = note.parse_vkey(SPEC_VKEY)
    assert name == "example.com/foo"
    assert note.vkey(name, key) == SPEC_VKEY
    assert note.open_note(SPEC_NOTE, name=name, public_key=key) == "This is an example message.\n"


def test_a_changed_text_fails():
    name, key = note.parse_vkey(SPEC_VKEY)
    with pytest.raises(note.NoteError, match="does not verify"):
        note.open_note(SPEC_NOTE.replace("example", "exemplary", 1), name=name, public_key=key)


def test_someone_elses_signature_is_ignored_but_not_enough():
    name, key = note.parse_vkey(SPEC_VKEY)
    other = nacl.signing.SigningKey.generate()
    signed = note.sign("hello\n", name="witness.example/w", signing_key=other)
    with pytest.raises(note.NoteError, match="not signed by"):
        note.open_note(signed, name=name, public_key=key)


@pytest.mark.parametrize(
    "bad",
    ["no newline", "text\n", "text\n\nnot a signature\n", "te\x01xt\n\n\u2014 a AAAA\n"],
)
def test_malformed_notes_are_refused(bad):
    _, key = note.parse_vkey(SPEC_VKEY)
    with pytest.raises(note.NoteError):
        note.open_note(bad, name="example.com/foo", public_key=key)


def test_a_checkpoint_round_trips():
    key = nacl.signing.SigningKey(bytes(range(32)))
    text = note.Checkpoint(origin="sill.example/audit/S", size=7, root=bytes(32)).text()
    assert text == f"sill.example/audit/S\n7\n{base64.b64encode(bytes(32)).decode()}\n"
    signed = note.sign(text, name="sill.example/audit/S", signing_key=key)
    body = note.open_note(signed, name="sill.example/audit/S", public_key=bytes(key.verify_key))
    assert note.parse_checkpoint(body) == note.Checkpoint("sill.example/audit/S", 7, bytes(32))


@pytest.mark.parametrize(
    "text",
    ["o\n07\nAAAA\n", "o\n-1\n" + "A" * 44 + "\n", "o\n7\nnot base64\n", "o\n7\n", "o\n7\nAAAA\n"],
)
def test_a_malformed_checkpoint_is_refused(text):
    with pytest.raises(note.NoteError):
        note.parse_checkpoint(text)
