"""`VariantSpec`: every implementation detail a SAC variant sets, as named, typed, documented fields.

A variant is data, not code: the learner reads these fields, and the few places where variants differ
in math are small pure functions selected by a field's value (see `logprob`, `rewards`, `actions`,
`networks.INITIALIZERS` and `learner.UPDATE_ORDERS`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

LogProbForm = Literal["softplus", "naive", "naive-scaled"]
UpdateOrder = Literal["sequential", "joint", "policy-first", "critic-first"]
AlphaLossForm = Literal["log_alpha", "alpha"]
RewardTransform = Literal["none", "scale", "bipedal-fall", "bipedal-fall-only"]
ActionRescale = Literal["affine", "unscaled-stochastic"]
InitScheme = Literal["torch-default", "xavier"]
Precision = Literal["fp32", "bf16"]


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"doc": text}, **kw)


@dataclass(frozen=True)
class VariantSpec:
    """The implementation details of one SAC variant.

    Equation numbers refer to Haarnoja et al., "Soft Actor-Critic Algorithms and Applications"
    (arXiv:1812.05905).
    """

    # --- the details under study -------------------------------------------------------------
    log_prob: LogProbForm = _doc(
        "form of log(1 - tanh(u)^2) in the squashed-Gaussian log-prob (eq. 26): 'softplus' "
        "2*(log 2 - u - softplus(-2u)); 'naive' log(1 - tanh(u)^2 + eps); 'naive-scaled' "
        "log(scale * (1 - tanh(u)^2) + eps) with the action scale inside the log",
        default="softplus",
    )
    update_order: UpdateOrder = _doc(
        "how the three losses are stepped: 'sequential' critic step, then actor on the updated "
        "critic (critic frozen), then alpha; 'joint' all losses and gradients from the "
        "pre-update parameters, then all steps; 'policy-first' losses first, then backward+step "
        "policy, critics, alpha in turn; 'critic-first' the same with the critics first (raises "
        "PyTorch's in-place error)",
        default="sequential",
    )
    alpha_loss: AlphaLossForm = _doc(
        "temperature loss (eq. 18): 'log_alpha' -log(alpha)*(log_pi + target_entropy), or "
        "'alpha' -alpha*(log_pi + target_entropy)",
        default="log_alpha",
    )
    reward: RewardTransform = _doc(
        "reward seen by the learner: 'none'; 'scale' times reward_scale; 'bipedal-fall' "
        "BipedalWalker's -100 fall penalty mapped to -1 then times 10, elsewhere times 10; "
        "'bipedal-fall-only' the fall penalty mapped to -1, no scaling",
        default="none",
    )
    reward_scale: float = _doc("multiplier of the 'scale' reward transform", default=1.0)
    action_rescale: ActionRescale = _doc(
        "'affine' maps every policy action from [-1, 1] onto the env bounds; "
        "'unscaled-stochastic' sends exploration actions unmapped (deterministic ones mapped)",
        default="affine",
    )
    init: InitScheme = _doc(
        "weight init: 'torch-default' (nn.Linear's) or 'xavier' (xavier_uniform, zero biases)",
        default="torch-default",
    )
    precision: Precision = _doc(
        "dtype of the hidden-to-hidden products (forward and both backward products): 'fp32', or "
        "'bf16' bfloat16 with float32 master weights, gradients, Adam state, input and output layers, "
        "losses, targets and log-probs (see variants.networks.layer_dtypes)",
        default="fp32",
    )

    # --- hyperparameters ---------------------------------------------------------------------
    gamma: float = _doc("discount factor", default=0.99)
    tau: float = _doc("polyak coefficient of the target critics (eq. after 6)", default=0.005)
    lr_actor: float = _doc("Adam learning rate of the actor", default=3e-4)
    lr_critic: float = _doc("Adam learning rate of the twin critics", default=3e-4)
    lr_alpha: float = _doc("Adam learning rate of the temperature", default=3e-4)
    lr_decay_period: int = _doc(
        "updates over which every learning rate decays linearly to 0.1x (0: no decay)", default=0
    )
    batch_size: int = _doc("transitions per gradient update", default=256)
    buffer_size: int = _doc("replay capacity per member, in transitions", default=1_000_000)
    learning_starts: int = _doc("env steps of uniform random actions before the first update", default=1000)
    hidden_sizes: tuple[int, ...] = _doc(
        "hidden layer widths of the actor and of each critic (--set hidden_sizes=256,256 or 256x256)",
        default=(256, 256),
    )
    log_std_min: float = _doc("lower clamp of the actor's log-std", default=-20.0)
    log_std_max: float = _doc("upper clamp of the actor's log-std", default=2.0)
    initial_alpha: float = _doc("temperature used by the first update", default=1.0)
    initial_log_alpha: float | None = _doc(
        "start of the learned log-temperature; None means log(initial_alpha). The blog starts "
        "it at 0 while its first update uses alpha = 0.036",
        default=None,
    )
    target_entropy: float | None = _doc("entropy target of the temperature loss; None means -|A|", default=None)
    log_prob_eps: float = _doc("eps of the naive log-prob forms", default=1e-6)

    # --- experiment design -------------------------------------------------------------------
    salt: int = _doc(
        "salt of the training randomness (initial weights, warm-up actions, replay sampling, policy "
        "noise); 0 keeps the seed's own streams. Environment and evaluation reset seeds ignore it, so "
        "two salts of one seed are independent trainings on common environments: a null comparison "
        "with the pairing structure of a real one",
        default=0,
    )

    def __post_init__(self) -> None:
        for name, choices, is_float in _field_checks():
            value = getattr(self, name)
            if choices and value not in choices:
                raise ValueError(f"{name}={value!r}: expected one of {', '.join(choices)}")
            if is_float and value is not None and not math.isfinite(value):
                raise ValueError(f"{name}={value!r}: must be a finite number")
        positive = ("lr_actor", "lr_critic", "lr_alpha", "batch_size", "buffer_size")
        for name in positive:
            if getattr(self, name) < 0 or (name in ("batch_size", "buffer_size") and getattr(self, name) < 1):
                raise ValueError(f"{name}={getattr(self, name)!r}: must be positive")
        if self.lr_decay_period < 0:
            raise ValueError(f"lr_decay_period={self.lr_decay_period!r}: must be >= 0 (0: no decay)")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.tau <= 1.0:
            raise ValueError("gamma and tau must lie in [0, 1]")
        if not self.hidden_sizes or min(self.hidden_sizes) < 1:
            raise ValueError(f"hidden_sizes={self.hidden_sizes!r}: need at least one positive width")
        if self.log_std_min >= self.log_std_max:
            raise ValueError("log_std_min must be below log_std_max")
        if self.initial_alpha <= 0:
            raise ValueError("initial_alpha must be positive")
        if self.learning_starts < 0:
            raise ValueError("learning_starts must be >= 0")
        if self.precision != "fp32" and len(self.hidden_sizes) < 2:
            # Only hidden-to-hidden products take the precision (networks.layer_dtypes): none here.
            raise ValueError(f"precision={self.precision} needs at least two hidden layers")
        if self.salt < 0:
            raise ValueError("salt must be >= 0")

    # --- helpers -----------------------------------------------------------------------------
    def resolved_target_entropy(self, action_dim: int) -> float:
        return -float(action_dim) if self.target_entropy is None else float(self.target_entropy)

    def resolved_initial_log_alpha(self) -> float:
        if self.initial_log_alpha is None:
            return math.log(self.initial_alpha)
        return float(self.initial_log_alpha)

    def training_seed(self, seed: int) -> int:
        """The seed of a run's training streams: `seed` itself at salt 0, else a hash of (seed, salt)."""
        if self.salt == 0:
            return int(seed)
        return int(np.random.SeedSequence([int(seed), self.salt]).generate_state(1, np.uint64)[0] >> 1)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["hidden_sizes"] = list(self.hidden_sizes)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VariantSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown spec fields: {', '.join(unknown)}")
        data = dict(data)
        if "hidden_sizes" in data:
            data["hidden_sizes"] = tuple(int(h) for h in data["hidden_sizes"])
        return cls(**data)

    def differences(self, other: VariantSpec) -> dict[str, tuple[Any, Any]]:
        """Fields whose values differ: `{name: (self's value, other's value)}`."""
        a, b = self.to_dict(), other.to_dict()
        return {k: (a[k], b[k]) for k in a if a[k] != b[k]}


# Fields that only mean something together: an ablation (variants.ablation) moves each tuple as one
# difference, so that no ablated spec holds half of a setting. A field in no tuple moves on its own.
COUPLED_FIELDS: tuple[tuple[str, ...], ...] = (
    # the first update's alpha and the start of the learned log-alpha (None: log of that alpha)
    ("initial_alpha", "initial_log_alpha"),
    # the multiplier acts only under reward='scale'
    ("reward", "reward_scale"),
    # eps acts only in the naive log-prob forms
    ("log_prob", "log_prob_eps"),
)


@functools.cache
def field_types() -> dict[str, Any]:
    """VariantSpec's resolved field types (computed once: resolving them costs milliseconds)."""
    return typing.get_type_hints(VariantSpec)


@functools.cache
def _field_checks() -> tuple[tuple[str, tuple[str, ...], bool], ...]:
    """(name, its closed set of values or (), whether it holds a float) per field, for `__post_init__`."""
    types_ = field_types()
    return tuple(
        (f.name, literal_choices(f.name), float in _numeric_types(types_[f.name]))
        for f in dataclasses.fields(VariantSpec)
    )


def _numeric_types(hint: Any) -> tuple[Any, ...]:
    """The plain types a field's hint admits (`float | None` -> (float, NoneType))."""
    return typing.get_args(hint) if optional_inner(hint) is not None else (hint,)


def optional_inner(hint: Any) -> Any:
    """X for an optional field's hint (`X | None`, either spelling of the union), else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(hint) if a is not type(None)][0]
    return None


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(VariantSpec)]


def field_doc(name: str) -> str:
    return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(VariantSpec)}[name]


def literal_choices(name: str) -> tuple[str, ...]:
    """The closed set of values of a Literal-typed field, or () for other fields."""
    hint = field_types()[name]
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    return ()


WIDTH_SEPARATORS = re.compile(r"[,x]")  # hidden_sizes=256,256 or 256x256 (a space may follow a comma)


def parse_widths(text: str) -> tuple[int, ...]:
    """`hidden_sizes` text as layer widths: positive whole numbers separated by ',' or 'x'
    ("256,256", "64x64x64"); anything else ("-64", "64x-8", "1.5") raises ValueError."""
    parts = [p.strip() for p in WIDTH_SEPARATORS.split(text.strip())]
    bad = [p for p in parts if not p.isdigit() or int(p) < 1]
    if bad or not parts:
        raise ValueError(f"{text!r}: widths must be positive whole numbers separated by ',' or 'x'")
    return tuple(int(p) for p in parts)


def _parse_value(text: str, hint: Any, name: str) -> Any:
    origin = typing.get_origin(hint)
    inner = optional_inner(hint)
    if inner is not None:
        if text.strip().lower() in ("none", "null", ""):
            return None
        return _parse_value(text, inner, name)
    if origin is Literal:
        return text
    if origin is tuple:
        return parse_widths(text)
    if hint is int:
        value = float(text)
        if not value.is_integer():
            raise ValueError(f"{text!r} is not an integer")
        return int(value)
    if hint is float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"{text!r} is not a finite number")
        return value
    raise ValueError(f"cannot parse a value for {name}")


def parse_override(assignment: str) -> tuple[str, Any]:
    """Parse `KEY=VALUE` into `(field name, value of the field's type)`.

    Raises ValueError with a message naming the valid fields or the expected type.
    """
    if "=" not in assignment:
        raise ValueError(f"--set {assignment!r}: expected KEY=VALUE")
    key, text = (s.strip() for s in assignment.split("=", 1))
    hints = field_types()
    if key not in hints:
        raise ValueError(f"--set {key}: unknown field; valid fields: {', '.join(field_names())}")
    try:
        return key, _parse_value(text, hints[key], key)
    except ValueError as exc:
        choices = literal_choices(key)
        hint = hints[key]
        expected = (
            f"one of {', '.join(choices)}" if choices else getattr(hint, "__name__", str(hint).replace("typing.", ""))
        )
        raise ValueError(f"--set {key}={text}: cannot parse ({exc}); expected {expected}") from None


def with_overrides(spec: VariantSpec, overrides: dict[str, Any]) -> VariantSpec:
    """A copy of `spec` with `overrides` applied; raises ValueError for invalid values."""
    return dataclasses.replace(spec, **overrides)
