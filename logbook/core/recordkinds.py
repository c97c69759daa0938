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
- ``stray``: anything else (`render --out entries/week.pdf`, a file copied in
  by hand). No reader takes it in, so nothing it says can mislead; it is not
  a record, so two clones writing it never leave history broken for good.
  `logbook commit` refuses to add or change one, and `verify` warns about it.

Only paths a record kind knows are records: a new kind of record adds its
pattern to `_RECORD` (a path outside every pattern is a stray, never a record).

Paths are POSIX paths relative to the entries folder.
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["record", "log", "derived", "stray"]

# The dated chronicle (YYYY/MM/DD.md and anything beside it in a day's folder),
# the plots, the reports, and generated indexes: all rebuilt by `logbook render`.
_DERIVED = re.compile(r"^(\d{4}/\d{2}/\d{2}(\.md|/.*)|\d{4}/(\d{2}/)?index\.md|assets/.*|reports/.*|index\.md|README\.md"
                      r"|\.gitattributes|\.gitignore|\.gitkeep)$")
_LOG = re.compile(r"^.*\.jsonl(\.torn)?$")
_RECORD = re.compile(
    r"^(prereg/[^/]+\.md"                                        # preregistrations and their amendments
    r"|runs/[^/]+/run\.json|runs/[^/]+/outcome\.json"            # run records; an older logbook's scorecard
    r"|runs/[^/]+/outcomes/[^/]+\.json"                         # scorecards
    r"|(notes|reviews|acknowledgements)/[^/]+\.json"            # notes, reviews, acknowledgements (`trust.ack`)
    r"|key_acceptances/[^/]+\.json"                            # acceptances of a key for an address (`trust.signers`)
    r"|stamps/[0-9a-f]{64}/[^/]+\.tsr"                           # third-party time stamps (`trust.stamp_store`)
    r"|signatures/[0-9a-f]{64}/[^/]+\.sig)$")                    # signatures (`trust.signatures`)
TRACKED = ("record", "log")
"""The kinds whose every committed byte `verify` keeps."""


def classify(rel: str) -> Kind:
    """The lifetime of the file at `rel` (relative to the entries folder)."""
    if _DERIVED.match(rel):
        return "derived"
    if _LOG.match(rel):
        return "log"
    return "record" if _RECORD.match(rel) else "stray"


def where_it_could_go(rel: str) -> str:
    """A sentence for a stray file: where a file of its sort belongs instead."""
    name = rel.rsplit("/", 1)[-1]
    return (f"move it out of the logbook folder (e.g. `out/{name}`), or under `reports/` beside the rendered "
            "reports; notes are written with `logbook note`, files a note refers to live outside the logbook")
