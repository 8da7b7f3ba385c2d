"""The Part IV switches of GRPOConfig, checked through the one training loop (rl.train_grpo / grpo_step).

Each test pins what a switch does to the update or to the batch, so that mutating the wiring fails:
dynamic sampling (only mixed groups, stops at its cap), zero-variance filtering, overlong filtering
(exactly the truncated rows leave the loss), ProRL's reset (KL to π_ref exactly 0 right after it,
fresh optimiser), Magistral's minibatch std, minibatches, ScaleRL's pool retirement, the FP32 LM
head, PPO's critic and GAE over tokens, and the on-policy identity of the per-token losses.
"""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rlbook as rl
from rlbook.algos import grpo as grpo_module
from rlbook.algos.grpo import GRPO_RECIPES, GRPOConfig, grpo_step, train_grpo
from rlbook.algos.grpo_rollouts import collect_rollouts, mixed_groups, truncated_rows
from rlbook.lm.critic import build_critic, critic_values, fp32_lm_head
from rlbook.lm.model import build_policy, policy_config
from rlbook.lm.task import AdditionTask
from rlbook.lm.tokenizer import build_char_tokenizer, forbidden_token_ids

TOK = build_char_tokenizer()
FORBIDDEN = forbidden_token_ids(TOK)


class StubTask(AdditionTask):
    """Addition prompts with a stub reward.

    "parity": 1 for completions whose character codes sum to an odd number (mixed groups);
    "constant": 1 for everything (every group constant); "easy_half": prompts whose first operand
    is below 50 always score 1 (pass rate 1), the others get the parity reward.
    """

    def __init__(self, kind="parity"):
        super().__init__()
        self.kind, self.seen = kind, []

    def reward(self, prompt, completion):
        self.seen.append((prompt, completion))
        if self.kind == "constant" or (self.kind == "easy_half" and int(prompt[:2]) < 50):
            return 1.0
        return float(sum(map(ord, completion)) % 2)


def tiny(seed=0, dtype=torch.float64):
    return build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=seed, device="cpu").to(dtype).eval()


def cfg(**kw):
    base = dict(group_size=4, prompts_per_step=4, num_steps=2, max_new_tokens=5, device="cpu", max_grad_norm=1e9)
    base.update(kw)
    return GRPOConfig(**base)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def one_step(config, task=None, policy=None, lr=0.5, ref=None):
    policy = policy or tiny()
    before = copy.deepcopy(policy)
    opt = torch.optim.SGD(policy.parameters(), lr=lr)
    metrics = grpo_step(policy, ref, opt, TOK, task or StubTask(), config, torch.Generator().manual_seed(0), FORBIDDEN)
    return flat(policy) - flat(before), metrics


# ----------------------------------------------------------------------------- DAPO: dynamic sampling


def test_dynamic_sampling_keeps_only_mixed_groups_and_fills_the_batch():
    config = cfg(dynamic_sampling=True, max_sampling_rounds=50)
    batch = collect_rollouts(tiny(), TOK, StubTask(), config, torch.Generator().manual_seed(0), FORBIDDEN)
    assert batch.num_groups == config.prompts_per_step and mixed_groups(batch.rewards, 4).all()
    assert batch.stats["generated"] == batch.stats["rounds"] * 4 * 4 and batch.stats["rounds"] >= 1
    # the rows follow their groups: each kept row's reward is the stub's reward of its text
    task = StubTask()
    expected = torch.tensor([task.reward(p.prompt, t) for p in batch.problems for t in
                             batch.texts[batch.problems.index(p) * 4: batch.problems.index(p) * 4 + 4]])
    torch.testing.assert_close(batch.rewards, expected)


def test_dynamic_sampling_stops_at_its_cap_and_then_makes_no_update():
    config = cfg(dynamic_sampling=True, max_sampling_rounds=3)
    task = StubTask("constant")
    batch = collect_rollouts(tiny(), TOK, task, config, torch.Generator().manual_seed(0), FORBIDDEN)
    assert batch.num_groups == 0 and batch.stats["rounds"] == 3 and batch.stats["generated"] == 3 * 16
    assert len(task.seen) == 3 * 16
    step, metrics = one_step(config, StubTask("constant"))
    assert float(step.abs().max()) == 0.0 and float(metrics["kept_groups"]) == 0
    assert float(metrics["completions_generated"]) == 48 and float(metrics["sampling_rounds"]) == 3


def test_zero_variance_filter_drops_constant_groups_without_resampling():
    task = StubTask("easy_half")
    batch = collect_rollouts(tiny(), TOK, task, cfg(zero_variance_filter=True, prompts_per_step=8),
                             torch.Generator().manual_seed(0), FORBIDDEN)
    sampled = batch.stats["sampled"]
    keep = mixed_groups(sampled.rewards, 4)
    assert batch.stats["rounds"] == 1 and batch.stats["generated"] == 32
    assert [p.prompt for p in batch.problems] == [p.prompt for p, k in zip(sampled.problems, keep) if k]
    assert 0 < batch.num_groups < 8  # some groups dropped, some kept


# ----------------------------------------------------------------------------- DAPO: overlong filtering


def test_overlong_filter_removes_exactly_the_truncated_rows_from_the_loss(monkeypatch):
    seen = []
    real = grpo_module.grpo_microbatch_train_step

    def spy(log_probs, response_mask, *args, **kwargs):
        seen.append(response_mask.clone())
        return real(log_probs, response_mask, *args, **kwargs)

    monkeypatch.setattr(grpo_module, "grpo_microbatch_train_step", spy)
    task = StubTask()
    config = cfg(max_new_tokens=3, overlong_filter=True)
    one_step(config, task)
    texts = [o for _, o in task.seen]
    truncated = torch.tensor([not o.endswith(TOK.eos_token) for o in texts])
    assert 0 < int(truncated.sum()) < len(texts)  # both kinds present
    loss_mask = seen[0]
    assert not loss_mask[truncated].any()  # truncated rows: no token in the loss
    assert loss_mask[~truncated].any(dim=1).all()  # every finished row keeps its tokens
    # without the switch the truncated rows are in the loss
    seen.clear()
    one_step(cfg(max_new_tokens=3), StubTask())
    assert seen[0][truncated].all()


def test_a_row_outside_the_loss_mask_gets_exactly_zero_gradient():
    g = torch.Generator().manual_seed(0)
    log_probs = (-torch.rand(4, 5, generator=g, dtype=torch.float64)).requires_grad_()
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1] = False  # a truncated row under overlong filtering
    adv = torch.tensor([[1.0], [2.0], [-1.0], [0.5]], dtype=torch.float64)
    for agg in ("seq_mean_token_mean", "token_mean"):
        log_probs.grad = None
        rl.grpo_microbatch_train_step(log_probs, mask, 1, "grpo_clip", advantages=adv, old_log_probs=log_probs.detach(),
                                      cliprange=0.2, aggregation=agg)
        assert (log_probs.grad[1] == 0).all() and (log_probs.grad[[0, 2, 3]] != 0).all()


def test_truncated_rows_and_the_budget_check():
    ids = torch.tensor([[5, 2, 0], [5, 5, 5], [5, 5, 2]])
    mask = rl.lm.completion_mask_from_eos(ids, 2)
    assert truncated_rows(ids, mask, 2).tolist() == [False, True, False]
    with pytest.raises(ValueError, match="max_new_tokens"):
        truncated_rows(ids, mask, 2, max_new_tokens=2)  # a completion of 3 tokens under a budget of 2
    with pytest.raises(ValueError, match="completion_mask"):
        truncated_rows(ids, mask[:, :2], 2)


# ----------------------------------------------------------------------------- ProRL, minibatches, Magistral


def test_prorl_reset_makes_the_kl_to_the_reference_exactly_zero_and_resets_the_optimiser(monkeypatch):
    made = []
    real = grpo_module.grpo_optimizer
    monkeypatch.setattr(grpo_module, "grpo_optimizer", lambda p, c: made.append(1) or real(p, c))
    hist = train_grpo(tiny(dtype=torch.float32), TOK, StubTask(), cfg(num_steps=5, lr=1e-2, kl_coef=0.1, ref_reset_every=2),
                      progress=False)
    kl = hist["kl"]
    assert kl[0] == 0.0 and kl[2] == 0.0 and kl[4] == 0.0  # right after the start and each reset
    assert kl[1] > 0 and kl[3] > 0
    assert hist["ref_reset"].tolist() == [0, 0, 1, 0, 1] and len(made) == 3
    without = train_grpo(tiny(dtype=torch.float32), TOK, StubTask(), cfg(num_steps=3, lr=1e-2, kl_coef=0.1), progress=False)
    assert without["kl"][2] > 0


class CountingSGD(torch.optim.SGD):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.steps = 0

    def step(self, closure=None):
        self.steps += 1
        return super().step(closure)


@pytest.mark.parametrize("epochs, minibatches", [(1, 1), (1, 2), (3, 2), (2, 4)])
def test_updates_per_generation_are_epochs_times_minibatches(epochs, minibatches):
    policy = tiny()
    opt = CountingSGD(policy.parameters(), lr=0.1)
    metrics = grpo_step(policy, None, opt, TOK, StubTask(), cfg(num_inner_epochs=epochs, num_minibatches=minibatches),
                        torch.Generator().manual_seed(0), FORBIDDEN)
    assert opt.steps == epochs * minibatches
    if epochs * minibatches > 1:  # later updates see π_θ ≠ π_old
        assert float(metrics["ratio_std"]) > 0
    else:
        assert float(metrics["ratio_std"]) == 0 and float(metrics["clip_fraction"]) == 0


def test_magistral_advantages_are_normalised_per_minibatch():
    config = cfg(advantage_estimator="magistral", prompts_per_step=4, num_minibatches=2)
    rewards = torch.tensor([1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0], dtype=torch.float32)
    batch = type("B", (), {"rewards": rewards})()
    minibatches = grpo_module._minibatches(4, 2, 4)
    adv_fn = grpo_module._parts(config)[0]
    adv, _ = grpo_module._advantages(config, batch, adv_fn, minibatches, None, None, None, torch.zeros(16, 1, dtype=torch.bool))
    adv = adv[:, 0].double()
    for _, rows in minibatches:
        a = adv[rows]
        torch.testing.assert_close(a.reshape(-1, 4).mean(dim=1), torch.zeros(2, dtype=torch.float64), atol=1e-6, rtol=0)
        torch.testing.assert_close(a.pow(2).mean().sqrt(), torch.tensor(1.0, dtype=torch.float64), atol=1e-5, rtol=0)
    # one minibatch: the std of the whole batch, a different scale
    whole = rl.magistral_advantages(rewards, 4)
    assert not torch.allclose(whole.double(), adv)


# ----------------------------------------------------------------------------- ScaleRL's pool


def test_retired_prompts_are_never_drawn_again():
    task = StubTask("easy_half")
    hist = train_grpo(tiny(dtype=torch.float32), TOK, task, cfg(num_steps=6, prompts_per_step=8, retire_pass_rate=0.9),
                      progress=False)
    per_step = [task.seen[i * 32:(i + 1) * 32] for i in range(6)]
    retired, stub = set(), StubTask("easy_half")
    for step in per_step:
        assert not {p for p, _ in step} & retired
        for g in range(8):  # a group's pass rate above 0.9 (here: 4 of 4) retires its prompt from now on
            group = step[4 * g: 4 * g + 4]
            if np.mean([stub.reward(p, o) for p, o in group]) > 0.9:
                retired.add(group[0][0])
    assert hist["retired_prompts"][-1] == len(retired) > 0


# ----------------------------------------------------------------------------- on-policy identity of the losses


@pytest.mark.parametrize("loss", ["cispo", "gspo", "gspo_token", "dppo"])
def test_on_policy_every_per_token_loss_gives_the_grpo_update(loss):
    """μ = M = 1: ρ ≡ 1, nothing clips or masks, so each loss's gradient is GRPO's (up to CISPO's
    token-level aggregation, matched here by aggregating the same way)."""
    agg = "token_mean" if loss == "cispo" else "seq_mean_token_mean"
    low = 1.0 if loss == "cispo" else 3e-4 if loss.startswith("gspo") else 0.2
    grpo, _ = one_step(cfg(loss_aggregation=agg, clip_eps_low=low))
    other, metrics = one_step(cfg(loss_aggregation=agg, per_token_loss=loss, clip_eps_low=low))
    assert grpo.abs().max() > 1e-4
    torch.testing.assert_close(other, grpo, rtol=1e-6, atol=1e-12)
    assert float(metrics["clip_fraction"]) == 0


def test_off_policy_the_losses_differ_and_gspo_clips_whole_sequences():
    steps = {loss: one_step(cfg(num_inner_epochs=3, per_token_loss=loss, clip_eps_low=0.2 if loss != "gspo" else 3e-4),
                            lr=2.0)
             for loss in ("clipped_surrogate", "gspo", "dppo")}
    assert not torch.allclose(steps["gspo"][0], steps["clipped_surrogate"][0])
    assert not torch.allclose(steps["dppo"][0], steps["clipped_surrogate"][0])
    assert float(steps["gspo"][1]["clip_fraction"]) > 0  # a 3e-4 band on the sequence ratio is left quickly


# ----------------------------------------------------------------------------- PPO with a critic


def test_critic_values_equal_the_value_head_on_the_transformers_hidden_states():
    policy = tiny()
    critic = build_critic(policy, init_std=0.1)
    assert all(p.data_ptr() != q.data_ptr() for p, q in zip(critic.parameters(), policy.parameters()))
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(4, 16, (2, 5), generator=g)
    completion_ids = torch.randint(4, 16, (6, 4), generator=g)  # G = 3 completions per prompt
    values = critic_values(critic, prompt_ids, completion_ids)
    full = torch.cat([prompt_ids.repeat_interleave(3, dim=0), completion_ids], dim=1)
    hidden = critic.transformer(input_ids=full).last_hidden_state  # (6, 9, C), HF's own forward
    expected = (hidden @ critic.lm_head.weight.T + critic.lm_head.bias)[:, 4:8, 0]  # V(s_t): state before token t
    torch.testing.assert_close(values.double(), expected.double(), rtol=1e-5, atol=1e-6)


def test_gae_over_tokens_targets_the_final_reward_when_lambda_is_one():
    config = cfg(advantage_estimator="gae", gae_lambda=1.0, gamma=1.0)
    policy = tiny()
    critic = build_critic(policy, init_std=0.1)
    batch = collect_rollouts(policy, TOK, StubTask(), config, torch.Generator().manual_seed(0), FORBIDDEN)
    mask = batch.completion_mask
    adv, returns = grpo_module._gae_advantages(critic, batch, batch.prompt_ids, batch.prompt_mask, mask, config)
    # λ = γ = 1: every token's return is the completion's final reward, Â_t = r − V(s_t) (then whitened)
    torch.testing.assert_close(returns[mask], batch.rewards.double()[:, None].expand_as(mask)[mask].to(returns), rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        values = critic_values(critic, batch.prompt_ids, batch.completion_ids, batch.prompt_mask, mask)
    raw = (batch.rewards[:, None].to(values) - values)[mask]
    torch.testing.assert_close(adv[mask], ((raw - raw.mean()) / raw.std(unbiased=False)).to(adv), rtol=1e-4, atol=1e-5)


def test_ppo_recipe_trains_policy_and_critic():
    policy = tiny(dtype=torch.float32)
    before = flat(policy)
    hist = train_grpo(policy, TOK, StubTask(), GRPOConfig.recipe("ppo", group_size=4, prompts_per_step=4, num_steps=3,
                                                                  max_new_tokens=5, device="cpu"), progress=False)
    critic = hist.critic
    assert np.isfinite(hist["value_loss"]).all() and (flat(policy) != before).any()
    assert critic.lm_head.weight.abs().sum() > 0  # the head left its zero initialisation
    with pytest.raises(ValueError, match="critic"):
        grpo_step(tiny(), None, torch.optim.SGD(tiny().parameters(), lr=0.1), TOK, StubTask(),
                  cfg(advantage_estimator="gae"), torch.Generator().manual_seed(0), FORBIDDEN)


# ----------------------------------------------------------------------------- FP32 LM head


def test_fp32_lm_head_computes_float32_logits_from_bf16_weights_and_keeps_the_tie():
    policy = tiny(dtype=torch.bfloat16)
    ids = torch.randint(4, 16, (2, 6), generator=torch.Generator().manual_seed(0))
    hidden = policy.transformer(input_ids=ids).last_hidden_state
    fp32_lm_head(policy)
    fp32_lm_head(policy)  # idempotent
    logits = policy(input_ids=ids).logits
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, F.linear(hidden.float(), policy.transformer.wte.weight.float()))
    assert policy.lm_head.weight is policy.transformer.wte.weight
    logits.sum().backward()
    assert policy.transformer.wte.weight.grad is not None
    with pytest.raises(ValueError, match="lm_head"):
        fp32_lm_head(torch.nn.Module())


# ----------------------------------------------------------------------------- recipes and config errors


@pytest.mark.parametrize("name", sorted(GRPO_RECIPES))
def test_every_recipe_runs_and_updates_the_policy(name):
    policy = tiny(dtype=torch.float32)
    before = flat(policy)
    config = GRPOConfig.recipe(name, group_size=4, prompts_per_step=4, num_steps=2, max_new_tokens=5, device="cpu", lr=1e-2)
    hist = train_grpo(policy, TOK, StubTask(), config, progress=False)
    assert (flat(policy) != before).any(), name
    assert np.isfinite(hist["reward"]).all() and len(hist["reward"]) == 2


def test_max_completions_stops_at_the_budget():
    hist = train_grpo(tiny(dtype=torch.float32), TOK, StubTask(), cfg(num_steps=10, max_completions=40), progress=False)
    assert len(hist["reward"]) == 3 and hist["completions_generated"].sum() == 48


def test_config_bad_input_is_named():
    for kw, name in ((dict(divergence_threshold=0.0), "divergence_threshold"), (dict(max_sampling_rounds=0), "max_sampling_rounds"),
                     (dict(ref_reset_every=0), "ref_reset_every"), (dict(num_minibatches=3), "num_minibatches"),
                     (dict(dynamic_sampling=True, zero_variance_filter=True), "dynamic_sampling"),
                     (dict(retire_pass_rate=1.0), "retire_pass_rate"), (dict(divergence="js"), "divergence"),
                     (dict(max_completions=0), "max_completions"), (dict(gae_lambda=1.5), "gae_lambda"),
                     (dict(per_token_loss="gpo"), "per_token_loss")):
        with pytest.raises(ValueError, match=name):
            cfg(**kw)
    with pytest.raises(ValueError, match="name"):
        GRPOConfig.recipe("grpo2")


def test_mixed_groups_by_hand_and_its_errors():
    r = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5])
    assert mixed_groups(r, 2).tolist() == [False, True, False]
    assert mixed_groups(r, 3).tolist() == [True, True]
    assert mixed_groups(r, 1).tolist() == [False] * 6  # a group of one never carries a signal
    for bad in (0, -2, 4):
        with pytest.raises(ValueError, match="group_size"):
            mixed_groups(r, bad)
    with pytest.raises(ValueError, match="rewards"):
        mixed_groups(r.reshape(2, 3), 3)
