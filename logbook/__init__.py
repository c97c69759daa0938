"""logbook: preregistrations bound to git, durable run event logs, dated chronicles.

This package is the CLI and the library. It never imports torch or wandb. A
training loop (the bundled trainer too) reaches it through one module,
`logbook.api`, never the reverse.
"""

__version__ = "0.1.0"
