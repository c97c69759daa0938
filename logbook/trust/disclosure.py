"""What no proof can show: that a preregistration is the only one made on its question.

A lab can preregister ten variants of one prediction, have every one stamped
honestly, run them all, and show the one that came true. Each stamp is valid;
what is missing is the other nine. The defence is disclosure: the retrospective
of a run lists every preregistration in the logbook that asks the same
question, stamped or not, with its runs, so a reader sees the denominator.

"The same question" is read from what can be checked, not from titles: two
preregistrations ask the same question when they predict the same metric at the
same point of a run, and name the same training config (or both name none).
That catches a threshold moved from one variant to the next; a forger who also
changes the config escapes it, which is why the count is a disclosure, not a
proof, and `docs/trust.md` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from logbook.core.project import Project
from logbook.promises.prereg import Prereg, list_preregs, runs_referencing
from logbook.trust.stamp_store import earliest


@dataclass
class Sibling:
    """Another preregistration on the same question."""

    id: str
    title: str
    created: str
    stamped: bool
    """Whether a configured authority's stamp of the record checks offline."""
    runs: list[str] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)
    """The `metric@point` questions it shares with the preregistration asked about."""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "created": self.created, "stamped": self.stamped,
                "runs": self.runs, "shared": self.shared}


def questions(p: Prereg) -> set[tuple[str, str, str]]:
    """(metric, point, config path) for every prediction and forecast point `p` states, amendments included."""
    config = str((p.config or {}).get("path") or "")
    return {(pr.metric, pr.at.to_text(), config) for pr, _src in p.all_predictions()}


def same_question(project: Project, prereg_id: str) -> list[Sibling]:
    """Every other preregistration that predicts a metric at a point this one does, under the same config."""
    preregs = list_preregs(project)
    mine = next((p for p in preregs if p.id == prereg_id), None)
    if mine is None:
        return []
    asked = questions(mine)
    runs = runs_referencing(project)
    out = []
    for p in preregs:
        shared = asked & questions(p) if p.id != prereg_id else set()
        if shared:
            out.append(Sibling(p.id, p.title, p.created, earliest(project, p.sha256) is not None, sorted(runs.get(p.id, [])),
                               sorted(f"{m}@{at}" for m, at, _c in shared)))
    return out

