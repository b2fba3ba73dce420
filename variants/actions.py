"""Mapping policy actions in [-1, 1] onto an environment's action bounds."""

from __future__ import annotations

import numpy as np


def affine_to_bounds(action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Map `action` in [-1, 1] affinely onto [low, high] (per component, broadcasting)."""
    return low + (np.asarray(action) + 1.0) * 0.5 * (high - low)


def env_action(action: np.ndarray, low: np.ndarray, high: np.ndarray, rescale: str, deterministic: bool) -> np.ndarray:
    """The action sent to the environment for policy action `action` in [-1, 1].

    rescale "affine" always maps onto the bounds; "unscaled-stochastic" (the blog's code) sends
    exploration actions as they are and maps only deterministic ones.
    """
    if rescale == "unscaled-stochastic" and not deterministic:
        return np.asarray(action, dtype=np.float32)
    if rescale not in ("affine", "unscaled-stochastic"):
        raise ValueError(f"unknown action_rescale {rescale!r}")
    return affine_to_bounds(action, low, high).astype(np.float32)
