"""Preregistrations and their amendments: written once, committed alone, never edited.

A preregistration is `entries/prereg/<id>.md`: YAML front matter between `---`
lines, then a Markdown body that renders the same content for people. An
amendment is `entries/prereg/<id>.amend-<n>.md`, linked to the original and to
the previous amendment by hash. Each file is committed by itself (see
`gitbind.commit_file`) with the trailers `Logbook-Prereg: <id>`,
`Logbook-Sha256: <hash>` (and `Logbook-Amendment: <n>` for amendments).

Canonical form for hashing: sha256 over the UTF-8 bytes of

    canonical_json(front_matter) + "\\n" + body

where `canonical_json` is `chain.canonical` (sorted keys, no spaces, UTF-8),
`front_matter` is the mapping the file's YAML parses to, and `body` is every
byte after the closing `---` line. The hash is not stored in the file (it
cannot be): it travels in the commit trailer, and `verify` recomputes it.

Ids are `YYYY-MM-DD-<slug of title>-<6 hex>`; the hex comes from a hash of the
author, the time and random bytes, so two people preregistering the same
title on different branches get different ids.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from . import gitbind
from .chain import canonical
from .contingency import ContingencyRule, parse_rule
from .errors import NotFoundError, RefusedError, TamperedError, UsageError, did_you_mean
from .predictions import Prediction, parse_prediction
from .project import Project
from .yamlsafe import load_yaml_text

SCHEMA = 1
SEEN = {"nothing": "nothing run yet", "run-started": "run started, no results seen", "results": "results seen"}
ID_RE = re.compile(r"^\d{4}-\d{2}-\d{2}-[a-z0-9]+(?:-[a-z0-9]+)*$")
AMEND_RE = re.compile(r"^(?P<id>[a-z0-9-]+)\.amend-(?P<n>[1-9]\d{0,3})\.md$")
_FORBIDDEN_TITLE = set("`$<>|;&\\")
_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_MAX_TITLE = 120
_MAX_TEXT = 20_000


# --- the record format -------------------------------------------------------

def record_hash(front: dict[str, Any], body: str) -> str:
    """sha256 of the canonical form (see the module docstring)."""
    try:
        text = canonical(front) + "\n" + body
    except (TypeError, ValueError) as e:
        raise TamperedError(f"front matter holds a value that is not plain data ({e})") from None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def render_record(front: dict[str, Any], body: str) -> str:
    dumped = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=10_000, default_flow_style=False)
    return f"---\n{dumped}---\n{body}"


def split_record(text: str, source: str) -> tuple[dict[str, Any], str]:
    """Front matter and body of a record file; a damaged file raises TamperedError."""
    if not text.startswith("---\n"):
        raise TamperedError(f"{source} does not start with a `---` front-matter line")
    end = text.find("\n---\n", 3)
    if end < 0:
        raise TamperedError(f"{source} has no closing `---` after its front matter")
    try:
        front = load_yaml_text(text[4:end + 1], source)
    except UsageError as e:
        raise TamperedError(f"{source}: front matter no longer parses ({e.message})") from None
    if not isinstance(front, dict):
        raise TamperedError(f"{source}: front matter is not a mapping")
    return front, text[end + 5:]


def read_record(path: Path, source: str) -> tuple[dict[str, Any], str, str]:
    """(front matter, body, sha256) of a record file."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise TamperedError(f"{source} is not UTF-8 any more") from None
    front, body = split_record(text, source)
    return front, body, record_hash(front, body)


# --- input validation --------------------------------------------------------

def check_text(value: str, what: str, *, required: bool = False) -> str:
    """Free text: valid UTF-8, no control characters but newline and tab, bounded length."""
    if not isinstance(value, str):
        raise UsageError(f"{what} must be text, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} is not valid UTF-8 text") from None
    value = value.strip()
    if required and not value:
        raise UsageError(f"{what} is empty", hint=f"say it in a sentence: a preregistration without {what} proves nothing")
    bad = next((c for c in value if (unicodedata.category(c) == "Cc" and c not in "\n\t") or c in _BIDI), None)
    if bad is not None:
        raise UsageError(f"{what} contains a control character (U+{ord(bad):04X})", hint="remove it and retry")
    if len(value) > _MAX_TEXT:
        raise UsageError(f"{what} is longer than {_MAX_TEXT} characters")
    return value


def check_title(title: str) -> str:
    """A title becomes part of an id, a file name and a commit subject: keep it plain."""
    if title is None or not str(title).strip():
        raise UsageError("the title is empty", hint="give a short title: --title 'qk-norm removes spikes'")
    title = str(title)
    if title.lstrip().startswith("-"):
        raise UsageError(f"the title {title!r} starts with '-' and would read as an option",
                         hint="start the title with a word")
    title = check_text(title, "the title")
    if "\n" in title or "\t" in title:
        raise UsageError("the title must be a single line")
    bad = sorted({c for c in title if c in _FORBIDDEN_TITLE})
    if bad:
        raise UsageError(f"the title contains {' '.join(bad)}",
                         hint="titles may not contain ` $ < > | ; & \\ (shell and markup characters); use words")
    if len(title) > _MAX_TITLE:
        raise UsageError(f"the title is longer than {_MAX_TITLE} characters", hint="put the detail in --hypothesis")
    if not slugify(title):
        raise UsageError("the title needs at least one letter or digit (it names the file)")
    return title


def slugify(title: str, limit: int = 48) -> str:
    ascii_ = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_).strip("-")
    if len(slug) > limit:
        slug = slug[:limit].rsplit("-", 1)[0] if "-" in slug[:limit] else slug[:limit]
    return slug.strip("-")


def check_id(prereg_id: str) -> str:
    """Refuse ids that could escape the prereg folder or read as options."""
    if not isinstance(prereg_id, str) or len(prereg_id) > 100 or not ID_RE.match(prereg_id):
        raise UsageError(f"invalid preregistration id {prereg_id!r}",
                         hint="ids look like 2026-11-30-qknorm-removes-spikes-3f9a (see `logbook ls`)")
    return prereg_id


_BUDGET_UNITS = [
    ("gpu-hours", r"gpu[- ]?(?:hours?|hrs?|h)"),
    ("device-hours", r"(?:device|accelerator|node)[- ]?(?:hours?|hrs?|h)"),
    ("hours", r"(?:hours?|hrs?|h)"),
    ("tokens", r"(?:tokens?|tok)"),
    ("steps", r"(?:steps?)"),
]
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_budget(text: str) -> dict[str, Any]:
    """`8 GPU-hours` -> {"text", "amount": 8, "unit": "gpu-hours"}; amount/unit None if not understood."""
    text = check_text(text, "the budget")
    m = re.match(r"^(\d+(?:[.,]\d+)?)\s*([kmbgtKMBGT](?![A-Za-z]))?\s*(.*)$", text)
    if m:
        amount = float(m.group(1).replace(",", "")) * _SCALE.get((m.group(2) or "").lower(), 1.0)
        unit_text = m.group(3).strip().lower().replace("_", "-")
        for unit, rx in _BUDGET_UNITS:
            if re.fullmatch(rx, unit_text):
                value: int | float = int(amount) if amount.is_integer() else amount
                return {"text": text, "amount": value, "unit": unit}
    return {"text": text, "amount": None, "unit": None}


# --- the model ---------------------------------------------------------------

@dataclass
class PreregInput:
    """What a person states before a run (from flags, a YAML file or the editor)."""

    title: str
    hypothesis: str
    predictions: list[str]
    contingency: list[str] = field(default_factory=list)
    config: str | None = None
    """Training config path: absolute, or relative to the current directory or the repository root."""
    budget: str | None = None
    rationale: str = ""
    assumptions: list[str] = field(default_factory=list)


INPUT_KEYS = ("title", "hypothesis", "predictions", "contingency", "config", "budget", "rationale", "assumptions")


def input_from_mapping(data: Any, source: str) -> PreregInput:
    """Build input from a parsed YAML mapping; unknown keys name the closest known one."""
    if not isinstance(data, dict):
        raise UsageError(f"{source}: expected a mapping with {', '.join(INPUT_KEYS)}")
    for key in data:
        if key not in INPUT_KEYS:
            raise UsageError(f"{source}: unknown key `{key}`",
                             hint=did_you_mean(key, INPUT_KEYS, f"known keys: {', '.join(INPUT_KEYS)}"))

    def text(key: str) -> str:
        v = data.get(key)
        if v is None:
            return ""
        if isinstance(v, (dict, list)):
            raise UsageError(f"{source}: `{key}` must be text")
        return str(v)

    def items(key: str) -> list[str]:
        v = data.get(key)
        if v is None:
            return []
        if isinstance(v, (str, int, float)):
            return [str(v)]
        if not isinstance(v, list) or any(isinstance(x, (dict, list)) or x is None for x in v):
            raise UsageError(f"{source}: `{key}` must be a list of lines")
        return [str(x) for x in v]

    return PreregInput(title=text("title"), hypothesis=text("hypothesis"), predictions=items("predictions"),
                       contingency=items("contingency"), config=text("config") or None,
                       budget=text("budget") or None, rationale=text("rationale"), assumptions=items("assumptions"))


@dataclass
class Amendment:
    """A later, timestamped addition to a preregistration."""

    prereg_id: str
    n: int
    created: str
    author: str
    reason: str
    seen: str
    """nothing | run-started | results: what had been seen when it was made."""
    predictions: list[Prediction]
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
    predictions: list[Prediction]
    contingency: list[ContingencyRule]
    config: dict[str, Any] | None
    """{"path", "sha256"} of the training config, or None."""
    budget: dict[str, Any] | None
    base_commit: str
    path: Path
    sha256: str
    front: dict[str, Any]
    body: str
    amendments: list[Amendment] = field(default_factory=list)

    def all_predictions(self) -> list[tuple[Prediction, str]]:
        """Every prediction with where it came from: `original` or `amend-<n>`."""
        out = [(p, "original") for p in self.predictions]
        for a in self.amendments:
            out += [(p, f"amend-{a.n}") for p in a.predictions]
        return out

    def all_contingency(self) -> list[ContingencyRule]:
        """The contingency plan, amendments included, in order (rule numbers are 1-based positions)."""
        return self.contingency + [r for a in self.amendments for r in a.contingency]

    def to_dict(self) -> dict[str, Any]:
        return {**self.front, "path": str(self.path), "sha256": self.sha256,
                "amendments": [{**a.front, "kind": a.kind, "path": str(a.path), "sha256": a.sha256}
                               for a in self.amendments]}


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


def amendment_path(project: Project, prereg_id: str, n: int) -> Path:
    return project.prereg_dir / f"{check_id(prereg_id)}.amend-{int(n)}.md"


def _relpath(project: Project, path: Path) -> str:
    return path.relative_to(project.root).as_posix()


def _utc(now: datetime | None) -> datetime:
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc)


def _parse_predictions(texts: list[str]) -> list[Prediction]:
    out = []
    for i, raw in enumerate(texts, start=1):
        check_text(raw, f"prediction {i}", required=True)
        try:
            out.append(parse_prediction(raw))
        except UsageError as e:
            raise UsageError(f"prediction {i}: {e.message}", hint=e.hint) from None
    texts_seen = [p.to_text() for p in out]
    dup = next((t for t in texts_seen if texts_seen.count(t) > 1), None)
    if dup:
        raise UsageError(f"prediction `{dup}` is given twice")
    return out


def _parse_contingency(texts: list[str]) -> tuple[list[ContingencyRule], list[str]]:
    rules, warnings = [], []
    for i, raw in enumerate(texts, start=1):
        check_text(raw, f"contingency rule {i}", required=True)
        rule = parse_rule(raw)
        rules.append(rule)
        if not rule.structured:
            warnings.append(f"contingency rule {i} ({rule.text!r}): {rule.warning}")
    return rules, warnings


def _config_entry(project: Project, config: str | None) -> dict[str, Any] | None:
    if not config:
        return None
    given = Path(config)
    # Relative paths are read from the current directory, else from the repository root.
    candidates = [given] if given.is_absolute() else [Path.cwd() / given, project.root / given]
    path = next((c for c in candidates if c.exists()), candidates[0]).resolve()
    if not path.exists():
        raise UsageError(f"config file not found: {config}", hint="give the path of the training config this run will use")
    if not path.is_file():
        raise UsageError(f"config path is not a file: {config}")
    try:
        rel = path.relative_to(project.root).as_posix()
    except ValueError:
        raise UsageError(f"config {config} is outside the repository {project.root}",
                         hint="keep the config in the repository so the run can be reproduced from its commit") from None
    return {"path": rel, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _new_id(created: datetime, title: str, author: str, nonce: bytes) -> str:
    salt = hashlib.sha256(f"{author}\0{created.isoformat()}\0".encode() + nonce).hexdigest()[:6]
    return f"{created:%Y-%m-%d}-{slugify(title)}-{salt}"


def validate_input(project: Project, inp: PreregInput) -> tuple[dict[str, Any], list[str]]:
    """Check everything a person typed; return the content fields of the front matter and warnings."""
    title = check_title(inp.title)
    hypothesis = check_text(inp.hypothesis, "the hypothesis", required=True)
    if not inp.predictions:
        raise UsageError("no predictions given",
                         hint="add at least one machine-checkable prediction: --predict 'val_loss@final < 1.45'")
    predictions = _parse_predictions(list(inp.predictions))
    rules, warnings = _parse_contingency(list(inp.contingency))
    budget = parse_budget(inp.budget) if inp.budget and inp.budget.strip() else None
    if budget and budget["amount"] is None:
        warnings.append(f"budget {budget['text']!r} not understood as an amount of gpu-hours, "
                        "device-hours, hours, tokens or steps: kept as text")
    fields = {
        "title": title,
        "hypothesis": hypothesis,
        "rationale": check_text(inp.rationale or "", "the rationale"),
        "assumptions": [check_text(a, f"assumption {i}", required=True) for i, a in enumerate(inp.assumptions, 1)],
        "predictions": [p.to_dict() for p in predictions],
        "contingency": [r.to_dict() for r in rules],
        "config": _config_entry(project, inp.config),
        "budget": budget,
    }
    return fields, warnings


def create_prereg(project: Project, inp: PreregInput, *, now: datetime | None = None,
                  nonce: bytes | None = None) -> Written:
    """Validate, write and commit a preregistration; the commit holds only its file."""
    fields, warnings = validate_input(project, inp)
    state = gitbind.check_repo_state(project.root)
    author = gitbind.author_ident(project.root)
    created = _utc(now).replace(microsecond=0)
    prereg_id = _new_id(created, fields["title"], author, nonce if nonce is not None else os.urandom(16))
    path = prereg_path(project, prereg_id)
    if path.exists() or _committed_anywhere(project, prereg_id):
        raise RefusedError(f"preregistration {prereg_id} already exists", hint="ids are never reused; retry for a new one")
    front = {"schema": SCHEMA, "id": prereg_id, "title": fields["title"],
             "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"), "author": author,
             **{k: fields[k] for k in ("hypothesis", "rationale", "assumptions", "predictions",
                                       "contingency", "config", "budget")},
             "base_commit": state.head}
    body = render_body(front)
    digest = _hash_as_written(front, body)
    message = gitbind.format_message(
        f"Preregister {prereg_id}",
        f"{fields['title']}\n\n" + "\n".join(f"- {p['text']}" for p in fields["predictions"]),
        [("Logbook-Prereg", prereg_id), ("Logbook-Sha256", digest)],
    )
    done = gitbind.commit_file(project.root, _relpath(project, path),
                               render_record(front, body).encode("utf-8"), message, state)
    return Written(prereg_id, done.commit, digest, path, front, warnings)


def _hash_as_written(front: dict[str, Any], body: str) -> str:
    """Hash what a reader will parse back, and prove the YAML round-trips."""
    back, back_body = split_record(render_record(front, body), "the new record")
    if back != front or back_body != body:
        raise UsageError("the record does not survive a YAML round trip; simplify the text")
    return record_hash(back, back_body)


def _committed_anywhere(project: Project, prereg_id: str) -> bool:
    """An id already used on any branch (a colleague's, fetched) is refused too."""
    tcs = gitbind.trailer_commits(project.root, "Logbook-Prereg")
    return any(tc.trailers.get("Logbook-Prereg") == prereg_id for tc in tcs)


def amend_prereg(project: Project, prereg_id: str, *, reason: str, seen: str,
                 predictions: list[str] | None = None, contingency: list[str] | None = None,
                 now: datetime | None = None) -> Written:
    """Add amendment n+1 to a preregistration; its file links the original and the previous record by hash."""
    from .verify import verify_project

    check_id(prereg_id)
    if seen not in SEEN:
        raise UsageError(f"--seen must be one of {', '.join(SEEN)}, got {seen!r}",
                         hint="nothing: nothing run yet; run-started: no results seen; results: results seen")
    reason = check_text(reason or "", "the reason", required=True)
    preds = _parse_predictions(list(predictions or []))
    rules, warnings = _parse_contingency(list(contingency or []))
    prereg = load_prereg(project, prereg_id)
    report = verify_project(project, prereg_id)
    if not report.ok:
        raise TamperedError(f"preregistration {prereg_id} does not verify: {report.problems[0].message}",
                            hint="run `logbook verify` for the full list; an amendment cannot build on a changed record")
    runs = runs_referencing(project).get(prereg_id, [])
    if seen == "nothing" and runs:
        raise RefusedError(f"run {runs[0]} already answers to {prereg_id}, so `--seen nothing` is not true",
                           hint="use --seen run-started (no results seen) or --seen results")
    state = gitbind.check_repo_state(project.root)
    n = len(prereg.amendments) + 1
    prev_path, prev_hash = (prereg.path, prereg.sha256) if n == 1 else \
        (prereg.amendments[-1].path, prereg.amendments[-1].sha256)
    front = {"schema": SCHEMA, "amends": prereg_id, "n": n,
             "created": _utc(now).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "author": gitbind.author_ident(project.root), "reason": reason, "seen": seen,
             "kind": "deviation" if seen == "results" else "amendment",
             "original": {"file": prereg.path.name, "sha256": prereg.sha256},
             "previous": {"file": prev_path.name, "sha256": prev_hash},
             "predictions": [p.to_dict() for p in preds], "contingency": [r.to_dict() for r in rules],
             "runs_started": runs, "base_commit": state.head}
    body = render_amendment_body(front, prereg.title)
    digest = _hash_as_written(front, body)
    path = amendment_path(project, prereg_id, n)
    message = gitbind.format_message(
        f"Amend {prereg_id} ({n})", reason.splitlines()[0][:200],
        [("Logbook-Prereg", prereg_id), ("Logbook-Amendment", str(n)), ("Logbook-Sha256", digest)])
    done = gitbind.commit_file(project.root, _relpath(project, path),
                               render_record(front, body).encode("utf-8"), message, state)
    return Written(prereg_id, done.commit, digest, path, front, warnings)


# --- reading -----------------------------------------------------------------

def _load_amendment(project: Project, prereg_id: str, path: Path) -> Amendment:
    front, body, digest = read_record(path, _relpath(project, path))
    try:
        return Amendment(
            prereg_id=prereg_id, n=int(front["n"]), created=str(front["created"]), author=str(front["author"]),
            reason=str(front["reason"]), seen=str(front["seen"]),
            predictions=[Prediction.from_dict(d) for d in front.get("predictions") or []],
            contingency=[ContingencyRule.from_dict(d) for d in front.get("contingency") or []],
            runs_started=list(front.get("runs_started") or []), path=path, sha256=digest, front=front, body=body)
    except (KeyError, TypeError, ValueError, AttributeError, UsageError) as e:
        raise TamperedError(f"{_relpath(project, path)}: front matter is damaged ({e})") from None


def amendment_files(project: Project, prereg_id: str) -> list[tuple[int, Path]]:
    """(n, path) of the amendment files present, in order."""
    out = []
    if project.prereg_dir.is_dir():
        for p in project.prereg_dir.glob(f"{check_id(prereg_id)}.amend-*.md"):
            m = AMEND_RE.match(p.name)
            if m and m.group("id") == prereg_id:
                out.append((int(m.group("n")), p))
    return sorted(out)


def load_prereg(project: Project, prereg_id: str) -> Prereg:
    """Read one preregistration and its amendments (no git checks: see `verify`)."""
    path = prereg_path(project, prereg_id)
    if not path.exists():
        known = [p.stem for p in _prereg_files(project)]
        raise NotFoundError(f"unknown preregistration {prereg_id!r}",
                            hint=f"known: {', '.join(known[-5:])}" if known else "none yet: create one with `logbook prereg`")
    front, body, digest = read_record(path, _relpath(project, path))
    try:
        prereg = Prereg(
            id=str(front["id"]), title=str(front["title"]), created=str(front["created"]),
            author=str(front["author"]), hypothesis=str(front["hypothesis"]),
            rationale=str(front.get("rationale") or ""), assumptions=list(front.get("assumptions") or []),
            predictions=[Prediction.from_dict(d) for d in front["predictions"]],
            contingency=[ContingencyRule.from_dict(d) for d in front.get("contingency") or []],
            config=front.get("config"), budget=front.get("budget"), base_commit=str(front.get("base_commit", "")),
            path=path, sha256=digest, front=front, body=body)
    except (KeyError, TypeError, ValueError, AttributeError, UsageError) as e:
        raise TamperedError(f"{_relpath(project, path)}: front matter is damaged ({e})") from None
    prereg.amendments = [_load_amendment(project, prereg_id, p) for _n, p in amendment_files(project, prereg_id)]
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
    """An exact id, or the one id that starts with `text`; None when nothing matches."""
    if ID_RE.match(text or "") and (project.prereg_dir / f"{text}.md").exists():
        return text
    if not re.match(r"^[a-z0-9-]+$", text or ""):
        return None
    matches = [p.stem for p in _prereg_files(project) if p.stem.startswith(text)]
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


# --- the Markdown body -------------------------------------------------------

def _bullets(items: list[str]) -> str:
    return "\n".join(f"- {x}" for x in items)


def render_body(front: dict[str, Any]) -> str:
    """The Markdown a person reads; the front matter is what programs read."""
    cfg = front.get("config")
    budget = front.get("budget")
    meta = [f"- **Id:** `{front['id']}`", f"- **Created:** {front['created']}",
            f"- **Author:** `{front['author']}`", f"- **Base commit:** `{front['base_commit'][:12]}`",
            f"- **Config:** `{cfg['path']}` (sha256 `{cfg['sha256'][:12]}…`)" if cfg else "- **Config:** none given",
            f"- **Budget:** {budget['text']}" if budget else "- **Budget:** none given"]
    parts = [f"# {front['title']}", "\n".join(meta), "## Hypothesis", front["hypothesis"]]
    if front.get("rationale"):
        parts += ["## Rationale", front["rationale"]]
    if front.get("assumptions"):
        parts += ["## Assumptions", _bullets(front["assumptions"])]
    parts += ["## Predictions", _render_predictions(front["predictions"])]
    parts += ["## Contingency plan", _render_rules(front.get("contingency") or []) or "No contingency rules."]
    return "\n\n".join(parts) + "\n"


def _render_predictions(preds: list[dict[str, Any]]) -> str:
    return "\n".join(f"{i}. `{d['text']}`: {parse_prediction(d['text']).describe()}" for i, d in enumerate(preds, 1))


def _render_rules(rules: list[dict[str, Any]]) -> str:
    lines = []
    for i, d in enumerate(rules, 1):
        rule = ContingencyRule.from_dict(d)
        lines.append(f"{i}. {rule.text}")
        lines.append(f"   - understood as: `{rule.summary()}`" if rule.structured else f"   - free text: {rule.warning}")
    return "\n".join(lines)


def render_amendment_body(front: dict[str, Any], title: str) -> str:
    parts = [f"# Amendment {front['n']} to {title}",
             "\n".join([f"- **Amends:** `{front['amends']}` (previous record `{front['previous']['file']}`, "
                        f"sha256 `{front['previous']['sha256'][:12]}…`)",
                        f"- **Created:** {front['created']}", f"- **Author:** `{front['author']}`",
                        f"- **Seen when amended:** {SEEN[front['seen']]} (`{front['seen']}`)",
                        f"- **Kind:** {front['kind']}"]),
             "## Reason", front["reason"]]
    if front["predictions"]:
        parts += ["## Added predictions", _render_predictions(front["predictions"])]
    if front["contingency"]:
        parts += ["## Added contingency rules", _render_rules(front["contingency"])]
    return "\n\n".join(parts) + "\n"
