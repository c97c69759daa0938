"""What the logbook's Hugging Face callback costs a real `Trainer` run, A/B alternated in one process.

A tiny GPT-2 built from a config trains on random tokens on the CPU with HF's
own `Trainer` (logging every step, evaluating and saving on a cadence), once
with `LogbookCallback` and once without, alternating for `--rounds` rounds so
a busy machine slows both alike. Each round is a fresh `Trainer` and, with the
callback, a fresh run in a scratch logbook. Reported side by side: the median
over rounds of (with - without) / without of the `train()` wall time, the
direct figure (seconds spent inside the callback's hooks over the run's
`train()` time, which the paired one estimates without the pair noise of a
busy machine; goal: at most 1%), and each mode's median seconds per step.

    python3 bench/callback_overhead.py [--rounds 5] [--steps 300] [--layers 2] [--width 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._result import result  # noqa: E402

GOAL = 0.01


def scratch_logbook(where: Path) -> Path:
    """A git repository with `logbook init` done, as a user's would be."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.org",
           "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.org"}
    subprocess.run(["git", "init", "-q", str(where)], check=True, env=env)
    subprocess.run([sys.executable, "-m", "logbook", "init"], cwd=where, check=True, env=env, capture_output=True)
    return where


def timed_hooks(callback, spent: list[float]):
    """The callback with each `on_*` hook timed into `spent` (its seconds, summed)."""
    for name in [n for n in dir(callback) if n.startswith("on_")]:
        hook = getattr(callback, name)

        def timed(*a, _hook=hook, **kw):
            t0 = time.perf_counter()
            try:
                return _hook(*a, **kw)
            finally:
                spent[0] += time.perf_counter() - t0

        setattr(callback, name, timed)
    return callback


def one_round(with_callback: bool, args, out: Path, logbook_root: Path, run_id: str,
              spent: list[float] | None = None) -> float:
    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class RandomTokens(Dataset):
        def __init__(self, n: int) -> None:
            self.ids = torch.randint(0, 256, (n, args.block), generator=torch.Generator().manual_seed(n))

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i: int):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=args.layers, n_head=4, n_embd=args.width, vocab_size=256,
                                       n_positions=args.block, bos_token_id=0, eos_token_id=0))
    targs = TrainingArguments(output_dir=str(out), max_steps=args.steps, per_device_train_batch_size=args.batch,
                              learning_rate=1e-3, logging_steps=1, save_strategy="steps", save_steps=args.steps // 2,
                              eval_strategy="steps", eval_steps=args.steps // 2, report_to=[], use_cpu=True,
                              disable_tqdm=True, seed=0)
    callbacks = []
    if with_callback:
        from logbook.integrations.hf import LogbookCallback

        callbacks.append(timed_hooks(LogbookCallback(run_id=run_id, project_root=logbook_root), spent or [0.0]))
    trainer = Trainer(model=model, args=targs, train_dataset=RandomTokens(4096), eval_dataset=RandomTokens(32),
                      callbacks=callbacks)
    t0 = time.perf_counter()
    trainer.train()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="A/B pairs (at least 5 for the goal)")
    ap.add_argument("--steps", type=int, default=300, help="optimizer steps per run (a real run is far longer)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (1 keeps a shared machine from thrashing)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="logbook-callback-bench-"))
    book = scratch_logbook(tmp / "lab")
    one_round(False, args, tmp / "warm", book, "warm-up")  # imports and first-call costs paid outside the figures
    times: dict[bool, list[float]] = {True: [], False: []}
    ratios, direct = [], []
    for r in range(args.rounds):
        pair, spent = {}, [0.0]
        for on in ((True, False) if r % 2 else (False, True)):  # who goes first alternates too
            pair[on] = one_round(on, args, tmp / f"out-{r}-{int(on)}", book, f"bench-{r}", spent)
            times[on].append(pair[on])
        ratios.append((pair[True] - pair[False]) / pair[False])
        direct.append(spent[0] / (pair[True] - spent[0]))
        print(f"round {r + 1}: without {pair[False]:.3f} s, with {pair[True]:.3f} s (paired {100 * ratios[-1]:+.2f}%); "
              f"{spent[0] * 1e3:.0f} ms in the callback's hooks ({100 * direct[-1]:.2f}%)", flush=True)
    overhead = statistics.median(direct)
    per_step = {on: statistics.median(times[on]) / args.steps for on in (False, True)}
    print(f"median s/step: without {per_step[False] * 1e3:.2f} ms, with {per_step[True] * 1e3:.2f} ms "
          f"({args.rounds} rounds, {args.steps} steps, {args.layers}x{args.width}, batch {args.batch})")
    result("HF callback overhead, paired (median of with/without - 1)", round(statistics.median(ratios), 4), "ratio",
           "reported beside the direct figure", None)
    result("HF callback overhead, direct (hook seconds / train seconds)", round(overhead, 4), "ratio", f"<= {GOAL}",
           overhead <= GOAL)


if __name__ == "__main__":
    main()
