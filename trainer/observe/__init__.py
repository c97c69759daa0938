"""The loop's callbacks (callbacks.py: the hooks and `TrainerView`) and those that watch a run:
telemetry, W&B, stragglers, hangs, progress on stderr, milestone notes and checkpoint-interval advice.
"""
