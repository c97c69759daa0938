"""`timestamping:` in logbook.yaml: which RFC 3161 authorities stamp the records, and how strictly.

```yaml
timestamping:
  authorities:
    - url: https://freetsa.org/tsr
      ca: trust/freetsa-root.pem   # the CA certificate trusted for it, committed in the repository
  require: false                   # true: a missing or invalid stamp is exit 4
  timeout_s: 5                     # no command waits longer than this for an authority
```
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from logbook.core.errors import UsageError, did_you_mean
from logbook.core.typedconfig import is_scalar

_WHERE = "logbook.yaml: timestamping"


@dataclass(frozen=True)
class Authority:
    """One timestamp authority."""

    url: str
    """Where requests are posted (http or https)."""
    ca: str
    """The CA certificate (PEM) its tokens must chain to: a path relative to the repository root, committed."""

    @property
    def key(self) -> str:
        """The name of its stamp files: the first 12 hex of sha256(url)."""
        return authority_key(self.url)


def authority_key(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:12]


@dataclass
class TimestampingConfig:
    """Third-party time for the logbook's records."""

    authorities: list[Authority] = field(default_factory=list)
    """Every authority is asked for every record; one valid stamp suffices."""
    require: bool = False
    """True: a record without a valid stamp, or a run whose stamps all came after it ended, is exit 4."""
    timeout_s: float = 5.0
    """Seconds any command waits for an authority before it leaves the stamp pending."""

    def to_dict(self) -> dict[str, Any]:
        return {"authorities": [{"url": a.url, "ca": a.ca} for a in self.authorities],
                "require": self.require, "timeout_s": self.timeout_s}


_KEYS = ("authorities", "require", "timeout_s")


def parse_timestamping(raw: Any) -> TimestampingConfig | None:
    """The validated `timestamping:` mapping (None when absent); UsageError naming what is wrong."""
    if raw is None:
        return None
    if isinstance(raw, TimestampingConfig):
        return raw
    if not isinstance(raw, dict):
        raise UsageError(f"{_WHERE} must be a mapping with `authorities:`", hint=_example())
    for key in raw:
        if key not in _KEYS:
            raise UsageError(f"{_WHERE}: unknown setting `{key}`", hint=did_you_mean(str(key), list(_KEYS), _example()))
    auths = raw.get("authorities")
    if not isinstance(auths, list) or not auths:
        raise UsageError(f"{_WHERE}.authorities must be a non-empty list of {{url, ca}}", hint=_example())
    parsed = [_authority(a, i) for i, a in enumerate(auths, start=1)]
    if len({a.key for a in parsed}) != len(parsed):
        raise UsageError(f"{_WHERE}.authorities names one url twice")
    require = raw.get("require", False)
    if not is_scalar(require, bool):
        raise UsageError(f"{_WHERE}.require must be true or false, got {require!r}")
    timeout = raw.get("timeout_s", 5.0)
    if not is_scalar(timeout, float) or not math.isfinite(timeout) or not 0 < timeout <= 600:
        raise UsageError(f"{_WHERE}.timeout_s must be a number of seconds in (0, 600], got {timeout!r}")
    return TimestampingConfig(parsed, require, float(timeout))


def _authority(raw: Any, n: int) -> Authority:
    if not isinstance(raw, dict) or set(raw) != {"url", "ca"}:
        raise UsageError(f"{_WHERE}.authorities[{n}] must have exactly `url` and `ca`", hint=_example())
    url, ca = raw["url"], raw["ca"]
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{_WHERE}.authorities[{n}].url must be an http(s) URL, got {url!r}")
    if (not isinstance(ca, str) or not ca or "\x00" in ca or Path(ca).is_absolute() or ".." in Path(ca).parts):
        raise UsageError(f"{_WHERE}.authorities[{n}].ca must be a path inside the repository, got {ca!r}",
                         hint="commit the authority's CA certificate, e.g. trust/tsa-root.pem, and name it here")
    return Authority(url, ca)


def _example() -> str:
    return "example: timestamping: {authorities: [{url: https://freetsa.org/tsr, ca: trust/freetsa-root.pem}]}"
