"""Training episodes over a run: how long they last, what they return, and how many run out the clock.

A learner can settle on a behaviour that no return curve names: on BipedalWalker, standing still until
the time limit avoids the -100 of a fall; on LunarLander, hovering does the same for a crash. The
training episodes show it. Per (env, variant) and window of env steps, over the runs read:

    episodes        training episodes that ended in the window (all runs together)
    return_median   their median undiscounted return (the environment's own rewards)
    length_median   their median length in steps
    at_time_limit   the share that lasted the environment's time limit (ran out the clock, or were
                    cut there while still going)

Run as `python -m harness.judging.episodes RESULTS [RESULTS ...] [--variants a,b] [--window 40000]`;
it prints one table per environment. It reads train.csv and config.json of the finished run folders
(results/README.md), never a learner.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..records import TRAIN_COLUMNS, not_a_results_folder
from . import loading
from .findings import step_text

WINDOW_COLUMNS = (
    "env",
    "variant",
    "window_start",
    "window_end",
    "n_runs",
    "episodes",
    "return_median",
    "length_median",
    "at_time_limit",
)


def read_train(records: loading.RunRecords) -> pd.DataFrame:
    """train.csv of every run in `records`, keyed: env, variant, seed, env_step, episode_return, episode_length.

    A run whose train.csv is missing or lacks a column is left out (its other records were readable).
    """
    frames = []
    for run in records.runs.itertuples(index=False):
        path = records.folders[(run.env, run.variant, run.seed)] / "train.csv"
        try:
            train = pd.read_csv(path)
        except (OSError, ValueError, pd.errors.ParserError):
            continue
        if not set(TRAIN_COLUMNS) <= set(train.columns) or train.empty:  # empty: no episode ended (failed early)
            continue
        frames.append(train[list(TRAIN_COLUMNS)].assign(env=run.env, variant=run.variant, seed=run.seed))
    columns = ["env", "variant", "seed", *TRAIN_COLUMNS]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]


def time_limits(configs: Mapping[tuple[str, str, int], dict]) -> dict[str, int]:
    """{env: max_episode_steps} from the runs' configs: `env_kwargs.max_episode_steps` where a run set it,
    else the limit gymnasium registered for its `env_entry` (looked up, never imported); an env with neither
    is left out."""
    import gymnasium as gym

    limits: dict[str, int] = {}
    for (env, _, _), config in configs.items():
        if env in limits:
            continue
        kwargs = config.get("env_kwargs") or {}
        if isinstance(kwargs.get("max_episode_steps"), int):
            limits[env] = kwargs["max_episode_steps"]
            continue
        entry = config.get("env_entry") or env
        # A registry lookup only: `gym.spec("module:Id")` would import a module named in the records.
        registered = gym.registry.get(entry) if isinstance(entry, str) and ":" not in entry else None
        if registered is not None and registered.max_episode_steps:
            limits[env] = int(registered.max_episode_steps)
    return limits


def episode_windows(train: pd.DataFrame, window: int, limits: Mapping[str, int]) -> pd.DataFrame:
    """Per (env, variant) and window [k * window, (k + 1) * window) of the env step at which an episode
    ended: the statistics of the module docstring over every run's episodes in that window.

    train: `read_train` rows. limits: {env: time limit in steps}; an env without one gets NaN at_time_limit.
    Columns: `WINDOW_COLUMNS`, rows by env (benchmark order), variant (catalog order), window.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1 env step, got {window}")
    rows: list[tuple] = []
    for env in loading.env_order(train["env"].tolist()):
        here = train[train["env"] == env]
        limit = limits.get(env)
        for variant in loading.variant_order(here["variant"].tolist()):
            mine = here[here["variant"] == variant]
            # An episode ending exactly at k * window belongs to the window before it (it ran in that one).
            index = (mine["env_step"].to_numpy(dtype=np.int64) - 1) // window
            for k in np.unique(index):
                ended = mine[index == k]
                lengths = ended["episode_length"].to_numpy(dtype=np.float64)
                share = float(np.mean(lengths >= limit)) if limit else np.nan
                rows.append(
                    (
                        env,
                        variant,
                        int(k) * window,
                        int(k + 1) * window,
                        int(ended["seed"].nunique()),
                        len(ended),
                        float(ended["episode_return"].median()),
                        float(np.median(lengths)),
                        share,
                    )
                )
    return pd.DataFrame(rows, columns=list(WINDOW_COLUMNS))


def format_windows(table: pd.DataFrame, limits: Mapping[str, int]) -> str:
    """The table as plain text, one block per environment."""
    out = []
    for env in loading.env_order(table["env"].tolist()):
        here = table[table["env"] == env]
        limit = limits.get(env)
        out.append(f"{env} (time limit: {f'{limit} steps' if limit else 'unknown'})")
        out.append(
            f"  {'variant':16s} {'env steps':>15s} {'runs':>4s} {'episodes':>8s} {'return':>9s} "
            f"{'length':>7s} {'at limit':>8s}"
        )
        for r in here.itertuples(index=False):
            share = "" if np.isnan(r.at_time_limit) else f"{100 * r.at_time_limit:.0f}%"
            out.append(
                f"  {r.variant:16s} {f'{step_text(r.window_start)}-{step_text(r.window_end)}':>15s} {r.n_runs:4d} "
                f"{r.episodes:8d} {r.return_median:9.1f} {r.length_median:7.0f} {share:>8s}"
            )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.judging.episodes",
        description="Training episodes per window of env steps: count, median return "
        "and length, share at the time limit.",
    )
    parser.add_argument("results", nargs="+", type=Path, help="results folder(s), read as one")
    parser.add_argument("--variants", default=None, help="comma-separated variants (default: every one found)")
    parser.add_argument("--window", type=int, default=40_000, help="window width in env steps (default 40000)")
    args = parser.parse_args(argv)
    if args.window < 1:
        print(f"error: --window must be >= 1 env step, got {args.window}", file=sys.stderr)
        return 2
    for folder in args.results:
        problem = not_a_results_folder(folder)
        if problem:
            print(f"error: results folder {folder} {problem}", file=sys.stderr)
            return 2
    variants = None if args.variants is None else [v.strip() for v in args.variants.split(",") if v.strip()]
    try:
        records = loading.scan_many(args.results, variants)
    except loading.DuplicateRun as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    train = read_train(records)
    if train.empty:
        print(
            "error: no finished run with a readable train.csv in " + ", ".join(map(str, args.results)), file=sys.stderr
        )
        return 2
    limits = time_limits(records.configs)
    print(format_windows(episode_windows(train, args.window, limits), limits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
