"""Callbacks that chronicle runs of other training frameworks (docs/integrations.md).

- `logbook.integrations.hf.LogbookCallback`: Hugging Face `transformers.Trainer`.
- `logbook.integrations.lightning.LogbookCallback`: PyTorch Lightning.

Both are thin: the framework's hooks hand plain numbers to
`recorder.Recorder`, which owns what is recorded (the run's start and end,
restarts, metrics, checkpoints, milestones, the loss-spike check) through
`logbook.api`. This package imports neither framework: each adapter module
imports its own, so nothing else in `logbook` may import an adapter.
"""
