"""What survives a kill: checkpoints in both formats (checkpoint.py, one torch.save file per part;
checkpoint_dcp.py, every rank's shards) and every RNG's state as tensors they can hold (rng.py).
"""
