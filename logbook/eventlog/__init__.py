"""The event log: every run's durable, hash-chained log and its schema, the sink that writes it, one-file records,
and what streams and reads them back."""
