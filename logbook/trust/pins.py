"""A reader's pin: the trust root of a repository, kept outside it, as SSH's known_hosts keeps a host's key.

The trust root (which authority's CA certificate, whether stamps are required,
who may sign) lives in `logbook.yaml` and files in the repository, which anyone
with push rights rewrites. A pin records it where a rewritten history cannot
reach: in the reader's own per-user file, or on `verify`'s command line.

    $XDG_CONFIG_HOME/logbook/pins.yaml   (default ~/.config/logbook/pins.yaml)

    version: 1
    repositories:
      https://git.example.org/lab/exp.git:     # origin url (or path), matched however it is spelled
        ca_sha256: [<64 hex>, ...]             # the CA files whose authorities this reader trusts
        require: true                          # a missing, invalid or late stamp is exit 4
        allowed_signers_sha256: <64 hex>       # the allowed_signers file as HEAD commits it (or null)
        signing_require: true                  # signing.require: an unsigned record is exit 4
        review_self_approval: false            # whether a launcher's approval of their own run counts
        review_approvals: 1                    # approvals an entry needs
        pinned: 2026-12-03T20:00:00Z
        roots: [<commit id>, ...]              # the root commits: a mirror at another address is this repository

Trust on first use: the first `logbook init` or `verify` in a clone writes
the repository's current trust root once per machine (`logbook pin` does it
on demand); afterwards every `verify` there compares the repository with it.
A history that drops `timestamping:`, flips a `require`, swaps a CA file,
changes who may sign or lowers the review rules is then exit 4
(`pin_differs`), naming the pin and what differs, until the pin moves
forward (`logbook.trust.tofu`: a change that only makes the reader stricter,
or one committed and signed by a key the pin trusts) or the reader records
it with `logbook pin --update`. `verify --ca-sha256`
and `--require-stamps` give the same trust root from the command line (a
paper's reader gets the hash from the lab out of band): those are enforced,
never compared field by field.
"""

from __future__ import annotations

import functools

import hashlib
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from logbook.core.errors import RefusedError, UsageError
from logbook.core.fsutil import atomic_write_text, exclusive
from logbook.core.project import Project
from logbook.core.yamlsafe import load_yaml_text

HEX_RE = re.compile(r"^[0-9a-f]{64}$")
HEX40_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_FIELDS = ("ca_sha256", "require", "allowed_signers_sha256", "signing_require", "review_self_approval",
           "review_approvals", "pinned", "roots")


@dataclass(frozen=True)
class TrustPin:
    """What a reader trusts, from outside the repository."""

    ca_sha256: tuple[str, ...] = ()
    """SHA-256 of the CA files whose authorities are trusted; empty: no constraint on the CA."""
    require: bool = False
    """True: every record needs a valid, timely stamp, whatever logbook.yaml says."""
    allowed_signers_sha256: str | None = None
    """The allowed_signers file as HEAD commits it, hashed; None: not pinned."""
    signing_require: bool | None = None
    """`signing.require` when pinned; None: not pinned (a pins file written before it was)."""
    review_self_approval: bool | None = None
    """`review_self_approval` when pinned; None: not pinned."""
    review_approvals: int | None = None
    """`review_approvals` when pinned; None: not pinned."""
    pinned: str = ""
    """When the pin was written (UTC, ISO 8601); "" for a pin given on the command line."""
    roots: tuple[str, ...] = ()
    """The repository's root commits when pinned: a clone reached by another address is still this repository."""
    source: str = "the command line"
    """Where the pin comes from, in words, for messages."""
    compare: bool = False
    """True for a pins-file entry: any difference from the repository's trust root is reported."""
    required_by_reader: bool = False
    """`verify --require-stamps`: stamps are required now; enforced, never compared with the repository."""

    @property
    def requires(self) -> bool:
        """Whether this reader requires every record to carry a valid, timely stamp."""
        return self.require or self.required_by_reader

    def to_dict(self) -> dict[str, Any]:
        return {"ca_sha256": list(self.ca_sha256), "require": self.require,
                "allowed_signers_sha256": self.allowed_signers_sha256, "signing_require": self.signing_require,
                "review_self_approval": self.review_self_approval, "review_approvals": self.review_approvals,
                "pinned": self.pinned, "roots": list(self.roots)}

    def settings(self) -> tuple:
        """What is pinned, without when or where: equal for two pins of one trust root."""
        return (frozenset(self.ca_sha256), self.require, self.allowed_signers_sha256, self.signing_require,
                self.review_self_approval, self.review_approvals)


@dataclass
class PinFinding:
    """One way the repository's trust root differs from the reader's pin (always exit 4)."""

    path: str
    """The file that differs, relative to the repository root (logbook.yaml, a CA file, allowed_signers)."""
    message: str
    hint: str


@dataclass
class PinWrite:
    """What `write_pin` did."""

    key: str
    """The repository's origin url (or absolute path): its name in the pins file."""
    path: Path
    """The pins file."""
    pin: TrustPin
    """The pin now in force."""
    changes: list[str] = field(default_factory=list)
    """What differs from the pin it replaced (empty for a first pin or an unchanged one)."""
    state: str = "pinned"
    """pinned | unchanged | updated"""


# --- the file -----------------------------------------------------------------------------------


def pins_path() -> Path:
    """`$XDG_CONFIG_HOME/logbook/pins.yaml`, or `~/.config/logbook/pins.yaml`: per user, in no repository."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"  # XDG: relative is ignored
    return root / "logbook" / "pins.yaml"


def repo_key(project: Project) -> str:
    """The name a repository is pinned under: its `origin` url, the same on every clone of it; else its path."""
    from logbook.records import gitbind

    url = gitbind.git(project.root, "config", "--get", "remote.origin.url", check=False).strip()
    return url or str(project.root.resolve())


_DEFAULT_PORTS = {"ssh": "22", "git+ssh": "22", "ssh+git": "22", "http": "80", "https": "443", "git": "9418"}
_SCP_RE = re.compile(r"^(?:[^@/:]+@)?(?P<host>\[[^\]]+\]|[^:/]+):(?P<path>.*)$")


def normalize_remote(url: str, base: Path | None = None) -> str:
    """One spelling for every way of writing one repository's address: what pins are matched by.

    As git's `url_normalize` does for `http.<url>.*` config: scheme and host
    lowercased, a default port dropped, dot segments resolved, and here also
    the user, a trailing slash and `.git` dropped, so that the ssh and https
    forms of one host and path are one repository. scp-style `host:path` is
    `ssh://host/path`. A local path (or `file://` URL) is resolved on disk,
    relative to `base` (the clone) when relative, so `../lab/origin.git` and
    `file:///…/origin.git/` name the same folder.
    """
    from urllib.parse import unquote, urlsplit

    url = url.strip()
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme.lower() == "file":
            return _local(unquote(parts.path), None)
        host = (parts.hostname or "").lower()
        port = parts.port if parts.port is not None else None
        if port is not None and str(port) != _DEFAULT_PORTS.get(parts.scheme.lower()):
            host = f"{host}:{port}"
        return host + _clean_path(unquote(parts.path))
    m = _SCP_RE.match(url)
    if m and not url.startswith(("/", "./", "../")) and not (base is not None and (base / url).exists()):
        return m.group("host").strip("[]").lower() + _clean_path("/" + m.group("path").lstrip("/"))
    return _local(url, base)


def _clean_path(path: str) -> str:
    import posixpath

    path = posixpath.normpath(path) if path else "/"
    path = path.rstrip("/")
    return path[:-4] if path.endswith(".git") else path


def _local(path: str, base: Path | None) -> str:
    p = Path(path).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    return "file:" + _clean_path(str(p.resolve()))


def root_commits(project: Project) -> tuple[str, ...]:
    """The repository's root commits: the same on every clone, whatever its remote is called or where it lives."""
    from logbook.records import gitbind

    head = gitbind.head_commit(project.root)
    return _roots_below(str(project.root), head) if head else ()


@functools.lru_cache(maxsize=16)
def _roots_below(root: str, head: str) -> tuple[str, ...]:
    """Asked three times by one verify: each a walk of the whole history, the same for the same HEAD."""
    from logbook.records import gitbind

    out = gitbind.git(Path(root), "rev-list", "--max-parents=0", head, check=False)
    return tuple(sorted(line for line in out.split() if HEX40_RE.match(line)))


def find_pin(project: Project, pins: dict[str, TrustPin]) -> tuple[str, TrustPin] | None:
    """This repository's entry in `pins`: the same address however it is spelled, or the same root commits."""
    here = normalize_remote(repo_key(project), project.root)
    for key, pin in pins.items():
        if normalize_remote(key) == here:
            return key, pin
    roots = set(root_commits(project))
    for key, pin in pins.items():
        if roots and roots & set(pin.roots):
            return key, pin
    return None


def nearest_pin(project: Project, pins: dict[str, TrustPin]) -> str | None:
    """For a repository with no pin: the entry whose address is nearest, and why it is not this one."""
    import difflib

    if not pins:
        return None
    here = normalize_remote(repo_key(project), project.root)
    spelled = {normalize_remote(k): k for k in pins}
    close = difflib.get_close_matches(here, list(spelled), n=1, cutoff=0.0)
    if not close:
        return None
    key = spelled[close[0]]
    return (f"the nearest pin is {key} ({close[0]}), which is not this repository ({here}) and shares none of its "
            "root commits")


def load_pins(path: Path | None = None) -> dict[str, TrustPin]:
    """Every pin in the pins file (none when it does not exist); UsageError naming what is wrong in it."""
    path = path or pins_path()
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot be read ({e})", hint=_fix_file(path)) from None
    try:
        raw = load_yaml_text(text, str(path)) or {}
    except UsageError as e:
        raise UsageError(e.message, hint=_fix_file(path)) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("repositories") or {}, dict):
        raise UsageError(f"{path}: must be a mapping with `repositories:` (url -> pin)", hint=_fix_file(path))
    try:
        return {str(k): _parse_pin(v, f"{path}: repositories.{k}", str(path), str(k))
                for k, v in (raw.get("repositories") or {}).items()}
    except UsageError as e:
        raise UsageError(e.message, hint=e.hint or _fix_file(path)) from None


def _parse_pin(raw: Any, where: str, path: str, key: str) -> TrustPin:
    if not isinstance(raw, dict):
        raise UsageError(f"{where} must be a mapping of {', '.join(_FIELDS)}", hint=_fix_file(Path(path)))
    for name in raw:
        if name not in _FIELDS:
            raise UsageError(f"{where}: unknown field `{name}`", hint=f"known: {', '.join(_FIELDS)}")
    cas = raw.get("ca_sha256") or []
    if not isinstance(cas, list):
        raise UsageError(f"{where}.ca_sha256 must be a list of 64-hex SHA-256 digests")
    require = raw.get("require", False)
    if not isinstance(require, bool):
        raise UsageError(f"{where}.require must be true or false, got {require!r}")
    signers = raw.get("allowed_signers_sha256")
    flags = {name: raw.get(name) for name in ("signing_require", "review_self_approval")}
    for name, value in flags.items():
        if value is not None and not isinstance(value, bool):
            raise UsageError(f"{where}.{name} must be true or false, got {value!r}")
    approvals = raw.get("review_approvals")
    if approvals is not None and (isinstance(approvals, bool) or not isinstance(approvals, int) or approvals < 1):
        raise UsageError(f"{where}.review_approvals must be an integer >= 1, got {approvals!r}")
    roots = raw.get("roots") or []
    if not isinstance(roots, list) or not all(isinstance(r, str) and HEX40_RE.match(r) for r in roots):
        raise UsageError(f"{where}.roots must be a list of commit ids (40 or 64 hex)")
    return TrustPin(tuple(check_hex(c, f"{where}.ca_sha256") for c in cas), require,
                    None if signers is None else check_hex(signers, f"{where}.allowed_signers_sha256"),
                    flags["signing_require"], flags["review_self_approval"], approvals,
                    str(raw.get("pinned") or ""), tuple(roots), f"the pin for {key} in {path}", compare=True)


def check_hex(value: Any, where: str) -> str:
    """A 64-hex SHA-256 digest, lower-cased; UsageError otherwise."""
    text = value.strip().lower() if isinstance(value, str) else ""
    if not HEX_RE.match(text):
        raise UsageError(f"{where}: {value!r} is not a SHA-256 digest (64 hex digits)",
                         hint="`sha256sum trust/tsa-root.pem` prints the digest of a CA file")
    return text


def _fix_file(path: Path) -> str:
    return f"fix or delete {path} (it is yours, outside any repository), then `logbook pin` again"


# --- the repository's trust root -----------------------------------------------------------------


def file_sha256(path: Path) -> str | None:
    """SHA-256 of a file's bytes, None when it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _signers_sha256(project: Project) -> str | None:
    """The allowed_signers file as HEAD commits it (what signature checks read), hashed; None without signing."""
    from logbook.records import gitbind

    signing = project.config.signing
    if signing is None or gitbind.head_commit(project.root) is None:
        return None
    spec = f"HEAD:{signing.allowed_signers}"
    data = gitbind.read_blobs(project.root, [spec]).get(spec)
    return hashlib.sha256(data).hexdigest() if data is not None else None


def current_root(project: Project) -> TrustPin:
    """The repository's trust root as it stands: the CA files' hashes, `require`, the allowed signers' hash,
    `signing.require` and the review rules."""
    cfg, c = project.config.timestamping, project.config
    cas = tuple(sorted({h for a in (cfg.authorities if cfg else []) if (h := file_sha256(project.root / a.ca))}))
    return TrustPin(cas, bool(cfg and cfg.require), _signers_sha256(project), bool(c.signing and c.signing.require),
                    bool(c.review_self_approval), int(c.review_approvals), source=f"{project.root}")


def has_trust_root(root: TrustPin) -> bool:
    """Whether there is anything to pin: an authority or signing (the review rules alone prove nothing)."""
    return bool(root.ca_sha256) or root.allowed_signers_sha256 is not None


# --- what verify applies ----------------------------------------------------------------------------


def reader_pin(project: Project, *, ca_sha256: list[str] | None = None, require: bool = False) -> TrustPin | None:
    """The pin `verify` applies: the pins-file entry for this repository, with the command line's on top.

    `ca_sha256` (from `--ca-sha256`) replaces the file's CA list; `require` (`--require-stamps`) adds to it.
    """
    found = find_pin(project, load_pins())
    pin = found[1] if found else None
    cas = tuple(check_hex(c, "--ca-sha256") for c in ca_sha256 or [])
    if not cas and not require:
        return pin
    if pin is None:
        return TrustPin(cas, source="--ca-sha256/--require-stamps", required_by_reader=require)
    return replace(pin, ca_sha256=cas or pin.ca_sha256, required_by_reader=require,
                   source=f"{pin.source}, with --ca-sha256/--require-stamps")


def differences(project: Project, pin: TrustPin) -> list[PinFinding]:
    """How the repository's trust root differs from `pin`: exit 4 each (the CLI pin's CA list and require are
    enforced; a pins-file entry's every field is compared)."""
    cfg = project.config.timestamping
    agreed = (f"if the lab agreed to this change, `logbook pin --update` records the new trust root; otherwise "
              "the history was rewritten: compare with a clone you trust" if pin.compare else
              "check with the lab, out of band, which CA its authority has (`sha256sum` of the CA file): a history "
              "that lost or swapped its authority proves no time")
    out: list[PinFinding] = []
    if (pin.ca_sha256 or pin.requires) and cfg is None:
        what = f"trusts CA sha256 {', '.join(h[:12] + '…' for h in pin.ca_sha256)}" if pin.ca_sha256 else \
            "requires third-party stamps"
        out.append(PinFinding("logbook.yaml", (
            f"logbook.yaml names no timestamp authority, but {pin.source} {what}: no record here has "
            "third-party time this reader trusts"), agreed))
    for auth in cfg.authorities if cfg else []:
        have = file_sha256(project.root / auth.ca)
        if pin.ca_sha256 and have not in pin.ca_sha256:
            out.append(PinFinding(auth.ca, (
                f"{auth.url} is trusted under {auth.ca}, whose sha256 is {have or 'unreadable'}, but {pin.source} "
                f"trusts only CA sha256 {', '.join(h[:12] + '…' for h in pin.ca_sha256)}: its stamps prove no "
                "time to this reader"), agreed))
        elif pin.compare and not pin.ca_sha256:  # a pin of signing alone: an authority is a new trust anchor
            out.append(PinFinding(auth.ca, (
                f"{auth.url} is trusted under {auth.ca} (sha256 {have or 'unreadable'}), but {pin.source} was made "
                "with no timestamp authority: its stamps would date records for this reader on the word of "
                "whoever added it"), agreed))
    if pin.compare and pin.require and cfg is not None and not cfg.require:
        out.append(PinFinding("logbook.yaml", (
            f"logbook.yaml says timestamping.require: false, but {pin.source} was made with require: true "
            "(stamps are still required here)"), agreed))
    signers = _signers_sha256(project) if pin.compare and pin.allowed_signers_sha256 else None
    if pin.compare and pin.allowed_signers_sha256 and signers != pin.allowed_signers_sha256:
        where = project.config.signing.allowed_signers if project.config.signing else "logbook.yaml"
        out.append(PinFinding(where, (
            f"the allowed signers ({where}) hash to {signers or 'nothing: signing is off'}, but {pin.source} has "
            f"{pin.allowed_signers_sha256}: who may sign was changed"), agreed))
    elif pin.compare and pin.allowed_signers_sha256 is None and project.config.signing is not None:
        out.append(PinFinding(project.config.signing.allowed_signers, (
            f"signing is on ({project.config.signing.allowed_signers}), but {pin.source} was made with signing "
            "off: who may sign is the word of whoever turned it on"), agreed))
    if pin.compare:
        out += _review_differences(project, pin, agreed)
    return out


def _review_differences(project: Project, pin: TrustPin, agreed: str) -> list[PinFinding]:
    """The pinned rules on who vouches for a record, where the repository now asks less of it."""
    c, out = project.config, []
    if pin.signing_require and not (c.signing and c.signing.require):
        out.append(PinFinding("logbook.yaml", (
            f"logbook.yaml says signing.require: false, but {pin.source} was made with signing.require: true "
            "(an unsigned record would pass)"), agreed))
    if pin.review_self_approval is False and c.review_self_approval:
        out.append(PinFinding("logbook.yaml", (
            f"logbook.yaml says review_self_approval: true, but {pin.source} was made with false (a launcher's "
            "approval of their own run would count)"), agreed))
    if pin.review_approvals is not None and c.review_approvals < pin.review_approvals:
        out.append(PinFinding("logbook.yaml", (
            f"logbook.yaml says review_approvals: {c.review_approvals}, but {pin.source} was made with "
            f"{pin.review_approvals} (an entry would count as reviewed with fewer approvals)"), agreed))
    return out


# --- `logbook pin` -----------------------------------------------------------------------------------


def write_pin(project: Project, *, update: bool = False, require: bool = False, now: str = "") -> PinWrite:
    """Pin this repository's current trust root in the pins file (atomically, under a lock).

    RefusedError when there is nothing to pin, when the trust root has uncommitted changes, or when a
    different pin exists and `update` is False (the differences are named). `require`: pin `require: true`
    whatever logbook.yaml says.
    """
    from logbook.eventlog.chain import utc_now

    current = current_root(project)
    if not has_trust_root(current) and not require:
        raise RefusedError("nothing to pin: logbook.yaml names no timestamp authority and no signing",
                           hint="name an authority (`timestamping:`, see docs/trust.md), commit it, then `logbook pin`")
    refuse_uncommitted(project)
    new = replace(current, require=current.require or require, pinned=now or utc_now()[:19] + "Z", compare=True,
                  roots=root_commits(project))
    path, key = pins_path(), repo_key(project)
    with exclusive(path.with_name(path.name + ".lock")):
        pins = load_pins(path)
        found = find_pin(project, pins)
        if found is not None:
            key, old = found  # the entry as first written, however this clone spells the address
        else:
            old = None
        found_changes = pin_changes(old, new) if old is not None else []
        changes = [c.text for c in found_changes]
        if old is not None and not changes:
            return PinWrite(key, path, old, [], "unchanged")
        if not update and any(not c.stricter for c in found_changes):  # stricter only: nothing a forger gains
            raise RefusedError(f"{key} is pinned in {path} with another trust root: {'; '.join(changes)}",
                               hint="if the lab agreed to this change, `logbook pin --update` records it")
        pins[key] = new
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, _dump(pins))
    return PinWrite(key, path, new, changes, "updated" if changes else "pinned")


def refuse_uncommitted(project: Project) -> None:
    """RefusedError when logbook.yaml, a CA file or the allowed signers have uncommitted changes."""
    from logbook.records import gitbind

    cfg, signing = project.config.timestamping, project.config.signing
    paths = ["logbook.yaml", *(a.ca for a in (cfg.authorities if cfg else [])),
             *([signing.allowed_signers] if signing else [])]
    dirty = gitbind.git(project.root, "status", "--porcelain", "--", *paths, check=False).strip()
    if dirty:
        raise RefusedError(f"the trust root has uncommitted changes ({dirty.splitlines()[0].strip()}): a pin records "
                           "what the lab committed", hint="commit or restore it, then `logbook pin`")


@dataclass(frozen=True)
class PinChange:
    """One pinned setting that the repository's trust root now says otherwise."""

    field: str
    text: str
    """`require true -> false`, as `logbook pin` and `verify` print it."""
    stricter: bool
    """The new value only asks more of the repository (or pins a review rule a pin written before them lacks).
    A trust anchor the pin did not have (an authority where it had none, signing turned on) is never stricter:
    it would let whoever pushes it vouch for time or authorship to this reader from then on."""


def pin_changes(old: TrustPin, new: TrustPin) -> list[PinChange]:
    """Every pinned setting that differs between `old` and `new`, each judged stricter or not."""
    out = []
    oc, nc = set(old.ca_sha256), set(new.ca_sha256)
    if oc != nc:
        out.append(PinChange("ca_sha256", f"CA sha256 {', '.join(h[:12] for h in sorted(oc)) or 'none'} -> "
                             f"{', '.join(h[:12] for h in sorted(nc)) or 'none'}", bool(oc) and bool(nc) and nc < oc))
    if old.require != new.require:
        out.append(PinChange("require", f"require {_yn(old.require)} -> {_yn(new.require)}", new.require))
    if old.allowed_signers_sha256 != new.allowed_signers_sha256:
        out.append(PinChange("allowed_signers_sha256", f"allowed signers {str(old.allowed_signers_sha256)[:12]} -> "
                             f"{str(new.allowed_signers_sha256)[:12]}", False))
    for name, stricter_if in (("signing_require", True), ("review_self_approval", False)):
        was, now = getattr(old, name), getattr(new, name)
        if now is not None and was != now:
            out.append(PinChange(name, f"{name.replace('_', '.', 1) if name == 'signing_require' else name} "
                                 f"{_yn(was)} -> {_yn(now)}", was is None or now is stricter_if))
    was, now = old.review_approvals, new.review_approvals
    if now is not None and was != now:
        out.append(PinChange("review_approvals", f"review_approvals {was if was is not None else 'none'} -> {now}",
                             was is None or now > was))
    return out


def _yn(value: bool | None) -> str:
    return "none" if value is None else str(value).lower()


def _dump(pins: dict[str, TrustPin]) -> str:
    head = ("# logbook pins: the trust root of each repository this user verifies, kept outside it.\n"
            "# Written by `logbook pin`; `logbook verify` compares each repository with its entry.\n")
    body = {"version": 1, "repositories": {k: p.to_dict() for k, p in sorted(pins.items())}}
    return head + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)
