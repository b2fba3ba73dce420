import copy
import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import (
    ACT,
    OBS,
    all_params,
    clone_generator,
    filled_buffer,
    make_learner,
    tiny_spec,
    train_batched_and_alone,
)
from torch import nn

from variants.buffer import Batch
from variants.learner import adam_step, critic_loss, policy_action, policy_sample, twin_q

# --- a plain single-network SAC written independently of the learner ------------------------------


def linear_stack(params, member):
    """nn.Sequential of Linear/ReLU holding member `member` of stacked (M, in, out) parameters."""
    layers = []
    for i in range(0, len(params), 2):
        w, b = params[i][member].detach(), params[i + 1][member, 0].detach()
        lin = nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            lin.weight.copy_(w.T)
            lin.bias.copy_(b)
        layers += [lin, nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def plain_sample(actor, obs, noise, spec):
    mu, log_std = actor(obs).chunk(2, dim=-1)
    log_std = log_std.clamp(spec.log_std_min, spec.log_std_max)
    std = log_std.exp()
    u = mu + std * noise
    log_prob = torch.distributions.Normal(mu, std).log_prob(u).sum(-1)
    log_prob = log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
    return torch.tanh(u), log_prob


def plain_sac_update(nets, opts, log_alpha, alpha, batch, noise_next, noise, spec, joint=False):
    actor, q1, q2, q1t, q2t = nets
    s, a, r, s2, d = (x[0] for x in (batch.obs, batch.action, batch.reward, batch.next_obs, batch.terminated))
    with torch.no_grad():
        a2, logp2 = plain_sample(actor, s2, noise_next, spec)
        x2 = torch.cat([s2, a2], -1)
        target = r + spec.gamma * (1 - d) * (torch.min(q1t(x2), q2t(x2)).squeeze(-1) - alpha * logp2)
    x = torch.cat([s, a], -1)
    lc = F.mse_loss(q1(x).squeeze(-1), target) + F.mse_loss(q2(x).squeeze(-1), target)
    opts[1].zero_grad()
    lc.backward()
    if not joint:  # sequential: the policy loss sees the stepped critics
        opts[1].step()
    for p in [*q1.parameters(), *q2.parameters()]:
        p.requires_grad_(False)
    api, logp = plain_sample(actor, s, noise, spec)
    xp = torch.cat([s, api], -1)
    la = (alpha * logp - torch.min(q1(xp), q2(xp)).squeeze(-1)).mean()
    opts[0].zero_grad()
    la.backward()
    if joint:  # every loss was taken at the pre-update parameters
        opts[1].step()
    opts[0].step()
    for p in [*q1.parameters(), *q2.parameters()]:
        p.requires_grad_(True)
    lt = -(log_alpha * (logp.detach() - ACT)).mean()
    opts[2].zero_grad()
    lt.backward()
    opts[2].step()
    with torch.no_grad():
        for tgt, src in ((q1t, q1), (q2t, q2)):
            for pt, ps in zip(tgt.parameters(), src.parameters()):
                pt.mul_(1 - spec.tau).add_(spec.tau * ps)
    return log_alpha.detach().exp()


# policy-first is tested equal to joint below, and critic-first raises, so these two cover every order.
@pytest.mark.parametrize("order", ["sequential", "joint"])
def test_single_member_update_equals_plain_sac(order):
    spec = tiny_spec(update_order=order)
    learner = make_learner(spec)
    buf = filled_buffer(1)
    actor = linear_stack(learner.actor, 0)
    q1, q2 = linear_stack(learner.critic, 0), linear_stack(learner.critic, 1)
    q1t, q2t = copy.deepcopy(q1), copy.deepcopy(q2)
    log_alpha = torch.tensor(math.log(spec.initial_alpha), requires_grad=True)
    opts = (
        torch.optim.Adam(actor.parameters(), spec.lr_actor),
        torch.optim.Adam([*q1.parameters(), *q2.parameters()], spec.lr_critic),
        torch.optim.Adam([log_alpha], spec.lr_alpha),
    )
    alpha = torch.tensor(spec.initial_alpha)
    for _ in range(5):
        batch = buf.sample(spec.batch_size, [clone_generator(learner.generators[0])])
        gen = clone_generator(learner.generators[0])
        torch.randint(0, buf.size, (spec.batch_size,), generator=gen)  # the learner's index draw
        noise_next, noise = (
            torch.randn(spec.batch_size, ACT, generator=gen),
            torch.randn(spec.batch_size, ACT, generator=gen),
        )
        learner.update(buf.sample(spec.batch_size, learner.generators))
        alpha = plain_sac_update(
            (actor, q1, q2, q1t, q2t), opts, log_alpha, alpha, batch, noise_next, noise, spec, joint=order == "joint"
        )
    for plain, stacked, member in [
        (actor, learner.actor, 0),
        (q1, learner.critic, 0),
        (q2, learner.critic, 1),
        (q1t, learner.critic_target, 0),
        (q2t, learner.critic_target, 1),
    ]:
        expected = linear_stack(stacked, member)
        for p, e in zip(plain.parameters(), expected.parameters()):
            torch.testing.assert_close(p, e, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(learner.log_alpha[0], log_alpha.detach(), rtol=1e-6, atol=1e-7)


def test_acting_draws_exactly_the_action_the_losses_sample():
    spec = tiny_spec()
    learner = make_learner(spec, (0, 1))
    gen = torch.Generator().manual_seed(7)
    obs, noise = torch.randn(2, 5, OBS, generator=gen) * 3, torch.randn(2, 5, ACT, generator=gen)
    with torch.no_grad():
        acted = policy_action(learner.actor, obs, noise, spec)
        sampled = policy_sample(learner.actor, obs, noise, spec, learner.action_scale).action
    assert acted.shape == (2, 5, ACT) and torch.equal(acted, sampled)


def test_members_are_independent_bit_for_bit():
    spec = tiny_spec()
    clean, altered = make_learner(spec, (0, 1, 2)), make_learner(spec, (0, 1, 2))
    buf_a, buf_b = filled_buffer(3), filled_buffer(3)
    buf_b.reward[1] += 5.0
    buf_b.obs[1] *= -3.0
    for _ in range(20):
        clean.update(buf_a.sample(spec.batch_size, clean.generators))
        altered.update(buf_b.sample(spec.batch_size, altered.generators))
    pairs = list(zip(all_params(clean), all_params(altered)))
    for member in (0, 2):
        for a, b in pairs:
            k = a.shape[0] // 3
            assert torch.equal(a[member * k : (member + 1) * k], b[member * k : (member + 1) * k])
    assert not torch.equal(clean.actor[0][1], altered.actor[0][1])  # the altered member did change


@pytest.mark.parametrize("order", ["sequential", "joint"])
def test_nine_members_equal_each_seed_trained_alone_bit_for_bit(order):
    # 9 members put every small stacked tensor (output biases, log-alpha) past the vectorised-loop
    # thresholds of Adam and lerp; member m must still get exactly the arithmetic it gets alone.
    spec = tiny_spec(update_order=order)
    seeds = tuple(range(10, 19))
    batched, alone = train_batched_and_alone(spec, seeds, filled_buffer(len(seeds)), 30)
    for m, learner in enumerate(alone):
        for stacked, single in zip(all_params(batched), all_params(learner)):
            k = stacked.shape[0] // len(seeds)
            assert torch.equal(stacked[m * k : (m + 1) * k], single), f"member {m}"


def test_same_seed_same_parameters_and_different_seeds_differ():
    spec = tiny_spec()
    a, b, c = make_learner(spec, (7,)), make_learner(spec, (7,)), make_learner(spec, (8,))
    buf = filled_buffer(1)
    for learner in (a, b, c):
        for _ in range(5):
            learner.update(buf.sample(spec.batch_size, learner.generators))
    assert all(torch.equal(x, y) for x, y in zip(all_params(a), all_params(b)))
    assert not torch.equal(a.actor[0], c.actor[0])


def _actor_grad(learner_before, batch, noise, critic):
    actor = [p.detach().clone().requires_grad_() for p in learner_before.actor]
    pi = policy_sample(actor, batch.obs, noise, learner_before.spec, learner_before.action_scale)
    q = twin_q([p.detach() for p in critic], batch.obs, pi.action).min(dim=1).values
    loss = (learner_before.alpha.unsqueeze(1) * pi.log_prob - q).mean(dim=1).sum()
    return torch.autograd.grad(loss, actor)


@pytest.mark.parametrize("order, critic_used", [("sequential", "updated"), ("joint", "pre-update")])
def test_actor_gradient_goes_through_the_right_critic(order, critic_used):
    spec = tiny_spec(update_order=order, lr_critic=1e-2)
    learner = make_learner(spec)
    before = copy.deepcopy(learner)
    buf = filled_buffer(1)
    batch = buf.sample(spec.batch_size, [clone_generator(learner.generators[0])])
    gen = clone_generator(learner.generators[0])
    torch.randint(0, buf.size, (spec.batch_size,), generator=gen)
    torch.randn(spec.batch_size, ACT, generator=gen)
    noise = torch.randn(spec.batch_size, ACT, generator=gen).unsqueeze(0)
    learner.update(buf.sample(spec.batch_size, learner.generators))
    got = [p.grad for p in learner.actor]
    through_updated = _actor_grad(before, batch, noise, learner.critic)
    through_pre = _actor_grad(before, batch, noise, before.critic)
    expected, other = (through_updated, through_pre) if critic_used == "updated" else (through_pre, through_updated)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-7)
    assert any((g - o).abs().max() > 1e-5 for g, o in zip(got, other))  # the two really differ


@pytest.mark.parametrize("members, hidden", [(1, (16, 16)), (3, (16, 16)), (3, (10, 10)), (2, (7,))])
def test_critic_first_raises_the_inplace_error(members, hidden):
    # Widths whose per-member weight size is no multiple of MEMBER_ALIGN would split the critics into
    # per-member leaves for other orders; critic-first must still raise (not step silently).
    spec = tiny_spec(update_order="critic-first")
    spec = dataclasses.replace(spec, hidden_sizes=hidden)
    learner = make_learner(spec, seeds=range(members))
    buf = filled_buffer(members)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        learner.update(buf.sample(spec.batch_size, learner.generators))


def _params_after(update_order: str, updates: int) -> list[torch.Tensor]:
    learner = make_learner(tiny_spec(update_order=update_order))
    buf = filled_buffer(1)
    for _ in range(updates):
        learner.update(buf.sample(32, learner.generators))
    return all_params(learner)


def test_policy_first_equals_joint_bit_for_bit_after_100_updates():
    # The catalog marks policy-first `same_as` joint-update and grids train only one of them.
    policy_first, joint = _params_after("policy-first", 100), _params_after("joint", 100)
    assert all(torch.equal(x, y) for x, y in zip(policy_first, joint))


def test_sequential_differs_from_joint():
    assert not torch.equal(_params_after("sequential", 20)[0], _params_after("joint", 20)[0])


def test_termination_stops_bootstrap_and_truncation_does_not():
    spec = tiny_spec()
    learner = make_learner(spec)
    obs = torch.randn(1, 2, OBS)
    batch = Batch(obs, torch.zeros(1, 2, ACT), torch.tensor([[1.0, 1.0]]), obs.clone(), torch.tensor([[1.0, 0.0]]))
    noise_next = torch.zeros(1, 2, ACT)
    _, _, target = critic_loss(learner, batch, noise_next)
    with torch.no_grad():
        nxt = policy_sample(learner.actor, obs, noise_next, spec, learner.action_scale)
        soft = twin_q(learner.critic_target, obs, nxt.action).min(dim=1).values - learner.alpha * nxt.log_prob
    assert target[0, 0].item() == pytest.approx(1.0)  # terminated: reward only
    assert target[0, 1].item() == pytest.approx(1.0 + spec.gamma * soft[0, 1].item(), rel=1e-6)


@pytest.mark.parametrize("alpha_loss", ["log_alpha", "alpha"])
def test_alpha_loss_gradient_sign(alpha_loss):
    # A narrow policy has entropy -log_pi far below the target -|A|: both forms must raise alpha.
    spec = tiny_spec(alpha_loss=alpha_loss, lr_alpha=0.1)
    learner = make_learner(spec)
    buf = filled_buffer(1)
    start = learner.log_alpha.item()
    with torch.no_grad():
        learner.actor[-1][..., ACT:] = -5.0  # log_std bias: a narrow policy, log_pi >> |A|
    learner.update(buf.sample(32, learner.generators))
    assert learner.log_alpha.item() > start


def test_lr_decay_reaches_a_tenth():
    spec = tiny_spec(lr_decay_period=10)
    learner = make_learner(spec)
    buf = filled_buffer(1)
    for _ in range(12):
        learner.update(buf.sample(32, learner.generators))
    assert learner.actor_opt.param_groups[0]["lr"] == pytest.approx(0.1 * spec.lr_actor)


def test_diagnostics_are_means_over_updates():
    spec = tiny_spec()
    learner = make_learner(spec, (0, 1))
    buf = filled_buffer(2)
    for _ in range(4):
        learner.update(buf.sample(32, learner.generators))
    n, values = learner.read_diagnostics()
    assert n == 4 and values.shape == (2, 13)
    assert np.isfinite(values).all()
    assert (values[:, 2] > 0).all() and (values[:, 12] == 0).all()  # alpha positive, nothing non-finite
    n2, _ = learner.read_diagnostics()
    assert n2 == 0


@pytest.mark.parametrize("lr_schedule", [(3e-4,) * 6, (3e-4, 3e-4, 2e-4, 1e-4, 5e-5, 3e-5)])
def test_adam_step_equals_torch_adam_step_bit_for_bit(lr_schedule):
    # The learner steps its fused Adams with adam_step; it must write exactly what opt.step() writes,
    # moments and step counts included, whatever the learning rate does between steps.
    gen = torch.Generator().manual_seed(0)
    shapes = [(2, 5, 64), (2, 1, 64), (2, 1, 1), (3,)]
    start = [torch.randn(s, generator=gen) for s in shapes]
    pairs = []
    for _ in range(2):
        params = [t.clone().requires_grad_() for t in start]
        pairs.append((params, torch.optim.Adam(params, lr=lr_schedule[0], fused=True)))
    (p_ref, opt_ref), (p_new, opt_new) = pairs
    for lr in lr_schedule:
        grads = [torch.randn(s, generator=gen) for s in shapes]
        for params, opt in pairs:
            opt.param_groups[0]["lr"] = lr
            for p, g in zip(params, grads):
                p.grad = g.clone()
        opt_ref.step()
        adam_step(opt_new)
        for a, b in zip(p_ref, p_new):
            assert torch.equal(a, b)
    for a, b in zip(p_ref, p_new):
        sa, sb = opt_ref.state[a], opt_new.state[b]
        assert sorted(sa) == sorted(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)
        assert sb["step"].item() == len(lr_schedule)


def test_adam_step_leaves_parameters_without_gradient_to_torch():
    # A parameter without a gradient is skipped by opt.step(); adam_step must do the same, not fail.
    params = [torch.ones(4, requires_grad=True), torch.ones(4, requires_grad=True)]
    opt = torch.optim.Adam(params, lr=0.1, fused=True)
    params[0].grad, params[1].grad = torch.ones(4), torch.ones(4)
    adam_step(opt)
    params[0].grad, params[1].grad = torch.ones(4), None
    adam_step(opt)
    assert opt.state[params[0]]["step"].item() == 2 and opt.state[params[1]]["step"].item() == 1
    assert torch.allclose(params[1], torch.full((4,), 0.9))
