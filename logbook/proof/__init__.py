"""The proof: every record checked (`verify`), the checks a command reads before it trusts them (`intact`), amendments of a preregistration that verifies, and scorecards with verify's verdict."""
