"""Training: optimisation loop, schedules, checkpoints."""
