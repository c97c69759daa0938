"""Training data: corpora, the staged mixture, and a resumable batch stream.

The default corpus is this Python's standard library source, as bytes
(vocabulary 256): every `*.py` under `sysconfig.get_paths()['stdlib']` outside
site-packages, sorted by relative path, capped in size, split into train and
validation by a hash of the relative path. Its content differs between Python
versions, so every corpus carries a sha256 fingerprint that is saved with the
data state; resuming on a different corpus is refused.

Batches are addressed by a global batch id (the step that consumes it, when
nothing is skipped): the sequences of batch `b` on rank `r`, micro-batch `m`
are a pure function of (seed, b, r, m). The stream's state is therefore just
the next batch id and the skip list, and "skip batches 120-140" means the same
thing on every attempt.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from logbook.api import RefusedError, UsageError

from ..config import DataConfig, SourceConfig

_BIN_SAMPLE = 1 << 20  # bytes hashed at each end of a .bin file for its fingerprint


@dataclass
class Corpus:
    """One source's tokens, split."""

    name: str
    train: np.ndarray
    val: np.ndarray
    fingerprint: str
    """sha256 identifying the content (for .bin files: size plus both ends)."""


# --- reading sources --------------------------------------------------------


def stdlib_files() -> tuple[Path, list[str]]:
    """The standard library folder and its `*.py` files (relative, sorted), site-packages excluded."""
    base = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for d, dirs, names in os.walk(base):
        # Pruned, not filtered: site-packages holds far more files than the stdlib.
        dirs[:] = [x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__")]
        rel = Path(d).relative_to(base)
        files += [(rel / n).as_posix() for n in names if n.endswith(".py")]
    return base, sorted(files)


def _is_val(rel: str, val_fraction: float) -> bool:
    h = int(hashlib.sha256(rel.encode("utf-8")).hexdigest()[:8], 16)
    return h / 0x100000000 < val_fraction


def _cache_root(cache_dir: str | None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "logbook-trainer"


def files_corpus(name: str, base: Path, files: list[str], max_bytes: int, val_fraction: float, cache_dir: str | None) -> Corpus:
    """Concatenate files (in the given order, up to `max_bytes`) into a byte corpus; cached."""
    listing = [(rel, st.st_size, st.st_mtime_ns) for rel in files for st in [(base / rel).stat()]]
    key_src = json.dumps({"base": str(base), "files": listing, "max": max_bytes, "val": val_fraction})
    key = hashlib.sha256(key_src.encode("utf-8")).hexdigest()[:20]
    cache = _cache_root(cache_dir) / f"corpus-{key}"
    meta_path = cache / "meta.json"
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text("utf-8"))
            return Corpus(name, _read_u8(cache / "train.bin"), _read_u8(cache / "val.bin"), meta["fingerprint"])
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache is rebuilt below
    train, val = _concat(base, files, max_bytes, val_fraction)
    fingerprint = hashlib.sha256(b"train:" + train + b"val:" + val).hexdigest()
    _write_cache(cache, train, val, {"fingerprint": fingerprint, "files": len(files), "bytes": len(train) + len(val)})
    return Corpus(name, np.frombuffer(train, dtype=np.uint8), np.frombuffer(val, dtype=np.uint8), fingerprint)


def _concat(base: Path, files: list[str], max_bytes: int, val_fraction: float) -> tuple[bytes, bytes]:
    parts: dict[bool, list[bytes]] = {True: [], False: []}
    total = 0
    chosen = []
    for rel in files:
        if max_bytes and total >= max_bytes:
            break
        data = (base / rel).read_bytes() + b"\n"
        if max_bytes:
            data = data[: max_bytes - total]
        total += len(data)
        chosen.append((rel, data))
    flags = [_is_val(rel, val_fraction) for rel, _ in chosen]
    if chosen and not any(flags):
        # Guarantee a validation split: the file whose hash is lowest goes there.
        lowest = min(range(len(chosen)), key=lambda i: hashlib.sha256(chosen[i][0].encode()).hexdigest())
        flags[lowest] = True
    for (rel, data), is_val in zip(chosen, flags):
        parts[is_val].append(data)
    return b"".join(parts[False]), b"".join(parts[True])


def _read_u8(path: Path) -> np.ndarray:
    return np.fromfile(path, dtype=np.uint8)


def _write_cache(cache: Path, train: bytes, val: bytes, meta: dict[str, Any]) -> None:
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "train.bin").write_bytes(train)
        (tmp / "val.bin").write_bytes(val)
        (tmp / "meta.json").write_text(json.dumps(meta))
        os.replace(tmp, cache)
    except OSError:
        pass  # the cache is an optimisation; another process may have won the rename


def text_corpus(src: SourceConfig, root: Path, val_fraction: float, cache_dir: str | None) -> Corpus:
    """A text file or a folder of files, as bytes."""
    path = _resolve(src, root)
    max_bytes = int(src.max_mb * 1_000_000)
    if path.is_dir():
        files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                       if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
        if not files:
            raise UsageError(f"data source `{src.name}`: folder {path} has no files")
        return files_corpus(src.name, path, files, max_bytes, val_fraction, cache_dir)
    data = path.read_bytes()
    if max_bytes:
        data = data[:max_bytes]
    cut = len(data) - max(1, int(len(data) * val_fraction))
    arr = np.frombuffer(data, dtype=np.uint8)
    return Corpus(src.name, arr[:cut], arr[cut:], hashlib.sha256(data).hexdigest())


def bin_corpus(src: SourceConfig, root: Path, val_fraction: float) -> Corpus:
    """nanoGPT-style uint16 tokens: a folder with train.bin and val.bin, or one .bin file (tail held out)."""
    path = _resolve(src, root)
    if path.is_dir():
        paths = [path / "train.bin", path / "val.bin"]
        missing = [p.name for p in paths if not p.is_file()]
        if missing:
            raise UsageError(f"data source `{src.name}`: {path} lacks {', '.join(missing)}",
                             hint="a bin source is a folder with train.bin and val.bin, or a single .bin file")
        train, val = (np.memmap(p, dtype=np.uint16, mode="r") for p in paths)
    else:
        tokens = np.memmap(path, dtype=np.uint16, mode="r")
        cut = len(tokens) - max(1, int(len(tokens) * val_fraction))
        train, val, paths = tokens[:cut], tokens[cut:], [path]
    h = hashlib.sha256()
    for p in paths:
        size = p.stat().st_size
        h.update(f"{p.name}:{size}:".encode())
        with open(p, "rb") as f:
            h.update(f.read(_BIN_SAMPLE))
            f.seek(max(0, size - _BIN_SAMPLE))
            h.update(f.read(_BIN_SAMPLE))
    return Corpus(src.name, train, val, h.hexdigest())


def _resolve(src: SourceConfig, root: Path) -> Path:
    path = Path(src.path or "").expanduser()
    if not path.is_absolute():
        path = root / path
    if not path.exists():
        raise UsageError(f"data source `{src.name}`: {src.path} does not exist (looked at {path})",
                         hint="paths in data.sources are relative to the project root")
    return path


def load_corpus(src: SourceConfig, root: Path, cfg: DataConfig) -> Corpus:
    """The corpus of one configured source."""
    if src.kind == "stdlib":
        base, files = stdlib_files()
        return files_corpus(src.name, base, files, int(src.max_mb * 1_000_000), cfg.val_fraction, cfg.cache_dir)
    if src.kind == "text":
        return text_corpus(src, root, cfg.val_fraction, cfg.cache_dir)
    return bin_corpus(src, root, cfg.val_fraction)


# --- the stream ---------------------------------------------------------------


class DataStream:
    """Deterministic batches by global batch id, with a skip list; resumable."""

    def __init__(self, corpora: list[Corpus], cfg: DataConfig, *, seed: int, block_size: int, batch_size: int,
                 total_steps: int, rank: int = 0, device: torch.device | str = "cpu") -> None:
        self.corpora = corpora
        self.cfg = cfg
        self.seed = seed
        self.block_size = block_size
        self.batch_size = batch_size
        self.total_steps = total_steps
        self.rank = rank
        self.device = torch.device(device)
        self.next_batch = 1
        self.skip: list[list[int]] = []
        self.weight_overrides: dict[str, float] = {}
        for c in corpora:
            for split, arr in (("train", c.train), ("val", c.val)):
                if len(arr) <= block_size + 1:
                    raise UsageError(f"data source `{c.name}`: its {split} split has {len(arr)} tokens, fewer than block_size + 2",
                                     hint="use more data, a larger max_mb, or a smaller model.block_size")
        self._phases = self._phase_table()

    def _phase_table(self) -> list[tuple[float, np.ndarray]]:
        """(until, raw weights per corpus) for each phase."""
        names = [c.name for c in self.corpora]
        if not self.cfg.phases:
            return [(1.0, np.ones(len(names)))]
        return [(p.until, np.array([p.weights.get(n, 0.0) for n in names], dtype=np.float64)) for p in self.cfg.phases]

    def _mix(self, raw: np.ndarray) -> np.ndarray:
        w = raw.copy()
        for i, c in enumerate(self.corpora):
            if c.name in self.weight_overrides:
                w[i] = self.weight_overrides[c.name]
        if w.sum() <= 0:  # every source overridden to zero: the phase's own mixture stands
            w = raw
        return w / w.sum()

    def weights_at(self, batch_id: int) -> np.ndarray:
        """Mixture weights for a batch: its phase (batch_id / total_steps), with any live overrides."""
        return self._mix(self._phases[self._phase_index(batch_id)][1])

    def mixture_key(self, batch_id: int) -> tuple[Any, ...]:
        """What `weights_at(batch_id)` depends on (its phase, the live overrides): equal keys, equal weights."""
        return self._phase_index(batch_id), tuple(sorted(self.weight_overrides.items()))

    def _phase_index(self, batch_id: int) -> int:
        frac = (batch_id - 1) / max(1, self.total_steps)
        return next((i for i, (until, _w) in enumerate(self._phases) if frac < until), len(self._phases) - 1)

    def set_weight_overrides(self, weights: dict[str, float]) -> None:
        """Live mixture weights by source name, replacing the phases' for those sources; {} clears them."""
        names = [c.name for c in self.corpora]
        for name, w in weights.items():
            if name not in names:
                raise ValueError(f"no data source {name!r} (sources: {', '.join(names)})")
            if not w >= 0:
                raise ValueError(f"weight of {name!r} must be >= 0, got {w}")
        self.weight_overrides = {str(k): float(v) for k, v in weights.items()}

    # --- position --------------------------------------------------------------

    def is_skipped(self, batch_id: int) -> bool:
        return any(a <= batch_id <= b for a, b in self.skip)

    def take(self) -> int:
        """The id of the next batch to train on (skipped ids passed over); advances."""
        while self.is_skipped(self.next_batch):
            self.next_batch += 1
        bid = self.next_batch
        self.next_batch += 1
        return bid

    def add_skip(self, first: int, last: int) -> None:
        """Never train on batch ids first..last (inclusive)."""
        if last < first:
            raise ValueError(f"empty skip range {first}..{last}")
        self.skip.append([int(first), int(last)])

    # --- content ---------------------------------------------------------------

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, *key])))

    def _sample(self, rng: np.random.Generator, weights: np.ndarray, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        T, B = self.block_size, self.batch_size
        which = rng.choice(len(self.corpora), size=B, p=weights)
        buf = np.empty((B, T + 1), dtype=np.int64)
        span = np.arange(T + 1)
        for i, c in enumerate(self.corpora):
            rows = np.nonzero(which == i)[0]
            if rows.size == 0:
                continue
            arr = c.train if split == "train" else c.val
            starts = rng.integers(0, len(arr) - T - 1, size=rows.size)
            buf[rows] = arr[starts[:, None] + span]
        t = torch.from_numpy(buf)
        if self.device.type == "cuda":
            t = t.pin_memory().to(self.device, non_blocking=True)
        return t[:, :-1], t[:, 1:]

    def batch(self, batch_id: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of micro-batch `micro` of batch `batch_id` on this rank."""
        return self._sample(self._rng(0, batch_id, self.rank, micro), self.weights_at(batch_id), "train")

    def val_batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The fixed validation micro-batch `index`, drawn with the final phase's weights."""
        return self._sample(self._rng(1, index, self.rank), self._phases[-1][1] / self._phases[-1][1].sum(), "val")

    # --- state -------------------------------------------------------------------

    def fingerprints(self) -> dict[str, str]:
        return {c.name: c.fingerprint for c in self.corpora}

    def state_dict(self) -> dict[str, Any]:
        return {"next_batch": self.next_batch, "skip": [list(r) for r in self.skip],
                "fingerprints": self.fingerprints(), "seed": self.seed, "weight_overrides": dict(self.weight_overrides)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved, mine = dict(state.get("fingerprints", {})), self.fingerprints()
        for name, fp in saved.items():
            if name in mine and mine[name] != fp:
                raise RefusedError(
                    f"data source `{name}` differs from the one the checkpoint was trained on "
                    f"(fingerprint {mine[name][:12]} here, {fp[:12]} in the checkpoint)",
                    hint="the standard library differs between Python versions: resume with the same Python, or start a new run",
                )
        self.next_batch = int(state["next_batch"])
        self.skip = [[int(a), int(b)] for a, b in state.get("skip", [])]
        self.weight_overrides = {str(k): float(v) for k, v in state.get("weight_overrides", {}).items()}
