"""Checks that need no third party: what a forger with push rights cannot make consistent by hashing again.

`verify` calls `check` once. Each check compares two things the logbook keeps
in different places, so a forgery must change both, and one of them is
something a fresh clone gets from elsewhere than the rewritten branch:

- **stray files** under the entries folder (no record kind knows the path):
  a warning, never a record (`recordkinds`), so two clones writing one never
  break history; `git rm` is the fix and it works.
- **code snapshots** (`refs/logbook/snapshots/<run>`): the ref must exist, point
  at the commit the run record names (`run.json`'s `snapshot.commit`, which the
  log's first `run_started` must name too), and the
  snapshot's tree must hold the run's preregistration with the bytes HEAD has
  (a run launched under a preregistration had it on disk, so its snapshot
  carries it). Deleted on the origin and spread by `git fetch --prune`: every
  clone reports it; a clone that still has it restores it with `logbook init`
  (which pushes the snapshots the remote lacks).
- **`--seen`**: an amendment that says `nothing` or `run-started` must not be
  added by a commit whose tree already held a run that answers to it
  (`nothing`), or that run's end or scorecard (`run-started`).

- **the preregistration a run answers to**: `run.json`'s `prereg_id` must be the
  one its log's `run_started` lines name (`prereg_differs_in_log`).

Findings: stray (warning) | snapshot_missing | snapshot_moved | snapshot_prereg_differs | seen_false |
prereg_differs_in_log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from logbook.core.project import Project
from logbook.core.recordkinds import classify, where_it_could_go
from logbook.records import gitbind
from logbook.eventlog.chain import iter_records
from logbook.eventlog.kinds import get_kind, is_kind, kind_of
from logbook.eventlog.files import iter_folder

LOGBOOK_REFSPEC = "+refs/logbook/*:refs/logbook/*"


def check(project: Project, report: Any, introduced: dict[str, list[str]], verdicts: Any = None) -> None:
    """Add this module's findings to `report` (a `verify.VerifyReport`); `introduced`: history's commits that
    added each path (relative to the entries folder); `verdicts`: verify's `FileVerdicts`, which keeps what a
    log alone says."""
    if gitbind.head_commit(project.root) is None:
        return
    for path, message in stray_files(project):
        report.add(path, "stray", message, warning=True)
    for path, kind, message in snapshot_problems(project):
        report.add(path, kind, message, warning=kind == "snapshot_unknown")
    for path, message in seen_problems(project, introduced):
        report.add(path, "seen_false", message)
    for path, line, message in prereg_in_log_problems(project, verdicts):
        report.add(path, "prereg_differs_in_log", message, line)


# --- stray files ------------------------------------------------------------------------------

def stray_files(project: Project) -> list[tuple[str, str]]:
    """(path, sentence) for each file HEAD or the working tree holds under the entries folder that no kind knows
    (files git ignores are left out: they are never committed)."""
    folder = project.entries.relative_to(project.root).as_posix()
    paths = set(gitbind.tree_files(project.root, "HEAD", folder))
    untracked = gitbind.git(project.root, "--literal-pathspecs", "ls-files", "-z", "--others", "--exclude-standard",
                            "--", folder, check=False)
    paths |= {p for p in untracked.split("\0") if p}
    out = []
    for p in sorted(paths):
        rel = p[len(folder) + 1:]
        if classify(rel) == "stray":
            out.append((p, f"{p} is not a logbook record (no record kind has a file there): nothing reads it, "
                           f"and `logbook commit` will not commit it; {where_it_could_go(rel)} "
                           "(if it was committed: move it out, then `logbook commit` commits its removal)"))
    return out


# --- code snapshots --------------------------------------------------------------------------

def _run_records(project: Project) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(project.runs_dir.glob("*/run.json")) if project.runs_dir.is_dir() else []:
        try:
            rec = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue  # verify reports an unreadable run record
        if isinstance(rec, dict):
            out.append((path.parent.name, rec))
    return out


# --- the preregistration a run's record and its log name -----------------------------------------

def prereg_in_log_problems(project: Project, verdicts: Any = None) -> list[tuple[str, int, str]]:
    """Run records whose `prereg_id` is not the one a `run_started` line of the run's log names.

    The launcher writes both at launch; a run record rewritten afterwards to
    answer to a preregistration (and stamped again) leaves the log saying
    otherwise, unless the log is re-chained too, which moves its stamped heads.
    """
    out = []
    for run, rec in _run_records(project):
        log = project.run_dir(run) / "events.jsonl"
        rel_log = log.relative_to(project.root).as_posix()
        claims = verdicts.get("log_preregs", rel_log, lambda p=log: _log_preregs(p)) if verdicts is not None \
            else _log_preregs(log)
        for n, named in claims:
            if named != rec.get("prereg_id"):
                rel = (project.run_dir(run) / "run.json").relative_to(project.root).as_posix()
                out.append((rel, n, f"{rel} says run {run} answers to {rec.get('prereg_id') or 'no preregistration'}, "
                                    f"but line {n} of its log (run_started) says "
                                    f"{named or 'no preregistration'}: the record was rewritten after the launch"))
                break
    return out


def _log_preregs(log: Path) -> list[list[Any]]:
    """[line, prereg id] of each `run_started` line of a log that names one: what the log alone says."""
    out = []
    for n, event in enumerate(iter_records(log), start=1):
        data = event.get("data") if is_kind(event, "run_started") else None
        if isinstance(data, dict) and "prereg_id" in data:
            out.append([n, data["prereg_id"]])
    return out


def clone_fetches_snapshots(root: Path) -> bool:
    """Whether this clone can be expected to hold the snapshots: no remote (they were made here), or set up."""
    remotes = [r for r in gitbind.git(root, "remote", check=False).split() if r]
    if not remotes:
        return True
    return any(LOGBOOK_REFSPEC in gitbind.git(root, "config", "--get-all", f"remote.{r}.fetch", check=False).split()
               for r in remotes)


def snapshot_problems(project: Project) -> list[tuple[str, str, str]]:
    """(run.json path, kind, sentence) for each run whose code snapshot ref is not what its run record names."""
    root = project.root
    entries = project.entries.relative_to(root).as_posix()
    runs = [(run, rec) for run, rec in _run_records(project)
            if isinstance(rec.get("snapshot"), dict) and isinstance(rec["snapshot"].get("commit"), str)]
    if not runs:
        return []
    refs = _snapshot_refs(root)
    set_up = clone_fetches_snapshots(root)
    specs = []
    for run, rec in runs:
        if rec.get("prereg_id"):
            rel = f"{entries}/prereg/{rec['prereg_id']}.md"
            specs += [f"{rec['snapshot']['commit']}:{rel}", f"HEAD:{rel}"]
    blobs = gitbind.read_blobs(root, specs) if specs else {}
    out = []
    for run, rec in runs:
        path = f"{entries}/runs/{run}/run.json"
        ref = gitbind.SNAPSHOT_REF_PREFIX + run
        want = rec["snapshot"]["commit"]
        have = refs.get(ref)
        if have is None:
            if not set_up:
                out.append((path, "snapshot_unknown", f"{ref} is not here, and this clone does not fetch the runs' "
                                                      "snapshots: run `logbook init` once to set it up"))
                continue
            out.append((path, "snapshot_missing", (
                f"run {run}'s code snapshot {ref} (commit {want[:12]}, named in {path}) is missing: deleted here or "
                "on the remote (a deletion spreads through `git fetch --prune`), so nothing shows the code the run "
                "trained with")))
        elif have != want:
            out.append((path, "snapshot_moved", (
                f"run {run}'s code snapshot {ref} points at {have[:12]}, but {path} names {want[:12]}: the ref "
                "was moved to other code")))
        elif (logged := _logged_snapshot(project, run)) not in (None, want):
            out.append((path, "snapshot_moved", (
                f"run {run}'s run_started event names code snapshot {str(logged)[:12]}, but {path} names "
                f"{want[:12]}: the run record and the log disagree on the code the run trained with")))
        elif rec.get("prereg_id"):
            rel = f"{entries}/prereg/{rec['prereg_id']}.md"
            theirs, ours = blobs.get(f"{want}:{rel}"), blobs.get(f"HEAD:{rel}")
            if ours is not None and theirs != ours:
                out.append((path, "snapshot_prereg_differs", (
                    f"run {run}'s code snapshot {want[:12]} " + ("does not hold " if theirs is None else
                                                                 "holds other bytes of ") +
                    f"{rel}, the preregistration it answers to: the run was not launched under it as committed")))
    return out


def _logged_snapshot(project: Project, run: str) -> str | None:
    """The `snapshot_commit` the run's first `run_started` event records, or None."""
    for rec in iter_records(project.run_dir(run) / "events.jsonl"):
        if is_kind(rec, "run_started"):
            value = (rec.get("data") or {}).get("snapshot_commit")
            return value if isinstance(value, str) else None
    return None


def _snapshot_refs(root: Path) -> dict[str, str]:
    out = gitbind.git(root, "for-each-ref", "--format=%(refname) %(objectname)", gitbind.SNAPSHOT_REF_PREFIX,
                      check=False)
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


# --- what had been seen -------------------------------------------------------------------------

def results_before(project: Project, runs: list[str]) -> str | None:
    """A sentence naming the first result that exists here: a run of `runs` that ended, or a scorecard of one.
    None when there is none (what `prereg amend --seen run-started` checks before writing)."""
    found: list[tuple[str, str]] = []
    for run in runs:
        for rec in iter_records(project.run_dir(run) / "events.jsonl"):
            k = get_kind(kind_of(rec))
            if k is not None and k.terminal and isinstance(rec.get("ts"), str):
                found.append((rec["ts"], f"run {run} {k.run_state or 'ended'} at {rec['ts'][:19]}Z "
                                         f"({kind_of(rec)}, seq {rec.get('seq')})"))
                break
        for card in iter_folder(project.run_dir(run) / "outcomes"):
            if isinstance(card.get("ts"), str):
                found.append((card["ts"], f"run {run} was scored at {card['ts'][:19]}Z (outcome:{card.get('id')})"))
    found.sort()
    return found[0][1] if found else None


def seen_problems(project: Project, introduced: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(amendment path, sentence) for each amendment whose `seen` the commit that added it contradicts.

    What its author's clone held is the tree of the commit that added the
    amendment: a run there that had ended, or a scorecard there, were results
    (`run-started` is false); a run record there was a run (`nothing` is false).
    An amendment made in a clone that had not pulled the run yet is honest.
    """
    from logbook.promises.prereg import amended_ids, load_prereg, runs_referencing

    entries = project.entries.relative_to(project.root).as_posix()
    amended = amended_ids(project)  # only an amendment can say `seen`: the others need not be read
    out = []
    for pid, runs in runs_referencing(project).items():
        if pid not in amended:
            continue
        try:
            prereg = load_prereg(project, pid)
        except Exception:  # noqa: BLE001  a damaged or missing preregistration is verify's own finding
            continue
        for a in prereg.amendments:
            rel = a.path.relative_to(project.root).as_posix()
            made = introduced.get(rel[len(entries) + 1:], [])
            if a.seen not in ("nothing", "run-started") or not made:
                continue
            why = _what_the_commit_held(project, made[0], runs, a.seen)
            if why:
                out.append((rel, f"{rel} says `--seen {a.seen}`, but the commit that added it ({made[0][:7]}) "
                                 f"already held {why}"))
    return out


def _what_the_commit_held(project: Project, commit: str, runs: list[str], seen: str) -> str | None:
    entries = project.entries.relative_to(project.root).as_posix()
    for run in runs:
        base = f"{entries}/runs/{run}"
        if seen == "nothing":
            if gitbind.read_blobs(project.root, [f"{commit}:{base}/run.json"]).get(f"{commit}:{base}/run.json"):
                return f"run {run}, which answers to it"
            continue
        if gitbind.tree_files(project.root, commit, f"{base}/outcomes"):
            return f"a scorecard of run {run}: its results"
        log = gitbind.read_blobs(project.root, [f"{commit}:{base}/events.jsonl"]).get(f"{commit}:{base}/events.jsonl")
        for line in (log or b"").splitlines():
            try:
                kind = get_kind(kind_of(json.loads(line)))
            except (ValueError, AttributeError):
                continue
            if kind is not None and kind.terminal:
                return f"the end of run {run} ({kind.name}): its results"
    return None


