"""Every trainer config field has a test that fails when the field is ignored, inverted or mis-wired.

A mutation test of the library showed that the bugs the fast suite missed were config knobs never
exercised with a value that matters (a gradient clip never reached, γ = λ = 1 where swapping them
changes nothing, a threshold never met at its boundary). Each test here sets a field to a value
that changes the outcome, and checks the outcome against a number computed independently of the
library's code path: a loss written out and differentiated by autograd, a closed form (the size
of Adam's first step is the learning rate; a clipped step is the unclipped one scaled by c/‖g‖),
an explicit loop (GAE as a forward sum, the schedule from its formula), or a difference two
settings must show. Where a test relies on a field changing the outcome it asserts that too, so
the check keeps its power if defaults move. The fields already pinned elsewhere are named in
``COVERED_ELSEWHERE`` at the end, with the test that pins them.

Configs: :class:`rlbook.GRPOConfig` (loop :func:`rlbook.train_grpo`), :class:`rlbook.algos.ppo.PPOConfig`,
:class:`rlbook.algos.trpo.TRPOConfig`, :class:`rlbook.algos.reinforce.ReinforceConfig` and
:class:`rlbook.lm.SFTConfig`.
"""

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

import rlbook as rl
from rlbook import reference as ref
from rlbook.algos import grpo as grpo_module
from rlbook.algos.grpo import GRPO_RECIPES, GRPOConfig, grpo_step, train_grpo
from rlbook.algos.grpo_rollouts import collect_rollouts
from rlbook.lm.critic import build_critic, critic_values
from rlbook.lm.logprobs import completion_log_probs
from rlbook.lm.model import build_policy, policy_config
from rlbook.lm.task import AdditionTask
from rlbook.lm.tokenizer import build_char_tokenizer, encode_prompts, forbidden_token_ids

DT = torch.float64
TOK = build_char_tokenizer()
FORBIDDEN = forbidden_token_ids(TOK)

pytestmark = pytest.mark.usefixtures("one_thread")


# ============================================================================= helpers (GRPO)


class StubTask(AdditionTask):
    """Addition prompts; reward 1 for completions whose character codes sum to an odd number (mixed
    groups), format reward 1 for completions of an even number of characters; records every call."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def reward(self, prompt, completion):
        self.seen.append((prompt, completion))
        return float(sum(map(ord, completion)) % 2)

    def format_reward(self, prompt, completion):
        return float(len(completion) % 2 == 0)


def tiny(seed=0, dtype=DT):
    return build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=seed, device="cpu").to(dtype).eval()


def cfg(**kw):
    # G = 4 ≠ 3 prompts, so a swap of group_size and prompts_per_step shows
    base = dict(group_size=4, prompts_per_step=3, num_steps=2, max_new_tokens=5, device="cpu", max_grad_norm=1e9)
    base.update(kw)
    return GRPOConfig(**base)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def at(model, theta):
    """A copy of ``model`` with flat parameters ``theta``."""
    out = copy.deepcopy(model)
    torch.nn.utils.vector_to_parameters(theta.clone(), out.parameters())
    return out


class SnapshotSGD(torch.optim.SGD):
    """Plain SGD (Δθ = −lr·g) that records the flat parameters before every step."""

    def __init__(self, params, lr):
        params = list(params)
        super().__init__(params, lr=lr)
        self.params, self.snapshots = params, []

    def step(self, closure=None):
        self.snapshots.append(torch.cat([p.detach().reshape(-1).clone() for p in self.params]))
        return super().step(closure)


def rescore(policy, seen, temperature=1.0):
    """log π (B, T) at ``temperature`` of the recorded completions, re-encoded from their text."""
    ids = [TOK(o, add_special_tokens=False).input_ids for _, o in seen]
    T = max(len(i) for i in ids)
    completion_ids = torch.full((len(ids), T), TOK.eos_token_id, dtype=torch.long)
    mask = torch.zeros(len(ids), T, dtype=torch.bool)
    for row, i in enumerate(ids):
        completion_ids[row, : len(i)] = torch.tensor(i)
        mask[row, : len(i)] = True
    prompt_ids, prompt_mask = encode_prompts(TOK, [p for p, _ in seen])
    lp = completion_log_probs(policy, prompt_ids, completion_ids, prompt_mask, forbidden_ids=FORBIDDEN,
                              completion_mask=mask, temperature=temperature)
    return lp.double(), mask


def hand_advantages(rewards, config):
    """The estimator by the reference loops (rlbook.reference), one minibatch (M = 1)."""
    r, G = rewards.tolist(), config.group_size
    est = config.advantage_estimator
    if est in ("grpo", "dr_grpo"):
        out = ref.group_relative_advantages_loop(r, G, scale="std" if est == "grpo" else "none", std=config.advantage_std)
    else:
        out = {"rloo": ref.leave_one_out_advantages_loop, "maxrl": ref.maxrl_advantages_loop,
               "magistral": ref.magistral_advantages_loop}[est](r, G)
    return torch.tensor(out, dtype=DT)


def aggregate(per_token, mask, config):
    """The four aggregations written out (differentiable)."""
    m = mask.to(DT)
    how = config.loss_aggregation
    if how == "seq_mean_token_mean":
        return ((per_token * m).sum(1) / m.sum(1)).mean()
    if how == "token_mean":
        return (per_token * m).sum() / m.sum()
    if how == "fixed_length_mean":
        return (per_token * m).sum() / (len(m) * config.max_new_tokens)
    assert how == "prompt_mean"
    G = config.group_size
    return torch.stack([(per_token[i:i + G] * m[i:i + G]).sum() / m[i:i + G].sum() for i in range(0, len(m), G)]).mean()


def hand_per_token(lp, old, adv, mask, config):
    """ℓ_{i,t} of each per-token loss, written out; plus the tokens whose gradient the trust region
    zeroed (clip / mask) or whose weight was clipped (CISPO)."""
    low = config.clip_eps_low
    high = low if config.clip_eps_high is None else config.clip_eps_high
    A = adv[:, None].expand_as(lp)
    ratio = torch.exp(lp - old)
    kind = config.per_token_loss
    if kind == "clipped_surrogate":
        per = -torch.minimum(ratio * A, ratio.clamp(1 - low, 1 + high) * A)
        hit = ((ratio > 1 + high) & (A > 0)) | ((ratio < 1 - low) & (A < 0))
    elif kind == "cispo":
        per = -ratio.clamp(1 - low, 1 + high).detach() * A * lp
        hit = (ratio > 1 + high) | (ratio < 1 - low)
    elif kind == "dppo":
        p, q = lp.detach().exp(), old.exp()
        if config.divergence == "binary_tv":
            div = (p - q).abs()
        else:  # KL(Bern(q) ‖ Bern(p))
            div = q * (q.log() - p.log()) + (1 - q) * ((1 - q).log() - (1 - p).log())
        hit = (div > config.divergence_threshold) & (((A > 0) & (lp.detach() > old)) | ((A < 0) & (lp.detach() < old)))
        per = -(~hit).to(DT) * ratio * A
    else:
        assert kind in ("gspo", "gspo_token")
        m = mask.to(DT)
        s = torch.exp(((lp - old) * m).sum(1) / m.sum(1))[:, None].expand_as(lp)
        per = -torch.minimum(s * A, s.clamp(1 - low, 1 + high) * A)
        hit = ((s > 1 + high) & (A > 0)) | ((s < 1 - low) & (A < 0))
    return per, hit & mask


def hand_step_check(config, lr=0.5, epochs_checked=None, policy=None):
    """Run grpo_step with SnapshotSGD; for each optimiser step k, rebuild the stated loss at the
    parameters θ_k before it (π_old = the parameters before the first step, Â from the rewards by
    the reference loops) and return the actual and the hand-computed steps (and the last loss)."""
    policy = policy or tiny()
    theta0, task = flat(policy), StubTask()
    opt = SnapshotSGD(policy.parameters(), lr=lr)
    metrics = grpo_step(policy, None, opt, TOK, task, config, torch.Generator().manual_seed(0), FORBIDDEN)
    seen = task.seen
    rewards = torch.tensor([float(sum(map(ord, o)) % 2) for _, o in seen], dtype=DT)
    adv = hand_advantages(rewards, config)
    with torch.no_grad():
        old, mask = rescore(at(policy, theta0), seen, config.temperature)
    thetas = opt.snapshots + [flat(policy)]
    out = []
    for k in range(len(opt.snapshots)):
        model = at(policy, thetas[k])
        lp, _ = rescore(model, seen, config.temperature)
        per, hit = hand_per_token(lp, old, adv, mask, config)
        loss = aggregate(per, mask, config)
        grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(model.parameters()))])
        out.append(dict(step=thetas[k + 1] - thetas[k], want=-lr * grad, loss=loss.detach(), hit=hit,
                        lp=lp.detach(), grad=grad))
    return out, metrics, dict(adv=adv, old=old, mask=mask, seen=seen)


# ============================================================================= GRPOConfig: the loss


@pytest.mark.parametrize("fields", [
    dict(advantage_estimator="dr_grpo", loss_aggregation="fixed_length_mean", max_new_tokens=4),
    dict(advantage_estimator="rloo", loss_aggregation="prompt_mean"),
    dict(advantage_estimator="maxrl", temperature=0.6),
    dict(advantage_estimator="magistral", loss_aggregation="token_mean", temperature=1.7),
    dict(advantage_std="sample"),
], ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_grpo_on_policy_step_is_the_gradient_of_the_configured_loss(fields):
    """μ = M = 1 (ρ ≡ 1): Δθ = −lr·∇ agg(−Â·ρ) with the configured estimator, aggregation (its
    L_max = max_new_tokens, its G = group_size) and temperature (log π of softmax(logits/τ))."""
    config = cfg(**fields)
    (only,), metrics, data = hand_step_check(config)
    assert (data["adv"] != 0).any() and only["step"].abs().max() > 1e-4
    torch.testing.assert_close(only["step"], only["want"], rtol=1e-4, atol=1e-9)
    torch.testing.assert_close(metrics["loss"].double(), only["loss"], rtol=1e-4, atol=1e-7)
    # the sampler drew at the same temperature it reported: on-policy ρ ≡ 1 exactly (up to float32)
    assert float(metrics["ratio_std"]) < 1e-5 and float(metrics["clip_fraction"]) == 0


def test_grpo_the_sample_std_and_temperature_change_the_step():
    """Power of the test above: each field's value changes the gradient (else ignoring it would pass)."""
    base = hand_step_check(cfg())[0][0]["want"]
    for fields in (dict(advantage_std="sample"), dict(temperature=0.6), dict(loss_aggregation="prompt_mean"),
                   dict(loss_aggregation="fixed_length_mean")):
        assert not torch.allclose(hand_step_check(cfg(**fields))[0][0]["want"], base, rtol=1e-3, atol=0), fields


@pytest.mark.parametrize("fields", [
    dict(per_token_loss="clipped_surrogate", clip_eps_low=0.05, clip_eps_high=0.3),
    dict(per_token_loss="clipped_surrogate", clip_eps_low=0.3, clip_eps_high=0.05, loss_aggregation="token_mean"),
    dict(per_token_loss="cispo", clip_eps_low=0.1, clip_eps_high=0.15, loss_aggregation="token_mean"),
    dict(per_token_loss="dppo", divergence="binary_tv", divergence_threshold=0.02),
    dict(per_token_loss="dppo", divergence="binary_kl", divergence_threshold=0.004),
    dict(per_token_loss="gspo", clip_eps_low=0.02, clip_eps_high=0.05, lr=0.02),  # a band on the sequence ratio
], ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_grpo_off_policy_step_is_the_gradient_of_the_configured_trust_region(fields):
    """μ = 2: the second pass sees ρ ≠ 1, so the band [1 − ε_low, 1 + ε_high] (which side is which),
    CISPO's weight clip, DPPO's divergence and threshold and GSPO's sequence ratio all decide the
    step. Each step must be −lr·∇ of the written-out loss, and clip_fraction the share of tokens
    the written-out rule hits; a swapped band or the default values would give another step."""
    fields = dict(fields)
    lr = fields.pop("lr", 1.0)  # the SGD step of the first pass (GRPOConfig.lr is AdamW's)
    config = cfg(num_inner_epochs=2, **fields)
    steps, metrics, data = hand_step_check(config, lr=lr)
    last = steps[-1]
    hit = last["hit"]
    assert 0 < int(hit.sum()) < int(data["mask"].sum())  # the trust region acts on some tokens, not all
    for s in steps:
        torch.testing.assert_close(s["step"], s["want"], rtol=1e-4, atol=1e-8)
    torch.testing.assert_close(float(metrics["clip_fraction"]), float(hit.sum() / data["mask"].sum()), rtol=0, atol=1e-9)
    # power: the other side of the band / the other divergence / the default threshold hit other tokens
    kind = config.per_token_loss
    if kind == "dppo":
        others = [dict(divergence="binary_kl" if config.divergence == "binary_tv" else "binary_tv"),
                  dict(divergence_threshold=0.15)]
    else:
        others = [dict(clip_eps_low=config.clip_eps_high, clip_eps_high=config.clip_eps_low),
                  dict(clip_eps_low=0.2, clip_eps_high=None)]
    for other in others:
        swapped = dataclasses.replace(config, **other)
        _, other_hit = hand_per_token(last["lp"], data["old"], data["adv"], data["mask"], swapped)
        assert not torch.equal(other_hit, hit), other


def test_dppo_threshold_is_strict_at_the_boundary():
    """A token whose divergence equals τ exactly is inside the region (blocked only if D > τ)."""
    p = torch.tensor([0.75, 0.75, 0.25], dtype=DT)  # binary TV |p − q| = 0.25 exactly (dyadic numbers)
    q = torch.tensor([0.5, 0.5, 0.5], dtype=DT)
    adv = torch.tensor([1.0, 1.0, -1.0], dtype=DT)
    assert rl.dppo_mask(p.log(), q.log(), adv, threshold=0.25).tolist() == [True, True, True]
    assert rl.dppo_mask(p.log(), q.log(), adv, threshold=0.25 - 2 ** -20).tolist() == [False, False, False]
    loss = rl.dppo_loss(p.log().requires_grad_(), q.log(), adv, threshold=0.25)
    assert (loss != 0).all()


def test_grpo_max_grad_norm_clips_the_step_to_that_norm():
    """The clipped step is the unclipped one (−lr·g, pinned in test_train_updates) times c/(‖g‖+1e-6)."""
    free = hand_step_check(cfg(max_grad_norm=1e9))
    clipped = hand_step_check(cfg(max_grad_norm=1e-3))
    g_norm = float(free[1]["grad_norm"])
    assert g_norm > 1e-2  # the clip acts
    torch.testing.assert_close(float(clipped[1]["grad_norm"]), g_norm, rtol=1e-6, atol=0)  # logged before clipping
    torch.testing.assert_close(clipped[0][0]["step"], free[0][0]["step"] * (1e-3 / (g_norm + 1e-6)), rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(float(clipped[0][0]["step"].norm()), 0.5 * 1e-3, rtol=1e-3, atol=0)


def test_grpo_lr_is_the_size_of_adams_first_step():
    """AdamW's first step is lr·g/(|g| + 1e-8) per parameter: lr for every parameter with |g| ≫ 1e-8."""
    for lr in (3e-3, 2e-2):
        policy = tiny(dtype=torch.float32)
        before = flat(policy)
        train_grpo(policy, TOK, StubTask(), cfg(num_steps=1, lr=lr), progress=False)
        moved = (flat(policy) - before).abs()
        assert float(moved.max()) == pytest.approx(lr, rel=1e-3)
        assert float(moved.max()) <= lr * (1 + 1e-5)


# ============================================================================= GRPOConfig: rewards and sampling


def test_grpo_rewards_add_format_reward_and_dapo_overlong_penalty_with_their_signs():
    """r = correct + β_f·format + R_len(L), R_len = 0 for L ≤ L_max − L_cache, then
    ((L_max − L_cache) − L)/L_cache down to −1 at L_max (DAPO eq. 13); L_max = max_new_tokens."""
    config = cfg(format_coef=0.3, overlong_cache_length=3, max_new_tokens=4, prompts_per_step=8)
    task = StubTask()
    batch = collect_rollouts(tiny(), TOK, task, config, torch.Generator().manual_seed(0), FORBIDDEN)
    lengths = batch.completion_mask.sum(1).tolist()
    penalty = [0.0 if L <= 1 else (1 - L) / 3 for L in lengths]  # L_max − L_cache = 1
    assert {round(x, 6) for x in penalty} >= {0.0, round(-1 / 3, 6), -1.0}  # before, inside and at the end of the ramp
    correct = [task.reward(p.prompt, o) for p, o in zip([p for p in batch.problems for _ in range(4)], batch.texts)]
    fmt = [float(len(o) % 2 == 0) for o in batch.texts]
    assert 0 < sum(fmt) < len(fmt)
    want = torch.tensor([c + 0.3 * f + pen for c, f, pen in zip(correct, fmt, penalty)], dtype=torch.float32)
    torch.testing.assert_close(batch.rewards, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(batch.correct, torch.tensor(correct, dtype=torch.float32))


def test_grpo_temperature_is_the_samplers_and_the_scorers():
    """The sampler's log π_old are those of softmax(logits/τ) at the configured τ."""
    policy = tiny()
    for tau in (0.5, 2.0):
        config = cfg(temperature=tau)
        batch = collect_rollouts(policy, TOK, StubTask(), config, torch.Generator().manual_seed(0), FORBIDDEN)
        seen = [(p.prompt, batch.texts[4 * i + g]) for i, p in enumerate(batch.problems) for g in range(4)]
        lp, mask = rescore(policy, seen, tau)
        assert torch.equal(mask, batch.completion_mask)
        torch.testing.assert_close(batch.log_probs.double()[mask], lp[mask], rtol=1e-5, atol=1e-6)
        assert not torch.allclose(batch.log_probs.double()[mask], rescore(policy, seen, 1.0)[0][mask], atol=1e-3)


def test_grpo_max_new_tokens_is_the_budget():
    config = cfg(max_new_tokens=3, prompts_per_step=8)
    batch = collect_rollouts(tiny(), TOK, StubTask(), config, torch.Generator().manual_seed(0), FORBIDDEN)
    lengths = batch.completion_mask.sum(1)
    assert int(lengths.max()) == 3 and batch.completion_ids.shape[1] == 3
    assert torch.equal(batch.truncated, ~torch.tensor([o.endswith(TOK.eos_token) for o in batch.texts]))
    assert batch.truncated.any()


def test_grpo_retire_pass_rate_is_a_strict_threshold():
    """A group whose pass rate equals the threshold stays in the pool; one above it leaves."""
    config = cfg(retire_pass_rate=0.5, prompts_per_step=16)
    retired = set()
    batch = collect_rollouts(tiny(), TOK, StubTask(), config, torch.Generator().manual_seed(0), FORBIDDEN, retired)
    rates = batch.correct.reshape(-1, 4).mean(1).tolist()
    assert 0.5 in rates and any(r > 0.5 for r in rates)
    assert retired == {p.prompt for p, r in zip(batch.problems, rates) if r > 0.5}


def test_grpo_max_completions_stops_exactly_at_the_budget():
    """Stop before a step once ``generated ≥ max_completions``: a budget of exactly two steps' completions gives two steps."""
    for budget, steps in ((24, 2), (25, 3), (12, 1)):
        hist = train_grpo(tiny(dtype=torch.float32), TOK, StubTask(), cfg(num_steps=5, max_completions=budget),
                          progress=False)
        assert len(hist["reward"]) == steps, budget


def test_grpo_log_ref_kl_keeps_a_reference_only_when_asked():
    off = train_grpo(tiny(dtype=torch.float32), TOK, StubTask(), cfg(lr=1e-2, log_ref_kl=False), progress=False)
    on = train_grpo(tiny(dtype=torch.float32), TOK, StubTask(), cfg(lr=1e-2, log_ref_kl=True), progress=False)
    assert (off["kl"] == 0).all() and on["kl"][1] > 1e-6


def test_grpo_fp32_lm_head_is_applied_when_set():
    for flag, dtype in ((True, torch.float32), (False, torch.bfloat16)):
        policy = tiny(dtype=torch.bfloat16)
        train_grpo(policy, TOK, StubTask(), cfg(num_steps=1, fp32_lm_head=flag), progress=False)
        ids = torch.tensor([[5, 6, 7]])
        assert policy(input_ids=ids).logits.dtype == dtype, flag


def test_grpo_eval_every_and_eval_num_problems(monkeypatch):
    sizes = []
    real = StubTask.held_out_problems
    monkeypatch.setattr(StubTask, "held_out_problems", lambda self, n: sizes.append(n) or real(self, n))
    hist = train_grpo(tiny(dtype=torch.float32), TOK, StubTask(), cfg(num_steps=5, eval_every=2, eval_num_problems=3),
                      progress=False)
    assert hist["eval_step"].tolist() == [0, 2, 4, 5] and sizes == [3]
    assert hist["eval_completions"].tolist() == [0, 24, 48, 60]
    none = train_grpo(tiny(dtype=torch.float32), TOK, StubTask(), cfg(num_steps=2), progress=False)
    assert "eval_step" not in none and sizes == [3]


def test_grpo_seed_seeds_the_prompts_and_the_samples():
    def seen(seed):
        task = StubTask()
        train_grpo(tiny(dtype=torch.float32), TOK, task, cfg(num_steps=1, seed=seed), progress=False)
        return task.seen

    a, b = seen(0), seen(1)
    assert a == seen(0) and a != b
    assert [p for p, _ in a] != [p for p, _ in b]  # the prompt draws
    assert [o for _, o in a] != [o for _, o in b]


def test_grpo_device_is_used(monkeypatch):
    asked = []
    real = grpo_module.get_device
    monkeypatch.setattr(grpo_module, "get_device", lambda d=None: asked.append(d) or real(d))
    train_grpo(tiny(dtype=torch.float32), TOK, StubTask(), cfg(num_steps=1, device="cpu"), progress=False)
    assert asked == ["cpu"]


# ============================================================================= GRPOConfig: PPO with a critic


def hand_token_gae(values, rewards, lengths, gamma, lam):
    """Â_t = Σ_l (γλ)^l δ_{t+l} over a completion, δ_t = r_t + γV_{t+1} − V_t, reward at the last
    token, V after the last token 0 (the episode ends), by an explicit double loop."""
    B, T = values.shape
    adv = torch.zeros(B, T, dtype=DT)
    for i in range(B):
        n = int(lengths[i])
        v = values[i, :n].tolist() + [0.0]
        r = [0.0] * (n - 1) + [float(rewards[i])]
        delta = [r[t] + gamma * v[t + 1] - v[t] for t in range(n)]
        for t in range(n):
            adv[i, t] = sum((gamma * lam) ** k * delta[t + k] for k in range(n - t))
    return adv


def test_grpo_ppo_critic_gae_uses_gamma_and_lambda_and_the_critic_step_is_clipped(monkeypatch):
    """γ = 0.8, λ = 0.6 (not 1, where a swap changes nothing): the advantages passed to the loss are
    the whitened token GAE of the critic's values; the critic's step is −lr·clip(∇½(V − R̂)², c)
    with R̂ = Â + V and c = max_grad_norm."""
    seen_adv = []
    real = grpo_module.grpo_microbatch_train_step
    monkeypatch.setattr(grpo_module, "grpo_microbatch_train_step",
                        lambda *a, **k: seen_adv.append(k["advantages"].detach().clone()) or real(*a, **k))
    config = cfg(advantage_estimator="gae", gamma=0.8, gae_lambda=0.6, max_grad_norm=1e-3)
    policy = tiny()
    critic = build_critic(policy, init_std=0.1)
    critic_before = copy.deepcopy(critic)
    task = StubTask()
    grpo_step(policy, None, torch.optim.SGD(policy.parameters(), lr=0.1), TOK, task, config,
              torch.Generator().manual_seed(0), FORBIDDEN, critic=critic,
              critic_optimizer=torch.optim.SGD(critic.parameters(), lr=0.5))
    seen = task.seen
    rewards = torch.tensor([float(sum(map(ord, o)) % 2) for _, o in seen], dtype=DT)
    ids = [TOK(o, add_special_tokens=False).input_ids for _, o in seen]
    T = max(len(i) for i in ids)
    completion_ids = torch.full((len(ids), T), TOK.eos_token_id, dtype=torch.long)
    mask = torch.zeros(len(ids), T, dtype=torch.bool)
    for row, i in enumerate(ids):
        completion_ids[row, : len(i)] = torch.tensor(i)
        mask[row, : len(i)] = True
    prompt_ids, prompt_mask = encode_prompts(TOK, [p for p, _ in seen])
    values = critic_values(critic_before, prompt_ids, completion_ids, prompt_mask, mask).double()
    raw = hand_token_gae(values.detach(), rewards, mask.sum(1), 0.8, 0.6)
    x = raw[mask]
    whitened = torch.zeros_like(raw)
    whitened[mask] = (x - x.mean()) / x.std(unbiased=False)
    got = seen_adv[0].double()
    torch.testing.assert_close(got[mask], whitened[mask], rtol=1e-4, atol=1e-5)
    # power: the swapped pair gives other advantages
    swapped = hand_token_gae(values.detach(), rewards, mask.sum(1), 0.6, 0.8)[mask]
    assert not torch.allclose((swapped - swapped.mean()) / swapped.std(unbiased=False), whitened[mask], atol=1e-2)
    # the critic: one SGD step on the token mean of ½(V − R̂)², R̂ = Â_raw + V, clipped to norm 1e-3
    targets = (raw + values.detach())
    v = critic_values(critic_before, prompt_ids, completion_ids, prompt_mask, mask).double()
    loss = (0.5 * (v - targets) ** 2)[mask].mean()
    g = torch.cat([p.reshape(-1) for p in torch.autograd.grad(loss, list(critic_before.parameters()))])
    assert g.norm() > 1e-2
    torch.testing.assert_close(flat(critic) - flat(critic_before), -0.5 * g * (1e-3 / (g.norm() + 1e-6)),
                               rtol=1e-3, atol=1e-9)


def test_grpo_critic_lr_is_the_size_of_the_critics_first_adam_step():
    """The critic starts with a zero head, so its first AdamW step moves exactly the head, each
    weight by critic_lr (|g| ≫ 1e-8)."""
    for critic_lr in (1e-3, 5e-2):
        policy = tiny(dtype=torch.float32)
        initial = build_critic(copy.deepcopy(policy))
        hist = train_grpo(policy, TOK, StubTask(), cfg(num_steps=1, advantage_estimator="gae", critic_lr=critic_lr),
                          progress=False)
        moved = (flat(hist.critic) - flat(initial)).abs()
        assert float(moved.max()) == pytest.approx(critic_lr, rel=1e-3)


# ============================================================================= GRPOConfig: the recipes


# The published settings, each a difference from GRPOConfig's defaults (ε_low = 0.2, symmetric band,
# β = 0, seq-mean-token-mean, std-scaled group advantages). Sources in GRPOConfig's docstring.
PUBLISHED = {
    # DeepSeekMath §4.1 / eq. 21: β = 0.04, ε = 0.2, per-sequence mean of token losses
    "grpo": dict(kl_coef=0.04),
    # Dr. GRPO: no std division, no length normalisation (a constant L_max), no KL
    "dr_grpo": dict(advantage_estimator="dr_grpo", loss_aggregation="fixed_length_mean", kl_coef=0.0),
    # DAPO §3: clip-higher ε_high = 0.28 (ε_low 0.2), token-level loss, overlong filtering and soft
    # punishment (zone scaled to this book's budget), dynamic sampling, no KL
    "dapo": dict(clip_eps_high=0.28, loss_aggregation="token_mean", kl_coef=0.0, overlong_filter=True,
                 overlong_cache_length=4, dynamic_sampling=True),
    "rloo": dict(advantage_estimator="rloo", kl_coef=0.0),
    # CISPO: no lower clip of the IS weight (ε_low ≥ 1), upper 0.28, token-level
    "cispo": dict(per_token_loss="cispo", clip_eps_low=1.0, clip_eps_high=0.28, loss_aggregation="token_mean", kl_coef=0.0),
    # GSPO §5.1: sequence-ratio band (3e-4, 4e-4)
    "gspo": dict(per_token_loss="gspo", clip_eps_low=3e-4, clip_eps_high=4e-4, kl_coef=0.0),
    "maxrl": dict(advantage_estimator="maxrl", kl_coef=0.0),
    "dppo": dict(per_token_loss="dppo", divergence="binary_tv", divergence_threshold=0.15, kl_coef=0.0),
    # ProRL: clip-higher 0.4, KL 1e-2 with reference resets, dynamic sampling, token-level
    "prorl": dict(clip_eps_high=0.4, loss_aggregation="token_mean", dynamic_sampling=True, kl_coef=1e-2,
                  ref_reset_every=50),
    # Magistral: DAPO's parts (token-level loss, overlong, dynamic sampling, no KL), ε_high 0.25,
    # advantages centred per group and scaled by the minibatch std
    "magistral": dict(clip_eps_high=0.25, loss_aggregation="token_mean", kl_coef=0.0, overlong_filter=True,
                      overlong_cache_length=4, dynamic_sampling=True, advantage_estimator="magistral"),
    # ScaleRL: CISPO with ε_high 3 (no lower clip), Magistral-style advantages, prompt-level
    # aggregation, zero-variance filtering, no-positive-resampling at 0.9, FP32 LM head
    "scalerl": dict(per_token_loss="cispo", clip_eps_low=1.0, clip_eps_high=3.0, advantage_estimator="magistral",
                    loss_aggregation="prompt_mean", zero_variance_filter=True, retire_pass_rate=0.9, fp32_lm_head=True,
                    kl_coef=0.0),
    # PPO for LMs (InstructGPT): a critic with GAE over tokens, KL to the reference
    "ppo": dict(advantage_estimator="gae", kl_coef=0.04),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_grpo_recipes_are_the_published_settings(name):
    recipe = GRPOConfig.recipe(name)
    assert recipe == GRPOConfig(**PUBLISHED[name])
    # every field the recipe leaves alone is the default (no hidden extra setting)
    changed = {f.name for f in dataclasses.fields(GRPOConfig) if getattr(recipe, f.name) != getattr(GRPOConfig(), f.name)}
    assert changed == {k for k, v in PUBLISHED[name].items() if v != getattr(GRPOConfig(), k)}


def test_grpo_recipe_table_has_no_recipe_without_a_pinned_reference():
    assert sorted(GRPO_RECIPES) == sorted(PUBLISHED)
    dapo, magistral = GRPOConfig.recipe("dapo"), GRPOConfig.recipe("magistral")
    assert dapo.loss_aggregation == magistral.loss_aggregation == "token_mean"  # Magistral inherits DAPO's token-level loss
    assert GRPOConfig.recipe("dapo", kl_coef=0.1).kl_coef == 0.1  # overrides on top
