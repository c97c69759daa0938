"""`verify`'s third-party time: every stamp checked offline, and "before" proven, or not, by the stamps.

- Every stamp file must verify against the CA logbook.yaml commits for its
  authority (signature, chain, imprint equal to the hash it is filed under);
  a bad or mismatched token is tampering (`stamp_invalid`).
- Every stamp must prove something still here: a preregistration, amendment,
  run record or scorecard with that hash, or a line of a run's event log with
  that chain hash. A stamped log line that is gone (the log was re-chained or
  cut) is tampering (`stamp_orphan`): a log cannot change before its last
  stamped head.
- A run answers to its preregistration only when the preregistration's
  earliest stamp, and those of the amendments in force at launch, are earlier
  than the run record's earliest stamp (`stamped_after_run` otherwise).
- A stamp proves only that a record existed by then: when every stamp of a
  run (its record, its log's heads) is later than its last event, nothing
  proves its order (`stamps_after_run`): a warning, exit 4 with `require`.
- With `require: true`, a record without a valid stamp is `stamp_missing`.
- A run's log after its last *timely* stamped head (stamped within the
  authority's timeout plus `TAIL_GRACE_S` of its event) has no third-party
  time (`unproven_tail`): a warning, exit 4 when stamps are required. Stamps
  after the last timely one can be deleted with the lines they prove, and a
  rewritten tail stamped anew; only a stamp that came in time pins a line.

No authority configured: "no third-party time", its own state, not a failure.
"""

from __future__ import annotations

import hashlib

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from logbook.core.clockskew import AHEAD_S
from logbook.core.errors import UsageError
from logbook.core.project import Project
from logbook.eventlog.chain import iter_records
from logbook.eventlog.kinds import is_terminal
from logbook.trust.stamp_fetch import Stampable, prereg_records, run_records
from logbook.trust.stamp_store import (DIGEST_RE, STAMP_NAME_RE, StampCache, VerifiedStamp, check_stamp_file,
                                      settings, stamps_dir)
from logbook.trust.tsa_client import StampInvalid

NO_TIME = "no third-party time"
NO_ORDER = "no third-party proof of order (all stamps fetched after the run ended)"
BEFORE = "before"
NOT_BEFORE = "NOT before"
TAIL_GRACE_S = 60.0
"""Seconds a head stamp may come later than its event beyond the authority's timeout and still count as
timely: the launcher's polling of the log, and the skew between the machine's clock and the authority's."""


@dataclass
class TimeFinding:
    """One thing about time that verify reports (verify.py turns it into a Finding)."""

    path: str
    kind: str
    """stamp_invalid | stamp_orphan | stamp_unchecked | stamp_missing | stamped_after_run | stamps_after_run |
    unproven_tail | stamp_before_event"""
    message: str
    problem: bool
    """True: exit 4; False: a warning."""


@dataclass
class TimeReport:
    """What the stamps prove, for `verify`'s output and `--json`."""

    findings: list[TimeFinding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


def check_time(project: Project, *, use_cache: bool = True, require: bool = False) -> TimeReport:
    """Check every stamp offline and what they prove about order.

    `use_cache`: stamps that checked before (same token, digest, url and CA) are not checked again.
    `require`: the reader's own (a pin, `verify --require-stamps`): stamps are required whatever logbook.yaml says.
    """
    cfg = settings(project)
    out = TimeReport()
    if cfg is None and not stamps_dir(project).is_dir():  # the common case without an authority: nothing to read
        out.facts = _facts(project, cfg, 0)
        return out
    records = prereg_records(project) + run_records(project)
    stamps = _check_stamp_files(project, out, use_cache)
    lines = _stamped_lines(project, {d for d in stamps} - {r.digest for r in records})
    known = {r.digest for r in records} | set(lines)
    for digest, found in sorted(stamps.items()):
        if digest not in known:
            for path in found.files:
                out.findings.append(TimeFinding(_rel(project, path), "stamp_orphan", (
                    f"{_rel(project, path)} stamps sha256 {digest[:12]}…, which no record and no event-log line "
                    "has any more: what was stamped has been changed, re-chained or removed"), True))
    out.facts = _facts(project, cfg, sum(len(f.valid) for f in stamps.values()))
    if cfg is None:
        return out
    require = require or cfg.require
    out.facts["require"] = require
    _check_missing(project, records, stamps, out, require)
    _check_runs(project, records, stamps, lines, out, require)
    _check_tails(project, records, stamps, lines, out, require, cfg.timeout_s)
    return out


def _facts(project: Project, cfg, valid: int) -> dict[str, Any]:
    """The time facts' shape (verify's `--json` under "timestamps"); the checks fill pending, preregs and runs.

    `ca_sha256`: each authority's CA file as the repository holds it, hashed, so a reader can pin the authority
    they trust from outside the repository (a rewritten history could name the forger's own)."""
    return {"state": "off" if cfg is None else "on", "require": bool(cfg and cfg.require),
            "authorities": [a.url for a in cfg.authorities] if cfg else [], "stamps": valid,
            "ca_sha256": {a.url: _file_sha256(project.root / a.ca) for a in cfg.authorities} if cfg else {},
            "pending": [], "preregs": {}, "runs": {}}


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


@dataclass
class _Stamps:
    files: list[Path] = field(default_factory=list)
    valid: list[VerifiedStamp] = field(default_factory=list)

    @property
    def earliest(self) -> VerifiedStamp | None:
        return min(self.valid, key=lambda s: s.time) if self.valid else None


def _check_stamp_files(project: Project, out: TimeReport, use_cache: bool) -> dict[str, _Stamps]:
    folder = stamps_dir(project)
    found: dict[str, _Stamps] = {}
    unchecked = []
    cache = StampCache(project) if use_cache else None
    for path in _stamp_candidates(folder):
        if not (DIGEST_RE.match(path.parent.name) and STAMP_NAME_RE.match(path.name)) or path.is_symlink():
            continue  # not a stamp by its name: the record kinds' business, not time's
        entry = found.setdefault(path.parent.name, _Stamps())
        entry.files.append(path)
        try:
            entry.valid.append(check_stamp_file(project, path, cache.entries if cache else None))
        except LookupError:
            unchecked.append(path)
        except UsageError as e:  # the configured CA file is missing or unreadable: nothing can be checked
            out.findings.append(TimeFinding(_rel(project, path), "stamp_invalid", f"{_rel(project, path)}: {e.message}",
                                            True))
        except (StampInvalid, OSError) as e:
            proof = e.proof if isinstance(e, StampInvalid) else "read"
            out.findings.append(TimeFinding(_rel(project, path), "stamp_invalid", (
                f"{_rel(project, path)}: the stamp of sha256 {path.parent.name[:12]}… does not verify: "
                f"the {proof} check failed ({getattr(e, 'detail', e)})"), True))
    if cache is not None:
        cache.save()
    if unchecked:
        rel = _rel(project, unchecked[0])
        out.findings.append(TimeFinding(rel, "stamp_unchecked", (
            f"{len(unchecked)} stamp(s), e.g. {rel}, come from an authority logbook.yaml does not configure "
            "(or no authority is configured): they cannot be checked"), False))
    return found


def _stamp_candidates(folder: Path) -> list[Path]:
    """Every `<folder>/*/*`, sorted, as `folder.glob("*/*")` lists them, at a third of its cost (one stamp
    folder per stamped record: a long run has thousands)."""
    if not folder.is_dir():
        return []
    return sorted(Path(d.path, name) for d in os.scandir(folder) if d.is_dir() for name in os.listdir(d.path))


def _stamped_lines(project: Project, digests: set[str]) -> dict[str, tuple[str, int, str]]:
    """chain hash -> (run, line, ts) for the stamped digests that are event-log lines."""
    out: dict[str, tuple[str, int, str]] = {}
    if not digests or not project.runs_dir.is_dir():
        return out
    for log in sorted(project.runs_dir.glob("*/events.jsonl")):
        for n, rec in enumerate(iter_records(log), start=1):
            h = rec.get("hash")
            if h in digests:
                out[h] = (log.parent.name, n, str(rec.get("ts") or ""))
    return out


def _check_missing(project: Project, records: list[Stampable], stamps: dict[str, _Stamps], out: TimeReport,
                   require: bool) -> None:
    for r in records:
        if stamps.get(r.digest) and stamps[r.digest].valid:
            continue
        out.facts["pending"].append(r.path)
        if require:
            out.findings.append(TimeFinding(r.path, "stamp_missing", (
                f"{r.path} ({r.what}) has no valid third-party stamp, and logbook.yaml requires one"), True))
    for r in records:
        if r.kind == "prereg":
            e = stamps.get(r.digest).earliest if stamps.get(r.digest) else None
            out.facts["preregs"][r.prereg_id] = {"stamped": _iso(e), "authority": e.authority if e else None,
                                                 "runs": {}}


def _check_runs(project: Project, records: list[Stampable], stamps: dict[str, _Stamps],
                lines: dict[str, tuple[str, int, str]], out: TimeReport, require: bool) -> None:
    by_prereg = {(r.prereg_id, r.key): r for r in records if r.kind in ("prereg", "amendment")}
    for run in (r for r in records if r.kind == "run_record"):
        started = stamps.get(run.digest).earliest if stamps.get(run.digest) else None
        heads = sorted((s.time, n) for d, (rid, n, _ts) in lines.items() if rid == run.run_id
                       for s in stamps[d].valid)
        times = [t for t, _n in heads]
        times += [started.time] if started else []
        end = _last_event_time(project, run.run_id)
        facts = {"prereg": run.prereg_id, "started_stamp": _iso(started), "last_event": _iso_dt(end),
                 "stamps": len(times)}
        out.facts["runs"][run.run_id] = facts
        if not times:
            facts["order"] = NO_TIME
        elif end is not None and min(times) > end:
            facts["order"] = NO_ORDER
        else:
            facts["order"] = BEFORE if run.prereg_id else "stamped"
        if not run.prereg_id:
            continue
        _order_against_prereg(project, run, started, heads[0] if heads else None, by_prereg, stamps, facts, out)
        if facts["order"] == NO_ORDER:
            out.findings.append(TimeFinding(run.path, "stamps_after_run", (
                f"run {run.run_id}: {NO_ORDER}: its earliest stamp is {min(times).isoformat()}, its last event "
                f"{end.isoformat()}: nothing proves it ran after {run.prereg_id} was written"), require))


def _order_against_prereg(project: Project, run: Stampable, started: VerifiedStamp | None,
                          first_head: tuple[datetime, int] | None, by_prereg: dict, stamps: dict[str, _Stamps],
                          facts: dict, out: TimeReport) -> None:
    """The preregistration's (and amendments') earliest stamps against the run's: its record's, and its log's
    earliest stamped head. The record alone is not enough: it can be rewritten and stamped again at any time,
    while a stamped head of a log that trained before the promise was stamped stays in the log."""
    prereg = by_prereg.get((run.prereg_id, ""))
    keys = _amendments_in_force(project, run)
    needed = [prereg] + [by_prereg.get((run.prereg_id, k)) for k in keys]
    entry = out.facts["preregs"].get(run.prereg_id)
    if entry is not None:
        entry["runs"][run.run_id] = facts
    if (started is None and first_head is None) or any(r is None for r in needed):
        facts["order"] = NO_TIME
        return
    for rec in needed:
        first = stamps.get(rec.digest).earliest if stamps.get(rec.digest) else None
        if first is None:
            facts["order"] = NO_TIME
            return
        if started is not None and not first.time < started.time:
            against = f"the run record's ({started.time.isoformat()})"
        elif first_head is not None and not first.time < first_head[0]:
            against = f"the run's log at line {first_head[1]} ({first_head[0].isoformat()}): the run was under way"
        else:
            continue
        facts["order"] = NOT_BEFORE
        out.findings.append(TimeFinding(run.path, "stamped_after_run", (
            f"run {run.run_id} answers to {run.prereg_id}, but the {rec.what}'s earliest stamp "
            f"({first.time.isoformat()}, {first.authority}) is not earlier than {against}: "
            "no third party saw the promise before the run"), True))
        return
    if started is None:
        facts["order"] = NO_TIME


def _check_tails(project: Project, records: list[Stampable], stamps: dict[str, _Stamps],
                 lines: dict[str, tuple[str, int, str]], out: TimeReport, require: bool, timeout_s: float) -> None:
    """Each run's log after its last timely stamped head has no third-party time (`unproven_tail`).

    A head stamp is timely when the authority's time is within `timeout_s + TAIL_GRACE_S` of the event it
    covers: the launcher asks for it as soon as it reads the line. A later stamp proves only that the line
    existed by then, so whoever cut the log after the last timely head, rewrote what followed and stamped the
    new head later is left with a tail nothing proves: a warning, exit 4 when stamps are required."""
    late_after = timeout_s + TAIL_GRACE_S
    for run in (r for r in records if r.kind == "run_record"):
        log = list(iter_records(project.run_dir(run.run_id) / "events.jsonl"))
        total, ended = len(log), any(is_terminal(r) for r in log)
        heads = []  # (line, seconds from the event to its earliest stamp)
        for digest, (rid, n, ts) in lines.items():
            first = stamps[digest].earliest if rid == run.run_id else None
            event = _parse_ts(ts)
            if first is not None and event is not None:
                heads.append((n, (first.time - event).total_seconds()))
        _check_early_heads(run, heads, lines, out, require)
        timely = max((n for n, lag in heads if -AHEAD_S <= lag <= late_after), default=0)
        if total <= timely:
            continue
        late = max(((n, lag) for n, lag in heads if n > timely), default=None)
        why = (f"line {late[0]} was stamped {_duration(late[1])} after its event" if late else
               "no stamp covers them")
        last = (f"its last stamp that came within {late_after:g} s of its event covers line {timely}" if timely else
                f"none of its log's stamps came within {late_after:g} s of its event")
        # A run still training has a tail its launcher has not stamped yet (it stamps the head at the next
        # checkpoint and at the end): that is pending, not unproven, until the log ends or a stamp comes late.
        pending = not ended and late is None
        out.facts["runs"].setdefault(run.run_id, {})["unproven_tail"] = total - timely
        out.findings.append(TimeFinding(run.path.rsplit("/", 1)[0] + "/events.jsonl", "unproven_tail", (
            f"run {run.run_id}: {_tail_words(timely, total)} no third-party time: {last}, and {why}"
            + ("; the run has not ended, so its launcher may still stamp them" if pending else "")),
            require and not pending))


def _check_early_heads(run: Stampable, heads: list[tuple[int, float]], lines: dict[str, tuple[str, int, str]],
                       out: TimeReport, require: bool) -> None:
    """A stamp earlier than the time its line claims, beyond the clock-skew allowance, is a finding.

    The authority saw the line's hash at its time, so the line existed then: a
    line dated later than that was dated by a clock far ahead, or by hand. It
    proves nothing for the tail either (`_check_tails` takes no such stamp as timely).
    """
    when = {n: ts for rid, n, ts in lines.values() if rid == run.run_id}
    for n, lag in sorted(heads):
        if lag < -AHEAD_S:
            out.findings.append(TimeFinding(run.path.rsplit("/", 1)[0] + "/events.jsonl", "stamp_before_event", (
                f"run {run.run_id}: line {n} says {when.get(n)}, but its stamp's time is {_duration(-lag)} earlier: "
                f"more than the {AHEAD_S:g} s a clock may be off, so the line's time is not the time it was written"),
                require))


def _tail_words(timely: int, total: int) -> str:
    if total - timely == 1:
        return f"the last event of its log (line {total}) has"
    return f"the last {total - timely} events of its log (lines {timely + 1}-{total}) have"


def _parse_ts(ts: str) -> datetime | None:
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(timezone.utc) if ts else None
    except ValueError:
        return None


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.1f} days"


def _amendments_in_force(project: Project, run: Stampable) -> list[str]:
    try:
        rec = json.loads((project.root / run.path).read_text("utf-8"))
    except (OSError, ValueError):
        return []
    keys = rec.get("amendments") if isinstance(rec, dict) else None
    return [str(k) for k in keys] if isinstance(keys, list) else []


def _last_event_time(project: Project, run_id: str) -> datetime | None:
    last = None
    for rec in iter_records(project.run_dir(run_id) / "events.jsonl"):
        last = rec.get("ts") or last
    try:
        return datetime.fromisoformat(str(last).replace("Z", "+00:00")).astimezone(timezone.utc) if last else None
    except ValueError:
        return None


def _iso(s: VerifiedStamp | None) -> str | None:
    return s.time.isoformat() if s else None


def _iso_dt(d: datetime | None) -> str | None:
    return d.isoformat() if d else None


def _rel(project: Project, path: Path) -> str:
    return path.relative_to(project.root).as_posix()


def time_hint(kind: str, path: str) -> str:
    """What to do about a time finding."""
    if kind == "stamp_invalid":
        return (f"if {path} was never committed, delete it and run `logbook stamp` for a fresh one; if it was, "
                "restore it as first committed (`git log --follow -- " + path + "` names the commit); if every "
                "stamp fails the chain check, check that logbook.yaml's `ca` is the authority's CA certificate")
    if kind == "stamp_orphan":
        return ("restore the stamped record or log from git (`git log -- <its path>`): a stamped record or "
                "log line may never change; a correction is a new record")
    if kind == "stamp_missing":
        return "run `logbook stamp` (it fetches every missing stamp), then `logbook commit`"
    if kind == "stamped_after_run":
        return ("the run cannot answer to this preregistration: preregister anew, let it be stamped, "
                "and start a new run with `--prereg`")
    if kind == "unproven_tail":
        return ("keep the authority reachable while runs train (the launcher stamps each checkpoint's head and the "
                "last); a tail stamped late cannot be proven after the fact: say so in a note (`logbook note`)")
    if kind == "stamps_after_run":
        return ("keep the authority reachable while runs train (the launcher stamps at start and at every "
                "checkpoint); this run's order cannot be proven after the fact")
    return "add the authority back to logbook.yaml's timestamping.authorities, with its CA"
