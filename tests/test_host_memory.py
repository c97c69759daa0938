"""The memory under a CPU step: freed activations kept by malloc, and huge pages asked for by the launcher and recorded."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
import torch

from logbook.launch.launcher import HUGE_PAGES, _child_env, with_huge_pages
from trainer import host_memory
from trainer.config import ModelConfig
from trainer.host_memory import heap_pages, keep_freed_memory
from trainer.model import GPT


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_with_freed_memory_kept_a_training_step_no_longer_faults_its_activations_in():
    assert keep_freed_memory()
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=1, n_head=4, n_embd=128, block_size=128, vocab_size=256))
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randint(0, 256, (16, 128))

    def faults_of_a_step() -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        model(x, x).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    for _ in range(3):  # the first steps map the heap
        faults_of_a_step()
    # Without it, glibc hands the 1-4 MB activations back and faults them in again:
    # hundreds to thousands of pages a step.
    assert min(faults_of_a_step() for _ in range(4)) < 50


def test_the_launcher_asks_glibc_for_huge_pages_and_leaves_a_users_own_setting_alone():
    assert with_huge_pages(None) == with_huge_pages("") == HUGE_PAGES == "glibc.malloc.hugetlb=1"
    assert with_huge_pages("glibc.malloc.arena_max=2") == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert with_huge_pages("glibc.malloc.hugetlb=0:glibc.malloc.arena_max=2") == "glibc.malloc.hugetlb=0:glibc.malloc.arena_max=2"
    assert _child_env()["GLIBC_TUNABLES"] == with_huge_pages(os.environ.get("GLIBC_TUNABLES"))


def test_heap_pages_says_huge_only_where_the_kernel_and_glibc_both_give_them_and_why_not_elsewhere(tmp_path,
                                                                                                   monkeypatch):
    mode = tmp_path / "enabled"
    asked = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"}
    monkeypatch.setattr(host_memory, "_glibc_version", lambda: (2, 36))
    mode.write_text("always [madvise] never\n")
    assert heap_pages(asked, mode) == "huge"
    assert heap_pages({}, mode) == "4 KB (glibc.malloc.hugetlb not set)"
    assert heap_pages({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, mode) == "4 KB (glibc.malloc.hugetlb=0)"
    mode.write_text("always madvise [never]\n")
    assert heap_pages(asked, mode) == "4 KB (transparent huge pages: never)"
    mode.write_text("[always] madvise never\n")
    assert heap_pages({}, mode) == "huge"  # the kernel gives them without being asked
    assert heap_pages(asked, tmp_path / "absent") == "4 KB (transparent huge pages: not offered by this kernel)"
    mode.write_text("always [madvise] never\n")
    monkeypatch.setattr(host_memory, "_glibc_version", lambda: (2, 31))
    assert heap_pages(asked, mode) == "4 KB (glibc 2.31 has no glibc.malloc.hugetlb)"
    monkeypatch.setattr(host_memory, "_glibc_version", lambda: None)
    assert heap_pages(asked, mode) == "4 KB (not glibc)"


_TOUCH_64_MB = """
buf = bytearray(64 << 20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
print(sum(int(line.split()[1]) for line in open("/proc/self/smaps_rollup") if line.startswith("AnonHugePages")))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="Linux's memory accounting")
def test_a_process_started_as_the_launcher_starts_the_trainer_gets_the_huge_pages_its_record_claims():
    env = _child_env()
    claim = heap_pages(env)
    if claim != "huge":
        pytest.skip(f"no huge pages on this machine: {claim}")
    huge_kb = int(subprocess.run([sys.executable, "-c", _TOUCH_64_MB], env=env, capture_output=True, text=True,
                                 check=True, timeout=60).stdout)
    plain = dict(env, GLIBC_TUNABLES="glibc.malloc.hugetlb=0")
    plain_kb = int(subprocess.run([sys.executable, "-c", _TOUCH_64_MB], env=plain, capture_output=True, text=True,
                                  check=True, timeout=60).stdout)
    assert huge_kb >= 32 << 10  # most of the 64 MB on 2 MB pages
    if heap_pages(plain) != "huge":  # under THP `always` both get them
        assert plain_kb < huge_kb
