"""Records, their storage and git: the hash-chained event log and its schema, one-file records, preregistrations, commits, history and verification."""
