"""A real Slurm on this machine."""
