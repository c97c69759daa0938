"""The foundation every layer stands on: errors and exit codes, durable file writes, YAML, text formatting, the project's paths and settings, git state and identity."""
