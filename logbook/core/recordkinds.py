"""What kind of file each path under the entries folder is, for sharing through git.

A logbook is shared by a team through git, so every file under the entries
folder has exactly one of three lifetimes, and everything that merges, verifies
or commits asks this module which:

- ``record``: written once by one writer, never edited or deleted once committed
  (preregistrations and their amendments, run records, notes, reviews,
  scorecards). A correction is a new record that supersedes the old one.
- ``log``: append-only, single writer (a run's event log, its committed metrics,
  the torn lines a log repair set aside). A later version must start with every
  byte of an earlier one.
- ``derived``: rendered from records and logs (the dated chronicle, plots,
  indexes, reports). Regenerated, never reconciled by hand, not covered by
  tamper checks.

Paths are POSIX paths relative to the entries folder.
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["record", "log", "derived"]

# The dated chronicle (YYYY/MM/DD.md and anything beside it in a day's folder),
# the plots, the reports, and generated indexes: all rebuilt by `logbook render`.
_DERIVED = re.compile(r"^(\d{4}/\d{2}/\d{2}(\.md|/.*)|\d{4}/(\d{2}/)?index\.md|assets/.*|reports/.*|index\.md|README\.md"
                      r"|\.gitattributes|\.gitignore)$")
_LOG = re.compile(r"^.*\.jsonl(\.torn)?$")


def classify(rel: str) -> Kind:
    """The lifetime of the file at `rel` (relative to the entries folder)."""
    if _DERIVED.match(rel):
        return "derived"
    if _LOG.match(rel):
        return "log"
    return "record"
