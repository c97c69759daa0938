"""The one line every benchmark prints per figure, so `bench/run_all.py` can tabulate it.

    RESULT {"figure": "...", "value": 0.99, "unit": "ratio", "goal": ">= 0.98", "met": true}
"""

from __future__ import annotations

import json


def result(figure: str, value: float | str, unit: str, goal: str, met: bool | None) -> None:
    print("RESULT " + json.dumps({"figure": figure, "value": value, "unit": unit, "goal": goal, "met": met}), flush=True)
