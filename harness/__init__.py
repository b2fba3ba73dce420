"""sacbench's harness: environments, grids of runs, run records, reports and regression checks."""
