"""Bring your own environment and variant: `module:Class` envs (defined here), any Gymnasium id, a
variants file, raw-return reports, normalization overrides, and refusals that exit 2 with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest

from harness.cli import main
from harness.running import envs
from harness.running.envs import EnvError, EnvRef, env_info
from harness.running.train import identity


class PointMass(gym.Env):
    """A point pushed toward the origin: obs (x, y, vx, vy), action a force in [-force, force]^2,
    reward -|position|; `horizon` steps per episode (a truncation)."""

    def __init__(self, horizon: int = 30, force: float = 1.0):
        self.horizon, self.force = int(horizon), float(force)
        self.observation_space = gym.spaces.Box(-10.0, 10.0, shape=(4,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-self.force, self.force, shape=(2,), dtype=np.float32)
        self._state = np.zeros(4)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._state = np.concatenate([self.np_random.uniform(-2.0, 2.0, size=2), np.zeros(2)])
        self._t = 0
        return self._state.astype(np.float32), {}

    def step(self, action):
        force = np.clip(np.asarray(action, dtype=np.float64), -self.force, self.force)
        self._state[2:] = 0.9 * self._state[2:] + 0.1 * force
        self._state[:2] = np.clip(self._state[:2] + self._state[2:], -10.0, 10.0)
        self._t += 1
        reward = -float(np.linalg.norm(self._state[:2]))
        return self._state.astype(np.float32), reward, False, self._t >= self.horizon, {}


def make_point_mass(horizon: int = 30) -> gym.Env:
    """A factory: `module:make_point_mass`."""
    return PointMass(horizon=horizon)


class UnboundedActions(PointMass):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)


POINT_MASS = f"{__name__}:PointMass"
TINY = ["--set", "hidden_sizes=16,16", "--set", "batch_size=32", "--set", "learning_starts=50"]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


# --- environments --------------------------------------------------------------------------------


def test_labels_are_filesystem_safe_and_differ_with_the_kwargs():
    assert EnvRef.of("Pendulum-v1").label == "Pendulum-v1"  # registered ids keep their names
    a, b = EnvRef.of(POINT_MASS, {"horizon": 20}), EnvRef.of(POINT_MASS, {"horizon": 25})
    for ref in (a, b, EnvRef.of(POINT_MASS), EnvRef.of("Pendulum-v1", {"g": 5.0})):
        assert all(c.isalnum() or c in "._-" for c in ref.label), ref.label
    assert len({a.label, b.label, EnvRef.of(POINT_MASS).label, EnvRef.of("Pendulum-v1", {"g": 5.0}).label}) == 4
    assert EnvRef.of(POINT_MASS, {"horizon": 20, "force": 1.0}) == EnvRef.of(POINT_MASS, {"force": 1.0, "horizon": 20})


def test_user_class_and_factory_are_made_with_their_kwargs():
    info = env_info(EnvRef.of(POINT_MASS, {"force": 2.5}))
    assert (info.obs_dim, info.act_dim) == (4, 2)
    np.testing.assert_array_equal(info.low, [-2.5, -2.5])
    env = EnvRef.of(f"{__name__}:make_point_mass", {"horizon": 7}).make()
    env.reset(seed=0)
    steps = 0
    while True:
        steps += 1
        if env.step(env.action_space.sample())[3]:
            break
    assert steps == 7
    # Gymnasium's own module:EnvId form: the module registers EnvId when imported.
    assert env_info("harness.running.envs:Pendulum-v1").obs_dim == 3


@pytest.mark.parametrize(
    "entry, message",
    [
        ("CartPole-v1", "Discrete(2), not a Box"),
        ("NoSuchEnv-v0", "NoSuchEnv"),
        (f"{__name__}:UnboundedActions", "unbounded"),
        (f"{__name__}:Missing", "has no attribute 'Missing'"),
        ("no_such_module_xyz:Env", "No module named 'no_such_module_xyz'"),
    ],
)
def test_envs_that_cannot_be_trained_exit_2_with_one_line(tmp_path, capsys, entry, message):
    code = main(["run", "--variants", "reference", "--envs", entry, "--steps", "100", "--out", str(tmp_path)])
    assert code == 2
    assert message in _one_line_error(capsys)
    with pytest.raises(EnvError):
        env_info(entry)


def test_an_env_without_a_profile_budget_needs_steps(tmp_path, capsys):
    assert main(["run", "--variants", "reference", "--envs", "MountainCarContinuous-v0", "--out", str(tmp_path)]) == 2
    assert "give --steps" in _one_line_error(capsys)
    assert (
        main(
            [
                "run",
                "--variants",
                "reference",
                "--envs",
                POINT_MASS,
                "--env-kwargs",
                "{horizon: 3}",
                "--steps",
                "100",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "--env-kwargs" in _one_line_error(capsys)
    assert (
        main(
            [
                "run",
                "--variants",
                "reference",
                "--envs",
                POINT_MASS,
                "--env-kwargs",
                '{"size": 3}',
                "--steps",
                "100",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "unexpected keyword argument 'size'" in _one_line_error(capsys)


def test_identity_of_a_registered_env_is_unchanged_and_a_user_env_carries_its_kwargs():
    old = {"variant": "reference", "spec": {}, "env": "Pendulum-v1", "seed": 0, "budget": {}}
    new = {**old, "env_entry": "Pendulum-v1", "env_kwargs": {}}
    assert identity(old) == identity(new) and "env_kwargs" not in identity(new)
    mine = {
        **old,
        "env": EnvRef.of(POINT_MASS, {"horizon": 5}).label,
        "env_entry": POINT_MASS,
        "env_kwargs": {"horizon": 5},
    }
    assert identity(mine)["env_kwargs"] == {"horizon": 5}
    assert identity(mine) != identity({**mine, "env_kwargs": {"horizon": 6}})


# --- variants from a file ------------------------------------------------------------------------

VARIANTS_TOML = """
[[variant]]
name = "small-batch"
description = "reference with batch 32 and 16x16 networks"
batch_size = 32
hidden_sizes = [16, 16]
learning_starts = 50

[[variant]]
name = "slow-critic"
description = "blog-sac2 with a tenth of the critic learning rate"
base = "blog-sac2"
lr_critic = 3e-5
hidden_sizes = [16, 16]
batch_size = 32
learning_starts = 50
"""


def test_variants_file_entries_are_specs_with_their_base(tmp_path):
    from variants.catalog import CATALOG
    from variants.userfile import load_variants_file

    path = tmp_path / "v.toml"
    path.write_text(VARIANTS_TOML)
    variants = load_variants_file(path)
    assert list(variants) == ["small-batch", "slow-critic"]
    assert variants["small-batch"].spec.batch_size == 32 and variants["small-batch"].spec.hidden_sizes == (16, 16)
    slow = variants["slow-critic"].spec
    assert slow.lr_critic == 3e-5 and slow.log_prob == CATALOG["blog-sac2"].spec.log_prob == "naive-scaled"
    assert variants["slow-critic"].description == "blog-sac2 with a tenth of the critic learning rate"


def test_bipedal_reward_ablation_splits_reward_scaleds_transform_in_two():
    import dataclasses

    import numpy as np

    from variants.catalog import CATALOG, REFERENCE
    from variants.rewards import transform_reward
    from variants.userfile import load_variants_file

    variants = load_variants_file(Path(__file__).parents[1] / "examples" / "bipedal_reward_ablation.toml")
    for entry in variants.values():
        fields = {
            f.name for f in dataclasses.fields(REFERENCE) if getattr(entry.spec, f.name) != getattr(REFERENCE, f.name)
        }
        assert fields <= {"reward", "reward_scale"}, fields
    # a fall, a step forward, a step back: one remaps, the other scales, the two together are reward-scaled's
    r = np.array([-100.0, 0.3, -0.1])

    def seen(spec):
        return transform_reward(r, spec.reward, "BipedalWalker-v3", spec.reward_scale)

    fall, scale = seen(variants["ref-fall-only"].spec), seen(variants["ref-scale-10"].spec)
    np.testing.assert_allclose(fall, [-1.0, 0.3, -0.1], rtol=1e-6)
    np.testing.assert_allclose(scale, [-1000.0, 3.0, -1.0], rtol=1e-6)
    np.testing.assert_allclose(seen(CATALOG["reward-scaled"].spec), fall * 10, rtol=1e-6)


@pytest.mark.parametrize(
    "text, message",
    [
        ('[[variant]]\nname = "a"\ndescription = "d"\nbach_size = 3\n', "variant #1 ('a'): unknown field 'bach_size'"),
        (
            '[[variant]]\nname = "a"\ndescription = "d"\nbatch_size = "big"\n',
            "variant #1 ('a'): field batch_size: 'big' is not an integer",
        ),
        (
            '[[variant]]\nname = "a"\ndescription = "d"\nlog_prob = "exact"\n',
            "field log_prob: 'exact' is not one of softplus",
        ),
        (
            '[[variant]]\nname = "a"\ndescription = "d"\ngamma = 1.5\n',
            "variant #1 ('a'): gamma and tau must lie in [0, 1]",
        ),
        (
            '[[variant]]\nname = "a"\ndescription = "d"\n[[variant]]\nname = "a"\ndescription = "e"\n',
            "variant #2: duplicate name 'a' (already in this file)",
        ),
        (
            '[[variant]]\nname = "naive-tanh"\ndescription = "d"\n',
            "duplicate name 'naive-tanh' (already in the catalog)",
        ),
        ('[[variant]\nname = "a"\n', "invalid TOML"),
        ('[[variant]]\nname = "a"\n', "variant #1 ('a'): no description"),
        ('[[variant]]\nname = "a b"\ndescription = "d"\n', "name 'a b' must be letters"),
    ],
)
def test_a_bad_variants_file_exits_2_with_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert (
        main(
            [
                "run",
                "--variants",
                "reference",
                "--variants-file",
                str(path),
                "--envs",
                "Pendulum-v1",
                "--steps",
                "100",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    err = _one_line_error(capsys)
    assert message in err and str(path) in err
    assert main(["list", "--variants-file", str(path)]) == 2
    assert message in _one_line_error(capsys)


def test_list_names_the_file_variants(tmp_path, capsys):
    path = tmp_path / "v.toml"
    path.write_text(VARIANTS_TOML)
    assert main(["list", "--variants-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "small-batch" in out and "batch_size=32" in out and "slow-critic" in out and "lr_critic=3e-05" in out


# --- end to end: a grid on MountainCarContinuous and a user's env, reported in raw returns -------------


# Episodes cut at 60 steps (Gymnasium's make takes max_episode_steps) keep MountainCar's evaluations short.
SHORT = {"max_episode_steps": 60}
MOUNTAIN_CAR = EnvRef.of("MountainCarContinuous-v0", SHORT).label
SHORT_POINT_MASS = EnvRef.of(POINT_MASS, SHORT).label


@pytest.fixture(scope="module")
def byo_grid(tmp_path_factory):
    """reference and two file variants on MountainCarContinuous-v0 and PointMass, 300 steps each."""
    root = tmp_path_factory.mktemp("byo")
    path = root / "v.toml"
    path.write_text(VARIANTS_TOML)
    out = root / "results"
    code = main(
        [
            "run",
            "--variants",
            "reference,small-batch,slow-critic",
            "--variants-file",
            str(path),
            "--envs",
            f"MountainCarContinuous-v0,{POINT_MASS}",
            "--env-kwargs",
            json.dumps(SHORT),
            "--seeds",
            "1",
            "--steps",
            "300",
            "--eval-episodes",
            "1",
            "--workers",
            "1",
            "--out",
            str(out),
            "--no-report",
            "--set",
            "hidden_sizes=16,16",
            "--set",
            "batch_size=32",
            "--set",
            "learning_starts=50",
        ]
    )
    assert code == 0
    return root, out


def test_grid_records_name_description_and_spec_of_file_variants(byo_grid):
    _, out = byo_grid
    runs = pd.read_csv(out / "runs.csv")
    label = SHORT_POINT_MASS
    assert sorted(set(runs["env"])) == sorted({MOUNTAIN_CAR, label})
    assert (runs["state"] == "complete").all() and len(runs) == 6
    config = json.loads((out / "runs" / label / "slow-critic" / "seed_0" / "config.json").read_text())
    assert config["variant"] == "slow-critic" and config["description"].startswith("blog-sac2 with a tenth")
    assert config["spec"]["lr_critic"] == 3e-5 and config["spec"]["log_prob"] == "naive-scaled"
    assert config["differences"]["lr_critic"] == 3e-5 and "gamma" not in config["differences"]
    assert config["env_entry"] == POINT_MASS and config["env_kwargs"] == SHORT
    train = pd.read_csv(out / "runs" / MOUNTAIN_CAR / "reference" / "seed_0" / "train.csv")
    assert set(train["episode_length"]) == {60} and len(train) == 5  # 300 steps of MountainCar cut at 60
    # PointMass returns are minus distances summed over 30-step episodes: negative, and finite.
    assert (runs.loc[runs["env"] == label, "final_return"] < 0).all()


def test_report_shows_raw_returns_and_says_why_there_is_no_all_column(byo_grid, capsys):
    root, out = byo_grid
    assert main(["report", str(out), "--out", str(root / "report")]) == 0
    page = (root / "report" / "index.html").read_text()
    label = SHORT_POINT_MASS
    assert f"No target and random return are known for {MOUNTAIN_CAR}, {label}" in page
    assert "slow-critic" in page and "blog-sac2 with a tenth of the critic learning rate" in page
    summary = pd.read_csv(root / "report" / "summary.csv")
    assert "all" not in set(summary["env"])
    iqm = summary[(summary["env"] == label) & (summary["metric"] == "final_return_iqm")].set_index("variant")
    runs = pd.read_csv(out / "runs.csv").query("env == @label").set_index("variant")
    for variant in ("reference", "small-batch", "slow-critic"):  # one run each: the IQM is its raw return
        assert iqm.loc[variant, "estimate"] == pytest.approx(runs.loc[variant, "final_return"])


def test_report_targets_put_an_env_into_the_all_column(byo_grid):
    root, out = byo_grid
    label = SHORT_POINT_MASS
    assert (
        main(
            ["report", str(out), "--out", str(root / "report-t"), "--target", f"{label}=0", "--random", f"{label}=-60"]
        )
        == 0
    )
    summary = pd.read_csv(root / "report-t" / "summary.csv")
    pooled = summary[(summary["env"] == "all") & (summary["metric"] == "final_return_iqm")].set_index("variant")
    runs = pd.read_csv(out / "runs.csv").query("env == @label").set_index("variant")
    expected = (runs.loc["reference", "final_return"] + 60) / 60
    assert pooled.loc["reference", "estimate"] == pytest.approx(expected)
    page = (root / "report-t" / "index.html").read_text()
    assert f"No target and random return are known for {MOUNTAIN_CAR}:" in page


def test_a_rerun_skips_finished_runs_and_new_kwargs_get_their_own_folder(tmp_path, capsys):
    args = [
        "run",
        "--variants",
        "reference",
        "--envs",
        POINT_MASS,
        "--seeds",
        "1",
        "--steps",
        "120",
        "--eval-episodes",
        "1",
        "--workers",
        "1",
        "--out",
        str(tmp_path),
        "--no-report",
        *TINY,
    ]
    assert main([*args, "--env-kwargs", '{"horizon": 10}']) == 0
    assert main([*args, "--env-kwargs", '{"horizon": 10}']) == 0
    assert "1 already finished, 0 jobs" in capsys.readouterr().out
    assert (
        main([*args, "--env-kwargs", '{"horizon": 12}', "--target", f"{POINT_MASS}=0", "--random", f"{POINT_MASS}=-30"])
        == 0
    )
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert folders == sorted(
        [EnvRef.of(POINT_MASS, {"horizon": 10}).label, EnvRef.of(POINT_MASS, {"horizon": 12}).label]
    )
    config = json.loads(
        (
            tmp_path / "runs" / EnvRef.of(POINT_MASS, {"horizon": 12}).label / "reference" / "seed_0" / "config.json"
        ).read_text()
    )
    assert config["env_kwargs"] == {"horizon": 12} and config["normalization"] == {"target": 0.0, "random": -30.0}
    train = pd.read_csv(
        tmp_path / "runs" / EnvRef.of(POINT_MASS, {"horizon": 12}).label / "reference" / "seed_0" / "train.csv"
    )
    assert set(train["episode_length"]) == {12}


def test_bad_score_anchors_exit_2(tmp_path, capsys):
    base = ["run", "--variants", "reference", "--envs", "Pendulum-v1", "--steps", "100", "--out", str(tmp_path)]
    assert main([*base, "--target", "Pendulum-v1=high"]) == 2
    assert "expected ENV=RETURN" in _one_line_error(capsys)
    assert main([*base, "--target", "Hopper-v5=3000"]) == 2
    assert "not among --envs" in _one_line_error(capsys)
    assert main([*base, "--target", "Pendulum-v1=-1207.555"]) == 2
    assert "equals the random return" in _one_line_error(capsys)


# Builds HalfCheetah-v5 twice, one env and a vector env of two, in a fresh interpreter (so no earlier test
# has shown the notice yet), then says whether MuJoCo's warnings go through the harness's handler.
_HALFCHEETAH_PROBE = """
import mujoco
from harness.running import envs
envs.EnvRef("HalfCheetah-v5").make().close()
envs.make_vector_env("HalfCheetah-v5", 2).close()
print(f"handler={mujoco.get_mju_user_warning() is envs._mujoco_warning}")
"""


def test_halfcheetah_deprecation_notice_is_shown_at_most_once(tmp_path):
    pytest.importorskip("mujoco")
    proc = subprocess.run(
        [sys.executable, "-c", _HALFCHEETAH_PROBE],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "handler=True", proc.stdout + proc.stderr
    # MuJoCo 3.x/4.x deprecate the `settotalmass` that Gymnasium's half_cheetah.xml sets; older ones do not.
    assert proc.stderr.count("compiler attribute 'settotalmass' is deprecated") <= 1, proc.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()  # the default handler, which also logs there, is replaced


def test_only_deprecation_notices_from_mujoco_are_shown_once(capsys):
    for _ in range(2):
        envs._mujoco_warning("test notice: attribute 'x' is deprecated")
        envs._mujoco_warning("test: Nan, Inf or huge value in QACC")
    err = capsys.readouterr().err
    assert err.count("attribute 'x' is deprecated") == 1 and err.count("huge value in QACC") == 2
