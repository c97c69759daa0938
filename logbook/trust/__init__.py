"""Proofs a forger with push rights cannot make: third-party time, signed identity, and the checks that need neither."""
