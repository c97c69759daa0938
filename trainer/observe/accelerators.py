"""Peak matrix throughput of common accelerators, the denominator of MFU.

Figures are dense bf16 tensor-core peaks in TFLOP/s per device (the vendors'
sparsity figures are twice these and are not what a dense transformer can
reach). Chips without bf16 (V100, T4) list their fp16 tensor peak. MFU
against these is the usual convention whatever dtype a run trains in: a
float32 run simply shows how much of the chip it leaves unused.

A device is recognised by the name its runtime reports (for CUDA,
`torch.cuda.get_device_name()`), matched case-insensitively against patterns
tried in order, most specific first. `telemetry.peak_tflops` overrides the
table; `check_peak_tflops` says, in one sentence, why a given figure is not
usable (a missing or absurd figure makes MFU unknown, never an error).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

MAX_PLAUSIBLE_TFLOPS = 10_000.0
"""No single accelerator is near 10 PFLOP/s dense; a larger figure is a unit mistake."""


@dataclass(frozen=True)
class Accelerator:
    """One row of the table."""

    name: str
    """Human name, e.g. `NVIDIA H100 SXM`."""
    pattern: str
    """Regular expression matched (case-insensitively) against the runtime's device name."""
    peak_tflops: float
    """Dense bf16 (or fp16 where bf16 is absent) tensor peak, TFLOP/s per device."""
    note: str = ""
    """Why the figure is what it is, where that is not obvious."""


# Order matters: variants (NVL, PCIe) before the generic name of the family.
ACCELERATORS: tuple[Accelerator, ...] = (
    Accelerator("NVIDIA GB200", r"gb200", 2500.0),
    Accelerator("NVIDIA B200", r"\bb200\b", 2250.0),
    Accelerator("NVIDIA H200 NVL", r"h200.*nvl", 835.0),
    Accelerator("NVIDIA H200", r"\bh200\b|gh200", 989.0, "the H100 SXM's compute with more memory"),
    Accelerator("NVIDIA H100 NVL", r"h100.*nvl", 835.0),
    Accelerator("NVIDIA H100 PCIe", r"h100.*pcie", 756.0),
    Accelerator("NVIDIA H100 SXM", r"\bh100\b", 989.0, "SXM is the default H100 when the name names no variant"),
    Accelerator("NVIDIA H800", r"\bh800\b", 989.0),
    Accelerator("NVIDIA H20", r"\bh20\b", 148.0),
    Accelerator("NVIDIA A100 80GB", r"a100.*80", 312.0),
    Accelerator("NVIDIA A100 40GB", r"\ba100\b", 312.0, "40 and 80 GB parts share the same tensor peak"),
    Accelerator("NVIDIA A800", r"\ba800\b", 312.0),
    Accelerator("NVIDIA L40S", r"l40s", 362.0),
    Accelerator("NVIDIA L40", r"\bl40\b", 181.0),
    Accelerator("NVIDIA L4", r"\bl4\b", 121.0),
    Accelerator("NVIDIA A10G", r"a10g", 70.0, "the AWS variant trades tensor throughput for CUDA-core throughput"),
    Accelerator("NVIDIA A10", r"\ba10\b", 125.0),
    Accelerator("NVIDIA A30", r"\ba30\b", 165.0),
    Accelerator("NVIDIA RTX A6000", r"rtx a6000", 154.8),
    Accelerator("NVIDIA V100", r"v100", 125.0, "fp16 tensor peak (SXM2): V100 has no bf16"),
    Accelerator("NVIDIA T4", r"\bt4\b", 65.0, "fp16 tensor peak: T4 has no bf16"),
    Accelerator("AMD Instinct MI325X", r"mi325x", 1307.4),
    Accelerator("AMD Instinct MI300X", r"mi300x", 1307.4),
    Accelerator("AMD Instinct MI250X", r"mi250x", 383.0),
    Accelerator("Google TPU v6e", r"tpu\s*v6", 918.0),
    Accelerator("Google TPU v5p", r"tpu\s*v5p", 459.0),
    Accelerator("Google TPU v5e", r"tpu\s*v5(e|\s*lite)", 197.0),
    Accelerator("Google TPU v4", r"tpu\s*v4", 275.0),
)


def lookup(device_name: str) -> Accelerator | None:
    """The table row for a runtime device name, or None when the device is not known."""
    text = (device_name or "").lower()
    for acc in ACCELERATORS:
        if re.search(acc.pattern, text):
            return acc
    return None


def check_peak_tflops(value: Any) -> str | None:
    """None if `value` is a usable peak in TFLOP/s, else one sentence saying why not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"peak_tflops must be a number of TFLOP/s (e.g. 989 for an H100 SXM), got {value!r}"
    if not math.isfinite(value) or value <= 0:
        return f"peak_tflops must be a positive number of TFLOP/s, got {value!r}"
    if value > MAX_PLAUSIBLE_TFLOPS:
        return (f"peak_tflops {value:g} is beyond any single accelerator ({MAX_PLAUSIBLE_TFLOPS:,.0f} TFLOP/s); "
                "give TFLOP/s per device, not FLOP/s or a whole cluster's figure")
    return None


@dataclass(frozen=True)
class PeakResolution:
    """What MFU will be computed against, or why it cannot be."""

    tflops: float | None
    """Peak TFLOP/s per device; None when MFU is unknown."""
    source: str
    """`config`, `table: <name>`, or `unknown`."""
    problem: str | None = None
    """Why MFU is unknown (one sentence for a warning line); None when known."""


def resolve_peak(device_name: str, override: Any = None) -> PeakResolution:
    """The peak to use: the override when given and sane, else the table's row, else unknown.

    An unusable override is reported and not replaced by the table: a person
    who set a figure should learn it was wrong rather than get a silent default.
    """
    if override is not None:
        problem = check_peak_tflops(override)
        if problem:
            return PeakResolution(None, "unknown", f"MFU unknown: telemetry.{problem}")
        return PeakResolution(float(override), "config")
    acc = lookup(device_name)
    if acc is None:
        return PeakResolution(None, "unknown", f"MFU unknown: no peak FLOP/s known for device {device_name!r}; "
                                               "set telemetry.peak_tflops to the device's dense bf16 TFLOP/s")
    return PeakResolution(acc.peak_tflops, f"table: {acc.name}")


def mfu(tokens_per_s_per_device: float, flops_per_token: float, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation: achieved model FLOP/s over peak, per device; None when the peak is unknown."""
    if peak_tflops is None or peak_tflops <= 0:
        return None
    return tokens_per_s_per_device * flops_per_token / (peak_tflops * 1e12)
