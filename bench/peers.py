"""Tokens per second of this trainer against the trainers a user would pick instead, side by side.

Contenders, at one shape (4 layers, 4 heads, 128 wide, block 128, batch 16,
vocabulary 256), on the same data (the standard library's source as bytes),
in float32, one thread each (`OMP_NUM_THREADS=1` and `torch.set_num_threads(1)`):

- logbook: `logbook run --exploratory` (the library call behind it, so
  torchrun, the event log, metrics every step, heartbeat, guard, live
  control, telemetry, progress and background checkpoints every 50 steps are
  all on), the tiny CPU config at that shape with QK-norm and z-loss;
- nanoGPT: `train.py` of a checkout of github.com/karpathy/nanoGPT, given
  with `--nanogpt PATH` (or `NANOGPT_DIR`). Nothing of it is copied here: its
  data files and a link to its configurator go into a temporary folder, and
  it runs with command-line overrides (cpu, float32, no evaluation after the
  first, no checkpoints, no W&B). Get it with
  `git clone https://github.com/karpathy/nanoGPT`;
- OLMo-core: its OLMo 2 transformer (QK-norm, z-loss) at the same shape with
  AdamW (`bench/_olmo_peer.py`), run by the Python of a virtual environment
  where `ai2-olmo-core` is installed, given with `--olmo-python PATH` (or
  `OLMO_PYTHON`): `python3 -m venv --system-site-packages V && V/bin/pip install ai2-olmo-core`.

Each round starts every contender as a fresh process, eager and (with
`--compile on|both`) under torch.compile, all at once, and runs them in
turns: one runs
for `--slice` seconds while the others are stopped (SIGSTOP to the process
tree), so a busy machine slows them alike. A contender's throughput is its
steady state: the steps after `--warmup` (checkpoints included) over its
running time, the stopped intervals taken out. Each ratio is the median over
rounds of the per-round ratios. A missing peer is skipped with
the reason. `--step-only` adds the model + AdamW step alone, in this process:
the project's model with and without its stabilisers, against nanoGPT's.

    python3 bench/peers.py --nanogpt ~/src/nanoGPT [--olmo-python V/bin/python] [--rounds 3] [--steps 60]
        [--warmup 10] [--compile off|on|both] [--step-only | --profile] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import pickle
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._result import result  # noqa: E402

SHAPE = {"layers": 4, "heads": 4, "width": 128, "block": 128, "batch": 16}
GOALS = {("nanogpt", False, False): None, ("nanogpt", True, False): None, ("nanogpt", True, True): None,
         ("olmo", False, False): 1.0, ("olmo", True, True): 1.0}
"""(peer, logbook compiled, peer compiled) -> the least ratio logbook/peer asked for; None: printed beside the
others with no goal (nanoGPT has no QK-norm or z-loss: not the same work per step)."""


def stdlib_bytes() -> np.ndarray:
    """The training bytes the project's stdlib source yields (8 MB, the tiny config's)."""
    from trainer.config import load_train_config
    from trainer.nn.data import load_corpus

    cfg = load_train_config(ROOT / "configs" / "tiny-cpu.yaml", [])
    return load_corpus(cfg.data.sources[0], ROOT, cfg.data).train


def one_thread_env(cache: Path) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(cache),
            "PYTHONPATH": str(ROOT)}


# --- the contenders ---------------------------------------------------------------------
#
# Each says how to start it (`command`) and, from what it printed (lines with the
# wall time they were read) or wrote, when each of its steps ended (`marks`).


class Logbook:
    name = "logbook"

    def __init__(self, work: Path, steps: int) -> None:
        from bench.recovery_time import scratch_repo

        # A repository per mode: two runs starting at once in one repository would
        # contend for its git locks while one of them is stopped.
        self.repos = {}
        for compiled in (False, True):
            (work / f"logbook-{compiled}").mkdir(parents=True)
            self.repos[compiled] = scratch_repo(work / f"logbook-{compiled}")
        self.steps = steps
        self.runs = 0
        self.run_ids: dict[bool, str] = {}

    def config(self, compiled: bool) -> Path:
        cfg = yaml.safe_load((ROOT / "configs" / "tiny-cpu.yaml").read_text())
        cfg["model"].update(n_layer=SHAPE["layers"], n_head=SHAPE["heads"], n_embd=SHAPE["width"],
                            block_size=SHAPE["block"])
        cfg["train"].update(steps=self.steps, batch_size=SHAPE["batch"], eval_every=0, threads=1, compile=compiled)
        path = self.repos[compiled] / "peers.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    def command(self, compiled: bool) -> tuple[list[str], Path, dict[str, str]]:
        self.runs += 1
        self.run_ids[compiled] = f"peers-{self.runs}"
        argv = [sys.executable, "-m", "logbook", "run", "--exploratory", str(self.config(compiled)),
                "--run-id", self.run_ids[compiled], "--max-restarts", "0"]
        return argv, self.repos[compiled], one_thread_env(self.repos[compiled] / "unused")  # the trainer uses .logbook/

    def marks(self, lines: list[tuple[float, str]], compiled: bool) -> list[tuple[int, float]]:
        from logbook.eventlog.sink import read_metrics

        rows = read_metrics(self.repos[compiled] / "entries" / "runs" / self.run_ids[compiled])
        return sorted((r["step"], r["time"]) for r in rows if "loss" in r)


class NanoGPT:
    name = "nanogpt"

    def __init__(self, work: Path, checkout: Path, data: np.ndarray, steps: int) -> None:
        self.checkout, self.steps = checkout, steps
        self.dir = work / "nanogpt"
        (self.dir / "data" / "stdlib").mkdir(parents=True)
        # train.py reads `configurator.py` and `data/<dataset>/` from its working folder.
        (self.dir / "configurator.py").symlink_to(checkout / "configurator.py")
        data.astype(np.uint16).tofile(self.dir / "data" / "stdlib" / "train.bin")
        data[: 1 << 20].astype(np.uint16).tofile(self.dir / "data" / "stdlib" / "val.bin")
        with open(self.dir / "data" / "stdlib" / "meta.pkl", "wb") as f:
            pickle.dump({"vocab_size": 256}, f)

    def command(self, compiled: bool) -> tuple[list[str], Path, dict[str, str]]:
        s = SHAPE
        args = [f"--out_dir={self.dir / 'out'}", "--dataset=stdlib", "--device=cpu", "--dtype=float32",
                f"--compile={compiled}", f"--n_layer={s['layers']}", f"--n_head={s['heads']}", f"--n_embd={s['width']}",
                f"--block_size={s['block']}", f"--batch_size={s['batch']}", "--gradient_accumulation_steps=1",
                f"--max_iters={self.steps - 1}", f"--lr_decay_iters={self.steps}", "--eval_interval=1000000",
                "--eval_iters=1", "--log_interval=1", "--always_save_checkpoint=False", "--dropout=0.0",
                "--bias=False", "--learning_rate=3e-3", "--min_lr=3e-4", "--warmup_iters=20", "--wandb_log=False"]
        return [sys.executable, str(self.checkout / "train.py"), *args], self.dir, one_thread_env(self.dir / "inductor")

    def marks(self, lines: list[tuple[float, str]], compiled: bool) -> list[tuple[int, float]]:
        found = ((re.match(r"iter (\d+): loss", line), t) for t, line in lines)
        return [(int(m.group(1)) + 1, t) for m, t in found if m]


class OlmoCore:
    name = "olmo"

    def __init__(self, work: Path, python: str, data: np.ndarray, steps: int) -> None:
        self.python, self.steps = python, steps
        self.dir = work / "olmo"
        self.dir.mkdir()
        self.data = self.dir / "train.npy"
        np.save(self.data, data)

    def command(self, compiled: bool) -> tuple[list[str], Path, dict[str, str]]:
        cmd = [self.python, str(ROOT / "bench" / "_olmo_peer.py"), "--data", str(self.data), "--steps", str(self.steps),
               *[a for k, v in SHAPE.items() for a in (f"--{k}", str(v))], *(["--compile"] if compiled else [])]
        return cmd, self.dir, one_thread_env(self.dir / "inductor")

    def marks(self, lines: list[tuple[float, str]], compiled: bool) -> list[tuple[int, float]]:
        times = [t for t, line in lines if line.startswith("STEP_MS ")]
        return [(i + 1, t) for i, t in enumerate(times)]


def olmo_problem(python: str | None) -> str | None:
    """Why OLMo-core cannot run (None: it can)."""
    if not python:
        return "no --olmo-python (or OLMO_PYTHON): " + __doc__.split("`OLMO_PYTHON`): ")[1].split("\n\n")[0].strip()
    probe = subprocess.run([python, "-c", "import olmo_core.nn.transformer"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"{python} cannot import olmo_core: {probe.stderr.strip().splitlines()[-1] if probe.stderr else '?'}"
    return None


# --- measuring ------------------------------------------------------------------------------


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it (torchrun starts its own session, so not a process group)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _signal_tree(pid: int, sig: int) -> None:
    for p in _tree(pid):
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def run_in_turns(contenders: list, modes: list[bool], slice_s: float) -> dict[tuple[str, bool], tuple[list, list]]:
    """Start every contender in every mode, then let one run at a time for `slice_s` while the others are stopped.

    Returns, per contender, the lines it printed (with the wall time they
    were read) and the intervals it spent stopped. Stopping (SIGSTOP to the
    whole process tree) rather than running one after another is what makes
    the figures side by side: each contender's steps are spread over the same
    minutes, so a neighbour's load falls on all of them alike.
    """
    procs, lines, stopped = {}, {}, {}
    for c in contenders:
        for compiled in modes:
            key = (c.name, compiled)
            argv, cwd, env = c.command(compiled)
            procs[key] = subprocess.Popen(argv, cwd=cwd, env={**env, "PYTHONUNBUFFERED": "1"}, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            _signal_tree(procs[key].pid, signal.SIGSTOP)
            lines[key], stopped[key] = [], []
            threading.Thread(target=_read_lines, args=(procs[key].stdout, lines[key]), daemon=True).start()
    since = {n: time.time() for n in procs}
    while any(p.poll() is None for p in procs.values()):
        for name, proc in procs.items():
            if proc.poll() is not None:
                continue
            _signal_tree(proc.pid, signal.SIGCONT)
            stopped[name].append((since[name], time.time()))
            try:
                proc.wait(timeout=slice_s)
            except subprocess.TimeoutExpired:
                _signal_tree(proc.pid, signal.SIGSTOP)
                since[name] = time.time()
    for name, proc in procs.items():
        if proc.returncode != 0:
            tail = "".join(line for _, line in lines[name][-20:])
            raise RuntimeError(f"{name} exited {proc.returncode}:\n{tail[-2000:]}")
    return {n: (lines[n], stopped[n]) for n in procs}


def _read_lines(stream, into: list) -> None:
    for line in stream:
        into.append((time.time(), line))


def steady_tokens_per_s(marks: list[tuple[int, float]], stopped: list[tuple[float, float]], warmup: int) -> float:
    """Tokens per second of running time between the end of step `warmup` and the last step."""
    window = [(s, t) for s, t in marks if s >= warmup]
    (s0, t0), (s1, t1) = window[0], window[-1]
    paused = sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in stopped)
    return SHAPE["batch"] * SHAPE["block"] * (s1 - s0) / (t1 - t0 - paused)


def measure(contenders: list, modes: list[bool], rounds: int, warmup: int,
            slice_s: float) -> dict[tuple[str, bool], list[float]]:
    """tokens/s per (contender, compiled), one sample per round."""
    tps: dict[tuple[str, bool], list[float]] = {}
    for r in range(rounds):
        t = time.perf_counter()
        out = run_in_turns(contenders, modes, slice_s)
        for c in contenders:
            for compiled in modes:
                lines, stopped = out[(c.name, compiled)]
                tps.setdefault((c.name, compiled), []).append(
                    steady_tokens_per_s(c.marks(lines, compiled), stopped, warmup))
        print(f"round {r + 1} ({time.perf_counter() - t:.0f} s): " + ", ".join(
            f"{n} {'compiled' if m else 'eager'} {v[-1]:,.0f}" for (n, m), v in tps.items()) + " tok/s",
            file=sys.stderr, flush=True)
    return tps


def report(tps: dict[tuple[str, bool], list[float]], skipped: dict[str, str]) -> None:
    label = {False: "eager", True: "compiled"}
    print(f"\n{'contender':10s} {'mode':9s} {'median tok/s':>13s}")
    for (name, compiled), v in sorted(tps.items()):
        print(f"{name:10s} {label[compiled]:9s} {statistics.median(v):13,.0f}")
    print()
    for (peer, ours_c, peer_c), goal in GOALS.items():
        figure = f"logbook {label[ours_c]} vs {peer} {label[peer_c]}"
        wanted = "-" if goal is None else f">= {goal}"
        if peer in skipped:
            print(f"{figure}: skipped ({skipped[peer]})")
            result(figure, "skipped", "ratio", wanted, None)
            continue
        ours, theirs = tps.get(("logbook", ours_c)), tps.get((peer, peer_c))
        if not ours or not theirs:
            continue  # that mode was not measured
        ratio = statistics.median(a / b for a, b in zip(ours, theirs))
        print(f"{figure}: {ratio:.3f} ({'no goal' if goal is None else f'goal >= {goal}'})")
        result(figure, round(ratio, 3), "ratio", wanted, None if goal is None else ratio >= goal)


# --- the model + AdamW step alone ----------------------------------------------------------------


def step_only(checkout: Path, rounds: int, block: int) -> None:
    """ms per model + AdamW step: the project's model with and without stabilisers, against nanoGPT's."""
    import torch

    contenders = _step_contenders(checkout)
    s = SHAPE
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, 256, (s["batch"], s["block"]), generator=g) for _ in range(2))
    ms: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(rounds):
        for name, (m, opt, loss_of) in contenders.items():
            for i in range(block + 1):
                if i == 1:
                    t0 = time.perf_counter()  # the first step of a block warms the caches
                loss_of(x, y).backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
            ms[name].append((time.perf_counter() - t0) / block * 1000)
    print("\nmodel + AdamW step alone (ms; ratio = nanoGPT's time / this one's)")
    for name, v in ms.items():
        ratio = statistics.median(a / b for a, b in zip(ms["nanoGPT"], v))
        print(f"  {name:28s} {statistics.median(v):7.1f} ms   {ratio:.3f}")
        if name != "nanoGPT":
            result(f"step alone: {name} vs nanoGPT", round(ratio, 3), "ratio", "-", None)


def project_step_parts(stabilisers: bool = True):
    """The project's model at SHAPE and its optimizer, as the trainer builds them: (model, optimizer, loss of (x, y))."""
    import torch

    from trainer.config import load_train_config
    from trainer.nn.model import GPT
    from trainer.nn.optim import build_optimizer

    s = SHAPE
    shape = [f"model.n_layer={s['layers']}", f"model.n_head={s['heads']}", f"model.n_embd={s['width']}",
             f"model.block_size={s['block']}"]
    cfg = load_train_config(ROOT / "configs" / "tiny-cpu.yaml",
                            shape + [f"model.qk_norm={str(stabilisers).lower()}", f"model.z_loss={1e-4 if stabilisers else 0}"])
    torch.manual_seed(0)
    m = GPT(cfg.model)
    return m, build_optimizer(m, cfg.optim, "cpu"), lambda x, y: m(x, y).loss


def _step_contenders(checkout: Path) -> dict:
    """name -> (model, optimizer, loss function of (x, y)) for the project's model with and without stabilisers, and nanoGPT's.

    One thread each, as the trainer's tiny CPU config runs.
    """
    import torch

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("nanogpt_model", checkout / "model.py")
    ng = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ng)
    s = SHAPE
    ours = project_step_parts

    def nanogpt():
        torch.manual_seed(0)
        m = ng.GPT(ng.GPTConfig(block_size=s["block"], vocab_size=256, n_layer=s["layers"], n_head=s["heads"],
                                n_embd=s["width"], dropout=0.0, bias=False))
        return m, m.configure_optimizers(0.1, 3e-3, (0.9, 0.95), "cpu"), lambda x, y: m(x, y)[1]

    return {"project, QK-norm + z-loss": ours(True), "project, without them": ours(False),
            "nanoGPT": nanogpt()}


def profile_step(checkout: Path, compiled: bool = False, steps: int = 10, rows: int = 14) -> None:
    """torch.profiler's top operators (self CPU time) of the model + AdamW step, the project's and nanoGPT's.

    `compiled`: both models under torch.compile, with inductor's kernels named
    in the table rather than folded into one row per graph.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    contenders = _step_contenders(checkout)
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, 256, (SHAPE["batch"], SHAPE["block"]), generator=g) for _ in range(2))
    names = ["project, QK-norm + z-loss", "nanoGPT"]
    if compiled:
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True
    for name in names:
        m, opt, loss_of = contenders[name]
        if compiled:
            cm = torch.compile(m, dynamic=False)
            loss_of = (lambda x, y, cm=cm: cm(x, y)[1]) if name == "nanoGPT" else (lambda x, y, cm=cm: cm(x, y).loss)
        step = lambda: (loss_of(x, y).backward(), torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0),  # noqa: E731
                        opt.step(), opt.zero_grad(set_to_none=True))
        for _ in range(3):
            step()
        # As the trainer does once it has started (trainer/launch/prewarm.py): else a full collection of the
        # compiler's objects lands inside one operator of the profile, a fifth of a second.
        gc.collect()
        gc.freeze()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        print(f"\n{name}{', compiled' if compiled else ''}: {steps} steps under torch.profiler")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nanogpt", default=os.environ.get("NANOGPT_DIR"), help="a checkout of karpathy/nanoGPT")
    ap.add_argument("--olmo-python", default=os.environ.get("OLMO_PYTHON"), help="Python with ai2-olmo-core installed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60, help="steps per contender per round")
    ap.add_argument("--warmup", type=int, default=10, help="first steps left out of each throughput")
    ap.add_argument("--slice", type=float, default=2.0, help="seconds each contender runs while the others wait")
    ap.add_argument("--compile", choices=("off", "on", "both"), default="both")
    ap.add_argument("--step-only", action="store_true", help="only time the model + AdamW step alone, in this process")
    ap.add_argument("--profile", action="store_true",
                    help="only print torch.profiler's top operators of that step (compiled with --compile on)")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 40 steps, eager only")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.steps, args.compile = 2, 40, "off"
    checkout = Path(args.nanogpt).expanduser() if args.nanogpt else None
    if checkout is None or not (checkout / "train.py").is_file():
        why = (f"no nanoGPT checkout at {checkout}" if checkout else "no --nanogpt (or NANOGPT_DIR)")
        print(f"skipped: {why}; get it with `git clone https://github.com/karpathy/nanoGPT` and pass its path "
              "with --nanogpt PATH or NANOGPT_DIR=PATH")
        result("logbook vs nanoGPT", "skipped", "ratio", "-", None)
        return 0
    if args.profile:
        profile_step(checkout, compiled=args.compile == "on")
        return 0
    if args.step_only:
        step_only(checkout, rounds=max(5, 3 * args.rounds), block=3)
        return 0
    skipped = {}
    problem = olmo_problem(args.olmo_python)
    if problem:
        skipped["olmo"] = problem
        print(f"OLMo-core skipped: {problem}", file=sys.stderr)
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.compile]
    data = stdlib_bytes()
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        work = Path(tmp)
        contenders = [Logbook(work, args.steps), NanoGPT(work, checkout, data, args.steps)]
        if "olmo" not in skipped:
            contenders.append(OlmoCore(work, args.olmo_python, data, args.steps))
        tps = measure(contenders, modes, args.rounds, args.warmup, args.slice)
    report(tps, skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
