"""`logbook.yaml`: the logbook's own settings, as a typed dataclass."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import yaml

from logbook.core.errors import UsageError
from logbook.core.tsa_settings import TimestampingConfig, parse_timestamping
from logbook.core.typedconfig import is_scalar, reject_unknown_keys, unknown_key
from logbook.core.yamlsafe import load_yaml_mapping

CONFIG_FILE = "logbook.yaml"


@dataclass
class SigningSettings:
    """`signing:` in logbook.yaml: whose SSH keys may sign records, and whether every record must be signed."""

    allowed_signers: str
    """ssh allowed-signers file (`ssh-keygen -Y` format), relative to the repository root; read as HEAD commits
    it, never from the working tree, so an uncommitted edit grants nothing."""
    require: bool = False
    """True: a record with no valid signature by an allowed key is exit 4 in `verify` (records first committed
    while the setting was off are reported, not failed)."""

    @classmethod
    def from_yaml(cls, raw: object) -> "SigningSettings | None":
        """The `signing:` mapping as read from YAML (None: signing is off), validated."""
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise UsageError(f"{CONFIG_FILE}: signing must be a mapping with allowed_signers (and require)",
                             hint="signing:\n  allowed_signers: trust/allowed_signers\n  require: false")
        reject_unknown_keys(raw, cls, "signing", partial(_unknown_setting, known="known"))
        path = raw.get("allowed_signers")
        if (not isinstance(path, str) or not path.strip() or "\x00" in path or Path(path).is_absolute()
                or ".." in Path(path).parts):
            raise UsageError(f"{CONFIG_FILE}: signing.allowed_signers must be a file path relative to the repository "
                             f"root, got {path!r}", hint="e.g. trust/allowed_signers, committed with the repository")
        require = raw.get("require", False)
        if not is_scalar(require, bool):
            raise UsageError(f"{CONFIG_FILE}: signing.require must be true or false, got {require!r}")
        return cls(allowed_signers=path.strip(), require=require)


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
    """RFC 3161 authorities that stamp records (see `logbook.core.tsa_settings`); None: no third-party time."""
    signing: SigningSettings | None = None
    """Signed identity (`logbook.trust.signatures`); None: records are not signed and people are told apart by
    e-mail."""

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
            if not is_scalar(m, float) or not 0 < m <= 1:
                raise UsageError(f"{CONFIG_FILE}: milestone {m!r} must be a fraction in (0, 1]")
        if sorted(set(self.milestones)) != list(self.milestones):
            raise UsageError(f"{CONFIG_FILE}: milestones must be strictly increasing, got {self.milestones}")
        if not is_scalar(self.review_approvals, int) or self.review_approvals < 1:
            raise UsageError(f"{CONFIG_FILE}: review_approvals must be an integer >= 1")
        for name in ("review_self_approval", "allow_unregistered_runs"):
            if not is_scalar(getattr(self, name), bool):
                raise UsageError(f"{CONFIG_FILE}: {name} must be true or false")
        if not is_scalar(self.snapshot_max_file_mb, float) or self.snapshot_max_file_mb <= 0:
            raise UsageError(f"{CONFIG_FILE}: snapshot_max_file_mb must be a positive number")
        self.timestamping = parse_timestamping(self.timestamping)

    def to_yaml(self) -> str:
        lines = ["# logbook settings: see `logbook init --help`"]
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue  # an optional block that is off is left out, not written as `null`
            if dataclasses.is_dataclass(value):  # a nested block (timestamping, signing), written as a mapping
                block = value.to_dict() if hasattr(value, "to_dict") else dataclasses.asdict(value)
                lines.append(yaml.safe_dump({f.name: block}, sort_keys=False).rstrip())
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


_unknown_setting = partial(unknown_key, source=CONFIG_FILE, noun="setting", known="known settings")
"""logbook.yaml's words for a key no field has: "logbook.yaml: unknown setting `x`"."""


def load_config(path: Path) -> LogbookConfig:
    """Load and validate `logbook.yaml`; unknown keys name the closest valid one."""
    raw = load_yaml_mapping(path, "logbook settings")
    reject_unknown_keys(raw, LogbookConfig, on_unknown=_unknown_setting)
    cfg = LogbookConfig(**{k: v for k, v in raw.items()})
    cfg.signing = SigningSettings.from_yaml(raw.get("signing"))
    if isinstance(cfg.milestones, list):
        # Whole numbers read as fractions (1 -> 1.0); a huge one stays an int and fails validation.
        cfg.milestones = [float(m) if isinstance(m, int) and not isinstance(m, bool) and abs(m) < 2**53 else m
                          for m in cfg.milestones]
    cfg.validate()
    return cfg

