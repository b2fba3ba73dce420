"""A grid's report kept current while the grid runs.

`harness run` hands a `LiveReport` to the grid, which calls it after each finished job: the report of
the results folder is rebuilt from the run records written so far, at most once every `every` seconds
(the first finished job always gets one), and the page says how many runs are still to come: this grid's
and those of any other grid running on the same folder (`still_to_come`, from the grids' published
queues; without it, this grid's planned runs less those done). The
report reads only finished run folders (status.json is written last, and every file atomically), so
a run still training is never half-read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

DEFAULT_EVERY = 300.0  # seconds between rebuilds: a report costs a core for a while (docs/measurements.md, live.py)


class LiveReport:
    """Callable as `(runs done, runs planned)`; rebuilds `out_dir` from `results_dir` when due."""

    def __init__(
        self,
        results_dir: Path,
        out_dir: Path,
        every: float = DEFAULT_EVERY,
        targets: Mapping[str, float] | None = None,
        randoms: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] = print,
        still_to_come: Callable[[], int] | None = None,
    ):
        self.results_dir, self.out_dir, self.every = Path(results_dir), Path(out_dir), every
        self.targets, self.randoms = targets, randoms
        self.clock, self.log = clock, log
        self.still_to_come = still_to_come
        self.last: float | None = None
        self.builds = 0

    def __call__(self, done: int, planned: int) -> None:
        if done >= planned:
            return  # the grid's final report follows
        now = self.clock()
        if self.last is not None and now - self.last < self.every:
            return
        from .judging.report import build_report  # matplotlib and friends: only once a report is due

        self.last = now
        try:
            pending = self.still_to_come() if self.still_to_come is not None else planned - done
            build_report(
                self.results_dir, self.out_dir, targets=self.targets, randoms=self.randoms, pending=pending or None
            )
        except Exception as exc:  # a report must never stop the grid; the next finished job retries
            self.log(f"warning: live report not rebuilt ({type(exc).__name__}: {exc})")
            return
        self.builds += 1
        self.log(
            f"live report: {self.out_dir / 'index.html'} ({done} of {planned} runs of this grid finished, "
            f"{pending} still to come on the folder)"
        )
