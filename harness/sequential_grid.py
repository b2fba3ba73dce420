"""A grid that adds seeds look by look until every comparison is decided (`harness run --until-decided`).

Look j trains seeds 0 .. n_j - 1 (n_j = min(j K, N), `SequentialDesign.seeds_at`) of every variant with a
comparison still open, seed-major as every grid (harness.running.grid plans and trains them; finished
runs are skipped), and of the reference while any comparison against it is open in that env; a variant
whose comparisons are all decided gets no more seeds. Then the look is judged from the run records
alone (harness.judging.looks, with a rule of harness.judging.sequential) and written to
`<results>/looks.json` before the next look starts. The grid stops when every comparison is decided or
after the look at N seeds.

A killed grid resumes: the looks already in looks.json stand as written, the runs already finished are
not trained again, and a look is judged only once all its runs are finished, on exactly its seeds, so a
rerun of the same command reaches the same decisions. This module joins the two halves (running and
judging never import each other); the command line only hands over to it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from . import records
from .judging import loading, looks, normalization, sequential
from .running import grid
from .running.train import Job


class SequentialGridError(ValueError):
    """The results folder holds looks of another design, or looks that cannot be read (one line)."""


def design_from(
    rule: str | None, look_every: int | None, max_seeds: int | None, futility: float | None = None
) -> sequential.SequentialDesign:
    """The design of `--rule`, `--look-every`, `--max-seeds` and `--futility`, each the design's default
    where None. Raises SequentialGridError (one line) for a design the rules refuse."""
    given = {"rule": rule, "look_every": look_every, "max_seeds": max_seeds, "futility": futility}
    try:
        return sequential.SequentialDesign(**{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise SequentialGridError(str(exc)) from None


def start_or_resume(out: Path, asked: dict) -> looks.Looks:
    """The looks recorded in `out` when their design is `asked` (a resumed grid), a fresh record when
    there are none. Raises SequentialGridError when `out` records another design or an unreadable file."""
    try:
        state = looks.read_looks(out)
    except looks.LooksError as exc:
        raise SequentialGridError(str(exc)) from None
    if state is None:
        return looks.Looks(asked)
    if state.design.get("futility") != asked.get("futility"):
        # Futility is non-binding (harness.judging.sequential): it decides which open comparisons get more
        # seeds, never a boundary or a claim, so a resumed grid may take another threshold, or none (then
        # the comparisons it stopped go on, and a grid that had ended on them resumes).
        state = dataclasses.replace(state, design=state.design | {"futility": asked.get("futility")})
        if state.end == looks.END_FUTILITY:
            state = dataclasses.replace(state, end=look_end(state))
    difference = looks.design_difference(state.design, asked)
    if difference:
        raise SequentialGridError(
            f"{out} holds the looks of another sequential grid ({difference}); use another --out, "
            f"or the design it records"
        )
    return state


def plan_look(request: grid.GridRequest, trained: Mapping[str, Sequence[str]], n: int) -> list[Job]:
    """The jobs of one look: seeds 0..n-1 of `trained` (env -> variants) not yet finished, seed-major,
    the cheapest env first (as `grid.plan`). Raises grid.ConfigConflict as `grid.plan` does."""
    jobs: list[Job] = []
    for env, names in trained.items():
        part = dataclasses.replace(
            request, variants={v: request.variants[v] for v in names}, envs=[env], seeds=list(range(n))
        )
        jobs.extend(grid.plan(part).jobs)
    jobs.sort(key=lambda job: (job.budget.total_steps, job.seeds[0]))
    return jobs


def look_cost_text(
    jobs: Sequence[Job], trained: Mapping[str, Sequence[str]], n: int, max_seeds: int, workers: int
) -> str:
    """What a look costs and what it could lead to: its runs and their expected time on `workers`
    (`grid.job_seconds`: this folder's runs of each variant, env and budget), then, where the plan has
    looks after it, the runs they would add if this look decided nothing (seeds n..max_seeds-1 of the
    same variants; every decision or futility stop makes it fewer)."""
    runs = sum(len(job.seeds) for job in jobs)
    minutes = grid.estimate_seconds(jobs, workers) / 60
    text = (
        f"{runs} run{'s' if runs != 1 else ''} in {len(jobs)} job{'s' if len(jobs) != 1 else ''}, "
        f"expected {minutes:,.0f} min on {workers} worker{'s' if workers != 1 else ''}"
    )
    later = sum(len(names) for names in trained.values()) * (max_seeds - n)
    if later > 0:
        text += f"; if it decides nothing, the looks after it add at most {later} runs (seeds {n}-{max_seeds - 1})"
    return text


def unfinished_runs(out: Path, trained: Mapping[str, Sequence[str]], n: int) -> list[str]:
    """'env variant seed k' for each run of a look (seeds 0..n-1 of `trained`) with no finished record."""
    return [
        f"{env} {variant} seed {seed}"
        for env, names in trained.items()
        for variant in names
        for seed in range(n)
        if records.run_state(records.run_dir(out, env, variant, seed)) is None
    ]


def look_end(state: looks.Looks) -> str | None:
    """How the grid ends after the last look of `state`: every comparison decided, the plan's last look
    taken, or None (more looks)."""
    if not looks.open_variants(state):
        decided = all(c.verdict != sequential.OPEN for c in looks.comparisons(state))
        return looks.END_DECIDED if decided else looks.END_FUTILITY
    return looks.END_MAXIMUM if len(state.looks) >= state.rule_design.looks else None


def judge_next(
    data: loading.RunRecords, state: looks.Looks, trained: Mapping[str, Sequence[str]], n: int
) -> looks.Looks:
    """`state` with its next look (seeds 0..n-1 of `trained`) judged from the run records `data`;
    nothing written. Raises SequentialGridError when the look cannot be judged."""
    try:
        record = looks.judge_look(state, data, {env: dict.fromkeys(names, n) for env, names in trained.items()})
    except looks.LooksError as exc:
        raise SequentialGridError(str(exc)) from None
    judged = dataclasses.replace(state, looks=(*state.looks, record))
    return dataclasses.replace(judged, end=look_end(judged))


def judge_and_record(out: Path, state: looks.Looks, trained: Mapping[str, Sequence[str]], n: int) -> looks.Looks:
    """`judge_next` on the run records of `out` as they are now, then looks.json written with the new state."""
    judged = judge_next(loading.scan_results(out), state, trained, n)
    looks.write_looks(out, judged)
    return judged


def run_until_decided(
    request: grid.GridRequest,
    design: sequential.SequentialDesign,
    reference: str,
    workers: int,
    deadline: float | None = None,
    on_finished: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] = print,
    compared: Sequence[tuple[str, str]] | None = None,
) -> looks.Looks:
    """Train and judge look after look (see the module doc) until the grid ends or a look is left with
    runs unfinished (`deadline` passed, or runs left to another process): then it returns the state so
    far, and a rerun goes on. `request.seeds` is not used. `compared`: the comparisons, (variant, compared
    with) pairs, where not every variant against the reference (an ablation's attribution). Raises
    SequentialGridError, grid.ConfigConflict, and `Interrupted` on Ctrl-C (finished runs and judged looks
    kept)."""
    out, started = Path(request.out), time.time()  # the runs finished since pace every look's estimates
    state = start_or_resume(out, looks.design_record(design, reference, request.envs, list(request.variants), compared))
    while state.end is None:
        look, trained = len(state.looks) + 1, looks.open_variants(state)
        n = design.seeds_at(look)
        jobs = plan_look(request, trained, n)
        log(
            f"look {look} of at most {design.looks}: seeds 0-{n - 1} of "
            + "; ".join(f"{env}: {', '.join(names)}" for env, names in trained.items())
            + f" ({sum(len(job.seeds) for job in jobs)} runs to train)"
        )
        queue = records.hold_queue(out, [(job.env_id, job.variant, seed) for job in jobs for seed in job.seeds])
        try:
            grid.execute(jobs, workers, log=log, on_finished=on_finished, deadline=deadline, paced_since=started)
        finally:
            queue.release()
        waiting = unfinished_runs(out, trained, n)
        if waiting:
            log(
                f"look {look} is not judged: {len(waiting)} run(s) unfinished ({', '.join(waiting[:3])}"
                + (", ..." if len(waiting) > 3 else "")
                + "); rerun the same command to go on"
            )
            return state
        state = judge_and_record(out, state, trained, n)
        log(look_line(state))
    return state


def look_line(state: looks.Looks) -> str:
    """'look 1 judged: Pendulum-v1 critic-first worse (failure) on final_return, auc_return; 2 comparison(s) open'."""
    look, found = len(state.looks), looks.comparisons(state)
    decided: dict[tuple[str, str, str], list[str]] = {}
    for c in found:
        if c.verdict != sequential.OPEN and c.look == look:
            verdict = c.verdict + (" (failure)" if c.basis == looks.FAILURE else "")
            decided.setdefault((c.env, c.variant, verdict), []).append(c.metric)
    parts = [
        f"{env} {variant} {verdict} on {', '.join(metrics)}" for (env, variant, verdict), metrics in decided.items()
    ]
    still = sum(c.verdict == sequential.OPEN and not c.stopped for c in found)
    stopped = sum(c.verdict == sequential.OPEN and c.stopped for c in found)
    return f"look {look} judged: {'; '.join(parts) or 'nothing decided'}; {still} comparison(s) open" + (
        f", {stopped} stopped for futility" if stopped else ""
    )


def check_request(
    request: grid.GridRequest,
    design: sequential.SequentialDesign,
    reference: str,
    compared: Sequence[tuple[str, str]] | None = None,
) -> None:
    """Raise SequentialGridError (one line) unless the grid can be judged look by look: the reference and
    at least one other variant among its variants (and every variant of `compared`, which only the paired
    rule judges), and, where the design judges normalized scores (it has an equivalence margin),
    normalization constants for every env (the table's, or --target/--random)."""
    if reference not in request.variants:
        raise SequentialGridError(f"--until-decided judges every variant against {reference}: add it to --variants")
    if len(request.variants) < 2:
        raise SequentialGridError(f"--until-decided needs a variant besides {reference} to compare")
    missing = sorted({name for pair in compared or () for name in pair} - set(request.variants))
    if missing:
        raise SequentialGridError(f"--until-decided compares {', '.join(missing)}, which the grid does not train")
    default = sequential.default_comparisons(request.variants, reference)
    if compared is not None and list(compared) != default and design.rule != "paired":
        raise SequentialGridError(f"the {design.rule} rule compares every variant with {reference} only")
    if design.margin is None:
        return
    with normalization.extended(
        {e: a["target"] for e, a in request.normalization.items() if "target" in a},
        {e: a["random"] for e, a in request.normalization.items() if "random" in a},
    ):
        raw = [env for env in request.envs if not normalization.can_normalize(env)]
    if raw:
        raise SequentialGridError(
            f"--until-decided judges normalized scores: give --target ENV=RETURN --random ENV=RETURN for {', '.join(raw)}"
        )


def dry_run_text(
    request: grid.GridRequest,
    design: sequential.SequentialDesign,
    reference: str,
    copied: Collection[tuple[str, str, int]] = (),
    compared: Sequence[tuple[str, str]] | None = None,
    workers: int = 1,
) -> str:
    """What the grid would train next, without training or writing anything: the looks whose runs are all
    finished already (a study switched to the sequential rule, a grid stopped between runs and judging)
    are judged in memory, as the grid would judge them, each told in one line, up to the first look with
    runs to train, whose jobs are listed with their expected time on `workers` (`look_cost_text`).
    `copied`: (env, variant, seed) of runs that would be copied into the folder before the look rather
    than trained. `compared`: as `run_until_decided`."""
    out = Path(request.out)
    state = start_or_resume(out, looks.design_record(design, reference, request.envs, list(request.variants), compared))
    lines: list[str] = []
    copied = set(copied)
    data: loading.RunRecords | None = None
    while state.end is None:
        look, trained = len(state.looks) + 1, looks.open_variants(state)
        n = design.seeds_at(look)
        head = f"look {look} of at most {design.looks} (seeds 0-{n - 1})"
        jobs = []
        for job in plan_look(request, trained, n):
            seeds = tuple(seed for seed in job.seeds if (job.env_id, job.variant, seed) not in copied)
            if seeds:
                jobs.append(dataclasses.replace(job, seeds=seeds))
        if jobs:
            cost = look_cost_text(jobs, trained, n, design.max_seeds, workers)
            return "\n".join([*lines, f"{head}: {grid.plan_text(jobs)}", cost])
        if unfinished_runs(out, trained, n):
            return "\n".join([*lines, f"{head}: every run is finished or copied first; the look is judged next"])
        if data is None:  # read once: a dry run adds no run between looks
            data = loading.scan_results(out)
        state = judge_next(data, state, trained, n)
        lines.append(f"{head}: every run is finished; judged now, in memory ({look_line(state)})")
    return "\n".join([*lines, "nothing to train: the sequential grid has ended", *looks.summary_lines(state)])
