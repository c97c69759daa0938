"""Live hyperparameter changes, the training loop's side: picked up at step boundaries and recorded as events.

Any loop reaches it through `logbook.api.Run.changes`; the bundled trainer's
callback (trainer/live_control.py) is one such loop.

`logbook set RUN key=value --reason ...` leaves a request file in the run's
control folder (see `logbook/launch/change_requests.py`, which also holds the allow-list).
`ControlChannel.poll(step)` runs at the start of every step:

1. Rank 0 lists `pending/` in name order and decodes each file; a half-written
   or garbage file (after a short grace period for slow writers) is rejected.
2. The decoded requests are broadcast to every rank (`broadcast_object_list`
   when a process group is initialised), and every rank validates them
   against its config and applies them, all of a request or none of it.
3. Rank 0 writes `hparam_change` per key (old, new, who, why, a unified diff
   of the resolved config) or `hparam_change_rejected`, and answers the
   request: processed/<name> with the reply, written before pending/<name>
   is removed.

Exactly once. The ids of applied requests are part of the control state saved
in every checkpoint. A request whose id is already applied is answered without
being applied again (a kill between applying and answering). A request that
was answered `applied` but whose id is not in the restored state was applied
in a stretch of training that a restart threw away: it is applied again at the
first step boundary of the resumed run, with `reapplied: true` in its event.
So an accepted change stays in force for the rest of the run, across restarts.
A guard rollback restores the model but not the deciders (the loop leaves
callback state alone), so changes also stay in force across rollbacks.

Which wins on resume, the config file or the checkpoint:

- A live change applied during the run wins over the config file: it is
  re-applied over the config on resume. If the file's value for that key
  changed since the last launch, that is recorded as `hparam_change_rejected`
  (source `config`) naming both values, so the ignored edit is not silent.
- A key the run never changed live takes the config file's value. If it
  differs from the value at the previous launch, that is recorded as
  `hparam_change` with source `config` (a deviation unless a rule covers it).
- A change scheduled in the config (`apply_scheduled`, `note_scheduled`) is
  recorded with source `schedule`; a later scheduled change of a key takes the
  key back from an earlier live change (the newest decision wins).
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from logbook.core.errors import UsageError
from logbook.core.fsutil import atomic_write_json
from logbook.core.project import Project
from logbook.core.typedconfig import get_path, has_path, set_path, to_plain
from logbook.eventlog.plan import judge_against_plan
from logbook.launch.change_requests import (REPLY_KEY, PendingWatch, decode_request, finish_request, is_stop,
                                            iter_answers, processed_dir)
from logbook.launch.live_settings import SETTINGS, validate_changes
from logbook.launch.live_settings import config_path

STATE_VERSION = 1
MAX_RAW_KEPT = 4096
Emit = Callable[..., Any]
Broadcast = Callable[[list[dict[str, Any]] | None, int], list[dict[str, Any]]]
"""Rank 0's decoded requests to every rank (the loop's collective): (rank 0's items or None, world size) -> items."""


class LiveTarget(Protocol):
    """Where the live learning-rate multiplier lives: the trainer, in the loop."""

    lr_scale: float

    def set_lr_scale(self, new: float, kind: str, payload: dict[str, Any], *, drill: bool = False,
                     step: int | None = None, tokens: int | None = None) -> None:
        """Set the multiplier and write the event `kind` with `payload` (the trainer's one path for it)."""


class ControlChannel:
    """The trainer's end of `logbook set`: one per run and process."""

    def __init__(self, project: Project | Path, run_id: str, config: Any, *, emit: Emit | None = None,
                 rules: Iterable[Any] | None = None, rank: int = 0, world_size: int = 1,
                 live: LiveTarget | None = None,
                 data_weights_hook: Callable[[dict[str, float]], None] | None = None,
                 grace_s: float = 1.0, attempt: int | None = None, broadcast: Broadcast | None = None) -> None:
        self.control_dir = project.control_dir(run_id) if isinstance(project, Project) else Path(project)
        self.run_id = run_id
        self.config = config
        self.emit = emit or (lambda kind, **kw: None)
        self.rules = None if rules is None else list(rules)
        self.rank, self.world_size = rank, world_size
        self.live: LiveTarget = live if live is not None else _LiveValues(self.emit if rank == 0 else None)
        """Holds `lr_scale` and changes it (the trainer itself, in the loop)."""
        self.data_weights_hook = data_weights_hook
        self.grace_s = grace_s
        self.attempt = attempt
        self.broadcast: Broadcast = broadcast or _one_process
        """Hands rank 0's requests to every rank: the loop's `broadcast_object_list`; one process needs none."""
        self.applied: list[str] = []
        self.applied_at: dict[str, int] = {}
        self.overrides: dict[str, Any] = {}
        """Config path -> value set by a live change and still in force."""
        self.data_weights: dict[str, float] = {}
        self.launch = self._snapshot()
        """Allow-listed config values as this launch's config file gave them."""
        self._loaded = False
        self._resync = True
        self._queued: list[tuple[str, dict[str, Any]]] = []
        self._watch = PendingWatch(self.control_dir)
        self.stop_request: tuple[str, dict[str, Any]] | None = None
        """(file name, request) of a clean stop asked for (`logbook stop`); `ControlCallback` carries it out."""

    # --- the step boundary ---------------------------------------------------------

    def poll(self, step: int, tokens: int | None = None) -> list[dict[str, Any]]:
        """Apply what is waiting; returns the applied changes [{key, path, old, new, request_id}]."""
        for kind, data in self._queued:
            self.emit(kind, step=step, tokens=tokens, **data)
        self._queued.clear()
        items = self._gather() if self.rank == 0 else None
        items = self.broadcast(items, self.world_size)
        changes: list[dict[str, Any]] = []
        for item in items:
            changes += self._handle(item, step, tokens)
        return changes

    def _gather(self) -> list[dict[str, Any]]:
        items = []
        if self._resync:
            self._resync = False
            for name, doc in iter_answers(self.control_dir):
                rid = doc.get("request_id")
                if doc[REPLY_KEY].get("status") == "applied" and rid not in self.applied:
                    items.append({"mode": "reapply", "name": name, "request": _without_reply(doc)})
        for path in self._watch.pending():
            item = self._read(path)
            if item is not None:
                items.append(item)
        return items

    def _read(self, path: Path) -> dict[str, Any] | None:
        name = path.name
        if (processed_dir(self.control_dir) / name).exists():
            return {"mode": "leftover", "name": name}  # answered; a kill came before the pending copy went
        try:
            raw = path.read_bytes()
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return None
        try:
            req = decode_request(raw, self.run_id)
        except UsageError as e:
            if age < self.grace_s:
                return None  # perhaps still being written by hand: look again at the next step
            return {"mode": "garbage", "name": name, "error": e.message, "raw": raw[:MAX_RAW_KEPT].decode("utf-8", "replace"),
                    "request": _peek(raw)}
        mode = "duplicate" if req["request_id"] in self.applied else "new"
        return {"mode": mode, "name": name, "request": req}

    def _handle(self, item: dict[str, Any], step: int, tokens: int | None) -> list[dict[str, Any]]:
        mode, name = item["mode"], item["name"]
        if mode == "leftover":
            if self.rank == 0:
                (self.control_dir / "pending" / name).unlink(missing_ok=True)
            return []
        if mode == "garbage":
            self._reject(name, {**item["request"], "raw": item["raw"]}, item["request"], item["error"], step, tokens)
            return []
        req = item["request"]
        if is_stop(req):  # every rank sees it at the same step (broadcast), so all stop together
            self.stop_request = (name, req)
            return []
        if mode == "duplicate":
            at = self.applied_at.get(req["request_id"])
            self._answer(name, req, {"status": "applied", "step": at, "applied": [],
                                     "note": "applied earlier; the answer could not be written then"})
            return []
        try:
            changes = self._check_against_config(req["changes"])
        except UsageError as e:
            if mode == "reapply":
                self._record_rejection(req, f"could not be applied again after a restart: {e.message}", step, tokens)
            else:
                self._reject(name, req, req, e.message, step, tokens)
            return []
        applied = self._apply(changes, step, tokens, req, source="live", reapplied=mode == "reapply")
        self.applied.append(req["request_id"])
        self.applied_at[req["request_id"]] = step
        if self.rank == 0:
            reply = {"status": "applied", "step": step, "attempt": self.attempt,
                       "applied": [{k: c[k] for k in ("key", "old", "new")} for c in applied]}
            if mode == "reapply":
                self._note_reapplied(name, step)
            else:
                self._answer(name, req, reply)
        return applied

    # --- applying --------------------------------------------------------------------

    def _check_against_config(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        checked = validate_changes(changes)
        for key in checked:
            path = config_path(key)
            if path.startswith("live.data.weights."):
                sources = _source_names(self.config)
                source = path.rsplit(".", 1)[1]
                if source not in sources:
                    close = difflib.get_close_matches(source, sources, n=1)
                    raise UsageError(f"`{key}`: this run has no data source {source!r}"
                                     + (f"; did you mean `data.weights.{close[0]}`?" if close else f" (sources: {', '.join(sources)})"))
                if self.data_weights_hook is None:
                    raise UsageError(f"`{key}`: this trainer cannot change mixture weights while running")
            elif not path.startswith("live.") and not has_path(self.config, path):
                raise UsageError(f"`{key}`: this run's config has no `{path}`")
        return checked

    def _apply(self, changes: Mapping[str, Any], step: int, tokens: int | None, req: Mapping[str, Any],
               *, source: str, reapplied: bool = False) -> list[dict[str, Any]]:
        out = []
        for key, new in changes.items():
            path = config_path(key)
            before = self._resolved_text()
            old = self._get(path)
            lr_scale = path == "live.lr_scale"
            if not lr_scale:
                self._set(path, new)
            if source == "live" and not path.startswith("live."):
                self.overrides[path] = new
            elif source == "schedule":
                self.overrides.pop(path, None)
            change = {"key": key, "path": path, "old": old, "new": new, "request_id": req.get("request_id")}
            out.append(change)
            plan = judge_against_plan({"kind": "hparam_change", "source": source, "key": key, "old": old, "new": new}, self.rules)
            after = self._resolved_text(float(new) if lr_scale else None)
            data = {"key": key, "old": old, "new": new, "reason": req.get("reason"), "who": req.get("who"),
                    "source": source, "request_id": req.get("request_id"),
                    "config_diff": _diff(before, after, step), "plan": plan}
            if reapplied:
                data["reapplied"] = True
            if lr_scale:
                # Every rank sets it; the trainer's one path for learning-rate changes also writes the event.
                self.live.set_lr_scale(float(new), "hparam_change", data, step=step, tokens=tokens)
            elif self.rank == 0:
                self.emit("hparam_change", step=step, tokens=tokens, **data)
        if any(p.startswith("live.data.weights.") for p in (config_path(k) for k in changes)):
            self.data_weights_hook(dict(self.data_weights))  # type: ignore[misc]
        return out

    def _get(self, path: str) -> Any:
        if path == "live.lr_scale":
            return float(getattr(self.live, "lr_scale", 1.0))
        if path.startswith("live.data.weights."):
            return self.data_weights.get(path.rsplit(".", 1)[1])
        return get_path(self.config, path)

    def _set(self, path: str, value: Any) -> None:
        if path.startswith("live.data.weights."):
            self.data_weights[path.rsplit(".", 1)[1]] = float(value)
        else:
            set_path(self.config, path, value)

    # --- answers and rejections --------------------------------------------------------

    def _reject(self, name: str, body: Mapping[str, Any], req: Mapping[str, Any] | None, why: str,
                step: int, tokens: int | None) -> None:
        self._record_rejection(req or {}, why, step, tokens, file=name)
        self._answer(name, body, {"status": "rejected", "reason": why, "step": step, "attempt": self.attempt})

    def _answer(self, name: str, body: Mapping[str, Any], reply: dict[str, Any]) -> None:
        """Rank 0 writes the answer. A failed write (a full disk) leaves the request pending: its id
        is already in the applied list, so the next poll answers it without applying it again."""
        if self.rank != 0:
            return
        try:
            finish_request(self.control_dir, name, body, reply)
        except OSError:
            pass

    def answer_stop(self, saved_step: int, step: int) -> None:
        """Answer the stop request once the checkpoint is saved and `run_stopped` written."""
        name, req = self.stop_request or ("", {})
        self._answer(name, req, {"status": "stopped", "step": step, "saved_step": saved_step, "attempt": self.attempt})

    def _record_rejection(self, req: Mapping[str, Any], why: str, step: int, tokens: int | None, **extra: Any) -> None:
        if self.rank == 0:
            # A malformed file is recorded as far as it can be read: a field of the wrong type is left out.
            self.emit("hparam_change_rejected", step=step, tokens=tokens, request_id=_str_or_none(req.get("request_id")),
                      who=_str_or_none(req.get("who")), reason=why,
                      changes=req.get("changes") if isinstance(req.get("changes"), dict) else None,
                      source=_str_or_none(req.get("source")) or "live", **extra)

    def _note_reapplied(self, name: str, step: int) -> None:
        path = processed_dir(self.control_dir) / name
        try:
            doc = json.loads(path.read_text("utf-8"))
            doc[REPLY_KEY].setdefault("reapplied", []).append({"step": step, "attempt": self.attempt})
            atomic_write_json(path, doc)
        except (OSError, ValueError):
            pass  # the answer already says "applied"; this note is a courtesy

    # --- changes from the config itself ---------------------------------------------------

    def apply_scheduled(self, step: int, changes: Mapping[str, Any], reason: str, tokens: int | None = None,
                        *, source: str = "schedule") -> list[dict[str, Any]]:
        """Apply a change the config schedules (a phase), or the trainer's own (source `advice`)."""
        checked = self._check_against_config(changes)
        return self._apply(checked, step, tokens, {"reason": reason, "who": source}, source=source)

    def note_scheduled(self, step: int, key: str, old: Any, new: Any, reason: str, tokens: int | None = None) -> None:
        """Record a change the trainer made itself on schedule (a mixture stage); nothing is applied."""
        if self.rank == 0:
            self.emit("hparam_change", step=step, tokens=tokens, key=key, old=old, new=new, reason=reason,
                      who="schedule", source="schedule", request_id=None, config_diff=None,
                      plan=judge_against_plan({"kind": "hparam_change", "source": "schedule", "key": key}, self.rules))

    # --- state ----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "applied": list(self.applied), "applied_at": dict(self.applied_at),
                "overrides": dict(self.overrides), "data_weights": dict(self.data_weights), "launch": dict(self.launch)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore; re-apply live changes over the config; note config edits made between launches."""
        first = not self._loaded
        self._loaded, self._resync = True, True
        self.applied = [str(x) for x in state.get("applied", [])]
        self.applied_at = {str(k): int(v) for k, v in state.get("applied_at", {}).items()}
        self.overrides = dict(state.get("overrides", {}))
        self.data_weights = {str(k): float(v) for k, v in state.get("data_weights", {}).items()}
        before = dict(state.get("launch", {}))
        for path, value in self.overrides.items():
            if not has_path(self.config, path):
                continue
            if first and path in before and self.launch.get(path) != before[path]:
                self._queued.append(("hparam_change_rejected", {
                    "request_id": None, "who": "config file", "source": "config", "changes": {path: self.launch.get(path)},
                    "reason": (f"the config file now sets {path}={self.launch.get(path)!r} (was {before[path]!r} at the "
                               f"previous launch), but a live change set {value!r} during the run: the live change wins")}))
            set_path(self.config, path, value)
        if first:
            for path, now in self.launch.items():
                if path not in self.overrides and path in before and before[path] != now:
                    self._queued.append(("hparam_change", {
                        "key": _key_of(path), "old": before[path], "new": now, "source": "config", "who": "config file",
                        "reason": "changed in the config file between launches", "request_id": None, "config_diff": None,
                        "plan": judge_against_plan({"kind": "hparam_change", "source": "config", "key": _key_of(path),
                                                    "old": before[path], "new": now}, self.rules)}))
        if self.data_weights and self.data_weights_hook is not None:
            self.data_weights_hook(dict(self.data_weights))

    def _snapshot(self) -> dict[str, Any]:
        paths = {s.path for s in SETTINGS.values() if not s.path.startswith("live.")}
        return {p: get_path(self.config, p) for p in sorted(paths) if has_path(self.config, p)}

    def _resolved_text(self, lr_scale: float | None = None) -> str:
        """The resolved config as text, with `lr_scale` in place of the live one if given (a change about to apply)."""
        lr = self._get("live.lr_scale") if lr_scale is None else lr_scale
        view = {"config": to_plain(self.config), "live": {"lr_scale": lr}}
        if self.data_weights:
            view["live"]["data_weights"] = dict(self.data_weights)
        return json.dumps(view, indent=2, sort_keys=True, default=str)


class _LiveValues:
    """Where live multipliers live when no trainer is attached (tests, tools)."""

    def __init__(self, emit: Emit | None) -> None:
        self.lr_scale = 1.0
        self._emit = emit

    def set_lr_scale(self, new: float, kind: str, payload: dict[str, Any], *, drill: bool = False,
                     step: int | None = None, tokens: int | None = None) -> None:
        self.lr_scale = float(new)
        if self._emit is not None:
            self._emit(kind, step=step, tokens=tokens, drill=drill, **payload)


# --- helpers ----------------------------------------------------------------------------


def _one_process(items: list[dict[str, Any]] | None, world_size: int) -> list[dict[str, Any]]:
    if world_size > 1:
        raise UsageError(f"a live-change channel of {world_size} ranks needs the loop's broadcast",
                         hint="pass broadcast= (rank 0's requests to every rank) to Run.changes")
    return items or []


def _peek(raw: bytes) -> dict[str, Any]:
    """Whatever identifies a request that failed its checks (id, who, changes), for the rejection."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {k: doc[k] for k in ("request_id", "who", "changes") if isinstance(doc.get(k), (str, dict))}


def _without_reply(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != REPLY_KEY}


def _key_of(path: str) -> str:
    return next((s.key for s in SETTINGS.values() if s.path == path), path)


def _source_names(config: Any) -> list[str]:
    try:
        return [s.name for s in config.data.sources]
    except AttributeError:
        return []


def _diff(before: str, after: str, step: int) -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"config before step {step}", tofile=f"config from step {step}", n=1)
    return "".join(lines)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
