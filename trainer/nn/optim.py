"""Optimizers (AdamW, Muon + AdamW), QK-clip, and learning-rate schedules.

The schedules are pure functions of the step: a resumed run computes the same
learning rate from its step counter and the config, so a changed config wins
on resume instead of a stale scheduler state. The live multiplier `lr_scale`
(saved in the checkpoint) multiplies whatever the schedule says.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..config import OptimConfig, ScheduleConfig
from .model import GPT


class CombinedOptimizer:
    """Several torch optimizers that step together and save as one state dict.

    Every group carries `base_lr` (its peak) and `name`; `set_lr` applies a
    factor to all of them at once.
    """

    def __init__(self, optimizers: dict[str, torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for opt in self.optimizers.values() for g in opt.param_groups]

    def set_lr(self, factor: float) -> None:
        for g in self.param_groups:
            g["lr"] = g["base_lr"] * factor

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for opt in self.optimizers.values():
            opt.step()

    def state_dict(self) -> dict[str, Any]:
        return {name: opt.state_dict() for name, opt in self.optimizers.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != set(self.optimizers):
            raise ValueError(f"optimizer state has parts {sorted(state)}, this run uses {sorted(self.optimizers)}")
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state[name])


def build_optimizer(model: GPT, cfg: OptimConfig, device_type: str) -> CombinedOptimizer:
    """AdamW alone, or Muon for hidden matrices plus AdamW for the rest."""
    roles = model.parameter_roles()
    params = dict(model.named_parameters())
    by_role: dict[str, list[torch.Tensor]] = {"embedding": [], "norm": [], "hidden": [], "head": []}
    for name, role in roles.items():
        by_role[role].append(params[name])
    no_decay = by_role["embedding"] + by_role["norm"]
    adamw_groups = [
        {"name": "no_decay", "params": no_decay, "weight_decay": 0.0, "base_lr": cfg.lr},
        {"name": "decay", "params": by_role["head"], "weight_decay": cfg.weight_decay, "base_lr": cfg.lr},
    ]
    optimizers: dict[str, torch.optim.Optimizer] = {}
    if cfg.name == "muon":
        optimizers["muon"] = torch.optim.Muon(
            [{"name": "hidden", "params": by_role["hidden"], "base_lr": cfg.muon_lr}],
            lr=cfg.muon_lr, weight_decay=cfg.weight_decay, momentum=cfg.muon_momentum, nesterov=True,
        )
    else:
        adamw_groups[1]["params"] = by_role["head"] + by_role["hidden"]
    adamw_groups = [g for g in adamw_groups if g["params"]]
    # Fused AdamW is one kernel per parameter on CUDA and on CPU alike (a quarter
    # of foreach's time on a CPU); elsewhere torch picks its default.
    optimizers["adamw"] = torch.optim.AdamW(
        adamw_groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, fused=(device_type in ("cuda", "cpu")) or None,
    )
    return CombinedOptimizer(optimizers)


def apply_hyperparams(optimizer: CombinedOptimizer, cfg: OptimConfig) -> None:
    """Set every group's peak LR, weight decay, betas, eps and momentum from the config.

    `load_state_dict` brings back the hyperparameters saved with each group;
    without this a resumed run would silently keep the checkpoint's values
    and ignore a changed config.
    """
    for g in optimizer.param_groups:
        hidden = g.get("name") == "hidden" and "momentum" in g
        g["base_lr"] = cfg.muon_lr if hidden else cfg.lr
        if g.get("name") in ("decay", "hidden"):
            g["weight_decay"] = cfg.weight_decay
        if hidden:
            g["momentum"] = cfg.muon_momentum
        else:
            g["betas"] = tuple(cfg.betas)
            g["eps"] = cfg.eps


def qk_clip(model: GPT, tau: float) -> int:
    """MuonClip's QK-clip, after an update: heads whose max logit exceeded tau are rescaled."""
    return model.apply_qk_clip(tau) if tau > 0 else 0


def lr_factor(step: int, sched: ScheduleConfig, total_steps: int) -> float:
    """Multiplier of the peak learning rate for optimizer step `step` (1-based)."""
    if sched.warmup_steps and step <= sched.warmup_steps:
        return step / sched.warmup_steps
    floor = sched.min_lr_ratio
    if sched.kind == "constant":
        return 1.0
    if sched.kind == "cosine":
        span = max(1, total_steps - sched.warmup_steps)
        progress = min(1.0, (step - sched.warmup_steps) / span)
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    decay_steps = max(1, round(sched.decay_fraction * total_steps))
    decay_start = max(sched.warmup_steps, total_steps - decay_steps)
    if step <= decay_start:
        return 1.0
    progress = min(1.0, (step - decay_start) / max(1, total_steps - decay_start))
    shape = {
        "linear": 1.0 - progress,
        "cosine": 0.5 * (1.0 + math.cos(math.pi * progress)),
        "sqrt": 1.0 - math.sqrt(progress),
    }[sched.decay_shape]
    return floor + (1.0 - floor) * shape


def learning_rate(step: int, base_lr: float, sched: ScheduleConfig, total_steps: int, lr_scale: float = 1.0) -> float:
    """The learning rate of a group with peak `base_lr` at `step`, times the live multiplier."""
    return base_lr * lr_factor(step, sched, total_steps) * lr_scale
