"""The catalog of named variants. Adding a variant is one entry here; tests and `--variants all` pick it up.

Each entry changes as few fields of `REFERENCE` as possible, so a difference in results can be pinned
on one detail. Where a source leaves a choice open, the reference's value is kept (said in the entry).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from .spec import VariantSpec

REFERENCE = VariantSpec()


# Which code trains a variant: "native" the harness's own learner (`variants.learner`); "sb3"
# Stable-Baselines3's SAC (the optional `sb3` extra), a peer implementation beside ours.
Implementation = Literal["native", "sb3"]


@dataclass(frozen=True)
class CatalogEntry:
    """A named variant.

    Args:
        description: one line, shown by `python -m harness list` and in the report.
        spec: the implementation details it sets.
        implementation: the code that trains it (see `Implementation`).
        same_as: the name of an entry whose arithmetic is bit-identical to this one's (tested); `all`
            runs only that entry, since a second run would recompute the same numbers.
    """

    description: str
    spec: VariantSpec
    implementation: Implementation = "native"
    same_as: str | None = None


def _variant(description: str, **changes) -> CatalogEntry:
    return CatalogEntry(description, dataclasses.replace(REFERENCE, **changes))


CATALOG: dict[str, CatalogEntry] = {
    "reference": CatalogEntry(
        "SAC with twin critics, softplus-stable tanh log-prob (Stable-Baselines3 uses the naive form: see "
        "sb3-sac), per-loss stepping, auto entropy (target -|A|), lr 3e-4, batch 256, 256x256",
        REFERENCE,
    ),
    "naive-tanh": _variant("naive log(1 - tanh(u)^2 + 1e-6) tanh correction", log_prob="naive"),
    "joint-update": _variant(
        "all losses and gradients from pre-update parameters, then all steps", update_order="joint"
    ),
    "policy-first": CatalogEntry(
        "losses first, then step policy, critics, alpha (the blog's prescription); bit-identical to "
        "joint-update (tests/test_learner.py), so `all` runs joint-update for both",
        dataclasses.replace(REFERENCE, update_order="policy-first"),
        same_as="joint-update",
    ),
    "critic-first": _variant(
        "losses first, then step critics before the policy's backward (expected to fail: in-place error)",
        update_order="critic-first",
    ),
    "alpha-loss": _variant("temperature loss differentiated through alpha, not log(alpha)", alpha_loss="alpha"),
    "reward-scaled": _variant(
        "blog's reward scaling: BipedalWalker -100 -> -1, then x10 everywhere", reward="bipedal-fall"
    ),
    "sac-auto": _variant(
        "sac_agent.py as written: lr 1e-3 everywhere, batch 128, starts 1000, alpha 0.2 "
        "(no lr decay, its default; buffer and init left at the reference's)",
        lr_actor=1e-3,
        lr_critic=1e-3,
        lr_alpha=1e-3,
        batch_size=128,
        learning_starts=1000,
        initial_alpha=0.2,
    ),
    "blog-sac2": _variant(
        "the blog's code as written: naive-scaled log-prob, policy-first, 256-256-256 xavier, lr 3e-4, "
        "batch 128, alpha 0.036 for one update then learned from log_alpha=0, unscaled exploration actions "
        "(random warm-up actions kept from the reference). Like the blog's select_action, evaluation maps "
        "actions onto the bounds, so where the bounds are wider than [-1, 1] (Pendulum: +-2) it is evaluated "
        "with torques up to twice the range it trained with",
        log_prob="naive-scaled",
        update_order="policy-first",
        hidden_sizes=(256, 256, 256),
        init="xavier",
        batch_size=128,
        learning_starts=1000,
        initial_alpha=0.036,
        initial_log_alpha=0.0,
        action_rescale="unscaled-stochastic",
    ),
    "bf16": _variant(
        "hidden-to-hidden products in bfloat16 (forward and both backward products); float32 master "
        "weights, Adam state, input and output layers, losses, targets and log-probs",
        precision="bf16",
    ),
    "sb3-sac": CatalogEntry(
        "Stable-Baselines3's SAC (extra sb3) at the reference's settings, under the harness's seeds and "
        "evaluation. Differs from reference: naive log(1 - tanh(u)^2 + 1e-6) log-prob; critic loss "
        "0.5*(MSE1 + MSE2) (same steps under Adam but for its eps); per update one policy sample feeds "
        "the alpha and actor losses; alpha is stepped first, then the critics (target with the pre-step "
        "alpha), then the actor through the updated critics with the pre-step alpha: the reference's "
        "sequential arithmetic in another order; warm-up actions, replay indices and policy noise come "
        "from SB3's global RNGs seeded with the run seed",
        dataclasses.replace(REFERENCE, log_prob="naive"),
        implementation="sb3",
    ),
}


def distinct_variants() -> list[str]:
    """What `--variants all` runs: every entry but those whose arithmetic another entry computes."""
    return [name for name, entry in CATALOG.items() if entry.same_as is None]


def get_variant(name: str) -> CatalogEntry:
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown variant {name!r}; valid: {', '.join(CATALOG)}") from None
