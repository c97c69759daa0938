"""Who may sign for whom: a key listed for an address counts for it only when the address's holder let it in.

Whoever can push can append `bo@lab.example ssh-ed25519 <her own key>` to the
allowed-signers file and sign as Bo from then on. So each (address, key) pair
HEAD's allowed-signers file lists is judged by how it came in, over HEAD's
history (every commit, in topological order, at the allowed-signers path that
commit's own logbook.yaml names):

- **first use**: no earlier commit listed any key for the address; nobody
  holds it yet, so the first key (or keys, in one commit) is valid, as SSH
  trusts a host's first key;
- **added by its holder**: the commit that first listed the pair is signed
  (git's own commit signature, `gpg.format=ssh`, namespace `git`) by a key
  already listed for the address before that commit and valid for it. Who
  added a key is that signature, never the commit's author or committer,
  which anyone sets and a squash-merge replaces;
- **accepted**: a key already valid for the address, and listed for it in
  HEAD's allowed-signers file, signed an acceptance of the new key
  (`logbook signers accept KEY`), one immutable record

      <entries>/key_acceptances/<record id>.json
      {"kind": "key_acceptance", "principal": "bo@lab.example",
       "key": "ssh-ed25519 AAAA...", "fingerprint": "SHA256:...",
       "accepted_by": "Bo", "email": "bo@lab.example", "v", "ts", "id", "hash"}

  signed as every record is (`signatures/<hash>/<fp12>.sig`). A record, unlike
  a commit signature, survives a rebase or a squash-merge;
- **pending**: anything else. Its signatures count for no one: `verify` says
  which key, for which address, added in which commit by whose signature (a
  warning; exit 4 under `signing.require`).

An address whose keys were all removed still had one: a key listed for it
later is pending until a holder accepts it (or, for a lost key, a teammate
approves an acknowledgement of the finding, `logbook acknowledge`). Whoever
rewrites history from its first commit chooses every "first use": against that
a reader pins the allowed-signers file (`logbook pin`).
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from logbook.core import statecache
from logbook.core.errors import NotFoundError, RefusedError
from logbook.core.identity import signing_identity
from logbook.core.project import Project
from logbook.eventlog import chain
from logbook.eventlog.chain import record_hash
from logbook.eventlog.files import read_record, record_files, write_record
from logbook.records import gitbind
from logbook.trust.setting_history import allowed_entries, commit_signers, watched_paths
from logbook.trust.signatures import (SignatureBook, Signer, configured_fingerprint, fingerprint_of_blob, fp12_of,
                                      sign_digest)

KIND = "key_acceptance"
ACCEPTANCES_DIR = "key_acceptances"
"""Under the entries folder: one acceptance record a file."""
_KEY_TYPES = ("ssh-", "ecdsa-", "sk-")
Pair = tuple[str, str]
"""(address lower-cased, key fingerprint)."""


@dataclass(frozen=True)
class KeyStanding:
    """One (address, key) pair of HEAD's allowed-signers file, and whether the key may sign for the address."""

    principal: str
    fingerprint: str
    key: str
    """`keytype base64`, as the allowed-signers line lists it."""
    how: str
    """first (first use of the address) | holder (its commit is signed by the address's key) | accepted | pending"""
    added_in: str | None = None
    """The commit that first listed the pair."""
    added_by: str | None = None
    """The fingerprint of the SSH key that signed that commit; None: not signed by an SSH key (or not looked up)."""
    accepted_in: str | None = None
    """The acceptance record that made it valid, relative to the repository root."""

    @property
    def valid(self) -> bool:
        return self.how != "pending"

    def sentence(self) -> str:
        """How the key came in, as `verify` prints it."""
        where = f"commit {self.added_in[:7]}" if self.added_in else "a file HEAD's logbook.yaml does not name"
        by = f"signed by key {self.added_by}" if self.added_by else "not signed by any SSH key"
        if self.how == "first":
            return f"first key of {self.principal}, added in {where}"
        if self.how == "holder":
            return f"added in {where}, {by}, a key {self.principal} already had"
        if self.how == "accepted":
            return f"added in {where}, accepted by {self.principal} in {self.accepted_in}"
        return (f"added in {where}, {by}, while {self.principal} already had a key: not valid for "
                f"{self.principal} until a key {self.principal} holds accepts it")


@dataclass
class Standing:
    """HEAD's allowed signers, pair by pair: which keys may sign for which addresses."""

    keys: list[KeyStanding] = field(default_factory=list)

    def _get(self, principal: str, fingerprint: str) -> KeyStanding | None:
        return next((k for k in self.keys if (k.principal, k.fingerprint) == (principal.lower(), fingerprint)), None)

    def valid_principals(self, fingerprint: str, principals: tuple[str, ...]) -> tuple[str, ...]:
        """The principals the key may sign for; one the walk did not see (a certificate's) is ssh-keygen's word."""
        return tuple(p for p in principals if (k := self._get(p, fingerprint)) is None or k.valid)

    def pending_for(self, fingerprint: str, principals: tuple[str, ...]) -> list[KeyStanding]:
        return [k for p in principals if (k := self._get(p, fingerprint)) is not None and not k.valid]

    def holders(self, principal: str) -> set[str]:
        """The fingerprints valid for an address (empty: no key holds it)."""
        return {k.fingerprint for k in self.keys if k.principal == principal.lower() and k.valid}

    def signers(self, book: SignatureBook, digest: str) -> list[Signer]:
        """`book.signers`, each under the addresses its key may sign for; a key valid for none is left out."""
        out = []
        for s in book.signers(digest):
            valid = self.valid_principals(s.fingerprint, s.principals)
            if valid:
                out.append(Signer(valid[0], valid, s.fingerprint, s.path))
        return out


def acceptances_dir(project: Project) -> Path:
    return project.entries / ACCEPTANCES_DIR


def key_standing(project: Project, book: SignatureBook) -> Standing:
    """Judge every pair of HEAD's allowed-signers file (see the module's docstring); empty when signing is off."""
    if book.allowed is None or book.allowed.data is None:
        return Standing()
    head = _pairs([" ".join(ln.split()) for ln in book.allowed.data.decode("utf-8", "replace").splitlines()
                   if ln.strip() and not ln.lstrip().startswith("#")])
    added = _added(project)
    how, accepted_in = _settle(added, set(head), _acceptances(project, book))
    keys = []
    for pair, key in head.items():
        a = added.get(pair) or {}  # none: a file HEAD's own logbook.yaml does not name, so nothing let it in
        keys.append(KeyStanding(pair[0], pair[1], key, how.get(pair, "pending"), a.get("commit"), a.get("signer"),
                                accepted_in.get(pair)))
    return Standing(keys)


def _settle(added: dict[Pair, dict], head: set[Pair], acceptances: list[dict]) -> tuple[dict, dict]:
    """How each pair ever listed became valid, worked out until nothing changes (an accepted key may accept)."""
    how = {pair: "first" for pair, a in added.items() if not a["prior"]}
    accepted_in: dict[Pair, str] = {}
    changed = True
    while changed:
        changed = False
        for pair, a in added.items():
            if pair in how:
                continue
            principal = pair[0]
            if a["signer"] in a["prior"] and (principal, a["signer"]) in how:
                how[pair], changed = "holder", True
                continue
            for acc in acceptances:
                if (acc["principal"], acc["fingerprint"]) != pair:
                    continue
                # The accepting key is valid for the address (so never the pending key itself) and still holds it.
                if any((principal, s) in how and (principal, s) in head for s in acc["signers"]):
                    how[pair], accepted_in[pair], changed = "accepted", acc["path"], True
                    break
    return how, accepted_in


def _acceptances(project: Project, book: SignatureBook) -> list[dict]:
    """Every intact acceptance record HEAD holds, with the keys whose valid signature it carries."""
    folder = acceptances_dir(project)
    # As for the allowed-signers file, an acceptance not committed yet grants nothing: no one else can see it.
    committed = set(gitbind.tree_files(project.root, "HEAD", folder.relative_to(project.root).as_posix())) \
        if folder.is_dir() and gitbind.head_commit(project.root) else set()
    out = []
    for path in record_files(folder):
        rec = read_record(path)
        if path.relative_to(project.root).as_posix() not in committed or rec is None or rec.get("kind") != KIND:
            continue
        try:
            intact = record_hash(rec) == rec.get("hash")
        except ValueError:
            intact = False
        if not intact:
            continue  # verify reports a damaged record
        signers = {c.fingerprint for c in book.checks(str(rec["hash"]))
                   if c.valid and c.fingerprint and fp12_of(c.fingerprint) == c.path.stem}
        out.append({"principal": str(rec.get("principal") or "").lower(), "fingerprint": rec.get("fingerprint"),
                    "signers": signers, "path": path.relative_to(project.root).as_posix()})
    return out


# --- history ----------------------------------------------------------------------------------

def _added(project: Project) -> dict[Pair, dict]:
    """pair -> {commit that first listed it, the keys listed for its address before, that commit's signer}.

    History below HEAD never changes: the answer for one HEAD is kept under .logbook/.
    """
    root = project.root
    head = gitbind.head_commit(root)
    if head is None:
        return {}
    paths = watched_paths(project)
    key = f"{head}:{','.join(paths)}"
    kept = statecache.load(project, "key-history.json")
    try:
        if kept.get("key") == key:
            return {tuple(p.split(" ", 1)): a for p, a in kept["added"].items()}
    except (TypeError, KeyError, AttributeError):
        pass
    added = _walk(project, paths)
    statecache.save(project, "key-history.json", {"key": key, "added": {" ".join(p): a for p, a in added.items()}})
    return added


def _walk(project: Project, paths: list[str]) -> dict[Pair, dict]:
    root = project.root
    # Every commit, merges too, oldest first in topological order: a commit date is whatever its author set.
    out = gitbind.git(root, "log", "--full-history", "--topo-order", "--reverse", "--format=%H %P", "HEAD",
                      "--", *paths)
    rows = [line.split() for line in out.splitlines() if line.strip()]
    entries = allowed_entries(project, {c for row in rows for c in row})
    seen: dict[str, list[str]] = {}
    added: dict[Pair, dict] = {}
    for commit, *parents in rows:
        now = _pairs(list(entries.get(commit, ())))
        before = {p for parent in parents for p in _pairs(list(entries.get(parent, ())))}
        for principal, fp in (pair for pair in now if pair not in before and pair not in added):
            added[(principal, fp)] = {"commit": commit, "prior": list(seen.get(principal, [])), "signer": None}
        for principal, fp in now:
            if fp not in seen.setdefault(principal, []):
                seen[principal].append(fp)
    # Only a key added for an address that already had one needs to know who signed its commit.
    signers = commit_signers(root, sorted({a["commit"] for a in added.values() if a["prior"]}))
    for a in added.values():
        a["signer"] = signers.get(a["commit"])
    return added


def _pairs(entries: list[str]) -> dict[Pair, str]:
    """(address, fingerprint) -> `keytype base64`, for every principal of every line that names a key."""
    out: dict[Pair, str] = {}
    for entry in entries:
        tokens = entry.split()
        i = next((i for i in range(1, len(tokens) - 1) if tokens[i].startswith(_KEY_TYPES)), None)
        if not tokens or i is None:
            continue
        try:
            fp = fingerprint_of_blob(base64.b64decode(tokens[i + 1], validate=True))
        except ValueError:
            continue
        for principal in tokens[0].split(","):
            if principal:
                out.setdefault((principal.lower(), fp), f"{tokens[i]} {tokens[i + 1]}")
    return out


# --- accepting a key --------------------------------------------------------------------------

def accept_key(project: Project, key: str, principal: str | None = None) -> dict[str, Any]:
    """Write and sign an acceptance of `key` (a fingerprint `SHA256:...`) for the addresses it is pending for.

    Only a key already valid for the address may accept (git's signing key
    here); `principal` narrows it to one address. Refused, with nothing
    written, when there is nothing to accept or the key here may not.
    """
    if project.config.signing is None:
        raise RefusedError("logbook.yaml has no `signing:` block: no key is checked, so none needs accepting")
    mine = configured_fingerprint(project.root)
    if mine is None:
        raise RefusedError("no signing key: git's gpg.format is not ssh, or user.signingkey is not set",
                           hint="git config gpg.format ssh && git config user.signingkey ~/.ssh/id_ed25519")
    with SignatureBook(project) as book:
        standing = key_standing(project, book)
    listed = [k for k in standing.keys if k.fingerprint == key.strip()]
    if not listed:
        raise NotFoundError(f"{key} is no key of {project.config.signing.allowed_signers} as HEAD commits it",
                            hint="give the fingerprint `logbook verify` names (SHA256:...); "
                                 "`ssh-keygen -lf KEY.pub` prints a key's")
    pending = [k for k in listed if not k.valid and (principal is None or k.principal == principal.lower())]
    if not pending:
        raise RefusedError(f"{key} is already valid for {', '.join(k.principal for k in listed)}: "
                           "nothing was recorded")
    mine_for = [k for k in pending if mine in standing.holders(k.principal)]
    if not mine_for:
        raise RefusedError(f"your signing key {mine} is not valid for {', '.join(k.principal for k in pending)}, "
                           "so it cannot accept another key for it", hint=(
                               f"{pending[0].principal} accepts it, signing with a key already valid for that "
                               "address: `logbook signers accept KEY`"))
    ident = signing_identity(project.root, "a key acceptance")
    written = []
    for k in mine_for:
        rec = {"kind": KIND, "principal": k.principal, "key": k.key, "fingerprint": k.fingerprint,
               "accepted_by": ident.name, "email": ident.email}
        done = write_record(acceptances_dir(project), rec, ts=chain.utc_now())
        signed = sign_digest(project, done["hash"], what=f"key acceptance {done['id']}")
        if signed.path is None:
            raise RefusedError(signed.warning or "the acceptance could not be signed")
        written.append({**done, "path": (acceptances_dir(project) / f"{done['id']}.json")
                        .relative_to(project.root).as_posix()})
    return {"accepted": written}


def standing_dicts(standing: Standing) -> list[dict[str, Any]]:
    return [asdict(k) for k in standing.keys]
