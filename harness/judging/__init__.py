"""The judging half: statistics, the verdict rule and its calibration, the report, the regression check.

It reads run records only, never a learner."""
