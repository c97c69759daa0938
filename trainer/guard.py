"""The divergence guard: catch bad steps before the update and climb a response ladder.

Detection. After the backward pass and before `optimizer.step()`, every step
hands its loss and gradient norm to `Guard.observe`. A NaN or inf in either is
caught at once (the update must not happen). A finite loss is a spike when it
lies more than `spike_sigma` robust sigmas above the median of the last
`window` losses, sigma being 1.4826 x the median absolute deviation (floored
at `min_rel_sigma` x |median| so a flat series cannot make every wobble a
spike). The gradient norm is judged the same way on its logarithm, against
`grad_norm_sigma`: its noise is multiplicative and heavy-tailed, so "eight
sigmas" means "far more times larger than usual than it ever is by chance".
Spikes are judged only after `warmup` finite values of that metric. Non-finite values never enter the history; finite spikes do, so
a genuine change of level (a new data stage) is absorbed instead of flagged
forever, and the median and MAD barely move for a handful of outliers.

The ladder, per run (`GuardConfig`):

1. skip: the update is dropped. The loop does not call `optimizer.step()`, so
   Adam's step counters (and bias correction) count real updates only; the
   loop's own step counter, the schedule position (a function of that counter)
   and the data position still advance, so a skipped batch is not retried and
   the learning-rate curve keeps its shape.
2. rollback: after `rollback_after` counted spikes within `rollback_window`
   steps, restore the newest checkpoint at or before `to_step`, never train
   on batches `skip_range` again (the first spike's batch onwards, at least
   `skip_batches` of them, always including the latest spike's batch), and
   multiply the learning rate by `lr_factor` (a multiplier over the schedule,
   which the schedule cannot overwrite).
3. abort: the rollback that would exceed `max_rollbacks` aborts the run.

A counted spike starts a `cooldown`: further spikes within it are skipped but
not counted again, so one burst is one incident and escalation needs the
problem to recur.

State. `state_dict()` holds the detector's histories and the ladder (counted
spikes, rollbacks, skip ranges). A rollback resets the detector (the restored
model is judged afresh) but never the ladder: the guard marks itself as
rolling back, and the checkpoint load that performs the rollback keeps the
live ladder instead of the older one in the checkpoint. Otherwise the count
of rollbacks would rewind with the model and `max_rollbacks` never trip.

Syncs. `observe` takes Python floats. `metrics_to_floats` turns the loss and
gradient-norm tensors into floats with one host sync for both; when the loop
has already synced them for logging, pass those floats and the guard adds
none. Every rank must take the same decision: feed the rank-averaged loss and
the global gradient norm, and `agree` (called inside `observe` when a process
group is initialised) all-reduces the decision code so that one rank's alarm
is every rank's.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from logbook.control import SETTINGS, coerce_value
from logbook.errors import UsageError
from logbook.plan import judge_against_plan

from .callbacks import Action, Callback

if TYPE_CHECKING:
    import torch

STATE_VERSION = 1
MIN_HISTORY = 8
MAD_TO_SIGMA = 1.4826  # sigma of a normal distribution from its median absolute deviation
METRICS = ("loss", "grad_norm")


@dataclass
class GuardConfig:
    """The divergence guard: what counts as a spike, and what to do about it."""

    enabled: bool = True
    """Watch every step; false turns detection and the ladder off entirely."""
    window: int = 128
    """Finite values per metric in the rolling window (median and MAD)."""
    warmup: int = 32
    """Finite values of a metric needed before its spikes are judged; NaN/inf is always caught."""
    spike_sigma: float = 6.0
    """A loss more than this many robust sigmas above its rolling median is a spike."""
    grad_norm_sigma: float = 8.0
    """The same for the gradient norm, judged on its logarithm: its noise is multiplicative and heavy-tailed."""
    min_rel_sigma: float = 0.005
    """Floor on sigma as a relative change (of |median| for the loss), so a flat series does not flag noise."""
    check_grad_norm: bool = True
    """Judge the gradient norm as well as the loss."""
    cooldown: int = 10
    """Steps after a counted spike in which further spikes are skipped but not counted again."""
    rollback_after: int = 2
    """Counted spikes within `rollback_window` steps that trigger a rollback (1: the first one does)."""
    rollback_window: int = 500
    """Steps over which spikes are counted towards a rollback."""
    rollback_steps: int = 0
    """Roll back to a checkpoint at least this many steps before the first spike (0: the newest before it)."""
    skip_batches: int = 100
    """Batches never trained on after a rollback, from the first spike's batch on."""
    lr_factor: float = 0.9
    """Multiplier applied to the learning-rate scale at each rollback (1.0 leaves it alone)."""
    max_rollbacks: int = 3
    """Rollbacks allowed; the next rollback-worthy incident aborts the run."""
    agree_across_ranks: bool = True
    """All-reduce each decision across ranks (one tiny collective per step when distributed)."""
    replay: bool = False
    """Re-run a flagged step from its saved RNG state and batch to label it reproducible or transient."""

    def validate(self, where: str = "guard") -> None:
        """Ranges come from the live-change allow-list, so a live change and the file agree."""
        for f in dataclasses.fields(self):
            key = f"guard.{f.name}"
            if key in SETTINGS:
                try:
                    coerce_value(key, getattr(self, f.name))
                except UsageError as e:
                    raise UsageError("config: " + e.message.replace(f"`{key}`", f"`{where}.{f.name}`"), hint=e.hint) from None
        if isinstance(self.min_rel_sigma, bool) or not 0 <= self.min_rel_sigma < 1:
            raise UsageError(f"config: `{where}.min_rel_sigma` must be in [0, 1), got {self.min_rel_sigma}")


class Verdict(enum.IntEnum):
    """What the loop must do with this step; a larger code is a stronger response."""

    OK = 0
    SKIP = 1
    ROLLBACK = 2
    ABORT = 3


@dataclass
class Signal:
    """One metric that looked wrong at this step."""

    metric: str
    value: float
    baseline: float | None
    """Rolling median (None before the window has any value)."""
    scale: float | None
    """Robust sigma used (for the gradient norm: of its natural logarithm)."""
    z: float
    """Robust sigmas above the median (inf for NaN/inf)."""
    nonfinite: bool
    threshold: float | None = None
    """The threshold in sigmas that `z` exceeded."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def z_of(self, value: float) -> float:
        """Where another value of this metric would lie, against the same baseline and scale."""
        if not math.isfinite(value) or self.baseline is None or not self.scale:
            return math.inf
        if self.metric == "grad_norm":
            return (_log(value) - _log(self.baseline)) / self.scale
        return (value - self.baseline) / self.scale


@dataclass
class Decision:
    """The guard's ruling on one step, with the event payloads that record it."""

    verdict: Verdict
    step: int
    batch_id: int | None = None
    reason: str = ""
    signals: list[Signal] = field(default_factory=list)
    counted: bool = False
    """The spike counts towards a rollback (it is outside the cooldown)."""
    spike_steps: list[int] = field(default_factory=list)
    """Steps of the counted spikes in the rollback window, this one last if it counts."""
    to_step: int | None = None
    """ROLLBACK: restore the newest checkpoint at or before this step."""
    skip_range: tuple[int, int] | None = None
    """ROLLBACK: batch ids (inclusive) never trained on again."""
    lr_factor: float = 1.0
    """ROLLBACK: the factor applied to the learning-rate multiplier."""
    lr_scale_before: float = 1.0
    """The learning-rate multiplier in force when the step was judged."""
    lr_scale: float | None = None
    """ROLLBACK: the learning-rate multiplier to continue with."""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(kind, payload) in the order to emit them."""

    @property
    def ok(self) -> bool:
        return self.verdict == Verdict.OK

    def payload(self, kind: str) -> dict[str, Any] | None:
        """The payload of the event `kind`, to complete before emitting (e.g. a rollback's path)."""
        return next((data for k, data in self.events if k == kind), None)


def robust_stats(values: list[float], min_rel_sigma: float) -> tuple[float, float]:
    """(median, robust sigma) of `values`."""
    s = sorted(values)
    med = _median_sorted(s)
    mad = _median_sorted(sorted(abs(v - med) for v in s))
    return med, max(MAD_TO_SIGMA * mad, min_rel_sigma * abs(med), 1e-12)


def _log(x: float) -> float:
    return math.log(max(x, 1e-12))


def _median_sorted(s: list[float]) -> float:
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


class Guard:
    """A pure decision engine: feed it each step's numbers, act on its `Decision`."""

    def __init__(self, cfg: GuardConfig, rules: Iterable[Any] | None = None) -> None:
        self.cfg = cfg
        self.rules = list(rules or [])
        """The preregistration's contingency rules, to judge each action against."""
        self.history: dict[str, list[float]] = {m: [] for m in METRICS}
        self.tick = 0
        """Steps observed, ever (it does not rewind with a rollback)."""
        self.spikes: list[dict[str, int | None]] = []
        """Counted spikes still inside the rollback window: {tick, step, batch}."""
        self.last_counted_tick: int | None = None
        self.rollbacks = 0
        self.skip_ranges: list[list[int]] = []
        self.aborted = False
        self.rolling_back = False

    # --- the decision -----------------------------------------------------------

    def observe(self, step: int, loss: float, grad_norm: float | None, batch_id: int | None = None,
                *, lr_scale: float = 1.0, group: Any = None) -> Decision:
        """Judge step `step` (its update not yet applied) and commit the decision to the ladder."""
        self.rolling_back = False  # a rollback, if any, is done by the time the next step is judged
        if not self.cfg.enabled:
            return Decision(Verdict.OK, step, batch_id)
        proposal = self._judge(step, float(loss), None if grad_norm is None else float(grad_norm), batch_id, lr_scale)
        decision = agree(proposal, group) if self.cfg.agree_across_ranks else proposal
        self._commit(decision)
        self._describe(decision)
        self.tick += 1
        return decision

    def _judge(self, step: int, loss: float, grad_norm: float | None, batch_id: int | None, lr_scale: float) -> Decision:
        values = {"loss": loss, "grad_norm": grad_norm if self.cfg.check_grad_norm else None}
        signals = [s for m, v in values.items() if v is not None and (s := self._signal(m, v)) is not None]
        for m, v in values.items():
            if v is not None and math.isfinite(v):
                hist = self.history[m]
                hist.append(v)
                del hist[: max(0, len(hist) - self.cfg.window)]
        if not signals:
            return Decision(Verdict.OK, step, batch_id, lr_scale_before=lr_scale)
        signals.sort(key=lambda s: (not s.nonfinite, -s.z))
        counted = self.last_counted_tick is None or self.tick - self.last_counted_tick >= self.cfg.cooldown
        window = [s for s in self.spikes if self.tick - int(s["tick"]) < self.cfg.rollback_window]
        if counted:
            window.append({"tick": self.tick, "step": step, "batch": batch_id})
        d = Decision(Verdict.SKIP, step, batch_id, signals=signals, counted=counted,
                     spike_steps=[int(s["step"]) for s in window], lr_scale_before=lr_scale)
        if counted and len(window) >= self.cfg.rollback_after:
            if self.rollbacks >= self.cfg.max_rollbacks:
                d.verdict = Verdict.ABORT
            else:
                d.verdict = Verdict.ROLLBACK
                first = window[0]
                d.to_step = max(0, int(first["step"]) - max(1, self.cfg.rollback_steps))
                d.skip_range = self._skip_range(first["batch"], batch_id)
        return d

    def _signal(self, metric: str, value: float) -> Signal | None:
        hist = self.history[metric]
        if not math.isfinite(value):
            return Signal(metric, value, _median_sorted(sorted(hist)) if hist else None, None, math.inf, True)
        if len(hist) < max(self.cfg.warmup, MIN_HISTORY):
            return None
        if metric == "grad_norm":  # judged as a ratio to its typical size
            med, sigma = robust_stats([_log(v) for v in hist], 0.0)
            sigma = max(sigma, self.cfg.min_rel_sigma)
            z, baseline, threshold = (_log(value) - med) / sigma, math.exp(med), self.cfg.grad_norm_sigma
        else:
            med, sigma = robust_stats(hist, self.cfg.min_rel_sigma)
            z, baseline, threshold = (value - med) / sigma, med, self.cfg.spike_sigma
        return Signal(metric, value, baseline, sigma, z, False, threshold) if z > threshold else None

    def _skip_range(self, first_batch: int | None, last_batch: int | None) -> tuple[int, int] | None:
        if first_batch is None or self.cfg.skip_batches <= 0:
            return None
        hi = first_batch + self.cfg.skip_batches - 1
        return int(first_batch), int(max(hi, last_batch if last_batch is not None else hi))

    def _commit(self, d: Decision) -> None:
        if d.verdict == Verdict.OK:
            return
        if d.counted:
            self.spikes.append({"tick": self.tick, "step": d.step, "batch": d.batch_id})
            self.last_counted_tick = self.tick
        self.spikes = [s for s in self.spikes if self.tick - int(s["tick"]) < self.cfg.rollback_window]
        if d.verdict == Verdict.ROLLBACK:
            d.lr_factor = self.cfg.lr_factor
            d.lr_scale = d.lr_scale_before * d.lr_factor
            self.rollbacks += 1
            if d.skip_range:
                self.skip_ranges.append(list(d.skip_range))
            self.spikes.clear()
            self.reset_detector()
            self.rolling_back = True
        elif d.verdict == Verdict.ABORT:
            self.aborted = True

    def reset_detector(self) -> None:
        """Forget the rolling histories (after a rollback the restored model is judged afresh)."""
        self.history = {m: [] for m in METRICS}

    # --- the record ---------------------------------------------------------------

    def _describe(self, d: Decision) -> None:
        """Fill `d.reason` and `d.events` (payloads as documented in logbook/events.py)."""
        if d.verdict == Verdict.OK:
            return
        action = {Verdict.SKIP: "skip", Verdict.ROLLBACK: "rollback", Verdict.ABORT: "abort"}[d.verdict]
        top = d.signals[0] if d.signals else None
        plan = judge_against_plan({
            "kind": action, "source": "guard", "metric": top.metric if top else None,
            "z": top.z if top else None, "nonfinite": top.nonfinite if top else False,
            "spike_steps": d.spike_steps, "step": d.step, "rollback_steps": self.cfg.rollback_steps,
            "skip_batches": (d.skip_range[1] - d.skip_range[0] + 1) if d.skip_range else 0,
            "lr_factor": d.lr_factor,
        }, self.rules)
        d.reason = self._reason(d, top, action)
        detected = {
            "metric": top.metric if top else None, "value": top.value if top else None,
            "baseline": top.baseline if top else None, "scale": top.scale if top else None,
            "threshold": top.threshold if top else None, "z": top.z if top else None,
            "nonfinite": top.nonfinite if top else False, "batch_ids": [d.batch_id] if d.batch_id is not None else [],
            "action": action, "plan": plan, "counted": d.counted, "spikes_in_window": len(d.spike_steps),
            "signals": [s.to_dict() for s in d.signals], "reason": d.reason,
        }
        d.events.append(("divergence_detected", detected))
        if d.verdict == Verdict.SKIP:
            d.events.append(("step_skipped", {"reason": d.reason, "metric": detected["metric"],
                                              "batch_ids": detected["batch_ids"], "counted": d.counted, "plan": plan}))
        elif d.verdict == Verdict.ROLLBACK:
            d.events.append(("rollback", {
                "from_step": d.step, "to_step": d.to_step, "steps_lost": None, "checkpoint": None, "kept": [],
                "batches_skipped": list(d.skip_range) if d.skip_range else None, "rollbacks": self.rollbacks,
                "max_rollbacks": self.cfg.max_rollbacks, "reason": d.reason, "plan": plan,
            }))
            if d.lr_factor != 1.0 and d.lr_scale is not None:
                d.events.append(("lr_scaled", {"old": d.lr_scale_before, "new": d.lr_scale, "factor": d.lr_factor,
                                               "reason": f"rollback {self.rollbacks} of the divergence guard", "plan": plan}))
        else:
            d.events.append(("run_aborted", {"reason": d.reason, "rollbacks": self.rollbacks, "plan": plan}))

    def _reason(self, d: Decision, top: Signal | None, action: str) -> str:
        if top is None:
            what = "another rank flagged this step"
        elif top.nonfinite:
            what = f"{top.metric} is {top.value}"
        else:
            what = f"{top.metric} {top.value:.4g} is {top.z:.1f} robust sigma above its rolling median {top.baseline:.4g}"
        if d.verdict == Verdict.SKIP:
            return f"{what}: update skipped" + ("" if d.counted else " (within the cooldown, not counted again)")
        if d.verdict == Verdict.ROLLBACK:
            rng = f", batches {d.skip_range[0]}-{d.skip_range[1]} skipped" if d.skip_range else ""
            lr = f", learning rate x {d.lr_factor:g}" if d.lr_factor != 1.0 else ""
            at = ", ".join(str(x) for x in d.spike_steps)
            return (f"{what}; {len(d.spike_steps)} spikes within {self.cfg.rollback_window} steps (at steps {at}): "
                    f"rolled back to step {d.to_step} or earlier{rng}{lr}")
        return (f"{what}; the run needs rollback {self.rollbacks + 1} but at most {self.cfg.max_rollbacks} "
                f"are allowed: aborted by the divergence guard")

    # --- state --------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "history": {m: list(v) for m, v in self.history.items()},
            "tick": self.tick,
            "spikes": [dict(s) for s in self.spikes],
            "last_counted_tick": self.last_counted_tick,
            "rollbacks": self.rollbacks,
            "skip_ranges": [list(r) for r in self.skip_ranges],
            "aborted": self.aborted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore on resume; during a rollback keep the live ladder (see the module docstring)."""
        if self.rolling_back:
            self.rolling_back = False
            self.reset_detector()
            return
        self.history = {m: [float(x) for x in state.get("history", {}).get(m, [])] for m in METRICS}
        self.tick = int(state.get("tick", 0))
        self.spikes = [dict(s) for s in state.get("spikes", [])]
        lct = state.get("last_counted_tick")
        self.last_counted_tick = None if lct is None else int(lct)
        self.rollbacks = int(state.get("rollbacks", 0))
        self.skip_ranges = [[int(a), int(b)] for a, b in state.get("skip_ranges", [])]
        self.aborted = bool(state.get("aborted", False))

    def finish_rollback(self) -> None:
        """The loop restored the checkpoint without calling `load_state_dict` on the guard."""
        self.rolling_back = False


# --- multi-rank agreement and the one host sync -----------------------------------


def agree(decision: Decision, group: Any = None) -> Decision:
    """Every rank's strongest decision, on every rank; the identity without a process group.

    One all-reduce (MAX) of five integers: the verdict code, whether the spike
    counts, and the rollback target and skip range (equal on every rank that
    rolls back, since their ladders are equal).
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return decision
    lo, hi = decision.skip_range or (-1, -1)
    to = -1 if decision.to_step is None else decision.to_step
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else torch.device("cpu")
    t = torch.tensor([int(decision.verdict), int(decision.counted), to + 1, lo + 1, hi + 1], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    code, counted, to1, lo1, hi1 = t.tolist()
    if code == decision.verdict and bool(counted) == decision.counted:
        return decision
    return dataclasses.replace(
        decision, verdict=Verdict(code), counted=bool(counted),
        to_step=to1 - 1 if to1 else None, skip_range=(lo1 - 1, hi1 - 1) if hi1 else None,
        events=[],
    )


def metrics_to_floats(loss: torch.Tensor, grad_norm: torch.Tensor | None) -> tuple[float, float | None]:
    """Loss and gradient norm as Python floats, with a single host sync for both."""
    import torch

    if grad_norm is None:
        return float(loss.detach()), None
    pair = torch.stack([loss.detach().float().reshape(()), grad_norm.detach().float().reshape(()).to(loss.device)])
    a, b = pair.tolist()
    return a, b


# --- replay: is a spike in the data and model state, or a fluke of the machine? ---


@dataclass
class ReplayVerdict:
    """The outcome of re-running a flagged step."""

    label: str
    """reproducible (data and model state) | transient (suspect hardware) | failed (the re-run raised)."""
    loss: float | None = None
    grad_norm: float | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def replay_check(rerun: Callable[[], tuple[float, float | None]], decision: Decision) -> ReplayVerdict:
    """Re-run the flagged step and compare with what the guard saw.

    `rerun` recomputes the step's loss and gradient norm from the RNG state
    saved at the step's start and the same batch, on the model as it was
    (the update has not been applied). The spike reproduces when the re-run's
    top metric is again non-finite, or again beyond its threshold against the
    same baseline; then the cause is in the data and model state. Otherwise it
    is transient, which points at the hardware.
    """
    if not decision.signals:
        return ReplayVerdict("transient", detail="nothing was flagged on this rank")
    try:
        loss, grad_norm = rerun()
    except Exception as e:  # a replay must never take the run down with it
        return ReplayVerdict("failed", detail=f"{type(e).__name__}: {e}")
    top = decision.signals[0]
    again = loss if top.metric == "loss" else grad_norm
    if again is None:
        return ReplayVerdict("failed", loss, grad_norm, f"the re-run returned no {top.metric}")
    if top.nonfinite:
        same = not math.isfinite(again)
    else:
        same = math.isfinite(again) and top.z_of(again) > (top.threshold or 0.0)
    detail = f"{top.metric} {top.value!r} at first, {again!r} on re-run"
    return ReplayVerdict("reproducible" if same else "transient", loss, grad_norm, detail)


def label_replay(decision: Decision, verdict: ReplayVerdict) -> None:
    """Add the replay verdict to the decision's divergence event."""
    payload = decision.payload("divergence_detected")
    if payload is not None:
        payload["replay"] = verdict.to_dict()


def checkpoints_to_keep(steps: Iterable[int], to_step: int, first_spike_step: int) -> list[int]:
    """Checkpoints to keep for study: the one rolled back to, the newest before the spike, the first after it."""
    steps = sorted(set(int(s) for s in steps))
    loaded = [s for s in steps if s <= to_step][-1:]
    before = [s for s in steps if s < first_spike_step][-1:]
    after = [s for s in steps if s >= first_spike_step][:1]
    return sorted(set(loaded + before + after))


# --- the loop's end ---------------------------------------------------------------


class GuardCallback(Callback):
    """Plugs the guard into the loop's `post_backward`; its state rides in every checkpoint.

    It writes `divergence_detected` itself and hands the rest to the loop as an
    `Action`, whose `event` carries the plan judgement (and, for a rollback,
    the checkpoints kept for study) into the events the loop writes.
    """

    name = "guard"
    priority = 20  # after live control (10), so a changed threshold counts from this step

    def __init__(self, cfg: GuardConfig, rules: Iterable[Any] | None = None) -> None:
        self.guard = Guard(cfg, rules)
        self._rng: dict[str, Any] | None = None

    def pre_step(self, step: int) -> None:
        if self.guard.cfg.replay:
            from .rng import get_rng_state

            self._rng = get_rng_state()  # what the step's forward pass will draw from

    def post_backward(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> Action | None:
        t = self.trainer
        step, batch_id = t.step + 1, t.data.next_batch - 1  # `take()` has just handed out this batch
        loss_f, norm_f = metrics_to_floats(loss, grad_norm)
        t.synced = (step, loss_f, norm_f)  # the loop logs these instead of syncing again
        d = self.guard.observe(step, loss_f, norm_f, batch_id, lr_scale=t.lr_scale)
        if d.ok:
            return None
        if self.guard.cfg.replay and self._rng is not None:
            label_replay(d, replay_check(lambda: self._rerun(batch_id), d))
        drill = getattr(t, "drill_step", None) == step  # a nan/spike drill caused it
        t.emit("divergence_detected", step=step, drill=drill, **(d.payload("divergence_detected") or {}))
        kept = self._keep_checkpoints(d) if d.verdict == Verdict.ROLLBACK else []
        action = to_action(d, kept)
        if action is not None and drill:
            action.event["drill"] = True
        return action

    def _keep_checkpoints(self, d: Decision) -> list[str]:
        """Set the checkpoints on either side of the spike aside under `spikes/`; returns their paths.

        There a save of the same step on the new branch cannot replace them,
        retention skips them (they are marked KEEP as well) and a resume cannot
        pick them up. Newer checkpoints belong to the abandoned branch and are
        moved; the one the loop is about to load is hard-linked, so it stays
        in place for the load.
        """
        from .checkpoint import list_checkpoints, mark_keep

        t = self.trainer
        t.checkpointer.wait()  # a save in flight may be the one just after the spike
        found = dict(list_checkpoints(t.checkpointer.directory))
        first = d.spike_steps[0] if d.spike_steps else d.step
        to = d.to_step or 0
        if not any(s <= to for s in found):
            # Retention removed the target already: the loop falls back to the newest before the spike.
            to = max((s for s in found if s < d.step), default=to)
        loaded = max((s for s in found if s <= to), default=None)
        why = f"kept for study: around the spike at step {first} (rollback {self.guard.rollbacks} at step {d.step})"
        kept = []
        for s in checkpoints_to_keep(found, to, first):
            dest = found[s].parent / "spikes" / f"{found[s].name}-rollback{self.guard.rollbacks}"
            if t.dist.rank == 0:
                _set_aside(found[s], dest, move=s != loaded)
                mark_keep(dest, why)
            kept.append(str(dest))
        return kept

    def _rerun(self, batch_id: int) -> tuple[float, float | None]:
        """The flagged step again, from its RNG state and batch, on the unchanged model."""
        import torch

        from . import dist
        from .rng import get_rng_state, set_rng_state

        t = self.trainer
        after = get_rng_state()
        set_rng_state(self._rng)
        try:
            t.optimizer.zero_grad(set_to_none=True)
            accum = t.cfg.train.grad_accum
            ce = torch.zeros((), device=t.device)
            for micro in range(accum):
                x, y = t.data.batch(batch_id, micro)
                with t.autocast:
                    out = t.model(x, y)
                (out.loss / accum).backward()
                ce += out.ce_loss.detach()
            norm = torch.nn.utils.clip_grad_norm_(t.raw_model.parameters(), math.inf)
            return metrics_to_floats(dist.all_reduce_mean(ce / accum, t.dist), norm)
        finally:
            set_rng_state(after)

    def state_dict(self) -> dict[str, Any]:
        return self.guard.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.guard.load_state_dict(state)


def _set_aside(src: os.PathLike, dest: os.PathLike, *, move: bool) -> None:
    """Move a checkpoint folder, or copy it by hard links (a plain copy where links are refused)."""
    import shutil

    src, dest = os.fspath(src), os.fspath(dest)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if move:
        os.rename(src, dest)
        return
    shutil.copytree(src, dest, copy_function=_link_or_copy)


def _link_or_copy(src: str, dest: str) -> None:
    import shutil

    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def to_action(d: Decision, kept: list[str] | None = None) -> Action | None:
    """The loop's `Action` for a decision; `event` holds only fields the loop does not write itself."""
    detected = d.payload("divergence_detected") or {}
    plan = detected.get("plan")
    if d.verdict == Verdict.SKIP:
        return Action("skip", d.reason, event={"metric": detected.get("metric"), "counted": d.counted, "plan": plan})
    if d.verdict == Verdict.ROLLBACK:
        rb = d.payload("rollback") or {}
        return Action("rollback", d.reason, to_step=d.to_step, skip_batches=d.skip_range, lr_scale=d.lr_scale,
                      event={"plan": plan, "rollbacks": rb.get("rollbacks"), "max_rollbacks": rb.get("max_rollbacks"),
                             "kept": list(kept or [])})
    if d.verdict == Verdict.ABORT:
        return Action("abort", d.reason, event={"plan": plan, "rollbacks": (d.payload("run_aborted") or {}).get("rollbacks")})
    return None
