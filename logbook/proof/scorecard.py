"""A run's scorecard with verify's verdict on its records, and the scorecard written as its own signed record.

Measuring and judging the predictions is `scoring.outcome`'s; this module adds
what needs the whole proof: whether the preregistration and the run's records
verify (`proof.verify`), and, for `logbook outcome`, the immutable, signed
scorecard record under `runs/<run>/outcomes/`. It sits above scoring because
verify computes every recorded scorecard again with scoring's code.
"""

from __future__ import annotations

from typing import Any

from logbook.core.errors import NotFoundError, RefusedError, TamperedError
from logbook.core.identity import git_identity
from logbook.core.project import Project
from logbook.eventlog import chain
from logbook.eventlog.files import write_record
from logbook.promises.prereg import load_prereg
from logbook.proof.verify import verify_project
from logbook.runs.facts import RunFacts, load_facts
from logbook.runs.run_record import check_run_id, load_run_record
from logbook.scoring.outcome import (OUTCOME_SOURCE, Scorecard, content_hash, outcome_records, outcomes_dir,
                                     prereg_id_of, recheck_scorecards, score_card)
from logbook.trust.signatures import sign_record


def evaluate(project: Project, run_id: str, facts: RunFacts | None = None) -> Scorecard:
    """Score a run without writing anything (`facts`: the run as already read, to save a second read)."""
    check_run_id(run_id)
    try:
        rec = load_run_record(project, run_id)
    except NotFoundError:
        rec = None
    facts = facts if facts is not None else load_facts(project, run_id, rec)
    if rec is None and not facts.events:
        load_run_record(project, run_id)  # raises the not-found error with the known runs
    pid = prereg_id_of(rec, facts)
    if pid is None:
        raise RefusedError(f"run {run_id} is exploratory: it answers to no preregistration, so there is nothing to score",
                           hint="preregister the next run (`logbook prereg`) and launch it with `logbook run --prereg ID`")
    report = verify_project(project, pid)
    try:
        prereg = load_prereg(project, pid)
    except (NotFoundError, TamperedError) as e:
        first = report.problems[0].message if report.problems else e.message
        raise TamperedError(f"preregistration {pid} of run {run_id} cannot be read, so it cannot be scored: {first}",
                            hint="run `logbook verify` for the full list; restore the record from git") from None
    card = score_card(project, run_id, rec, facts, prereg)
    card.verify_ok, card.verify_problems = report.ok, [f.message for f in report.problems]
    return card



def _event_payload(card: Scorecard, rel: str) -> dict[str, Any]:
    return {"content_sha256": content_hash(card), "prereg_id": card.prereg_id, "prereg_sha256": card.prereg_sha256,
            "verify_ok": card.verify_ok, "verify_problems": card.verify_problems[:5], "run_state": card.run_state,
            "counts": card.counts, "outcome_file": rel, "supersedes": card.supersedes,
            "predictions": [{k: p.to_dict()[k] for k in ("text", "status", "value", "threshold", "tolerance", "at_step",
                                                         "rule", "reason", "within_tolerance", "source")}
                            for p in card.predictions],
            "deviations": [{"kind": d["kind"], "text": d["text"], "entry": d["entry"]} for d in card.deviations]}


def record_outcome(project: Project, run_id: str) -> Scorecard:
    """Score the run; write a new scorecard record when it is final and says something new.

    The caller re-renders the day that shows a new record (`chronicle.rerender_days`
    on `card.computed_at`'s day): scoring sits below the chronicle, which shows it.
    """
    card = evaluate(project, run_id)
    if not card.final:
        return card
    wrong = recheck_scorecards(project, [run_id])
    if wrong:
        raise TamperedError(wrong[0].message + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""),
                            hint="a recorded scorecard is never edited: restore it from git "
                                 f"(`git checkout HEAD -- {wrong[0].path}`), or run `logbook verify` to see who changed it")
    folder = outcomes_dir(project, run_id)
    previous = outcome_records(project, run_id)
    prev = previous[-1] if previous else None
    if prev is not None and prev.get("data", {}).get("content_sha256") == content_hash(card):
        card.event, card.already_recorded = f"{OUTCOME_SOURCE}:{prev.get('id')}", True
        card.supersedes = prev["scorecard"].get("supersedes")
        card.computed_at, card.computed_by = str(prev.get("ts")), prev["scorecard"].get("computed_by")
        return card
    signer = git_identity(project.root)
    card.computed_by = None if signer.guessed else str(signer)
    card.supersedes = f"{OUTCOME_SOURCE}:{prev.get('id')}" if prev is not None else None
    now = chain.utc_now()
    card.computed_at = now
    rel = folder.relative_to(project.root).as_posix()
    payload = {**_event_payload(card, rel), "computed_by": card.computed_by}
    rec = {"kind": "outcome", "run": run_id, "step": card.last_step, "data": payload, "scorecard": card.to_dict()}
    written = write_record(folder, rec, ts=now)
    card.event = f"{OUTCOME_SOURCE}:{written['id']}"
    card.warnings += sign_record(project, written["hash"], what=f"scorecard {card.event}")
    return card
