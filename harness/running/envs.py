"""The benchmark's environments, a user's own, and how the harness steps them.

An environment is named by an `EnvRef`: a registered Gymnasium id (`Pendulum-v1`, `HalfCheetah-v5`) or
a user's `module:Class` / `module:factory`, with keyword arguments (`--env-kwargs`). Its `label` names it
in run records and folders; it is filesystem-safe and differs whenever the id or the kwargs differ.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode


@dataclass(frozen=True)
class EnvInfo:
    env_id: str
    short: str
    obs_dim: int
    act_dim: int
    low: np.ndarray
    high: np.ndarray

    @property
    def action_scale(self) -> np.ndarray:
        return ((self.high - self.low) / 2.0).astype(np.float32)


ENV_IDS = ("Pendulum-v1", "LunarLanderContinuous-v3", "BipedalWalker-v3")

# A user's `module:Class` environment that does not end its own episodes is cut after this many steps
# (Gymnasium's TimeLimit, a truncation: training still bootstraps through it). 1,000 is the time limit
# of the MuJoCo tasks and of BipedalWalker. `max_episode_steps` in --env-kwargs replaces it, for any env
# (gymnasium.make takes it instead of passing it to the env).
DEFAULT_MAX_EPISODE_STEPS = 1000

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class EnvError(ValueError):
    """An environment that cannot be made or that sacbench cannot train (one-line message)."""


@dataclass(frozen=True)
class EnvRef:
    """Which environment to make: `entry` is a registered id or `module:attr`; `kwargs_json` holds the
    constructor's keyword arguments as canonical JSON (sorted keys), so that equal kwargs compare equal."""

    entry: str
    kwargs_json: str = "{}"

    @classmethod
    def of(cls, entry: str, kwargs: Mapping[str, Any] | None = None) -> EnvRef:
        return cls(entry, json.dumps(dict(kwargs or {}), sort_keys=True, separators=(",", ":")))

    @property
    def kwargs(self) -> dict[str, Any]:
        return json.loads(self.kwargs_json)

    @property
    def is_user_env(self) -> bool:
        return ":" in self.entry

    @property
    def label(self) -> str:
        """The name in run records and folders: the id itself for a registered id without kwargs;
        otherwise a filesystem-safe form of it plus a hash of the id and the kwargs."""
        if not self.is_user_env and self.kwargs_json == "{}" and not _SAFE.search(self.entry):
            return self.entry
        readable = _SAFE.sub("_", self.entry.replace(":", ".")).strip("._-")[:60] or "env"
        digest = hashlib.sha256(f"{self.entry}\n{self.kwargs_json}".encode()).hexdigest()[:8]
        return f"{readable}-{digest}"

    def gym_id(self) -> str | EnvSpec:
        """What `gym.make` / `gym.make_vec` take: the id, or for a user's class or factory an EnvSpec
        built on the fly (so it gets the same wrappers as a registered env: checker, time limit)."""
        if not self.is_user_env:
            return self.entry
        module_name, attr = self.entry.split(":", 1)
        module = importlib.import_module(module_name)
        if not hasattr(module, attr):
            if attr in gym.registry:  # Gymnasium's own `module:EnvId` form: importing the module registered it
                return attr
            raise EnvError(f"module {module_name} has no attribute {attr!r}, and no environment {attr!r} is registered")
        return EnvSpec(id=self.label, entry_point=self.entry, max_episode_steps=DEFAULT_MAX_EPISODE_STEPS)

    def make(self) -> gym.Env:
        target = self.gym_id()
        show_mujoco_notices_once(target)
        return gym.make(target, **self.kwargs)


# MuJoCo's model compiler reports a deprecated attribute of a model file through mju_warning, whose
# default handler prints it to stderr (and appends it to MUJOCO_LOG.TXT in the working directory) on
# every compile, i.e. for every env a run builds. Gymnasium's half_cheetah.xml sets `settotalmass`
# (deprecated in MuJoCo 3.x), so a HalfCheetah grid's log got one copy per env built. The file is
# Gymnasium's, so the cause cannot be fixed here; but the notice is not noise to drop either: when
# MuJoCo removes the attribute, the cheetah's mass, hence its dynamics, changes. So each deprecation
# notice is shown once per process, and every other MuJoCo warning (a simulation going unstable among
# them) each time, as before.
_DEPRECATION = "is deprecated"
_notices_shown: set[str] = set()


def _mujoco_warning(message: str) -> None:
    if _DEPRECATION in message:
        if message in _notices_shown:
            return
        _notices_shown.add(message)
        message += " (sacbench shows this notice once per process)"
    print(f"MuJoCo WARNING: {message}", file=sys.stderr, flush=True)


def show_mujoco_notices_once(target: str | EnvSpec) -> None:
    """Before building `target` (what `gym.make` takes): where it is a Gymnasium MuJoCo env, or MuJoCo is
    already loaded, make `_mujoco_warning` MuJoCo's warning handler, unless someone else has set one.
    Other envs do not import mujoco for it (that takes most of a second)."""
    spec = target if isinstance(target, EnvSpec) else gym.registry.get(target)
    entry = getattr(spec, "entry_point", None)
    if "mujoco" not in sys.modules and not (isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco")):
        return
    try:
        import mujoco
    except ImportError:  # gym.make will say so
        return
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)


def registered_ref(entry: object, kwargs: object = None) -> EnvRef | None:
    """An EnvRef for a recorded environment only when `entry` is an id in Gymnasium's registry (made
    without importing anything it names), else None. A results folder is data shared between people:
    a recorded `module:attr` is never imported or called from it."""
    if not isinstance(entry, str) or ":" in entry or entry not in gym.registry:
        return None
    return EnvRef.of(entry, kwargs if isinstance(kwargs, dict) else {})


def as_ref(env: EnvRef | str) -> EnvRef:
    return env if isinstance(env, EnvRef) else EnvRef(env)


def parse_env_kwargs(text: str | None) -> dict[str, Any]:
    """`--env-kwargs` text (a JSON object) as a dict; raises EnvError with a one-line reason."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EnvError(f"--env-kwargs {text!r}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise EnvError(f"--env-kwargs {text!r}: expected a JSON object such as '{{\"size\": 3}}'")
    return value


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _check_box(space: gym.Space, what: str, ref: EnvRef, bounded: bool) -> None:
    where = ref.entry + (f" with {ref.kwargs_json}" if ref.kwargs_json != "{}" else "")
    if not isinstance(space, gym.spaces.Box):
        raise EnvError(
            f"{where}: the {what} space is {space}, not a Box; sacbench trains continuous-action "
            "SAC on Box observations and Box actions only"
        )
    if len(space.shape) != 1:
        raise EnvError(
            f"{where}: the {what} space has shape {space.shape}; sacbench needs a flat vector "
            "(wrap the env in gymnasium.wrappers.FlattenObservation in a factory)"
        )
    if bounded and not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise EnvError(f"{where}: the action space {space} is unbounded; SAC's tanh policy needs finite bounds")


def env_info(env: EnvRef | str) -> EnvInfo:
    """Dimensions and action bounds of `env`; raises EnvError (one line) when it cannot be made or has a
    discrete, multi-dimensional or unbounded space."""
    ref = as_ref(env)
    try:
        made = ref.make()
    except (Exception, SystemExit) as exc:  # any failure to build a user's env (an exit at import too) is a usage error
        raise EnvError(f"cannot make environment {ref.entry!r}: {_one_line(exc)}") from None
    try:
        _check_box(made.observation_space, "observation", ref, bounded=False)
        _check_box(made.action_space, "action", ref, bounded=True)
        space = made.action_space
        return EnvInfo(
            ref.label,
            ref.label.split("-")[0],
            int(np.prod(made.observation_space.shape)),
            int(np.prod(space.shape)),
            space.low.astype(np.float64),
            space.high.astype(np.float64),
        )
    finally:
        made.close()


class Guarded(gym.Wrapper):
    """An env whose first exception in `reset` or `step` is kept (`error`, one line) instead of raised;
    from then on it repeats its last observation with reward 0 and ends every step. Healthy, it passes
    every call through unchanged. One member's failing evaluation env thus ends that member alone."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.error: str | None = None
        self._last = np.zeros(env.observation_space.shape, dtype=env.observation_space.dtype)

    def reset(self, **kwargs):
        if self.error is None:
            try:
                obs, info = self.env.reset(**kwargs)
                self._last = obs
                return obs, info
            except Exception as exc:  # the env's own failure, recorded for its member
                self.error = _one_line(exc)
        return self._last, {}

    def step(self, action):
        if self.error is None:
            try:
                obs, reward, terminated, truncated, info = self.env.step(action)
                self._last = obs
                return obs, reward, terminated, truncated, info
            except Exception as exc:
                self.error = _one_line(exc)
        return self._last, 0.0, True, False, {}


def make_vector_env(env: EnvRef | str, num_envs: int, guarded: bool = False) -> gym.vector.VectorEnv:
    """A synchronous gymnasium vector env that autoresets in the same step (used for evaluation);
    with `guarded`, each env is `Guarded` (see `eval_errors`)."""
    ref = as_ref(env)
    target = ref.gym_id()
    show_mujoco_notices_once(target)
    return gym.make_vec(
        target,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        wrappers=[Guarded] if guarded else None,
        **ref.kwargs,
    )


def eval_errors(vector_env: gym.vector.VectorEnv, members: int, episodes: int) -> list[str | None]:
    """Per member, the first error of its `episodes` guarded evaluation envs (member-major), or None."""
    errors = [getattr(e, "error", None) for e in getattr(vector_env, "envs", [])]
    errors += [None] * (members * episodes - len(errors))
    return [next((e for e in errors[k * episodes : (k + 1) * episodes] if e), None) for k in range(members)]


class LockstepEnvs:
    """S environments stepped together, autoreset in the same step, with a state that can be saved.

    Stepping matches gymnasium's SyncVectorEnv in SAME_STEP autoreset mode (step each env; where an
    episode ended, keep its last observation and reset it without a seed), so every step is a real
    transition. Unlike a vector env it can be checkpointed: Box2D worlds do not pickle, but an env's
    state is a function of its RNG state at its last reset and the actions since, so `state_dict`
    keeps those and `load_state_dict` replays them.
    """

    def __init__(self, env: EnvRef | str, num_envs: int):
        ref = as_ref(env)
        self.envs = [ref.make() for _ in range(num_envs)]
        self._reset_seed: list[int | None] = [None] * num_envs
        self._reset_rng: list[dict | None] = [None] * num_envs
        self._actions: list[list[np.ndarray]] = [[] for _ in range(num_envs)]
        # env i's first exception (one line), after which it is stepped no more: its member has failed
        self.errors: list[str | None] = [None] * num_envs
        self._last = [np.zeros(e.observation_space.shape, dtype=e.observation_space.dtype) for e in self.envs]

    def reset(self, seeds: list[int]) -> np.ndarray:
        """Reset env i with seeds[i]; returns observations (S, O)."""
        obs = []
        for i, seed in enumerate(seeds):
            self._reset_seed[i], self._reset_rng[i], self._actions[i] = int(seed), None, []
            obs.append(self._reset_one(i, seed=int(seed)))
        return np.stack(obs)

    def _reset_one(self, i: int, **kwargs) -> np.ndarray:
        """Env i's first observation after `reset(**kwargs)`; where the reset raises, env i's error is
        recorded and its last observation repeated (the other envs go on)."""
        try:
            self._last[i] = self.envs[i].reset(**kwargs)[0]
        except Exception as exc:  # the env's own failure ends its member alone
            self.errors[i] = _one_line(exc)
        return self._last[i]

    def _step_one(self, i: int, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        env = self.envs[i]
        try:
            obs, reward, terminated, truncated, _ = env.step(action)
        except Exception as exc:  # the env's own failure ends its member alone
            self.errors[i] = _one_line(exc)
            return self._last[i], 0.0, False, False
        self._last[i] = obs
        return obs, reward, terminated, truncated

    def step(self, actions: np.ndarray):
        """Step every env. Returns (next_obs, reward, terminated, truncated, final_obs), each stacked
        over envs; next_obs is a new episode's first observation where one ended, final_obs the
        observation the ended episode reached (equal to next_obs elsewhere). An env that has raised
        (`errors`) is not stepped: it repeats its last observation with reward 0."""
        out_obs, final_obs, rewards, terms, truncs = [], [], [], [], []
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            if self.errors[i] is not None:
                obs, reward, terminated, truncated = self._last[i], 0.0, False, False
            else:
                obs, reward, terminated, truncated = self._step_one(i, action)
                self._actions[i].append(np.array(action, dtype=np.float32))
            final_obs.append(obs)
            if (terminated or truncated) and self.errors[i] is None:
                self._reset_seed[i] = None
                self._reset_rng[i] = copy.deepcopy(env.unwrapped.np_random.bit_generator.state)
                self._actions[i] = []
                obs = self._reset_one(i)
            out_obs.append(obs)
            rewards.append(reward)
            terms.append(terminated)
            truncs.append(truncated)
        return (
            np.stack(out_obs),
            np.asarray(rewards, dtype=np.float64),
            np.asarray(terms, dtype=bool),
            np.asarray(truncs, dtype=bool),
            np.stack(final_obs),
        )

    def state_dict(self) -> dict:
        import torch  # tensors, so that a checkpoint loads with torch.load(weights_only=True)

        return {
            "reset_seed": list(self._reset_seed),
            "reset_rng": copy.deepcopy(self._reset_rng),
            "actions": [torch.as_tensor(np.array(a, dtype=np.float32)) for a in self._actions],
            "errors": list(self.errors),
        }

    def load_state_dict(self, state: dict) -> np.ndarray:
        """Restore every env by replaying its episode so far; returns the current observations."""
        obs = []
        self.errors = list(state.get("errors") or [None] * len(self.envs))
        for i, env in enumerate(self.envs):
            if self.errors[i] is not None:  # its member has failed: nothing of it to replay
                obs.append(self._last[i])
                continue
            seed, rng = state["reset_seed"][i], state["reset_rng"][i]
            if seed is not None:
                o, _ = env.reset(seed=int(seed))
            else:
                gen = np.random.Generator(np.random.PCG64())
                gen.bit_generator.state = rng
                env.unwrapped.np_random = gen
                o, _ = env.reset()
            self._reset_seed[i], self._reset_rng[i], self._actions[i] = seed, copy.deepcopy(rng), []
            for action in state["actions"][i].numpy():
                o, _, terminated, truncated, _ = env.step(action)
                self._actions[i].append(action.copy())
                if terminated or truncated:
                    raise RuntimeError("checkpoint replay ended an episode early: the environment is not deterministic")
            obs.append(o)
        return np.stack(obs)

    def close(self) -> None:
        for env in self.envs:
            env.close()
