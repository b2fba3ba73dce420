"""One SAC learner for every variant, training S independent members (seeds) at once.

Read top to bottom: the policy and critic forward passes, the three losses (Haarnoja et al. 2018,
arXiv:1812.05905, eqs. 5, 7/17 and 18), the update orders that differ between implementations, and
the `SACLearner` that holds the state. Every member's parameters are stacked along axis 0 (see
`networks`); each loss is a vector of per-member losses whose sum is differentiated, so no gradient,
optimizer statistic (Adam is elementwise) or random stream crosses members.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .buffer import Batch
from .logprob import gaussian_log_prob, tanh_log_abs_det_jacobian
from .networks import MemberParams, Params, init_mlp, member_nonfinite, member_norm, mlp_forward
from .spec import VariantSpec

DIAGNOSTICS = (
    "critic_loss",
    "actor_loss",
    "alpha",
    "alpha_loss",
    "entropy",
    "q_mean",
    "q_target_mean",
    "td_abs_mean",
    "grad_norm_actor",
    "grad_norm_critic",
    "saturation_fraction",
    "log_prob_gap",
    "nonfinite_count",
)
_D = {name: i for i, name in enumerate(DIAGNOSTICS)}


# --- forward passes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicySample:
    """A reparameterised policy sample. Shapes: action/u (S, B, A), log_prob (S, B)."""

    action: torch.Tensor
    log_prob: torch.Tensor
    u: torch.Tensor


def _pre_tanh_sample(
    actor: Sequence[torch.Tensor], obs: torch.Tensor, noise: torch.Tensor, spec: VariantSpec
) -> tuple[torch.Tensor, torch.Tensor]:
    """u = mu + sigma * noise (eq. 11) and the clamped log sigma."""
    mu, log_std = mlp_forward(actor, obs, spec.precision).chunk(2, dim=-1)
    log_std = log_std.clamp(spec.log_std_min, spec.log_std_max)
    return mu + log_std.exp() * noise, log_std


def policy_sample(
    actor: Sequence[torch.Tensor], obs: torch.Tensor, noise: torch.Tensor, spec: VariantSpec, action_scale: torch.Tensor
) -> PolicySample:
    """a = tanh(mu + sigma * noise) and its log-density (eq. 26). obs (S, B, O), noise (S, B, A)."""
    u, log_std = _pre_tanh_sample(actor, obs, noise, spec)
    log_prob = gaussian_log_prob(noise, log_std) - tanh_log_abs_det_jacobian(
        u, spec.log_prob, eps=spec.log_prob_eps, scale=action_scale
    )
    return PolicySample(torch.tanh(u), log_prob, u)


def policy_action(
    actor: Sequence[torch.Tensor], obs: torch.Tensor, noise: torch.Tensor, spec: VariantSpec
) -> torch.Tensor:
    """`policy_sample`'s action alone, for acting: no log-density. (S, B, A)."""
    return torch.tanh(_pre_tanh_sample(actor, obs, noise, spec)[0])


def policy_mean_action(actor: Sequence[torch.Tensor], obs: torch.Tensor, precision: str = "fp32") -> torch.Tensor:
    """The deterministic action tanh(mu). obs (S, B, O) -> (S, B, A)."""
    mu, _ = mlp_forward(actor, obs, precision).chunk(2, dim=-1)
    return torch.tanh(mu)


def twin_q(
    critic: Sequence[torch.Tensor], obs: torch.Tensor, action: torch.Tensor, precision: str = "fp32"
) -> torch.Tensor:
    """Both critics' values. The twins are stacked as members 2m and 2m+1. (S, B, .) -> (S, 2, B).
    `precision`: the hidden products' (`networks.PRECISIONS`)."""
    x = torch.cat([obs, action], dim=-1)
    s, b, d = x.shape
    x = x.unsqueeze(1).expand(s, 2, b, d).reshape(2 * s, b, d)
    return mlp_forward(critic, x, precision).reshape(s, 2, b)


# --- losses -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Losses:
    """Per-member losses (S,) and what the diagnostics need."""

    critic: torch.Tensor
    actor: torch.Tensor
    alpha: torch.Tensor
    q_pred: torch.Tensor  # (S, 2, B)
    q_target: torch.Tensor  # (S, B)
    pi: PolicySample


def critic_loss(
    learner: SACLearner, batch: Batch, noise_next: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Soft Bellman residual (eqs. 5-6) of both critics, summed; returns (loss (S,), q_pred, target)."""
    spec = learner.spec
    with torch.no_grad():
        nxt = policy_sample(learner.actor, batch.next_obs, noise_next, spec, learner.action_scale)
        q_next = twin_q(learner.critic_target, batch.next_obs, nxt.action, spec.precision).min(dim=1).values
        soft_value = q_next - learner.alpha.unsqueeze(1) * nxt.log_prob
        # Bootstrap unless the episode terminated; a time-limit truncation is not a termination.
        target = batch.reward + spec.gamma * (1.0 - batch.terminated) * soft_value
    q_pred = twin_q(learner.critic, batch.obs, batch.action, spec.precision)
    loss = (q_pred - target.unsqueeze(1)).pow(2).mean(dim=2).sum(dim=1)
    return loss, q_pred, target


def actor_loss(
    learner: SACLearner, batch: Batch, noise: torch.Tensor, critic: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, PolicySample]:
    """Policy loss (eq. 7 with the reparameterisation of eq. 11): E[alpha log pi - min Q]."""
    pi = policy_sample(learner.actor, batch.obs, noise, learner.spec, learner.action_scale)
    q_pi = twin_q(critic, batch.obs, pi.action, learner.spec.precision).min(dim=1).values
    return (learner.alpha.unsqueeze(1) * pi.log_prob - q_pi).mean(dim=1), pi


ALPHA_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    # eq. 18 differentiated through log(alpha) (faster, the usual form) or through alpha itself.
    "log_alpha": lambda log_alpha, excess: -(log_alpha.unsqueeze(1) * excess).mean(dim=1),
    "alpha": lambda log_alpha, excess: -(log_alpha.exp().unsqueeze(1) * excess).mean(dim=1),
}


def alpha_loss(learner: SACLearner, log_prob: torch.Tensor) -> torch.Tensor:
    excess = log_prob.detach() + learner.target_entropy
    return ALPHA_LOSSES[learner.spec.alpha_loss](learner.log_alpha, excess)


def _frozen(params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [p.detach() for p in params]


# --- update orders ------------------------------------------------------------------------------


def adam_step(opt: torch.optim.Adam) -> None:
    """`opt.step()` for a fused Adam with one parameter group, every parameter holding a gradient and
    its state: the same two kernels with the same arguments as `torch.optim.Adam`'s fused path (so
    the same bits), without the per-call Python the general step runs (hooks, profiler ranges, state
    checks), a few percent of an update (docs/measurements.md, learner.py). Anything else takes
    `opt.step()`."""
    (group,) = opt.param_groups
    params = group["params"]
    if not group["fused"] or group["amsgrad"] or len(opt.state) != len(params) or any(p.grad is None for p in params):
        opt.step()
        return
    states = [opt.state[p] for p in params]
    steps = [s["step"] for s in states]
    beta1, beta2 = group["betas"]
    torch._foreach_add_(steps, 1)
    torch._fused_adam_(
        params,
        [p.grad for p in params],
        [s["exp_avg"] for s in states],
        [s["exp_avg_sq"] for s in states],
        [],
        steps,
        amsgrad=False,
        lr=group["lr"],
        beta1=beta1,
        beta2=beta2,
        weight_decay=group["weight_decay"],
        eps=group["eps"],
        maximize=group["maximize"],
        grad_scale=None,
        found_inf=None,
    )


def _step(optimizers: Sequence[torch.optim.Adam], *losses: torch.Tensor) -> None:
    """Zero the optimizers' gradients, backward the sum of the per-member losses, step each optimizer."""
    for opt in optimizers:
        for p in opt.param_groups[0]["params"]:
            p.grad = None  # opt.zero_grad(set_to_none=True), without its per-call Python
    total = losses[0].sum()
    for loss in losses[1:]:
        total = total + loss.sum()
    total.backward()
    for opt in optimizers:
        adam_step(opt)


def update_sequential(learner: SACLearner, batch: Batch, noise_next: torch.Tensor, noise: torch.Tensor) -> Losses:
    """Critic step; then the actor loss on the updated critic, critic frozen; then alpha."""
    lc, q_pred, target = critic_loss(learner, batch, noise_next)
    _step([learner.critic_opt], lc)
    la, pi = actor_loss(learner, batch, noise, _frozen(learner.critic))
    lt = alpha_loss(learner, pi.log_prob)
    # The alpha loss takes log pi detached and the actor step does not touch log alpha, so one
    # backward of the sum gives each the gradient it gets when the actor steps first (one graph
    # traversal instead of two).
    _step([learner.actor_opt, learner.alpha_opt], la, lt)
    return Losses(lc, la, lt, q_pred, target, pi)


def update_joint(learner: SACLearner, batch: Batch, noise_next: torch.Tensor, noise: torch.Tensor) -> Losses:
    """All three losses and gradients from the pre-update parameters, then all steps."""
    lc, q_pred, target = critic_loss(learner, batch, noise_next)
    la, pi = actor_loss(learner, batch, noise, _frozen(learner.critic))
    lt = alpha_loss(learner, pi.log_prob)
    # The three losses share no differentiable path (critic frozen in the actor loss, log_pi detached
    # in the alpha loss), so one backward gives each parameter exactly its own loss's gradient.
    _step(learner.optimizers, lc, la, lt)
    return Losses(lc, la, lt, q_pred, target, pi)


def _losses_first(learner: SACLearner, batch: Batch, noise_next: torch.Tensor, noise: torch.Tensor):
    # As the blog's code: the actor loss goes through the live (not frozen) critic.
    lc, q_pred, target = critic_loss(learner, batch, noise_next)
    la, pi = actor_loss(learner, batch, noise, learner.critic)
    lt = alpha_loss(learner, pi.log_prob)
    return lc, la, lt, q_pred, target, pi


def update_policy_first(learner: SACLearner, batch: Batch, noise_next: torch.Tensor, noise: torch.Tensor) -> Losses:
    """Losses first; then backward and step policy, critics, alpha in turn (the blog's prescription)."""
    lc, la, lt, q_pred, target, pi = _losses_first(learner, batch, noise_next, noise)
    _step([learner.actor_opt], la)
    _step([learner.critic_opt], lc)  # zero_grad drops what the policy loss left on the critics
    _step([learner.alpha_opt], lt)
    return Losses(lc, la, lt, q_pred, target, pi)


def update_critic_first(learner: SACLearner, batch: Batch, noise_next: torch.Tensor, noise: torch.Tensor) -> Losses:
    """Losses first; then critics, policy, alpha. The critic step modifies in place weights that the
    policy loss's graph saved, so PyTorch >= 1.5 raises at the policy's backward."""
    lc, la, lt, q_pred, target, pi = _losses_first(learner, batch, noise_next, noise)
    _step([learner.critic_opt], lc)
    _step([learner.actor_opt], la)
    _step([learner.alpha_opt], lt)
    return Losses(lc, la, lt, q_pred, target, pi)


UPDATE_ORDERS: dict[str, Callable[[SACLearner, Batch, torch.Tensor, torch.Tensor], Losses]] = {
    "sequential": update_sequential,
    "joint": update_joint,
    "policy-first": update_policy_first,
    "critic-first": update_critic_first,
}


# --- the learner --------------------------------------------------------------------------------


# Orders that step an optimizer while another loss's graph still holds the stepped weights. The fused
# Adam kernel writes parameters without bumping their autograd version counters, so PyTorch's in-place
# check cannot see those writes: the backward would silently use post-step weights. These orders get
# the for-loop Adam (PyTorch's CPU default, which bumps them) and raise as plain PyTorch code does.
STEPS_UNDER_LIVE_GRAPH = frozenset({"critic-first"})


def _adam(params: list[torch.Tensor], lr: float, fused: bool) -> torch.optim.Adam:
    # Fused Adam is one kernel for all tensors; Adam is elementwise, so members stay independent.
    return torch.optim.Adam(params, lr=lr, fused=fused, foreach=None if fused else False)


class SACLearner:
    """SAC state for S members of one variant on one environment.

    Args:
        spec: the variant.
        obs_dim, act_dim: environment dimensions.
        action_scale: (A,) half-width of the environment's action bounds (used by "naive-scaled").
        seeds: one seed per member; member m's initial weights and all its random draws come from
            its own generators seeded from seeds[m] (salted by `spec.salt`, see `VariantSpec.training_seed`).
        device: torch device.
    """

    def __init__(
        self,
        spec: VariantSpec,
        obs_dim: int,
        act_dim: int,
        action_scale: np.ndarray,
        seeds: Sequence[int],
        device: torch.device | str = "cpu",
    ):
        self.spec, self.device = spec, torch.device(device)
        self.members, self.obs_dim, self.act_dim = len(seeds), obs_dim, act_dim
        self.action_scale = torch.as_tensor(np.asarray(action_scale, dtype=np.float32), device=self.device)
        seeds = [spec.training_seed(s) for s in seeds]
        init_gens = [torch.Generator().manual_seed(s) for s in seeds]
        hidden = list(spec.hidden_sizes)
        self.actor_params = init_mlp([obs_dim, *hidden, 2 * act_dim], init_gens, spec.init, 1, self.device)
        # An order that steps the critics under the policy loss's live graph keeps them unsplit, so the
        # in-place error is raised at any width and member count.
        split = spec.update_order not in STEPS_UNDER_LIVE_GRAPH
        self.critic_params = init_mlp([obs_dim + act_dim, *hidden, 1], init_gens, spec.init, 2, self.device, split)
        self.critic_target_params = self.critic_params.detached_copy()
        self.log_alpha_params = MemberParams(
            [torch.full((self.members,), spec.resolved_initial_log_alpha(), device=self.device)], self.members
        )
        self.alpha = torch.full((self.members,), spec.initial_alpha, device=self.device)
        self.target_entropy = spec.resolved_target_entropy(act_dim)
        fused = spec.update_order not in STEPS_UNDER_LIVE_GRAPH
        self.actor_opt = _adam(self.actor_params.leaves(), spec.lr_actor, fused)
        self.critic_opt = _adam(self.critic_params.leaves(), spec.lr_critic, fused)
        self.alpha_opt = _adam(self.log_alpha_params.leaves(), spec.lr_alpha, fused)
        self.optimizers = (self.actor_opt, self.critic_opt, self.alpha_opt)
        self._base_lrs = (spec.lr_actor, spec.lr_critic, spec.lr_alpha)
        # Runtime random draws (batch indices, policy noise, warm-up actions), one stream per member.
        self.generators = [torch.Generator(device=self.device).manual_seed(int(s) + 1) for s in seeds]
        self.updates = 0
        self._diag_sum = torch.zeros(self.members, len(DIAGNOSTICS), device=self.device)
        self._diag_updates = 0
        self._update_fn = UPDATE_ORDERS[spec.update_order]

    # The stacked tensors the losses use; see MemberParams for why some are held per member.
    @property
    def actor(self) -> Params:
        return self.actor_params.tensors()

    @property
    def critic(self) -> Params:
        return self.critic_params.tensors()

    @property
    def critic_target(self) -> Params:
        return self.critic_target_params.tensors()

    @property
    def log_alpha(self) -> torch.Tensor:
        """(S,)"""
        return self.log_alpha_params.tensors()[0]

    # --- acting ---------------------------------------------------------------------------------
    def _noise(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.stack([torch.randn(shape, generator=g, device=self.device) for g in self.generators])

    def random_actions(self) -> np.ndarray:
        """Uniform actions in [-1, 1], (S, A), drawn from each member's stream."""
        u = torch.stack([torch.rand(self.act_dim, generator=g, device=self.device) for g in self.generators])
        return (u * 2.0 - 1.0).cpu().numpy()

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        """Policy actions in [-1, 1]. obs (S, N, O) -> (S, N, A)."""
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device)
        if deterministic:
            return policy_mean_action(self.actor, x, self.spec.precision).cpu().numpy()
        noise = self._noise((x.shape[1], self.act_dim))
        return policy_action(self.actor, x, noise, self.spec).cpu().numpy()

    # --- learning -------------------------------------------------------------------------------
    def update(self, batch: Batch) -> None:
        """One gradient update of every member on its own slice of `batch` (shapes (S, B, ...))."""
        b = batch.obs.shape[1]
        noise_next = self._noise((b, self.act_dim))
        noise = self._noise((b, self.act_dim))
        alpha_used = self.alpha
        losses = self._update_fn(self, batch, noise_next, noise)
        with torch.no_grad():
            self.alpha = self.log_alpha.detach().exp()
            torch._foreach_lerp_(
                self.critic_target_params.leaves(), [p.detach() for p in self.critic_params.leaves()], self.spec.tau
            )
            self._accumulate(losses, alpha_used)
        self.updates += 1
        if self.spec.lr_decay_period > 0:
            # As sac_agent.py: linear decay to 0.1x over lr_decay_period updates.
            frac = max(0.0, 1.0 - self.updates / self.spec.lr_decay_period)
            for opt, base in zip(self.optimizers, self._base_lrs):
                for group in opt.param_groups:
                    group["lr"] = 0.9 * base * frac + 0.1 * base

    def _accumulate(self, losses: Losses, alpha_used: torch.Tensor) -> None:
        s = self.members
        u = losses.pi.u.detach()
        naive = tanh_log_abs_det_jacobian(u, "naive", eps=self.spec.log_prob_eps)
        softplus = tanh_log_abs_det_jacobian(u, "softplus")
        loss_stack = torch.stack([losses.critic.detach(), losses.actor.detach(), losses.alpha.detach()], dim=1)
        td = (losses.q_pred.detach() - losses.q_target.unsqueeze(1)).abs()
        row = torch.stack(
            [
                losses.critic.detach(),
                losses.actor.detach(),
                alpha_used,
                losses.alpha.detach(),
                -losses.pi.log_prob.detach().mean(dim=1),
                losses.q_pred.detach().mean(dim=(1, 2)),
                losses.q_target.mean(dim=1),
                td.mean(dim=(1, 2)),
                member_norm(self.actor_params.grads(), s),
                member_norm(self.critic_params.grads(), s),
                (torch.tanh(u).abs() > 0.999).float().mean(dim=(1, 2)),
                (naive - softplus).mean(dim=1),
                (~torch.isfinite(loss_stack)).sum(dim=1).float(),
            ],
            dim=1,
        )
        self._diag_sum += row
        self._diag_updates += 1

    def read_diagnostics(self) -> tuple[int, np.ndarray]:
        """Means over the updates since the last read, (S, len(DIAGNOSTICS)), and their count.

        nonfinite_count is a count, not a mean: non-finite losses summed over the updates plus the
        non-finite parameters now. One device-to-host copy per call.
        """
        n = self._diag_updates
        values = self._diag_sum / max(n, 1)
        params = [*self.actor, *self.critic, self.log_alpha.unsqueeze(1)]
        values[:, _D["nonfinite_count"]] = self._diag_sum[:, _D["nonfinite_count"]] + member_nonfinite(
            params, self.members
        )
        out = values.cpu().numpy()
        self._diag_sum.zero_()
        self._diag_updates = 0
        return n, out

    # --- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "actor": [p.detach().clone() for p in self.actor],
            "critic": [p.detach().clone() for p in self.critic],
            "critic_target": [p.clone() for p in self.critic_target],
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha": self.alpha.clone(),
            "optimizers": [opt.state_dict() for opt in self.optimizers],
            "generators": [g.get_state() for g in self.generators],
            "updates": self.updates,
            "diag_sum": self._diag_sum.clone(),
            "diag_updates": self._diag_updates,
        }

    def load_state_dict(self, state: dict) -> None:
        self.actor_params.copy_(state["actor"])
        self.critic_params.copy_(state["critic"])
        self.critic_target_params.copy_(state["critic_target"])
        self.log_alpha_params.copy_([state["log_alpha"]])
        self.alpha = state["alpha"].to(self.device).clone()
        for opt, s in zip(self.optimizers, state["optimizers"]):
            opt.load_state_dict(s)
        for g, s in zip(self.generators, state["generators"]):
            g.set_state(s)
        self.updates = int(state["updates"])
        self._diag_sum = state["diag_sum"].to(self.device).clone()
        self._diag_updates = int(state["diag_updates"])
