"""The running half: environments, budgets, training jobs, grids, run records' writers, exports."""
