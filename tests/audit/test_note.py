"""C2SP signed notes and checkpoints: the spec's own example verifies, and what is not a
signature by the expected key is refused (or, for someone else's signature, ignored)."""

from __future__ import annotations

import base64

import nacl.signing
import pytest

from audit import note, verify_export

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


# golang.org/x/mod/sumdb/note's TestOpen (note_test.go @ fe2ec04f): Peter Neumann's key signs
# this text, and Enoch Root's signature beside it is someone else's, to be ignored.
GO_PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_PETER_SIG = "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
GO_ENOCH_SIG = "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"


def test_the_go_reference_notes_verify_ignoring_the_other_signature():
    name, key = note.parse_vkey(GO_PETER_VKEY)
    signed = f"{GO_TEXT}\n{GO_PETER_SIG}{GO_ENOCH_SIG}"
    assert note.open_note(signed, name=name, public_key=key) == GO_TEXT


@pytest.mark.parametrize(
    "other_signer",
    [
        "Enoch\x01Root",  # signed-note: no ASCII control characters anywhere in a note
        "Enoch\x1bRoot",
        "Enoch\u00a0Root",  # key names: no Unicode spaces ...
        "Enoch\u2003Root",
        "Enoch+Root",  # ... and no plus
    ],
)
def test_a_malformed_signature_line_refuses_the_note_even_if_it_is_someone_elses(other_signer):
    # c2sp.org/signed-note: "Signed notes MUST be valid UTF-8 and MUST NOT contain any ASCII
    # control characters (those below U+0020) other than newline." and "Key names MUST be
    # non-empty and MUST NOT contain any Unicode spaces or plus (U+002B) characters." A line
    # breaking either is not a signature by an unknown key to skip: the note is malformed, as
    # sumdb/note's Open says ("malformed note").
    name, key = note.parse_vkey(GO_PETER_VKEY)
    signed = f"{GO_TEXT}\n{GO_PETER_SIG}{GO_ENOCH_SIG.replace('EnochRoot', other_signer)}"
    with pytest.raises(note.NoteError, match=r"malformed|control"):
        note.open_note(signed, name=name, public_key=key)


@pytest.mark.parametrize("other_signer", ["Enoch\x01Root", "Enoch\u00a0Root", "Enoch+Root"])
def test_the_standalone_verifier_refuses_a_malformed_signature_line_too(other_signer):
    key = nacl.signing.SigningKey(bytes(range(32)))
    origin = "sill.example/audit/S"
    text = note.Checkpoint(origin=origin, size=7, root=bytes(32)).text()
    signed = note.sign(text, name=origin, signing_key=key)
    keys = {"k": key.verify_key}
    assert verify_export.open_checkpoint(signed, origin=origin, keys=keys) == (7, bytes(32))
    with pytest.raises(ValueError, match=r"malformed|control"):
        verify_export.open_checkpoint(
            signed + GO_ENOCH_SIG.replace("EnochRoot", other_signer), origin=origin, keys=keys
        )
    with pytest.raises(ValueError, match="malformed"):  # sumdb/note: len(sig) < 5 is malformed
        verify_export.open_checkpoint(signed + "\u2014 EnochRoot AAAA\n", origin=origin, keys=keys)


# c2sp.org/tlog-checkpoint's example text (C2SP/C2SP tlog-checkpoint.md @ 5ba5ee83), and what
# the spec's note-text rules make of variants of it: the tree size is "the ASCII decimal
# representation of the number of leaves in the tree, with no leading zeroes", and "Extension
# lines, if any, MUST be non-empty".
SOFA = "example.com/behind-the-sofa"
SOFA_ROOT = "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I="


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        (f"{SOFA}\n20852163\n{SOFA_ROOT}\n", True),
        (f"{SOFA}\n20852163\n{SOFA_ROOT}\nan extension line\n", True),
        (f"{SOFA}\n020852163\n{SOFA_ROOT}\n", False),
        (f"{SOFA}\n\u0662\u0660\u0668\u0665\u0662\u0661\u0666\u0663\n{SOFA_ROOT}\n", False),
        (f"{SOFA}\n20852163\n{SOFA_ROOT}\n\nan extension line\n", False),
    ],
)
def test_both_verifiers_read_a_checkpoints_text_as_the_spec_says(text, valid):
    key = nacl.signing.SigningKey(bytes(range(32)))
    signed = note.sign(text, name=SOFA, signing_key=key)
    root = base64.b64decode(SOFA_ROOT)
    keys = {"k": key.verify_key}
    if valid:
        opened = note.open_note(signed, name=SOFA, public_key=bytes(key.verify_key))
        assert note.parse_checkpoint(opened) == note.Checkpoint(SOFA, 20852163, root)
        assert verify_export.open_checkpoint(signed, origin=SOFA, keys=keys) == (20852163, root)
        return
    with pytest.raises(note.NoteError):
        note.parse_checkpoint(note.open_note(signed, name=SOFA, public_key=bytes(key.verify_key)))
    with pytest.raises(ValueError, match="checkpoint"):
        verify_export.open_checkpoint(signed, origin=SOFA, keys=keys)


def test_a_checkpoint_cosigned_by_fifteen_post_quantum_witnesses_is_accepted():
    # c2sp.org/signed-note: verifiers "MUST accept at least up to 16 signatures. Remember that
    # post-quantum signatures can be up to nearly 5kB in size." tlog-cosignature's ML-DSA-44
    # cosignature is a 4-byte key id, an 8-byte timestamp and a 2420-byte signature; tlog-
    # checkpoint says logs and witnesses SHOULD use it. Sill's signature and fifteen of those
    # (and even fifteen of nearly 5 kB) must not be refused for the note's size.
    key = nacl.signing.SigningKey(bytes(range(32)))
    origin = "sill.example/audit/01JDEMOSITE00000000000MAIN"
    text = note.Checkpoint(origin=origin, size=7, root=bytes(32)).text()
    for signature_bytes in (4 + 8 + 2420, 4 + 4990):
        cosignature = base64.b64encode(bytes(signature_bytes)).decode()
        witnesses = "".join(f"\u2014 witness-{i}.example/w {cosignature}\n" for i in range(15))
        signed = note.sign(text, name=origin, signing_key=key) + witnesses
        assert signed.count("\u2014") == 16
        opened = note.open_note(signed, name=origin, public_key=bytes(key.verify_key))
        assert opened == text
        assert verify_export.open_checkpoint(signed, origin=origin, keys={"k": key.verify_key}) == (
            7,
            bytes(32),
        )


def test_a_checkpoint_with_a_bad_signature_by_one_of_sills_keys_is_refused(monkeypatch):
    # c2sp.org/signed-note: "If the key name and ID match a known key, verifiers MUST verify
    # the signature. If a signature from a known key fails to verify, clients SHOULD reject the
    # whole note." With two audit keys (a rotation), a note holding a good signature by one and
    # a bad one by the other is refused, as verify_export.py and sumdb/note's Open refuse it.
    from audit import checkpoints, keys

    first = nacl.signing.SigningKey(bytes(range(32)))
    second = nacl.signing.SigningKey(bytes(range(1, 33)))
    windows = {
        k: keys.KeyWindow(k, bytes(s.verify_key), None, None)
        for k, s in (("sill-first", first), ("sill-second", second))
    }
    monkeypatch.setattr(keys, "key_windows", lambda: windows)
    origin = checkpoints.origin_for("S")
    text = note.Checkpoint(origin=origin, size=7, root=bytes(32)).text()
    good = note.sign(text, name=origin, signing_key=first)
    assert checkpoints.open_checkpoint(good, site_id="S").key_id == "sill-first"
    bad_line = note.sign("another text\n", name=origin, signing_key=second).split("\n\n")[-1]
    both = good + bad_line
    with pytest.raises(note.NoteError, match="does not verify"):
        checkpoints.open_checkpoint(both, site_id="S")
    with pytest.raises(ValueError, match="does not verify"):
        verify_export.open_checkpoint(
            both,
            origin=origin,
            keys={k: nacl.signing.VerifyKey(w.public_key) for k, w in windows.items()},
        )
