"""This process's place in the job: its rank and process group (dist.py, rendezvous.py), and the heartbeat it
writes as an attempt of the run (attempts.py); the Slurm job around it is `logbook.api.slurm_info`'s.
"""
