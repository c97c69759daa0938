"""The jinja environment every view renders through: sandboxed, and a template's failure is a clear refusal.

A repository's own `templates/` folder overrides the bundled templates, and the
clone's hooks render at every pull, so a template is data a teammate
committed. An ordinary jinja environment lets a template climb from any global
to Python (`cycler.__init__.__globals__.os`) and run anything; the sandbox
refuses every attribute that leads there. (Not jinja's immutable sandbox: the
templates build their sentences in lists of their own with `append`, and
changing a list harms nothing outside the render.)

A template that fails (refused by the sandbox, a syntax error, a filter given
what it cannot take) stops the render with a `RefusedError` that names the
file, so a command says what happened and exits 3, and a caller that renders
after writing a record (a note, the launcher) keeps the record and says so.
"""

from __future__ import annotations

import sys
import traceback

import jinja2
from jinja2.sandbox import SandboxedEnvironment, SecurityError

from logbook.core.errors import RefusedError

_HINT_REFUSED = ("the repository's templates/ folder overrides the bundled templates: remove that file "
                 "(`git log -- templates/` says who committed it)")
_HINT_BROKEN = "the repository's templates/ folder overrides the bundled templates: fix or remove that file"


_VERDICTS: dict[tuple[type, str], bool] = {}
"""(type of the object, attribute) -> the sandbox's verdict: jinja's rules look at nothing else, and a lab's year
asks hundreds of thousands of times."""


class TemplateEnvironment(SandboxedEnvironment):
    """`SandboxedEnvironment` whose template failures are `RefusedError`s naming the template."""

    def is_safe_attribute(self, obj, attr: str, value) -> bool:
        key = (type(obj), attr)
        verdict = _VERDICTS.get(key)
        if verdict is None:
            verdict = _VERDICTS[key] = super().is_safe_attribute(obj, attr, value)
        return verdict

    def handle_exception(self, source: str | None = None):
        e, tb = sys.exc_info()[1:]
        if isinstance(e, RefusedError):
            raise e  # one template rendering another (`plan`): already worded
        if isinstance(e, (SecurityError, jinja2.TemplateError)):
            at = _where(e, tb)
            if isinstance(e, SecurityError):
                raise RefusedError(f"a template tried what no template may{at}: {str(e).rstrip('.')}; nothing was "
                                   "rendered from it", hint=_HINT_REFUSED) from None
            said = getattr(e, "message", None) or str(e)
            raise RefusedError(f"a template could not be rendered{at}: {type(e).__name__}: {said}",
                               hint=_HINT_BROKEN) from None
        return super().handle_exception(source)


def _where(e: BaseException, tb) -> str:
    """" (templates/chronicle/day.md.j2, line 3)": the failing template, from the error or the frames it ran in."""
    path, line = getattr(e, "filename", None), getattr(e, "lineno", None)
    if not path:
        frames = [f for f, _ in traceback.walk_tb(tb) if f.f_code.co_filename.endswith(".j2")]
        path = frames[-1].f_code.co_filename if frames else None
    if not path:
        return ""
    shown = "templates/" + path.replace("\\", "/").rpartition("/templates/")[2] if "/templates/" in path else path
    return f" ({shown}{f', line {line}' if line else ''})"
