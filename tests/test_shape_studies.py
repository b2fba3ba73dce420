"""The studies of the verdict rules on committed return shapes: draws, null reports, shifts, replays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_stats import write_cell

from harness import cli
from harness.judging import inference, sequential, shape_studies


def test_draws_are_whole_runs_of_the_pool() -> None:
    pool = np.array([[0.1, 0.2], [0.5, 0.4], [0.9, 0.7]])
    draws = shape_studies.draw_reports(pool, reports=4, compared=3, seeds=5, rng_seed=0)
    assert draws.shape == (4, 4, 5, 2)
    pairs = {tuple(p) for p in pool.tolist()}
    assert {tuple(p) for p in draws.reshape(-1, 2).tolist()} <= pairs  # final and auc stay together


def test_a_pool_of_identical_runs_gives_no_spurious_verdict_and_equivalence() -> None:
    pool = np.full((5, 2), 0.4)
    row = shape_studies.null_fixed(pool, "flat", 5, inference.MANY_TO_ONE, reports=3, compared=2, rng_seed=0)
    assert row.spurious == {"final_return": 0, "auc_return": 0} and row.upper("final_return") > 0.5
    calls = shape_studies.fixed_calls(np.full((3, 5), 0.4), inference.MANY_TO_ONE)
    assert calls == [inference.EQUIVALENT] * 2


def test_a_large_shift_is_decided_better_at_the_first_look() -> None:
    pool = np.random.default_rng(0).normal(0.5, 0.05, size=(20, 2))
    design = sequential.SequentialDesign(look_every=5, max_seeds=10)
    rows = shape_studies.shift_study(pool, "tight", 1.0, [design], [5], reports=3, compared=2, rng_seed=1)
    fixed, seq = rows
    assert (fixed.better, fixed.wrong, fixed.mean_seeds) == (3, 0, 5.0)
    assert (seq.better, seq.mean_seeds) == (3, 5.0)  # decided at the first look, 5 seeds each


def test_crude_rule_bonferronis_over_comparisons_and_looks() -> None:
    # Differences 1, 2, 3, 4, 5 at 5 seeds: mean 3, se sqrt(2.5 / 5) = 0.7071, t = 4.243 on 4 df.
    # Bonferroni over 2 comparisons x 2 looks: two-sided 0.0125 each, t quantile 4.85 > 4.243, so open at
    # look 1; over 1 comparison x 2 looks (0.025: quantile 3.50) it is better at 5 seeds.
    reference = np.zeros(10)
    better = np.array([1, 2, 3, 4, 5, 1, 2, 3, 4, 5], dtype=float)
    noise = np.array([1, -1, 2, -2, 0.5, -0.5, 1, -1, 0.3, -0.3])
    assert shape_studies.crude_calls(np.stack([reference, better]), [5, 10]) == [(inference.BETTER, 5)]
    calls = shape_studies.crude_calls(np.stack([reference, better, noise]), [5, 10])
    assert calls == [(inference.BETTER, 10), (sequential.OPEN, 10)]  # t = 6.36 on 9 df at look 2


def test_replay_counts_the_runs_a_rule_spends(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    base = -300 + 20 * rng.normal(size=10)
    write_cell(tmp_path, "Pendulum-v1", "reference", base)
    write_cell(tmp_path, "Pendulum-v1", "critic-first", base - 800)  # far worse on every seed
    write_cell(tmp_path, "Pendulum-v1", "naive-tanh", base + 20 * rng.normal(size=10))
    scores = shape_studies.campaign_scores(tmp_path, "Pendulum-v1")["final_return"]
    design = sequential.SequentialDesign(look_every=5, max_seeds=10)
    row = shape_studies.replay(scores, "synthetic", "final_return", design)
    assert row.verdicts["critic-first"] == "worse at look 1 (5 seeds)"
    seeds_naive = 5 if row.verdicts["naive-tanh"].endswith("(5 seeds)") else 10
    assert row.runs_spent == 5 + seeds_naive and row.runs_fixed == 20
    fixed = shape_studies.replay_fixed(scores, "synthetic", "final_return", inference.MANY_TO_ONE)
    assert fixed.verdicts["critic-first"] == "worse (10 seeds)" and fixed.runs_spent == 20


def test_shape_study_refuses_a_folder_of_two_environments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_cell(tmp_path, "Pendulum-v1", "reference", [-300.0, -250.0, -200.0])
    write_cell(tmp_path, "LunarLanderContinuous-v3", "reference", [0.0, 10.0, 20.0])
    assert cli.main(["shape-study", "replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 environments" in err[0]
    assert cli.main(["shape-study", "null", str(tmp_path), "--rules", "paired:nope"]) == 2
    assert cli.main(["shape-study", "null", str(tmp_path), "--methods", "Holm"]) == 2
    assert "--methods: unknown Holm" in capsys.readouterr().err


def test_rules_name_spending_multiplicity_and_futility_in_any_order() -> None:
    designs = shape_studies.parse_rules("paired:futility=0.05:many-to-one,paired:obrien-fleming,adastop", 5, 20)
    assert [(d.rule, d.spending, d.multiplicity, d.futility) for d in designs] == [
        ("paired", "pocock", "many-to-one", 0.05),
        ("paired", "obrien-fleming", "bonferroni", None),
        ("adastop", "pocock", "bonferroni", None),
    ]
    assert "futility below 5%" in shape_studies.design_name(designs[0])
    for bad, message in (("paired:futility=x", "takes a number"), ("paired:holm", "unknown option 'holm'")):
        with pytest.raises(shape_studies.StudyError, match=message):
            shape_studies.parse_rules(bad, 5, 20)


def test_replay_names_what_futility_stopped_and_spends_fewer_runs(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    base = -300 + 20 * rng.normal(size=20)
    write_cell(tmp_path, "Pendulum-v1", "reference", base)
    write_cell(tmp_path, "Pendulum-v1", "naive-tanh", -300 + 200 * rng.normal(size=20))  # wide noise, no effect
    scores = shape_studies.campaign_scores(tmp_path, "Pendulum-v1")["final_return"]
    plain = shape_studies.replay(
        scores, "synthetic", "final_return", sequential.SequentialDesign(look_every=5, max_seeds=20)
    )
    futile = shape_studies.replay(
        scores, "synthetic", "final_return", sequential.SequentialDesign(look_every=5, max_seeds=20, futility=0.2)
    )
    assert plain.runs_spent == 20 and plain.verdicts["naive-tanh"] == "open at look 4 (20 seeds)"
    assert futile.verdicts["naive-tanh"].startswith("stopped for futility at look ")
    assert futile.runs_spent < 20
    assert "naive-tanh: stopped for futility" in shape_studies.format_replay_rows([futile])[-1]
