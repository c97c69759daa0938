"""The divergence guard in the loop: the callback that feeds the logbook's guard (`logbook.guard`, torch-free)
each step and carries out its skips and rollbacks on the model (callback.py).
"""
