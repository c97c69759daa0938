"""Proofs that need more than one clone: third-party time, signed identity, replay."""
