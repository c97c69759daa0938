"""Atomic, verified, optionally background checkpoints.

A checkpoint is a folder `step_000123/` holding one `torch.save` file per part
(model, optim, state), a `manifest.json` with the sha256 and size of each, and
a `COMPLETE` marker written last. It is built in a hidden temp folder, every
file fsync'd, then renamed into place; a kill at any moment leaves either no
`step_...` folder, one without `COMPLETE` (ignored and cleaned), or a complete
one. Loading verifies the manifest and uses `torch.load(weights_only=True)`:
nothing is ever unpickled beyond tensors and plain containers.

In the background mode training blocks only while the state is copied into
CPU memory; a thread serializes and writes it. At most one save is in flight:
a new save first waits for the previous one (that wait counts as blocking).
A failed write (a full disk) cleans its temp folder, is reported, and leaves
the previous good checkpoint as the one to resume from.

That is the `torch` format, the one-process default. Runs of more than one
rank save in the `dcp` format (trainer/checkpoints/checkpoint_dcp.py: every rank writes
its shards with torch.distributed.checkpoint) behind this same `Checkpointer`,
in the same folder layout, sealed by the same manifest and COMPLETE marker.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from logbook.api import RefusedError

from ..job.fsio import fsync_dir

from . import checkpoint_dcp

PARTS = ("model", "optim", "state")
MANIFEST = "manifest.json"
COMPLETE = "COMPLETE"
KEEP = "KEEP"
DCP_FILES = ["state.pt", ".metadata"]
"""What a DCP checkpoint's manifest must list beyond the ranks' shard files (`__<rank>_0.distcp`)."""
_NAME = re.compile(r"^step_(\d+)$")
_UNFINISHED = re.compile(r"^(?:\.tmp-)?step_(\d+)(?:-|$)")
"""A save still being written: its temp folder, or its folder before COMPLETE (not a retired `.trash-` one)."""

Emit = Callable[..., Any]


@dataclass
class SaveResult:
    """The outcome of one save, handed to `post_checkpoint` hooks."""

    step: int
    path: Path | None
    ok: bool
    blocking_s: float
    total_s: float
    bytes: int = 0
    reason: str = ""


class CorruptCheckpoint(Exception):
    """A checkpoint folder that fails its manifest check or cannot be read."""


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


# --- copying state off the training device -------------------------------------


def to_cpu_copy(obj: Any, pool: dict[str, torch.Tensor] | None = None) -> Any:
    """A deep copy with every tensor copied into CPU memory (the blocking part of a save).

    With a `pool` (kept from one save to the next) tensors are copied into the
    buffers of the previous save: memory that is already mapped takes a copy
    several times faster than fresh memory, which must first be faulted in and
    zeroed. A tensor reachable twice (tied embeddings) is copied once, so the
    file stores it once and the sharing survives the round trip.
    """
    memo: dict[tuple, torch.Tensor] = {}
    out = _copy(obj, "", pool if pool is not None else {}, memo)
    if any(k[0].type == "cuda" for k in memo):
        torch.cuda.synchronize()  # the device-to-host copies were issued non-blocking
    return out


def _copy(obj: Any, path: str, pool: dict[str, torch.Tensor], memo: dict[tuple, torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        if key not in memo:
            buf = pool.get(path)
            if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
                buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.device.type == "cuda")
                pool[path] = buf
            buf.copy_(t, non_blocking=t.device.type == "cuda")
            memo[key] = buf
        return memo[key]
    if isinstance(obj, dict):
        return {k: _copy(v, f"{path}/{k}", pool, memo) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copy(v, f"{path}/{i}", pool, memo) for i, v in enumerate(obj))
    return obj


# --- writing -------------------------------------------------------------------


class _WriteRecorder:
    """The file `torch.save` writes into, remembering the OSError of a failed write.

    torch's zip writer reports a failed write (a full disk) as a RuntimeError
    about stream positions; the OSError underneath is what happened.
    """

    def __init__(self, f) -> None:
        self.f = f
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def _write_part(path: Path, obj: Any) -> None:
    """Serialize one part and fsync it; a full disk raises OSError (tests replace this to simulate one)."""
    with open(path, "wb") as f:
        out = _WriteRecorder(f)
        try:
            torch.save(obj, out)
        except RuntimeError:
            if out.error is not None:
                raise out.error from None
            raise
        f.flush()
        os.fsync(f.fileno())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def write_checkpoint(directory: Path, step: int, snapshot: dict[str, Any],
                     progress: Callable[[str, int], None] | None = None) -> tuple[Path, int]:
    """Write `snapshot` (part -> CPU state) atomically as `step_NNNNNN`; returns (path, bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".tmp-{checkpoint_name(step)}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        files = {}
        for part, obj in snapshot.items():
            path = tmp / f"{part}.pt"
            _write_part(path, obj)
            files[path.name] = file_entry(path)
            if progress:
                progress("part_written", step)
        final = publish(directory, tmp, step, files)
        return final, sum(v["bytes"] for v in files.values())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish(directory: Path, tmp: Path, step: int, files: dict[str, dict], fmt: str = "torch") -> Path:
    """Seal a fully written temp folder: manifest, fsync, rename to `step_NNNNNN`, then COMPLETE; the final path.

    `files` maps each file's name to its sha256 and size. Shared by both
    formats, so a DCP checkpoint is complete on the same terms as a torch one.
    """
    manifest = {"format": 1, "checkpoint_format": fmt, "step": step, "files": files}
    with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(tmp)
    final = directory / checkpoint_name(step)
    if final.exists():  # an earlier attempt's (or a rolled-back branch's) save of this step
        aside = directory / f".trash-{final.name}-{uuid.uuid4().hex[:8]}"
        os.rename(final, aside)
        shutil.rmtree(aside, ignore_errors=True)
    os.rename(tmp, final)
    fsync_dir(directory)
    with open(final / COMPLETE, "w") as f:
        f.write(f"{step}\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(final)
    fsync_dir(directory)
    return final


def file_entry(path: Path) -> dict[str, Any]:
    """A file's manifest entry: its sha256 and size."""
    return {"sha256": _sha256(path), "bytes": path.stat().st_size}


def seal_dcp(directory: Path, tmp: Path, step: int, small: dict[str, Any]) -> tuple[Path, int]:
    """Rank 0, once every rank's shards are durable: add `state.pt`, the manifest and COMPLETE; (path, bytes)."""
    checkpoint_dcp.check_shards(tmp)
    _write_part(tmp / "state.pt", small)
    files = {p.name: file_entry(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    final = publish(directory, tmp, step, files, fmt="dcp")
    return final, sum(v["bytes"] for v in files.values())


# --- reading -------------------------------------------------------------------


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints (with their COMPLETE marker), oldest first."""
    out = []
    if not directory.is_dir():
        return out
    for p in directory.iterdir():
        m = _NAME.match(p.name)
        if m and p.is_dir() and (p / COMPLETE).exists():
            out.append((int(m.group(1)), p))
    return sorted(out)


def verify_checkpoint(path: Path) -> dict[str, Any]:
    """The manifest, if every file it lists is there with its size and sha256."""
    try:
        manifest = json.loads((path / MANIFEST).read_text("utf-8"))
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpoint(f"manifest unreadable: {e}") from None
    for name, meta in files.items():
        f = path / name
        if not f.is_file():
            raise CorruptCheckpoint(f"{name} is missing")
        size = f.stat().st_size
        if size != meta["bytes"]:
            raise CorruptCheckpoint(f"{name} has {size} bytes, the manifest says {meta['bytes']} (truncated?)")
        if _sha256(f) != meta["sha256"]:
            raise CorruptCheckpoint(f"{name} does not match its sha256 in the manifest (corrupted)")
    needed = DCP_FILES if manifest.get("checkpoint_format") == "dcp" else [f"{p}.pt" for p in PARTS]
    missing = [p for p in needed if p not in files]
    if missing:
        raise CorruptCheckpoint(f"manifest lacks {', '.join(missing)}")
    return manifest


def read_checkpoint(path: Path) -> dict[str, Any]:
    """Verify, then load every part with weights_only=True onto the CPU.

    A DCP checkpoint's model and optimizer are not read here: they load into
    the run's own (maybe sharded) tensors (`checkpoint_dcp.load_into`), so the
    parts hold `state` and `dcp`, the folder to load them from.
    """
    manifest = verify_checkpoint(path)
    parts: dict[str, Any] = {}
    dcp = manifest.get("checkpoint_format") == "dcp"
    if dcp:
        parts["dcp"] = path
    for part in ("state",) if dcp else PARTS:
        try:
            parts[part] = torch.load(path / f"{part}.pt", map_location="cpu", weights_only=True)
        except Exception as e:  # verified bytes that still do not load: treat as corrupt
            raise CorruptCheckpoint(f"{part}.pt does not load: {type(e).__name__}: {e}") from None
    return parts


def mark_keep(path: Path, reason: str) -> None:
    """Protect a checkpoint from retention (e.g. the ones around a loss spike)."""
    (Path(path) / KEEP).write_text(reason + "\n", encoding="utf-8")


def check_model_compatible(saved: dict[str, torch.Tensor], model: torch.nn.Module) -> None:
    """Refuse a checkpoint of another model shape, naming the first parameter that differs."""
    mine = model.state_dict()
    for name, t in mine.items():
        if name not in saved:
            raise RefusedError(f"the checkpoint has no parameter `{name}`: it is from a different model",
                               hint="resume with the model config it was trained with, or start a new run")
        if tuple(saved[name].shape) != tuple(t.shape):
            raise RefusedError(
                f"parameter `{name}` has shape {tuple(saved[name].shape)} in the checkpoint but {tuple(t.shape)} in this model",
                hint="the model config changed since the checkpoint: restore it, or start a new run")
    extra = sorted(set(saved) - set(mine))
    if extra:
        raise RefusedError(f"the checkpoint has parameter `{extra[0]}` that this model lacks: it is from a different model",
                           hint="resume with the model config it was trained with, or start a new run")


# --- the checkpointer ---------------------------------------------------------


class Checkpointer:
    """Saves (in the background or not), keeps the newest K, loads the newest good one.

    `format` "torch" (one process, or rank 0 alone with whole tensors gathered)
    or "dcp" (every rank calls `save` and writes its shards: trainer/checkpoints/checkpoint_dcp.py).
    Loading follows each checkpoint's own format, whatever the run saves in.
    """

    def __init__(self, directory: Path, *, keep: int = 3, background: bool = True, emit: Emit | None = None,
                 writer: bool = True, format: str = "torch", group: Any = None) -> None:
        self.directory = Path(directory)
        self.writer = writer  # only one process (rank 0) renames or deletes anything
        self.format = format
        self.group = group  # DCP's own process group (checkpoint_dcp.save_group), None alone
        self.keep = keep
        self.background = background
        self.emit = emit or (lambda kind, **kw: None)
        self._progress: Callable[[str, int], None] | None = None
        self._thread: threading.Thread | None = None
        self._done: list[SaveResult] = []
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._buffers: dict[str, torch.Tensor] = {}
        self.blocking_s_total = 0.0
        self.saves = 0

    def clean_stale(self) -> list[int]:
        """Remove temp folders and incomplete checkpoints left by a killed save; the steps of those unfinished.

        A save's temp folder (`.tmp-step_000005-...`) or a `step_` folder without
        COMPLETE is the trace of a save that was still being written when its
        process died: the restart names it, since it explains why the run
        resumed from an older checkpoint than its cadence suggests.
        """
        if not self.directory.is_dir():
            return []
        unfinished = set()
        for p in self.directory.iterdir():
            incomplete = _NAME.match(p.name) and not (p / COMPLETE).exists()
            if p.is_dir() and (p.name.startswith((".tmp-", ".trash-")) or incomplete):
                m = _UNFINISHED.match(p.name)
                if m:
                    unfinished.add(int(m.group(1)))
                shutil.rmtree(p, ignore_errors=True)
        return sorted(unfinished)

    def save(self, step: int, state: dict[str, Any], *, tokens: int | None = None, sync: bool = False) -> float:
        """Snapshot `state` (part -> state dict) and write it; returns the seconds training was blocked."""
        t0 = time.perf_counter()
        self.wait()  # also frees the buffers the previous save was writing from
        if self.format == "dcp":
            return self._count(self._save_dcp(step, state, tokens, sync, t0))
        snapshot = to_cpu_copy(state, self._buffers)
        if self.background and not sync:
            blocking = time.perf_counter() - t0
            self._thread = threading.Thread(target=self._write, args=(step, snapshot, tokens, t0, blocking),
                                            name=f"checkpoint-{step}", daemon=True)
            self._thread.start()
        else:
            result = self._write(step, snapshot, tokens, t0, None)
            blocking = result.blocking_s if result else time.perf_counter() - t0
        return self._count(blocking)

    def _count(self, blocking: float) -> float:
        self.blocking_s_total += blocking
        self.saves += 1
        return blocking

    def _save_dcp(self, step: int, state: dict[str, Any], tokens: int | None, sync: bool, t0: float) -> float:
        """Every rank: start writing its shards; rank 0 seals the checkpoint once all are durable."""
        tmp = self.directory / f".tmp-{checkpoint_name(step)}-dcp"  # every rank derives it: no broadcast
        small = to_cpu_copy(state["state"])  # rank 0 writes it with the seal, after training moved on
        shards = {"model": state["model"], "optim": state["optim"]}
        background = self.background and not sync
        try:
            future = checkpoint_dcp.start_save(shards, tmp, self.group, background)
        except Exception as e:  # a synchronous write that failed on some rank (DCP gathers the errors)
            return self._dcp_failed(step, tokens, e, t0, None)
        if not background:
            result = self._write_dcp(step, None, small, tmp, tokens, t0, None)
            return result.blocking_s if result else time.perf_counter() - t0
        blocking = time.perf_counter() - t0
        self._thread = threading.Thread(target=self._write_dcp, args=(step, future, small, tmp, tokens, t0, blocking),
                                        name=f"checkpoint-{step}", daemon=True)
        self._thread.start()
        return blocking

    def _write_dcp(self, step: int, future: Any, small: dict[str, Any], tmp: Path, tokens: int | None, t0: float,
                   blocking: float | None) -> SaveResult | None:
        """Wait for the shards (if in the background), then seal and report on rank 0."""
        try:
            if future is not None:
                checkpoint_dcp.wait_shards(future)
        except Exception as e:
            self._dcp_failed(step, tokens, e, t0, blocking)
            return None
        if not self.writer:
            return None
        if self._progress:
            self._progress("part_written", step)  # every shard is written, COMPLETE is not: a drill kills here
        return self._write(step, small, tokens, t0, blocking, lambda: seal_dcp(self.directory, tmp, step, small))

    def _dcp_failed(self, step: int, tokens: int | None, e: Exception, t0: float, blocking: float | None) -> float:
        """A shard write failed on some rank: reported like a full disk; the temp folder is left to clean_stale."""
        reason = f"{type(e).__name__} while writing checkpoint of step {step}: {e}"[:500]
        total = time.perf_counter() - t0
        if self.writer:
            self.emit("checkpoint_failed", step=step, tokens=tokens, reason=reason, errno=None)
            self._finish(SaveResult(step, None, False, total if blocking is None else blocking, total, reason=reason))
        return total if blocking is None else blocking

    def _write(self, step: int, snapshot: dict[str, Any], tokens: int | None, t0: float,
               blocking: float | None, writer: Callable[[], tuple[Path, int]] | None = None) -> SaveResult | None:
        """Write (with `writer`, or the torch format) and report; `blocking` None means a synchronous save."""
        try:
            if writer is not None:
                path, nbytes = writer()
            else:
                path, nbytes = write_checkpoint(self.directory, step, snapshot, self._progress)
        except OSError as e:
            reason = f"{e.strerror or type(e).__name__} while writing checkpoint of step {step}"
            total = time.perf_counter() - t0
            self.emit("checkpoint_failed", step=step, tokens=tokens, reason=reason, errno=e.errno)
            return self._finish(SaveResult(step, None, False, total if blocking is None else blocking, total, reason=reason))
        except BaseException as e:  # a bug: surface it in the training thread
            with self._lock:
                self._error = e
            traceback.print_exc()
            return None
        total = time.perf_counter() - t0
        blocking = total if blocking is None else blocking
        self.emit("checkpoint_saved", step=step, tokens=tokens, path=str(path), blocking_s=round(blocking, 6),
                  total_s=round(total, 6), bytes=nbytes)
        self._retain()
        return self._finish(SaveResult(step, path, True, blocking, total, nbytes))

    def _finish(self, result: SaveResult) -> SaveResult:
        with self._lock:
            self._done.append(result)
        return result

    def _retain(self) -> None:
        ckpts = [(s, p) for s, p in list_checkpoints(self.directory) if not (p / KEEP).exists()]
        for _, p in ckpts[: max(0, len(ckpts) - self.keep)]:
            aside = p.with_name(f".trash-{p.name}-{uuid.uuid4().hex[:8]}")
            os.rename(p, aside)  # drop COMPLETE's folder from view first, then delete
            shutil.rmtree(aside, ignore_errors=True)

    def wait(self) -> None:
        """Block until the save in flight (if any) has finished."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._raise_error()

    def watch_progress(self, hook: Callable[[str, int], None]) -> None:
        """Call `hook(stage, step)` as each save goes along (a drill kills the process mid-save from it)."""
        self._progress = hook

    def poll(self) -> list[SaveResult]:
        """Saves that finished since the last poll (successful or failed)."""
        self._raise_error()
        with self._lock:
            done, self._done = self._done, []
        return done

    def _raise_error(self) -> None:
        with self._lock:
            err, self._error = self._error, None
        if err is not None:
            raise err

    def retire_after(self, step: int, label: str) -> list[Path]:
        """Move every complete checkpoint newer than `step` into `abandoned/` (a rollback's lost branch).

        Left in place they would stay resume candidates: a crash after the
        rollback would resume the branch the rollback abandoned. Under
        `abandoned/<name>-<label>` nothing resumes from them or retains them
        away, and a save of the same step on the new branch cannot clash.
        Only the writer moves anything; every rank gets the same list back.
        """
        out = []
        for s, path in list_checkpoints(self.directory):
            if s <= step:
                continue
            dest = self.directory / "abandoned" / f"{path.name}-{label}"
            if self.writer:
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.exists():
                    shutil.rmtree(dest, ignore_errors=True)
                os.rename(path, dest)
            out.append(dest)
        if out and self.writer:
            fsync_dir(self.directory)
        return out

    def load_latest(self, max_step: int | None = None) -> tuple[int, Path, dict[str, Any]] | None:
        """The newest checkpoint (at or before max_step) that verifies; rejected ones are set aside."""
        for step, path in reversed(list_checkpoints(self.directory)):
            if max_step is not None and step > max_step:
                continue
            try:
                return step, path, read_checkpoint(path)
            except CorruptCheckpoint as e:
                self.emit("checkpoint_rejected", step=step, path=str(path), ckpt_step=step, reason=str(e))
                if self.writer:  # set aside: neither retried on every restart nor counted by retention
                    os.rename(path, path.with_name(f"rejected-{path.name}-{uuid.uuid4().hex[:6]}"))
        return None
