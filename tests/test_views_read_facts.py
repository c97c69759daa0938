"""No view derives a run fact from raw events: views read `logbook/runs/facts.py` and the event registry.

Issue 36: a number the chronicle, the report, the scorecard, `ls`/`show` or
the PDF states about a run (restarts, live changes, deviations, goodput,
steps lost, interventions ...) is computed once, in `RunFacts`, and every view
reads it there; two computations of one count drift apart (one live change
counted twice, goodput beside a loss share that does not complete it).

This test walks the syntax of each view module and fails on a function that
aggregates raw events itself: a `len`, `sum`, `max`, `min`, `Counter` or
median over the event log (`facts.events`, `facts.of_kind(...)`,
`facts.run_events()`, `facts.incidents()`, `iter_records(...)`,
`read_events(...)`, `log.records`) or over a list taken from it, a running
total (`n += ...`) in a loop over it, or a read of the raw metric series and
rows (`facts.series`, `facts.rows`). Listing events one per line is what
views do, and is allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

VIEWS = sorted({*(p.relative_to(ROOT).as_posix() for p in (ROOT / "logbook" / "chronicle").glob("*.py")),
                "logbook/scoring/outcome.py", "logbook/cli/outcome_cmd.py", "logbook/cli/prereg_cmd.py",
                "logbook/cli/review_cmd.py", "logbook/runs/runlist.py"})
"""The chronicle (Markdown and PDF), the report, the review queue, the scorecard, `ls`/`show`, `ls --runs`."""

ALLOWED: dict[tuple[str, str], str] = {
    ("logbook/chronicle/views.py", "_checkpoint_summary"):
        "one day's routine line (checkpoints saved that day, their blocking seconds) over that day's own records,"
        " which the chronicle shows one line per run and day; no run-wide figure",
    ("logbook/chronicle/views.py", "_skip_summary"):
        "one day's routine line (updates skipped that day, the first ten steps) over that day's own records",
}
"""(module, function) -> why it may aggregate the records it is given."""

_RAW_ATTRS = {"events", "records", "series", "rows"}
_RAW_CALLS = {"of_kind", "run_events", "incidents", "iter_records", "iter_events", "read_events", "read_metrics"}
_AGGREGATES = {"len", "sum", "max", "min", "Counter", "median", "mean", "fmean"}


def _is_raw(node: ast.AST, tainted: set[str]) -> bool:
    """Whether `node` holds raw events or metrics: a source above, or a local name taken from one."""
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in _RAW_ATTRS and isinstance(n.ctx, ast.Load):
            return True
        if isinstance(n, ast.Call):
            name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
            if name in _RAW_CALLS:
                return True
        if isinstance(n, ast.Name) and n.id in tainted:
            return True
    return False


def _call_name(node: ast.Call) -> str | None:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)


def _function_violations(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[int, str]]:
    tainted: set[str] = set()
    while True:  # names the function binds to raw events or to values read from them, to a fixed point
        before = len(tainted)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and _is_raw(node.value, tainted):
                tainted |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(node, (ast.For, ast.comprehension)) and _is_raw(node.iter, tainted):
                tainted |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        if len(tainted) == before:
            break
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and _call_name(node) in _AGGREGATES and any(_is_raw(a, tainted) for a in node.args):
            out.append((node.lineno, f"aggregates raw events: {ast.unparse(node)[:100]}"))
        elif isinstance(node, ast.For) and _is_raw(node.iter, tainted):
            for inner in ast.walk(node):
                if isinstance(inner, ast.AugAssign) and not _is_text(inner.value):
                    out.append((inner.lineno, f"keeps a running total over raw events: {ast.unparse(inner)[:100]}"))
        elif isinstance(node, ast.Attribute) and node.attr in ("series", "rows") and isinstance(node.ctx, ast.Load):
            out.append((node.lineno, f"reads the raw metric stream: {ast.unparse(node)[:100]}"))
    return out


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def view_violations(source: str, rel: str) -> list[str]:
    """Each place a view module derives a run fact from raw events itself, as `rel:line: what`."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and (rel, fn.name) not in ALLOWED:
            found += [f"{rel}:{line}: {fn.name} {what}" for line, what in _function_violations(fn)]
    return sorted(set(found))


def test_no_view_derives_a_run_fact_from_raw_events():
    found = [v for rel in VIEWS for v in view_violations((ROOT / rel).read_text(encoding="utf-8"), rel)]
    assert not found, "compute it once in logbook/runs/facts.py (RunFacts) and read it there:\n" + "\n".join(found)


def test_every_allowed_function_still_exists():
    for (rel, name), why in ALLOWED.items():
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        assert any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(tree)), (rel, name)
        assert why.strip()


@pytest.mark.parametrize("planted", [
    "def interventions(facts):\n    return len(facts.of_kind('restart'))\n",
    "def f(facts):\n    return sum(1 for e in facts.events if e.get('drill'))\n",
    "def f(facts):\n    rs = [e for e in facts.run_events() if counted_as(e) == 'restarts']\n    return len(rs)\n",
    "def f(facts):\n    n = 0\n    for e in facts.incidents():\n        n += 1\n    return n\n",
    "def f(path):\n    return max(e['step'] for e in iter_records(path))\n",
    "def f(facts):\n    return facts.series['loss'][10]\n",
    "def f(log):\n    return len(log.records)\n",
])
def test_a_planted_view_computation_is_found(planted):
    assert view_violations(planted, "logbook/chronicle/planted.py"), planted


@pytest.mark.parametrize("clean", [
    "def f(facts):\n    return [{'what': w, 'n': n} for w, n, _ in facts.interventions()]\n",
    "def f(facts):\n    return facts.count('restarts'), facts.goodput().value\n",
    "def f(facts):\n    return [summary(e) for e in facts.incidents()]\n",
    "def f(facts):\n    text = ''\n    for e in facts.events:\n        text += f'{e}'\n    return text\n",
])
def test_reading_facts_is_not_a_violation(clean):
    assert view_violations(clean, "logbook/chronicle/planted.py") == []


def test_a_computation_planted_in_the_report_is_found():
    rel = "logbook/chronicle/report.py"
    source = (ROOT / rel).read_text(encoding="utf-8")
    planted = source + "\n\ndef _restarts(facts):\n    return len(facts.of_kind('restart'))\n"
    assert [v for v in view_violations(planted, rel) if "_restarts" in v]
