"""Readers ask the event registry what an event means; none compares a kind's name or reads `["kind"]` itself.

An event's meaning (does it end an attempt, and how; what goodput it charges;
is it an incident) lives beside its fields in `logbook/eventlog/kinds.py`.
A module that writes `e.get("kind") == "preempted"` keeps a second list of
kinds, which the next kind misses. This test walks the syntax of every module in
`logbook/` and `trainer/` and fails on:

- a comparison (`==`, `!=`, `in`, `not in`) of an event's kind with a string literal
  that names a registered kind, or a `match` on an event's kind with such a case;
- a lookup of a registered kind's literal name in a container a reader keyed by kind
  (`"hang" in kinds`, `by_kind["run_aborted"]`);
- a raw read of a record's kind, `x["kind"]` or `x.get("kind")`;
- a name bound at import to an answer of the registry (`ROUTINE = kinds_where(routine=True)`),
  which a kind registered later is missing from.

The questions to ask instead: `kind_of`, `is_kind` (a reader that wants one
kind's own payload), `ends_attempt`, `ending`, `ending_words`, `goodput_charge`,
`counted_as`, `has_flag`, `is_terminal`, `run_state`, `summary`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from logbook.eventlog.kinds import KINDS

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = "logbook/eventlog/kinds.py"

# Modules where nothing called `kind` is an event's: each entry says what it is instead.
NOT_EVENTS: dict[str, str] = {
    "logbook/eventlog/plan.py": "guard and contingency actions ({kind: skip | rollback | lr_scale ...}), not events",
    "logbook/promises/contingency.py": "contingency rules' triggers and actions, not events",
    "logbook/guard/plan.py": "contingency triggers and actions, keyed by the action's kind",
    "trainer/faults.py": "fault drills (`Fault.kind`: sigkill | hang | nan ...), not events",
}

# Expressions in other modules whose `kind` is not an event's, by module and source text.
NOT_EVENT_EXPRS: dict[tuple[str, str], str] = {
    ("logbook/chronicle/report.py", "p['forecast']"): "a forecast's kind (point | probability)",
    ("logbook/scoring/outcome.py", "d"): "a deviation's kind (config | live_change | off_plan ...)",
    ("logbook/proof/scorecard.py", "d"): "a deviation's kind (config | live_change | off_plan ...)",
    ("logbook/runs/facts.py", "a"): "a contingency rule's action (rollback | skip_batches | lr_scale)",
    ("logbook/promises/predictions.py", "d"): "a forecast's kind in a preregistration (trajectory | point ...)",
    ("logbook/promises/prereg_format.py", "front"): "a preregistration file's front matter (`kind: prereg | amendment`)",
    ("logbook/scoring/calibration.py", "f"): "a forecast's kind (point | probability)",
    ("logbook/scoring/forecasts.py", "f"): "a forecast's kind (point | probability)",
    ("logbook/cli/outcome_cmd.py", "f"): "a forecast's kind (point | probability)",
    ("logbook/trust/ack.py", "rec"): "an acknowledgement record (`kind: ack`), not a run event",
    ("logbook/trust/ack.py", "r"): "an acknowledgement record (`kind: ack`), not a run event",
    ("logbook/trust/ack.py", "f"): "a verify finding's kind, which an acknowledgement names",
    ("logbook/trust/signers.py", "rec"): "a key-acceptance record (`kind` of a one-file signers record), not a run event",
    ("logbook/cli/ack_cmd.py", "f"): "a verify finding's kind, which an acknowledgement names",
    ("logbook/cli/prereg_cmd.py", "written.front"): "a preregistration file's front matter",
    ("trainer/checkpoints/rng.py", "npy"): "NumPy's generator state (`kind`: the bit generator's name)",
    ("trainer/config.py", "fault"): "a fault drill's kind (sigkill | hang | nan ...)",
}


def _kind_source(node: ast.AST) -> ast.AST | None:
    """What `node` reads the kind of (`x` in `x["kind"]`, `x.get("kind")`, `kind_of(x)`, `x.kind`), else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "kind":
        return node.value
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and node.args[0].value == "kind" and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return node.func.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "kind_of" and node.args:
        return node.args[0]
    if isinstance(node, ast.Attribute) and node.attr == "kind":
        return node.value
    if isinstance(node, ast.Name) and node.id == "kind":
        return node
    return None


def _kind_names(node: ast.AST) -> list[str]:
    """The registered kind names a literal (or a literal tuple, list or set) spells."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in KINDS else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for e in node.elts for n in _kind_names(e)]
    return []


def _keyed_by_kind(node: ast.AST) -> bool:
    """A container of events by kind that a reader built itself (`by_kind`, `kinds`); the registry's `KINDS` is not."""
    return isinstance(node, ast.Name) and "kind" in node.id.lower() and node.id != "KINDS"


def _raw_read(node: ast.AST) -> ast.AST | None:
    """`x` of a raw `x["kind"]` (read, not written) or `x.get("kind")`."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return _kind_source(node)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return _kind_source(node)
    return None


def kind_violations(source: str, rel: str) -> list[str]:
    """Each place in one module that compares an event's kind with a literal or reads it raw, as `rel:line: text`."""
    tree = ast.parse(source)
    out = []

    def excused(of: ast.AST) -> bool:
        return (rel, ast.unparse(of)) in NOT_EVENT_EXPRS

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            read = [s for s in sides if _kind_source(s) is not None and not excused(_kind_source(s))]
            if read and any(_kind_names(s) for s in sides):
                out.append(f"{rel}:{node.lineno}: compares a kind with a literal: {ast.unparse(node)}")
        elif isinstance(node, ast.Match) and _kind_source(node.subject) is not None:
            cases = [p for c in node.cases for p in ast.walk(c.pattern)
                     if isinstance(p, ast.MatchValue) and _kind_names(p.value)]
            if cases:
                out.append(f"{rel}:{node.lineno}: matches a kind against literals: {ast.unparse(node.subject)}")
        elif isinstance(node, ast.Subscript) and _keyed_by_kind(node.value) and _kind_names(node.slice):
            out.append(f"{rel}:{node.lineno}: looks a kind up by its literal name: {ast.unparse(node)}")
        if isinstance(node, ast.Compare) and _kind_names(node.left) and any(
                isinstance(op, (ast.In, ast.NotIn)) and _keyed_by_kind(c) for op, c in zip(node.ops, node.comparators)):
            out.append(f"{rel}:{node.lineno}: looks a kind up by its literal name: {ast.unparse(node)}")
        of = _raw_read(node)
        if of is not None and not excused(of) and not isinstance(node, (ast.Attribute, ast.Name)) \
                and not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            out.append(f"{rel}:{node.lineno}: reads a record's kind raw: {ast.unparse(node)}")
    return out


_REGISTRY_NAMES = {"KINDS", "kinds_where", "get_kind", "has_flag", "run_states"}


def frozen_copies(source: str, rel: str) -> list[str]:
    """Each module- or class-level name bound to an answer of the registry: a copy made at import, blind to later kinds."""
    tree = ast.parse(source)
    asked = _REGISTRY_NAMES | {a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                               for a in n.names if a.asname and a.name in _REGISTRY_NAMES}
    out = []
    bodies = [tree.body, *(n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]
    for stmt in (s for body in bodies for s in body):
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
            continue
        used = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)} & asked
        if used and not isinstance(stmt.value, ast.Lambda):
            out.append(f"{rel}:{stmt.lineno}: keeps a copy of the registry made at import: {ast.unparse(stmt)[:100]}")
    return out


def _modules() -> list[Path]:
    return [p for folder in ("logbook", "trainer") for p in sorted((ROOT / folder).rglob("*.py"))]


def test_no_module_outside_the_registry_compares_kinds_or_reads_them_raw():
    found = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel == REGISTRY or rel in NOT_EVENTS:
            continue
        found += kind_violations(path.read_text(encoding="utf-8"), rel)
    assert not found, "ask logbook/eventlog/kinds.py instead:\n" + "\n".join(found)


def test_no_module_keeps_a_copy_of_the_registry_made_at_import():
    found = [v for path in _modules() if (rel := path.relative_to(ROOT).as_posix()) != REGISTRY
             for v in frozen_copies(path.read_text(encoding="utf-8"), rel)]
    assert not found, "ask the registry when you read (a kind registered later is missing from a copy):\n" + \
        "\n".join(found)


@pytest.mark.parametrize("planted", [
    "ROUTINE_KINDS = frozenset(kinds_where(routine=True))\n",
    "ALERTS = {name: k.alert for name, k in KINDS.items() if k.alert}\n",
    "class Queue:\n    REVIEWED: tuple = kinds_where(reviewable=True)\n",
    "from logbook.eventlog.kinds import KINDS as SCHEMA\nKINDS = {n: k.description for n, k in SCHEMA.items()}\n",
])
def test_a_planted_copy_of_the_registry_is_found(planted):
    assert frozen_copies(planted, "logbook/runs/planted.py"), planted


def test_every_excuse_still_names_something_there():
    for rel in NOT_EVENTS:
        assert (ROOT / rel).is_file(), f"{rel} is excused but no longer exists: drop it from the list"
    for rel, expr in NOT_EVENT_EXPRS:
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        read = {ast.unparse(of) for node in ast.walk(tree) if (of := _kind_source(node)) is not None}
        assert expr in read, f"{rel} no longer reads the kind of {expr}: drop it from the list"


@pytest.mark.parametrize("planted", [
    'def f(e):\n    return e.get("kind") == "preempted"\n',
    'def f(e):\n    return e["kind"] != "restart"\n',
    'def f(kind):\n    return kind in ("run_finished", "run_failed")\n',
    'def f(e):\n    return kind_of(e) not in ["hang"]\n',
    'def f(ev):\n    return ev.kind == "rollback"\n',
    'def f(e):\n    match e["kind"]:\n        case "hang":\n            return 1\n',
    'def f(e):\n    return e.get("kind")\n',
    'def f(rec):\n    x = rec["kind"]\n    return x\n',
    'def f(by_kind):\n    return "run_aborted" in by_kind\n',
    'def f(kinds):\n    return kinds["attempt_failed"]\n',
])
def test_a_planted_violation_is_found(planted):
    assert kind_violations(planted, "logbook/runs/planted.py"), planted


@pytest.mark.parametrize("clean", [
    'def f(e):\n    return is_kind(e, "preempted") or ending(e) == "hang"\n',
    'def f(e):\n    return kind_of(e) in KINDS\n',
    'def f(rec):\n    rec["kind"] = "restart"\n',
    'def f(sink):\n    sink.emit("restart", step=3)\n',
    'def f():\n    return KINDS["restart"].ends_attempt\n',
    'def f(ends):\n    return "hang" in ends\n',
])
def test_asking_the_registry_is_not_a_violation(clean):
    assert kind_violations(clean, "logbook/runs/planted.py") == []


def test_a_violation_planted_in_a_real_module_is_found():
    path = ROOT / "logbook" / "runs" / "lineage.py"
    source = path.read_text(encoding="utf-8")
    assert kind_violations(source, "logbook/runs/lineage.py") == []
    planted = source + '\n\ndef _planted(rec):\n    return rec.get("kind") == "hang"\n'
    assert len(kind_violations(planted, "logbook/runs/lineage.py")) == 2  # the raw read and the comparison


# --- the questions themselves ---------------------------------------------------------------------

def test_is_kind_refuses_a_name_the_registry_does_not_know():
    from logbook.eventlog.kinds import is_kind

    assert is_kind({"kind": "restart"}, "restart") and is_kind("restart", "run_started", "restart")
    assert not is_kind({"kind": "restart"}, "run_started") and not is_kind({"data": {}}, "restart")
    with pytest.raises(ValueError, match="not a registered event kind: restrat"):
        is_kind({"kind": "restart"}, "restrat")


def test_kind_of_reads_only_text_kinds():
    from logbook.eventlog.kinds import Event, kind_of

    assert kind_of({"kind": "hang"}) == kind_of(Event.of({"kind": "hang"})) == "hang"
    assert kind_of({"kind": 3}) is None and kind_of({}) is None and kind_of(None) is None


@pytest.mark.parametrize("rec, words", [
    ({"kind": "run_finished"}, "finished the run"),
    ({"kind": "run_failed", "data": {"reason": "restarts exhausted"}}, "run failed: restarts exhausted"),
    ({"kind": "run_aborted", "data": {"reason": "too many rollbacks"}}, "aborted by the guard"),
    ({"kind": "attempt_failed", "data": {"exception_type": "OSError"}}, "raised OSError"),
    ({"kind": "preempted", "data": {"saved_step": 1200}}, "preempted, saved at step 1,200"),
    ({"kind": "hang", "data": {"timeout_s": 60}}, "hung past its step timeout"),
    ({"kind": "checkpoint_saved"}, None),
    ({"kind": "from_next_year"}, None),
])
def test_each_ending_has_its_words(rec, words):
    from logbook.eventlog.kinds import ending_words

    assert ending_words(rec) == words


def test_flag_questions_answer_from_the_registry():
    from logbook.eventlog.kinds import counted_as, goodput_charge, has_flag, is_terminal, run_state

    assert goodput_charge({"kind": "checkpoint_saved"}) == "checkpoint_save"
    assert goodput_charge({"kind": "restart"}) == "restart" and goodput_charge({"kind": "note"}) is None
    assert counted_as({"kind": "divergence_detected"}) == "spikes" and run_state("run_aborted") == "aborted"
    assert is_terminal({"kind": "run_failed"}) and not is_terminal({"kind": "preempted"})
    assert has_flag({"kind": "restart"}, incident=True, console=True) and not has_flag({"kind": "odd"}, incident=True)
    with pytest.raises(TypeError, match="no such event flag"):
        has_flag({"kind": "restart"}, incidnet=True)
