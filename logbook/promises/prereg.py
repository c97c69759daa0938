"""Preregistrations and their amendments: written once, committed alone, never edited.

A preregistration is `entries/prereg/<id>.md`; an amendment is
`entries/prereg/<id>.amend-<record id>.md`, linked by hash to the original and
to the latest amendment its author had seen. The record id (`records.py`) needs
no coordination, so two clones amending one preregistration at once write two
files, both survive a merge, and every clone orders them the same way: by
(created, record id). Older logbooks numbered amendments (`amend-1`); those
still read, ordered the same way. Both are records in the form `prereg_format` describes (YAML
front matter, a Markdown body, a canonical sha256); what a person may type is
checked by `prereg_input`. Each file is committed by itself (see
`gitbind.commit_file`) with the trailers `Logbook-Prereg: <id>`,
`Logbook-Sha256: <hash>` (and `Logbook-Amendment: <record id>` for amendments).

Ids are `YYYY-MM-DD-<slug of title>-<6 hex>`; the hex comes from a hash of the
author, the time and random bytes, so two people preregistering the same
title on different branches get different ids.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from logbook.core.errors import NotFoundError, RefusedError, TamperedError, UsageError
from logbook.core.project import Project
from logbook.records import gitbind
from logbook.promises.contingency import ContingencyRule
from logbook.promises.metric_names import Metric, declared_in
from logbook.promises.predictions import Forecast, Prediction, flatten, forecast_from_dict
from logbook.promises.prereg_format import SCHEMA, hash_as_written, read_record, render_body, render_record
from logbook.promises.prereg_input import ID_RE, PreregInput, check_id, slugify, validate_input
from logbook.trust.signatures import sign_record

AMEND_RE = re.compile(r"^(?P<id>[a-z0-9-]+)\.amend-(?P<n>[1-9]\d{0,3}|\d{8}T\d{12}Z-[0-9a-f]{8})\.md$")
"""`<prereg id>.amend-<key>.md`: the key is a record id (or, in older logbooks, a number)."""


# --- the model ---------------------------------------------------------------

@dataclass
class Amendment:
    """A later, timestamped addition to a preregistration."""

    prereg_id: str
    n: int
    """Position among the preregistration's amendments, from 1, in (created, key) order."""
    key: str
    """What names it: the record id in its file name (a number in older logbooks)."""
    created: str
    author: str
    reason: str
    seen: str
    """nothing | run-started | results: what had been seen when it was made."""
    predictions: list[Forecast]
    contingency: list[ContingencyRule]
    runs_started: list[str]
    path: Path
    sha256: str
    front: dict[str, Any]
    body: str = ""

    @property
    def kind(self) -> str:
        """`deviation` when results had been seen, else `amendment`."""
        return "deviation" if self.seen == "results" else "amendment"


@dataclass
class Prereg:
    """A preregistration as read from its file, with its amendments."""

    id: str
    title: str
    created: str
    author: str
    hypothesis: str
    rationale: str
    assumptions: list[str]
    predictions: list[Forecast]
    """As written: predictions, point forecasts and trajectories (see `all_predictions` for what is scored)."""
    contingency: list[ContingencyRule]
    config: dict[str, Any] | None
    """{"path", "sha256"} of the training config, or None."""
    budget: dict[str, Any] | None
    base_commit: str
    path: Path
    sha256: str
    front: dict[str, Any]
    body: str
    metrics: dict[str, Metric] = field(default_factory=dict)
    """The metrics it declares beyond the bundled set, by name (`metric_names`); its amendments may predict them."""
    amendments: list[Amendment] = field(default_factory=list)

    def in_force(self, keys: list[str] | None) -> list[Amendment]:
        """The amendments among `keys` (those a run saw at its start); all of them when `keys` is None."""
        return list(self.amendments) if keys is None else [a for a in self.amendments if a.key in set(keys)]

    def all_predictions(self, keys: list[str] | None = None) -> list[tuple[Prediction, str]]:
        """Every prediction with where it came from: `original` or `amend-<n>` (only amendments in `keys`);
        trajectories as their points."""
        out = [(p, "original") for p in flatten(self.predictions)]
        for a in self.in_force(keys):
            out += [(p, f"amend-{a.n}") for p in flatten(a.predictions)]
        return out

    def all_contingency(self, keys: list[str] | None = None) -> list[ContingencyRule]:
        """The contingency plan, amendments in `keys` included, in order (rule numbers are 1-based positions)."""
        return self.contingency + [r for a in self.in_force(keys) for r in a.contingency]

    def to_dict(self) -> dict[str, Any]:
        return {**self.front, "path": str(self.path), "sha256": self.sha256,
                "amendments": [{**a.front, "n": a.n, "key": a.key, "kind": a.kind, "path": str(a.path),
                                "sha256": a.sha256} for a in self.amendments]}


@dataclass
class Written:
    """What `create_prereg` / `amend_prereg` committed."""

    id: str
    commit: str
    sha256: str
    path: Path
    front: dict[str, Any]
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "commit": self.commit, "sha256": self.sha256, "path": str(self.path),
                "warnings": self.warnings}


# --- writing -----------------------------------------------------------------

def prereg_path(project: Project, prereg_id: str) -> Path:
    return project.prereg_dir / f"{check_id(prereg_id)}.md"


def amendment_path(project: Project, prereg_id: str, key: str) -> Path:
    return project.prereg_dir / f"{check_id(prereg_id)}.amend-{key}.md"


def relpath(project: Project, path: Path) -> str:
    return path.relative_to(project.root).as_posix()


def utc_or_now(now: datetime | None) -> datetime:
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc)


def _new_id(created: datetime, title: str, author: str, nonce: bytes) -> str:
    salt = hashlib.sha256(f"{author}\0{created.isoformat()}\0".encode() + nonce).hexdigest()[:6]
    return f"{created:%Y-%m-%d}-{slugify(title)}-{salt}"

def create_prereg(project: Project, inp: PreregInput, *, now: datetime | None = None,
                  nonce: bytes | None = None) -> Written:
    """Validate, write and commit a preregistration; the commit holds only its file."""
    fields, warnings = validate_input(project, inp)
    state = gitbind.check_repo_state(project.root)
    author = gitbind.author_ident(project.root)
    created = utc_or_now(now).replace(microsecond=0)
    prereg_id = _new_id(created, fields["title"], author, nonce if nonce is not None else os.urandom(16))
    path = prereg_path(project, prereg_id)
    if path.exists() or _committed_anywhere(project, prereg_id):
        raise RefusedError(f"preregistration {prereg_id} already exists", hint="ids are never reused; retry for a new one")
    front = {"schema": SCHEMA, "id": prereg_id, "title": fields["title"],
             "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"), "author": author,
             **{k: fields[k] for k in ("hypothesis", "rationale", "assumptions")},
             # Only a preregistration that declares metrics has the key, so one that does not reads as before.
             **({"metrics": fields["metrics"]} if fields.get("metrics") else {}),
             **{k: fields[k] for k in ("predictions", "contingency", "config", "budget")},
             "base_commit": state.head}
    # What the working tree held beyond the base commit (an untracked config, an
    # edit not yet committed): a run that trains this very code is no deviation.
    uncommitted = gitbind.uncommitted_blobs(project.root, relpath(project, project.entries))
    if uncommitted:
        front["uncommitted"] = uncommitted
    body = render_body(front)
    digest = hash_as_written(front, body)
    message = gitbind.format_message(
        f"Preregister {prereg_id}",
        f"{fields['title']}\n\n" + "\n".join(f"- {p['text']}" for p in fields["predictions"]),
        [("Logbook-Prereg", prereg_id), ("Logbook-Sha256", digest)],
    )
    done = gitbind.commit_file(project.root, relpath(project, path),
                               render_record(front, body).encode("utf-8"), message, state)
    warnings += sign_record(project, digest, what=f"preregistration {prereg_id}")  # `logbook commit` commits it
    return Written(prereg_id, done.commit, digest, path, front, warnings)

def _committed_anywhere(project: Project, prereg_id: str) -> bool:
    """An id already used on any branch (a colleague's, fetched) is refused too."""
    tcs = gitbind.trailer_commits(project.root, "Logbook-Prereg")
    return any(tc.trailers.get("Logbook-Prereg") == prereg_id for tc in tcs)


# --- reading -----------------------------------------------------------------

def _load_amendment(project: Project, prereg_id: str, key: str, path: Path,
                    declared: dict[str, Metric]) -> Amendment:
    front, body, digest = read_record(path, relpath(project, path))
    try:
        return Amendment(
            prereg_id=prereg_id, n=0, key=key, created=str(front["created"]), author=str(front["author"]),
            reason=str(front["reason"]), seen=str(front["seen"]),
            predictions=[forecast_from_dict(d, declared) for d in front.get("predictions") or []],
            contingency=[ContingencyRule.from_dict(d) for d in front.get("contingency") or []],
            runs_started=list(front.get("runs_started") or []), path=path, sha256=digest, front=front, body=body)
    except (KeyError, TypeError, ValueError, AttributeError, UsageError) as e:
        raise TamperedError(f"{relpath(project, path)}: front matter is damaged ({e})") from None


def amendment_files(project: Project, prereg_id: str) -> list[tuple[str, Path]]:
    """(key, path) of the amendment files present (unordered: `load_prereg` orders them by time)."""
    out = []
    prefix = f"{check_id(prereg_id)}.amend-"
    try:
        names = os.listdir(project.prereg_dir)  # names, not a glob: verify asks this of every preregistration
    except (FileNotFoundError, NotADirectoryError):
        return []
    for name in names:
        m = AMEND_RE.match(name) if name.startswith(prefix) and name.endswith(".md") else None
        if m and m.group("id") == prereg_id:
            out.append((m.group("n"), project.prereg_dir / name))
    return sorted(out)


def amended_ids(project: Project) -> set[str]:
    """The ids of the preregistrations that have at least one amendment file, from one listing of the folder."""
    try:
        names = os.listdir(project.prereg_dir)
    except (FileNotFoundError, NotADirectoryError):
        return set()
    return {m.group("id") for m in map(AMEND_RE.match, names) if m}


def _order(a: Amendment) -> tuple[str, int, str]:
    """(created, key): the same order on every clone. Old numbered keys sort by number among themselves."""
    created = a.created if "." in a.created else a.created.replace("Z", ".000000Z")  # older: whole seconds
    return (created, int(a.key) if a.key.isdigit() else 0, a.key)


def load_prereg(project: Project, prereg_id: str) -> Prereg:
    """Read one preregistration and its amendments (no git checks: see `verify`)."""
    path = prereg_path(project, prereg_id)
    if not path.exists():
        known = [p.stem for p in _prereg_files(project)]
        raise NotFoundError(f"unknown preregistration {prereg_id!r}",
                            hint=f"known: {', '.join(known[-5:])}" if known else "none yet: create one with `logbook prereg`")
    front, body, digest = read_record(path, relpath(project, path))
    try:
        declared = declared_in(front)
        prereg = Prereg(
            id=str(front["id"]), title=str(front["title"]), created=str(front["created"]),
            author=str(front["author"]), hypothesis=str(front["hypothesis"]),
            rationale=str(front.get("rationale") or ""), assumptions=list(front.get("assumptions") or []),
            predictions=[forecast_from_dict(d, declared) for d in front["predictions"]],
            contingency=[ContingencyRule.from_dict(d) for d in front.get("contingency") or []],
            config=front.get("config"), budget=front.get("budget"), base_commit=str(front.get("base_commit", "")),
            path=path, sha256=digest, front=front, body=body, metrics=declared)
    except (KeyError, TypeError, ValueError, AttributeError, UsageError) as e:
        raise TamperedError(f"{relpath(project, path)}: front matter is damaged ({e})") from None
    amendments = sorted((_load_amendment(project, prereg_id, k, p, declared)
                         for k, p in amendment_files(project, prereg_id)),
                        key=_order)
    for n, a in enumerate(amendments, start=1):
        a.n = n
    prereg.amendments = amendments
    return prereg


def _prereg_files(project: Project) -> list[Path]:
    if not project.prereg_dir.is_dir():
        return []
    return sorted(p for p in project.prereg_dir.glob("*.md") if ID_RE.match(p.stem))


def scan_preregs(project: Project) -> tuple[list[Prereg], list[str]]:
    """Every readable preregistration (oldest first) and a message per damaged one."""
    found, damaged = [], []
    for p in _prereg_files(project):
        try:
            found.append(load_prereg(project, p.stem))
        except TamperedError as e:
            damaged.append(e.message)
    found.sort(key=lambda r: (r.created, r.id))
    return found, damaged


def list_preregs(project: Project) -> list[Prereg]:
    """Every readable preregistration, oldest first (damaged ones: see `verify`)."""
    return scan_preregs(project)[0]


def resolve_prereg_id(project: Project, text: str) -> str | None:
    """An exact id, or the one id that starts with `text`, or whose title part (after the date) does; None when nothing matches."""
    if ID_RE.match(text or "") and (project.prereg_dir / f"{text}.md").exists():
        return text
    if not re.match(r"^[a-z0-9-]+$", text or ""):
        return None
    # The title part lets a person name a preregistration as they remember it (`--prereg qk-norm`).
    matches = [p.stem for p in _prereg_files(project) if p.stem.startswith(text) or p.stem[11:].startswith(text)]
    if len(matches) > 1:
        raise UsageError(f"{text!r} matches {len(matches)} preregistrations",
                         hint=f"give more of the id: {', '.join(matches[:4])}")
    return matches[0] if matches else None


def runs_referencing(project: Project) -> dict[str, list[str]]:
    """prereg id -> run ids whose run record names it."""
    import json

    out: dict[str, list[str]] = {}
    if not project.runs_dir.is_dir():
        return out
    for d in sorted(project.runs_dir.iterdir()):
        try:
            rec = json.loads((d / "run.json").read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("prereg_id"), str):
            out.setdefault(rec["prereg_id"], []).append(d.name)
    return out
