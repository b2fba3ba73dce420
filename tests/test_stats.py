"""Statistics over run records: IQM, intervals, normalization, probability of improvement, verdicts.

Results folders are synthetic: the schema files of results/README.md written directly, no training.
`write_run` is also used by test_loading.py, test_report.py and test_episodes.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from rliable import metrics as rly_metrics

from harness import records
from harness.judging import inference, loading, normalization, stats
from variants.catalog import CATALOG, REFERENCE

DIAGNOSTIC_COLUMNS = (
    "env_step",
    "updates",
    "critic_loss",
    "actor_loss",
    "alpha",
    "alpha_loss",
    "entropy",
    "q_mean",
    "q_target_mean",
    "td_abs_mean",
    "grad_norm_actor",
    "grad_norm_critic",
    "saturation_fraction",
    "log_prob_gap",
    "nonfinite_count",
)
TOTAL_STEPS = 4000
EVAL_POINTS = 4


def write_run(
    root: Path,
    env: str,
    variant: str,
    seed: int,
    final_return: float = 0.0,
    state: str = "complete",
    spec: dict | None = None,
) -> Path:
    """Write one run folder in the results schema; the eval curve rises linearly to `final_return`.

    A failed or diverged run stops halfway with no final_return, as the harness records it.
    """
    folder = records.run_dir(root, env, variant, seed)
    if spec is None:
        spec = (CATALOG[variant].spec if variant in CATALOG else REFERENCE).to_dict()
    records.write_json(
        folder / "config.json",
        {
            "variant": variant,
            "description": f"synthetic {variant}",
            "spec": spec,
            "overrides": {},
            "env": env,
            "seed": seed,
            "budget": {
                "profile": "test",
                "total_steps": TOTAL_STEPS,
                "eval_every": TOTAL_STEPS // EVAL_POINTS,
                "eval_points": EVAL_POINTS,
                "eval_episodes": 3,
                "diag_every": 1000,
            },
            "device": "cpu",
            "members": 1,
            "versions": {"python": "3.11", "torch": "test"},
            "git_commit": "0123abc",
            "platform": {"system": "Linux", "machine": "x86_64"},
            "command": ["python", "-m", "harness", "run"],
        },
    )
    complete = state == "complete"
    points = EVAL_POINTS if complete else EVAL_POINTS // 2
    steps = [i * TOTAL_STEPS // EVAL_POINTS for i in range(1, points + 1)]
    means = [final_return - 10.0 * (EVAL_POINTS - i) for i in range(1, points + 1)]
    records.write_csv(folder / "eval.csv", records.EVAL_COLUMNS, [(s, m, 1.0, 3) for s, m in zip(steps, means)])
    records.write_csv(folder / "train.csv", records.TRAIN_COLUMNS, [(200, -1000.0, 200)])
    diag_rows = [(s, 1000, 1.0 + seed, 0.5, 0.2, 0.1, -1.0, -50.0, -50.0, 1.0, 1.0, 1.0, 0.01, 0.0, 0) for s in steps]
    if state == "diverged":
        diag_rows[-1] = (
            steps[-1],
            1000,
            float("nan"),
            float("inf"),
            0.2,
            0.1,
            -1.0,
            float("nan"),
            -50.0,
            1.0,
            1.0,
            1.0,
            0.01,
            0.0,
            7,
        )
    records.write_csv(folder / "diagnostics.csv", DIAGNOSTIC_COLUMNS, diag_rows)
    records.write_json(
        folder / "status.json",
        {
            "state": state,
            "env_steps": TOTAL_STEPS if complete else steps[-1],
            "wall_s": 1.5,
            "steps_per_s": 100.0,
            "error": None if complete else f"RuntimeError: {state} on purpose\nTraceback ...",
            "error_step": None if complete else steps[-1],
            "final_return": means[-1] if complete else None,
            "auc_return": float(np.mean(means)) if complete else None,
        },
    )
    return folder


def write_cell(root: Path, env: str, variant: str, finals: Sequence[float]) -> None:
    for seed, final in enumerate(finals):
        write_run(root, env, variant, seed, float(final))  # a Python float: records.write_csv reprs numbers


FINALS = [-400.0, -150.0, -900.0, -320.0, -275.0, -180.0, -610.0, -205.0]  # 8 runs: IQM definitions agree


# --- IQM, intervals, normalization -----------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 14))
def test_interquartile_mean_is_scipy_trim_mean(n: int) -> None:
    values = np.random.default_rng(n).normal(size=(n, 3))
    assert stats.interquartile_mean(values) == pytest.approx(scipy.stats.trim_mean(values, 0.25, axis=None))
    assert stats.interquartile_mean(values, axis=0) == pytest.approx(scipy.stats.trim_mean(values, 0.25, axis=0))


def test_summary_iqm_is_the_trimmed_mean_of_final_returns(tmp_path: Path) -> None:
    write_cell(tmp_path, "Pendulum-v1", "reference", FINALS)
    runs, _ = loading.load_runs(tmp_path)
    summary = stats.summary_table(runs)
    row = summary[(summary["env"] == "Pendulum-v1") & (summary["metric"] == "final_return_iqm")].iloc[0]
    expected = scipy.stats.trim_mean(FINALS, 0.25)
    # rliable's own IQM on its (runs, tasks) contract: the same number for 8 runs.
    assert rly_metrics.aggregate_iqm(np.array(FINALS)[:, None]) == pytest.approx(expected)
    assert row["estimate"] == pytest.approx(expected, rel=1e-12)
    assert row["n_runs"] == 8
    mean = summary[(summary["env"] == "Pendulum-v1") & (summary["metric"] == "final_return_mean")].iloc[0]
    assert mean["estimate"] == pytest.approx(np.mean(FINALS))
    gap = summary[(summary["env"] == "Pendulum-v1") & (summary["metric"] == "final_return_optimality_gap")].iloc[0]
    assert gap["estimate"] == pytest.approx(-150.0 - np.mean(np.minimum(FINALS, -150.0)))


def test_every_interval_contains_its_estimate(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    for env, centre in (("Pendulum-v1", -300.0), ("LunarLanderContinuous-v3", 120.0)):
        write_cell(tmp_path, env, "reference", centre + 40 * rng.normal(size=8))
        write_cell(tmp_path, env, "naive-tanh", centre - 30 + 60 * rng.normal(size=8))
    write_cell(tmp_path, "LunarLanderContinuous-v3", "policy-first", [100.0, 130.0, 90.0, 110.0])  # ragged grid
    runs, _ = loading.load_runs(tmp_path)
    summary = stats.summary_table(runs)
    assert set(summary["env"]) == {"Pendulum-v1", "LunarLanderContinuous-v3", "all"}
    # 8 metrics per (env, variant) cell with runs, and for all: policy-first, run on one env only, is not
    # pooled (every variant's 'all' pools the same envs).
    assert len(summary) == 5 * 8 + 2 * 8
    assert "policy-first" not in set(summary.loc[summary["env"] == "all", "variant"])
    assert (summary["ci_low"] <= summary["estimate"] + 1e-9).all()
    assert (summary["estimate"] <= summary["ci_high"] + 1e-9).all()
    assert (summary["ci_low"] < summary["ci_high"]).any()
    verdicts = stats.verdict_table(runs, "reference")
    computed = verdicts.dropna(subset=["poi"])
    assert len(computed) == 5  # naive-tanh: 2 envs + all; policy-first: 1 env + all
    assert ((computed["poi_ci_low"] <= computed["poi"]) & (computed["poi"] <= computed["poi_ci_high"])).all()


def test_normalized_scores_match_hand_computed_values() -> None:
    assert normalization.normalized_score(-150.0, "Pendulum-v1") == pytest.approx(1.0)
    assert normalization.normalized_score(normalization.R_RANDOM["BipedalWalker-v3"], "BipedalWalker-v3") == 0.0
    # LunarLanderContinuous: R_random -212.676, R_target 200.
    assert normalization.normalized_score(0.0, "LunarLanderContinuous-v3") == pytest.approx(212.676 / 412.676)
    values = normalization.normalized_score(np.array([[-1207.555, -678.7775]]), "Pendulum-v1")
    assert values.shape == (1, 2) and values == pytest.approx(np.array([[0.0, 0.5]]))
    assert not normalization.can_normalize("CartPole-v1")
    with pytest.raises(KeyError, match="CartPole"):
        normalization.normalized_score(1.0, "CartPole-v1")


def test_all_envs_aggregate_uses_normalized_scores(tmp_path: Path) -> None:
    pendulum, lunar = [-200.0, -300.0, -250.0, -150.0], [100.0, 0.0, 50.0]
    write_cell(tmp_path, "Pendulum-v1", "reference", pendulum)
    write_cell(tmp_path, "LunarLanderContinuous-v3", "reference", lunar)
    runs, _ = loading.load_runs(tmp_path)
    summary = stats.summary_table(runs)
    pooled = summary[summary["env"] == "all"].set_index("metric")
    p = (np.array(pendulum) + 1207.555) / (-150.0 + 1207.555)
    q = (np.array(lunar) + 212.676) / (200.0 + 212.676)
    assert pooled.loc["final_return_mean", "estimate"] == pytest.approx((p.mean() + q.mean()) / 2)
    # The median pools every run as the IQM does (not the median of the two env means, which is their mean).
    assert pooled.loc["final_return_median", "estimate"] == pytest.approx(np.median(np.r_[p, q]))
    per_env = summary[(summary["env"] == "Pendulum-v1") & (summary["metric"] == "final_return_median")]
    assert per_env["estimate"].iloc[0] == pytest.approx(np.median(pendulum))  # the median run, not the mean
    assert pooled.loc["final_return_iqm", "estimate"] == pytest.approx(scipy.stats.trim_mean(np.r_[p, q], 0.25))
    assert pooled.loc["final_return_optimality_gap", "estimate"] == pytest.approx(
        1 - (np.minimum(p, 1).mean() + np.minimum(q, 1).mean()) / 2
    )
    assert pooled.loc["final_return_iqm", "n_runs"] == 7


def test_single_seed_gives_a_zero_width_interval(tmp_path: Path) -> None:
    write_run(tmp_path, "Pendulum-v1", "reference", 0, -321.0)
    runs, _ = loading.load_runs(tmp_path)
    summary = stats.summary_table(runs)
    iqm = summary[(summary["env"] == "Pendulum-v1") & (summary["metric"] == "final_return_iqm")].iloc[0]
    assert iqm["estimate"] == iqm["ci_low"] == iqm["ci_high"] == -321.0


# --- probability of improvement and verdicts -------------------------------------------------------


def test_pairwise_improvement_equals_rliable() -> None:
    rng = np.random.default_rng(0)
    for n_x, n_y in ((5, 7), (1, 3), (8, 8)):
        x = rng.integers(0, 4, size=(n_x, 1)).astype(float)  # small integers: many ties
        y = rng.integers(0, 4, size=(n_y, 1)).astype(float)
        assert stats.pairwise_improvement(x, y) == pytest.approx(rly_metrics.probability_of_improvement(x, y))
    same = rng.normal(size=(6, 1))
    assert stats.pairwise_improvement(same, same) == 0.5 == rly_metrics.probability_of_improvement(same, same)


def test_probability_of_improvement_over_tasks_averages_rliable_per_task() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(6, 2)), rng.normal(size=(6, 2)) + 0.3
    poi = stats.probability_of_improvement(x, y, reps=2000)
    assert poi.estimate == pytest.approx(rly_metrics.probability_of_improvement(x, y))
    assert poi.contains(poi.estimate)


def test_verdict_table_per_env_and_overall(tmp_path: Path) -> None:
    base = np.linspace(-300.0, -200.0, 8)
    for env, offset in (("Pendulum-v1", 0.0), ("LunarLanderContinuous-v3", 400.0)):
        write_cell(tmp_path, env, "reference", base + offset)
        write_cell(tmp_path, env, "naive-tanh", base + offset - 500.0)  # clearly worse
        write_cell(tmp_path, env, "policy-first", base + offset)  # tied
        write_cell(tmp_path, env, "joint-update", base + offset + 500.0)  # clearly better
    write_run(tmp_path, "Pendulum-v1", "critic-first", 0, state="failed")
    write_run(tmp_path, "Pendulum-v1", "alpha-loss", 0, -250.0)  # one seed: no verdict
    runs, _ = loading.load_runs(tmp_path)
    table = stats.verdict_table(runs, "reference").set_index(["env", "variant"])
    for env in ("Pendulum-v1", "LunarLanderContinuous-v3", "all"):
        assert table.loc[(env, "naive-tanh"), "verdict"] == stats.WORSE
        assert table.loc[(env, "policy-first"), "verdict"] == stats.EQUIVALENT  # identical per seed
        assert table.loc[(env, "joint-update"), "verdict"] == stats.BETTER
    assert table.loc[("all", "joint-update"), "envs_compared"] == "Pendulum-v1;LunarLanderContinuous-v3"
    assert table.loc[("Pendulum-v1", "critic-first"), "verdict"] == stats.TOO_FEW_RUNS
    assert table.loc[("Pendulum-v1", "critic-first"), "n_runs"] == 0
    assert table.loc[("Pendulum-v1", "alpha-loss"), "verdict"] == stats.TOO_FEW_RUNS
    assert ("LunarLanderContinuous-v3", "alpha-loss") not in table.index  # never run there: no row
    assert "reference" not in table.index.get_level_values("variant")


def test_missing_reference_gives_no_reference_verdicts(tmp_path: Path) -> None:
    write_cell(tmp_path, "Pendulum-v1", "naive-tanh", FINALS[:4])
    runs, _ = loading.load_runs(tmp_path)
    table = stats.verdict_table(runs, "reference")
    assert set(table["verdict"]) == {stats.NO_REFERENCE}
    assert set(table["env"]) == {"Pendulum-v1", "all"}


# --- determinism ---------------------------------------------------------------------------------


def test_bootstrap_is_seeded_and_restores_the_global_generator(tmp_path: Path) -> None:
    write_cell(tmp_path, "Pendulum-v1", "reference", FINALS)
    runs, _ = loading.load_runs(tmp_path)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first = stats.summary_table(runs)
    assert np.array_equal(np.random.get_state()[1], before)
    np.random.seed(999)  # a different outside state must not change any interval
    second = stats.summary_table(runs)
    pd.testing.assert_frame_equal(first, second)


def test_three_paired_runs_get_the_hand_computed_t_interval(tmp_path: Path) -> None:
    # Per-seed differences 100, 110, 90 (raw returns of an env without constants: no normalization).
    write_cell(tmp_path, "MountainCarContinuous-v0", "reference", [-300.0, -290.0, -280.0])
    write_cell(tmp_path, "MountainCarContinuous-v0", "naive-tanh", [-200.0, -180.0, -190.0])
    runs, _ = loading.load_runs(tmp_path)
    row = (
        stats.verdict_table(runs, "reference")
        .set_index(["env", "variant"])
        .loc[("MountainCarContinuous-v0", "naive-tanh")]
    )
    # mean 100, sd 10, se 10 / sqrt(3); one comparison, so the 95% interval: t(0.975, 2) = 4.302653.
    half = 4.302653 * 10 / np.sqrt(3)
    assert row["paired"] and row["family_size"] == 1 and row["units"] == "return"
    assert row["difference"] == pytest.approx(100.0)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((100 - half, 100 + half), rel=1e-6)
    assert row["verdict"] == stats.BETTER
    assert np.isnan(row["margin"])  # no equivalence margin in return units
    # The difference seen (100) at the spread seen (sd 10): 2 pairs detect 115.5 with 80% power, 3 pairs 32.6.
    assert row["seeds_for_difference"] == 3


def test_pairing_table_gives_scipy_paired_and_welch_half_widths(tmp_path: Path) -> None:
    # Raw returns (no constants): differences 100, 110, 90, 120; the sides correlate strongly.
    ref, var = [-300.0, -200.0, -250.0, -100.0], [-200.0, -90.0, -160.0, 20.0]
    write_cell(tmp_path, "MountainCarContinuous-v0", "reference", ref)
    write_cell(tmp_path, "MountainCarContinuous-v0", "naive-tanh", var)
    runs, _ = loading.load_runs(tmp_path)
    table = stats.pairing_table(runs, "reference").set_index("metric")
    row = table.loc["final_return"]
    x, y = np.array(var), np.array(ref)
    paired = scipy.stats.ttest_rel(x, y).confidence_interval(0.95)
    welch = scipy.stats.ttest_ind(x, y, equal_var=False).confidence_interval(0.95)
    assert row["n_pairs"] == 4 and row["units"] == "return"
    assert row["correlation"] == pytest.approx(scipy.stats.pearsonr(x, y).statistic)
    assert row["half_width_paired"] == pytest.approx((paired.high - paired.low) / 2)
    assert row["half_width_unpaired"] == pytest.approx((welch.high - welch.low) / 2)
    assert row["ratio"] < 0.2  # correlated sides: pairing narrows the interval several-fold
    # auc_return is the final return minus a constant in these synthetic runs: the same widths.
    assert table.loc["auc_return", "half_width_paired"] == pytest.approx(row["half_width_paired"])


def test_two_runs_a_side_get_no_verdict(tmp_path: Path) -> None:
    write_cell(tmp_path, "Pendulum-v1", "reference", [-300.0, -290.0])
    write_cell(tmp_path, "Pendulum-v1", "naive-tanh", [-200.0, -190.0])
    runs, _ = loading.load_runs(tmp_path)
    table = stats.verdict_table(runs, "reference").set_index(["env", "variant"])
    assert table.loc[("Pendulum-v1", "naive-tanh"), "verdict"] == stats.TOO_FEW_RUNS


# --- failed and diverged runs count ---------------------------------------------------------------


def test_a_diverged_run_lowers_its_variants_score(tmp_path: Path) -> None:
    write_cell(tmp_path, "Pendulum-v1", "reference", [-200.0, -210.0, -190.0, -205.0])
    write_cell(tmp_path, "Pendulum-v1", "naive-tanh", [-200.0, -210.0, -190.0])
    write_run(tmp_path, "Pendulum-v1", "naive-tanh", 3, -150.0, state="diverged")  # 2 of 4 evaluations, then NaN
    data = loading.scan_results(tmp_path)
    scored = stats.score_failures(data.runs, data.eval_curves, data.configs)
    row = scored[(scored["variant"] == "naive-tanh") & (scored["seed"] == 3)].iloc[0]
    floor = normalization.R_RANDOM["Pendulum-v1"]
    assert row["scored"] == "failure" and row["final_return"] == floor  # its last evaluation (-170) is above the floor
    # auc: the 2 evaluations write_run draws (-180, -170), then the 2 missing points at the floor.
    evals = [-180.0, -170.0]
    assert row["auc_return"] == pytest.approx(np.mean(evals + [floor] * 2))
    survivors = stats.summary_table(data.runs)
    counted = stats.summary_table(scored)

    def pick(t):
        return t[
            (t["env"] == "Pendulum-v1")
            & (t["variant"] == "naive-tanh")  # noqa: E731
            & (t["metric"] == "final_return_mean")
        ].iloc[0]

    assert pick(survivors)["n_runs"] == 3 and pick(counted)["n_runs"] == 4
    assert pick(counted)["estimate"] < pick(survivors)["estimate"]


def test_seed_scores_is_one_row_per_counted_run_and_metric_in_both_units(tmp_path: Path) -> None:
    # Pendulum-v1 has constants (random -1207.555, target -150): -150 is 1.0 normalized, -1207.555 is 0.0.
    write_cell(tmp_path, "Pendulum-v1", "reference", [-150.0, -1207.555])
    write_run(tmp_path, "Pendulum-v1", "naive-tanh", 0, -150.0, state="diverged")  # scored at the floor
    write_cell(tmp_path, "MountainCarContinuous-v0", "reference", [50.0])  # no constants: raw units only
    data = loading.scan_results(tmp_path)
    runs = stats.score_failures(data.runs, data.eval_curves, data.configs)
    scores = stats.seed_scores(runs)
    assert list(scores.columns) == list(stats.SEED_SCORE_COLUMNS)
    assert scores.shape == (4 * len(stats.RETURN_METRICS), len(stats.SEED_SCORE_COLUMNS))
    final = scores[scores["metric"] == "final_return"].set_index(["env", "variant", "seed"])
    assert final.loc[("Pendulum-v1", "reference", 0), "normalized"] == pytest.approx(1.0)
    assert final.loc[("Pendulum-v1", "reference", 1), "score"] == pytest.approx(0.0)
    diverged = final.loc[("Pendulum-v1", "naive-tanh", 0)]
    assert diverged["state"] == "diverged" and diverged["raw"] == normalization.R_RANDOM["Pendulum-v1"]
    assert diverged["score"] == pytest.approx(0.0)
    mountain = final.loc[("MountainCarContinuous-v0", "reference", 0)]
    assert mountain["raw"] == mountain["score"] == 50.0 and np.isnan(mountain["normalized"])
    auc = scores[scores["metric"] == "auc_return"]
    assert auc["raw"].tolist() == stats.counted_runs(runs)["auc_return"].tolist()
    assert stats.cell_scores(scores, "Pendulum-v1", "reference", "final_return", "raw") == {0: -150.0, 1: -1207.555}
    assert stats.paired_differences(scores, "Pendulum-v1", "naive-tanh", "reference", "final_return", True) == {
        0: pytest.approx(-1.0)
    }


def test_failure_score_fills_missing_and_non_finite_evaluations_at_the_floor() -> None:
    # Evaluations -100, NaN, -inf, -400 of a budget of 6 points, floor -300: the NaN, the -inf and the two
    # missing points count at -300; the final score is the lower of the last finite one (-400) and the floor.
    final, auc = stats.failure_score([-100.0, float("nan"), float("-inf"), -400.0], 6, -300.0)
    assert final == -400.0
    assert auc == pytest.approx((-100.0 - 300.0 - 300.0 - 400.0 - 300.0 - 300.0) / 6)
    assert stats.failure_score([float("nan")], 4, -300.0) == (-300.0, -300.0)  # no finite evaluation: the floor
    assert stats.failure_score([-50.0], 2, -300.0) == (-300.0, pytest.approx(-175.0))  # above the floor: capped


def _diverge(folder: Path, evaluations: Sequence[float]) -> None:
    """Rewrite a run's eval.csv with `evaluations` (at steps 1000, 2000, ...) and its scores as a diverged
    run's learner would have left them (the last evaluation's return, NaN or infinite included)."""
    steps = [1000 * (i + 1) for i in range(len(evaluations))]
    records.write_csv(folder / "eval.csv", records.EVAL_COLUMNS, [(s, m, 1.0, 3) for s, m in zip(steps, evaluations)])
    status = records.read_json(folder / "status.json")
    records.write_json(folder / "status.json", {**status, "final_return": None, "auc_return": None})


def test_runs_with_nan_and_infinite_evaluations_are_scored_never_dropped(tmp_path: Path) -> None:
    write_cell(tmp_path, "Pendulum-v1", "reference", [-200.0, -210.0, -190.0, -205.0])
    write_cell(tmp_path, "Pendulum-v1", "naive-tanh", [-200.0, -210.0])
    _diverge(write_run(tmp_path, "Pendulum-v1", "naive-tanh", 2, state="diverged"), [-180.0, float("nan")])
    _diverge(write_run(tmp_path, "Pendulum-v1", "naive-tanh", 3, state="diverged"), [-170.0, float("-inf")])
    data = loading.scan_results(tmp_path)
    scored = stats.score_failures(data.runs, data.eval_curves, data.configs)
    floor = normalization.R_RANDOM["Pendulum-v1"]
    mine = scored[scored["variant"] == "naive-tanh"].set_index("seed")
    assert np.isfinite(mine[list(stats.RETURN_METRICS)].to_numpy(float)).all()
    assert (mine.loc[[2, 3], "final_return"] == floor).all()
    assert mine.loc[2, "auc_return"] == pytest.approx((-180.0 + 3 * floor) / 4)
    assert mine.loc[3, "auc_return"] == pytest.approx((-170.0 + 3 * floor) / 4)
    summary = stats.summary_table(scored)
    cell = summary[(summary["variant"] == "naive-tanh") & (summary["metric"] == "final_return_iqm")]
    assert cell["n_runs"].tolist() == [4, 4] and np.isfinite(cell["estimate"]).all()  # Pendulum-v1 and all


def test_first_reach_steps_and_target_table_on_hand_computed_curves(tmp_path: Path) -> None:
    # write_run's curves: final - 30, final - 20, final - 10, final at env steps 1000-4000; Pendulum's target is -150.
    write_cell(tmp_path, "Pendulum-v1", "reference", [-130.0, -145.0, -200.0])  # reach at 2000, at 4000, never
    write_run(tmp_path, "Pendulum-v1", "naive-tanh", 0, final_return=-100.0, state="failed")  # -130 at 1000, then fails
    write_run(tmp_path, "Pendulum-v1", "naive-tanh", 1, final_return=-151.0)  # -151 at best: just short
    write_run(tmp_path, "MyEnv-v0", "reference", 0, final_return=1e6)  # no target: no row
    records = loading.scan_results(tmp_path)
    first = stats.first_reach_steps(records.eval_curves, records.runs)
    assert list(first.columns) == list(stats.FIRST_REACH_COLUMNS)
    got = {(r.variant, r.seed): r.first_step for r in first.itertuples(index=False)}
    assert got[("reference", 0)] == 2000 and got[("reference", 1)] == 4000 and np.isnan(got[("reference", 2)])
    assert got[("naive-tanh", 0)] == 1000 and np.isnan(got[("naive-tanh", 1)])
    assert set(first["env"]) == {"Pendulum-v1"} and (first["target"] == -150.0).all()
    table = stats.target_table(first).set_index("variant")
    assert tuple(
        table.loc["reference", ["n_runs", "n_reached", "first_step_median", "first_step_min", "first_step_max"]]
    ) == (3, 2, 3000.0, 2000.0, 4000.0)
    assert tuple(table.loc["naive-tanh", ["n_runs", "n_reached", "first_step_median"]]) == (2, 1, 1000.0)
    empty = stats.target_table(first[first["variant"] == "none"])
    assert empty.empty and list(empty.columns) == list(stats.TARGET_COLUMNS)


def test_late_diagnostics_on_hand_computed_values() -> None:
    steps = [250, 500, 750, 1000]
    runs = pd.DataFrame(
        {
            "env": "Pendulum-v1",
            "variant": ["naive-tanh", "reference", "reference", "reference"],
            "seed": [0, 0, 1, 2],
            "state": ["complete", "complete", "complete", "diverged"],
        }
    )
    alphas = {
        ("naive-tanh", 0): [9.0, 9.0, 7.0, 7.0],
        ("reference", 0): [1.0, 2.0, 3.0, 5.0],
        ("reference", 1): [0.0, 0.0, 1.0, np.inf],
        ("reference", 2): [100.0] * 4,
    }
    diagnostics = pd.DataFrame(
        [
            {"env": "Pendulum-v1", "variant": v, "seed": k, "env_step": step, "alpha": a, "entropy": -1.0}
            for (v, k), values in alphas.items()
            for step, a in zip(steps, values)
        ]
    )
    table = stats.late_diagnostics(diagnostics, runs, fraction=0.5, columns=("alpha", "entropy"))
    assert list(table.columns) == [
        "env",
        "variant",
        "n_runs",
        "alpha_median",
        "alpha_min",
        "alpha_max",
        "entropy_median",
        "entropy_min",
        "entropy_max",
    ]
    assert list(table["variant"]) == ["reference", "naive-tanh"]  # catalog order
    reference = table.iloc[0]
    # Steps after 500 of 1000: seed 0 (3 + 5) / 2 = 4; seed 1 1 (the inf is left out); seed 2 diverged: out.
    assert (reference["n_runs"], reference["alpha_median"], reference["alpha_min"], reference["alpha_max"]) == (
        2,
        2.5,
        1.0,
        4.0,
    )
    assert table.iloc[1]["alpha_median"] == 7.0 and (table["entropy_median"] == -1.0).all()
    none = stats.late_diagnostics(diagnostics, runs.assign(state="failed"), columns=("alpha",))
    assert none.empty and list(none.columns) == ["env", "variant", "n_runs", "alpha_median", "alpha_min", "alpha_max"]


def test_failure_table_tests_failure_rates_exactly(tmp_path: Path) -> None:
    write_cell(tmp_path, "Pendulum-v1", "reference", [-200.0] * 5)
    for seed in range(5):
        write_run(tmp_path, "Pendulum-v1", "critic-first", seed, state="failed")
    runs, _ = loading.load_runs(tmp_path)
    table = stats.failure_table(runs, "reference")
    row = table.iloc[0]
    assert (row["failed"], row["n_runs"], row["reference_failed"], row["n_reference_runs"]) == (5, 5, 0, 5)
    assert row["p_value"] == pytest.approx(2 / 252)  # hypergeometric: 2 of C(10, 5) tables are this extreme
    assert row["p_holm"] == pytest.approx(2 / 252)


def test_power_table_summarizes_the_verdicts_detectable_differences(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    for env, centre in (("Pendulum-v1", -200.0), ("LunarLanderContinuous-v3", 100.0)):
        base = centre + 30 * rng.normal(size=5)
        write_cell(tmp_path, env, "reference", base)
        write_cell(tmp_path, env, "naive-tanh", base + 5 * rng.normal(size=5))
        write_cell(tmp_path, env, "alpha-loss", base + 20 * rng.normal(size=5))
    runs, _ = loading.load_runs(tmp_path)
    verdicts = stats.verdict_table(runs, "reference")
    power = stats.power_table(verdicts).set_index("env")
    assert set(power.index) == {"Pendulum-v1", "LunarLanderContinuous-v3", "all"}  # 'all' pools two envs here
    cell = verdicts[verdicts["env"] == "Pendulum-v1"]
    assert power.loc["Pendulum-v1", "mdd_median"] == pytest.approx(cell["mdd"].median())
    assert power.loc["Pendulum-v1", "mdd_max"] == pytest.approx(cell["mdd"].max())
    assert power.loc["Pendulum-v1", "n_compared"] == 2
    assert (verdicts["family_size"] == 6).all()  # 2 variants x (2 envs + all)
    # The detectable difference is the noncentral-t solution at the family's level, from each test's se.
    row = cell[cell["variant"] == "naive-tanh"].iloc[0]
    half = (row["ci_high"] - row["ci_low"]) / 2
    level = row["level"]
    se = half / scipy.stats.t.ppf(0.5 + level / 2, row["n_pairs"] - 1)
    assert row["mdd"] == pytest.approx(inference.minimum_detectable_difference(se, row["n_pairs"] - 1, level))
    assert (verdicts["method"] == inference.BONFERRONI).all() and level == pytest.approx(1 - 0.05 / 6)
    # Many-to-one max-t intervals are never wider than Bonferroni's (the union bound) at the same alpha.
    many = stats.verdict_table(runs, "reference", method=inference.MANY_TO_ONE, effect_sizes=False)
    assert (many["method"] == inference.MANY_TO_ONE).all() and (many["level"] < 1 - 0.05 / 6).all()
    narrower = many["ci_high"] - many["ci_low"] <= verdicts["ci_high"] - verdicts["ci_low"]
    assert narrower[verdicts["ci_low"].notna()].all()
