"""Amending a preregistration: a new record linked by hash to the original and to the latest amendment seen.

An amendment is refused when the preregistration it amends does not verify,
so this sits above `verify` (which reads preregistrations) rather than in
`prereg.py` (which `verify` imports).
"""

from __future__ import annotations

from datetime import datetime

from logbook.core.errors import RefusedError, TamperedError, UsageError
from logbook.core.project import Project
from logbook.records import gitbind
from logbook.eventlog.files import new_record_id
from logbook.promises.prereg import Written, amendment_path, load_prereg, relpath, runs_referencing, utc_or_now
from logbook.promises.prereg_format import SCHEMA, SEEN, hash_as_written, render_amendment_body, render_record
from logbook.promises.prereg_input import check_contingency, check_id, check_predictions, check_text
from logbook.proof.verify import verify_project
from logbook.trust.signatures import sign_record


def amend_prereg(project: Project, prereg_id: str, *, reason: str, seen: str,
                 predictions: list[str] | None = None, contingency: list[str] | None = None,
                 now: datetime | None = None) -> Written:
    """Add an amendment; its file links the original and the latest amendment seen here by hash.

    An amendment that adds neither a prediction nor a contingency rule changes
    nothing and is refused as a usage error.
    """
    check_id(prereg_id)
    if seen not in SEEN:
        raise UsageError(f"--seen must be one of {', '.join(SEEN)}, got {seen!r}",
                         hint="nothing: nothing run yet; run-started: no results seen; results: results seen")
    reason = check_text(reason or "", "the reason", required=True)
    prereg = load_prereg(project, prereg_id)
    preds = check_predictions(list(predictions or []), prereg.metrics)  # its declared metrics may be predicted too
    rules, warnings = check_contingency(list(contingency or []))
    if not preds and not rules:
        raise UsageError("the amendment changes nothing: it adds no prediction and no contingency rule",
                         hint='add --predict "metric@point op value" or --contingency "RULE"; '
                              "to remark on the plan, use `logbook note`")
    report = verify_project(project, prereg_id)
    if report.problems:
        # The same hint `verify` gives: what fixes the record, never "go run the other command".
        raise TamperedError(f"preregistration {prereg_id} does not verify, so it cannot be amended: "
                            f"{report.problems[0].message}", hint=report.hint_for(report.problems[0]))
    runs = runs_referencing(project).get(prereg_id, [])
    if seen == "nothing" and runs:
        raise RefusedError(f"run {runs[0]} already answers to {prereg_id}, so `--seen nothing` is not true",
                           hint="use --seen run-started (no results seen) or --seen results")
    if seen == "run-started":
        from logbook.trust.no_third_party import results_before

        why = results_before(project, runs)
        if why:
            raise RefusedError(f"`--seen run-started` says no results were seen, but {why}; nothing was written",
                               hint="use --seen results: the amendment is then recorded as a deviation")
    state = gitbind.check_repo_state(project.root)
    prev_path, prev_hash = (prereg.amendments[-1].path, prereg.amendments[-1].sha256) if prereg.amendments \
        else (prereg.path, prereg.sha256)
    when = utc_or_now(now)
    key = new_record_id(when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    front = {"schema": SCHEMA, "amends": prereg_id, "id": key,
             "created": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
             "author": gitbind.author_ident(project.root), "reason": reason, "seen": seen,
             "kind": "deviation" if seen == "results" else "amendment",
             "original": {"file": prereg.path.name, "sha256": prereg.sha256},
             "previous": {"file": prev_path.name, "sha256": prev_hash},
             "predictions": [p.to_dict() for p in preds], "contingency": [r.to_dict() for r in rules],
             "runs_started": runs, "base_commit": state.head}
    body = render_amendment_body(front, prereg.title, prereg.metrics)
    digest = hash_as_written(front, body)
    path = amendment_path(project, prereg_id, key)
    message = gitbind.format_message(
        f"Amend {prereg_id} ({key})", reason.splitlines()[0][:200],
        [("Logbook-Prereg", prereg_id), ("Logbook-Amendment", key), ("Logbook-Sha256", digest)])
    done = gitbind.commit_file(project.root, relpath(project, path),
                               render_record(front, body).encode("utf-8"), message, state)
    warnings += sign_record(project, digest, what=f"amendment {key} of {prereg_id}")  # `logbook commit` commits it
    return Written(prereg_id, done.commit, digest, path, front, warnings)
