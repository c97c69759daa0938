"""The training config: YAML into typed dataclasses, with overrides and a hash.

A config file is merged onto the defaults, then `key.sub=value` overrides are
applied (values parsed as YAML scalars), then the result is typed field by
field. Unknown keys and values of the wrong type are `UsageError`s that name the
key path (`optim.lr`) and suggest the closest valid key. The reading, merging
and overriding are the logbook's one typed-config reader
(`logbook/core/typedconfig.py`, through `logbook.api`); this module holds the
sections, their range checks and the hash. It imports no torch, so a launcher
can validate a config and compute its hash cheaply.

Adding a section is one dataclass and one field on `TrainConfig`: the loader,
`config_to_dict` and `config_hash` walk the dataclasses generically.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from logbook.api import guard, typedconfig

GuardConfig = guard.GuardConfig  # the guard's section, defined beside the guard (torch-free, in the logbook)

# These sections are defined beside the components they configure; the
# modules keep torch imports inside functions, so this file stays torch-free.
from .observe.straggler import StragglerConfig
from .observe.telemetry import TelemetryConfig
from .observe.wandb_sink import WandbConfig


ATTENTION_BACKENDS = ("sdpa", "math")
"""The values of `model.attention_backend`."""


@dataclass
class ModelConfig:
    """Shape and stabilisers of the decoder-only GPT."""

    n_layer: int = 2
    """Transformer blocks."""
    n_head: int = 4
    """Attention heads per block; must divide n_embd."""
    n_embd: int = 128
    """Width of the residual stream."""
    block_size: int = 64
    """Context length in tokens."""
    vocab_size: int = 256
    """Vocabulary size; 256 for raw bytes, e.g. 50304 for GPT-2 tokens in .bin files."""
    mlp_ratio: int = 4
    """Hidden width of the MLP as a multiple of n_embd."""
    dropout: float = 0.0
    """Dropout probability on attention output and MLP output."""
    qk_norm: bool = True
    """RMS-normalise queries and keys per head (with per-head gains) before attention."""
    tie_embeddings: bool = True
    """Share the token embedding with the output head."""
    z_loss: float = 1e-4
    """Coefficient of the z-loss (mean squared log-partition); 0 turns it off."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation of weights."""
    attention_backend: str = "sdpa"
    """sdpa (`F.scaled_dot_product_attention`: PyTorch picks its fused kernel for the device) | math (the softmax
    written out in PyTorch ops, nanoGPT's manual path: a T x T matrix per head, slower, the reference). The two agree
    to float rounding, not bit for bit: a deterministic run is refused a resume that changes it."""

    def validate(self, where: str) -> None:
        typedconfig.check_positive(self, where, "n_layer", "n_head", "n_embd", "block_size", "vocab_size", "mlp_ratio", "init_std")
        typedconfig.check_config(self.n_embd % self.n_head == 0, f"{where}.n_head", f"must divide n_embd ({self.n_embd}), got {self.n_head}")
        typedconfig.check_config(0.0 <= self.dropout < 1.0, f"{where}.dropout", f"must be in [0, 1), got {self.dropout}")
        typedconfig.check_nonnegative(self, where, "z_loss")
        typedconfig.check_choice(self, where, "attention_backend", ATTENTION_BACKENDS)


@dataclass
class SourceConfig:
    """One data source of the mixture."""

    name: str = "stdlib"
    """Name used by the phase weights and in metrics."""
    kind: str = "stdlib"
    """stdlib (this Python's standard library source as bytes) | text (a file or folder, as bytes) | bin (nanoGPT-style uint16 token files)."""
    path: str | None = None
    """File or folder for text and bin sources, relative to the project root; unused for stdlib."""
    max_mb: float = 8.0
    """Cap on the bytes read for stdlib and text sources (megabytes, 10**6 bytes); 0 means no cap."""

    def validate(self, where: str) -> None:
        typedconfig.check_choice(self, where, "kind", ("stdlib", "text", "bin"))
        typedconfig.check_config(bool(self.name), f"{where}.name", "must not be empty")
        typedconfig.check_config(self.kind == "stdlib" or bool(self.path), f"{where}.path", f"is required for a {self.kind} source")
        typedconfig.check_nonnegative(self, where, "max_mb")


@dataclass
class PhaseConfig:
    """One stage of a staged data mixture."""

    until: float = 1.0
    """The phase lasts until this fraction of the run's steps (the last phase must end at 1.0)."""
    weights: dict[str, float] = field(default_factory=dict)
    """Sampling weight per source name; sources not named get weight 0."""


@dataclass
class DataConfig:
    """Where tokens come from and how they are mixed."""

    sources: list[SourceConfig] = field(default_factory=lambda: [SourceConfig()])
    """The data sources; the default is the Python standard library's own source."""
    phases: list[PhaseConfig] = field(default_factory=list)
    """Staged mixture; empty means one phase with equal weights on every source."""
    val_fraction: float = 0.01
    """Share of files (or of the bytes of a single file) held out for validation."""
    cache_dir: str | None = None
    """Where the concatenated corpus is cached; default ~/.cache/logbook-trainer."""

    def validate(self, where: str) -> None:
        typedconfig.check_config(bool(self.sources), f"{where}.sources", "needs at least one source")
        names = [s.name for s in self.sources]
        typedconfig.check_config(len(set(names)) == len(names), f"{where}.sources", f"source names must be unique, got {names}")
        for i, s in enumerate(self.sources):
            s.validate(f"{where}.sources.{i}")
        typedconfig.check_config(0.0 < self.val_fraction < 0.5, f"{where}.val_fraction", f"must be in (0, 0.5), got {self.val_fraction}")
        last = 0.0
        for i, p in enumerate(self.phases):
            key = f"{where}.phases.{i}"
            typedconfig.check_config(last < p.until <= 1.0, f"{key}.until", f"must increase and lie in (0, 1], got {p.until}")
            last = p.until
            for name, w in p.weights.items():
                typedconfig.check_config(name in names, f"{key}.weights.{name}", typedconfig.suggest_name(name, names, "unknown source"))
                typedconfig.check_config(w >= 0, f"{key}.weights.{name}", f"must be >= 0, got {w}")
            typedconfig.check_config(sum(p.weights.values()) > 0, f"{key}.weights", "need at least one positive weight")
        typedconfig.check_config(not self.phases or last == 1.0, f"{where}.phases", "the last phase must end at until: 1.0")


@dataclass
class OptimConfig:
    """Optimizer and gradient handling."""

    name: str = "adamw"
    """adamw | muon (Muon for 2-D hidden matrices, AdamW for embeddings, norms and head)."""
    lr: float = 1e-3
    """Peak learning rate of AdamW (all parameters, or the non-Muon ones)."""
    muon_lr: float = 0.02
    """Peak learning rate of Muon's parameters."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW betas."""
    eps: float = 1e-8
    """AdamW epsilon."""
    weight_decay: float = 0.1
    """Decoupled weight decay on matrices; embeddings and norms never decay."""
    muon_momentum: float = 0.95
    """Muon momentum (Nesterov)."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this; 0 only measures it."""
    qk_clip_tau: float = 0.0
    """MuonClip: after each update rescale a head's query/key scale when its max attention logit exceeds this; 0 turns it off."""

    def validate(self, where: str) -> None:
        typedconfig.check_choice(self, where, "name", ("adamw", "muon"))
        typedconfig.check_positive(self, where, "lr", "muon_lr", "eps")
        typedconfig.check_config(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), f"{where}.betas", f"must be two numbers in [0, 1), got {self.betas}")
        typedconfig.check_nonnegative(self, where, "weight_decay", "grad_clip", "qk_clip_tau")
        typedconfig.check_config(0 <= self.muon_momentum < 1, f"{where}.muon_momentum", f"must be in [0, 1), got {self.muon_momentum}")


@dataclass
class ScheduleConfig:
    """Learning-rate schedule, a pure function of the step (times the live lr_scale)."""

    kind: str = "cosine"
    """cosine (warmup then cosine decay) | wsd (warmup, stable, decay) | constant (warmup then flat)."""
    warmup_steps: int = 10
    """Linear warmup from 0 to the peak over this many steps."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of the peak."""
    decay_fraction: float = 0.2
    """wsd: the share of the run spent decaying, at the end."""
    decay_shape: str = "linear"
    """wsd: linear | cosine | sqrt (1 - sqrt) shape of the final decay."""

    def validate(self, where: str) -> None:
        typedconfig.check_choice(self, where, "kind", ("cosine", "wsd", "constant"))
        typedconfig.check_choice(self, where, "decay_shape", ("linear", "cosine", "sqrt"))
        typedconfig.check_nonnegative(self, where, "warmup_steps")
        typedconfig.check_config(0 <= self.min_lr_ratio <= 1, f"{where}.min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        typedconfig.check_config(0 < self.decay_fraction <= 1, f"{where}.decay_fraction", f"must be in (0, 1], got {self.decay_fraction}")


@dataclass
class TrainLoopConfig:
    """Length, batch, device and reporting of the training loop."""

    steps: int = 300
    """Optimizer steps in the whole run."""
    batch_size: int = 16
    """Sequences per micro-batch per rank."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer step."""
    seed: int = 1337
    """Seed of the model initialisation, the data sampling and every RNG."""
    device: str = "auto"
    """auto (cuda when available) | cpu | cuda."""
    dtype: str = "float32"
    """float32 | bfloat16 (autocast for the forward and backward)."""
    compile: bool = False
    """torch.compile the model (CPU or GPU); its kernels are cached under .logbook/compile-cache/ so a restart does not compile again."""
    threads: int = 0
    """CPU threads for torch; 0 keeps torch's default. Fix it to compare runs bit for bit across machines."""
    deterministic: bool = True
    """Use deterministic algorithms (bit-exact resume on CPU)."""
    log_every: int = 1
    """Write a metrics row every this many steps."""
    eval_every: int = 100
    """Measure the validation loss every this many steps (and at the end); 0 only at the end."""
    eval_batches: int = 4
    """Micro-batches per validation measurement."""
    hang_timeout_s: float = 0.0
    """Floor of the hang timeout, and its switch: 0 turns the watchdog off."""
    hang_factor: float = 10.0
    """A step (after the first) longer than max(hang_timeout_s, this x the median step time) emits `hang` and exits for a restart."""
    parallel: str = "ddp"
    """With several ranks: ddp (replicas) | fsdp (FSDP2 fully_shard per block); both on CPU (gloo) or GPU (nccl)."""

    def validate(self, where: str) -> None:
        typedconfig.check_positive(self, where, "steps", "batch_size", "grad_accum", "log_every", "eval_batches")
        typedconfig.check_choice(self, where, "device", ("auto", "cpu", "cuda"))
        typedconfig.check_choice(self, where, "dtype", ("float32", "bfloat16"))
        typedconfig.check_choice(self, where, "parallel", ("ddp", "fsdp"))
        typedconfig.check_config(self.parallel != "fsdp" or self.grad_accum == 1, f"{where}.grad_accum",
               f"must be 1 with train.parallel=fsdp, got {self.grad_accum}: this loop has no FSDP2 "
               "equivalent of no_sync, so each micro-batch would reduce-scatter its gradients; raise "
               "train.batch_size instead, or use ddp")
        typedconfig.check_config(self.hang_factor >= 1, f"{where}.hang_factor", f"must be >= 1, got {self.hang_factor}")
        typedconfig.check_nonnegative(self, where, "threads", "eval_every", "hang_timeout_s")


@dataclass
class CheckpointConfig:
    """When and where checkpoints are written."""

    every: int = 100
    """Save every this many steps (and always at the last step)."""
    keep: int = 3
    """Keep the newest this many checkpoints; ones marked `keep` are never deleted."""
    background: bool = True
    """Serialize and write in a background thread; training blocks only for the in-memory copy."""
    format: str = "auto"
    """auto | torch | dcp: one `torch.save` file per part written by rank 0 (whole tensors gathered), or
    torch.distributed.checkpoint with every rank writing its own shards; auto is dcp with more than one rank."""
    dir: str | None = None
    """Checkpoint folder; default .logbook/checkpoints/<run> in the project."""
    adopt_advice: bool = False
    """Change `every` to Young's interval from this run's measured save cost and MTBF (an `hparam_change`, source advice)."""
    mtbf_s: float = 0.0
    """MTBF in seconds for the advice before this run has failed; 0 waits for the run's own failures."""

    def validate(self, where: str) -> None:
        typedconfig.check_positive(self, where, "every", "keep")
        typedconfig.check_choice(self, where, "format", ("auto", "torch", "dcp"))
        typedconfig.check_nonnegative(self, where, "mtbf_s")


@dataclass
class FaultConfig:
    """A fault drill: fires once, at one step of one attempt."""

    kind: str = "exception"
    """exception | sigkill | sigterm | hang | corrupt_checkpoint | nan | spike (a loss blow-up the guard must catch)."""
    step: int = 1
    """The step at which it fires (after that step's update)."""
    attempt: int = 1
    """The attempt that fires it, so a drill does not refire after the restart."""
    when: str = "step"
    """sigkill only: step (after the step) | save (in the middle of writing the checkpoint of that step)."""
    rank: int | None = None
    """The rank that fires it (e.g. 1 to kill one process of a DDP run); none means every rank."""
    factor: float = 100.0
    """spike only: the loss and gradients of the step are multiplied by this."""

    def validate(self, where: str) -> None:
        typedconfig.check_choice(self, where, "kind", ("exception", "sigkill", "sigterm", "hang", "corrupt_checkpoint", "nan", "spike"))
        typedconfig.check_choice(self, where, "when", ("step", "save"))
        typedconfig.check_positive(self, where, "step", "attempt")
        typedconfig.check_config(self.rank is None or self.rank >= 0, f"{where}.rank", f"must be >= 0, got {self.rank}")
        typedconfig.check_config(self.when == "step" or self.kind == "sigkill", f"{where}.when", "`save` is only for sigkill drills")
        typedconfig.check_config(self.factor > 1, f"{where}.factor", f"must be > 1 (a blow-up), got {self.factor}")


@dataclass
class TrainConfig:
    """A whole training run."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The network."""
    data: DataConfig = field(default_factory=DataConfig)
    """The corpus and its mixture."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """The optimizer."""
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    """The learning-rate schedule."""
    train: TrainLoopConfig = field(default_factory=TrainLoopConfig)
    """The loop."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpointing."""
    faults: list[FaultConfig] = field(default_factory=list)
    """Fault drills."""
    guard: GuardConfig = field(default_factory=GuardConfig)
    """The divergence guard: spike detection and the skip / rollback / lr / abort ladder."""
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    """Throughput, step-time split, MFU and memory at log steps."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """Optional mirror of the run into Weights & Biases (off by default)."""
    straggler: StragglerConfig = field(default_factory=StragglerConfig)
    """Detection of a rank persistently slower than the others."""

    def validate(self, where: str = "") -> None:
        typedconfig.validate_sections(self)
        for i, fault in enumerate(self.faults):
            typedconfig.check_config(fault.step <= self.train.steps, f"faults.{i}.step", f"is after the last step ({self.train.steps})")
            typedconfig.check_config(fault.kind != "hang" or self.train.hang_timeout_s > 0, f"faults.{i}.kind",
                   "a hang drill needs the watchdog: set train.hang_timeout_s > 0")

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step on one rank."""
        return self.train.batch_size * self.train.grad_accum * self.model.block_size


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """Plain JSON-ready dict of a config (or any of its sections)."""
    return dataclasses.asdict(cfg)


def config_from_dict(raw: dict[str, Any]) -> TrainConfig:
    """A validated TrainConfig from a (possibly partial) dict, e.g. one saved in a checkpoint."""
    cfg = typedconfig.resolve(TrainConfig, raw)
    cfg.validate()
    return cfg


def config_hash(cfg: TrainConfig) -> str:
    """sha256 of the canonical JSON of the resolved config."""
    text = json.dumps(config_to_dict(cfg), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_train_config(path: Path | str | None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Defaults, then the YAML file (if any), then `key.sub=value` overrides; validated."""
    loaded = typedconfig.load_training_config(Path(path)) if path is not None else None
    cfg = typedconfig.resolve(TrainConfig, loaded, overrides=overrides)
    cfg.validate()
    return cfg
