"""What is trained and on what: the model, the data stream, the optimizers and schedules, and the
compiled training step saved whole (precompile.py).
"""
