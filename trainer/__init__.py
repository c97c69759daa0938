"""The PyTorch trainer: model, data, checkpoints, guard, live control, telemetry.

`python -m trainer` trains one attempt of a run (see `trainer/__main__.py`).
"""

EXIT_PREEMPTED = 75
"""The attempt was preempted (SIGTERM/SIGUSR1), saved its state and exited: restart it to resume."""

EXIT_HANG = 124
"""The hang watchdog ended an attempt that made no progress: restart it to resume."""
