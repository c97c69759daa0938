"""The jinja environment every view renders through: sandboxed, and a template's failure is a clear refusal.

A repository's own `templates/` folder overrides the bundled templates, and the
clone's hooks render at every pull, so a template is data a teammate
committed. An ordinary jinja environment lets a template climb from any global
to Python (`cycler.__init__.__globals__.os`) and run anything; the sandbox
refuses every attribute that leads there, and the immutable one refuses
changing the data handed to the template as well.

A template that fails (refused by the sandbox, a syntax error, a filter given
what it cannot take) stops the render with a `RefusedError` that names the
file, so a command says what happened and exits 3, and a caller that renders
after writing a record (a note, the launcher) keeps the record and says so.
"""

from __future__ import annotations

import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from logbook.core.errors import RefusedError

_HINT_REFUSED = ("the repository's templates/ folder overrides the bundled templates: remove that file "
                 "(`git log -- templates/` says who committed it)")
_HINT_BROKEN = "the repository's templates/ folder overrides the bundled templates: fix or remove that file"


class TemplateEnvironment(ImmutableSandboxedEnvironment):
    """`ImmutableSandboxedEnvironment` whose template failures are `RefusedError`s naming the template."""

    def handle_exception(self, source: str | None = None):
        e = sys.exc_info()[1]
        if isinstance(e, RefusedError):
            raise e  # one template rendering another (`plan`): already worded
        if isinstance(e, (SecurityError, jinja2.TemplateError)):
            where = getattr(e, "filename", None) or getattr(e, "name", None)
            line = getattr(e, "lineno", None)
            at = f" ({where}{f', line {line}' if line else ''})" if where else ""
            if isinstance(e, SecurityError):
                raise RefusedError(f"a template tried what no template may{at}: {str(e).rstrip('.')}; nothing was "
                                   "rendered from it", hint=_HINT_REFUSED) from None
            raise RefusedError(f"a template could not be rendered{at}: {type(e).__name__}: {e}",
                               hint=_HINT_BROKEN) from None
        return super().handle_exception(source)
