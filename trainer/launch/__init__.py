"""How `logbook run` starts the trainer: torchrun with workers forked warm (agent.py) from a fork
server that imported everything once (prewarm.py). They sit above the rest: they run `python -m trainer`.
"""
