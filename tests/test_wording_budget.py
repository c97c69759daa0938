"""Whole sentences are pinned once, in the snapshots: other tests assert facts and short key phrases.

An assert that compares a string literal of 40 or more characters against output is counted here;
the budget only goes down. A new sentence to pin belongs in a `test_wording_<family>.py` snapshot.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
LONG = 40
# 336 before the first snapshot family; lower it as sentences move into snapshots.
BUDGET = 304


def long_literal_asserts(source: str) -> int:
    """Asserts in `source` that hold a str constant of LONG+ characters in a comparison or `in` test."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assert):
            continue
        for sub in ast.walk(node.test):
            if isinstance(sub, ast.Compare) and any(
                isinstance(c, ast.Constant) and isinstance(c.value, str) and len(c.value) >= LONG
                for c in ast.walk(sub)
            ):
                count += 1
                break
    return count


def count_in_suite() -> dict[str, int]:
    counts = {p.name: long_literal_asserts(p.read_text()) for p in sorted(TESTS.glob("test_*.py"))}
    return {name: n for name, n in counts.items() if n}


def test_long_sentences_asserted_outside_snapshots_stay_within_the_budget():
    counts = count_in_suite()
    assert sum(counts.values()) <= BUDGET, sorted(counts.items(), key=lambda kv: -kv[1])[:10]


def test_the_counter_sees_a_long_literal_compared_with_output():
    assert long_literal_asserts('assert "x" * 3 in out\nassert "' + "a" * LONG + '" in out\n') == 1


if __name__ == "__main__":
    found = count_in_suite()
    for name, n in sorted(found.items(), key=lambda kv: -kv[1]):
        print(f"{n:4d} {name}")
    print(sum(found.values()), "in all")
