"""Who changed who may sign, or whether a launcher may approve their own run: read from git history.

Two settings decide whose word counts: the allowed-signers file (whose keys
are people) and `review_self_approval` (whether a launcher's approval counts),
with `signing.require` beside them. A change to any of them is as much a part
of the record as a note, so it is never silent: every commit of HEAD's
history that changed one of them, against its parent (a merge only when it
differs from every parent: the side branch's own commit is listed already),
becomes an entry in the chronicle on the day of the commit and a line of
`verify`'s output, naming who committed it and what changed.

A commit that adds an allowed signer also says which SSH key signed it (git's
own commit signature), or that none did: that, not the author or committer
field, is who added the key (`signers` judges whether it may sign for its
address).

Only committed changes take effect (`signatures` reads the allowed-signers
file from HEAD), so only committed changes are listed. The commit's date and
committer are git's, which whoever commits can set: what makes the change
impossible to hide is that it is in the history every clone verifies.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from logbook.core import statecache
from logbook.core.project import Project
from logbook.core.settings import CONFIG_FILE
from logbook.records import gitbind
from logbook.eventlog.timeline import Item
from logbook.trust.signatures import fingerprint_of_blob, good_signature_key

SOURCE = "@settings"
"""The chronicle's source name for these entries (no run id can start with `@`)."""
KIND = "trust_setting_changed"


@dataclass(frozen=True)
class _State:
    """What the settings that decide identity said at one commit."""

    self_approval: bool = False
    signing: bool = False
    require: bool = False
    signers_path: str | None = None
    signers: tuple[str, ...] = ()
    """The allowed-signers file's entries (comments and blank lines left out)."""
    unreadable: bool = False


@dataclass
class SettingChange:
    """One commit that changed who may sign or whether self-approval counts."""

    commit: str
    ts: str
    """The commit's committer date, UTC, `YYYY-MM-DDTHH:MM:SSZ`."""
    committer: str
    """`Name <email>` of whoever committed it (and `, authored by ...` when someone else wrote it)."""
    changes: list[str] = field(default_factory=list)
    """One sentence per setting that changed."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        return f"{self.ts[:16].replace('T', ' ')} UTC, commit {self.commit[:7]} by {self.committer}: " \
               + "; ".join(self.changes)

    def record(self) -> dict[str, Any]:
        """The change as a chronicle record (`kind` trust_setting_changed, its fields under `data`)."""
        return {"kind": KIND, "ts": self.ts, "id": self.commit[:12],
                "data": {"commit": self.commit, "committer": self.committer, "changes": list(self.changes)}}


def setting_changes(project: Project) -> list[SettingChange]:
    """Every commit in HEAD's history that changed the allowed signers, `signing:` or `review_self_approval`, oldest
    first."""
    root = project.root
    head = gitbind.head_commit(root)
    if head is None:
        return []
    # History below HEAD never changes, so the answer for one HEAD (and today's path) is kept under .logbook/.
    key = f"2:{head}:{project.config.signing.allowed_signers if project.config.signing else ''}"
    kept = statecache.load(project, "setting-changes.json")
    try:
        if kept.get("key") == key:
            return [SettingChange(**c) for c in kept["changes"]]
    except (TypeError, KeyError, AttributeError):
        pass
    changes = _changes(project)
    statecache.save(project, "setting-changes.json", {"key": key, "changes": [c.to_dict() for c in changes]})
    return changes


def _changes(project: Project) -> list[SettingChange]:
    root = project.root
    paths = watched_paths(project)
    fmt = "%H%x1f%P%x1f%ct%x1f%cn <%ce>%x1f%an <%ae>"
    out = gitbind.git(root, "log", "--reverse", f"--format={fmt}", "HEAD", "--", *paths)
    rows = [line.split("\x1f") for line in out.splitlines() if line.count("\x1f") == 4]
    states = _states(project, {c for row in rows for c in [row[0], *row[1].split()]})
    befores = {commit: [states[p] for p in parents.split()] or [_State()] for commit, parents, *_ in rows}
    # Who added a signer is the commit's own signature, not a name: asked once for every such commit.
    adds = [c for c, bs in befores.items() if any(e not in b.signers for b in bs for e in states[c].signers)]
    signers = commit_signers(root, adds)
    changes = []
    for commit, _, ct, committer, author in rows:
        now, before = states[commit], befores[commit]
        if any(b == now for b in before):
            continue  # a merge that took one side's settings: that side's commit is listed
        said = _describe(before[0], now)
        if said:
            who = committer if author == committer else f"{committer}, authored by {author}"
            if commit in signers:
                who += _signed(signers[commit], before)
            changes.append(SettingChange(commit, _utc(int(ct)), who, said))
    return changes


def setting_items(project: Project, since: str | None = None, until: str | None = None) -> Iterator[Item]:
    """The changes as chronicle items on days in [since, until], in time order (after the day's records at
    the same instant)."""
    items = [Item(c.ts, 3, SOURCE, n, c.record()) for n, c in enumerate(setting_changes(project))
             if (not since or c.ts[:10] >= since) and (not until or c.ts[:10] <= until)]
    return iter(sorted(items))


def self_approval_allowed(project: Project) -> bool:
    """Whether a launcher's approval of their own run counts: `review_self_approval` true as HEAD commits it.

    The working tree's logbook.yaml must say so too (a clone may always be
    stricter); an uncommitted edit grants nothing, since no one else sees it.
    """
    if not project.config.review_self_approval:
        return False
    data = gitbind.read_blobs(project.root, [f"HEAD:{CONFIG_FILE}"]).get(f"HEAD:{CONFIG_FILE}")
    raw, _ = _config_of(data) if data is not None else (None, None)
    return isinstance(raw, dict) and raw.get("review_self_approval") is True


def allowed_entries(project: Project, commits: set[str]) -> dict[str, tuple[str, ...]]:
    """commit -> the allowed-signers file's entries (comments and blank lines left out) at that commit, at the
    path that commit's own logbook.yaml names (empty where it names none)."""
    return {c: s.signers for c, s in _states(project, commits).items()}


def watched_paths(project: Project) -> list[str]:
    """logbook.yaml and every allowed-signers path it named in HEAD's history: what `git log` watches."""
    return [CONFIG_FILE, *_signers_paths(project)]


_SIGNERS: dict[tuple[str, str], str | None] = {}
"""(repository, commit) -> `_commit_signer`'s answer, for the process: a commit's bytes never change."""


def commit_signers(root: Path, commits: list[str]) -> dict[str, str | None]:
    """commit -> the fingerprint of the SSH key whose good signature it carries (git's `gpgsig`), or None.

    Each check is an `ssh-keygen` process, so they run on every core at once.
    """
    todo = [c for c in dict.fromkeys(commits) if (str(root), c) not in _SIGNERS]
    if todo:
        with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
            for c, fp in zip(todo, pool.map(lambda c: _commit_signer(root, c), todo)):
                _SIGNERS[(str(root), c)] = fp
    return {c: _SIGNERS[(str(root), c)] for c in commits}


def _commit_signer(root: Path, commit: str) -> str | None:
    raw = gitbind.git_bytes(root, "cat-file", "commit", commit)
    head, sep, message = raw.partition(b"\n\n")
    kept, sig, in_sig = [], [], False
    for line in head.split(b"\n"):
        if line.startswith(b"gpgsig "):
            in_sig = True
            sig.append(line[len(b"gpgsig "):])
        elif in_sig and line.startswith(b" "):
            sig.append(line[1:])
        else:
            in_sig = False
            kept.append(line)
    if not sig:
        return None
    # What git signed: the commit object without its signature header.
    return good_signature_key(b"\n".join(kept) + sep + message, b"\n".join(sig) + b"\n", "git")


def _utc(seconds: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _signers_paths(project: Project) -> list[str]:
    """Every allowed-signers path logbook.yaml named in any commit of HEAD's history, and today's."""
    root = project.root
    commits = gitbind.git(root, "log", "--format=%H", "HEAD", "--", CONFIG_FILE).split()
    blobs = gitbind.read_blobs(root, [f"{c}:{CONFIG_FILE}" for c in commits])
    paths = {_config_of(b)[1] for b in blobs.values()}
    if project.config.signing is not None:
        paths.add(project.config.signing.allowed_signers)
    return sorted(p for p in paths if p)


def _config_of(data: bytes | None) -> tuple[dict[str, Any] | None, str | None]:
    """(logbook.yaml as a mapping, the allowed-signers path it names); (None, None) when unreadable."""
    if data is None:
        return {}, None
    try:
        raw = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return None, None
    raw = raw if isinstance(raw, dict) else {}
    signing = raw.get("signing") if isinstance(raw.get("signing"), dict) else None
    path = signing.get("allowed_signers") if signing else None
    return raw, path if isinstance(path, str) else None


def _states(project: Project, commits: set[str]) -> dict[str, _State]:
    root = project.root
    order = sorted(commits)
    configs = gitbind.read_blobs(root, [f"{c}:{CONFIG_FILE}" for c in order])
    parsed = {c: _config_of(configs[f"{c}:{CONFIG_FILE}"]) for c in order}
    specs = [f"{c}:{path}" for c, (_, path) in parsed.items() if path]
    files = gitbind.read_blobs(root, specs)
    out = {}
    for c, (raw, path) in parsed.items():
        if raw is None:
            out[c] = _State(unreadable=True)
            continue
        signing = raw.get("signing") if isinstance(raw.get("signing"), dict) else None
        text = files.get(f"{c}:{path}") if path else None
        entries = tuple(sorted(_entries(text))) if text is not None else ()
        out[c] = _State(self_approval=raw.get("review_self_approval") is True, signing=signing is not None,
                        require=bool(signing and signing.get("require") is True), signers_path=path, signers=entries)
    return out


def _entries(data: bytes) -> list[str]:
    lines = data.decode("utf-8", "replace").splitlines()
    return [" ".join(ln.split()) for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def _describe(old: _State, new: _State) -> list[str]:
    out = []
    if new.unreadable != old.unreadable:
        out.append(f"{CONFIG_FILE} " + ("could not be read" if new.unreadable else "reads again"))
    if new.self_approval != old.self_approval:
        out.append(f"review_self_approval {_yn(old.self_approval)} → {_yn(new.self_approval)}"
                   + (": a launcher's approval of their own run now counts" if new.self_approval else ""))
    if new.signing != old.signing:
        out.append(f"signing turned on (allowed_signers {new.signers_path})" if new.signing else "signing turned off")
    elif new.signers_path != old.signers_path:
        out.append(f"signing.allowed_signers {old.signers_path} → {new.signers_path}")
    if new.require != old.require:
        out.append(f"signing.require {_yn(old.require)} → {_yn(new.require)}")
    added = [e for e in new.signers if e not in old.signers]
    removed = [e for e in old.signers if e not in new.signers]
    out += [f"allowed signer added: {_who(e)}" for e in added]
    out += [f"allowed signer removed: {_who(e)}" for e in removed]
    return out


def _signed(fp: str | None, befores: list[_State]) -> str:
    """`, signed by key FP (principals it had before)`, or that no SSH key signed the commit."""
    if fp is None:
        return ", in a commit no SSH key signed"
    held = sorted({e.split()[0] for b in befores for e in b.signers if _fingerprint(e) == fp})
    return f", signed by key {fp} ({', '.join(held) if held else 'a key not listed before'})"


def _fingerprint(entry: str) -> str | None:
    parts = entry.split()
    for i in range(1, len(parts) - 1):
        if parts[i].startswith(("ssh-", "ecdsa-", "sk-")):
            try:
                return fingerprint_of_blob(base64.b64decode(parts[i + 1]))
            except ValueError:
                return None
    return None


def _yn(v: bool) -> str:
    return "true" if v else "false"


def _who(entry: str) -> str:
    """`principals [options] keytype base64` -> `principals (keytype SHA256:...)`, as a person reads it."""
    parts = entry.split()
    for i in range(1, len(parts) - 1):
        if parts[i].startswith(("ssh-", "ecdsa-", "sk-")):
            return f"{parts[0]} ({parts[i]} {_fingerprint(entry) or 'an unreadable key'})"
    return entry[:120]
