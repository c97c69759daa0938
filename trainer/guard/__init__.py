"""The divergence guard: spike detection, the ladder from skip to rollback to abort, the ruling and
its events, replay, the plan's settings, and the callback that puts it in the loop (callback.py).
"""
