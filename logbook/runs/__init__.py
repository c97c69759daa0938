"""What a run is and what happened in it, read from its records: the run record, facts, goodput, lineage of attempts, milestones, checkpoint advice, the mirror into W&B."""
