"""This process's place in the job: its rank and process group (dist.py, rendezvous.py); the heartbeat it
writes as an attempt of the run is `logbook.api.Run.reached`'s, the Slurm job around it `logbook.api.slurm_info`'s.
"""
