"""Caches under `.logbook/` that only this user's logbook, in this clone, can have written.

`verify` keeps what it has already checked (the newest clean commit, stamps
and signatures that checked out, the last report) so that it reads only what
is new. A cache that says "checked" is a claim, and `.logbook/` travels
wherever the folder goes: in a tarball handed to a reviewer, on a shared
disk, in a `cp -r` of a teammate's checkout. A planted
`verified-history.json` naming HEAD as clean would skip the whole history
walk.

So every cache is sealed: an HMAC-SHA256, keyed by a secret made once per
user outside any repository (`$XDG_STATE_HOME/logbook/cache.key`, mode 0600),
over the cache's name, the clone's folder and the cache's bytes. A cache
whose seal does not check (written elsewhere, by another user, for another
clone, by an older logbook, or edited) is not read: the work is done again
and the cache written anew. Without a key (a home that cannot be written),
nothing is cached and every `verify` reads everything.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from logbook.core.fsutil import atomic_write_bytes
from logbook.core.project import Project

_MAGIC = b"logbook-sealed-cache 1 "
_KEY_BYTES = 32


def key_path() -> Path:
    """Where this user's sealing key lives (never inside a repository's `.logbook/`)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "logbook" / "cache.key"


def _key(create: bool) -> bytes | None:
    path = key_path()
    try:
        key = path.read_bytes()
        return key if len(key) == _KEY_BYTES else None
    except FileNotFoundError:
        pass
    except OSError:
        return None
    if not create:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return _key(create=False)
    except OSError:
        return None
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(_KEY_BYTES))
        f.flush()
        os.fsync(f.fileno())
    return _key(create=False)


def _seal(key: bytes, name: str, root: Path, body: bytes) -> str:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in (name.encode(), str(root.resolve()).encode("utf-8", "surrogateescape")):
        mac.update(len(part).to_bytes(8, "big") + part)
    mac.update(body)
    return mac.hexdigest()


def load(project: Project, name: str) -> Any | None:
    """The cache `name` as this user's logbook wrote it for this clone, or None (missing, foreign or damaged)."""
    try:
        data = (project.state_dir / name).read_bytes()
    except OSError:
        return None
    head, sep, body = data.partition(b"\n")
    key = _key(create=False)
    if not sep or not head.startswith(_MAGIC) or key is None:
        return None
    if not hmac.compare_digest(head[len(_MAGIC):], _seal(key, name, project.root, body).encode()):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def save(project: Project, name: str, value: Any) -> None:
    """Write the cache `name`, sealed; a cache that cannot be written only costs time next run."""
    key = _key(create=True)
    if key is None:
        return
    body = json.dumps(value, separators=(",", ":")).encode()
    try:
        atomic_write_bytes(project.state_dir / name, _MAGIC + _seal(key, name, project.root, body).encode() + b"\n" + body)
    except OSError:
        pass
