"""The event schema: every kind of run event, what its payload holds, and what it means to readers.

This module is the one owner of the event record's contract between the
trainer (which writes events through `logbook.eventlog.sink.EventSink`) and every
module that reads them. Readers ask it instead of keeping lists of kinds:

    kinds_where(incident=True)        # what a report lists as incidents
    kinds_where(counted_as="restarts")
    ends_attempt(rec), ending(rec)    # whether and how an event ends its attempt
    ending_words(rec)                 # that ending in a lineage's words
    goodput_charge(rec)               # the goodput category it charges
    is_kind(rec, "run_started")       # one kind's own payload (raises on an unregistered name)
    changes_lr(rec)                   # hparam_change of an lr key, or lr_scaled
    summary(rec)                      # one line for a person: a review queue, a report's incidents
    restart_cause(data)               # why an attempt ended, in the words of `RESTART_CAUSES`

`Event.of(rec)` is a typed view of one record (kind, payload, parsed time),
so readers need not guard `rec["data"]` themselves.

Kinds are a closed, documented set; readers still render an unknown kind
generically, so a log written next year reads today. With the environment
variable `LOGBOOK_STRICT_EVENTS=1`, `EventSink` checks every event it writes
against this registry (`check_event`) and raises on an unknown kind, a missing
required field, a field of the wrong type or an unknown field. The tests run
that way; production does not pay for it.

Adding a new event kind (at most three files):

1. Here: add a `Kind(...)` to `_KINDS` with its description, heading label,
   payload fields, what it means as flags (starts or ends an attempt and how:
   `ending`; terminal; `reopens`; the goodput category it charges; incident,
   reviewable, `console`) and a one-line `summary` function, then regenerate
   the reference with `python3 -m logbook.eventlog.kinds > docs/events.md`.
   (`register(Kind(...))` adds one in-process, for a plugin or a test.)
2. Maybe a template: `templates/chronicle/kinds/<kind>.md.j2` says it in prose
   in the chronicle (without one, `_generic.md.j2` lists its fields).
3. The emitter: `sink.emit("<kind>", step=..., field=...)` in the trainer or
   a command.

Readers ask the questions below (`ends_attempt`, `ending`, `ending_words`,
`goodput_charge`, `counted_as`, `has_flag`, `is_routine`, `is_terminal`,
`run_state`, `summary`, `kinds_where`; `is_kind` for one kind's own payload)
when they read, never a copy made at import (a module-level `kinds_where(...)`
misses every kind registered after it ran), so they pick the new kind up with
no change. `tests/test_kind_questions.py` fails when a module compares a kind
with a literal or reads `["kind"]` raw; `tests/test_new_kind_recipe.py`
registers an attempt-ending kind and checks attempts, endings, goodput,
lineage and the summary, and a routine, reviewable, counted kind, after every
reader was imported, and finds it in the chronicle's routine line, the review
queue and the run's counts; `tests/test_event_schema.py` checks that the docs,
the templates and the code's kind names agree with this registry.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from types import MappingProxyType
from typing import Any

from logbook.eventlog.plan import plan_words
from logbook.core.textfmt import fmt_duration, fmt_fraction, fmt_int, fmt_num, fmt_setting, is_number, plural, signal_name

STRICT_ENV = "LOGBOOK_STRICT_EVENTS"
"""Set to 1 to have `EventSink` check every event it writes (the test suite does)."""

TYPES: dict[str, str] = {
    "str": "text", "int": "integer", "number": "integer or float (non-finite floats are written as strings)",
    "bool": "true or false", "list": "JSON array", "dict": "JSON object", "any": "any JSON value",
}
"""Payload field types; every field may also be null (the producer did not know it)."""

LR_KEYS = ("lr", "lr_scale", "muon_lr")
"""`hparam_change` keys that change the learning rate."""


@dataclass(frozen=True)
class Field:
    """One payload field of a kind."""

    name: str
    type: str
    """One of `TYPES`."""
    meaning: str
    required: bool = False
    """Every producer writes it (readers may still meet old logs without it)."""


@dataclass(frozen=True)
class Kind:
    """One event kind: its meaning, payload and the flags readers ask about."""

    name: str
    description: str
    """One sentence: what happened when this event is written."""
    label: str
    """A few words for a chronicle heading."""
    fields: tuple[Field, ...] = ()
    routine: bool = False
    """Summarised in one line per run and day in the chronicle, not one entry each."""
    incident: bool = False
    """Listed in a report's incidents, with what it cost."""
    reviewable: bool = False
    """A person should review it (`logbook review`); a scheduled `hparam_change` is exempt."""
    terminal: bool = False
    """The run has ended: it takes no more live changes."""
    starts_attempt: bool = False
    """Written when an attempt begins (the run is running again)."""
    ends_attempt: int = 0
    """How strongly the event ends its own attempt in a run's lineage: 3 the run's end,
    2 the attempt's own last words (a later `restart` may say more), 0 not an ending."""
    ending: str | None = None
    """How it ends its attempt, one of `ENDINGS` (finished | failed | aborted | exception | preempted | hang);
    a kind whose ending has no words there is named in a lineage by its own `summary`."""
    goodput: str | None = None
    """The goodput category it charges, one of `GOODPUT_CHARGES`: checkpoint_save (its blocking seconds),
    restart (work the ended attempt lost), rollback (steps recomputed and the restore), skipped (a step thrown away)."""
    console: bool = False
    """A person at the terminal sees it at once (`logbook run`'s plain lines)."""
    run_state: str | None = None
    """The run's state once this is its latest lifecycle event."""
    counted_as: str | None = None
    """The count in predictions and outcomes it adds to (restarts, spikes, rollbacks, skipped_steps)."""
    alert: str | None = None
    """W&B alert level (WARN | ERROR) when the run is mirrored with alerts on."""
    lr_change: bool = False
    """May change the learning rate (see `changes_lr` for the event-level answer)."""
    setting_change: bool = False
    """Changes a training setting mid-run (counted as a change since the last progress note)."""
    guard: str | None = None
    """detection | action: written by the divergence guard."""
    afterwards: bool = False
    """Recorded about the run after the fact by a person's command, not by any attempt."""
    reopens: bool = False
    """May be the first event after a resumable ending (`run_failed`, `run_aborted`): a resumed
    launch begins with it (or, for `run_failed`, a resumed launch that failed before its trainer began)."""
    keeps_incident: bool = False
    """Does not end an off-plan incident that a scorecard folds the guard's actions into."""
    summary: Callable[[Event], str] | None = field(default=None, repr=False)
    """One line for a person (see `summary`); None: the description says it."""

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


def _f(name: str, type_: str, meaning: str, required: bool = False) -> Field:
    return Field(name, type_, meaning, required)


# --- what a restart says about the attempt that ended -------------------------------------------

RESTART_CAUSES: dict[str, str] = {
    "exception": "raised {exception}",
    "signal": "killed by {signal}",
    "preempted": "preempted",
    "stopped": "stopped on request (logbook stop)",
    "hang": "hung past its step timeout",
    "exit": "exited with code {exit_code}",
}
"""A `restart`'s cause, in the words every reader uses: lineage, review queue, report, chronicle, terminal.

`{signal}` and `{exception}` stand for what the payload names; a medium adds
its own frame around the words ("Attempt 3 was killed by ...").
"""

UNKNOWN_CAUSE = "ended without a record of why"
"""The words for a cause of `unknown`, or one this registry does not know."""

ENDINGS: dict[str, str] = {
    "finished": "finished the run",
    "failed": "run failed",
    "aborted": "aborted by the guard",
    "exception": RESTART_CAUSES["exception"],
    "preempted": RESTART_CAUSES["preempted"],
    "hang": RESTART_CAUSES["hang"],
    "stopped": RESTART_CAUSES["stopped"],
}
"""How an event ends its attempt (`Kind.ending`), in the words a lineage shows (see `ending_words`)."""

GOODPUT_CHARGES = ("checkpoint_save", "restart", "rollback", "skipped")
"""The goodput categories an event may charge (`Kind.goodput`; `logbook.runs.goodput` prices each)."""


def restart_cause(data: dict[str, Any], *, name: Callable[[str], str] = str,
                  code: Callable[[str], str] = str) -> str:
    """Why the previous attempt ended, as a `restart` records it: "killed by signal 9 (SIGKILL)", ...

    `name` formats a signal's name and `code` an exception's type, for a medium
    that marks them up (the chronicle escapes one and code-spans the other).
    """
    words = RESTART_CAUSES.get(data.get("cause"), UNKNOWN_CAUSE)  # type: ignore[arg-type]
    exc = data.get("exception_type")
    return words.format(signal=name(signal_name(data.get("signal"))),
                        exception=code(exc) if isinstance(exc, str) and exc else "an exception",
                        exit_code=data.get("exit_code", "?"))


def signal_evidence(data: dict[str, Any]) -> str:
    """What is known of who killed an attempt that a signal ended without a record ("" when not such a kill).

    A SIGKILL (or an unnamed signal) leaves no record of its sender: the words say
    the cause is unknown, unless the kernel counted OOM kills while the attempt ran
    (`oom_kills`, from the memory cgroup), which is evidence and is named.
    """
    if data.get("cause") != "signal" or data.get("exception_type"):
        return ""
    sig = data.get("signal")
    if sig not in (None, 9, -9, "9", "-9", "SIGKILL") and signal_name(sig) != "signal 9 (SIGKILL)":
        return ""
    kills = data.get("oom_kills")
    if isinstance(kills, int) and not isinstance(kills, bool) and kills > 0:
        return (f"the kernel's OOM killer: {kills} OOM kill{'s' if kills != 1 else ''} in the run's memory cgroup "
                "while the attempt ran")
    return "cause unknown: the OOM killer, a scheduler or a person"


# --- one line per event, for a person ------------------------------------------------------------


def _plan_tag(d: dict[str, Any]) -> str:
    """" [not in the plan]" for an action no rule foresaw; the rule and its difference for one that carries a rule out."""
    plan = d.get("plan")
    if isinstance(plan, dict) and plan.get("follows") is False:
        return f" [{plan_words(plan)}]"
    return ""


def unfinished_save_words(d: dict[str, Any]) -> str | None:
    """"the checkpoint of step 5 was still being written when the worker died; resumed from step 0", or None."""
    step, resumed = d.get("unfinished_checkpoint_step"), d.get("resumed_from_step")
    if not isinstance(step, int) or not isinstance(resumed, int):
        return None
    return (f"the checkpoint of step {fmt_int(step)} was still being written when the worker died; "
            f"resumed from step {fmt_int(resumed)}")


def _sum_restart(e: Event) -> str:
    d = e.data
    why = signal_evidence(d) if not e.drill else ""
    parts = [f"attempt {d.get('prev_attempt', '?')} → {e.rec.get('attempt', '?')}: {restart_cause(d)}"
             + (f" ({why})" if why else "")]
    if isinstance(d.get("resumed_from_step"), int):
        parts.append(unfinished_save_words(d) or f"resumed from step {fmt_int(d['resumed_from_step'])}")
    if isinstance(d.get("steps_lost"), int):
        parts.append(f"{fmt_int(d['steps_lost'])} steps lost")
    if isinstance(d.get("downtime_s"), (int, float)):
        parts.append(f"{fmt_duration(d['downtime_s'])} down")
    return ", ".join(parts) + (" (drill)" if e.drill else "")


def _sum_divergence(e: Event) -> str:
    d = e.data
    metric = d.get("metric", "loss")
    if d.get("nonfinite"):
        what = f"non-finite {metric}"
    else:
        what = f"{metric} {fmt_num(d.get('value'))} vs {fmt_num(d.get('baseline'))}"
        if isinstance(d.get("z"), (int, float)):
            what += f" ({fmt_num(d['z'])}σ)"
    return f"{what}; action: {d.get('action') or 'none'}" + _plan_tag(d)


def _sum_rollback(e: Event) -> str:
    d = e.data
    s = f"rolled back from step {fmt_int(d.get('from_step'))} to {fmt_int(d.get('to_step'))}"
    b = d.get("batches_skipped")
    if isinstance(b, list) and len(b) == 2:
        s += f", batches {fmt_int(b[0])}–{fmt_int(b[1])} skipped"
    return s + _plan_tag(d)


def _sum_abort(e: Event) -> str:
    return f"aborted by the guard: {e.data.get('reason') or 'no reason recorded'}"


def _sum_change(e: Event) -> str:
    d = e.data
    who = d.get("who") or "unknown"
    s = f"{d.get('key')} {fmt_setting(d.get('old'))} → {fmt_setting(d.get('new'))} by {who} ({d.get('source') or '?'})"
    if d.get("reason"):
        s += f": {d['reason']}"
    return s + _plan_tag(d)


def _sum_milestone(e: Event) -> str:
    d = e.data
    s = f"{fmt_fraction(d.get('fraction'))} of the run at step {fmt_int(e.rec.get('step'))}"
    for key, words in (("loss", "loss"), ("val_loss", "val loss"), ("goodput", "goodput")):
        if isinstance(d.get(key), (int, float)):
            s += f", {words} {fmt_num(d[key])}"
    return s


def _sum_started(e: Event) -> str:
    d = e.data
    step = d.get("resumed_from_step")
    s = f"attempt {e.rec.get('attempt', '?')} began" + (f", resuming at step {fmt_int(step)}" if step else ", from step 0")
    workers = d.get("world_size")
    on = f" on {d['device']}" if d.get("device") else ""
    return s + (f", {fmt_int(workers)} worker{'' if workers == 1 else 's'}{on}" if isinstance(workers, int) else on)


def _sum_checkpoint(e: Event) -> str:
    d = e.data
    s = f"step {fmt_int(e.rec.get('step'))} saved"
    if is_number(d.get("blocking_s")):
        s += f", training waited {fmt_duration(d['blocking_s'])}"
    return s


def _sum_lr_scaled(e: Event) -> str:
    d = e.data
    s = f"learning-rate multiplier {fmt_num(d.get('old'))} → {fmt_num(d.get('new'))}"
    reason = str(d.get("reason") or "")
    # The guard's reason is its whole deliberation, said by the divergence line before it: a short one only.
    return s + (f": {reason}" if reason and len(reason) <= 60 else "") + _plan_tag(d)


def _sum_fault(e: Event) -> str:
    d = e.data
    s = f"{d.get('fault', '?')} drill fired at step {fmt_int(d.get('at_step', e.rec.get('step')))}"
    return s + (f" (x{fmt_num(d['factor'])})" if is_number(d.get("factor")) and d.get("fault") == "spike" else "")


def _sum_outcome(e: Event) -> str:
    d = e.data
    c = d.get("counts") if isinstance(d.get("counts"), dict) else {}
    parts = [f"{c.get(k, 0)} {k}" for k in ("confirmed", "refuted", "inconclusive") if c.get(k)]
    dev = d.get("deviations")
    tail = f"; {plural(len(dev), 'deviation')}" if isinstance(dev, list) and dev else ""
    return f"scorecard: {', '.join(parts) or 'no predictions'}{tail}"


def _sum_preempted(e: Event) -> str:
    sig = e.data.get("signal")
    by = f" by {signal_name(sig)}" if sig else ""
    saved = e.data.get("saved_step")
    return f"{RESTART_CAUSES['preempted']}{by}, " + (f"saved at step {fmt_int(saved)}" if isinstance(saved, int)
                                                      else "whether it saved is not recorded")


def _sum_config(e: Event) -> str:
    d = e.data
    n = len(d["hparams"]) if isinstance(d.get("hparams"), dict) else 0
    seed = f", seed {d['seed']}" if isinstance(d.get("seed"), int) else ""
    return f"{plural(n, 'hyperparameter')} from {d.get('source') or 'the trainer'}{seed}"


def _sum_hang(e: Event) -> str:
    d = e.data
    return f"no progress for {fmt_duration(d.get('elapsed_s'))} (timeout {fmt_duration(d.get('timeout_s'))})"


def _sum_stopped(e: Event) -> str:
    d = e.data
    saved = d.get("saved_step")
    s = f"stopped by {d.get('who') or 'unknown'}, " + (f"saved at step {fmt_int(saved)}" if isinstance(saved, int)
                                                         else "whether it saved is not recorded")
    return s + (f": {d['reason']}" if d.get("reason") else "")


def _sum_reason(e: Event) -> str:
    return str(e.data.get("reason") or label(e.kind))


_PLAN = _f("plan", "dict", "{rule: int | null, follows: bool, differences: [str]}: the preregistered contingency rule it"
                           " follows or carries out, and how it differs from the rule's terms, if it does")
_SLURM = _f("slurm", "dict", "job facts under Slurm ({job_id, restart_count, ...})")
_RANKS = "[{rank, node, host, pid}]"

_KINDS: tuple[Kind, ...] = (
    Kind("run_started", "an attempt of a run began (config hash, world size, code snapshot)", "run started",
         starts_attempt=True, reopens=True, run_state="running", summary=_sum_started, fields=(
             _f("config_hash", "str", "hash of the resolved config"),
             _f("config_path", "str", "the config file the run was launched with"),
             _f("script", "str", "the script a wrapped command runs (`logbook run -- CMD`)"),
             _f("script_sha256", "str", "sha256 of that script as launched"),
             _f("world_size", "int", "number of workers (null: unknown)"),
             _f("prereg_id", "str", "the preregistration the run tests"),
             _f("exploratory", "bool", "launched without a preregistration"),
             _f("snapshot_commit", "str", "commit of the code snapshot"),
             _f("total_steps", "int", "steps the run is configured for"),
             _f("tokens_per_step", "int", "tokens per optimizer step, all workers"),
             _f("device", "str", "the device trained on"),
             _f("resumed_from_step", "int", "the step this attempt resumed from (0: a fresh start)"),
             _f("resumed_from", "str", "the checkpoint resumed from"),
             _f("torchelastic_restart_count", "int", "torchrun's restart count (0: launched by hand)"),
             _f("threads", "int", "torch CPU threads"),
             _f("dtype", "str", "training dtype"),
             _f("n_params", "int", "model parameters"),
             _f("flops_per_token", "int", "model FLOPs per token"),
             _f("data_fingerprints", "dict", "fingerprint of each data source"),
             _f("started_at", "number", "attempt start, seconds since the epoch"),
             _f("restore_s", "number", "seconds spent restoring the checkpoint"),
             _f("compiled", "bool", "torch.compile before the first step"),
             _f("compile_s", "number", "compile seconds (a cache load on a restart)"),
             _f("compile_graphs", "dict", "how each compiled graph was readied: loaded (saved by an earlier attempt),"
                " compiled (and saved) or traced (torch.compile)"),
             _f("attention_backend", "str", "what computes attention (model.attention_backend): sdpa"
                " (F.scaled_dot_product_attention) or math (the softmax written out)"),
             _f("checkpoint_format", "str", "how checkpoints are written (checkpoint.format resolved): torch (rank 0,"
                " whole tensors) or dcp (torch.distributed.checkpoint, every rank its shards)"),
             _f("config_changed", "list", "config keys changed since the previous launch"),
             _f("deviations", "list", "deviations from the preregistration the launcher recorded (run.json)"),
             _f("guard_from_plan", "list", "guard settings the preregistered contingency rules set, one line each"
                " (`guard.spike_sigma 6 -> 4 (contingency rule 1)`)"),
             _SLURM,
             _f("oom_kills", "int", "OOM kills the kernel had counted in the process's memory cgroup at the start"),
             _f("members", "list", "[{rank, node, local_rank, host, pid}] with several workers"),
             _f("group_id", "str", "the attempt's identity, agreed by every worker"),
             _f("seed", "int", "the seed of the initialisation and the data order (train.seed as trained)"),
             _f("seed_source", "str", "the preregistration's timestamp token the seed was drawn from, relative to the"
                " entries folder; null: the config's own seed, not anchored (logbook/trust/replay.py)"),
         )),
    Kind("restart", "an attempt resumed after a failure: cause, steps and seconds lost, downtime", "restart",
         starts_attempt=True, reopens=True, run_state="running", incident=True, reviewable=True,
         counted_as="restarts", goodput="restart", console=True,
         alert="WARN", summary=_sum_restart, fields=(
             _f("cause", "str", " | ".join([*RESTART_CAUSES, "unknown"]), required=True),
             _f("detail", "str", "what the previous attempt left behind, in words"),
             _f("prev_attempt", "int", "the attempt that ended"),
             _f("next_attempt", "int", "the attempt that resumed"),
             _f("resumed_from_step", "int", "the checkpoint step resumed from"),
             _f("failed_at_step", "int", "the last step the previous attempt reached"),
             _f("unfinished_checkpoint_step", "int", "a checkpoint that was still being written when the worker died"
                " (its save left unfinished, so the resume went back further)"),
             _f("steps_lost", "int", "steps recomputed"),
             _f("seconds_lost", "number", "seconds of work recomputed"),
             _f("downtime_s", "number", "seconds between the last sign of life and the resume"),
             _f("exception_type", "str", "the exception the previous attempt raised"),
             _f("exception_message", "str", "its message"),
             _f("signal", "any", "the signal that ended it (number or name)"),
             _f("peer_lost", "bool", "rank 0 lost a peer that left no record"),
             _f("failed_rank", "int", "the rank that failed first (a wrapped torchrun's summary)"),
             _f("local_rank", "int", "its local rank on its node"),
             _f("exit_code", "int", "the exit code a command under `logbook run -- CMD` ended with"),
             _f("oom_kills", "int", "OOM kills the kernel counted in the memory cgroup while the ended attempt ran"
                " (absent: it keeps no count)"),
             _f("lost_ranks", "list", f"{_RANKS}: the workers that vanished without a record"),
             _f("hung_ranks", "list", f"{_RANKS}: the workers that hung"),
             _SLURM,
         )),
    Kind("attempt_failed", "an attempt raised an exception; recorded by the failing attempt itself", "attempt failed",
         ends_attempt=2, ending="exception", console=True, fields=(
             _f("exception_type", "str", "the exception's class", required=True),
             _f("exception_message", "str", "its message"),
             _f("traceback", "str", "the last lines of the traceback"),
         )),
    Kind("checkpoint_saved", "a checkpoint was written completely (step, path, blocking seconds)", "checkpoint saved",
         routine=True, keeps_incident=True, goodput="checkpoint_save", summary=_sum_checkpoint, fields=(
             _f("path", "str", "the checkpoint folder"),
             _f("blocking_s", "number", "seconds training waited"),
             _f("total_s", "number", "seconds until it was complete"),
             _f("bytes", "int", "size on disk"),
         )),
    Kind("checkpoint_rejected", "a checkpoint failed its manifest check and was skipped on load", "checkpoint rejected",
         incident=True, summary=_sum_reason, fields=(
             _f("path", "str", "the checkpoint folder"),
             _f("ckpt_step", "int", "its step"),
             _f("reason", "str", "what the check found", required=True),
         )),
    Kind("checkpoint_failed", "writing a checkpoint failed (for example a full disk); training went on",
         "checkpoint failed", incident=True, keeps_incident=True, summary=_sum_reason, fields=(
             _f("reason", "str", "why the save failed", required=True),
             _f("errno", "int", "the OS error number"),
         )),
    Kind("preempted", "SIGTERM or SIGUSR1: the attempt saved and exited for requeue", "preempted",
         incident=True, ends_attempt=2, ending="preempted", run_state="preempted", console=True,
         summary=_sum_preempted, fields=(
             _f("signal", "str", "the signal's name"),
             _f("saved_step", "int", "the step of the checkpoint saved on the way out"),
             _SLURM,
         )),
    Kind("straggler", "one rank was persistently slower than the others", "straggler", fields=(
        _f("rank_slow", "int", "the slow rank", required=True),
        _f("node_slow", "int", "its node"),
        _f("ratio", "number", "its step time over the median"),
        _f("steps", "list", "[first, last] steps of the streak"),
        _f("checks", "int", "consecutive checks that found it slow"),
        _f("step_s", "list", "each rank's step seconds"),
        _f("median_s", "number", "the median step seconds"),
    )),
    Kind("divergence_detected", "a loss or gradient-norm spike, or a non-finite value", "divergence",
         incident=True, reviewable=True, counted_as="spikes", alert="WARN", guard="detection",
         summary=_sum_divergence, fields=(
             _f("metric", "str", "loss | grad_norm"),
             _f("value", "number", "the value seen"),
             _f("baseline", "number", "its rolling median"),
             _f("scale", "number", "the robust spread"),
             _f("threshold", "number", "the z that counts as a spike"),
             _f("z", "number", "robust sigmas above the baseline"),
             _f("nonfinite", "bool", "the value was NaN or infinite"),
             _f("batch_ids", "list", "the batches of the step"),
             _f("action", "str", "skip | rollback | lr_scale | abort | none"),
             _f("replay", "dict", "the flagged step re-run on the same batch: whether the spike came back (the guard's replay check)"),
             _f("actions", "list", "the actions it asked for, in the contingency vocabulary (rollback, skip_batches, lr_scale, skip_update, abort)"),
             _PLAN,
             _f("counted", "bool", "counted towards the ladder (false within the cooldown)"),
             _f("spikes_in_window", "int", "spikes within the rollback window"),
             _f("signals", "list", "every signal that flagged the step"),
             _f("reason", "str", "the guard's reasoning in words"),
         )),
    Kind("step_skipped", "the guard skipped an optimizer update", "step skipped",
         routine=True, counted_as="skipped_steps", guard="action", goodput="skipped", fields=(
             _f("reason", "str", "why"),
             _f("metric", "str", "the metric that spiked"),
             _f("batch_ids", "list", "the batches of the step"),
             _f("batch_id", "int", "the batch of the step"),
             _f("counted", "bool", "counted towards the ladder"),
             _PLAN,
         )),
    Kind("rollback", "the guard rolled back to an earlier checkpoint and skipped batches", "rollback",
         incident=True, reviewable=True, counted_as="rollbacks", alert="WARN", guard="action", goodput="rollback",
         summary=_sum_rollback, fields=(
             _f("from_step", "int", "the step rolled back from", required=True),
             _f("to_step", "int", "the step rolled back to", required=True),
             _f("steps_lost", "int", "steps recomputed"),
             _f("batches_skipped", "list", "[first, last] batches skipped"),
             _f("checkpoint", "str", "the checkpoint restored"),
             _f("kept", "list", "paths of the checkpoints kept for study"),
             _f("abandoned", "list", "checkpoints of the abandoned branch, set aside"),
             _f("rollbacks", "int", "the guard's rollbacks so far, this one included"),
             _f("max_rollbacks", "int", "rollbacks allowed before the guard aborts"),
             _f("reason", "str", "the guard's reasoning"),
             _f("restore_s", "number", "seconds spent restoring"),
             _f("wanted_step", "int", "the step the guard wanted, when no checkpoint was that far back"),
             _f("note", "str", "why it rolled back elsewhere than wanted"),
             _PLAN,
         )),
    Kind("lr_scaled", "the learning-rate multiplier changed", "learning rate scaled",
         lr_change=True, setting_change=True, guard="action", summary=_sum_lr_scaled, fields=(
             _f("old", "number", "the multiplier before", required=True),
             _f("new", "number", "the multiplier after", required=True),
             _f("factor", "number", "new / old"),
             _f("reason", "str", "why"),
             _PLAN,
         )),
    Kind("run_aborted", "the guard aborted the run after too many rollbacks", "run aborted",
         incident=True, reviewable=True, terminal=True, ends_attempt=3, ending="aborted", run_state="aborted",
         alert="ERROR",
         guard="action", summary=_sum_abort, fields=(
             _f("reason", "str", "why", required=True),
             _f("rollbacks", "int", "rollbacks before the abort"),
             _PLAN,
         )),
    Kind("hparam_change", "a hyperparameter changed mid-run (live request or scheduled)", "change",
         reviewable=True, lr_change=True, setting_change=True, summary=_sum_change, fields=(
             _f("key", "str", "the setting", required=True),
             _f("old", "any", "its value before"),
             _f("new", "any", "its value after", required=True),
             _f("reason", "str", "why, in the requester's words"),
             _f("who", "str", "who asked (schedule, config file, a person)"),
             _f("source", "str", "live | schedule | advice | config | callback (set outside the scheduler)", required=True),
             _f("request_id", "str", "the live request"),
             _f("config_diff", "str", "unified diff of the resolved config"),
             _f("reapplied", "bool", "applied again after a restart"),
             _PLAN,
         )),
    Kind("hparam_change_rejected", "a live change request was refused", "change refused", fields=(
        _f("request_id", "str", "the request"),
        _f("who", "str", "who asked"),
        _f("reason", "str", "why it was refused", required=True),
        _f("changes", "any", "the changes asked for"),
        _f("source", "str", "live | config"),
        _f("file", "str", "the request file"),
    )),
    Kind("milestone", "a progress note at a configured fraction of the run", "milestone", reviewable=True,
         keeps_incident=True, summary=_sum_milestone, fields=(
             _f("fraction", "number", "the fraction of the run reached", required=True),
             _f("total_steps", "int", "steps the run is configured for"),
             _f("elapsed_s", "number", "seconds since the run began"),
             _f("eta_s", "number", "seconds to go, estimated"),
             _f("loss", "number", "the last accepted training loss"),
             _f("loss_step", "int", "the step of `loss` when the guard skipped the note's own step"),
             _f("skipped_loss", "number", "the skipped step's loss"),
             _f("val_loss", "number", "the latest validation loss"),
             _f("val_step", "int", "its step"),
             _f("tokens_per_s", "number", "throughput"),
             _f("mfu", "number", "model FLOPs utilisation"),
             _f("goodput", "number", "share of wall time spent on steps that count (old logs; now the chronicle's)"),
             _f("plot", "str", "the progress plot (old logs; now the chronicle's)"),
             _f("predictions", "list", "[{expr, status, value}]: where each prediction stands (old logs; now the chronicle's)"),
             _f("forecasts", "list", "where each forecast stands (old logs; now the chronicle's)"),
             _f("since_last", "dict", "{restarts, rollbacks, changes, skips} since the previous note (old logs; now the chronicle's)"),
         )),
    Kind("hang", "a step exceeded its timeout; the attempt exited to be restarted", "hang",
         incident=True, ends_attempt=2, ending="hang", alert="WARN", summary=_sum_hang, fields=(
             _f("timeout_s", "number", "the timeout"),
             _f("elapsed_s", "number", "seconds without progress"),
             _f("floor_s", "number", "the timeout's floor"),
             _f("median_step_s", "number", "the median step seconds the timeout scales with"),
         )),
    Kind("fault_injected", "a fault drill fired", "fault drill", summary=_sum_fault, fields=(
        _f("fault", "str", "the fault's kind", required=True),
        _f("at_step", "int", "the step it fired at"),
        _f("batch_id", "int", "the batch it hit"),
        _f("factor", "number", "the spike's size"),
        _f("rank", "int", "the rank it hit"),
        _f("when", "str", "save: during a checkpoint save"),
        _f("path", "str", "the checkpoint it corrupted"),
    )),
    Kind("log_repaired", "a torn last line (from a kill) was moved aside", "log repaired", reopens=True, fields=(
        _f("torn_bytes", "int", "bytes moved aside", required=True),
        _f("saved_to", "str", "the file they went to"),
    )),
    Kind("run_finished", "the run reached its last step", "run finished",
         terminal=True, ends_attempt=3, ending="finished", run_state="finished", fields=(
             _f("final_loss", "number", "the last training loss"),
             _f("val_loss", "number", "the last validation loss"),
             _f("wall_s", "number", "seconds since the run's first attempt began"),
             _f("attempt_wall_s", "number", "seconds of the last attempt"),
             _f("checkpoint_blocking_s", "number", "seconds training waited for checkpoints"),
             _f("teardown", "str", "how the last attempt failed after its loop closed at its last step "
                                      "(\"rank 1 was killed by SIGABRT\"): training was over, so it was not relaunched"),
         )),
    Kind("run_stopped", "a person stopped the run cleanly (`logbook stop`): it saved a checkpoint and ended",
         "run stopped", terminal=True, ends_attempt=3, ending="stopped", run_state="stopped", console=True, summary=_sum_stopped, fields=(
             _f("who", "str", "who asked for the stop"),
             _f("reason", "str", "why, in their words"),
             _f("request_id", "str", "the stop request"),
             _f("saved_step", "int", "the step of the checkpoint saved before stopping"),
         )),
    Kind("run_failed", "the run ended in failure (restarts exhausted or fatal error)", "run failed",
         incident=True, terminal=True, reopens=True, ends_attempt=3, ending="failed", run_state="failed", alert="ERROR",
         summary=_sum_reason, fields=(
             _f("reason", "str", "why, in words", required=True),
             _f("exit_code", "int", "torchrun's exit code"),
             _f("attempts", "int", "attempts made"),
             _f("status", "str", "failed | aborted"),
             _f("torchrun_attempts", "int", "attempts torchrun made in this launch"),
         )),
    Kind("note", "a human note", "note"),
    Kind("review", "a review record", "review"),
    Kind("trust_setting_changed", "a commit changed who may sign records (the allowed signers, `signing:`) or whether "
         "a launcher may approve their own run (`review_self_approval`); read from git history, never written in a log",
         "signers or self-approval changed", fields=(
             _f("commit", "str", "the commit that made the change", required=True),
             _f("committer", "str", "`Name <email>` of whoever committed it"),
             _f("changes", "list", "one sentence per setting that changed"),
         )),
    Kind("config_recorded", "the hyperparameters a trainer reported it trains with (a framework's arguments, a"
         " module's hyperparameters, a wrapped command's config file or argv)", "hyperparameters",
         summary=_sum_config, fields=(
             _f("hparams", "dict", "the settings, as plain JSON", required=True),
             _f("source", "str", "where they come from, in words", required=True),
             _f("seed", "int", "the seed, where the trainer names one"),
             _f("config_path", "str", "the config file they were read from"),
             _f("config_sha256", "str", "sha256 of that file as read"),
         )),
    Kind("wandb_run", "the run is mirrored to W&B: id, path, project, entity, mode, dir, url (online only)",
         "W&B mirror", fields=(
             _f("id", "str", "the W&B run id", required=True),
             _f("path", "str", "entity/project/id"),
             _f("project", "str", "the W&B project"),
             _f("entity", "str", "the W&B entity"),
             _f("mode", "str", "offline | online"),
             _f("dir", "str", "the local W&B folder"),
             _f("url", "str", "the run's page (online only)"),
         )),
    Kind("outcome", "the run's predictions scored against its preregistration (logbook outcome)", "outcome",
         reviewable=True, afterwards=True, summary=_sum_outcome, fields=(
             _f("content_sha256", "str", "hash of the scorecard's content"),
             _f("prereg_id", "str", "the preregistration scored against"),
             _f("prereg_sha256", "str", "its hash"),
             _f("verify_ok", "bool", "the preregistration verified"),
             _f("verify_problems", "list", "the first problems verification found"),
             _f("run_state", "str", "the run's state when scored"),
             _f("counts", "dict", "{confirmed, refuted, inconclusive}"),
             _f("outcome_file", "str", "the scorecard's folder"),
             _f("supersedes", "str", "the scorecard this one replaces"),
             _f("predictions", "list", "each prediction with its status and value"),
             _f("deviations", "list", "[{kind, text, entry}]: deviations from the plan"),
             _f("computed_by", "str", "who scored it"),
         )),
)

_REGISTRY: dict[str, Kind] = {k.name: k for k in _KINDS}
KINDS: Mapping[str, Kind] = MappingProxyType(_REGISTRY)
"""Every registered kind, by name, in the order of the reference: a read-only view that `register` keeps current."""

_FLAGS = {f.name for f in fields(Kind)} - {"name", "description", "label", "fields", "summary"}
_version = 0
_where: dict[tuple[tuple[str, Any], ...], tuple[str, ...]] = {}
"""`kinds_where`'s answers to flag-only questions, for the registry as it stands (`_version`)."""


def registry_version() -> int:
    """A number that changes whenever a kind is registered or removed (for a reader that caches what it derives)."""
    return _version


def _changed() -> None:
    global _version
    _version += 1
    _where.clear()


def get_kind(name: Any) -> Kind | None:
    """The registered kind `name`, or None (an unknown kind: render it generically)."""
    return _REGISTRY.get(name) if isinstance(name, str) else None


def kinds_where(predicate: Callable[[Kind], Any] | None = None, **flags: Any) -> tuple[str, ...]:
    """Names of the kinds whose flags equal `flags` (and satisfy `predicate`), in registry order.

    `kinds_where(incident=True)`, `kinds_where(counted_as="restarts")`,
    `kinds_where(lambda k: k.ends_attempt)`. Ask when you read, never once at
    import: a kind registered later is in the answer. A flag-only question is
    answered from a cache that each registration empties, so asking per event is cheap.
    """
    key = tuple(sorted(flags.items())) if len(flags) > 1 else tuple(flags.items())
    if predicate is None and key in _where:
        return _where[key]  # only a checked question is ever stored
    unknown = set(flags) - _FLAGS
    if unknown:
        raise TypeError(f"no such event flag: {', '.join(sorted(unknown))}")
    names = tuple(k.name for k in _REGISTRY.values() if all(getattr(k, f) == v for f, v in flags.items())
                  and (predicate is None or predicate(k)))
    if predicate is None:  # a predicate is often a fresh lambda: caching by it would only grow
        _where[key] = names
    return names


def register(kind: Kind) -> Callable[[], None]:
    """Add `kind` to the registry in this process (a plugin's kind, a test's); returns what removes it again.

    Readers ask the registry when they read, so a kind registered here is
    counted, ended, priced, reviewed, summarised and put in the chronicle's
    routine line by them with no other change.
    """
    if kind.name in _REGISTRY:
        raise ValueError(f"event kind {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind
    _changed()

    def unregister() -> None:
        if _REGISTRY.get(kind.name) is kind:
            del _REGISTRY[kind.name]
            _changed()
    return unregister


FINAL_STATES = ("finished",)
"""Run states no launch leaves again: `logbook run --resume` refuses a finished run."""


def may_follow_end(ending: Any, kind: Any) -> bool:
    """Whether an event of `kind` may come right after the terminal event `ending` in one run's log.

    A finished run takes nothing more from any attempt. A failed or aborted run
    may be resumed: the next launch's first words are a `reopens` kind (the
    launcher's `run_failed` follows the guard's `run_aborted` the same way).
    What people record about a run later (`afterwards` kinds) is judged by
    the reader of that kind, not here.
    """
    end, k = get_kind(ending), get_kind(kind)
    if end is None or not end.terminal or end.run_state in FINAL_STATES or k is None:
        return False
    return k.reopens


def label(kind: Any) -> str:
    """A few words naming the kind for a heading; an unknown kind's name with spaces."""
    k = get_kind(kind)
    return k.label if k else str(kind).replace("_", " ")


def summary(rec: dict[str, Any]) -> str:
    """One line for a person: what the event says (its kind's description when it has no summary of its own)."""
    e = Event.of(rec)
    k = e.schema
    text = k.summary(e) if k and k.summary else k.description if k else label(rec.get("kind"))
    return " ".join(text.split())


# --- what one event means: readers ask these instead of comparing kind names --------------------


def kind_of(rec: Any) -> str | None:
    """The kind of an event record (or an `Event`); None when it has none that is text."""
    kind = rec.kind if isinstance(rec, Event) else rec.get("kind") if isinstance(rec, dict) else None
    return kind if isinstance(kind, str) else None


def is_kind(rec: Any, *names: str) -> bool:
    """Whether an event record (an `Event`, or a kind's name) is of one of the registered kinds `names`.

    For a reader that wants one kind's own payload (a `run_started`'s config
    hash); a reader that asks what an event means asks by flag instead. Naming
    an unregistered kind raises, so a typo cannot quietly match nothing.
    """
    unknown = [n for n in names if n not in _REGISTRY]
    if unknown:
        raise ValueError(f"not a registered event kind: {', '.join(unknown)}")
    kind = rec if isinstance(rec, str) else kind_of(rec)
    return kind in names


def _flag(rec: Any, name: str) -> Any:
    k = get_kind(rec if isinstance(rec, str) else kind_of(rec))
    return getattr(k, name) if k else None


def starts_attempt(rec: Any) -> bool:
    """Written when an attempt begins or resumes (`run_started`, `restart`)."""
    return bool(_flag(rec, "starts_attempt"))


def ends_attempt(rec: Any) -> int:
    """How strongly the event ends its attempt: 3 the run's end, 2 the attempt's own last words, 0 none."""
    return _flag(rec, "ends_attempt") or 0


def ending(rec: Any) -> str | None:
    """How the event ends its attempt (finished | failed | aborted | exception | preempted | hang | a kind's own)."""
    return _flag(rec, "ending") if ends_attempt(rec) else None


def ending_words(rec: dict[str, Any]) -> str | None:
    """The attempt's end in the words a lineage shows ("preempted, saved at step 40"); None: no ending.

    An ending this registry has no words for is said by the kind's own summary,
    never taken for another ending.
    """
    how = ending(rec)
    if not ends_attempt(rec):
        return None
    d = Event.of(rec).data
    if how == "failed":
        return ENDINGS[how] + (f": {d['reason']}" if d.get("reason") else "")
    if how == "exception":
        return restart_cause({**d, "cause": "exception"})
    if how in ("preempted", "stopped"):
        saved = d.get("saved_step")
        return ENDINGS[how] + (f", saved at step {saved:,}" if isinstance(saved, int) else "")
    return ENDINGS[how] if how in ENDINGS else summary(rec)


def is_terminal(rec: Any) -> bool:
    """The run has ended: it takes no more live changes."""
    return bool(_flag(rec, "terminal"))


def run_state(rec: Any) -> str | None:
    """The run's state once this is its latest lifecycle event (None: not a lifecycle event)."""
    return _flag(rec, "run_state")


def run_states() -> tuple[str, ...]:
    """Every state a run's latest lifecycle event may leave it in (`Kind.run_state`), in registry order."""
    return tuple(dict.fromkeys(k.run_state for k in _REGISTRY.values() if k.run_state))


def goodput_charge(rec: Any) -> str | None:
    """The goodput category the event charges (one of `GOODPUT_CHARGES`), or None."""
    return _flag(rec, "goodput")


def counted_as(rec: Any) -> str | None:
    """The count in predictions and outcomes the event adds to (restarts, spikes, rollbacks, skipped_steps)."""
    return _flag(rec, "counted_as")


def is_afterwards(rec: Any) -> bool:
    """Recorded about the run after the fact by a person's command, not by any attempt (`outcome`)."""
    return bool(_flag(rec, "afterwards"))


def is_routine(rec: Any) -> bool:
    """Summarised in one line per run and day in the chronicle (a checkpoint save), not one entry each."""
    return bool(_flag(rec, "routine"))


def has_flag(rec: Any, **flags: Any) -> bool:
    """Whether the event's kind has every flag as given: `has_flag(e, incident=True)`; an unknown kind has none."""
    unknown = set(flags) - _FLAGS
    if unknown:
        raise TypeError(f"no such event flag: {', '.join(sorted(unknown))}")
    k = get_kind(rec if isinstance(rec, str) else kind_of(rec))
    return k is not None and all(getattr(k, f) == v for f, v in flags.items())


def changes_lr(rec: dict[str, Any]) -> bool:
    """True for an event that changed the learning rate: `lr_scaled`, or an `hparam_change` of an lr key."""
    if not _flag(rec, "lr_change"):
        return False
    # A kind that may change the learning rate and names the setting it changed (hparam_change) does only for an lr key.
    data = Event.of(rec).data
    return data.get("key") in LR_KEYS if get_kind(kind_of(rec)).field("key") else True


# --- one record ---------------------------------------------------------------------------------


def parse_ts(ts: Any) -> float | None:
    """Seconds since the epoch of an event's UTC `ts`, or None."""
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


_DURATIONS = ("attempt_wall_s", "wall_s")
"""Seconds a payload states; none of them can be as large as the time since the epoch."""


def read_as_unknown(data: dict[str, Any], at: float | None) -> dict[str, Any]:
    """The payload with the values known to be wrong in logs already written read as unknown (None).

    The wrapped command once wrote `attempt_wall_s` as the time since the
    epoch less one (a flag subtracted instead of the attempt's start): a
    duration within a day of the event's own Unix time is that value, never
    seconds of training. The log keeps what it holds; every view reads this.
    """
    if at is None or not any(isinstance(data.get(k), (int, float)) for k in _DURATIONS):
        return data
    bad = [k for k in _DURATIONS if isinstance(data.get(k), (int, float)) and abs(data[k] - at) < 86400]
    return {**data, **dict.fromkeys(bad)} if bad else data


@dataclass(frozen=True)
class Event:
    """A typed view of one event record; the record itself stays the source of truth (`rec`)."""

    kind: str | None
    data: dict[str, Any]
    """The payload; {} when missing, {"value": x} when a producer wrote a plain value."""
    ts: str | None
    step: int | None
    attempt: int | None
    seq: int | None
    drill: bool
    rec: dict[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def of(rec: dict[str, Any]) -> Event:
        data = rec.get("data")
        if not isinstance(data, dict):
            data = {} if data is None else {"value": data}

        def integer(key: str) -> int | None:
            v = rec.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        kind = rec.get("kind")
        ts = rec.get("ts")
        data = read_as_unknown(data, parse_ts(ts) if isinstance(ts, str) else None)
        return Event(kind if isinstance(kind, str) else None, data, ts if isinstance(ts, str) else None,
                     integer("step"), integer("attempt"), integer("seq"), rec.get("drill") is True, rec)

    @property
    def seconds(self) -> float | None:
        """`ts` as seconds since the epoch (None: missing or unreadable)."""
        return parse_ts(self.ts)

    @property
    def schema(self) -> Kind | None:
        return get_kind(self.kind)


# --- checking what a producer writes ------------------------------------------------------------


class EventSchemaError(ValueError):
    """An event does not match its kind's registered payload."""


def strict_events() -> bool:
    """Whether `LOGBOOK_STRICT_EVENTS` asks for every written event to be checked."""
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


_NONFINITE = ("nan", "inf", "-inf")


def _is(type_: str, v: Any) -> bool:
    if v is None or type_ == "any":
        return True
    if type_ == "number":
        return (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in _NONFINITE
    if type_ == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    return isinstance(v, {"str": str, "bool": bool, "list": list, "dict": dict}[type_])


def check_event(kind: str, data: dict[str, Any]) -> None:
    """Raise `EventSchemaError` naming the kind and field if `data` does not match the registry."""
    k = get_kind(kind)
    if k is None:
        raise EventSchemaError(f"event kind {kind!r} is not registered in logbook/eventlog/kinds.py")
    if not k.fields:
        return  # a free-form record (a note, a review)
    for f in k.fields:
        if f.required and f.name not in data:
            raise EventSchemaError(f"{kind} event: required field {f.name!r} is missing")
    for name, v in data.items():
        f = k.field(name)
        if f is None:
            raise EventSchemaError(f"{kind} event: unknown field {name!r} (register it in logbook/eventlog/kinds.py)")
        if not _is(f.type, v):
            raise EventSchemaError(f"{kind} event: field {name!r} should be {f.type}, got {type(v).__name__} {v!r:.80}")


# --- the reference ------------------------------------------------------------------------------


def _flags(k: Kind) -> Iterable[str]:
    for f in sorted(_FLAGS):
        v = getattr(k, f)
        if v is True:
            yield f
        elif v not in (False, None, 0):
            yield f"{f}={v}"


def reference_markdown() -> str:
    """docs/events.md: every kind with its meaning, flags and payload fields."""
    out = ["<!-- Generated by `python3 -m logbook.eventlog.kinds > docs/events.md`; do not edit by hand. -->", "",
           "# Run events", "",
           "Each line of a run's `events.jsonl` is one event: `v` (schema version), `seq`, `ts` (UTC), `run`,",
           "`attempt`, `rank`, `step`, `tokens`, `kind`, `drill`, `data` (the payload below), `prev` and `hash`.",
           "Every payload field may be null; readers tolerate missing fields and render unknown kinds generically.",
           "The registry is `logbook/eventlog/kinds.py`; its docstring says how to add a kind.", "",
           "Field types: " + "; ".join(f"`{t}` {m}" for t, m in TYPES.items()) + ".", ""]
    for k in KINDS.values():
        out += [f"## `{k.name}`", "", f"{k.description[0].upper()}{k.description[1:]}.", ""]
        flags = list(_flags(k))
        if flags:
            out += ["Flags: " + ", ".join(f"`{f}`" for f in flags) + ".", ""]
        if k.fields:
            out += ["| field | type | required | meaning |", "|---|---|---|---|"]
            out += [f"| `{f.name}` | {f.type} | {'yes' if f.required else ''} | {f.meaning.replace('|', '&#124;')} |"
                    for f in k.fields]
            out.append("")
        else:
            out += ["Payload: free-form (a record written by a command, not by the trainer).", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(reference_markdown(), end="")
