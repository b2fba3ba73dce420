"""The benchmark's environments and how the harness steps them."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
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


def env_info(env_id: str) -> EnvInfo:
    env = gym.make(env_id)
    try:
        space = env.action_space
        return EnvInfo(
            env_id,
            env_id.split("-")[0],
            int(np.prod(env.observation_space.shape)),
            int(np.prod(space.shape)),
            space.low.astype(np.float64),
            space.high.astype(np.float64),
        )
    finally:
        env.close()


def make_vector_env(env_id: str, num_envs: int) -> gym.vector.VectorEnv:
    """A synchronous gymnasium vector env that autoresets in the same step (used for evaluation)."""
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


class LockstepEnvs:
    """S environments stepped together, autoreset in the same step, with a state that can be saved.

    Stepping matches gymnasium's SyncVectorEnv in SAME_STEP autoreset mode (step each env; where an
    episode ended, keep its last observation and reset it without a seed), so every step is a real
    transition. Unlike a vector env it can be checkpointed: Box2D worlds do not pickle, but an env's
    state is a function of its RNG state at its last reset and the actions since, so `state_dict`
    keeps those and `load_state_dict` replays them.
    """

    def __init__(self, env_id: str, num_envs: int):
        self.envs = [gym.make(env_id) for _ in range(num_envs)]
        self._reset_seed: list[int | None] = [None] * num_envs
        self._reset_rng: list[dict | None] = [None] * num_envs
        self._actions: list[list[np.ndarray]] = [[] for _ in range(num_envs)]

    def reset(self, seeds: list[int]) -> np.ndarray:
        """Reset env i with seeds[i]; returns observations (S, O)."""
        obs = []
        for i, (env, seed) in enumerate(zip(self.envs, seeds)):
            self._reset_seed[i], self._reset_rng[i], self._actions[i] = int(seed), None, []
            obs.append(env.reset(seed=int(seed))[0])
        return np.stack(obs)

    def step(self, actions: np.ndarray):
        """Step every env. Returns (next_obs, reward, terminated, truncated, final_obs), each stacked
        over envs; next_obs is a new episode's first observation where one ended, final_obs the
        observation the ended episode reached (equal to next_obs elsewhere)."""
        out_obs, final_obs, rewards, terms, truncs = [], [], [], [], []
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            obs, reward, terminated, truncated, _ = env.step(action)
            self._actions[i].append(np.array(action, dtype=np.float32))
            final_obs.append(obs)
            if terminated or truncated:
                self._reset_seed[i] = None
                self._reset_rng[i] = copy.deepcopy(env.unwrapped.np_random.bit_generator.state)
                self._actions[i] = []
                obs, _ = env.reset()
            out_obs.append(obs)
            rewards.append(reward)
            terms.append(terminated)
            truncs.append(truncated)
        return (np.stack(out_obs), np.asarray(rewards, dtype=np.float64), np.asarray(terms, dtype=bool),
                np.asarray(truncs, dtype=bool), np.stack(final_obs))

    def state_dict(self) -> dict:
        import torch  # tensors, so that a checkpoint loads with torch.load(weights_only=True)

        return {
            "reset_seed": list(self._reset_seed),
            "reset_rng": copy.deepcopy(self._reset_rng),
            "actions": [torch.as_tensor(np.array(a, dtype=np.float32)) for a in self._actions],
        }

    def load_state_dict(self, state: dict) -> np.ndarray:
        """Restore every env by replaying its episode so far; returns the current observations."""
        obs = []
        for i, env in enumerate(self.envs):
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
