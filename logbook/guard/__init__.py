"""The divergence guard, torch-free: spike detection, the ladder from skip to rollback to abort, the ruling
and its events, replay's verdict, and the settings the preregistered plan gives it.

Any loop drives it (the bundled trainer's callback in trainer/guard/callback.py
is one): hand `Guard.observe` each step's loss and gradient norm and act on the
`Decision` it returns. The spike rule itself is logbook/runs/spikes.py, the one
every path judges with.
"""

from logbook.guard.config import GuardConfig
from logbook.guard.decision import Decision, Verdict, complete_rollback
from logbook.guard.ladder import Guard, agreed, agreement_code
from logbook.guard.plan import guard_from_plan
from logbook.guard.replay import label_replay, replay_check

__all__ = ["GuardConfig", "Decision", "Verdict", "complete_rollback", "Guard", "agreed", "agreement_code", "guard_from_plan", "label_replay", "replay_check"]
