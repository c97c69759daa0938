"""A wrapped command's metrics from the TensorBoard event files it writes, read with TensorBoard's own loader.

Hugging Face's Trainer (`report_to="tensorboard"`), Lightning's TensorBoardLogger
and `torch.utils.tensorboard.SummaryWriter` all write `events.out.tfevents.*`
files; `logbook run --metrics-from tensorboard:DIR -- CMD` follows every such
file under DIR as the command writes it (new files included) and turns each
scalar into a metric of its step. Tags are named as the logbook names its
metrics (`train/loss` is `loss`, `eval/loss` is `val_loss`, ...: the one mapping
is `logbook.promises.metric_names`), every other tag keeps its name with `/`
made `_`, so `eval/accuracy` is the metric `eval_accuracy`; `--metrics-tag
TAG=NAME` says otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from logbook.core.errors import RefusedError, UsageError
from logbook.promises.metric_names import FRAMEWORK_NAMES, canonical

KNOWN_TAGS = FRAMEWORK_NAMES
"""What the frameworks call the metrics the logbook plots and scores (`metric_names` owns the mapping)."""


def parse_source(text: str, root: Path) -> Path:
    """`tensorboard:DIR` -> the folder (relative to the repository root), refused when it is anything else."""
    scheme, sep, where = text.partition(":")
    if scheme != "tensorboard" or not sep or not where:
        raise UsageError(f"--metrics-from {text!r}: expected tensorboard:DIR",
                         hint="e.g. --metrics-from tensorboard:runs (the folder the script's SummaryWriter writes)")
    return (root / where).resolve()


def parse_tags(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        tag, sep, name = pair.partition("=")
        if not sep or not tag or not name:
            raise UsageError(f"--metrics-tag {pair!r}: expected TAG=NAME", hint="e.g. --metrics-tag train/loss=loss")
        out[tag] = name
    return out


class TensorBoardTail:
    """The scalars appended to the event files under one folder since the last read, by step."""

    def __init__(self, folder: Path, tags: dict[str, str] | None = None) -> None:
        try:
            from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
            from tensorboard.util import tensor_util
        except ImportError:
            raise RefusedError("--metrics-from tensorboard needs the tensorboard package",
                               hint="pip install tensorboard") from None
        self._loader_class, self._tensor_util = EventFileLoader, tensor_util
        self.folder = folder
        self.tags = dict(tags or {})  # the user's names; every other tag is named by `canonical`
        self._loaders: dict[Path, Any] = {}

    def new_rows(self) -> list[tuple[int, dict[str, float]]]:
        """(step, {metric: value}) for every step with new scalars, in step order."""
        rows: dict[int, dict[str, float]] = {}
        for path in sorted(self.folder.rglob("events.out.tfevents.*")) if self.folder.is_dir() else []:
            loader = self._loaders.get(path)
            if loader is None:
                loader = self._loaders[path] = self._loader_class(str(path))
            for event in loader.Load():
                for value in event.summary.value:
                    number = self._scalar(value)
                    if number is not None:
                        rows.setdefault(int(event.step), {})[self._name(value.tag)] = number
        return sorted(rows.items())

    def _name(self, tag: str) -> str:
        return self.tags.get(tag) or canonical(tag)

    def _scalar(self, value: Any) -> float | None:
        if value.HasField("simple_value"):
            number = float(value.simple_value)
        elif value.HasField("tensor") and value.metadata.plugin_data.plugin_name == "scalars":
            number = float(self._tensor_util.make_ndarray(value.tensor).item())
        else:
            return None
        return number if math.isfinite(number) else None
