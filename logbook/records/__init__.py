"""Records in git: one-file commits with trailers and code snapshots, the working tree and history, remotes, `init`
and `migrate`."""
