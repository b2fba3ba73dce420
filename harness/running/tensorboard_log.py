"""Optional TensorBoard scalars of each run (`harness run --tensorboard`, the `tensorboard` extra).

A convenience for those who watch runs in TensorBoard: each run folder gets a `tensorboard/` folder of
event files holding the same numbers as its CSV records (evaluation returns, training episode returns,
diagnostics), written at every evaluation. The CSV records stay the source of truth; nothing reads these
files back. `tensorboard --logdir results/NAME/runs` shows every run of a grid.
"""

from __future__ import annotations

from collections.abc import Sequence

INSTALL_HINT = '--tensorboard needs the tensorboard package: pip install -e ".[tensorboard]"'
EVAL_TAGS = ("eval/return_mean", "eval/return_std")
TRAIN_TAGS = ("train/episode_return", "train/episode_length")


def available() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def _diagnostic_tags() -> tuple[str, ...]:
    from variants.learner import DIAGNOSTICS

    return ("diagnostics/updates", *(f"diagnostics/{name}" for name in DIAGNOSTICS))


class ScalarLog:
    """One SummaryWriter per member, fed the member's new record rows at each `flush`.

    `start_step` > 0 means the job resumed from a checkpoint: rows up to the member's last evaluation
    were written before the interruption, and events past it (written after the checkpoint) are purged,
    so a resumed run's scalars equal an uninterrupted run's.
    """

    def __init__(self, members: Sequence, start_step: int):
        from torch.utils.tensorboard import SummaryWriter

        self._writers = []
        self._written: list[list[int]] = []  # per member: eval, train, diagnostics rows already written
        for m in members:
            done = max((row[0] for row in m.eval_rows), default=0) if start_step > 0 else -1
            purge = done + 1 if start_step > 0 else None
            self._writers.append(SummaryWriter(str(m.path / "tensorboard"), purge_step=purge))
            self._written.append(
                [sum(1 for row in rows if row[0] <= done) for rows in (m.eval_rows, m.train_rows, m.diag_rows)]
            )

    def flush(self, members: Sequence) -> None:
        diag_tags = _diagnostic_tags()
        for writer, written, m in zip(self._writers, self._written, members):
            for k, (rows, tags) in enumerate(
                ((m.eval_rows, EVAL_TAGS), (m.train_rows, TRAIN_TAGS), (m.diag_rows, diag_tags))
            ):
                for row in rows[written[k] :]:
                    for tag, value in zip(tags, row[1:]):
                        writer.add_scalar(tag, float(value), int(row[0]))
                written[k] = len(rows)
            writer.flush()

    def close(self, members: Sequence) -> None:
        self.flush(members)
        for writer in self._writers:
            writer.close()
