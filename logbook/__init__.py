"""logbook: preregistrations bound to git, durable run event logs, dated chronicles.

This package is the CLI and the library. It never imports torch or wandb: the
trainer imports it to emit events, never the reverse.
"""

__version__ = "0.1.0"
