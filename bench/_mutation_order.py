"""pytest plugin for mutation runs: the fastest tests first.

mutmut stops a mutant's run at its first failing test (`-x`) but hands pytest
the covering tests in no useful order. Most mutants are killed by some cheap
test, so running cheap tests first ends most runs in a second instead of after
the slow ones. Which tests run, and so whether a mutant is killed, is
unchanged. `bench/mutation.py` installs this as the copy's root conftest.py;
mutmut runs the tests from its `mutants/` folder, where it keeps each test's
duration from its first, clean run.
"""

import json
from pathlib import Path


def pytest_collection_modifyitems(items):
    stats = Path("mutmut-stats.json")
    if stats.is_file():
        duration = json.loads(stats.read_text("utf-8")).get("duration_by_test", {})
        items.sort(key=lambda item: duration.get(item.nodeid, 0.0))
