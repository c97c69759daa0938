"""This process's place in the job: its rank and process group (dist.py, rendezvous.py), the Slurm job
around it (slurm.py), and which attempt of the run it is (attempts.py: the heartbeat it writes).
"""
