"""Randomness that could not exist before the preregistration: the seed rule, its checks, and the replay.

A run that answers to a preregistration trains with a seed (initialisation and
data order) drawn from the bytes of the preregistration's earliest timestamp
token, `<entries>/stamps/<prereg record hash>/<tsa-key>.tsr`:

    seed = int.from_bytes(sha256(b"logbook-seed\\0" + tsr_bytes).digest()[:8], "big") >> 1

Nobody can know those bytes before the authority signs them, so a run whose
logged losses come from that seed was trained after the preregistration
existed, whatever its history claims. The launcher draws the seed
(`anchored_seed`) and records it with its source in `run.json` and in every
`run_started`; with no stamp yet (no authority configured, or the stamp still
pending) the run keeps its config's seed and records `seed_source: null`.

`check_seeds` is what `verify` checks on every call (cheap): the recorded seed
is the one the named stamp gives, the stamp is of this run's preregistration
and is its earliest. `replay_runs` is `verify --replay N`: it retrains the
first N steps from the run's own code snapshot (`trust/retrain.py`) and
compares the losses bit for bit with what the run logged. Only rows that
the run logged are compared; a forger who rewrote those rows as well is
caught by a replay that reaches past them (up to the whole run).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.errors import LogbookError, NotFoundError, TamperedError
from logbook.core.project import Project
from logbook.eventlog.chain import iter_records
from logbook.eventlog.timeline import check_run_id, run_log_path
from logbook.eventlog.files import run_record_problem
from logbook.eventlog.sink import full_metrics_path
from logbook.trust.retrain import ReplayImpossible, first_losses, retrain, shadowing_paths
from logbook.eventlog.kinds import is_kind

SEED_DOMAIN = b"logbook-seed\0"
"""Prefix of the hashed bytes, so that this seed is never the hash of the token for any other purpose."""
STAMPS_DIR = "stamps"
"""The stamps' folder under the entries folder (fixed with the timestamping code)."""
_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
WARNING_KINDS = frozenset({"seed_not_anchored"})
"""Kinds of `check_seeds` findings that are warnings; every other kind is exit 4."""


def seed_from_stamp(tsr: bytes) -> int:
    """The seed a timestamp token's bytes give: 63 bits, so that every RNG the trainer seeds takes it."""
    return int.from_bytes(hashlib.sha256(SEED_DOMAIN + tsr).digest()[:8], "big") >> 1


@dataclass(frozen=True)
class SeedFinding:
    """One thing wrong with a run's seed, or a replay that differs (verify.py turns it into a Finding)."""

    path: str
    """The run's run.json, relative to the repository root."""
    kind: str
    """seed_mismatch | seed_source_missing | seed_source_foreign | seed_not_earliest | seed_not_anchored |
    replay_differs | replay_not_done."""
    message: str
    """One sentence naming the run, what was recorded and what the proof gives."""


@dataclass(frozen=True)
class AnchoredSeed:
    """A seed drawn from a preregistration's timestamp token."""

    seed: int
    """The seed (`seed_from_stamp` of the token's bytes)."""
    source: str
    """The token's path relative to the entries folder, as `run.json` and `run_started` record it."""


# --- which stamp ---------------------------------------------------------------------


def stamp_files(project: Project, digest: str) -> list[Path]:
    """The stamp files on disk for a record hash, in name order."""
    folder = project.entries / STAMPS_DIR / digest
    return sorted(folder.glob("*.tsr")) if folder.is_dir() else []


def earliest_stamp(project: Project, digest: str) -> Path | None:
    """The earliest stamp of `digest`: by verified time when the timestamping code is present, else by name.

    With the timestamping code, a token that does not verify (signature, chain
    to the configured CA, imprint) is no stamp at all.
    """
    try:
        from logbook.trust import stamp_store as timestamps
    except ImportError:
        files = stamp_files(project, digest)
        return files[0] if files else None
    stamp = timestamps.earliest(project, digest)
    return None if stamp is None else Path(stamp.path)


def anchored_seed(project: Project, prereg_digest: str) -> AnchoredSeed | None:
    """The seed of a run that answers to the preregistration with hash `prereg_digest`; None while unstamped."""
    path = earliest_stamp(project, prereg_digest)
    if path is None:
        return None
    return AnchoredSeed(seed_from_stamp(path.read_bytes()), path.relative_to(project.entries).as_posix())


def timestamping_configured(project: Project) -> bool:
    """Whether logbook.yaml names a timestamp authority (the setting belongs to the timestamping code)."""
    try:
        from logbook.trust import stamp_store as timestamps
    except ImportError:
        return False
    setting = timestamps.settings(project)
    return bool(setting and setting.authorities)


# --- verify: the recorded seed against its source ------------------------------------


def check_seeds(project: Project, prereg_id: str | None = None) -> list[SeedFinding]:
    """For each run that answers to a preregistration (only `prereg_id`'s when given), what is wrong with its seed.

    Kinds: seed_mismatch, seed_source_missing, seed_source_foreign, seed_not_earliest (exit 4), and
    seed_not_anchored (a warning: the run trained with its config's seed although a stamp is expected).
    """
    out: list[SeedFinding] = []
    for run_id, raw in _prereg_runs(project, prereg_id):
        out += _run_seed_findings(project, run_id, raw)
    return out


def _prereg_runs(project: Project, prereg_id: str | None) -> list[tuple[str, dict[str, Any]]]:
    """(run id, run.json) of every readable run record that names a preregistration."""
    runs = []
    for path in sorted(project.runs_dir.glob("*/run.json")) if project.runs_dir.is_dir() else []:
        try:
            raw = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue  # a damaged record is reported by verify's own checks
        if isinstance(raw, dict) and raw.get("prereg_id") and prereg_id in (None, raw["prereg_id"]):
            runs.append((path.parent.name, raw))
    return runs


def run_starts(project: Project, run_id: str) -> list[dict[str, Any]]:
    """The payloads of a run's `run_started` events, in order."""
    return [e.get("data") or {} for e in iter_records(run_log_path(project, run_id)) if is_kind(e, "run_started")]


def _run_seed_findings(project: Project, run_id: str, raw: dict[str, Any]) -> list[SeedFinding]:
    rel = (project.run_dir(run_id) / "run.json").relative_to(project.root).as_posix()
    source, seed = raw.get("seed_source"), raw.get("seed")
    starts = run_starts(project, run_id)
    for n, data in enumerate(starts, start=1):
        if "seed_source" in data and data.get("seed_source") != source:
            return [_finding(rel, "seed_mismatch", f"run {run_id}: its run_started #{n} names the seed source "
                             f"{data.get('seed_source')!r}, its run.json {source!r}")]
        if seed is not None and data.get("seed") is not None and data["seed"] != seed:
            return [_finding(rel, "seed_mismatch", f"run {run_id}: its run_started #{n} trained with seed "
                             f"{data['seed']}, its run.json records {seed}")]
    if source is None:
        if timestamping_configured(project):
            return [SeedFinding(rel, "seed_not_anchored", f"run {run_id}: its randomness is not anchored: it trained "
                            f"with its config's seed, not one drawn from preregistration {raw['prereg_id']}'s "
                            "timestamp (there was no stamp when it started)")]
        return []
    return _source_findings(project, run_id, rel, raw, str(source), starts)


def _source_findings(project: Project, run_id: str, rel: str, raw: dict[str, Any], source: str,
                     starts: list[dict[str, Any]]) -> list[SeedFinding]:
    path = (project.entries / source).resolve()
    stamps = (project.entries / STAMPS_DIR).resolve()
    if (not path.is_relative_to(stamps) or path.suffix != ".tsr" or not path.is_file()
            or not _DIGEST_RE.match(path.parent.name)):
        return [_finding(rel, "seed_source_missing", f"run {run_id}: its seed source {source} is not a stamp file "
                         f"under {STAMPS_DIR}/")]
    derived = seed_from_stamp(path.read_bytes())
    recorded = [("run.json", raw.get("seed"))] + [(f"run_started #{n}", d.get("seed")) for n, d in enumerate(starts, 1)]
    for where, value in recorded:
        if value != derived:
            return [_finding(rel, "seed_mismatch", f"run {run_id}: {where} records seed {value}, but its seed source "
                             f"{source} gives {derived}: the run was not trained from its preregistration's seed")]
    digest = path.parent.name
    prereg_hash = _prereg_hash(project, str(raw["prereg_id"]))
    if prereg_hash is not None and digest != prereg_hash:
        return [_finding(rel, "seed_source_foreign", f"run {run_id}: its seed source {source} stamps {digest[:12]}, "
                         f"not preregistration {raw['prereg_id']} (sha256 {prereg_hash[:12]})")]
    first = earliest_stamp(project, digest)
    if first is None or first.resolve() != path:
        what = "does not verify" if first is None else f"is not the earliest: {first.name} is earlier"
        return [_finding(rel, "seed_not_earliest", f"run {run_id}: its seed source {source} {what}; "
                         "the seed is drawn from the earliest valid stamp, so that no one can choose among stamps")]
    return []


def _prereg_hash(project: Project, prereg_id: str) -> str | None:
    from logbook.promises.prereg import load_prereg

    try:
        return load_prereg(project, prereg_id).sha256
    except LogbookError:
        return None  # a missing or damaged preregistration is verify's own finding


def _finding(path: str, kind: str, message: str) -> SeedFinding:
    return SeedFinding(path, kind, message)


# --- verify --replay -----------------------------------------------------------------


@dataclass
class ReplayVerdict:
    """What replaying one run's first steps showed."""

    run_id: str
    """The run."""
    state: str
    """equal | differs | not_replayed."""
    message: str
    """One sentence for a person: what was compared, or why nothing could be."""
    seed: int | None = None
    """The seed the replay trained with."""
    seed_source: str | None = None
    """Where that seed came from (None: the config's own seed, not anchored)."""
    steps: list[int] = field(default_factory=list)
    """The steps whose losses were compared."""
    seconds: float = 0.0
    """Wall time of the replay."""

    def finding(self, project: Project) -> SeedFinding:
        rel = (project.run_dir(self.run_id) / "run.json").relative_to(project.root).as_posix()
        return SeedFinding(rel, "replay_differs" if self.state == "differs" else "replay_not_done", self.message)


def replay_runs(project: Project, steps: int, *, prereg_id: str | None = None, run_id: str | None = None,
                timeout_s: float = 3600.0) -> list[ReplayVerdict]:
    """Retrain the first `steps` steps of each run that answers to a preregistration (or of `run_id`) and compare."""
    if run_id is not None:
        path = project.run_dir(check_run_id(run_id)) / "run.json"
        if not path.is_file():
            raise NotFoundError(f"unknown run {run_id!r}", hint="`logbook ls` lists the runs of each preregistration")
        why = run_record_problem(path)
        if why:
            raise TamperedError(f"run {run_id}'s run.json: {why}",
                                hint="restore it from git; nothing can be replayed from it")
        ids = [run_id]
    else:
        ids = [r for r, _ in _prereg_runs(project, prereg_id)]
    return [replay_run(project, r, steps, timeout_s=timeout_s) for r in ids]


def replay_run(project: Project, run_id: str, steps: int, *, timeout_s: float = 3600.0) -> ReplayVerdict:
    """Retrain run `run_id`'s first `steps` steps from its code snapshot and compare its losses bit for bit."""
    raw = json.loads((project.run_dir(run_id) / "run.json").read_text("utf-8"))
    starts = run_starts(project, run_id)
    seed = _replay_seed(project, raw, starts)
    verdict = ReplayVerdict(run_id, "not_replayed", "", seed=seed, seed_source=raw.get("seed_source"))
    logged = _logged_losses(project, run_id, steps)
    why = _not_replayable(raw, starts, seed, logged, steps)
    if why:
        verdict.message = f"run {run_id} not replayed: {why}"
        return verdict
    try:
        shadows = shadowing_paths(project, run_id, raw)
        if shadows:
            verdict.message = (f"run {run_id} not replayed: the run's own code replaces the trainer (its snapshot "
                               f"ships {', '.join(shadows)}, which ran when it trained); a replay with this "
                               "machine's trainer proves nothing about that code, and the replay never runs it")
            return verdict
        result = retrain(project, run_id, raw, seed=int(seed), steps=steps, threads=starts[0].get("threads"),
                         timeout_s=timeout_s)
    except ReplayImpossible as e:
        verdict.message = f"run {run_id} not replayed: {e}"
        return verdict
    verdict.seconds = result.seconds
    return _judge(verdict, starts[0], result, logged)


def _replay_seed(project: Project, raw: dict[str, Any], starts: list[dict[str, Any]]) -> Any:
    """The seed to replay from: the one the seed source gives (what the run must have trained with), else the one
    its first attempt says it trained with."""
    source = raw.get("seed_source")
    path = project.entries / str(source) if source else None
    if path is not None and path.resolve().is_relative_to((project.entries / STAMPS_DIR).resolve()) and path.is_file():
        return seed_from_stamp(path.read_bytes())
    recorded = starts[0].get("seed") if starts else None
    return recorded if recorded is not None else raw.get("seed")


def _not_replayable(raw: dict[str, Any], starts: list[dict[str, Any]], seed: Any, logged: list[dict[int, float]],
                    steps: int) -> str | None:
    """Why the run's first steps cannot be replayed bit for bit here, or None."""
    if not starts:
        return "its event log has no run_started"
    first = starts[0]
    if not isinstance(seed, int):
        return "it records no seed (it was launched before seeds were recorded)"
    if first.get("device") not in (None, "cpu"):
        return (f"it trained on {first['device']}; only the CPU path is deterministic, so the CPU replay cannot "
                "match it bit for bit")
    if (first.get("world_size") or 1) != 1:
        return f"it trained on {first['world_size']} workers; the replay trains on one"
    if (first.get("resumed_from_step") or 0) != 0:
        return "its first attempt resumed from a checkpoint, not from its seed"
    if not any(logged):
        return f"it logged no training loss for steps 1-{steps}"
    return None


def _logged_losses(project: Project, run_id: str, steps: int) -> list[dict[int, float]]:
    """The first loss logged for each step up to `steps`: from the committed metrics, and from the full stream here."""
    streams = [project.run_dir(run_id) / "metrics.jsonl", full_metrics_path(project.state_dir, run_id)]
    cut = _first_live_change(project, run_id)
    limit = min(steps, cut - 1) if cut is not None else steps
    return [first_losses(path, limit) for path in streams]


def _first_live_change(project: Project, run_id: str) -> int | None:
    """The step of the run's first live hyperparameter change: a replay cannot make it, so it compares before it."""
    for e in iter_records(run_log_path(project, run_id)):
        if is_kind(e, "hparam_change") and isinstance(e.get("step"), int):
            return max(1, int(e["step"]))
    return None


_SAME_INPUTS = ("config_hash", "data_fingerprints", "n_params", "dtype", "threads", "norm_kernels",
                "attention_kernel", "gelu_kernel")
"""run_started fields that must agree between the run and its replay for a difference in losses to mean anything."""


def _judge(verdict: ReplayVerdict, first: dict[str, Any], result: Any, logged: list[dict[int, float]]) -> ReplayVerdict:
    run_id = verdict.run_id
    keys = [k for k in _SAME_INPUTS if not (k == "config_hash" and result.config_altered)]
    differ = [k for k in keys if k in first and k in result.started and first[k] != result.started[k]]
    if differ:
        verdict.message = (f"run {run_id} not replayed: the replay's {', '.join(differ)} differ from the run's, so "
                           "its losses would not be comparable (another trainer version or another corpus here?)")
        return verdict
    for stream in logged:
        for step in sorted(stream):
            if step not in result.losses:
                continue
            ours, theirs = result.losses[step], stream[step]
            if _bits(ours) != _bits(theirs):
                verdict.state, verdict.steps = "differs", [step]
                verdict.message = (f"run {run_id}: step {step} logged loss {theirs!r}, the replay from seed "
                                   f"{verdict.seed} ({_origin(verdict)}) computes {ours!r}: this run was not "
                                   "trained from that seed" + (", so not from its preregistration's timestamp"
                                                                if verdict.seed_source else ""))
                return verdict
    compared = sorted({s for stream in logged for s in stream if s in result.losses})
    if not compared:
        verdict.message = f"run {run_id} not replayed: the replay stopped before any step the run logged"
        return verdict
    verdict.state, verdict.steps = "equal", compared
    anchor = ("drawn from its preregistration's timestamp" if verdict.seed_source else
              "its config's; the seed is not anchored, so this proves nothing about time")
    verdict.message = (f"run {run_id}: {_span(compared)} equal bit for bit to a replay from seed "
                       f"{verdict.seed} ({anchor})")
    return verdict


def _bits(x: float) -> str:
    return x.hex() if math.isfinite(x) else repr(x)


def _origin(verdict: ReplayVerdict) -> str:
    return f"from {verdict.seed_source}" if verdict.seed_source else "its config's seed"


def _span(steps: list[int]) -> str:
    """`step 1`, `steps 1-3`, or `steps 1, 5, 9`."""
    if len(steps) == 1:
        return f"step {steps[0]}"
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"steps {steps[0]}-{steps[-1]}"
    return "steps " + ", ".join(map(str, steps))
