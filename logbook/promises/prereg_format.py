"""The on-disk form of a preregistration or amendment record, and its Markdown body.

A record is YAML front matter between `---` lines, then a Markdown body that
renders the same content for people.

Canonical form for hashing: sha256 over the UTF-8 bytes of

    canonical_json(front_matter) + "\\n" + body

where `canonical_json` is `chain.canonical` (sorted keys, no spaces, UTF-8),
`front_matter` is the mapping the file's YAML parses to, and `body` is every
byte after the closing `---` line. The hash is not stored in the file (it
cannot be): it travels in the commit trailer, and `verify` recomputes it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

from logbook.core.errors import TamperedError, UsageError
from logbook.core.yamlsafe import load_yaml_text
from logbook.eventlog.chain import canonical
from logbook.promises.contingency import ContingencyRule
from logbook.promises.metric_names import Metric, declared_in
from logbook.promises.predictions import parse_prediction

SCHEMA = 1
SEEN = {"nothing": "nothing run yet", "run-started": "run started, no results seen", "results": "results seen"}


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


def parse_or_none(data: bytes) -> tuple[dict[str, Any], str] | None:
    """(front matter, body) of a record's bytes, or None when they are no readable record: for checks that only
    need what a record says when it can be read (the damage itself is reported by the check that compares hashes)."""
    try:
        return split_record(data.decode("utf-8"), "record")
    except (TamperedError, UnicodeDecodeError):
        return None


def read_record(path: Path, source: str) -> tuple[dict[str, Any], str, str]:
    """(front matter, body, sha256) of a record file."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise TamperedError(f"{source} is not UTF-8 any more") from None
    front, body = split_record(text, source)
    return front, body, record_hash(front, body)


def hash_as_written(front: dict[str, Any], body: str) -> str:
    """Hash what a reader will parse back, and prove the YAML round-trips."""
    back, back_body = split_record(render_record(front, body), "the new record")
    if back != front or back_body != body:
        raise UsageError("the record does not survive a YAML round trip; simplify the text")
    return record_hash(back, back_body)


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
    declared = declared_in(front)
    if declared:
        parts += ["## Declared metrics", _render_declared(declared)]
    parts += ["## Predictions", _render_predictions(front["predictions"], declared)]
    parts += ["## Contingency plan", _render_rules(front.get("contingency") or []) or "No contingency rules."]
    return "\n\n".join(parts) + "\n"


def _render_predictions(preds: list[dict[str, Any]], declared: dict[str, Metric] | None = None) -> str:
    return "\n".join(f"{i}. `{d['text']}`: {parse_prediction(d['text'], declared).describe()}"
                     for i, d in enumerate(preds, 1))


def _render_declared(declared: dict[str, Metric]) -> str:
    """One line per declared metric: its name, which way is better or its unit, and what it measures."""
    def kind(m: Metric) -> str:
        return f"{m.direction} is better" if m.direction else f"in {m.unit}"

    return "\n".join(f"- `{m.name}` ({kind(m)}): {m.description}" for m in declared.values())


def _render_rules(rules: list[dict[str, Any]]) -> str:
    lines = []
    for i, d in enumerate(rules, 1):
        rule = ContingencyRule.from_dict(d)
        lines.append(f"{i}. {rule.text}")
        lines.append(f"   - understood as: `{rule.summary()}`" if rule.structured else f"   - free text: {rule.warning}")
    return "\n".join(lines)


def render_amendment_body(front: dict[str, Any], title: str, declared: dict[str, Metric] | None = None) -> str:
    """The Markdown of an amendment; `declared`: the metrics its preregistration declares, which it may predict."""
    heading = f"# Amendment {front['n']} to {title}" if "n" in front else f"# Amendment to {title}"  # older: numbered
    ident = [] if "n" in front else [f"- **Id:** `{front['id']}`"]
    parts = [heading,
             "\n".join([*ident, f"- **Amends:** `{front['amends']}` (previous record `{front['previous']['file']}`, "
                        f"sha256 `{front['previous']['sha256'][:12]}…`)",
                        f"- **Created:** {front['created']}", f"- **Author:** `{front['author']}`",
                        f"- **Seen when amended:** {SEEN[front['seen']]} (`{front['seen']}`)",
                        f"- **Kind:** {front['kind']}"]),
             "## Reason", front["reason"]]
    if front["predictions"]:
        parts += ["## Added predictions", _render_predictions(front["predictions"], declared)]
    if front["contingency"]:
        parts += ["## Added contingency rules", _render_rules(front["contingency"])]
    return "\n\n".join(parts) + "\n"
