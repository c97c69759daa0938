"""The rules of `logbook/trust/signers.py` on their own: which keys may sign for which address, and how each came in.

The whole path (real keys, real signed commits, a reader's clone) is
tests/test_key_acceptance.py; these pin each rule's edges without git, so a
changed rule fails here by name.
"""

from __future__ import annotations

import base64
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from logbook.trust.signatures import Signer, fingerprint_of_blob
from logbook.core.project import open_project
from logbook.trust.signers import KeyStanding, Standing, _pairs, _settle, key_standing


def _key() -> tuple[str, str]:
    """(`ssh-ed25519 AAAA...`, its fingerprint) of a new key."""
    line = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    return line, fingerprint_of_blob(base64.b64decode(line.split()[1]))


def test_every_principal_of_a_line_gets_the_key_lower_cased_and_options_are_skipped():
    (k1, f1), (k2, f2) = _key(), _key()
    pairs = _pairs([f"Ann@Lab.org,ann@home.org {k1}", f'bo@lab.org namespaces="git" {k2}'])
    assert pairs == {("ann@lab.org", f1): k1, ("ann@home.org", f1): k1, ("bo@lab.org", f2): k2}


def test_a_line_without_a_key_or_with_a_broken_one_names_no_pair_and_the_first_listing_wins():
    (k1, f1), (k2, _) = _key(), _key()
    broken = k2.split()[0] + " not*base64"
    assert _pairs(["", "ann@lab.org", f"ann@lab.org {broken}", "ssh-ed25519 AAAA", ",, " + k1]) == {}
    other = "ssh-ed25519 " + k1.split()[1]  # the same blob under another spelling of its type
    assert _pairs([f"ann@lab.org {k1}", f"ann@lab.org {other} comment"]) == {("ann@lab.org", f1): k1}


def _added(commit: str, prior: list[str], signer: str | None = None) -> dict:
    return {"commit": commit, "prior": prior, "signer": signer}


def test_a_first_key_is_valid_a_holders_addition_too_and_a_strangers_waits():
    added = {("ann", "A"): _added("c1", []), ("ann", "B"): _added("c2", ["A"], "A"),
             ("ann", "X"): _added("c3", ["A", "B"], "X"), ("ann", "Y"): _added("c4", ["A"], None)}
    how, accepted = _settle(added, set(added), [])
    assert how == {("ann", "A"): "first", ("ann", "B"): "holder"} and accepted == {}


def test_a_holder_of_another_address_cannot_add_a_key_for_this_one():
    added = {("bo", "B"): _added("c1", []), ("ann", "A"): _added("c1", []), ("ann", "X"): _added("c2", ["A"], "B")}
    how, _ = _settle(added, set(added), [])
    assert ("ann", "X") not in how


def test_an_acceptance_counts_only_when_a_key_valid_for_that_address_and_still_listed_signed_it():
    added = {("ann", "A"): _added("c1", []), ("ann", "X"): _added("c2", ["A"], "X"), ("bo", "B"): _added("c1", [])}
    head = set(added)

    def acc(principal, fp, signers, path="k/1.json"):
        return {"principal": principal, "fingerprint": fp, "signers": set(signers), "path": path}

    assert _settle(added, head, [acc("ann", "X", {"A"})]) == (
        {("ann", "A"): "first", ("bo", "B"): "first", ("ann", "X"): "accepted"}, {("ann", "X"): "k/1.json"})
    assert ("ann", "X") not in _settle(added, head, [acc("ann", "X", {"X"})])[0]  # the pending key itself
    assert ("ann", "X") not in _settle(added, head, [acc("ann", "X", {"B"})])[0]  # valid, but for bo
    assert ("ann", "X") not in _settle(added, head, [acc("bo", "X", {"A"})])[0]  # an acceptance for bo
    assert ("ann", "X") not in _settle(added, head, [acc("ann", "Y", {"A"})])[0]  # of another key
    retired = head - {("ann", "A")}
    assert ("ann", "X") not in _settle(added, retired, [acc("ann", "X", {"A"})])[0]  # A no longer listed


def test_an_accepted_key_may_accept_the_next_in_any_order_of_the_records():
    added = {("ann", "A"): _added("c1", []), ("ann", "X"): _added("c2", ["A"], None),
             ("ann", "Y"): _added("c3", ["A", "X"], None)}
    accs = [{"principal": "ann", "fingerprint": "Y", "signers": {"X"}, "path": "k/2.json"},
            {"principal": "ann", "fingerprint": "X", "signers": {"A"}, "path": "k/1.json"}]
    how, accepted = _settle(added, set(added), accs)
    assert how[("ann", "Y")] == "accepted" and accepted == {("ann", "X"): "k/1.json", ("ann", "Y"): "k/2.json"}


def test_a_holders_addition_signed_by_a_key_that_became_valid_later_in_the_walk_is_a_holders():
    added = {("ann", "A"): _added("c1", []), ("ann", "X"): _added("c2", ["A"], None),
             ("ann", "Z"): _added("c4", ["A", "X"], "X")}
    accs = [{"principal": "ann", "fingerprint": "X", "signers": {"A"}, "path": "k/1.json"}]
    how, _ = _settle(added, set(added), accs)
    assert how[("ann", "Z")] == "holder"


def test_each_way_a_key_came_in_reads_in_full(snapshot):
    """The sentence `verify` prints for each way a key came in (the words pinned in test_signer_rules.ambr)."""
    k = dict(principal="ann@lab.org", fingerprint="SHA256:x", key="ssh-ed25519 AAAA")
    said = {how: KeyStanding(**k, how=how, added_in="0123456789", added_by="SHA256:a",
                             accepted_in="entries/k/1.json").sentence() for how in ("first", "holder", "accepted")}
    said["pending, from a file no setting names"] = KeyStanding(**k, how="pending").sentence()
    assert said == snapshot
    assert "0123456" in said["first"] and "SHA256:a" in said["holder"] and "entries/k/1.json" in said["accepted"]
    pending = KeyStanding(**k, how="pending")
    assert not pending.valid and all(KeyStanding(**k, how=h).valid for h in ("first", "holder", "accepted"))


class _Book:
    def __init__(self, signers):
        self._signers = signers

    def signers(self, digest):
        return self._signers


def test_a_signature_counts_for_the_addresses_its_key_may_sign_for_and_a_key_valid_for_none_is_left_out():
    st = Standing([KeyStanding("ann@lab.org", "A", "k", "first"), KeyStanding("ann@home.org", "A", "k", "pending"),
                   KeyStanding("bo@lab.org", "B", "k", "pending")])
    assert st.valid_principals("A", ("Ann@Lab.org", "ann@home.org", "cert@ca")) == ("Ann@Lab.org", "cert@ca")
    assert [k.principal for k in st.pending_for("A", ("ann@lab.org", "ann@home.org"))] == ["ann@home.org"]
    assert st.holders("ANN@lab.org") == {"A"} and st.holders("bo@lab.org") == set()
    book = _Book([Signer("ann@home.org", ("ann@home.org", "ann@lab.org"), "A", Path("s/a")),
                  Signer("bo@lab.org", ("bo@lab.org",), "B", Path("s/b"))])
    assert st.signers(book, "d") == [Signer("ann@lab.org", ("ann@lab.org",), "A", Path("s/a"))]


class _Allowed:
    def __init__(self, data):
        self.data = data


class _AllowedBook:
    """What `key_standing` reads of a signature book: HEAD's allowed-signers file, or none."""

    def __init__(self, data):
        self.allowed = None if data is False else _Allowed(data)


def test_heads_allowed_signers_file_is_read_line_by_line_past_comments_blank_lines_and_bad_bytes(logbook_repo):
    (k1, f1), (k2, f2) = _key(), _key()
    data = (f"ann@lab.org {k1}\n   # bo@lab.org {k2}\n\n".encode() + b"\xff\xfe not text\n"
            + f"cy@lab.org   {k2}\n".encode())
    project = open_project(logbook_repo)
    st = key_standing(project, _AllowedBook(data))
    # No commit of this repository listed them, so nothing let them in: each is pending, added nowhere.
    assert [(k.principal, k.fingerprint, k.key, k.how, k.added_in, k.accepted_in) for k in st.keys] == [
        ("ann@lab.org", f1, k1, "pending", None, None), ("cy@lab.org", f2, k2, "pending", None, None)]
    assert key_standing(project, _AllowedBook(None)).keys == []  # signing on, but HEAD holds no file
    assert key_standing(project, _AllowedBook(False)).keys == []  # signing off
