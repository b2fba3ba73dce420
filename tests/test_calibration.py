"""The null and power studies on synthetic run records whose truth is known."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from test_stats import write_run

from harness.cli import main
from harness.judging import calibration, normalization
from variants.catalog import REFERENCE

ENV = "Pendulum-v1"


def make_folder(root: Path, finals, salt: int = 0, **spec_changes) -> Path:
    spec = dataclasses.replace(REFERENCE, salt=salt, **spec_changes).to_dict()
    for seed, final in enumerate(finals):
        write_run(root, ENV, "reference", seed, float(final), spec=spec)
    return root


def to_return(score):
    low, high = normalization.R_RANDOM[ENV], normalization.R_TARGET[ENV]
    return low + np.asarray(score) * (high - low)


def test_identical_folders_give_no_spurious_verdict(tmp_path):
    finals = to_return(np.linspace(0.6, 0.95, 8))
    a, b = make_folder(tmp_path / "a", finals), make_folder(tmp_path / "b", finals, salt=1)
    study = calibration.null_study(a, b, reports=20, compared=3, seeds=4)
    assert study.pool == 8 and study.spurious_reports == {"final_return": 0, "auc_return": 0, "either": 0}


def test_a_systematic_shift_is_called_in_every_null_report(tmp_path):
    # Not a null at all: salt 1 is 0.3 below on every seed, so every comparison must be called worse,
    # which shows the study counts what the report's rule calls.
    rng = np.random.default_rng(0)
    base = rng.uniform(0.6, 0.9, size=10)
    a = make_folder(tmp_path / "a", to_return(base))
    b = make_folder(tmp_path / "b", to_return(base - 0.3 + rng.normal(0, 0.01, size=10)), salt=1)
    study = calibration.null_study(a, b, reports=10, compared=4, seeds=5)
    assert study.spurious_reports["final_return"] == 10
    assert study.comparison_rate("final_return") == 1.0


def test_power_study_detects_a_large_effect_paired_better_than_unpaired(tmp_path):
    rng = np.random.default_rng(1)
    seed_effect = rng.normal(0.6, 0.15, size=24)  # most of the variance lies between seeds
    ref = make_folder(tmp_path / "ref", to_return(seed_effect + rng.normal(0, 0.01, size=24)))
    eff = make_folder(tmp_path / "eff", to_return(seed_effect - 0.05 + rng.normal(0, 0.01, size=24)))
    rows = calibration.power_study(ref, eff, ns=(5,), families=(8,), draws=100)
    by_design = {r.paired: r for r in rows}
    assert by_design[True].detected / by_design[True].draws > 0.9  # the pairing removes the seed variance
    assert by_design[False].detected / by_design[False].draws < 0.3
    assert by_design[True].mean_difference == pytest.approx(-0.05, abs=0.01)


def test_too_few_seeds_is_a_usage_error(tmp_path, capsys):
    a = make_folder(tmp_path / "a", to_return([0.5, 0.6, 0.7]))
    assert main(["null-study", str(a), str(a), "--seeds", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "share 3 seeds" in err


def test_a_shift_injected_into_identical_noise_is_detected_where_the_printed_mdd_says(tmp_path):
    # Paired differences d_k = e_k, e_k ~ N(0, 0.02), over a pool of 120 seeds (large, so draws of 5 are
    # nearly independent). With the true sd the MDD at n = 5 (family 1, noncentral t, 4 df) is 0.0336;
    # the printed one uses each draw's sample sd, whose median is below the true sd (about 0.94x): 0.030.
    # With the effect moved to exactly that median the rule detects it near 80% of the time (a little
    # under), 0.1 every time, and no shift about 5% of the time.
    rng = np.random.default_rng(2)
    seed_effect = rng.normal(0.6, 0.15, size=120)
    ref = make_folder(tmp_path / "ref", to_return(seed_effect))
    null = make_folder(tmp_path / "null", to_return(seed_effect + rng.normal(0, 0.02, size=120)))

    def paired(shift, draws=600):
        rows = calibration.power_study(ref, null, ns=(5,), families=(1,), draws=draws, shift=shift)
        return {r.paired: r for r in rows}[True]

    none = paired(0.0)
    assert none.median_mdd == pytest.approx(0.030, abs=0.004)
    assert abs(none.mean_difference) < 0.002 and none.detected + none.wrong_sign <= 0.09 * none.draws
    big = paired(0.1, draws=200)
    assert big.detected == big.draws and big.mean_difference == pytest.approx(0.1, abs=0.005)
    at_mdd = paired(none.median_mdd)
    assert 0.70 <= at_mdd.detected / at_mdd.draws <= 0.90


def test_shift_must_be_a_finite_number(tmp_path, capsys):
    a = make_folder(tmp_path / "a", to_return(np.linspace(0.5, 0.7, 6)))
    assert main(["power-study", str(a), str(a), "--shift", "nan"]) == 2
    assert "--shift must be finite" in capsys.readouterr().err


def test_a_null_study_refuses_folders_that_are_not_one_setup_reseeded(tmp_path, capsys):
    finals = to_return(np.linspace(0.6, 0.95, 6))
    a = make_folder(tmp_path / "a", finals)
    faster = make_folder(tmp_path / "lr", finals, salt=1, lr_actor=1e-3)
    assert main(["null-study", str(a), str(faster)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "differ in more than the salt" in err and "lr_actor 0.0003 vs 0.001" in err
    assert main(["null-study", str(a), str(a)]) == 2  # salt 0 twice: the same runs, no noise to measure
    assert "hold runs of the same salt" in capsys.readouterr().err


def test_a_power_study_refuses_an_effect_folder_of_another_budget(tmp_path, capsys):
    finals = to_return(np.linspace(0.6, 0.95, 6))
    a = make_folder(tmp_path / "a", finals)
    b = make_folder(tmp_path / "b", finals, lr_actor=1e-3)  # a spec change is the effect studied: fine
    assert [row.paired for row in calibration.power_study(a, b, ns=(5,), families=(1,), draws=5)] == [True]
    config = b / "runs" / ENV / "reference" / "seed_0" / "config.json"
    config.write_text(config.read_text().replace('"eval_episodes": ', '"eval_episodes": 1'))  # 3 -> 13, say
    assert main(["power-study", str(a), str(b)]) == 2
    assert "runs of different budgets: budget.eval_episodes 3 vs 13/3" in capsys.readouterr().err
