"""The PyTorch trainer: model, data, checkpoints, guard, live control, telemetry.

`python -m trainer` trains one attempt of a run (see `trainer/__main__.py`).
"""

# The exit codes an attempt ends with live with every other exit code, in logbook/core/errors.py.
from logbook.api import Run

EXIT_HANG, EXIT_PREEMPTED = Run.EXIT_HANG, Run.EXIT_PREEMPTED

WARM_COMPILE_CACHE = "LOGBOOK_WARM_COMPILE_CACHE"
"""Set by the agent for its fork server (trainer/launch/agent.py, trainer/launch/prewarm.py): a compiled run's
state folder."""
