"""Proofs beyond the hash chain: acknowledgements, third-party time, signatures, replay."""
