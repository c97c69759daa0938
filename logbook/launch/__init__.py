"""Launching and steering runs: torchrun under watch, Slurm, live change requests."""
