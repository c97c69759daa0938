"""Pure pieces of scale-out: the derived hang timeout, Slurm facts, advice in steps."""

from __future__ import annotations

import pytest
from conftest import ROOT

from logbook.core.errors import UsageError
from trainer.observe.advice_cb import advised_steps
from trainer.config import load_train_config
from logbook.launch.slurm import slurm_info
from trainer.observe.straggler import slowest_rank
from trainer.observe.watchdog import derived_timeout


def test_hang_timeout_follows_the_median_step_time_above_its_floor():
    assert derived_timeout(2.0, 10.0, []) == 2.0
    assert derived_timeout(2.0, 10.0, [0.01, 0.02, 5.0]) == 2.0  # one slow save does not move the median
    assert derived_timeout(2.0, 10.0, [0.5, 0.6, 0.7]) == 6.0


def test_a_slow_rank_is_measured_against_the_median_of_the_others():
    # Two ranks: against a median over both (their mean) a 3x slower rank would read 1.5x, and no rank could
    # ever pass a threshold of 2.
    assert slowest_rank([0.1, 0.3]) == (1, pytest.approx(3.0), 0.1)
    assert slowest_rank([0.1, 0.1, 0.4, 0.1]) == (2, pytest.approx(4.0), 0.1)
    assert slowest_rank([0.2, 0.2]) == (0, 1.0, 0.2)  # all equal: nobody is slow
    assert slowest_rank([0.0, 0.0]) == (0, 1.0, 0.0)  # nothing measured yet
    assert slowest_rank([0.5]) == (0, 1.0, 0.5)  # a single rank is never a straggler


def test_slurm_facts_are_recorded_only_under_slurm():
    assert slurm_info({"PATH": "/bin"}) is None
    env = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "gpu[01-04]",
           "SLURM_ARRAY_TASK_ID": "3", "SLURM_RESTART_COUNT": "1", "SLURM_JOB_PARTITION": ""}
    assert slurm_info(env) == {"job_id": 4242, "step_id": 0, "nodelist": "gpu[01-04]", "array_task_id": 3,
                               "restart_count": 1}


def test_advised_interval_in_steps_is_bounded_by_the_run():
    assert advised_steps(60.0, 0.5, 1000) == 120
    assert advised_steps(0.01, 0.5, 1000) == 1
    assert advised_steps(1e6, 0.5, 1000) == 1000


def test_fsdp_with_gradient_accumulation_is_refused_with_the_reason():
    with pytest.raises(UsageError, match="grad_accum") as exc:
        load_train_config(ROOT / "configs" / "micro-test.yaml",
                          ["train.parallel=fsdp", "train.device=cuda", "train.grad_accum=2"])
    assert "no_sync" in str(exc.value)
    cfg = load_train_config(ROOT / "configs" / "micro-test.yaml", ["train.parallel=fsdp", "train.device=cuda"])
    assert cfg.train.grad_accum == 1
