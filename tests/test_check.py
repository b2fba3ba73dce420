"""The regression check: its rule on synthetic records, and that it catches real breakage."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_stats import write_run

from harness import records
from harness.cli import main
from harness.judging import check
from harness.judging.normalization import normalized_score

ENV = "Pendulum-v1"


def make_results(root: Path, finals, variant="reference", state="complete") -> Path:
    for seed, final in enumerate(finals):
        write_run(root, ENV, variant, seed, float(final), state=state)
    return root


def make_baseline(root: Path, finals=(-150.0, -160.0, -170.0)) -> Path:
    make_results(root, finals)
    records.write_json(
        root / "baseline.json",
        {"budget": {"total_steps": 4000, "eval_episodes": 3}, "platform": check.platform_fingerprint()},
    )
    return root


def run_check(baseline, results, capsys, *extra):
    code = main(["check", "--baseline", str(baseline), "--results", str(results), "--variants", "reference", *extra])
    return code, capsys.readouterr().out


def test_identical_results_pass_and_are_reported_identical(tmp_path, capsys):
    base = make_baseline(tmp_path / "base")
    shutil.copytree(base / "runs", tmp_path / "new" / "runs")
    code, out = run_check(base, tmp_path / "new", capsys)
    assert code == 0 and "identical to the baseline, bit for bit" in out and "check: PASS" in out


def test_random_policy_returns_fail(tmp_path, capsys):
    base = make_baseline(tmp_path / "base")
    new = make_results(tmp_path / "new", [-1207.6, -1190.0, -1230.0])  # a uniform random policy's returns
    code, out = run_check(base, new, capsys)
    assert code == 1 and "REGRESSION" in out and "check: FAIL" in out
    assert "warning: curves differ from the baseline on the same platform" in out


def test_failed_runs_fail_even_with_good_returns_elsewhere(tmp_path, capsys):
    base = make_baseline(tmp_path / "base")
    new = make_results(tmp_path / "new", [-150.0, -160.0])
    write_run(new, ENV, "reference", 2, 0.0, state="failed")
    code, out = run_check(base, new, capsys)
    assert code == 1 and "runs: 2 complete, 1 failed; baseline: 3 complete" in out
    assert "seed(s) 2 completed in the baseline, now did not" in out


def test_fewer_seeds_than_the_baseline_are_checked_on_their_scores(tmp_path, capsys):
    base = make_baseline(tmp_path / "base")
    good = make_results(tmp_path / "good", [-155.0])
    assert run_check(base, good, capsys, "--seeds", "1")[0] == 0
    bad = make_results(tmp_path / "bad", [-1207.6])
    assert run_check(base, bad, capsys, "--seeds", "1")[0] == 1


def test_a_seed_the_baseline_lacks_may_fail_without_being_a_lost_seed(tmp_path, capsys):
    base = make_baseline(tmp_path / "base")
    new = make_results(tmp_path / "new", [-150.0, -160.0, -170.0, -150.0, -160.0])
    write_run(new, ENV, "reference", 5, 0.0, state="diverged")  # seed 5: scored as a random policy
    outcome = check.compare(base, new, ["reference"], reps=500)
    final = next(c for c in outcome.checks if c.metric == "final_return")
    assert final.lost_seeds == ()
    assert outcome.passed  # one run of six at 0 moves the IQM (the middle four) little


def test_threshold_is_interval_low_minus_tolerance(tmp_path):
    base = make_baseline(tmp_path / "base", finals=(-150.0, -250.0, -350.0))
    new = make_results(tmp_path / "new", [-150.0, -250.0, -350.0])
    outcome = check.compare(base, new, ["reference"], tolerance=0.1, reps=500)
    final = next(c for c in outcome.checks if c.metric == "final_return")
    scores = normalized_score(np.array([-150.0, -250.0, -350.0]), ENV)
    # IQM of three values is their mean (scipy trims int(0.75) = 0 from each end).
    assert final.baseline.estimate == pytest.approx(scores.mean())
    assert final.baseline.low <= final.baseline.estimate <= final.baseline.high
    assert final.baseline.low >= scores.min() - 1e-12
    assert final.threshold == pytest.approx(final.baseline.low - 0.1)
    assert outcome.passed


def test_a_small_drop_within_tolerance_passes_and_a_large_one_fails(tmp_path):
    base = make_baseline(tmp_path / "base")
    low = check.compare(base, base, ["reference"], reps=500).checks[0].baseline.low
    r_random, r_target = -1207.555, -150.0

    def to_return(score):
        return r_random + score * (r_target - r_random)

    near = make_results(tmp_path / "near", [to_return(low - 0.05)] * 3)
    far = make_results(tmp_path / "far", [to_return(low - 0.3)] * 3)
    assert check.compare(base, near, ["reference"], reps=500).passed
    assert not check.compare(base, far, ["reference"], reps=500).passed


def test_missing_variant_in_baseline_is_a_usage_error(tmp_path, capsys):
    base = make_baseline(tmp_path / "base")
    new = make_results(tmp_path / "new", [-150.0] * 3, variant="naive-tanh")
    code = main(["check", "--baseline", str(base), "--results", str(new), "--variants", "naive-tanh"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "has no Pendulum-v1 runs of naive-tanh" in err and len(err.splitlines()) == 1


def test_baseline_of_another_budget_is_refused(tmp_path, capsys):
    base = make_baseline(tmp_path / "base")
    code = main(["check", "--baseline", str(base), "--out", str(tmp_path / "out"), "--variants", "reference"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "the baseline was made with 4000 steps" in err


ROOT = Path(__file__).resolve().parents[1]
COMMITTED_BASELINE = ROOT / "results" / "baselines" / "ci"


def test_committed_baseline_has_the_default_variants_at_the_ci_budget():
    meta = records.read_json(COMMITTED_BASELINE / "baseline.json")
    from harness.running.profiles import budget_for

    assert meta["budget"]["total_steps"] == budget_for("ci", ENV).total_steps
    for variant in check.DEFAULT_VARIANTS:
        assert len(list((COMMITTED_BASELINE / "runs" / ENV / variant).glob("seed_*/status.json"))) == 3


@pytest.mark.slow
@pytest.mark.parametrize("flip", [False, True])
def test_check_catches_a_sign_flip_in_the_actor_loss(tmp_path, monkeypatch, capsys, flip):
    # The same command passes on unchanged code and fails with the bug: the check, not its arguments, decides.
    import variants.learner as learner_module

    original = learner_module.actor_loss

    def flipped(learner, batch, noise, critic):
        loss, pi = original(learner, batch, noise, critic)
        return -loss, pi  # the bug: the policy now descends the soft value

    if flip:
        monkeypatch.setattr(learner_module, "actor_loss", flipped)
    code = main(
        [
            "check",
            "--baseline",
            str(COMMITTED_BASELINE),
            "--variants",
            "reference",
            "--seeds",
            "1",
            "--workers",
            "1",
            "--out",
            str(tmp_path / "check"),
        ]
    )
    out = capsys.readouterr().out
    if flip:
        assert code == 1 and "REGRESSION" in out and "check: FAIL" in out
    else:
        assert code == 0 and "REGRESSION" not in out and "check: PASS" in out


def test_results_seeds_can_be_chosen(tmp_path, capsys):
    base = make_baseline(tmp_path / "base")
    new = make_results(tmp_path / "new", [-150.0, -160.0, -170.0, -1200.0, -1210.0, -1190.0])
    assert run_check(base, new, capsys, "--seed-offset", "0", "--seeds", "3")[0] == 0
    assert run_check(base, new, capsys, "--seed-offset", "3", "--seeds", "3")[0] == 1


def test_differing_curves_are_blamed_on_the_override_not_the_arithmetic():
    outcome = check.CheckOutcome(checks=[], identical=False, same_platform=True, warnings=[])
    plain = "\n".join(check.format_outcome(outcome, 0.1))
    overridden = "\n".join(check.format_outcome(outcome, 0.1, overridden=True))
    assert "arithmetic changed" in plain and "--set" not in plain
    assert "overridden with --set" in overridden and "arithmetic changed" not in overridden


def test_false_alarm_study_counts_failing_seed_sets(tmp_path, capsys):
    base = make_baseline(tmp_path / "base")
    # Seeds 0-2 are the baseline's and are left out; 3-5 learn like it, 6-8 return what a random policy does.
    new = make_results(tmp_path / "new", [-150.0, -160.0, -170.0, -150.0, -160.0, -170.0, -1207.6, -1190.0, -1230.0])
    study = check.false_alarm_study(base, new, ["reference"], per_check=3, reps=200)
    assert study.seed_sets == [(3, 4, 5), (6, 7, 8)]
    assert [any(c.regression for c in checks) for checks in study.checks] == [False, True]
    assert study.false_alarms == 1
    # Of the C(6, 3) = 20 subsets of seeds 3-8 only (3, 4, 5) has no random-policy run; a 3-run IQM is
    # the mean, and one run at random-policy level pulls it a third of the way to 0.
    assert (study.subsets, study.subset_failures) == (20, 19)
    code = main(["check", "--baseline", str(base), "--results", str(new), "--variants", "reference", "--false-alarms"])
    out = capsys.readouterr().out
    assert code == 0 and "false alarms: 1 of 2 disjoint reseeded checks" in out and "19 fail (95.0%)" in out


def test_false_alarm_upper_bound_is_clopper_pearson():
    study = check.FalseAlarmStudy(3, [(i,) for i in range(10)], [[] for _ in range(10)], 10, 0)
    assert study.rate_upper_bound() == pytest.approx(1 - 0.025 ** (1 / 10))  # 0 of 10: 30.8%


def test_false_alarm_study_needs_results_and_enough_seeds(tmp_path, capsys):
    base = make_baseline(tmp_path / "base")
    assert main(["check", "--baseline", str(base), "--variants", "reference", "--false-alarms"]) == 2
    assert "give --results DIR" in capsys.readouterr().err
    new = make_results(tmp_path / "new", [-150.0, -160.0, -170.0, -150.0])
    assert (
        main(["check", "--baseline", str(base), "--results", str(new), "--variants", "reference", "--false-alarms"])
        == 2
    )
    assert "has 1 seeds of every variant outside the baseline's; a reseeded check needs 3" in capsys.readouterr().err


def sb3_results(root: Path) -> Path:
    """A baseline folder that also holds three complete sb3-sac runs (Stable-Baselines3's, by their records)."""
    make_baseline(root)
    return make_results(root, (-150.0, -160.0, -170.0), variant="sb3-sac")


# Runs `check --results` in a fresh interpreter, then prints which of the training side's libraries it imported.
_CHECK_PROBE = """
import sys
from harness.cli import main
code = main(["check", "--baseline", sys.argv[1], "--results", sys.argv[1], "--variants", "reference,sb3-sac"])
print(f"exit={code} loaded={[m for m in ('torch', 'stable_baselines3') if m in sys.modules]}")
"""


def test_checking_sb3_sac_records_imports_neither_torch_nor_stable_baselines3(tmp_path):
    # Judging records never asks whether their implementation could train here: that question imports SB3.
    results = sb3_results(tmp_path / "results")
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK_PROBE, str(results)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    lines = proc.stdout.strip().splitlines()
    assert "check: PASS" in lines and lines[-1] == "exit=0 loaded=[]", proc.stdout + proc.stderr


def test_sb3_sac_records_are_checked_without_stable_baselines3_installed(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # `import stable_baselines3` now raises ImportError
    results = sb3_results(tmp_path / "results")
    code = main(["check", "--baseline", str(results), "--results", str(results), "--variants", "sb3-sac"])
    assert code == 0 and "check: PASS" in capsys.readouterr().out
