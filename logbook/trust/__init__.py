"""Proofs that need more than a hash chain: third-party time, signed identity, and seeds drawn from a stamp."""
