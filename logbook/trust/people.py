"""Who wrote a record, for rules that count people: by key where it is signed, by e-mail where it is not.

An e-mail address is a label anyone can set; a key the committed
allowed-signers file lists is a person. So two records are by the same person
when their signatures share a key or a principal, or when one's e-mail is the
other's e-mail or principal. An approval by the launcher of a run under a
second address, signed with the launcher's key, is still the launcher's; two
approvals by one key under two addresses are one approval. Where neither
record is signed only the e-mails can be compared, and the review queue says so.
A key counts only for the addresses it may sign for (`signers`): one someone
else added for an address that already had a key is no one's until accepted.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from logbook.core.project import Project
from logbook.eventlog.chain import record_hash
from logbook.trust.signatures import SignatureBook, configured_fingerprint
from logbook.trust.signers import Standing, key_standing


@dataclass(frozen=True)
class Who:
    """A person as one record shows them."""

    email: str
    """The e-mail the record names, lower-cased ("" when it names none)."""
    name: str
    fingerprints: frozenset[str] = frozenset()
    """Keys whose valid signature is on the record (only keys the allowed-signers file lists)."""
    principals: frozenset[str] = frozenset()
    """Every principal the allowed-signers file lists for those keys, lower-cased."""
    primary: str | None = None
    """The first principal listed for the first key that signed it: the person, where the record is signed."""

    @property
    def signed(self) -> bool:
        return bool(self.fingerprints)

    @property
    def key(self) -> str:
        """One string per person, for counting distinct reviewers: the signer where signed, else the e-mail."""
        return f"signer:{self.primary}" if self.primary else self.email or self.name.lower()

    def same_person(self, other: Who) -> bool:
        mine = {self.email} | self.principals | self.fingerprints
        theirs = {other.email} | other.principals | other.fingerprints
        return bool((mine & theirs) - {""})


class People:
    """Finds who wrote reviews and launched runs, checking signatures once per command. A context manager."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.book = SignatureBook(project)
        self._standing: Standing | None = None
        self._launchers: dict[str, Who | None] = {}

    def __enter__(self) -> People:
        return self

    def __exit__(self, *exc: object) -> None:
        self.book.__exit__(*exc)

    @property
    def signing(self) -> bool:
        """Whether logbook.yaml turns signing on (else every comparison is by e-mail)."""
        return self.book.enabled

    @property
    def standing(self) -> Standing:
        """Which keys may sign for which addresses (`signers`), worked out once per command."""
        if self._standing is None:
            self._standing = key_standing(self.project, self.book)
        return self._standing

    def _who(self, digest: str | None, email: str, name: str) -> Who:
        # A key someone else added for an address that already had one speaks for no one until accepted.
        signers = self.standing.signers(self.book, digest) if digest and self.book.enabled else []
        return Who(email=email.strip().lower(), name=name,
                   fingerprints=frozenset(s.fingerprint for s in signers),
                   principals=frozenset(p.lower() for s in signers for p in s.principals),
                   primary=signers[0].principal.lower() if signers else None)

    def of_review(self, rec: dict[str, Any]) -> Who:
        """The author of a review record (one file, its own hash)."""
        return self._of_record(rec, "reviewer")

    def of_author(self, rec: dict[str, Any]) -> Who:
        """The author of a one-file record that names its writer as `author` and `email` (an acknowledgement)."""
        return self._of_record(rec, "author")

    def _of_record(self, rec: dict[str, Any], name_key: str) -> Who:
        try:
            digest = record_hash(rec)
        except ValueError:
            digest = None
        return self._who(digest, str(rec.get("email") or ""), str(rec.get(name_key) or ""))

    def launcher(self, run: str) -> Who | None:
        """Who launched `run`: the run record's signer, and the e-mail its `author` names; None without a record."""
        if run not in self._launchers:
            path = self.project.run_dir(run) / "run.json"
            try:
                data = path.read_bytes()
            except OSError:
                self._launchers[run] = None
                return None
            try:
                author = str(json.loads(data).get("author") or "")
            except (ValueError, AttributeError):
                author = ""
            m = re.search(r"<([^<>]+)>\s*$", author)
            self._launchers[run] = self._who(hashlib.sha256(data).hexdigest(), m.group(1) if m else "",
                                             author.split(" <")[0])
        return self._launchers[run]

    def me(self, email: str, name: str) -> Who:
        """Whoever is at the keyboard: git's e-mail, and the key git signs with (before anything is signed)."""
        fp = configured_fingerprint(self.project.root) if self.book.enabled else None
        return Who(email=email.strip().lower(), name=name, fingerprints=frozenset([fp] if fp else []))
