"""A run's final deterministic policy: saved at the end of the run, rebuilt as a plain torch module.

The learner holds every member's actor stacked along a member axis (`variants.networks`). At the end
of a run each complete member's slice is saved to `policy.pt` in its run folder, with what is needed to
rebuild the policy without the learner: the layer weights, the observation and action sizes, the
action bounds, and the run's config (spec, environment). `PolicyModule` is that policy as ordinary
`nn.Linear` layers: observation in, the action the harness's evaluation sends to the environment out
(tanh of the Gaussian mean, mapped affinely onto the bounds). Exports (`harness.running.export`) start from it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import records

POLICY_FILE = "policy.pt"
POLICY_FORMAT = "sacbench-policy-1"


def save_final_policy(run_path: Path, learner: Any, member: int, info: Any, config: dict, env_steps: int) -> Path:
    """Write member `member`'s actor (float32, on the CPU) to `run_path/policy.pt`, atomically.

    `learner` is a SACLearner (its `actor`: stacked [W0 (M, in, out), b0 (M, 1, out), ...]); `info` the
    EnvInfo; `config` the run's config.json. Loadable with `torch.load(weights_only=True)`.
    """
    weights = [p[member].detach().to(device="cpu", dtype=torch.float32).clone() for p in learner.actor]
    state = {
        "format": POLICY_FORMAT,
        "weights": weights,
        "obs_dim": int(info.obs_dim),
        "act_dim": int(info.act_dim),
        "action_low": [float(v) for v in info.low],
        "action_high": [float(v) for v in info.high],
        "env_steps": int(env_steps),
        # Through JSON: plain types only (torch.__version__ is a str subclass that weights_only refuses).
        "config": json.loads(
            json.dumps(
                {
                    k: config.get(k)
                    for k in (
                        "variant",
                        "description",
                        "spec",
                        "env",
                        "env_entry",
                        "env_kwargs",
                        "seed",
                        "normalization",
                        "git_commit",
                        "versions",
                    )
                }
            )
        ),
    }
    path = Path(run_path) / POLICY_FILE
    records.save_torch(path, state)
    return path


class PolicyError(ValueError):
    """A policy file that cannot be read (one-line message)."""


def load_policy_state(path: Path) -> dict:
    """The dict `save_final_policy` wrote; raises PolicyError when the file is missing or not one."""
    try:
        state = torch.load(Path(path), weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise PolicyError(f"{path}: no such file") from None
    except Exception as exc:  # a truncated or foreign file: torch raises several kinds
        raise PolicyError(f"{path}: not a readable policy file ({type(exc).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != POLICY_FORMAT:
        raise PolicyError(f"{path}: not a {POLICY_FORMAT} file")
    return state


class PolicyModule(nn.Module):
    """The deterministic policy as plain layers. forward: observations (..., obs_dim) float32 ->
    environment actions (..., act_dim) in [low, high].

    Computes `low + (tanh(mu) + 1) * (high - low) / 2`, mu the first `act_dim` outputs of the ReLU MLP,
    as the harness's evaluation does (`variants.actions.affine_to_bounds`), in float32.
    """

    def __init__(self, weights: Sequence[torch.Tensor], act_dim: int, low: Sequence[float], high: Sequence[float]):
        super().__init__()
        layers = []
        for w, b in zip(weights[0::2], weights[1::2]):
            layer = nn.Linear(w.shape[0], w.shape[1])
            with torch.no_grad():
                layer.weight.copy_(w.T)  # the learner stores (in, out); nn.Linear holds (out, in)
                layer.bias.copy_(b.reshape(-1))
            layers.append(layer)
        self.layers = nn.ModuleList(layers)
        self.act_dim = int(act_dim)
        low64, high64 = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        self.register_buffer("low", torch.as_tensor(low64, dtype=torch.float32))
        self.register_buffer("half_range", torch.as_tensor((high64 - low64) * 0.5, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        mean_action = torch.tanh(x[..., : self.act_dim])
        return self.low + (mean_action + 1.0) * self.half_range

    @classmethod
    def from_state(cls, state: dict) -> PolicyModule:
        return cls(state["weights"], state["act_dim"], state["action_low"], state["action_high"]).eval()
