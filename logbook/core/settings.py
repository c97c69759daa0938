"""`logbook.yaml`: the logbook's own settings, as a typed dataclass."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from logbook.core.errors import UsageError, did_you_mean
from logbook.core.yamlsafe import load_yaml_mapping
from logbook.core.timestamping import TimestampingConfig, parse_timestamping

CONFIG_FILE = "logbook.yaml"


@dataclass
class LogbookConfig:
    """Settings read from `logbook.yaml` at the repository root."""

    entries_dir: str = "entries"
    """Folder (relative to the repository root) that holds the whole logbook."""

    milestones: list[float] = field(default_factory=lambda: [0.10, 0.25, 0.50, 0.75, 1.00])
    """Fractions of a run at which a progress note is written."""

    review_approvals: int = 1
    """Approvals an entry needs before review counts it as signed off."""

    review_self_approval: bool = False
    """Whether the person who launched a run may approve its entries (approvals count distinct reviewers)."""

    allow_unregistered_runs: bool = True
    """Whether `logbook run --exploratory` may start a run without a preregistration."""

    snapshot_max_file_mb: float = 10.0
    """Untracked files larger than this are left out of code snapshots (stray checkpoints)."""

    timestamping: TimestampingConfig | None = None
    """RFC 3161 authorities that stamp records (see `logbook.core.timestamping`); None: no third-party time."""

    def validate(self) -> None:
        entries = self.entries_dir
        if (not isinstance(entries, str) or not entries or "\x00" in entries or Path(entries).is_absolute()
                or ".." in Path(entries).parts):
            raise UsageError(f"{CONFIG_FILE}: entries_dir must be a relative path inside the repository, got {self.entries_dir!r}")
        if any(part.lower() == ".git" for part in Path(entries).parts) or entries.strip("/. ") == "":
            # git never tracks a .git folder: records written there could never be committed or verified.
            raise UsageError(f"{CONFIG_FILE}: entries_dir must be a folder git tracks, got {self.entries_dir!r}",
                             hint="the default, entries, is a good choice")
        if not isinstance(self.milestones, list) or not self.milestones:
            raise UsageError(f"{CONFIG_FILE}: milestones must be a non-empty list of fractions")
        for m in self.milestones:
            if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 < m <= 1:
                raise UsageError(f"{CONFIG_FILE}: milestone {m!r} must be a fraction in (0, 1]")
        if sorted(set(self.milestones)) != list(self.milestones):
            raise UsageError(f"{CONFIG_FILE}: milestones must be strictly increasing, got {self.milestones}")
        if isinstance(self.review_approvals, bool) or not isinstance(self.review_approvals, int) or self.review_approvals < 1:
            raise UsageError(f"{CONFIG_FILE}: review_approvals must be an integer >= 1")
        if not isinstance(self.review_self_approval, bool):
            raise UsageError(f"{CONFIG_FILE}: review_self_approval must be true or false")
        if not isinstance(self.allow_unregistered_runs, bool):
            raise UsageError(f"{CONFIG_FILE}: allow_unregistered_runs must be true or false")
        if isinstance(self.snapshot_max_file_mb, bool) or not isinstance(self.snapshot_max_file_mb, (int, float)) or self.snapshot_max_file_mb <= 0:
            raise UsageError(f"{CONFIG_FILE}: snapshot_max_file_mb must be a positive number")
        self.timestamping = parse_timestamping(self.timestamping)

    def to_yaml(self) -> str:
        lines = ["# logbook settings: see `logbook init --help`"]
        for f in dataclasses.fields(self):
            if f.name == "timestamping":  # a nested mapping, and off unless set
                if self.timestamping is not None:
                    lines.append(yaml.safe_dump({f.name: self.timestamping.to_dict()}, sort_keys=False).rstrip())
                continue
            doc = _FIELD_DOCS.get(f.name)
            if doc:
                lines.append(f"# {doc}")
            lines.append(yaml.safe_dump({f.name: getattr(self, f.name)}, default_flow_style=True, sort_keys=False).strip().strip("{}"))
        return "\n".join(lines) + "\n"


_FIELD_DOCS = {
    "entries_dir": "Folder that holds preregistrations, run logs and the dated chronicle.",
    "milestones": "Fractions of a run at which a progress note is written.",
    "review_approvals": "Approvals an entry needs before it counts as reviewed.",
    "review_self_approval": "Let the person who launched a run approve its entries.",
    "allow_unregistered_runs": "Allow `logbook run --exploratory` without a preregistration.",
    "snapshot_max_file_mb": "Untracked files above this size stay out of code snapshots.",
}


def load_config(path: Path) -> LogbookConfig:
    """Load and validate `logbook.yaml`; unknown keys name the closest valid one."""
    raw = load_yaml_mapping(path, "logbook settings")
    names = [f.name for f in dataclasses.fields(LogbookConfig)]
    for key in raw:
        if key not in names:
            raise UsageError(f"{CONFIG_FILE}: unknown setting `{key}`",
                             hint=did_you_mean(key, names, f"known settings: {', '.join(names)}"))
    cfg = LogbookConfig(**{k: v for k, v in raw.items()})
    if isinstance(cfg.milestones, list):
        # Whole numbers read as fractions (1 -> 1.0); a huge one stays an int and fails validation.
        cfg.milestones = [float(m) if isinstance(m, int) and not isinstance(m, bool) and abs(m) < 2**53 else m
                          for m in cfg.milestones]
    cfg.validate()
    return cfg

