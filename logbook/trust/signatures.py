"""Signed identity: SSH signatures over records, checked against the allowed-signers file HEAD commits.

A hash chain and git history say that nothing changed since someone fetched
it; they do not say who wrote a record: anyone can set `user.email`. A
signature by a key the team listed does. The format is git's own SSH signing
(`ssh-keygen -Y sign`), so a team that already signs commits needs nothing new:
the key is git's `user.signingkey` (a key file, or a `key::` literal served by
ssh-agent) when `gpg.format` is `ssh`.

What is signed is one line naming the record's digest, the hash `verify`
already computes for it (a preregistration's or amendment's `Logbook-Sha256`,
the sha256 of a run record's bytes, a review's or scorecard's own `hash`):

    logbook-record sha256:<64 hex>

in the `logbook-record` namespace, so a signature made for anything else
(a commit, a file) never passes for a record's. Each signature is a record
of its own, written once and committed by `logbook commit`:

    <entries>/signatures/<digest>/<key fingerprint, 12 hex>.sig

(the armored `SSH SIGNATURE` that `ssh-keygen` writes). Keying the folder by
digest keeps signatures out of every folder whose files another reader takes
for records of its kind, lets several people co-sign one record, and lets a
reader find a record's signatures from its hash alone.

A signature is checked with `ssh-keygen -Y find-principals` and `-Y verify`
against the allowed-signers file as HEAD commits it (read from git, never from
the working tree: an uncommitted edit grants nothing). Results are cached under
`.logbook/` by (allowed-signers blob, signature bytes, digest), so a warm
`verify` runs no `ssh-keygen` at all.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from logbook.core import statecache
from logbook.core.errors import RefusedError
from logbook.core.fsutil import atomic_create_bytes
from logbook.core.project import Project

NAMESPACE = "logbook-record"
"""The `ssh-keygen -Y` namespace of record signatures (git's own commit signatures use `git`)."""
SIGNATURES_DIR = "signatures"
"""Under the entries folder: `signatures/<digest>/<fp12>.sig`."""
_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
_FP12_RE = re.compile(r"^[0-9a-f]{12}$")
_TIMEOUT_S = 30
_TIMED_OUT = f"ssh-keygen did not answer within {_TIMEOUT_S} s"


@dataclass(frozen=True)
class Signer:
    """Who made one valid signature over a record, as the committed allowed-signers file names them."""

    principal: str
    """The first principal the allowed-signers file lists for the key (usually an e-mail address)."""
    principals: tuple[str, ...]
    """Every principal listed for the key: one person who uses several addresses."""
    fingerprint: str
    """The key's SHA256 fingerprint as `ssh-keygen -l` prints it (`SHA256:...`)."""
    path: Path
    """The signature file."""

    @property
    def fp12(self) -> str:
        return fp12_of(self.fingerprint)


@dataclass(frozen=True)
class SignatureCheck:
    """What checking one signature file against one digest found."""

    path: Path
    digest: str
    fingerprint: str | None
    """The key that made it (None when the file is no SSH signature)."""
    principals: tuple[str, ...]
    """Principals the committed allowed-signers file lists for that key (empty: an unknown key)."""
    valid: bool
    """True when the signature is good for the digest's line by that key, in the `logbook-record` namespace."""
    why: str = ""
    """Why it is not valid, in words, when it is not."""


@dataclass(frozen=True)
class SignOutcome:
    """What signing a record did."""

    path: Path | None
    """The signature file written (or already there); None when nothing was signed."""
    fingerprint: str | None = None
    warning: str | None = None
    """Why the record was left unsigned although a key is configured."""


# --- the signed line and the files -----------------------------------------------------------

def message(digest_hex: str) -> bytes:
    """The bytes signed for a record with this digest."""
    return f"{NAMESPACE} sha256:{digest_hex}\n".encode("ascii")


def signatures_root(project: Project) -> Path:
    return project.entries / SIGNATURES_DIR


def signature_files(project: Project, digest_hex: str) -> list[Path]:
    """The signature files kept for a digest, in name order."""
    folder = signatures_root(project) / digest_hex
    if not _DIGEST_RE.match(digest_hex) or not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix == ".sig" and p.is_file())


def all_signature_files(project: Project) -> list[tuple[str, Path]]:
    """(digest folder name, file) of every file under `signatures/`, whatever its name (verify judges them)."""
    root = signatures_root(project)
    if not root.is_dir():
        return []
    return sorted((d.name, p) for d in root.iterdir() if d.is_dir() for p in d.iterdir() if p.is_file())


def fp12_of(fingerprint: str) -> str:
    """`SHA256:<base64>` -> the first 12 hex digits of the same hash (a file name)."""
    raw = base64.b64decode(fingerprint.removeprefix("SHA256:") + "=" * (-len(fingerprint) % 4))
    return raw.hex()[:12]


def signature_key(armored: bytes) -> bytes | None:
    """The public key blob inside an armored SSH signature (the SSHSIG format), or None when it is not one."""
    text = armored.decode("ascii", "replace")
    m = re.search(r"-----BEGIN SSH SIGNATURE-----(.*?)-----END SSH SIGNATURE-----", text, re.S)
    if not m:
        return None
    try:
        blob = base64.b64decode("".join(m.group(1).split()), validate=True)
    except ValueError:
        return None
    if not blob.startswith(b"SSHSIG") or len(blob) < 14:
        return None
    size = int.from_bytes(blob[10:14], "big")  # after the magic and a uint32 version: string publickey
    key = blob[14:14 + size]
    return key if len(key) == size and size else None


def fingerprint_of_blob(key_blob: bytes) -> str:
    """The `SHA256:...` fingerprint of a public key blob, as `ssh-keygen -l` prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key_blob).digest()).decode().rstrip("=")


# --- signing ---------------------------------------------------------------------------------

def _git_config(root: Path, key: str) -> str:
    try:
        r = subprocess.run(["git", "config", "--get", key], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def configured_key(root: Path) -> str | None:
    """git's `user.signingkey` when `gpg.format` is `ssh` (a path, or a `key::` literal); None otherwise."""
    if _git_config(root, "gpg.format").lower() != "ssh":
        return None
    return _git_config(root, "user.signingkey") or None


def configured_fingerprint(root: Path) -> str | None:
    """The fingerprint of the key records made here are signed with, without signing anything."""
    key = configured_key(root)
    if key is None:
        return None
    if key.startswith("key::"):
        parts = key[5:].split()
        try:
            return fingerprint_of_blob(base64.b64decode(parts[1])) if len(parts) > 1 else None
        except ValueError:
            return None
    r = _run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(_key_path(root, key))])
    m = re.search(r"SHA256:[A-Za-z0-9+/]+", r.stdout.decode("utf-8", "replace")) if r.returncode == 0 else None
    return m.group(0) if m else None


def _key_path(root: Path, key: str) -> Path:
    path = Path(os.path.expanduser(key))
    return path if path.is_absolute() else root / path


def _run(args: list[str], data: bytes | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, input=data, capture_output=True, timeout=_TIMEOUT_S,
                              stdin=None if data is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise RefusedError("ssh-keygen is not installed or not on PATH: records cannot be signed or checked",
                           hint="install OpenSSH's client tools (ssh-keygen 8.9 or later)") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, b"", f"ssh-keygen took over {_TIMEOUT_S} s".encode())


def good_signature_key(data: bytes, armored: bytes, namespace: str) -> str | None:
    """The fingerprint of the key that made `armored`, when it is a good signature of `data` in `namespace`.

    Who holds the key is not asked (`ssh-keygen -Y check-novalidate`): the
    caller compares the fingerprint with the keys it trusts for the purpose.
    """
    blob = signature_key(armored)
    if blob is None:
        return None
    with tempfile.TemporaryDirectory(prefix="logbook-check-") as tmp:
        sig = Path(tmp) / "data.sig"
        sig.write_bytes(armored)
        r = _run(["ssh-keygen", "-Y", "check-novalidate", "-n", namespace, "-s", str(sig)], data)
    return fingerprint_of_blob(blob) if r.returncode == 0 else None


def sign_digest(project: Project, digest_hex: str, *, what: str) -> SignOutcome:
    """Sign a record's digest with git's SSH signing key where logbook.yaml turns signing on; never raises for a
    bad key.

    `what` names the record in a warning ("preregistration x"). Without
    `signing:` nothing is signed (a key set up for commits alone writes no
    files here). With it but no key, or a key that fails (missing file, no
    agent), the record is left unsigned with a warning: it is already written,
    and losing it would be worse; `logbook sign` signs it later.
    """
    if not _DIGEST_RE.match(digest_hex):
        raise ValueError(f"not a sha256 digest: {digest_hex!r}")
    if project.config.signing is None:
        return SignOutcome(None)
    key = configured_key(project.root)
    if key is None:
        return SignOutcome(None, warning=f"{what} was recorded unsigned: git has no SSH signing key (set "
                                         "`git config gpg.format ssh` and `git config user.signingkey KEY`, "
                                         "then `logbook sign` it)")
    with tempfile.TemporaryDirectory(prefix="logbook-sign-") as tmp:
        if key.startswith("key::"):  # a public key literal: the private half is in ssh-agent, as for git
            key_file = Path(tmp) / "key.pub"
            key_file.write_text(key[5:].strip() + "\n")
        else:
            key_file = _key_path(project.root, key)
        r = _run(["ssh-keygen", "-Y", "sign", "-q", "-n", NAMESPACE, "-f", str(key_file)], message(digest_hex))
    blob = signature_key(r.stdout) if r.returncode == 0 else None
    if blob is None:
        why = r.stderr.decode("utf-8", "replace").strip().splitlines()
        return SignOutcome(None, warning=f"{what} was recorded unsigned: ssh-keygen could not sign with "
                                         f"user.signingkey {key!r} ({why[-1] if why else 'exit ' + str(r.returncode)})")
    fingerprint = fingerprint_of_blob(blob)
    path = signatures_root(project) / digest_hex / f"{fp12_of(fingerprint)}.sig"
    try:
        atomic_create_bytes(path, r.stdout)
    except FileExistsError:
        pass  # this key signed this record before: one signature per key is enough
    return SignOutcome(path, fingerprint)


def sign_record(project: Project, digest_hex: str, *, what: str) -> list[str]:
    """`sign_digest`, as the warnings a writer passes on (empty when signed or when signing is off)."""
    out = sign_digest(project, digest_hex, what=what)
    return [out.warning] if out.warning else []


# --- checking --------------------------------------------------------------------------------

@dataclass(frozen=True)
class AllowedSigners:
    """The allowed-signers file as HEAD commits it."""

    path: str
    """Relative to the repository root, as logbook.yaml names it."""
    data: bytes | None
    """Its bytes in HEAD; None when HEAD has no such file."""
    blob: str
    """Its blob id (the cache key); "" when absent."""


def committed_allowed_signers(project: Project) -> AllowedSigners | None:
    """The allowed-signers file HEAD commits, or None when `signing:` is off."""
    signing = project.config.signing
    if signing is None:
        return None
    path = signing.allowed_signers
    r = subprocess.run(["git", "rev-parse", "-q", "--verify", f"HEAD:{path}"], cwd=project.root,
                       capture_output=True, text=True)
    blob = r.stdout.strip() if r.returncode == 0 else ""
    if not blob:
        return AllowedSigners(path, None, "")
    data = subprocess.run(["git", "cat-file", "blob", blob], cwd=project.root, capture_output=True).stdout
    return AllowedSigners(path, data, blob)


def _plain_principals(allowed: bytes, key_blob: bytes) -> list[str] | None:
    """The principals of the lines listing exactly this key with no options, in file order; None when a line
    names the key with options (or none names it plainly): then `ssh-keygen -Y find-principals` decides."""
    b64 = base64.b64encode(key_blob).decode()
    out: list[str] = []
    for line in allowed.decode("utf-8", "replace").splitlines():
        tokens = line.split()
        if not tokens or tokens[0].startswith("#") or b64 not in tokens:
            continue
        if tokens.index(b64) != 2:
            return None  # options between the principals and the key (namespaces=, valid-before=, cert-authority)
        out += [p for p in tokens[0].split(",") if p]
    return out or None


_CACHE = "signatures-cache.json"


class _Checker:
    """Checks signature files against one allowed-signers version, remembering answers under `.logbook/`."""

    def __init__(self, project: Project, allowed: AllowedSigners) -> None:
        self.project, self.allowed = project, allowed
        loaded = statecache.load(project, _CACHE)
        self._cache: dict = loaded if isinstance(loaded, dict) and loaded.get("blob") == allowed.blob else {}
        self._cache.setdefault("blob", allowed.blob)
        self._cache.setdefault("checked", {})
        self._dirty = False
        self._tmp: tempfile.TemporaryDirectory | None = None

    def check(self, path: Path, digest_hex: str) -> SignatureCheck:
        try:
            data = path.read_bytes()
        except OSError as e:
            return SignatureCheck(path, digest_hex, None, (), False, f"it cannot be read ({e.strerror})")
        blob = signature_key(data)
        if blob is None:
            return SignatureCheck(path, digest_hex, None, (), False, "it is not an SSH signature")
        hit = self._cached(data, digest_hex)
        if hit is None:
            hit = self._remember(data, digest_hex, self._ssh_check(data, blob, digest_hex))
        principals, valid, why = tuple(hit[0]), bool(hit[1]), str(hit[2])
        return SignatureCheck(path, digest_hex, fingerprint_of_blob(blob), principals, valid, why)

    def prefetch(self, pairs: list[tuple[Path, str]]) -> None:
        """Check many (signature file, digest) pairs at once: each check is an `ssh-keygen` process, so a
        cold cache is filled on every core instead of one."""
        todo = []
        for path, digest in pairs:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            blob = signature_key(data)
            if blob is not None and self._cached(data, digest) is None:
                todo.append((data, blob, digest))
        if len(todo) < 2:
            return
        from concurrent.futures import ThreadPoolExecutor

        self._tmpdir()  # made once, before the threads: none may see the folder without its allowed-signers file
        with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
            answers = list(pool.map(lambda t: self._ssh_check(*t), todo))
        for (data, _, digest), answer in zip(todo, answers):
            self._remember(data, digest, answer)

    def _cached(self, data: bytes, digest_hex: str) -> list | None:
        hit = self._cache["checked"].get(f"{hashlib.sha256(data).hexdigest()}:{digest_hex}")
        return hit if isinstance(hit, list) and len(hit) == 3 else None

    def _remember(self, data: bytes, digest_hex: str, answer: tuple[list[str], bool, str]) -> list:
        if answer[2] != _TIMED_OUT:  # a verdict is kept; an ssh-keygen that hung is asked again next time
            self._cache["checked"][f"{hashlib.sha256(data).hexdigest()}:{digest_hex}"] = list(answer)
            self._dirty = True
        return list(answer)

    def _ssh_check(self, data: bytes, key_blob: bytes, digest_hex: str) -> tuple[list[str], bool, str]:
        """(principals of the key, whether the signature is good, why not): what `ssh-keygen -Y` says."""
        if self.allowed.data is None:
            return [], False, f"{self.allowed.path} is not committed, so no key is allowed"
        folder = Path(self._tmpdir())
        sig = folder / f"{hashlib.sha256(data).hexdigest()}.sig"  # one file per signature: checks run in threads
        sig.write_bytes(data)
        allowed = folder / "allowed_signers"
        principals = _plain_principals(self.allowed.data, key_blob)
        if principals is None:  # options, certificates: let ssh-keygen find who the key belongs to
            found = _run(["ssh-keygen", "-Y", "find-principals", "-s", str(sig), "-f", str(allowed)])
            if found.returncode == 124:
                return [], False, _TIMED_OUT
            principals = [p for p in found.stdout.decode("utf-8", "replace").splitlines() if p.strip()] \
                if found.returncode == 0 else []
        if not principals:
            return [], False, f"its key is not in {self.allowed.path} as committed"
        # The verdict is ssh-keygen's: the key bound to that principal, the namespace, the signature itself.
        ok = _run(["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", principals[0], "-n", NAMESPACE,
                   "-s", str(sig)], message(digest_hex))
        if ok.returncode == 124:
            return principals, False, _TIMED_OUT
        if ok.returncode != 0:
            return principals, False, "it is not a good signature of this record's digest"
        return principals, True, ""

    def _tmpdir(self) -> str:
        if self._tmp is None:
            tmp = tempfile.TemporaryDirectory(prefix="logbook-verify-")
            (Path(tmp.name) / "allowed_signers").write_bytes(self.allowed.data or b"")
            self._tmp = tmp  # published only once the file is in it
        return self._tmp.name

    def close(self) -> None:
        if self._dirty:
            statecache.save(self.project, _CACHE, self._cache)
        if self._tmp is not None:
            self._tmp.cleanup()


class SignatureBook:
    """Every signature lookup of one command, against one committed allowed-signers file.

    Use as a context manager (the cache is written on exit).
    """

    def __init__(self, project: Project) -> None:
        self.project = project
        self.allowed = committed_allowed_signers(project)
        self._checker = _Checker(project, self.allowed) if self.allowed is not None else None

    def __enter__(self) -> "SignatureBook":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._checker is not None:
            self._checker.close()

    @property
    def enabled(self) -> bool:
        return self._checker is not None

    def check(self, path: Path, digest_hex: str) -> SignatureCheck:
        assert self._checker is not None, "signing is off"
        return self._checker.check(path, digest_hex)

    def prefetch(self, pairs: list[tuple[Path, str]]) -> None:
        """Check many signatures at once (see `_Checker.prefetch`); later lookups are answered from the cache."""
        if self._checker is not None:
            self._checker.prefetch(pairs)

    def checks(self, digest_hex: str) -> list[SignatureCheck]:
        """Every signature file kept for the digest, checked."""
        if self._checker is None:
            return []
        return [self.check(p, digest_hex) for p in signature_files(self.project, digest_hex)]

    def signers(self, digest_hex: str) -> list[Signer]:
        """The people whose allowed key made a valid signature over the digest."""
        return [Signer(c.principals[0], c.principals, c.fingerprint or "", c.path)
                for c in self.checks(digest_hex) if c.valid and c.principals]


def signers_of(project: Project, digest_hex: str) -> list[Signer]:
    """Who signed the record with this digest: valid signatures by keys the committed allowed-signers file lists.

    Empty when signing is off, when nothing signed it, or when every signature fails.
    """
    with SignatureBook(project) as book:
        return book.signers(digest_hex)
