"""Trust on first use: the reader's pin is written by the first `init` or `verify`, and moves forward only on the
say-so of the keys it already trusts.

As SSH's known_hosts learns a host's key on first connection, the first
`logbook init` or `logbook verify` in a clone pins the trust root it sees
(`logbook.trust.pins`), and says so. Afterwards a repository whose trust root
differs from the pin is exit 4 (`pin_differs`) unless the pin can move forward
on its own:

- every change only asks more of the repository (fewer CAs, a `require`
  turned on, a stricter review rule): a forger gains nothing from it (a new
  trust anchor, an authority or signing where the pin had none, is not
  "more": whoever pushed it would vouch for time or authorship from then on);
- or, as TUF accepts a new root.json only when the previous root's keys sign
  it, each commit that led from the pinned trust root to HEAD's is signed
  (`git commit -S`) by a key of the allowed signers in force before it, the
  first by a key of the pinned allowed-signers file. A rewritten history
  cannot produce such a commit without such a key.

Otherwise the reader records an agreed change with `logbook pin --update`,
which names each change and the commits that made it.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from logbook.core.errors import RefusedError, UsageError
from logbook.core.project import Project
from logbook.core.settings import CONFIG_FILE, load_config
from logbook.records import gitbind
from logbook.trust import pins


@dataclass
class Step:
    """One commit that changed the trust root, as a reader is told of it."""

    commit: str
    author: str
    """`Name <email>` of the commit's author."""
    signed_by: str | None
    """The principal of the allowed-signers file before the commit whose key signed it; None: not signed so."""
    changes: list[str] = field(default_factory=list)

    def sentence(self) -> str:
        signed = f", signed by {self.signed_by}" if self.signed_by else ", not signed by a key trusted before it"
        return f"{'; '.join(self.changes)} (commit {self.commit[:7]} by {self.author}{signed})"


@dataclass
class Settled:
    """What the reader's pin is for this repository once `settle` ran."""

    state: str
    """none (nothing pinned, nothing to pin) | first (pinned now, on first use) | same | forward (moved forward
    now) | differs (verify reports how: exit 4)"""
    key: str = ""
    path: Path | None = None
    pin: pins.TrustPin | None = None
    changes: list[str] = field(default_factory=list)
    """For `forward`: what moved."""
    why: str = ""
    """For `forward`: why the pin could move without the reader (stricter, or the signed commits); for `none`:
    why nothing was pinned, when there was something to pin."""

    def to_dict(self) -> dict:
        return {"state": self.state, "key": self.key, "file": str(self.path) if self.path else None,
                "changes": self.changes, "why": self.why, "line": self.line()}

    def line(self) -> str | None:
        """The one line a command prints about the pin, or None when there is nothing new to say."""
        if self.state == "first":
            return (f"pinned this repository's trust root on first use: {describe(self.pin)}; kept in {self.path} "
                    f"under {self.key} (every later verify on this machine compares the repository with it)")
        if self.state == "forward":
            return f"moved this repository's pin forward ({self.path}): {'; '.join(self.changes)}: {self.why}"
        if self.state == "none" and self.why:
            return f"not pinned: {self.why}"
        return None


def describe(pin: pins.TrustPin) -> str:
    """The pinned trust root in one line."""
    cas = ", ".join(h[:12] + "…" for h in pin.ca_sha256) or "none"
    signers = pin.allowed_signers_sha256[:12] + "…" if pin.allowed_signers_sha256 else "none (signing off)"
    return (f"CA sha256 {cas}, timestamping.require {_yn(pin.require)}, allowed signers {signers}, "
            f"signing.require {_yn(pin.signing_require)}, review_self_approval {_yn(pin.review_self_approval)}, "
            f"review_approvals {pin.review_approvals}")


def _yn(value: bool | None) -> str:
    return "unpinned" if value is None else str(value).lower()


def settle(project: Project) -> Settled:
    """Pin on first use, or move the pin forward where it may; never writes a pin that a change would weaken."""
    found = pins.find_pin(project, pins.load_pins())
    current = pins.current_root(project)
    if found is None:
        if not pins.has_trust_root(current):
            return Settled("none")
        if _dirty(project):
            return Settled("none", why="the trust root has uncommitted changes (a pin records what the lab "
                                       "committed): commit them, then `logbook pin`")
        done = pins.write_pin(project)
        return Settled("first", done.key, done.path, done.pin)
    key, old = found
    changes = pins.pin_changes(old, current)
    if not changes:
        return Settled("same", key, pins.pins_path(), old)
    if _dirty(project):
        return Settled("differs", key, pins.pins_path(), old)
    if all(c.stricter for c in changes):
        why = "each change asks more of the repository, so the pin follows it"
    else:
        steps = history_steps(project, old)
        if steps is None or not steps or any(s.signed_by is None for s in steps):
            return Settled("differs", key, pins.pins_path(), old)
        why = "committed with keys the pin trusts: " + "; then ".join(s.sentence() for s in steps)
    done = pins.write_pin(project, update=True)
    return Settled("forward", done.key, done.path, done.pin, [c.text for c in changes], why)


def _dirty(project: Project) -> bool:
    try:
        pins.refuse_uncommitted(project)
    except RefusedError:  # a trust root with uncommitted changes never moves a pin: nobody else sees it
        return True
    return False


# --- the trust root at each commit ------------------------------------------------------------------


def history_steps(project: Project, pin: pins.TrustPin) -> list[Step] | None:
    """The commits that led from the pinned trust root to HEAD's, oldest first, each with who signed it (by a key
    of the allowed signers in force before it); None when no commit of HEAD's history has the pinned trust root
    (a rewritten history, or a pin made stricter than the repository ever was)."""
    root = project.root
    rows = gitbind.git(root, "rev-list", "--parents", "HEAD", check=False).split("\n")
    parents = {r.split()[0]: r.split()[1:] for r in rows if r.strip()}
    if not parents:
        return None
    states = _states(project, list(parents))
    head = gitbind.head_commit(root)
    target, chain, c = pin.settings(), [], head
    while states[c][0] != target:
        while True:  # back to the commit that brought this trust root in
            same = [p for p in parents[c] if states[p][0] == states[c][0]]
            if not same:
                break
            c = same[0]
        if not parents[c]:
            return None  # the first commit already had it: it never came from the pinned one
        chain.append((c, parents[c][0]))
        c = parents[c][0]
    return [_step(project, commit, before, states) for commit, before in reversed(chain)]


def _step(project: Project, commit: str, before: str, states: dict) -> Step:
    old, new = states[before], states[commit]
    fmt = gitbind.git(project.root, "log", "-1", "--format=%an <%ae>", commit).strip()
    changes = [c.text for c in pins.pin_changes(_as_pin(old[0]), _as_pin(new[0]))]
    return Step(commit, fmt, _signer(project, commit, old[1]), changes)


def _as_pin(settings: tuple) -> pins.TrustPin:
    cas, require, signers, signing_require, self_approval, approvals = settings
    return pins.TrustPin(tuple(sorted(cas)), require, signers, signing_require, self_approval, approvals)


def _signer(project: Project, commit: str, allowed: bytes | None) -> str | None:
    """The principal whose key, in `allowed` (an allowed-signers file), signed `commit`; None otherwise."""
    if not allowed:
        return None
    with tempfile.NamedTemporaryFile("wb", suffix=".allowed_signers") as f:
        f.write(allowed)
        f.flush()
        out = gitbind.git(project.root, "-c", f"gpg.ssh.allowedSignersFile={f.name}", "log", "-1",
                          "--format=%G?%x1f%GS", commit, check=False).strip()
    status, _, principal = out.partition("\x1f")
    if status != "G":  # G: a good signature by a key the file holds (U, N, B, E...: anything else proves nothing)
        return None
    return principal or "a trusted key"


def _states(project: Project, commits: list[str]) -> dict[str, tuple[tuple, bytes | None]]:
    """Per commit: (its trust root as `TrustPin.settings` reads it, its allowed-signers file's bytes)."""
    root = project.root
    configs = gitbind.read_blobs(root, [f"{c}:{CONFIG_FILE}" for c in commits])
    parsed: dict[bytes | None, object] = {}
    for data in set(configs.values()):
        parsed[data] = _parse(data)
    specs = sorted({f"{c}:{path}" for c in commits if (cfg := parsed[configs[f"{c}:{CONFIG_FILE}"]]) is not None
                    for path in _paths(cfg)})
    files = gitbind.read_blobs(root, specs)
    out = {}
    for c in commits:
        cfg = parsed[configs[f"{c}:{CONFIG_FILE}"]]
        if cfg is None:
            out[c] = (("unreadable", c), None)  # equal to no other commit's trust root
            continue
        ts, signing = cfg.timestamping, cfg.signing
        cas = frozenset(h for a in (ts.authorities if ts else [])
                        if (b := files.get(f"{c}:{a.ca}")) is not None and (h := hashlib.sha256(b).hexdigest()))
        signers = files.get(f"{c}:{signing.allowed_signers}") if signing else None
        settings = (cas, bool(ts and ts.require), hashlib.sha256(signers).hexdigest() if signers is not None else None,
                    bool(signing and signing.require), bool(cfg.review_self_approval), int(cfg.review_approvals))
        out[c] = (settings, signers)
    return out


def _paths(cfg) -> list[str]:
    ts, signing = cfg.timestamping, cfg.signing
    return [a.ca for a in (ts.authorities if ts else [])] + ([signing.allowed_signers] if signing else [])


def _parse(data: bytes | None):
    """A committed logbook.yaml, read as `load_config` reads the working tree's; None when it does not load."""
    if data is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / CONFIG_FILE
        path.write_bytes(data)
        try:
            return load_config(path)
        except (UsageError, ValueError, TypeError):
            return None


def updated_steps(project: Project, old: pins.TrustPin) -> list[str]:
    """For `logbook pin --update`: each commit that led from `old` to HEAD's trust root, and who made it."""
    steps = history_steps(project, old)
    if steps is None:
        return ["no commit of HEAD's history has the pinned trust root: the history was rewritten, or the pin "
                "asked more than the repository ever did"]
    return [s.sentence() for s in steps]
