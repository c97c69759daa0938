"""Output made stable for a snapshot: the parts that differ from run to run become placeholders."""

from __future__ import annotations

import re

_RULES = [
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b"), "<TIME>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d-[a-z0-9-]+-[0-9a-f]{6}\b"), "<PREREG>"),
    (re.compile(r"\b[0-9a-f]{40}\b"), "<COMMIT>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<SHA256>"),
    (re.compile(r"/(?:tmp|private/var)/\S*?/repo\b"), "<REPO>"),
]


def normalise(text: str, **known: str) -> str:
    """`text` with times, preregistration ids, hashes and the test's repository path replaced.

    `known` names values the test knows (run="r1"): each is replaced by <NAME> first, whole words only.
    """
    for name, value in known.items():
        text = re.sub(rf"(?<![\w-]){re.escape(value)}(?![\w-])", f"<{name.upper()}>", text)
    for pattern, placeholder in _RULES:
        text = pattern.sub(placeholder, text)
    return text
