"""How a grid's training ends early, as exceptions that the command line catches without importing the
training code (and torch) itself."""


class Interrupted(Exception):
    """Training stopped on request after writing a checkpoint; rerunning resumes it."""


class WorkerCrashed(Exception):
    """A worker process died without reporting (killed, out of memory)."""
