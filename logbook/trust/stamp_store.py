"""Third-party time: RFC 3161 stamps of records' hashes, stored as records, checked offline.

A stamp is `<entries>/stamps/<digest>/<authority key>.tsr`: the DER bytes of
the TimeStampResp that authority returned for the 64-hex SHA-256 `<digest>`
(a preregistration's or amendment's `Logbook-Sha256`, a run record's hash over
its bytes, an event-log line's chain `hash`, a scorecard's `hash`). The key is
the first 12 hex of sha256(authority url). Like every record it is written
once and never replaced; git carries it to every clone.

Asking never blocks for longer than `timestamping.timeout_s`, and a network
failure never raises: the record stays, its stamp is pending, and a later
`logbook stamp` or `logbook commit` fetches it. Checking needs no network:
the token's signature, its chain to the CA the repository commits for that
authority, and its imprint equal to the digest.
"""

from __future__ import annotations

import functools
import hashlib
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from logbook.core import statecache
from logbook.core.errors import RefusedError, UsageError
from logbook.core.fsutil import atomic_create_bytes
from logbook.core.project import Project
from logbook.trust.tsa_client import (StampInvalid, TrustAnchors, TsaUnavailable, check_token, read_anchor_file,
                                      request_token)
from logbook.core.tsa_settings import Authority, TimestampingConfig

STAMPS = "stamps"
"""The folder under the entries folder that holds every stamp."""
DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
STAMP_NAME_RE = re.compile(r"^[0-9a-f]{12}\.tsr$")


@dataclass(frozen=True)
class VerifiedStamp:
    """A stamp that checked offline."""

    time: datetime
    """The authority's time (UTC, to the second: the library reads no fraction)."""
    authority: str
    """The authority's url."""
    path: Path
    """The stamp file."""
    digest: str
    """The 64-hex SHA-256 it proves."""


@dataclass
class StampOutcome:
    """What asking for one record's stamps did."""

    digest: str
    what: str
    """The record, in words (`preregistration X`, `run R's record`...)."""
    written: list[Path] = field(default_factory=list)
    """Stamp files fetched and written now."""
    present: list[Path] = field(default_factory=list)
    """Stamp files that were already there (nothing asked)."""
    pending: list[str] = field(default_factory=list)
    """`url: why` for each authority that gave no stamp this time."""
    committed: str | None = None
    """The commit that holds the new stamp, when one was made."""
    off: bool = False
    """True when logbook.yaml names no authority."""

    @property
    def stamped(self) -> bool:
        return bool(self.written or self.present)


def settings(project: Project) -> TimestampingConfig | None:
    return project.config.timestamping


def stamps_dir(project: Project) -> Path:
    return project.entries / STAMPS


def stamp_path(project: Project, digest_hex: str, authority: Authority) -> Path:
    return stamps_dir(project) / digest_hex / f"{authority.key}.tsr"


def anchors(project: Project, authority: Authority) -> TrustAnchors:
    """The configured CA of `authority`; UsageError when the file is missing or holds no root."""
    path = project.root / authority.ca
    try:
        return _anchors(str(path), path.stat().st_mtime_ns)
    except OSError:
        raise UsageError(f"logbook.yaml: timestamping: the CA file {authority.ca} of {authority.url} is missing",
                         hint="commit the authority's CA certificate (PEM) at that path") from None
    except ValueError as e:
        raise UsageError(f"logbook.yaml: timestamping: {e}", hint="the file must hold the authority's CA in PEM") from None


@functools.lru_cache(maxsize=32)
def _anchors(path: str, _mtime_ns: int) -> TrustAnchors:
    return read_anchor_file(Path(path))


def _check_digest(digest_hex: str) -> str:
    if not isinstance(digest_hex, str) or not DIGEST_RE.match(digest_hex):
        raise UsageError(f"a stamp is for a 64-hex SHA-256, got {digest_hex!r}")
    return digest_hex


# --- asking -----------------------------------------------------------------------------


def stamp_digest(project: Project, digest_hex: str, *, what: str, after: datetime | None = None,
                 commit: bool = False, deadline: float | None = None, skip: set[str] | None = None) -> StampOutcome:
    """Ask every configured authority that has not stamped `digest_hex` yet; write what they return.

    Never raises for the network: an authority that cannot be reached within
    the timeout (or by `deadline`, a `time.monotonic()` value shared by a
    batch) leaves the stamp pending. `after`: a token must be strictly later
    (a stamp in the same second as a preregistration's orders nothing), so
    one that is not is asked again once the second has turned. `commit`: the
    new stamp goes into a commit of its own (preregistrations and amendments
    are committed alone, and their stamps with them). `skip`: urls known to be
    down in this batch; ones found down are added.
    """
    _check_digest(digest_hex)
    cfg = settings(project)
    out = StampOutcome(digest_hex, what, off=cfg is None)
    if cfg is None:
        return out
    deadline = deadline if deadline is not None else time.monotonic() + cfg.timeout_s
    for auth in cfg.authorities:
        path = stamp_path(project, digest_hex, auth)
        if path.exists():
            out.present.append(path)
            continue
        if skip is not None and auth.url in skip:
            out.pending.append(f"{auth.url}: not reached earlier in this command")
            continue
        try:
            tsr = _fetch(project, auth, digest_hex, after, deadline)
        except (TsaUnavailable, StampInvalid, UsageError) as e:  # UsageError: its CA file is missing or unreadable
            out.pending.append(f"{auth.url}: its answer does not verify: {e}" if isinstance(e, StampInvalid) else str(e))
            if skip is not None:
                skip.add(auth.url)
            continue
        out.committed = _store(project, path, tsr, what, commit) or out.committed
        out.written.append(path)
    return out


def _fetch(project: Project, auth: Authority, digest_hex: str, after: datetime | None, deadline: float) -> bytes:
    trust = anchors(project, auth)
    for _ in range(3):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TsaUnavailable(f"{auth.url}: no answer within the timeout")
        tsr, when = request_token(auth.url, bytes.fromhex(digest_hex), trust, left)
        if after is None or when > after:
            return tsr
        time.sleep(min(1.05, max(0.0, deadline - time.monotonic())))  # the authority's clock reads seconds
    raise TsaUnavailable(f"{auth.url}: its time is not later than {after.isoformat()}")


def _store(project: Project, path: Path, tsr: bytes, what: str, commit: bool) -> str | None:
    if commit:
        from logbook.records import gitbind

        rel = path.relative_to(project.root).as_posix()
        try:
            done = gitbind.commit_file(project.root, rel, tsr,
                                       gitbind.format_message(f"Stamp {what}", "RFC 3161 timestamp token",
                                                              [("Logbook-Stamp", path.parent.name)]))
            return done.commit
        except RefusedError:
            pass  # a busy repository: the stamp is written below, and `logbook commit` commits it
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_create_bytes(path, tsr)
    except FileExistsError:
        pass  # another command stamped it at the same moment: one stamp is as good as the other
    return None


# --- checking ----------------------------------------------------------------------------


def authority_for(project: Project, path: Path) -> Authority | None:
    """The configured authority whose stamps are named like `path`, or None."""
    cfg = settings(project)
    for auth in cfg.authorities if cfg else []:
        if path.name == f"{auth.key}.tsr":
            return auth
    return None


def check_stamp_file(project: Project, path: Path, cache: dict[str, str] | None = None) -> VerifiedStamp:
    """Check one stamp file offline; StampInvalid (its `proof` names the failed check), or
    LookupError when no configured authority is named by the file.

    `cache` (see `StampCache`) remembers stamps that checked, by a hash of
    everything the check reads: the token, the digest, the url and the CA.
    """
    digest = path.parent.name
    auth = authority_for(project, path)
    if auth is None or not DIGEST_RE.match(digest):
        raise LookupError(f"{path.name} names no authority logbook.yaml configures")
    tsr = path.read_bytes()
    key = _cache_key(project, auth, digest, tsr) if cache is not None else ""
    if cache is not None and key in cache:  # before `anchors`: a warm verify parses no certificate
        return VerifiedStamp(datetime.fromisoformat(cache[key]), auth.url, path, digest)
    when = check_token(tsr, bytes.fromhex(digest), anchors(project, auth)).astimezone(timezone.utc)
    if cache is not None:
        cache[key] = when.isoformat()
    return VerifiedStamp(when, auth.url, path, digest)


def _cache_key(project: Project, auth: Authority, digest: str, tsr: bytes) -> str:
    """UsageError, as `anchors` raises it, when the CA file is missing: a cached success needs its CA too."""
    ca = _ca_bytes(project, auth)
    return hashlib.sha256(b"\0".join([tsr, digest.encode(), auth.url.encode(), ca])).hexdigest()


def _ca_bytes(project: Project, authority: Authority) -> bytes:
    path = project.root / authority.ca
    try:
        st = path.stat()
        return _read_once(str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        anchors(project, authority)  # raises its UsageError (the file is missing or unreadable)
        raise


@functools.lru_cache(maxsize=32)
def _read_once(path: str, _mtime_ns: int, _size: int, _inode: int) -> bytes:
    """A CA file's bytes, read once per version of it: a verify keys every stamp's cache entry with them."""
    return Path(path).read_bytes()


class StampCache:
    """Stamps that checked before, in `.logbook/verified-stamps.json`: a warm `verify` re-checks none.

    Keyed by a hash of the token, digest, url and CA bytes, so an edited
    token or a changed CA is never found there; only successes are kept.
    """

    FILE = "verified-stamps.json"

    def __init__(self, project: Project) -> None:
        self.project = project
        data = statecache.load(project, self.FILE)
        self.entries: dict[str, str] = data if isinstance(data, dict) else {}
        self._size = len(self.entries)

    def save(self) -> None:
        if len(self.entries) != self._size:
            statecache.save(self.project, self.FILE, self.entries)  # unwritten: costs time, never correctness


def verified_stamps(project: Project, digest_hex: str) -> list[VerifiedStamp]:
    """The stamps of `digest_hex` that check offline, earliest first (invalid ones are `verify`'s to report)."""
    _check_digest(digest_hex)
    folder = stamps_dir(project) / digest_hex
    found = []
    for path in sorted(folder.glob("*.tsr")) if folder.is_dir() else []:
        try:
            found.append(check_stamp_file(project, path))
        except (StampInvalid, LookupError, OSError):
            continue
    return sorted(found, key=lambda s: (s.time, s.path.name))


def earliest(project: Project, digest_hex: str) -> VerifiedStamp | None:
    """The earliest valid stamp of `digest_hex`, or None."""
    stamps = verified_stamps(project, digest_hex)
    return stamps[0] if stamps else None


def has_stamp_file(project: Project, digest_hex: str) -> bool:
    """Whether any configured authority's stamp file exists for `digest_hex` (unchecked: for what to fetch)."""
    cfg = settings(project)
    return any(stamp_path(project, digest_hex, a).exists() for a in (cfg.authorities if cfg else []))
