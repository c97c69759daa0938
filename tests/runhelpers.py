"""Small real training configs and event-log readers for the launcher's tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def micro_config(repo: Path, name: str = "micro.yaml", *, steps: int = 8, every: int = 2,
                 faults: list[dict[str, Any]] | None = None) -> Path:
    """A one-layer GPT on 0.2 MB of the standard library: each step takes milliseconds."""
    cfg = {
        "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
        "data": {"sources": [{"name": "stdlib", "kind": "stdlib", "max_mb": 0.2}]},
        "train": {"steps": steps, "batch_size": 4, "eval_every": 0, "eval_batches": 1, "threads": 1},
        # Synchronous saves: the checkpoint of step `every` is complete before a drill fires after it.
        "checkpoint": {"every": every, "keep": 2, "background": False},
        "faults": faults or [],
    }
    path = repo / "configs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def events(repo: Path, run_id: str) -> list[dict[str, Any]]:
    path = repo / "entries" / "runs" / run_id / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def of_kind(evs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in evs if e["kind"] == kind]


def run_json(repo: Path, run_id: str) -> dict[str, Any]:
    """run.json as written at launch, with `status` as the run's event log says it stands now."""
    from logbook.core.project import open_project
    from logbook.runs.run_record import RunRecord, run_status

    rec = json.loads((repo / "entries" / "runs" / run_id / "run.json").read_text())
    rec["status"] = run_status(open_project(repo), run_id, RunRecord(**rec))
    return rec
