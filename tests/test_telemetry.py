"""Telemetry in real training runs: the step-time split, throughput, MFU, memory, and bad peaks."""

from __future__ import annotations

import pytest

from conftest import ROOT
from logbook.core.errors import UsageError


def _train(repo, run_id, telemetry, overrides=(), extra=()):
    from logbook.eventlog.sink import read_metrics
    from trainer.config import load_train_config
    from trainer.startup import build_trainer

    cfg = load_train_config(ROOT / "configs" / "micro-test.yaml",
                            ["train.steps=20", "train.log_every=5", "checkpoint.every=10", *overrides])
    trainer = build_trainer(cfg, project_root=repo, run_id=run_id, callbacks=[telemetry, *extra], interactive=False)
    trainer.fit()
    rows = read_metrics(repo / "entries" / "runs" / run_id)
    return trainer, rows


def _telemetry_rows(rows):
    return [r for r in rows if "window_steps" in r]


@pytest.mark.slow
def test_log_steps_get_a_step_time_split_that_adds_up(logbook_repo):
    from trainer.observe.telemetry import Telemetry, TelemetryConfig

    from trainer.observe.callbacks import Callback

    blocked: dict[int, float] = {}

    class Probe(Callback):
        name, priority = "probe", 6

        def post_step(self, step, metrics):
            blocked[step] = self.trainer.checkpointer.blocking_s_total

    tele = Telemetry(TelemetryConfig(peak_tflops=0.05), say=lambda line: None)
    trainer, rows = _train(logbook_repo, "tele", tele, ["checkpoint.background=false"], [Probe()])
    tele_rows = _telemetry_rows(rows)
    assert [r["step"] for r in tele_rows] == [5, 10, 15, 20]
    for r in tele_rows:
        assert r["window_steps"] == 5 and r["attempt"] == 1
        parts = r["data_s"] + r["fwd_bwd_s"] + r["optim_s"] + r["ckpt_s"] + r["other_s"]
        assert parts == pytest.approx(r["step_s"], rel=1e-9)
        assert r["data_s"] > 0 and r["fwd_bwd_s"] > 0 and r["optim_s"] > 0
        assert r["tokens_per_s"] == pytest.approx(5 * trainer.cfg.tokens_per_step / (5 * r["step_s"]))
        # MFU is the achieved model FLOP/s over the configured peak.
        assert r["tflops"] == pytest.approx(r["tokens_per_s"] * trainer.raw_model.flops_per_token() / 1e12)
        assert r["mfu"] == pytest.approx(r["tflops"] / 0.05)
        assert r["peak_mem_mb"] > 10
    by_step = {r["step"]: r for r in tele_rows}
    # The synchronous save after step 10 blocks the window that follows it, and only that one.
    assert by_step[15]["ckpt_s"] > 0 and by_step[10]["ckpt_s"] == 0 and by_step[20]["ckpt_s"] == 0
    assert by_step[15]["ckpt_s"] * 5 == pytest.approx(blocked[15] - blocked[10], rel=1e-9)
    # The loop's own rows are still there, with the telemetry's keys added for later callbacks.
    assert [r["step"] for r in rows if "loss" in r] == [5, 10, 15, 20]
    assert tele.last["window_steps"] == 5
    assert "batch" not in vars(trainer.data) and "take" not in vars(trainer.data)  # unwrapped at close


@pytest.mark.slow
@pytest.mark.parametrize("peak", ["fast", 1e15])
def test_a_bad_peak_warns_once_and_training_goes_on_without_mfu(logbook_repo, peak):
    from trainer.observe.telemetry import Telemetry, TelemetryConfig

    said: list[str] = []
    tele = Telemetry(TelemetryConfig(peak_tflops=peak), say=said.append)
    trainer, rows = _train(logbook_repo, "badpeak", tele)
    assert trainer.step == 20
    assert len(said) == 1 and said[0].startswith("telemetry: MFU unknown: telemetry.peak_tflops")
    tele_rows = _telemetry_rows(rows)
    assert len(tele_rows) == 4 and all("mfu" not in r and r["tflops"] > 0 for r in tele_rows)


@pytest.mark.slow
def test_an_unknown_device_without_a_peak_leaves_mfu_out_and_says_how_to_fix_it(logbook_repo):
    from trainer.observe.telemetry import Telemetry

    said: list[str] = []
    _, rows = _train(logbook_repo, "cpu", Telemetry(say=said.append))
    assert said == ["telemetry: MFU unknown: no peak FLOP/s known for device 'cpu'; "
                    "set telemetry.peak_tflops to the device's dense bf16 TFLOP/s"]
    assert all("mfu" not in r for r in rows)


@pytest.mark.slow
def test_mode_off_measures_nothing_and_wraps_nothing(logbook_repo):
    from trainer.observe.telemetry import Telemetry, TelemetryConfig

    tele = Telemetry(TelemetryConfig(mode="off"), say=lambda line: pytest.fail(line))
    trainer, rows = _train(logbook_repo, "off", tele)
    assert _telemetry_rows(rows) == [] and tele.last == {}
    assert trainer.data.batch.__func__ is type(trainer.data).batch


def test_unknown_mode_is_a_config_error_naming_the_key():
    from trainer.observe.telemetry import TelemetryConfig

    with pytest.raises(UsageError) as e:
        TelemetryConfig(mode="verbose").validate("telemetry")
    assert "`telemetry.mode`" in e.value.message and "detailed" in e.value.message
    TelemetryConfig().validate("telemetry")


def test_peak_memory_on_the_host_is_the_process_max_rss():
    import resource

    from trainer.observe.telemetry import peak_memory_mb

    class Cpu:
        type = "cpu"

    assert peak_memory_mb(Cpu()) == pytest.approx(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, rel=0.05)
