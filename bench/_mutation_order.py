"""pytest plugin for mutation runs: the tests likeliest to kill a mutant first.

mutmut stops a mutant's run at its first failing test (`-x`) but hands pytest
the covering tests in no useful order. Two orders help, in turn:

1. Tests that already killed other mutants of the same function, most kills
   first: mutants of one function tend to die by the same test, and once one
   slow test has been found to notice a function, its siblings need not wait
   behind every cheap test that does not.
2. The rest, fastest first: most mutants die by some cheap test.

Which tests run, and so whether a mutant is killed, is unchanged: only the
time to the first failure is. `bench/mutation.py` installs this as the
copy's root conftest.py; mutmut runs the tests from its `mutants/` folder,
where it keeps each test's duration from its first, clean run, and where the
kills are appended (one JSON line each; two workers may append at once, and
lines this short are written whole).

A mutant's tests also run under a cap on memory (MEMORY_CAP): a mutant that
makes a loop endless and grows a list without bound ends in a MemoryError
instead of taking the machine's memory; one that grows slowly still ends at
mutmut's own CPU-time limit (a timeout, which counts as killed).
"""

import json
import os
import resource
from pathlib import Path

HERE = Path(__file__).resolve().parent  # tests change the working folder; the files stay beside this one
KILLS = HERE / "mutmut-kills.jsonl"
MEMORY_CAP = 4 << 30  # bytes of address space; the suite's own tests need well under 1 GiB


def _mutant() -> str:
    name = os.environ.get("MUTANT_UNDER_TEST", "")
    return name if "__mutmut_" in name else ""  # not the clean, stats or forced-fail runs


def _function(mutant: str) -> str:
    return mutant.rsplit("__mutmut_", 1)[0]


def _kills(function: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    if KILLS.is_file():
        for line in KILLS.read_text("utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if rec.get("function") == function:
                counts[rec["test"]] = counts.get(rec["test"], 0) + 1
    return counts


def pytest_configure(config):
    if _mutant():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, resource.getrlimit(resource.RLIMIT_AS)[1]))


def pytest_collection_modifyitems(items):
    stats = HERE / "mutmut-stats.json"
    duration = json.loads(stats.read_text("utf-8")).get("duration_by_test", {}) if stats.is_file() else {}
    mutant = _mutant()
    kills = _kills(_function(mutant)) if mutant else {}
    items.sort(key=lambda item: (-kills.get(item.nodeid, 0), duration.get(item.nodeid, 0.0)))


def pytest_runtest_logreport(report):
    mutant = _mutant()
    if report.failed and mutant:
        with KILLS.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"function": _function(mutant), "test": report.nodeid}) + "\n")
