"""The training updates themselves, not just finite metrics: PPO's minibatch step, GRPO's step, the KL penalty.

Each test recomputes the loss from its formula, written out here without the library's loss
functions, differentiates it with autograd at the parameters *before* the step, and compares with
what the step did: with plain SGD (no momentum) an applied step is exactly Δθ = −lr·∇L. That
catches a skipped ``zero_grad`` (stale gradients are planted first), a skipped ``step``, a flipped
sign of the advantage, of the KL penalty or of the entropy bonus, and a detached penalty; the
behavioural tests (a positive-advantage action gains probability, the entropy bonus raises the
entropy, the k3 penalty pulls π_θ towards π_ref) check the same from the outside.
"""

import copy

import pytest
import torch

import lm_helpers
import rlbook as rl
from rlbook.algos.grpo import GRPOConfig, grpo_step
from rlbook.algos.ppo import PPOConfig, ppo_minibatch_step, ppo_update
from rlbook.lm.logprobs import completion_log_probs
from rlbook.lm.model import build_policy, policy_config
from rlbook.lm.task import AdditionTask
from rlbook.lm.tokenizer import build_char_tokenizer, forbidden_token_ids
from rlbook.nets import ActorCritic

DT = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def _flat(params):
    return torch.cat([p.detach().reshape(-1) for p in params])


def _plant_stale_gradients(model, seed=123):
    """Fill every .grad with junk, as left over by an earlier step: a step that skips zero_grad adds it."""
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = 10.0 * torch.randn(p.shape, generator=g, dtype=p.dtype)


# ============================== PPO ==============================


def _actor_critic(seed=0, sharpen=1.0):
    torch.manual_seed(seed)
    model = ActorCritic(4, 3, (16, 16)).double()
    with torch.no_grad():  # a non-uniform policy (the default init is almost uniform)
        model.actor[-1].weight.mul_(sharpen * 100.0)
    return model


def _minibatch(model, m=24, seed=0, log_ratio_scale=0.3):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(m, 4, generator=g, dtype=DT)
    actions = torch.randint(0, 3, (m,), generator=g)
    with torch.no_grad():
        lp = torch.log_softmax(model.logits(obs), -1).gather(-1, actions[:, None]).squeeze(-1)
    return {
        "obs": obs,
        "actions": actions,
        # π_old differs from π_θ, so some ratios lie outside the band and the clip matters
        "old_log_probs": lp + log_ratio_scale * torch.randn(m, generator=g, dtype=DT),
        "old_values": torch.randn(m, generator=g, dtype=DT),
        "advantages": torch.randn(m, generator=g, dtype=DT),
        "returns": torch.randn(m, generator=g, dtype=DT),
    }


def _ppo_loss_by_hand(model, mb, cfg):
    """L = −mean min(ρÂ, clip(ρ)Â) + vf_coef·mean ½(V − R)² − ent_coef·mean H, written out."""
    logits = model.logits(mb["obs"])
    log_p = torch.log_softmax(logits, -1)
    lp = log_p.gather(-1, mb["actions"][:, None]).squeeze(-1)
    adv = mb["advantages"]
    if cfg.norm_advantages:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = torch.exp(lp - mb["old_log_probs"])
    high = cfg.clip_eps_low if cfg.clip_eps_high is None else cfg.clip_eps_high
    policy = -torch.minimum(ratio * adv, ratio.clamp(1 - cfg.clip_eps_low, 1 + high) * adv).mean()
    value = (0.5 * (model.value(mb["obs"]) - mb["returns"]) ** 2).mean()
    entropy = -(log_p.exp() * log_p).sum(-1).mean()
    return policy + cfg.vf_coef * value - cfg.ent_coef * entropy, policy, value, entropy


def _ppo_cfg(**kw):
    base = dict(vf_coef=0.7, ent_coef=0.05, max_grad_norm=None, norm_advantages=True, target_kl=None)
    base.update(kw)
    return PPOConfig(**base)


@pytest.mark.parametrize("norm_advantages", [True, False])
def test_ppo_minibatch_loss_decomposes_with_the_stated_signs_and_step_is_minus_lr_grad(norm_advantages):
    cfg = _ppo_cfg(norm_advantages=norm_advantages)
    model = _actor_critic()
    mb = _minibatch(model)
    before = copy.deepcopy(model)
    loss, policy, value, entropy = _ppo_loss_by_hand(before, mb, cfg)
    grads = torch.autograd.grad(loss, list(before.parameters()))
    ratio = torch.exp(before.logits(mb["obs"]).log_softmax(-1).gather(-1, mb["actions"][:, None]).squeeze(-1)
                      - mb["old_log_probs"])
    assert ((ratio < 0.8) | (ratio > 1.2)).any()  # the clip is exercised

    lr = 0.05
    _plant_stale_gradients(model)
    out = ppo_minibatch_step(model, torch.optim.SGD(model.parameters(), lr=lr), mb, cfg)
    for name, want in (("policy_loss", policy), ("value_loss", value), ("entropy", entropy), ("loss", loss)):
        torch.testing.assert_close(out[name], want.detach(), rtol=1e-12, atol=1e-12, msg=name)
    # loss = policy_loss + vf_coef·value_loss − ent_coef·entropy (the signs, from the logged parts)
    torch.testing.assert_close(out["loss"], out["policy_loss"] + 0.7 * out["value_loss"] - 0.05 * out["entropy"],
                               rtol=1e-12, atol=1e-12)
    assert out["entropy"] > 0 and out["value_loss"] > 0
    # the step: Δθ = −lr·∇L exactly (SGD, no clipping), so every sign and the zero_grad show
    step = _flat(model.parameters()) - _flat(before.parameters())
    want = -lr * torch.cat([g.reshape(-1) for g in grads])
    assert step.abs().max() > 1e-4  # parameters move
    torch.testing.assert_close(step, want, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(out["grad_norm"], torch.cat([g.reshape(-1) for g in grads]).norm(), rtol=1e-10, atol=0)


def test_ppo_minibatch_step_clips_the_gradient_norm():
    cfg = _ppo_cfg(max_grad_norm=0.01)
    model = _actor_critic()
    mb = _minibatch(model)
    before = copy.deepcopy(model)
    grads = torch.autograd.grad(_ppo_loss_by_hand(before, mb, cfg)[0], list(before.parameters()))
    g = torch.cat([x.reshape(-1) for x in grads])
    assert g.norm() > 0.01
    out = ppo_minibatch_step(model, torch.optim.SGD(model.parameters(), lr=0.1), mb, cfg)
    torch.testing.assert_close(out["grad_norm"], g.norm(), rtol=1e-10, atol=0)  # logged before clipping
    step = _flat(model.parameters()) - _flat(before.parameters())
    torch.testing.assert_close(step, -0.1 * g * (0.01 / (g.norm() + 1e-6)), rtol=1e-8, atol=1e-14)


def test_ppo_minibatch_step_returns_detached_metrics_evaluated_before_the_step():
    # documented: "dict of detached 0-d tensors ... (all evaluated before the step)"
    cfg = _ppo_cfg()
    model = _actor_critic()
    mb = _minibatch(model)
    loss, policy_loss, value_loss = (float(x.detach()) for x in _ppo_loss_by_hand(copy.deepcopy(model), mb, cfg)[:3])
    out = ppo_minibatch_step(model, torch.optim.SGD(model.parameters(), lr=0.1), mb, cfg)
    assert all(v.dim() == 0 and not v.requires_grad for v in out.values())
    assert (float(out["loss"]), float(out["policy_loss"]), float(out["value_loss"])) == \
        (pytest.approx(loss, rel=1e-9), pytest.approx(policy_loss, rel=1e-9), pytest.approx(value_loss, rel=1e-9))


def test_ppo_update_zeroes_gradients_between_minibatches():
    # one epoch of 3 minibatches with SGD, replayed by hand with fresh gradients for each minibatch
    cfg = _ppo_cfg(num_epochs=2, minibatch_size=10)
    model = _actor_critic(seed=1)
    batch = _minibatch(model, m=30, seed=3)
    replay = copy.deepcopy(model)
    lr = 0.05
    _plant_stale_gradients(model)
    out = ppo_update(model, torch.optim.SGD(model.parameters(), lr=lr), batch, cfg, torch.Generator().manual_seed(7))
    assert out["epochs"] == 2
    gen = torch.Generator().manual_seed(7)
    for _ in range(2):
        perm = torch.randperm(30, generator=gen)
        for lo in range(0, 30, 10):
            mb = {k: v[perm[lo: lo + 10]] for k, v in batch.items()}
            grads = torch.autograd.grad(_ppo_loss_by_hand(replay, mb, cfg)[0], list(replay.parameters()))
            with torch.no_grad():
                for p, g in zip(replay.parameters(), grads):
                    p -= lr * g
    torch.testing.assert_close(_flat(model.parameters()), _flat(replay.parameters()), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(out["grad_norm"], torch.cat([g.reshape(-1) for g in grads]).norm(), rtol=1e-9, atol=0)


def test_ppo_update_positive_advantage_actions_gain_probability():
    # vf_coef = ent_coef = 0 and raw advantages: only the policy term moves the actor
    cfg = _ppo_cfg(vf_coef=0.0, ent_coef=0.0, norm_advantages=False, num_epochs=1, minibatch_size=40)
    model = _actor_critic(seed=2)
    batch = _minibatch(model, m=40, seed=4, log_ratio_scale=0.0)  # ρ = 1: inside the band
    batch["advantages"] = torch.where(torch.arange(40) % 2 == 0, 1.0, -1.0).to(DT)

    def log_probs(m):
        with torch.no_grad():
            return m.logits(batch["obs"]).log_softmax(-1).gather(-1, batch["actions"][:, None]).squeeze(-1)

    before = log_probs(model)
    ppo_update(model, torch.optim.SGD(model.parameters(), lr=0.05), batch, cfg, torch.Generator().manual_seed(0))
    change = log_probs(model) - before
    pos, neg = batch["advantages"] > 0, batch["advantages"] < 0
    assert (change * batch["advantages"]).sum() > 0  # the surrogate Σ Â·log π rises
    assert change[pos].mean() > 0 > change[neg].mean()
    # one state, one action with Â > 0: its probability rises, the others' fall
    single = {k: v[:1].repeat(*([8] + [1] * (v.dim() - 1))) for k, v in batch.items()}
    single["advantages"] = torch.ones(8, dtype=DT)
    a = int(single["actions"][0])
    with torch.no_grad():
        p0 = model.logits(single["obs"][:1]).softmax(-1)[0]
    ppo_minibatch_step(model, torch.optim.SGD(model.parameters(), lr=0.05), single, cfg)
    with torch.no_grad():
        p1 = model.logits(single["obs"][:1]).softmax(-1)[0]
    assert p1[a] > p0[a]
    assert all(p1[b] < p0[b] for b in range(3) if b != a)


def test_ppo_entropy_bonus_alone_raises_the_entropy():
    cfg = _ppo_cfg(vf_coef=0.0, ent_coef=0.1, norm_advantages=False)
    model = _actor_critic(seed=3, sharpen=3.0)
    mb = _minibatch(model, seed=5)
    mb["advantages"] = torch.zeros_like(mb["advantages"])  # no policy-gradient signal at all

    def entropy():
        with torch.no_grad():
            return rl.entropy_from_logits(model.logits(mb["obs"])).mean()

    h0 = entropy()
    assert h0 < 0.9 * torch.log(torch.tensor(3.0, dtype=DT))  # room to rise
    critic_before = _flat(model.critic.parameters())
    out = ppo_minibatch_step(model, torch.optim.SGD(model.parameters(), lr=0.1), mb, cfg)
    assert entropy() > h0
    torch.testing.assert_close(out["loss"], -0.1 * out["entropy"], rtol=1e-12, atol=1e-12)
    assert torch.equal(_flat(model.critic.parameters()), critic_before)  # vf_coef = 0: the critic is untouched


def test_ppo_value_loss_step_moves_values_towards_returns():
    cfg = _ppo_cfg(vf_coef=1.0, ent_coef=0.0)
    model = _actor_critic(seed=4)
    mb = _minibatch(model, seed=6)
    mb["advantages"] = torch.zeros_like(mb["advantages"])
    err0 = ((model.value(mb["obs"]) - mb["returns"]) ** 2).mean().detach()
    ppo_minibatch_step(model, torch.optim.SGD(model.parameters(), lr=0.05), mb, cfg)
    assert ((model.value(mb["obs"]) - mb["returns"]) ** 2).mean() < err0


# ============================== KL penalty (PPO's adaptive-β variant) ==============================


def test_kl_penalty_loss_gradient_is_the_autograd_gradient_of_its_formula():
    g = torch.Generator().manual_seed(0)
    old_logits = torch.randn(6, 4, generator=g, dtype=DT)
    logits = (old_logits + 0.3 * torch.randn(6, 4, generator=g, dtype=DT)).requires_grad_()
    actions = torch.randint(0, 4, (6,), generator=g)
    adv = torch.randn(6, generator=g, dtype=DT)
    beta = 0.7

    def parts(z):
        lp = z.log_softmax(-1).gather(-1, actions[:, None]).squeeze(-1)
        old = old_logits.log_softmax(-1).gather(-1, actions[:, None]).squeeze(-1)
        p_old = old_logits.softmax(-1)
        kl = (p_old * (p_old.log() - z.log_softmax(-1))).sum(-1)  # KL(π_old ‖ π_θ) per state
        return lp, old, kl

    lp, old, kl = parts(logits)
    got = torch.autograd.grad(rl.kl_penalty_loss(lp, old, adv, kl, beta).mean(), logits)[0]
    lp, old, kl = parts(logits)
    want = torch.autograd.grad((-(torch.exp(lp - old) * adv - beta * kl)).mean(), logits)[0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    # the penalty's own gradient is not zero (a detached penalty would drop it) and pulls towards π_old
    lp, old, kl = parts(logits)
    only_penalty = torch.autograd.grad(rl.kl_penalty_loss(lp, old, torch.zeros(6, dtype=DT), kl, beta).mean(), logits)[0]
    lp, old, kl = parts(logits)
    torch.testing.assert_close(only_penalty, beta * torch.autograd.grad(kl.mean(), logits)[0], rtol=1e-12, atol=1e-14)
    assert only_penalty.abs().max() > 1e-3
    with torch.no_grad():
        stepped = logits - 0.5 * only_penalty
    assert parts(stepped)[2].mean() < parts(logits.detach())[2].mean()


def _kl_after_penalised_update(beta, lr=1.0, inner_steps=5):
    """One PPO-penalty update of a 5-armed bandit policy (exact expectation over arms); returns KL(π_old ‖ π_new)."""
    rewards = torch.tensor([0.0, 0.2, 1.0, 0.3, 0.1], dtype=DT)
    old = torch.tensor([0.3, -0.2, 0.0, 0.5, -0.4], dtype=DT)
    p_old = old.softmax(-1)
    adv = rewards - (p_old * rewards).sum()
    logits = old.clone().requires_grad_()
    opt = torch.optim.SGD([logits], lr=lr)
    for _ in range(inner_steps):
        log_p = logits.log_softmax(-1)
        kl = (p_old * (p_old.log() - log_p)).sum()  # KL(π_old ‖ π_θ), differentiated
        loss = (p_old * rl.kl_penalty_loss(log_p, old.log_softmax(-1), adv, kl.expand(5), beta)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float((p_old * (p_old.log() - logits.log_softmax(-1))).sum())


def test_kl_penalty_larger_beta_gives_a_smaller_step_and_adaptive_beta_reacts():
    # a larger β must hold the update closer to π_old: with a detached penalty the KL would not
    # depend on β, with a flipped sign it would grow with β
    kls = [_kl_after_penalised_update(beta) for beta in (0.0, 0.5, 2.0, 8.0)]
    assert all(a > b for a, b in zip(kls, kls[1:])), kls
    assert kls[-1] < 0.5 * kls[0], kls
    # adaptive β (Schulman et al. 2017, Sec. 4): starting small, β doubles while the KL overshoots
    # 1.5·d_targ and the KL of the update comes down to the target band
    target, beta, history = 0.01, 0.01, []
    for _ in range(12):
        d = _kl_after_penalised_update(beta)
        history.append((beta, d))
        beta = rl.adaptive_kl_coef(beta, d, target)
    assert history[0][1] > 1.5 * target  # the unpenalised-ish first update overshoots
    assert max(b for b, _ in history) >= 0.16  # so β was doubled several times
    assert any(target / 1.5 <= d <= 1.5 * target for _, d in history[1:]), history


# ============================== GRPO ==============================

TOK = build_char_tokenizer()
FORBIDDEN = forbidden_token_ids(TOK)


class RecordingTask(AdditionTask):
    """The addition prompts with a stub reward that records every (prompt, completion) it scores.

    ``reward="parity"`` gives 1 to completions whose character codes sum to an odd number (about
    half of a random policy's samples: mixed groups, non-zero advantages); ``reward="constant"``
    gives 1 to everything (every group constant: all advantages exactly 0).
    """

    def __init__(self, reward="parity"):
        super().__init__()
        self.kind, self.seen = reward, []

    def reward(self, prompt, completion):
        self.seen.append((prompt, completion))
        return 1.0 if self.kind == "constant" else float(sum(map(ord, completion)) % 2)


def _tiny_policy(seed=0):
    return build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=seed, device="cpu").double().eval()


def _perturbed_copy(policy, scale=0.05, seed=1):
    """π_ref ≠ π_θ, so the k3 penalty has a gradient (at π_θ = π_ref it has none)."""
    ref = copy.deepcopy(policy).requires_grad_(False)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ref.parameters():
            p += scale * torch.randn(p.shape, generator=g, dtype=p.dtype)
    return ref


def _rescore(policy, seen):
    """Log π (B, T) of the recorded completions, re-encoded from their text, one prompt per row."""
    prompt_ids, prompt_mask, completion_ids, mask = lm_helpers.encode_seen(TOK, seen)
    return completion_log_probs(policy, prompt_ids, completion_ids, prompt_mask, forbidden_ids=FORBIDDEN,
                                completion_mask=mask), mask


def _group_advantages_by_hand(rewards, G):
    """(r − mean)/(population std + 1e-6) per group; exact 0 for a constant group."""
    out = []
    for grp in rewards.reshape(-1, G):
        if (grp == grp[0]).all():
            out.append(torch.zeros_like(grp))
        else:
            out.append((grp - grp.mean()) / (((grp - grp.mean()) ** 2).mean().sqrt() + 1e-6))
    return torch.cat(out)


def _aggregate(per_token, mask, how):
    m = mask.to(per_token.dtype)
    if how == "seq_mean_token_mean":
        return ((per_token * m).sum(1) / m.sum(1)).mean()
    assert how == "token_mean"
    return (per_token * m).sum() / m.sum()


def _grpo_cfg(**kw):
    base = dict(group_size=4, prompts_per_step=4, max_new_tokens=5, num_inner_epochs=1, device="cpu",
                max_grad_norm=1e9, log_ref_kl=True)
    base.update(kw)
    return GRPOConfig(**base)


def _run_grpo_step(cfg, reward="parity", lr=0.5, ref_scale=0.05, optimizer=None):
    """One grpo_step on the tiny policy with SGD(lr); returns what the checks need."""
    policy = _tiny_policy()
    ref = _perturbed_copy(policy, ref_scale) if ref_scale else copy.deepcopy(policy).requires_grad_(False)
    before = copy.deepcopy(policy)
    task = RecordingTask(reward)
    opt = optimizer(policy) if optimizer else torch.optim.SGD(policy.parameters(), lr=lr)
    _plant_stale_gradients(policy)
    metrics = grpo_step(policy, ref, opt, TOK, task, cfg, torch.Generator().manual_seed(0), FORBIDDEN)
    assert len(task.seen) == cfg.group_size * cfg.prompts_per_step
    return policy, before, ref, task.seen, metrics


def _expected_grpo(before, ref, seen, cfg, rewards):
    """μ = 1: ρ = π_θ/sg(π_θ) (= 1, gradient ∇log π); loss = agg(−min(ρÂ, clip(ρ)Â) + β·k3(π_θ, π_ref)).

    (The scorer returns float32 log-probs, so the comparisons below use float32 tolerances.)
    """
    lp, mask = _rescore(before, seen)
    lp = lp.double()
    with torch.no_grad():
        ref_lp = _rescore(ref, seen)[0].double()
    adv = _group_advantages_by_hand(rewards, cfg.group_size)[:, None]
    ratio = torch.exp(lp - lp.detach())
    high = cfg.clip_eps_low if cfg.clip_eps_high is None else cfg.clip_eps_high
    surrogate = -torch.minimum(ratio * adv, ratio.clamp(1 - cfg.clip_eps_low, 1 + high) * adv)
    log_r = ref_lp - lp
    k3 = torch.exp(log_r) - 1 - log_r
    surrogate_part = _aggregate(surrogate, mask, cfg.loss_aggregation)
    kl_part = _aggregate(k3, mask, cfg.loss_aggregation)
    loss = surrogate_part + cfg.kl_coef * kl_part
    grads = torch.autograd.grad(loss, list(before.parameters()))
    return dict(loss=loss.detach(), surrogate=surrogate_part.detach(), kl_part=kl_part.detach(),
                grad=torch.cat([g.reshape(-1) for g in grads]), adv=adv.squeeze(1), lp=lp.detach(),
                ref_lp=ref_lp, mask=mask, token_mean_k3=(k3 * mask).sum().detach() / mask.sum())


def _parity(seen):
    return torch.tensor([float(sum(map(ord, o)) % 2) for _, o in seen], dtype=DT)


@pytest.mark.parametrize("aggregation, kl_coef", [("seq_mean_token_mean", 0.0), ("token_mean", 0.0),
                                                   ("seq_mean_token_mean", 0.5), ("token_mean", 0.5)])
def test_grpo_step_is_minus_lr_times_the_gradient_of_the_stated_loss(aggregation, kl_coef):
    cfg = _grpo_cfg(loss_aggregation=aggregation, kl_coef=kl_coef)
    lr = 0.5
    policy, before, ref, seen, metrics = _run_grpo_step(cfg, lr=lr)
    want = _expected_grpo(before, ref, seen, cfg, _parity(seen))
    assert (want["adv"] != 0).any()  # mixed groups: there is a policy-gradient signal
    step = _flat(policy.parameters()) - _flat(before.parameters())
    assert step.abs().max() > 1e-4  # parameters move
    torch.testing.assert_close(step, -lr * want["grad"], rtol=1e-4, atol=1e-9)
    torch.testing.assert_close(metrics["grad_norm"].double(), want["grad"].norm(), rtol=1e-4, atol=0)
    # the logged loss is the stated one: surrogate part + β·(aggregated k3), with these signs
    torch.testing.assert_close(metrics["loss"].double(), want["loss"], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(metrics["kl"].double(), want["token_mean_k3"], rtol=1e-4, atol=1e-7)
    assert want["kl_part"] > 0
    if aggregation == "token_mean":  # ρ = 1: the surrogate is −Σ Â_i |o_i| / Σ |o_i|, non-zero here
        lengths = want["mask"].sum(1).to(DT)
        torch.testing.assert_close(want["surrogate"], -(want["adv"] * lengths).sum() / lengths.sum())
        assert want["surrogate"].abs() > 1e-3


def test_grpo_step_positive_advantage_completions_gain_log_probability():
    cfg = _grpo_cfg(kl_coef=0.0)
    policy, before, ref, seen, _ = _run_grpo_step(cfg, lr=0.5)
    adv = _group_advantages_by_hand(_parity(seen), cfg.group_size)
    with torch.no_grad():
        lp0, mask = _rescore(before, seen)
        lp1, _ = _rescore(policy, seen)
    change = ((lp1 - lp0) * mask).sum(1)  # Δ log π(o_i | q) per completion
    assert (adv * change).sum() > 0  # the advantage-weighted log-likelihood rises
    assert change[adv > 0].mean() > 0 > change[adv < 0].mean()
    # the same with the optimiser train_grpo uses (AdamW)
    policy, before, ref, seen, _ = _run_grpo_step(
        cfg, optimizer=lambda p: rl.grpo_optimizer(p, _grpo_cfg(lr=1e-3)))
    adv = _group_advantages_by_hand(_parity(seen), cfg.group_size)
    with torch.no_grad():
        change = ((_rescore(policy, seen)[0] - _rescore(before, seen)[0]) * _rescore(before, seen)[1]).sum(1)
    assert (adv * change).sum() > 0
    assert change[adv > 0].mean() > 0 > change[adv < 0].mean()


def test_grpo_step_with_zero_advantages_follows_only_the_k3_penalty():
    # constant reward: every advantage is exactly 0, so the whole update is β·∇ agg(k3)
    beta, lr = 0.2, 2.0
    cfg = _grpo_cfg(kl_coef=beta)
    policy, before, ref, seen, metrics = _run_grpo_step(cfg, reward="constant", lr=lr)
    want = _expected_grpo(before, ref, seen, cfg, torch.ones(len(seen), dtype=DT))
    assert (want["adv"] == 0).all() and float(metrics["frac_zero_variance_groups"]) == 1.0
    lp, mask = _rescore(before, seen)
    log_r = want["ref_lp"] - lp.double()
    k3 = _aggregate(torch.exp(log_r) - 1 - log_r, mask, cfg.loss_aggregation)
    grad_k3 = torch.cat([g.reshape(-1) for g in torch.autograd.grad(k3, list(before.parameters()))])
    assert grad_k3.norm() > 1e-3
    step = _flat(policy.parameters()) - _flat(before.parameters())
    torch.testing.assert_close(step, -lr * beta * grad_k3, rtol=1e-4, atol=1e-9)
    torch.testing.assert_close(metrics["loss"].double(), beta * k3.detach(), rtol=1e-4, atol=1e-7)
    # and the KL to π_ref (k3 on the same completions, and its token mean as logged) falls
    with torch.no_grad():
        lp1 = _rescore(policy, seen)[0].double()
    log_r1 = want["ref_lp"] - lp1
    k3_after = torch.exp(log_r1) - 1 - log_r1
    assert _aggregate(k3_after, mask, cfg.loss_aggregation) < k3.detach()
    assert (k3_after * mask).sum() / mask.sum() < metrics["kl"].double()


def test_grpo_step_without_penalty_ignores_pi_ref():
    # β = 0: π_ref only feeds the logged KL; the update is the same whatever π_ref is
    cfg = _grpo_cfg(kl_coef=0.0)
    a, before, _, seen, _ = _run_grpo_step(cfg, ref_scale=0.05)
    b, _, _, seen_b, _ = _run_grpo_step(cfg, ref_scale=0.3)
    assert seen == seen_b
    torch.testing.assert_close(_flat(a.parameters()), _flat(b.parameters()), rtol=0, atol=0)
