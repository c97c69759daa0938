"""A decoder-only GPT with the stabilisers large runs settled on, on PyTorch's own ops.

RMSNorm everywhere, QK-norm with per-head gains (so QK-clip can rescale one
head), a z-loss reported apart from the cross-entropy, no biases, causal
attention, optional tied embeddings. Every op is PyTorch's: `F.rms_norm`,
`F.gelu`, `F.scaled_dot_product_attention` (or the softmax written out, as
`model.attention_backend` says), and one `torch.logsumexp` for the loss and
its z-loss; speed beyond eager comes from `train.compile`.
Every parameter has a role (embedding, norm, hidden, head) from which the
optimizer builds its groups: embeddings and norms never get weight decay,
and Muon only sees hidden matrices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig

# Caps the transient logits tensor of the max-logit probe at 16M elements.
_PROBE_ELEMS = 1 << 24


@dataclass
class ModelOutput:
    logits: torch.Tensor
    loss: torch.Tensor | None = None
    """What is optimised: cross-entropy plus z-loss."""
    ce_loss: torch.Tensor | None = None
    """Cross-entropy alone: the number to report and compare."""
    z_loss: torch.Tensor | None = None
    """The z-loss term (already multiplied by its coefficient)."""


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.dropout = cfg.dropout
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:
            # Per-head gains (not one vector shared by all heads) so that
            # QK-clip can shrink exactly the heads whose logits run away.
            self.q_gain = nn.Parameter(torch.ones(cfg.n_head, self.head_dim))
            self.k_gain = nn.Parameter(torch.ones(cfg.n_head, self.head_dim))
        self.backend = cfg.attention_backend
        self.track_max_logit = False
        self.max_logit: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H, hd = self.n_head, self.head_dim
        q, k, v = self.qkv(x).view(B, T, 3, H, hd).unbind(2)  # each [B, T, H, hd]
        if self.qk_norm:
            # The gains are [H, hd], one per head: F.rms_norm's weight would be one for all heads.
            q = F.rms_norm(q, (hd,)) * self.q_gain
            k = F.rms_norm(k, (hd,)) * self.k_gain
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.track_max_logit:
            self.max_logit = _max_logit_per_head(q.detach(), k.detach())
        y = causal_attention(q, k, v, self.dropout if self.training else 0.0, self.backend)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return _dropout(self.proj(y), self.dropout, self.training)

    @torch.no_grad()
    def clip_qk(self, factor: torch.Tensor) -> None:
        """Scale head h's queries and keys by sqrt(factor[h]) each (logits by factor[h])."""
        s = factor.sqrt().to(self.qkv.weight.dtype)
        if self.qk_norm:
            self.q_gain.mul_(s[:, None])
            self.k_gain.mul_(s[:, None])
            return
        C, hd = self.n_head * self.head_dim, self.head_dim
        w = self.qkv.weight  # rows: [q heads | k heads | v heads]
        w[:C].view(self.n_head, hd, C).mul_(s[:, None, None])
        w[C : 2 * C].view(self.n_head, hd, C).mul_(s[:, None, None])


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    # F.dropout with p=0 still makes a mask and a copy in training mode.
    return F.dropout(x, p, training) if p and training else x


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                     backend: str = "sdpa") -> torch.Tensor:
    """softmax(q k^T / sqrt(hd), causal) v for [B, H, T, hd] tensors, with dropout on the weights if dropout_p.

    `backend` is `model.attention_backend`: "sdpa" lets PyTorch pick its
    fused kernel for the device; "math" writes the softmax out (nanoGPT's
    manual path), a T x T matrix per head: slower, and the reference.
    """
    if backend == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    att = _dropout(F.softmax(att, dim=-1), dropout_p, dropout_p > 0)
    return att @ v


def _max_logit_per_head(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The largest causal attention logit of each head over the batch: shape [n_head]."""
    B, H, T, hd = q.shape
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    chunk = max(1, _PROBE_ELEMS // max(1, H * T * T))
    out = torch.full((H,), float("-inf"), device=q.device)
    for i in range(0, B, chunk):
        logits = (q[i : i + chunk].float() @ k[i : i + chunk].float().transpose(-1, -2)) / math.sqrt(hd)
        logits.masked_fill_(mask, float("-inf"))
        out = torch.maximum(out, logits.amax(dim=(0, 2, 3)))
    return out


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, cfg.mlp_ratio * cfg.n_embd, bias=False)
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.n_embd, cfg.n_embd, bias=False)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _dropout(self.proj(F.gelu(self.fc(x))), self.dropout, self.training)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.n_embd)
        self.attn = Attention(cfg)
        self.norm2 = nn.RMSNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = nn.RMSNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.apply(self._init)
        # GPT-2: residual projections scaled down so the stream's variance
        # does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=cfg.init_std / math.sqrt(2 * cfg.n_layer))

    def _init(self, m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=self.cfg.init_std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> ModelOutput:
        T = idx.shape[1]
        if T > self.cfg.block_size:
            raise ValueError(f"sequence of {T} tokens exceeds block_size {self.cfg.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = _dropout(self.wte(idx) + self.wpe(pos), self.cfg.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.norm_f(x))
        if targets is None:
            return ModelOutput(logits=logits)
        # The loss in float32 even under bf16 autocast: the log-partition of
        # a 50k vocabulary loses too much in 8 bits of mantissa.
        # `.float()` is free when the logits already are float32.
        flat = logits.float().view(-1, logits.size(-1))
        ce, z = cross_entropy_z(flat, targets.reshape(-1), self.cfg.z_loss)
        # Without a z-loss the loss is the cross-entropy itself. Adding the zero anyway
        # made torch.compile (2.13) return a loss cut off from the graph, since
        # `ce.detach()` is returned beside it: backward then fails.
        loss = ce + z if self.cfg.z_loss else ce
        return ModelOutput(logits=logits, loss=loss, ce_loss=ce.detach(), z_loss=z.detach())

    # --- what the optimizer and the telemetry need -------------------------

    def parameter_roles(self) -> dict[str, str]:
        """name -> embedding | norm | hidden | head, for every (deduplicated) parameter."""
        roles: dict[str, str] = {}
        for name, p in self.named_parameters():  # tied weights appear once, as wte
            if name.startswith(("wte.", "wpe.")):
                roles[name] = "embedding"
            elif name.startswith("lm_head."):
                roles[name] = "head"
            elif p.ndim < 2 or name.endswith(("_gain",)):
                roles[name] = "norm"
            else:
                roles[name] = "hidden"
        return roles

    def set_max_logit_tracking(self, on: bool) -> None:
        for block in self.blocks:
            attn = block.attn
            # Called every step: a module's __setattr__ is slow, so only what changes is set.
            if attn.track_max_logit != on:
                attn.track_max_logit = on
            if not on and attn.max_logit is not None:
                attn.max_logit = None

    def max_logits(self) -> list[torch.Tensor]:
        """Per layer, the last tracked max attention logit per head."""
        return [b.attn.max_logit for b in self.blocks if b.attn.max_logit is not None]

    @torch.no_grad()
    def apply_qk_clip(self, tau: float) -> int:
        """MuonClip: shrink heads whose tracked max logit exceeds tau; returns heads clipped."""
        clipped = 0
        for block in self.blocks:
            m = block.attn.max_logit
            if m is None:
                continue
            over = m > tau
            if bool(over.any()):
                factor = torch.where(over, tau / m.clamp(min=1e-6), torch.ones_like(m))
                block.attn.clip_qk(factor)
                clipped += int(over.sum())
        return clipped

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; by default without the position embedding (as nanoGPT counts)."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.wpe.weight.numel() if non_embedding else n

    def flops_per_token(self) -> int:
        """Training FLOPs per token: 6N + 12 * layers * context * width."""
        c = self.cfg
        return 6 * self.num_params() + 12 * c.n_layer * c.block_size * c.n_embd


def cross_entropy_z(logits: torch.Tensor, targets: torch.Tensor, z_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy, z_coef * mean squared log-partition) of [N, V] logits against N class ids.

    One log-sum-exp serves both terms: the cross-entropy is lse - logit[target]
    (what `F.cross_entropy` computes), the z-loss lse squared.
    """
    lse = torch.logsumexp(logits, dim=-1)
    ce = (lse - logits.gather(1, targets.unsqueeze(1)).squeeze(1)).mean()
    if not z_coef:
        return ce, torch.zeros((), device=ce.device)
    return ce, z_coef * lse.square().mean()


def flops_per_token(cfg: ModelConfig, num_params: int) -> int:
    """The same estimate without building a model: 6N + 12 * L * T * d."""
    return 6 * num_params + 12 * cfg.n_layer * cfg.block_size * cfg.n_embd
