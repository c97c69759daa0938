"""The accelerator table: device names as runtimes report them, overrides, and absurd figures."""

from __future__ import annotations

import math

import pytest

from trainer.observe.accelerators import ACCELERATORS, check_peak_tflops, lookup, mfu, resolve_peak


@pytest.mark.parametrize(
    ("reported", "name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 989.0),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", "NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", "NVIDIA H200", 989.0),
        ("NVIDIA GH200 480GB", "NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB", 312.0),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB", 312.0),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB", 312.0),
        ("NVIDIA L4", "NVIDIA L4", 121.0),
        ("NVIDIA L40S", "NVIDIA L40S", 362.0),
        ("NVIDIA A10G", "NVIDIA A10G", 70.0),
        ("NVIDIA A10", "NVIDIA A10", 125.0),
        ("Tesla V100-SXM2-16GB", "NVIDIA V100", 125.0),
        ("Tesla T4", "NVIDIA T4", 65.0),
        ("AMD Instinct MI300X", "AMD Instinct MI300X", 1307.4),
        ("TPU v5e", "Google TPU v5e", 197.0),
        ("TPU v5 lite", "Google TPU v5e", 197.0),
        ("TPU v5p", "Google TPU v5p", 459.0),
        ("NVIDIA H20", "NVIDIA H20", 148.0),
    ],
)
def test_reported_device_names_find_their_row(reported, name, tflops):
    acc = lookup(reported)
    assert acc is not None and acc.name == name and acc.peak_tflops == tflops


@pytest.mark.parametrize("reported", ["cpu", "", "Apple M2", "NVIDIA GeForce GT 710"])
def test_unknown_devices_have_no_row(reported):
    assert lookup(reported) is None


def test_every_row_is_plausible_and_named_once():
    names = [a.name for a in ACCELERATORS]
    assert len(names) == len(set(names))
    assert all(check_peak_tflops(a.peak_tflops) is None for a in ACCELERATORS)


@pytest.mark.parametrize("bad", [0, -5, 10_001, 1e15, float("nan"), float("inf"), "fast", True, [989]])
def test_absurd_or_non_numeric_peaks_are_explained(bad):
    problem = check_peak_tflops(bad)
    assert problem and "peak_tflops" in problem


def test_a_sane_override_wins_over_the_table():
    res = resolve_peak("NVIDIA H100 80GB HBM3", 500)
    assert res.tflops == 500.0 and res.source == "config" and res.problem is None


def test_a_bad_override_makes_mfu_unknown_rather_than_falling_back_silently():
    res = resolve_peak("NVIDIA H100 80GB HBM3", 989e12)
    assert res.tflops is None and res.problem.startswith("MFU unknown: telemetry.peak_tflops")
    assert "TFLOP/s per device" in res.problem


def test_an_unknown_device_without_override_says_how_to_fix_it():
    res = resolve_peak("cpu")
    assert res.tflops is None and "set telemetry.peak_tflops" in res.problem


def test_mfu_is_achieved_model_flops_over_peak():
    # 1,000 tokens/s at 6e9 FLOPs a token is 6 TFLOP/s: 6/989 of an H100.
    assert mfu(1000.0, 6e9, 989.0) == pytest.approx(6.0 / 989.0)
    assert mfu(1000.0, 6e9, None) is None
    assert math.isclose(mfu(2.0, 0.5e12, 1.0), 1.0)
