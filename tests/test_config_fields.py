"""Every trainer config field has a test that fails when the field is ignored, inverted or mis-wired.

A mutation test of the library showed that the bugs the fast suite missed were config knobs never
exercised with a value that matters (a gradient clip never reached, γ = λ = 1 where swapping them
changes nothing, a threshold never met at its boundary). Each test here sets a field to a value
that changes the outcome, and checks the outcome against a number computed independently of the
library's code path: a loss written out and differentiated by autograd, a closed form (the size
of Adam's first step is the learning rate; a clipped step is the unclipped one scaled by c/‖g‖),
an explicit loop (GAE as a forward sum, the schedule from its formula), or a difference two
settings must show. Where a test relies on a field changing the outcome it asserts that too, so
the check keeps its power if defaults move. ``FIELD_TESTS`` at the end names, for every field of
every config, the tests that pin it (here or in another file), and a test checks that the table
covers every field.

Configs: :class:`rlbook.GRPOConfig` (loop :func:`rlbook.train_grpo`), :class:`rlbook.algos.ppo.PPOConfig`,
:class:`rlbook.algos.trpo.TRPOConfig`, :class:`rlbook.algos.reinforce.ReinforceConfig`,
:class:`rlbook.lm.SFTConfig`, :class:`rlbook.algos.dpo.DPOConfig` (loop :func:`rlbook.algos.dpo.train_dpo`) and
:class:`rlbook.lm.RewardModelConfig` (loop :func:`rlbook.lm.train_reward_model`).
"""

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

import lm_helpers
import rlbook as rl
from rlbook import reference as ref
from rlbook.algos import grpo as grpo_module
from rlbook.algos.grpo import GRPO_RECIPES, GRPOConfig, grpo_step, train_grpo
from rlbook.algos.grpo_rollouts import collect_rollouts
from rlbook.lm.critic import build_critic, critic_values
from rlbook.lm.logprobs import completion_log_probs
from rlbook.lm.model import build_policy, policy_config
from rlbook.lm.task import AdditionTask
from rlbook.lm.tokenizer import build_char_tokenizer, forbidden_token_ids

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


def encode_seen(seen):
    """The recorded (prompt, completion) texts re-encoded: prompt ids and mask, completion ids and mask."""
    return lm_helpers.encode_seen(TOK, seen)


def rescore(policy, seen, temperature=1.0):
    """log π (B, T) at ``temperature`` of the recorded completions, re-encoded from their text."""
    prompt_ids, prompt_mask, completion_ids, mask = encode_seen(seen)
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
    G, N = config.group_size, config.prompts_per_step
    prompts = [p for p, _ in seen]
    assert len(seen) == G * N and all(prompts[i] == prompts[i - i % G] for i in range(G * N))  # N groups of G
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


def test_grpo_dynamic_sampling_stops_at_the_first_round_that_fills_the_batch():
    """DAPO's rounds: stop as soon as prompts_per_step mixed groups are found (≥, not >), keep the
    first prompts_per_step of them."""
    task = StubTask()
    config = cfg(dynamic_sampling=True, max_sampling_rounds=50, prompts_per_step=3)
    batch = collect_rollouts(tiny(), TOK, task, config, torch.Generator().manual_seed(0), FORBIDDEN)
    rewards = torch.tensor([float(sum(map(ord, o)) % 2) for _, o in task.seen]).reshape(-1, 3, 4)  # (rounds, N, G)
    mixed = (rewards != rewards[..., :1]).any(-1)  # (rounds, N)
    counts = mixed.sum(-1).cumsum(0)
    want_rounds = int((counts >= 3).nonzero()[0]) + 1
    assert batch.stats["rounds"] == want_rounds == rewards.shape[0]
    kept = [task.seen[4 * i][0] for i in range(len(task.seen) // 4) if mixed.reshape(-1)[i]][:3]
    assert [p.prompt for p in batch.problems] == kept


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


def test_grpo_logged_entropy_is_the_mean_over_minibatches():
    # lr = 0: every minibatch is scored at θ0, so with 2 minibatches the logged entropy is the mean of
    # two token-means of the same rollout, close to the 1-minibatch token-mean (a sum would double it)
    # and never above log V
    ents = []
    for mb in (1, 2):
        policy = tiny()
        opt = torch.optim.SGD(policy.parameters(), lr=0.0)
        m = grpo_step(policy, None, opt, TOK, StubTask(), cfg(prompts_per_step=2, num_minibatches=mb),
                      torch.Generator().manual_seed(0), FORBIDDEN)
        ents.append(float(m["entropy"]))
    assert 0 < ents[1] <= math.log(len(TOK)) and ents[1] == pytest.approx(ents[0], rel=0.05)


def test_grpo_optional_counts_accept_one():
    config = cfg(ref_reset_every=1, max_completions=1)
    assert (config.ref_reset_every, config.max_completions) == (1, 1)
    for name in ("ref_reset_every", "max_completions"):
        with pytest.raises(ValueError, match=name):
            cfg(**{name: 0})


def test_the_configs_the_chapters_print_are_the_librarys_defaults():
    """Chapters 3, 7 and 9 print ``rl.ReinforceConfig()``, ``rl.PPOConfig()`` and two GRPOConfigs:
    the stored outputs are what readers see as the defaults, so a default that changes without a
    rebuild of the chapter (or by a slip) fails here."""
    import json
    import re
    from pathlib import Path

    found = 0
    for nb in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            out = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")
            for line in "".join(cell["source"]).splitlines():
                m = re.fullmatch(r"print\((rl\.\w+Config\([^()]*\))\)", line.strip())
                if m:
                    found += 1
                    assert str(eval(m.group(1), {"rl": rl})) in out, (nb.name, m.group(1))
    assert found >= 4


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
    prompt_ids, prompt_mask, completion_ids, mask = encode_seen(seen)
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
# β = 0, seq-mean-token-mean, std-scaled group advantages). Sources in GRPOConfig's docstring; the
# values whose comment names a section follow that paper, the others pin the table as written (a
# change to a recipe must change this table too, deliberately).
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
    # Magistral §2.1: DAPO's parts (token-level loss, overlong, dynamic sampling, no KL), advantages
    # centred per group and scaled by the minibatch std; ε_high 0.28, the top of the range the paper
    # tuned it in (0.26-0.28)
    "magistral": dict(clip_eps_high=0.28, loss_aggregation="token_mean", kl_coef=0.0, overlong_filter=True,
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


# ============================================================================= PPOConfig

from rlbook.algos import ppo as ppo_module  # noqa: E402
from rlbook.algos import reinforce as reinforce_module  # noqa: E402
from rlbook.algos import trpo as trpo_module  # noqa: E402
from rlbook.algos.ppo import PPOConfig, ppo_minibatch_step, train_ppo  # noqa: E402
from rlbook.algos.reinforce import CategoricalMLPPolicy, ReinforceConfig, train_reinforce  # noqa: E402
from rlbook.algos.trpo import TRPOConfig, train_trpo, trpo_policy_update  # noqa: E402
from rlbook.envs.cartpole import EpisodeBatcher  # noqa: E402
from rlbook.nets import ActorCritic, mlp  # noqa: E402


def _actor_critic(seed=0):
    torch.manual_seed(seed)
    model = ActorCritic(4, 3, (16, 16)).double()
    with torch.no_grad():  # a non-uniform policy (the default init is almost uniform)
        model.actor[-1].weight.mul_(100.0)
    return model


def _minibatch(model, m=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(m, 4, generator=g, dtype=DT)
    actions = torch.randint(0, 3, (m,), generator=g)
    with torch.no_grad():
        lp = torch.log_softmax(model.logits(obs), -1).gather(-1, actions[:, None]).squeeze(-1)
        values = model.value(obs)
    return {"obs": obs, "actions": actions, "old_log_probs": lp + 0.3 * torch.randn(m, generator=g, dtype=DT),
            "old_values": values + 0.2 * torch.randn(m, generator=g, dtype=DT),
            "advantages": torch.randn(m, generator=g, dtype=DT), "returns": torch.randn(m, generator=g, dtype=DT)}


def _ppo_loss_by_hand(model, mb, c):
    """−mean min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)Â) + vf·mean ½max((V−R)², (V_old + clip(V−V_old, ±ε_v) − R)²)
    − ent·H, written out."""
    logits = model.logits(mb["obs"])
    log_p = torch.log_softmax(logits, -1)
    lp = log_p.gather(-1, mb["actions"][:, None]).squeeze(-1)
    adv = mb["advantages"]
    if c.norm_advantages:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = torch.exp(lp - mb["old_log_probs"])
    high = c.clip_eps_low if c.clip_eps_high is None else c.clip_eps_high
    policy = -torch.minimum(ratio * adv, ratio.clamp(1 - c.clip_eps_low, 1 + high) * adv).mean()
    v = model.value(mb["obs"])
    plain = (v - mb["returns"]) ** 2
    if c.clip_value_eps is None:
        value = (0.5 * plain).mean()
    else:
        v_clip = mb["old_values"] + (v - mb["old_values"]).clamp(-c.clip_value_eps, c.clip_value_eps)
        value = (0.5 * torch.maximum(plain, (v_clip - mb["returns"]) ** 2)).mean()
    entropy = -(log_p.exp() * log_p).sum(-1).mean()
    return policy + c.vf_coef * value - c.ent_coef * entropy, policy, value


@pytest.mark.parametrize("fields", [
    dict(clip_eps_low=0.1, clip_eps_high=0.3, clip_value_eps=0.05),
    dict(clip_eps_low=0.3, clip_eps_high=0.1, clip_value_eps=0.02),
])
def test_ppo_minibatch_step_with_an_asymmetric_band_and_a_clipped_value_loss(fields):
    """Δθ = −lr·∇L of the written-out loss with both ends of the band and the PPO2 value clip
    active; swapping ε_low/ε_high or dropping the value clip changes the loss (checked)."""
    c = PPOConfig(vf_coef=0.7, ent_coef=0.05, max_grad_norm=None, target_kl=None, **fields)
    model = _actor_critic()
    mb = _minibatch(model)
    before = copy.deepcopy(model)
    loss, policy, value = _ppo_loss_by_hand(before, mb, c)
    for other in (dict(clip_eps_low=c.clip_eps_high, clip_eps_high=c.clip_eps_low), dict(clip_value_eps=None)):
        assert abs((_ppo_loss_by_hand(before, mb, dataclasses.replace(c, **other))[0] - loss).item()) > 1e-4, other
    grads = torch.autograd.grad(loss, list(before.parameters()))
    out = ppo_minibatch_step(model, torch.optim.SGD(model.parameters(), lr=0.05), mb, c)
    torch.testing.assert_close(out["policy_loss"], policy.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out["value_loss"], value.detach(), rtol=1e-12, atol=1e-12)
    step = flat(model) - flat(before)
    torch.testing.assert_close(step, -0.05 * torch.cat([g.reshape(-1) for g in grads]), rtol=1e-9, atol=1e-12)


def hand_gae_rows(rollout, gamma, lam):
    """(N, T) advantages by rlbook.reference.gae_loop (an explicit forward sum), one env at a time."""
    rows = [ref.gae_loop(*(x[i].tolist() for x in (rollout.rewards, rollout.values, rollout.next_values,
                                                   rollout.terminated, rollout.truncated)), gamma, lam)[0]
            for i in range(rollout.rewards.shape[0])]
    return torch.tensor(rows, dtype=torch.float32)


def _spy(monkeypatch, module, name, record):
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        out = real(*args, **kwargs)
        record.append((args, kwargs, out))
        return out

    monkeypatch.setattr(module, name, wrapper)


@pytest.mark.parametrize("schedule", ["linear", "constant"])
def test_train_ppo_gae_lr_schedule_rollout_shape_network_and_clip_fraction(monkeypatch, schedule):
    """γ = 0.9, λ = 0.5 (their swap changes the advantages), lr 3e-2 on its schedule (the value the
    optimiser holds during the update, not only the logged one), the seed's three uses, num_envs × num_steps rollouts,
    hidden_sizes / activation of both networks, and clip_fraction over the asymmetric band."""
    rollouts, updates, seeds, envs = [], [], [], []
    _spy(monkeypatch, ppo_module, "collect_rollout", rollouts)
    _spy(monkeypatch, ppo_module, "make_cartpole_vector_env", envs)
    real_update = ppo_module.ppo_update

    def update(model, optimizer, batch, config, generator):
        updates.append((optimizer.param_groups[0]["lr"], {k: v.clone() for k, v in batch.items()}))
        seeds.append(generator.initial_seed())
        return real_update(model, optimizer, batch, config, generator)

    monkeypatch.setattr(ppo_module, "ppo_update", update)
    c = PPOConfig(total_env_steps=48, num_envs=3, num_steps=8, gamma=0.9, gae_lambda=0.5, lr=3e-2, lr_schedule=schedule,
                  clip_eps_low=0.05, clip_eps_high=0.5, num_epochs=3, minibatch_size=16, hidden_sizes=(8,),
                  activation="relu", target_kl=None, seed=7)
    hist = train_ppo(c, progress=False)
    # the seed seeds all three: torch (the init), the sampling/shuffling generator, the envs
    assert torch.initial_seed() == 7 and seeds == [7, 7] and envs[0][0] == (3, 7)
    want_lr = [3e-2, 1.5e-2] if schedule == "linear" else [3e-2, 3e-2]
    np.testing.assert_allclose(hist["lr"], want_lr, rtol=1e-12)
    assert [lr for lr, _ in updates] == pytest.approx(want_lr, rel=1e-12)
    for (args, _, rollout), (_, batch) in zip(rollouts, updates):
        assert rollout.obs.shape == (3, 8, 4) and args[-1] == 8  # num_steps = 8 (the default is 16)
        adv = hand_gae_rows(rollout, 0.9, 0.5)
        torch.testing.assert_close(batch["advantages"], adv.reshape(-1), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(batch["returns"], (adv + rollout.values).reshape(-1), rtol=1e-5, atol=1e-5)
        swapped = hand_gae_rows(rollout, 0.5, 0.9)
        assert not torch.allclose(swapped, adv, atol=1e-3)
    model = hist.model
    for net, out in ((model.actor, 2), (model.critic, 1)):
        assert [type(m).__name__ for m in net] == ["Linear", "ReLU", "Linear"]
        assert (net[0].in_features, net[0].out_features, net[2].out_features) == (4, 8, out)
    batch = updates[-1][1]
    with torch.no_grad():
        lp = torch.log_softmax(model.logits(batch["obs"]), -1).gather(-1, batch["actions"][:, None]).squeeze(-1)
    ratio = torch.exp(lp - batch["old_log_probs"])
    want = ((ratio < 0.95) | (ratio > 1.5)).float().mean()
    assert 0 < float(want) and float(((ratio < 0.5) | (ratio > 1.05)).float().mean()) != float(want)
    assert hist["clip_fraction"][-1] == pytest.approx(float(want), abs=1e-7)


def _stops_at_first_crossing(hist, threshold, window, updates_seen):
    """The run stopped after the first update whose episodes so far reach a full-window rolling mean ≥ threshold."""
    ends = np.asarray(hist.episode_end_steps)
    returns = np.asarray(hist.episode_returns, dtype=float)
    reached = []
    for env_steps in updates_seen:
        r = returns[ends <= env_steps]
        reached.append(len(r) >= window and any(r[i - window + 1: i + 1].mean() >= threshold
                                                  for i in range(window - 1, len(r))))
    assert reached[-1] and not any(reached[:-1]), reached


def test_train_ppo_and_trpo_stop_at_return_over_stop_window():
    for train, config in ((train_ppo, PPOConfig(total_env_steps=4096, num_envs=2, num_steps=32, num_epochs=1,
                                                minibatch_size=64, stop_at_return=30.0, stop_window=3, seed=1)),
                          (train_trpo, TRPOConfig(total_env_steps=4096, num_envs=2, num_steps=32, critic_epochs=1,
                                                  stop_at_return=30.0, stop_window=3, seed=1))):
        hist = train(config, progress=False)
        assert hist["env_steps"][-1] < 4096  # it stopped early
        _stops_at_first_crossing(hist, 30.0, 3, hist["env_steps"])
        # at the boundary (≥, not >): with the threshold set to the highest full-window mean of that run
        # (reached in its last update, every earlier one being below 30), the same run stops at the same update
        r = np.asarray(hist.episode_returns, dtype=float)
        top = max(r[i - 2: i + 1].sum() / 3 for i in range(2, len(r)))  # = the library's cumsum mean, bit for bit
        assert top >= 30.0
        assert train(dataclasses.replace(config, stop_at_return=float(top)), progress=False)["env_steps"][-1] == \
            hist["env_steps"][-1]
        # the window matters: over 20 episodes the same threshold is reached later (or never)
        longer = train(dataclasses.replace(config, stop_window=20), progress=False)
        assert longer["env_steps"][-1] > hist["env_steps"][-1]


def test_train_ppo_trpo_and_reinforce_seed_changes_the_run():
    runs = {
        "ppo": lambda s: train_ppo(PPOConfig(seed=s, total_env_steps=64, num_envs=2, num_steps=32, num_epochs=1,
                                             minibatch_size=64), progress=False)["loss"],
        "trpo": lambda s: train_trpo(TRPOConfig(seed=s, total_env_steps=64, num_envs=2, num_steps=32, critic_epochs=1),
                                     progress=False)["value_loss"],
        "reinforce": lambda s: train_reinforce(ReinforceConfig(seed=s, total_env_steps=1, episodes_per_batch=2,
                                                               hidden_sizes=(8,)), progress=False)["loss"],
    }
    for name, run in runs.items():
        a, b = run(0), run(1)
        np.testing.assert_array_equal(a, run(0))
        assert not np.array_equal(a, b), name


@pytest.mark.parametrize("which", ["grpo", "ppo", "trpo", "reinforce", "sft", "dpo", "reward_model"])
def test_every_trainer_asks_for_its_configured_device(monkeypatch, which):
    asked = []
    module = {"grpo": grpo_module, "ppo": ppo_module, "trpo": trpo_module, "reinforce": reinforce_module,
              "sft": rl.lm.sft, "dpo": dpo_module, "reward_model": rm_module}[which]
    real = module.get_device
    monkeypatch.setattr(module, "get_device", lambda d=None: asked.append(d) or real(d))
    run = {
        "grpo": lambda: train_grpo(tiny(dtype=torch.float32), TOK, StubTask(), cfg(num_steps=1, device="cpu"), progress=False),
        "ppo": lambda: train_ppo(PPOConfig(total_env_steps=64, num_envs=2, num_steps=32, num_epochs=1, minibatch_size=64,
                                           device="cpu"), progress=False),
        "trpo": lambda: train_trpo(TRPOConfig(total_env_steps=64, num_envs=2, num_steps=32, critic_epochs=1, device="cpu"),
                                   progress=False),
        "reinforce": lambda: train_reinforce(ReinforceConfig(total_env_steps=1, episodes_per_batch=2, device="cpu"),
                                             progress=False),
        "sft": lambda: rl.lm.train_sft(tiny(dtype=torch.float32), TOK, AdditionTask(),
                                       rl.lm.SFTConfig(num_steps=1, batch_size=4, device="cpu"), progress=False),
        "dpo": lambda: _pair_trainer("dpo", dict(num_steps=1, batch_size=2), dtype=torch.float32)[1](),
        "reward_model": lambda: _pair_trainer("reward_model", dict(num_steps=1, batch_size=2), dtype=torch.float32)[1](),
    }[which]
    run()
    assert asked == ["cpu"]


# ============================================================================= TRPOConfig


def _trpo_problem(seed=0):
    torch.manual_seed(seed)
    actor = mlp([4, 5, 3]).double()
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(64, 4, generator=g, dtype=DT)
    actions = torch.randint(0, 3, (64,), generator=g)
    adv = 100 * torch.randn(64, generator=g, dtype=DT)  # ‖g‖² ≫ CG's absolute tolerance 1e-10: CG solves exactly
    return actor, obs, actions, adv


def _trpo_by_hand(actor, obs, actions, adv, c):
    """The TRPO step from explicit matrices: g = ∇ mean(ρÂ), A = F + damping·I with F the Hessian of
    the mean KL (autograd), x = A⁻¹g (or, for cg_iters = 1, CG's first iterate (gᵀg/gᵀAg)·g),
    s = √(2δ/xᵀAx)·x; then the line search replayed: θ₀ + βᵏs for k < max_backtracks, the first
    with KL ≤ δ, ΔL > 0 and ΔL ≥ accept_ratio·βᵏ·gᵀs."""
    theta0 = torch.nn.utils.parameters_to_vector(actor.parameters()).detach()
    with torch.no_grad():
        old_logits = actor(obs)
        old_lp = old_logits.log_softmax(-1).gather(-1, actions[:, None]).squeeze(-1)

    names, shapes = [n for n, _ in actor.named_parameters()], [p.shape for p in actor.parameters()]

    def forward(theta):
        pieces = torch.split(theta, [math.prod(shape) for shape in shapes])
        return torch.func.functional_call(actor, {n: t.reshape(shape) for n, t, shape in zip(names, pieces, shapes)}, (obs,))

    def surrogate(theta):
        lp = forward(theta).log_softmax(-1).gather(-1, actions[:, None]).squeeze(-1)
        return (torch.exp(lp - old_lp) * adv).mean()

    def mean_kl(theta):
        p_old = old_logits.softmax(-1)
        return (p_old * (old_logits.log_softmax(-1) - forward(theta).log_softmax(-1))).sum(-1).mean()

    g = torch.autograd.functional.jacobian(surrogate, theta0)
    A = torch.autograd.functional.hessian(mean_kl, theta0) + c.damping * torch.eye(len(theta0), dtype=DT)
    x = (g @ g) / (g @ A @ g) * g if c.cg_iters == 1 else torch.linalg.solve(A, g)
    s = torch.sqrt(2 * c.max_kl / (x @ A @ x)) * x
    expected = float(g @ s)
    f0 = float(surrogate(theta0))
    theta, accepted, k_used = theta0, False, c.max_backtracks
    for k in range(c.max_backtracks):
        cand = theta0 + c.backtrack_coef ** k * s
        gain = float(surrogate(cand)) - f0
        if float(mean_kl(cand)) <= c.max_kl and gain > 0 and gain >= c.accept_ratio * c.backtrack_coef ** k * expected:
            theta, accepted, k_used = cand, True, k
            break
    return dict(expected=expected, step_norm=float(s.norm()), theta=theta, accepted=accepted, backtracks=k_used,
                kl=float(mean_kl(theta)))


TRPO_CASES = [
    dict(max_kl=0.003, damping=0.3, cg_iters=1),
    dict(max_kl=0.003, damping=0.3, cg_iters=200),
    dict(max_kl=2.0, damping=0.05, cg_iters=200, backtrack_coef=0.5, max_backtracks=10, accept_ratio=0.1),
    dict(max_kl=2.0, damping=0.05, cg_iters=200, backtrack_coef=0.5, max_backtracks=10, accept_ratio=0.9),
    dict(max_kl=2.0, damping=0.05, cg_iters=200, backtrack_coef=0.3, max_backtracks=10, accept_ratio=0.1),
    # 4 backtracks are needed (case above), only k = 0 … 3 are tried: the step is rejected
    dict(max_kl=2.0, damping=0.05, cg_iters=200, backtrack_coef=0.5, max_backtracks=4, accept_ratio=0.9),
]


@pytest.mark.parametrize("fields", TRPO_CASES, ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_trpo_policy_update_is_the_damped_natural_step_at_max_kl_and_the_configured_line_search(fields):
    c = TRPOConfig(**fields)
    actor, obs, actions, adv = _trpo_problem()
    want = _trpo_by_hand(copy.deepcopy(actor), obs, actions, adv, c)
    got = trpo_policy_update(actor, obs, actions, adv, c)
    assert got["expected_improvement"] == pytest.approx(want["expected"], rel=1e-6)
    assert got["step_norm"] == pytest.approx(want["step_norm"], rel=1e-6)
    assert (got["backtracks"], bool(got["step_accepted"])) == (want["backtracks"], want["accepted"])
    torch.testing.assert_close(torch.nn.utils.parameters_to_vector(actor.parameters()).detach(), want["theta"],
                               rtol=1e-6, atol=1e-7)


def test_trpo_cases_have_power():
    """Each line-search and step field, put back to its default in some case above, changes the
    outcome (the expected improvement, the backtracks, acceptance or the new parameters)."""
    default, changed = TRPOConfig(), set()
    actor, obs, actions, adv = _trpo_problem()
    for fields in TRPO_CASES:
        c = TRPOConfig(**fields)
        want = _trpo_by_hand(copy.deepcopy(actor), obs, actions, adv, c)
        for name in fields:
            other = _trpo_by_hand(copy.deepcopy(actor), obs, actions, adv, dataclasses.replace(c, **{name: getattr(default, name)}))
            if (abs(other["expected"] - want["expected"]) > 1e-6 * abs(want["expected"])
                    or (other["backtracks"], other["accepted"]) != (want["backtracks"], want["accepted"])
                    or not torch.allclose(other["theta"], want["theta"])):
                changed.add(name)
    assert changed == {"max_kl", "damping", "cg_iters", "backtrack_coef", "max_backtracks", "accept_ratio"}


@pytest.mark.parametrize("norm_advantages", [False, True])
def test_train_trpo_gae_advantages_and_the_critic_fit(monkeypatch, norm_advantages):
    """γ = 0.9, λ = 0.5 GAE (standardised or not) reaches the policy step; the critic is fitted by
    critic_epochs × ⌈batch/critic_minibatch_size⌉ Adam steps at critic_lr; the networks have the
    configured hidden sizes and activation."""
    rollouts, policy_calls, adams, fits, envs = [], [], [], [], []
    _spy(monkeypatch, trpo_module, "collect_rollout", rollouts)
    _spy(monkeypatch, trpo_module, "trpo_policy_update", policy_calls)
    _spy(monkeypatch, trpo_module, "_fit_critic", fits)
    _spy(monkeypatch, trpo_module, "make_cartpole_vector_env", envs)
    real_adam = torch.optim.Adam

    class CountingAdam(real_adam):
        def __init__(self, params, lr=1e-3, **kw):
            super().__init__(params, lr=lr, **kw)
            self.steps, self.lr = 0, lr
            adams.append(self)

        def step(self, closure=None):
            self.steps += 1
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "Adam", CountingAdam)
    c = TRPOConfig(total_env_steps=48, num_envs=3, num_steps=16, gamma=0.9, gae_lambda=0.5, critic_lr=0.02,
                   critic_epochs=3, critic_minibatch_size=20, norm_advantages=norm_advantages, hidden_sizes=(8,),
                   activation="relu", seed=7)
    hist = train_trpo(c, progress=False)
    assert torch.initial_seed() == 7 and fits[0][0][-1].initial_seed() == 7 and envs[0][0] == (3, 7)
    (args, _, rollout), = rollouts
    assert rollout.obs.shape == (3, 16, 4) and args[-1] == 16
    adv = hand_gae_rows(rollout, 0.9, 0.5).reshape(-1)
    if norm_advantages:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    (call_args, _, _), = policy_calls
    torch.testing.assert_close(call_args[3], adv, rtol=1e-5, atol=1e-5)
    assert call_args[4] is c
    (critic_opt,) = adams
    assert critic_opt.lr == 0.02 and critic_opt.steps == 3 * 3  # 48 transitions in minibatches of 20, 20, 8
    for net, out in ((hist.model.actor, 2), (hist.model.critic, 1)):
        assert [type(m).__name__ for m in net] == ["Linear", "ReLU", "Linear"]
        assert (net[0].out_features, net[2].out_features) == (8, out)


# ============================================================================= ReinforceConfig


REINFORCE_CASES = [
    dict(return_kind="total", baseline="mean", gamma=0.9, normalize_advantages=False, max_grad_norm=None),
    dict(return_kind="rewards_to_go", baseline="value", gamma=0.8, normalize_advantages=True, max_grad_norm=0.5,
         value_lr=0.03, value_epochs=3),
    dict(return_kind="rewards_to_go", baseline="optimal", gamma=0.95, normalize_advantages=False, max_grad_norm=None),
    dict(return_kind="rewards_to_go", baseline="none", gamma=0.7, normalize_advantages=True, max_grad_norm=None),
]


@pytest.mark.parametrize("fields", REINFORCE_CASES, ids=lambda f: f"{f['return_kind']}-{f['baseline']}")
def test_train_reinforce_update_is_the_configured_estimator(monkeypatch, fields):
    """One update with Adam replaced by plain SGD (so Δθ = −lr·clip(g)): the logged loss, weights'
    std and baseline mean, and the step are those of the estimator written out with the configured
    return kind, γ, baseline, normalisation and clip; the value baseline's fit is value_epochs
    full-batch steps at value_lr."""
    monkeypatch.setattr(torch.optim, "Adam", lambda params, lr: torch.optim.SGD(params, lr=lr))
    batches = []
    real_collect = EpisodeBatcher.collect
    monkeypatch.setattr(EpisodeBatcher, "collect", lambda self, pol: batches.append(real_collect(self, pol)) or batches[-1])
    seeds = []  # the seed's other two uses: the sampling generator and the envs
    real_act, real_init = CategoricalMLPPolicy.act, EpisodeBatcher.__init__
    monkeypatch.setattr(CategoricalMLPPolicy, "act", lambda self, o, generator=None: seeds.append(
        ("act", generator.initial_seed())) or real_act(self, o, generator))
    monkeypatch.setattr(EpisodeBatcher, "__init__", lambda self, n, seed=0, **kw: seeds.append(("envs", seed)) or real_init(
        self, n, seed=seed, **kw))
    c = ReinforceConfig(seed=2, episodes_per_batch=3, total_env_steps=1, lr=0.05, hidden_sizes=(8,), device="cpu", **fields)
    hist = train_reinforce(c, progress=False)
    (batch,) = batches
    assert batch.obs.shape[0] == 3 and set(seeds) == {("act", 2), ("envs", 2)}
    torch.manual_seed(2)  # the initial networks, as train_reinforce builds them from the seed
    policy = CategoricalMLPPolicy(hidden_sizes=(8,))
    value_fn = mlp((4, 8, 1)) if c.baseline == "value" else None
    N, T = batch.rewards.shape
    w = torch.zeros(N, T)
    for i in range(N):
        n, r = int(batch.lengths[i]), batch.rewards[i].tolist()
        for t in range(n):
            if c.return_kind == "total":
                w[i, t] = sum(c.gamma ** k * r[k] for k in range(n))
            else:
                w[i, t] = sum(c.gamma ** (k - t) * r[k] for k in range(t, n))
    mask = batch.mask
    params = list(policy.parameters())

    def log_prob():
        return torch.log_softmax(policy(batch.obs), -1).gather(-1, batch.actions[..., None]).squeeze(-1)

    if c.baseline == "none":
        b = torch.zeros(N, T)
    elif c.baseline == "mean":
        b = torch.full((N, T), float(w[mask].mean()))
    elif c.baseline == "value":
        with torch.no_grad():
            b = value_fn(batch.obs).squeeze(-1) * mask
    else:  # b* = Σ_i u_i·v_i / Σ_i ‖u_i‖², u_i = Σ_t ∇log π, v_i = Σ_t w_t ∇log π
        u, v = [], []
        for i in range(N):
            lp_i = log_prob()[i][mask[i]]
            u.append(torch.cat([x.reshape(-1) for x in torch.autograd.grad(lp_i.sum(), params, retain_graph=True)]))
            v.append(torch.cat([x.reshape(-1) for x in torch.autograd.grad((lp_i * w[i][mask[i]]).sum(), params)]))
        b = torch.full((N, T), float(sum(a @ bb for a, bb in zip(u, v)) / sum(a @ a for a in u)))
    adv = (w - b) * mask
    if c.normalize_advantages:
        adv = adv / (adv[mask].std() + 1e-8)
    loss = -(log_prob() * adv * mask).sum() / N
    g = torch.cat([x.reshape(-1) for x in torch.autograd.grad(loss, params)])
    assert hist["loss"][0] == pytest.approx(loss.item(), rel=1e-4, abs=1e-6)
    assert hist["weight_std"][0] == pytest.approx(float(w[mask].std()), rel=1e-5)
    assert hist["baseline_mean"][0] == pytest.approx(float(b[mask].mean()), rel=1e-5, abs=1e-6)
    assert hist["grad_norm"][0] == pytest.approx(float(g.norm()), rel=1e-5)
    scale = 1.0 if c.max_grad_norm is None else min(1.0, c.max_grad_norm / (float(g.norm()) + 1e-6))
    if c.max_grad_norm is not None:
        assert scale < 1  # the clip acts
    torch.testing.assert_close(flat(hist.policy) - flat(policy), -0.05 * scale * g, rtol=1e-4, atol=1e-7)
    if value_fn is not None:  # value_epochs SGD steps on ½ mean (V − rtg)² over the valid steps
        rtg = torch.zeros(N, T)
        for i in range(N):
            n, r = int(batch.lengths[i]), batch.rewards[i].tolist()
            for t in range(n):
                rtg[i, t] = sum(c.gamma ** (k - t) * r[k] for k in range(t, n))
        for _ in range(c.value_epochs):
            vl = 0.5 * (value_fn(batch.obs[mask]).squeeze(-1) - rtg[mask]).pow(2).mean()
            grads = torch.autograd.grad(vl, list(value_fn.parameters()))
            with torch.no_grad():
                for p, gp in zip(value_fn.parameters(), grads):
                    p -= c.value_lr * gp
        torch.testing.assert_close(flat(hist.value_fn), flat(value_fn), rtol=1e-5, atol=1e-7)
        assert hist["value_loss"][0] == pytest.approx(vl.item(), rel=1e-5)


def test_train_reinforce_episodes_per_batch_and_total_env_steps():
    c = ReinforceConfig(seed=0, episodes_per_batch=3, total_env_steps=150, hidden_sizes=(8,), device="cpu")
    hist = train_reinforce(c, progress=False)
    steps = hist["env_steps"]
    assert len(hist.episode_returns) == 3 * len(steps)
    per_update = np.diff(np.concatenate([[0], steps]))
    lengths = np.asarray(hist.episode_lengths).reshape(-1, 3).sum(1)
    np.testing.assert_array_equal(per_update, lengths)
    assert steps[-1] >= 150 > steps[-2]  # stops at the first update that reaches the budget


def test_train_reinforce_total_env_steps_is_reached_not_passed():
    """A budget equal to the env steps after two updates gives exactly two updates (the loop runs
    while fewer steps than the budget were taken)."""
    base = dict(seed=0, episodes_per_batch=3, hidden_sizes=(8,), device="cpu")
    steps = train_reinforce(ReinforceConfig(total_env_steps=300, **base), progress=False)["env_steps"]
    exact = train_reinforce(ReinforceConfig(total_env_steps=int(steps[1]), **base), progress=False)
    assert exact["env_steps"].tolist() == steps[:2].tolist()


def test_train_reinforce_stop_needs_a_full_window_of_20_episodes():
    """With a threshold every episode beats, the run stops at the first update with 20 episodes
    (3 updates of 8), not earlier on a shorter window."""
    hist = train_reinforce(ReinforceConfig(seed=0, episodes_per_batch=8, total_env_steps=20_000, hidden_sizes=(8,),
                                           stop_at_return=5.0, device="cpu"), progress=False)
    assert min(hist.episode_returns) >= 5.0 and hist.num_updates == 3


def test_train_reinforce_clears_the_gradient_before_every_backward(monkeypatch):
    # with Adam replaced by SGD at lr = 0 the policy never moves, so each update's gradient is that
    # of its own batch alone: the gradient seen at step k must not contain step k−1's
    grads = []

    class RecordingSGD(torch.optim.SGD):
        def step(self, closure=None):
            grads.append(torch.cat([p.grad.reshape(-1).clone() for p in self.param_groups[0]["params"]]))
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "Adam", lambda params, lr: RecordingSGD(params, lr=0.0))
    batches = []
    real_collect = EpisodeBatcher.collect
    monkeypatch.setattr(EpisodeBatcher, "collect", lambda self, pol: batches.append(real_collect(self, pol)) or batches[-1])
    c = ReinforceConfig(seed=3, episodes_per_batch=3, total_env_steps=300, hidden_sizes=(8,), baseline="none",
                        normalize_advantages=False, max_grad_norm=None, device="cpu")
    train_reinforce(c, progress=False)
    assert len(grads) == len(batches) >= 2
    torch.manual_seed(3)
    policy = CategoricalMLPPolicy(hidden_sizes=(8,))  # θ0, never moved (lr = 0)
    for g, batch in zip(grads, batches):
        w = rl.rewards_to_go(batch.rewards, c.gamma, terminated=batch.terminated, truncated=batch.truncated) * batch.mask
        lp = torch.log_softmax(policy(batch.obs), -1).gather(-1, batch.actions[..., None]).squeeze(-1)
        loss = -(lp * w * batch.mask).sum() / batch.obs.shape[0]
        want = torch.cat([x.reshape(-1) for x in torch.autograd.grad(loss, list(policy.parameters()))])
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threshold", [25.0, 26.5])
def test_train_reinforce_stop_at_return_is_the_rolling_20_mean(threshold):
    # at 26.5 (measured, one thread) the rolling 20 first reaches the bar one update before the
    # rolling 21 would: a window of the wrong width stops one update late
    c = ReinforceConfig(seed=0, episodes_per_batch=8, total_env_steps=20_000, hidden_sizes=(8,),
                        stop_at_return=threshold, device="cpu")
    hist = train_reinforce(c, progress=False)
    returns = np.asarray(hist.episode_returns, dtype=float)
    reached = [k * 8 >= 20 and returns[k * 8 - 20: k * 8].mean() >= threshold for k in range(1, hist.num_updates + 1)]
    assert reached[-1] and not any(reached[:-1]) and hist.num_updates > 3


# ============================================================================= SFTConfig


def test_train_sft_replays_with_every_field_off_its_default():
    """A written-out loop (batch from sft_batch with the configured size, noises and seed; token-mean
    NLL; clip to max_grad_norm; AdamW with the configured weight decay; lr = peak × the warm-up then
    cosine-to-10 % factor computed here) gives the same losses, lrs, gradient norms and weights."""
    from rlbook.lm.sft import sft_batch

    c = rl.lm.SFTConfig(num_steps=5, batch_size=16, lr=1e-2, warmup_steps=2, weight_decay=0.3, label_noise=0.3,
                        carry_noise=0.7, max_grad_norm=0.05, seed=5, device="cpu")
    task = AdditionTask()
    policy, replay = tiny(dtype=torch.float32), tiny(dtype=torch.float32)
    hist = rl.lm.train_sft(policy, TOK, task, c, progress=False)

    def factor(s):  # (s+1)/W during warm-up, then 0.1 + 0.9·½(1 + cos(π·progress))
        return (s + 1) / 2 if s < 2 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - 2) / 3))

    generator = torch.Generator().manual_seed(5)
    opt = torch.optim.AdamW(replay.parameters(), lr=1e-2, weight_decay=0.3)
    losses, lrs, norms = [], [], []
    for s in range(5):
        prompt_ids, prompt_mask, target_ids, target_mask, _ = sft_batch(TOK, task, 16, 0.3, generator, carry_noise=0.7)
        lp = completion_log_probs(replay, prompt_ids, target_ids, prompt_mask, completion_mask=target_mask)
        loss = -(lp * target_mask).sum() / target_mask.sum()
        opt.zero_grad()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(replay.parameters(), 0.05)))
        for group in opt.param_groups:
            group["lr"] = 1e-2 * factor(s)
        lrs.append(1e-2 * factor(s))
        opt.step()
        losses.append(loss.item())
    assert min(norms) > 0.05  # the clip acts at every step
    np.testing.assert_allclose(hist["lr"], lrs, rtol=1e-12)
    np.testing.assert_allclose(hist["loss"], losses, rtol=1e-5)
    np.testing.assert_allclose(hist["grad_norm"], norms, rtol=1e-4)
    torch.testing.assert_close(flat(policy), flat(replay), rtol=1e-4, atol=1e-6)
    # power: the labels' noise and the seed change the batches, the decay the weights
    for other in (dict(label_noise=0.0), dict(carry_noise=0.0), dict(seed=6), dict(batch_size=8)):
        o = dataclasses.replace(c, **other)
        a = sft_batch(TOK, task, o.batch_size, o.label_noise, torch.Generator().manual_seed(o.seed), o.carry_noise)[2]
        b = sft_batch(TOK, task, 16, 0.3, torch.Generator().manual_seed(5), 0.7)[2]
        assert a.shape != b.shape or not torch.equal(a, b), other


def test_train_sft_weight_decay_is_decoupled_and_scaled_by_the_lr():
    """Two one-step runs that differ only in weight decay: θ_wd − θ_0 = −lr_0·wd·θ_init exactly
    (AdamW's decoupled decay; lr_0 = lr/warmup_steps), the Adam part being the same."""
    runs = {}
    for wd in (0.0, 0.5):
        policy = tiny(dtype=torch.float64)
        init = flat(policy)
        rl.lm.train_sft(policy, TOK, AdditionTask(), rl.lm.SFTConfig(num_steps=1, batch_size=8, lr=4e-3, warmup_steps=4,
                                                                     weight_decay=wd, device="cpu"), progress=False)
        runs[wd] = flat(policy)
    torch.testing.assert_close(runs[0.5] - runs[0.0], -(4e-3 / 4) * 0.5 * init, rtol=1e-6, atol=1e-12)


# ============================================================================= DPOConfig and RewardModelConfig

from rlbook.algos import dpo as dpo_module  # noqa: E402
from rlbook.algos.dpo import DPOConfig, dpo_step, preference_loss, train_dpo  # noqa: E402
from rlbook.lm.dpo import encode_preference_pairs, sequence_log_probs  # noqa: E402
from rlbook.lm.reward_model import RewardModelConfig, build_reward_model, train_reward_model  # noqa: E402

rm_module = rl.lm.reward_model  # the module (its trainer looks up reward_model_step and get_device here)

# eight distinct pairs: a draw of other indices gives other rows
PAIR_PROMPTS = [f"{a:02d}+{b:02d}=" for a, b in ((7, 42), (13, 8), (55, 55), (90, 1), (3, 4), (61, 27), (18, 18), (40, 9))]
PAIR_CHOSEN = [str(int(p[:2]) + int(p[3:5])) for p in PAIR_PROMPTS]
PAIR_REJECTED = [c + "1" for c in PAIR_CHOSEN]


def _pair_trainer(which, config_fields, dtype=torch.float64):
    """(model, run) for the DPO or the reward-model trainer on the eight pairs: ``run()`` trains the
    model in place with the config of ``config_fields`` (device cpu) and returns the History. The DPO
    run is sigmoid DPO against a frozen copy of the starting policy as π_ref."""
    policy = tiny(dtype=dtype)
    if which == "dpo":
        ref_policy = copy.deepcopy(policy).requires_grad_(False)
        config = DPOConfig(device="cpu", **config_fields)
        return policy, lambda: train_dpo(policy, ref_policy, TOK, PAIR_PROMPTS, PAIR_CHOSEN, PAIR_REJECTED, config,
                                         progress=False)
    model = build_reward_model(policy, init_std=0.1)
    config = RewardModelConfig(device="cpu", **config_fields)
    return model, lambda: train_reward_model(model, TOK, PAIR_PROMPTS, PAIR_CHOSEN, PAIR_REJECTED, config, progress=False)


def _closed_form_cases():
    """(config, sequence log-probs of [chosen, rejected], π_ref's or None, lengths, the loss by hand,
    the same formula at the fields' defaults) for one pair of each loss type, at log-probs where the
    formula has a closed form. Lengths 2 and 4 (or 3): sums and per-token averages differ."""
    log, log1p_exp = math.log, lambda x: math.log1p(math.exp(x))  # log1p_exp(−x) = −log σ(x)
    cases = {}
    # DPO (cDPO): β·h = log 3, so −log σ(β·h) = log(4/3) and −log σ(−β·h) = log 4
    h = 2 * log(3)
    cases["sigmoid"] = (DPOConfig(loss_type="sigmoid", beta=0.5, label_smoothing=0.2),
                        [h - 5.0, -4.0], [-2.0, -1.0], [2, 4], 0.8 * log(4 / 3) + 0.2 * log(4),
                        log1p_exp(-0.1 * h))  # β = 0.1, ε = 0
    # IPO on per-token averages: h̄ = (c − c_ref)/2 − (r − r_ref)/4 = 4/2 + 8/4 = 4; (h̄ − 1/(2β))² = (4 − 2)²
    cases["ipo"] = (DPOConfig(loss_type="ipo", beta=0.25), [-2.0, -12.0], [-6.0, -4.0], [2, 4], 4.0,
                    (4 - 5) ** 2)  # β = 0.1
    # SimPO: β·(c/2 − r/4) − γ = 2·(−0.75 + 1.5) − 1.5 = 0, so the loss is log 2
    cases["simpo"] = (DPOConfig(loss_type="simpo", beta=2.0, simpo_gamma=1.5), [-1.5, -6.0], None, [2, 4], log(2),
                      log1p_exp(-(0.1 * 0.75 - 0.5)))  # β = 0.1, γ = 0.5
    # ORPO: P_c = 1/2 (log-odds 0), P_r = 1/4 (log-odds −log 3): −log P_c − λ·log σ(log 3) = log 2 + λ·log(4/3)
    cases["orpo"] = (DPOConfig(loss_type="orpo", orpo_lambda=0.5), [2 * log(0.5), 3 * log(0.25)], None, [2, 3],
                     log(2) + 0.5 * log(4 / 3), log(2) + 0.1 * log(4 / 3))  # λ = 0.1
    return cases


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "simpo", "orpo"])
def test_dpo_preference_loss_is_the_closed_form_at_known_log_probs(loss_type):
    """Each loss_type's per-pair loss at log-probs where it has a closed form: cDPO's −(1−ε)log σ(βh)
    − ε log σ(−βh) at βh = log 3; IPO's (h̄ − 1/(2β))² of per-token averages; SimPO's −log σ(β·Δavg − γ)
    at zero; ORPO's −log P_c − λ log σ(Δ log-odds) at P = 1/2 and 1/4. Every field is off its default
    and the default would give another value (checked), as would the swapped β/γ of SimPO."""
    config, lp, ref, lengths, want, at_defaults = _closed_form_cases()[loss_type]
    got = preference_loss(torch.tensor(lp, dtype=DT), None if ref is None else torch.tensor(ref, dtype=DT),
                          torch.tensor(lengths), config)
    assert got.shape == (1,)
    assert float(got[0]) == pytest.approx(want, rel=1e-12)
    assert abs(at_defaults - want) > 1e-2  # power: the fields at their defaults give another loss
    if loss_type == "simpo":
        swapped = math.log1p(math.exp(-(1.5 * 0.75 - 2.0)))  # β and γ exchanged
        assert abs(swapped - want) > 1e-2
    if ref is None:  # reference-free: π_ref's log-probs (were they given) play no part
        assert torch.equal(preference_loss(torch.tensor(lp, dtype=DT), torch.tensor([-7.0, 3.0], dtype=DT),
                                           torch.tensor(lengths), config), got)
    else:
        with pytest.raises(ValueError, match="ref_log_probs"):
            preference_loss(torch.tensor(lp, dtype=DT), None, torch.tensor(lengths), config)


@pytest.mark.parametrize("loss_type", ["sigmoid", "simpo"])
def test_dpo_step_logs_the_implicit_reward_margin_at_beta(loss_type):
    """The logged margin and accuracy are of the reward each loss ranks by at the configured β, the
    log-probs recomputed here: β·(log π − log π_ref) for DPO, β·log π/|y| for SimPO (its length-normalised
    reward, Meng, Xia & Chen 2024, eq. 4)."""
    policy, ref_model = tiny(seed=0), tiny(seed=1)
    batch = encode_preference_pairs(TOK, PAIR_PROMPTS, PAIR_CHOSEN, PAIR_REJECTED)
    with torch.no_grad():
        lp = sequence_log_probs(policy, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
        ref = sequence_log_probs(ref_model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    config = DPOConfig(loss_type=loss_type, beta=0.7, max_grad_norm=1e9)
    metrics = dpo_step(policy, torch.optim.SGD(policy.parameters(), lr=0.0), batch,
                       ref if loss_type == "sigmoid" else None, config)
    lengths = batch["completion_mask"].sum(-1).to(lp.dtype)
    implicit = 0.7 * (lp - ref if loss_type == "sigmoid" else lp / lengths)
    margin = implicit[:8] - implicit[8:]
    assert abs(float(margin.mean())) > 1e-3  # β changes the logged margin
    assert metrics["reward_margin"] == pytest.approx(float(margin.mean()), rel=1e-9)
    assert metrics["reward_accuracy"] == float((margin > 0).double().mean())
    assert metrics["chosen_log_prob"] == pytest.approx(float(lp[:8].mean()), rel=1e-9)
    assert metrics["rejected_log_prob"] == pytest.approx(float(lp[8:].mean()), rel=1e-9)


@pytest.mark.parametrize("which", ["dpo", "reward_model"])
def test_dpo_and_reward_model_draw_batch_size_pairs_per_step_by_the_seed(monkeypatch, which):
    """Step k trains on the pairs pick_k = randint(0, N, (batch_size,)) of a generator seeded with
    ``seed`` (drawn in order, with replacement): rows pick_k (chosen) then pick_k + N (rejected), for
    exactly num_steps steps; DPO's π_ref log-probs are those of the same rows. Another seed draws
    other pairs, the same seed the same ones."""
    step_name = "dpo_step" if which == "dpo" else "reward_model_step"
    module = dpo_module if which == "dpo" else rm_module
    real = getattr(module, step_name)
    seen = []
    monkeypatch.setattr(module, step_name, lambda model, opt, batch, *rest: seen.append(
        (batch["input_ids"].clone(), batch["completion_mask"].clone(), rest[0] if rest else None)) or real(
        model, opt, batch, *rest))
    data = encode_preference_pairs(TOK, PAIR_PROMPTS, PAIR_CHOSEN, PAIR_REJECTED)
    n = len(PAIR_PROMPTS)
    drawn = {}
    for seed in (3, 4):
        seen.clear()
        model, run = _pair_trainer(which, dict(num_steps=3, batch_size=5, seed=seed))
        ref_policy = copy.deepcopy(model)  # DPO's π_ref: the starting policy
        hist = run()
        assert len(seen) == len(hist["loss"]) == 3
        generator = torch.Generator().manual_seed(seed)
        for ids, completion_mask, ref_arg in seen:
            pick = torch.randint(0, n, (5,), generator=generator)
            rows = torch.cat([pick, pick + n])
            assert ids.shape[0] == 10 and torch.equal(ids, data["input_ids"][rows])
            if which == "dpo":
                with torch.no_grad():
                    want = sequence_log_probs(ref_policy, data["input_ids"][rows], data["attention_mask"][rows],
                                              data["completion_mask"][rows])
                torch.testing.assert_close(ref_arg, want, rtol=1e-12, atol=1e-12)
        drawn[seed] = [ids for ids, _, _ in seen]
    assert any(not torch.equal(a, b) for a, b in zip(drawn[3], drawn[4]))


@pytest.mark.parametrize("which", ["dpo", "reward_model"])
def test_dpo_and_reward_model_lr_and_weight_decay_are_adamws(which):
    """One step at lr = 4e-3 (off both defaults): AdamW's first step moves a parameter by lr·g/(|g| +
    1e-8), lr for |g| ≫ 1e-8; with weight decay 0.5 the run differs from the undecayed one by exactly
    −lr·wd·θ_init (decoupled: the Adam part is the same; an L2 penalty in the gradient would change it)."""
    runs = {}
    for wd in (0.0, 0.5):
        model, run = _pair_trainer(which, dict(num_steps=1, batch_size=4, lr=4e-3, weight_decay=wd, max_grad_norm=1e9))
        init = flat(model)
        run()
        runs[wd] = flat(model)
    moved = (runs[0.0] - init).abs()
    assert float(moved.max()) == pytest.approx(4e-3, rel=1e-3) and float(moved.max()) <= 4e-3 * (1 + 1e-9)
    torch.testing.assert_close(runs[0.5] - runs[0.0], -4e-3 * 0.5 * init, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("which", ["dpo", "reward_model"])
def test_dpo_and_reward_model_max_grad_norm_clips_the_step_to_that_norm(monkeypatch, which):
    """With AdamW replaced by plain SGD at lr = 1 (Δθ = −clip(g)): unclipped the step's norm is the
    logged gradient norm; at max_grad_norm = 1e-3 ≪ ‖g‖ the step is the unclipped one times
    c/(‖g‖ + 1e-6), of norm c, and the logged norm is still the one before clipping."""
    monkeypatch.setattr(torch.optim, "AdamW", lambda params, lr, weight_decay: torch.optim.SGD(params, lr=1.0))
    steps, norms = {}, {}
    for clip in (float("inf") if which == "reward_model" else 1e9, 1e-3):
        model, run = _pair_trainer(which, dict(num_steps=1, batch_size=4, max_grad_norm=clip))
        before = flat(model)
        norms[clip] = float(run()["grad_norm"][0])
        steps[clip] = flat(model) - before
    (free, g_norm), (clipped, clipped_norm) = [(steps[c], norms[c]) for c in steps]
    assert g_norm > 1e-2  # the clip acts (and ‖g‖ ≠ 1, so a clip at the default 1.0 shows)
    assert abs(g_norm - 1.0) > 1e-2
    assert float(free.norm()) == pytest.approx(g_norm, rel=1e-6)
    assert clipped_norm == pytest.approx(g_norm, rel=1e-9)  # logged before clipping
    torch.testing.assert_close(clipped, free * (1e-3 / (g_norm + 1e-6)), rtol=1e-6, atol=1e-12)
    assert float(clipped.norm()) == pytest.approx(1e-3, rel=1e-3)


# ============================================================================= every field has a test


_ON, _OFF = "test_grpo_on_policy_step_is_the_gradient_of_the_configured_loss", \
    "test_grpo_off_policy_step_is_the_gradient_of_the_configured_trust_region"
_DEVICE = "test_every_trainer_asks_for_its_configured_device"
_TU, _TV, _TGT, _TPT = "test_train_updates.py::", "test_grpo_variants.py::", "test_grpo_train.py::", "test_ppo_trpo_train.py::"
_PPO_RUN = "test_train_ppo_gae_lr_schedule_rollout_shape_network_and_clip_fraction"
_PPO_STEP = "test_ppo_minibatch_step_with_an_asymmetric_band_and_a_clipped_value_loss"
_TRPO_STEP = "test_trpo_policy_update_is_the_damped_natural_step_at_max_kl_and_the_configured_line_search"
_TRPO_RUN = "test_train_trpo_gae_advantages_and_the_critic_fit"
_STOP = "test_train_ppo_and_trpo_stop_at_return_over_stop_window"
_REIN = "test_train_reinforce_update_is_the_configured_estimator"
_SFT = "test_train_sft_replays_with_every_field_off_its_default"
_CLOSED = "test_dpo_preference_loss_is_the_closed_form_at_known_log_probs"
_LIB = "test_dpo_train.py::test_each_loss_type_is_the_library_loss"
_DRAWS = "test_dpo_and_reward_model_draw_batch_size_pairs_per_step_by_the_seed"
_ADAMW = "test_dpo_and_reward_model_lr_and_weight_decay_are_adamws"
_CLIP = "test_dpo_and_reward_model_max_grad_norm_clips_the_step_to_that_norm"
_RM_FIELDS = "test_preference_lm.py::test_reward_model_config_fields_are_used"

# (config, field) -> the tests that fail when the field is ignored, inverted or mis-wired (a test
# in another file is named "file.py::test").
FIELD_TESTS = {
    ("GRPOConfig", "group_size"): [_ON, _OFF],
    ("GRPOConfig", "prompts_per_step"): [_ON, _OFF],
    ("GRPOConfig", "num_steps"): ["test_grpo_eval_every_and_eval_num_problems", _TV + "test_every_recipe_runs_and_updates_the_policy"],
    ("GRPOConfig", "lr"): ["test_grpo_lr_is_the_size_of_adams_first_step"],
    ("GRPOConfig", "clip_eps_low"): [_OFF],
    ("GRPOConfig", "clip_eps_high"): [_OFF],
    ("GRPOConfig", "kl_coef"): [_TU + "test_grpo_step_is_minus_lr_times_the_gradient_of_the_stated_loss"],
    ("GRPOConfig", "num_inner_epochs"): [_OFF, _TV + "test_updates_per_generation_are_epochs_times_minibatches"],
    ("GRPOConfig", "num_minibatches"): [_TV + "test_updates_per_generation_are_epochs_times_minibatches",
                                        _TV + "test_magistral_advantages_are_normalised_per_minibatch"],
    ("GRPOConfig", "max_new_tokens"): ["test_grpo_max_new_tokens_is_the_budget", _ON],
    ("GRPOConfig", "temperature"): [_ON, "test_grpo_temperature_is_the_samplers_and_the_scorers"],
    ("GRPOConfig", "loss_aggregation"): [_ON, _OFF],
    ("GRPOConfig", "advantage_estimator"): [_ON, _TV + "test_magistral_advantages_are_normalised_per_minibatch"],
    ("GRPOConfig", "advantage_std"): [_ON],
    ("GRPOConfig", "per_token_loss"): [_OFF],
    ("GRPOConfig", "divergence"): [_OFF],
    ("GRPOConfig", "divergence_threshold"): [_OFF, "test_dppo_threshold_is_strict_at_the_boundary"],
    ("GRPOConfig", "gae_lambda"): ["test_grpo_ppo_critic_gae_uses_gamma_and_lambda_and_the_critic_step_is_clipped"],
    ("GRPOConfig", "gamma"): ["test_grpo_ppo_critic_gae_uses_gamma_and_lambda_and_the_critic_step_is_clipped"],
    ("GRPOConfig", "critic_lr"): ["test_grpo_critic_lr_is_the_size_of_the_critics_first_adam_step"],
    ("GRPOConfig", "reward_source"): ["test_grpo_reward_model.py::test_reward_source_reward_model_is_the_proxy_task_run",
                                      "test_grpo_reward_model.py::test_reward_source_decides_which_reward_trains_and_evaluation_keeps_the_verifier",
                                      "test_grpo_reward_model.py::test_reward_source_mismatches_raise_naming_the_argument"],
    ("GRPOConfig", "is_correction"): ["test_is_corrections.py::test_grpo_step_is_minus_lr_times_the_gradient_of_the_tis_weighted_loss",
                                      "test_is_corrections.py::test_with_the_policy_as_its_own_sampler_every_correction_is_the_uncorrected_run_bit_for_bit",
                                      "test_is_corrections.py::test_config_validates_the_correction_fields"],
    ("GRPOConfig", "is_cap"): ["test_is_corrections.py::test_grpo_step_is_minus_lr_times_the_gradient_of_the_tis_weighted_loss",
                               "test_is_corrections.py::test_config_validates_the_correction_fields"],
    ("GRPOConfig", "sampler_temperature"): ["test_mismatched_sampler.py::test_the_reported_log_probs_are_the_samplers_distribution_at_the_drawn_tokens",
                                  "test_mismatched_sampler.py::test_config_switches_train_exactly_as_the_same_sampler_through_the_hook",
                                  "test_mismatched_sampler.py::test_config_rejects_bad_sampler_switches_naming_the_field",
                                  "test_mismatch.py::test_temperature_closed_form_and_top_k"],
    ("GRPOConfig", "sampler_top_p"): ["test_mismatched_sampler.py::test_the_reported_log_probs_are_the_samplers_distribution_at_the_drawn_tokens",
                                  "test_mismatched_sampler.py::test_config_switches_train_exactly_as_the_same_sampler_through_the_hook",
                                  "test_mismatched_sampler.py::test_config_rejects_bad_sampler_switches_naming_the_field",
                                  "test_mismatch.py::test_top_p_closed_form"],
    ("GRPOConfig", "sampler_top_k"): ["test_mismatched_sampler.py::test_the_reported_log_probs_are_the_samplers_distribution_at_the_drawn_tokens",
                                  "test_mismatched_sampler.py::test_at_the_defaults_the_sampler_is_the_policy",
                                  "test_mismatched_sampler.py::test_config_rejects_bad_sampler_switches_naming_the_field",
                                  "test_mismatch.py::test_temperature_closed_form_and_top_k"],
    ("GRPOConfig", "sampler_precision"): ["test_mismatched_sampler.py::test_precision_rounds_the_weights_and_the_logits",
                                  "test_mismatched_sampler.py::test_config_switches_train_exactly_as_the_same_sampler_through_the_hook",
                                  "test_mismatched_sampler.py::test_config_rejects_bad_sampler_switches_naming_the_field"],
    ("GRPOConfig", "sampler_lag"): ["test_mismatched_sampler.py::test_lag_samples_with_the_weights_of_k_updates_ago",
                                  "test_mismatched_sampler.py::test_a_lagged_sampler_is_on_policy_at_the_first_step_and_off_policy_after",
                                  "test_mismatched_sampler.py::test_config_rejects_bad_sampler_switches_naming_the_field"],
    ("GRPOConfig", "entropy_coef"): ["test_entropy_switches.py::test_the_entropy_bonus_is_minus_c_times_the_token_mean_entropy_with_its_gradient",
                                     "test_entropy_switches.py::test_the_bonus_with_a_quantile_is_the_mean_entropy_of_the_kept_tokens",
                                     "test_entropy_switches.py::test_config_rejects_bad_entropy_switches_naming_the_field"],
    ("GRPOConfig", "top_entropy_quantile"): [
        "test_entropy_switches.py::test_top_entropy_quantile_keeps_the_policy_gradient_of_the_highest_entropy_tokens_only",
        "test_entropy_switches.py::test_config_rejects_bad_entropy_switches_naming_the_field"],
    ("GRPOConfig", "entropy_control"): ["test_entropy_switches.py::test_clip_cov_removes_the_gradient_of_the_high_covariance_tokens",
                                        "test_entropy_switches.py::test_grpo_step_passes_the_kl_cov_settings_and_logs_the_share_it_penalised",
                                        "test_entropy_switches.py::test_covariance_control_needs_the_clipped_surrogate"],
    ("GRPOConfig", "clip_cov_ratio"): ["test_entropy_switches.py::test_clip_cov_removes_the_gradient_of_the_high_covariance_tokens",
                                       "test_entropy_switches.py::test_clip_cov_at_the_papers_ratio_removes_one_token_of_a_small_batch",
                                       "test_entropy_switches.py::test_config_rejects_bad_entropy_switches_naming_the_field"],
    ("GRPOConfig", "clip_cov_lb"): ["test_entropy_switches.py::test_clip_cov_removes_the_gradient_of_the_high_covariance_tokens",
                                    "test_entropy_switches.py::test_config_rejects_bad_entropy_switches_naming_the_field"],
    ("GRPOConfig", "clip_cov_ub"): ["test_entropy_switches.py::test_clip_cov_removes_the_gradient_of_the_high_covariance_tokens",
                                    "test_entropy_switches.py::test_config_rejects_bad_entropy_switches_naming_the_field"],
    ("GRPOConfig", "kl_cov_ratio"): ["test_entropy_switches.py::test_grpo_step_passes_the_kl_cov_settings_and_logs_the_share_it_penalised",
                                     "test_entropy_switches.py::test_kl_cov_in_the_step_is_the_unclipped_surrogate_plus_kappa_abs_log_ratio_on_the_top_covariance_tokens",
                                     "test_entropy_switches.py::test_config_rejects_bad_entropy_switches_naming_the_field"],
    ("GRPOConfig", "kl_cov_coef"): ["test_entropy_switches.py::test_grpo_step_passes_the_kl_cov_settings_and_logs_the_share_it_penalised",
                                    "test_entropy_switches.py::test_kl_cov_in_the_step_is_the_unclipped_surrogate_plus_kappa_abs_log_ratio_on_the_top_covariance_tokens",
                                    "test_entropy_switches.py::test_config_rejects_bad_entropy_switches_naming_the_field"],
    ("GRPOConfig", "format_coef"): ["test_grpo_rewards_add_format_reward_and_dapo_overlong_penalty_with_their_signs"],
    ("GRPOConfig", "overlong_cache_length"): ["test_grpo_rewards_add_format_reward_and_dapo_overlong_penalty_with_their_signs"],
    ("GRPOConfig", "overlong_filter"): [_TV + "test_overlong_filter_removes_exactly_the_truncated_rows_from_the_loss"],
    ("GRPOConfig", "dynamic_sampling"): [_TV + "test_dynamic_sampling_keeps_only_mixed_groups_and_fills_the_batch",
                                         "test_grpo_dynamic_sampling_stops_at_the_first_round_that_fills_the_batch"],
    ("GRPOConfig", "max_sampling_rounds"): [_TV + "test_dynamic_sampling_stops_at_its_cap_and_then_makes_no_update"],
    ("GRPOConfig", "zero_variance_filter"): [_TV + "test_zero_variance_filter_drops_constant_groups_without_resampling"],
    ("GRPOConfig", "retire_pass_rate"): ["test_grpo_retire_pass_rate_is_a_strict_threshold",
                                         _TV + "test_retired_prompts_are_never_drawn_again"],
    ("GRPOConfig", "ref_reset_every"): [_TV + "test_prorl_reset_makes_the_kl_to_the_reference_exactly_zero_and_resets_the_optimiser"],
    ("GRPOConfig", "fp32_lm_head"): ["test_grpo_fp32_lm_head_is_applied_when_set"],
    ("GRPOConfig", "max_completions"): ["test_grpo_max_completions_stops_exactly_at_the_budget"],
    ("GRPOConfig", "max_grad_norm"): ["test_grpo_max_grad_norm_clips_the_step_to_that_norm",
                                      "test_grpo_ppo_critic_gae_uses_gamma_and_lambda_and_the_critic_step_is_clipped"],
    ("GRPOConfig", "log_ref_kl"): ["test_grpo_log_ref_kl_keeps_a_reference_only_when_asked"],
    ("GRPOConfig", "eval_every"): ["test_grpo_eval_every_and_eval_num_problems"],
    ("GRPOConfig", "eval_steps"): [_TGT + "test_eval_steps_add_evaluations_before_those_steps"],
    ("GRPOConfig", "eval_num_problems"): ["test_grpo_eval_every_and_eval_num_problems"],
    ("GRPOConfig", "seed"): ["test_grpo_seed_seeds_the_prompts_and_the_samples"],
    ("GRPOConfig", "device"): [_DEVICE],
    ("PPOConfig", "seed"): [_PPO_RUN, "test_train_ppo_trpo_and_reinforce_seed_changes_the_run"],
    ("PPOConfig", "total_env_steps"): [_TPT + "test_ppo_tiny_config_runs_and_logs_every_metric"],
    ("PPOConfig", "num_envs"): [_PPO_RUN],
    ("PPOConfig", "num_steps"): [_PPO_RUN],
    ("PPOConfig", "gamma"): [_PPO_RUN],
    ("PPOConfig", "gae_lambda"): [_PPO_RUN],
    ("PPOConfig", "clip_eps_low"): [_PPO_STEP, _PPO_RUN],
    ("PPOConfig", "clip_eps_high"): [_PPO_STEP, _PPO_RUN],
    ("PPOConfig", "num_epochs"): [_TPT + "test_ppo_target_kl_stops_the_epochs_early"],
    ("PPOConfig", "minibatch_size"): [_TU + "test_ppo_update_zeroes_gradients_between_minibatches"],
    ("PPOConfig", "lr"): [_PPO_RUN],
    ("PPOConfig", "lr_schedule"): [_PPO_RUN],
    ("PPOConfig", "ent_coef"): [_TU + "test_ppo_minibatch_loss_decomposes_with_the_stated_signs_and_step_is_minus_lr_grad", _PPO_STEP],
    ("PPOConfig", "vf_coef"): [_TU + "test_ppo_minibatch_loss_decomposes_with_the_stated_signs_and_step_is_minus_lr_grad", _PPO_STEP],
    ("PPOConfig", "max_grad_norm"): [_TU + "test_ppo_minibatch_step_clips_the_gradient_norm"],
    ("PPOConfig", "target_kl"): [_TPT + "test_ppo_target_kl_stops_the_epochs_early"],
    ("PPOConfig", "norm_advantages"): [_TU + "test_ppo_minibatch_loss_decomposes_with_the_stated_signs_and_step_is_minus_lr_grad"],
    ("PPOConfig", "clip_value_eps"): [_PPO_STEP],
    ("PPOConfig", "hidden_sizes"): [_PPO_RUN],
    ("PPOConfig", "activation"): [_PPO_RUN],
    ("PPOConfig", "stop_at_return"): [_STOP],
    ("PPOConfig", "stop_window"): [_STOP],
    ("PPOConfig", "stop_after_env_steps"): [_TPT + "test_ppo_stop_after_env_steps_cuts_the_same_curve"],
    ("PPOConfig", "device"): [_DEVICE],
    ("TRPOConfig", "seed"): [_TRPO_RUN, "test_train_ppo_trpo_and_reinforce_seed_changes_the_run"],
    ("TRPOConfig", "total_env_steps"): [_TPT + "test_trpo_tiny_config_runs_and_logs_every_metric"],
    ("TRPOConfig", "num_envs"): [_TRPO_RUN],
    ("TRPOConfig", "num_steps"): [_TRPO_RUN],
    ("TRPOConfig", "gamma"): [_TRPO_RUN],
    ("TRPOConfig", "gae_lambda"): [_TRPO_RUN],
    ("TRPOConfig", "max_kl"): [_TRPO_STEP],
    ("TRPOConfig", "cg_iters"): [_TRPO_STEP],
    ("TRPOConfig", "damping"): [_TRPO_STEP],
    ("TRPOConfig", "backtrack_coef"): [_TRPO_STEP],
    ("TRPOConfig", "max_backtracks"): [_TRPO_STEP],
    ("TRPOConfig", "accept_ratio"): [_TRPO_STEP],
    ("TRPOConfig", "critic_lr"): [_TRPO_RUN],
    ("TRPOConfig", "critic_epochs"): [_TRPO_RUN],
    ("TRPOConfig", "critic_minibatch_size"): [_TRPO_RUN],
    ("TRPOConfig", "norm_advantages"): [_TRPO_RUN],
    ("TRPOConfig", "hidden_sizes"): [_TRPO_RUN],
    ("TRPOConfig", "activation"): [_TRPO_RUN],
    ("TRPOConfig", "stop_at_return"): [_STOP],
    ("TRPOConfig", "stop_window"): [_STOP],
    ("TRPOConfig", "device"): [_DEVICE],
    ("ReinforceConfig", "seed"): [_REIN, "test_train_ppo_trpo_and_reinforce_seed_changes_the_run"],
    ("ReinforceConfig", "episodes_per_batch"): ["test_train_reinforce_episodes_per_batch_and_total_env_steps", _REIN],
    ("ReinforceConfig", "total_env_steps"): ["test_train_reinforce_episodes_per_batch_and_total_env_steps",
                                             "test_train_reinforce_total_env_steps_is_reached_not_passed"],
    ("ReinforceConfig", "return_kind"): [_REIN],
    ("ReinforceConfig", "baseline"): [_REIN],
    ("ReinforceConfig", "gamma"): [_REIN],
    ("ReinforceConfig", "lr"): [_REIN],
    ("ReinforceConfig", "hidden_sizes"): [_REIN],
    ("ReinforceConfig", "value_lr"): [_REIN],
    ("ReinforceConfig", "value_epochs"): [_REIN],
    ("ReinforceConfig", "normalize_advantages"): [_REIN],
    ("ReinforceConfig", "max_grad_norm"): [_REIN],
    ("ReinforceConfig", "stop_at_return"): ["test_train_reinforce_stop_at_return_is_the_rolling_20_mean",
                                            "test_train_reinforce_stop_needs_a_full_window_of_20_episodes"],
    ("ReinforceConfig", "device"): [_DEVICE],
    ("SFTConfig", "num_steps"): [_SFT],
    ("SFTConfig", "batch_size"): [_SFT],
    ("SFTConfig", "lr"): [_SFT, "test_train_sft_weight_decay_is_decoupled_and_scaled_by_the_lr"],
    ("SFTConfig", "warmup_steps"): [_SFT, "test_train_sft_weight_decay_is_decoupled_and_scaled_by_the_lr"],
    ("SFTConfig", "weight_decay"): [_SFT, "test_train_sft_weight_decay_is_decoupled_and_scaled_by_the_lr"],
    ("SFTConfig", "label_noise"): [_SFT],
    ("SFTConfig", "carry_noise"): [_SFT],
    ("SFTConfig", "max_grad_norm"): [_SFT],
    ("SFTConfig", "seed"): [_SFT],
    ("SFTConfig", "device"): [_DEVICE],
    ("DPOConfig", "loss_type"): [_CLOSED, _LIB],
    ("DPOConfig", "beta"): [_CLOSED, _LIB, "test_dpo_step_logs_the_implicit_reward_margin_at_beta"],
    ("DPOConfig", "label_smoothing"): [_CLOSED, _LIB],
    ("DPOConfig", "simpo_gamma"): [_CLOSED, _LIB],
    ("DPOConfig", "orpo_lambda"): [_CLOSED, _LIB],
    ("DPOConfig", "num_steps"): [_DRAWS],
    ("DPOConfig", "batch_size"): [_DRAWS],
    ("DPOConfig", "lr"): [_ADAMW],
    ("DPOConfig", "weight_decay"): [_ADAMW],
    ("DPOConfig", "max_grad_norm"): [_CLIP],
    ("DPOConfig", "seed"): [_DRAWS],
    ("DPOConfig", "device"): [_DEVICE],
    ("RewardModelConfig", "num_steps"): [_DRAWS, _RM_FIELDS],
    ("RewardModelConfig", "batch_size"): [_DRAWS, _RM_FIELDS],
    ("RewardModelConfig", "lr"): [_ADAMW, _RM_FIELDS],
    ("RewardModelConfig", "weight_decay"): [_ADAMW],
    ("RewardModelConfig", "max_grad_norm"): [_CLIP, _RM_FIELDS],
    ("RewardModelConfig", "seed"): [_DRAWS, _RM_FIELDS],
    ("RewardModelConfig", "device"): [_DEVICE],
}


def test_every_config_field_has_a_pinning_test():
    """A new config field fails this test until a test that pins it is named in FIELD_TESTS."""
    from pathlib import Path

    configs = {c.__name__: c for c in (GRPOConfig, PPOConfig, TRPOConfig, ReinforceConfig, rl.lm.SFTConfig, DPOConfig,
                                          RewardModelConfig)}
    fields = {(name, f.name) for name, c in configs.items() for f in dataclasses.fields(c)}
    assert set(FIELD_TESTS) == fields, (fields - set(FIELD_TESTS), set(FIELD_TESTS) - fields)
    here = Path(__file__).parent
    for key, tests in FIELD_TESTS.items():
        for test in tests:
            file, _, name = test.rpartition("::")
            source = (here / file).read_text() if file else Path(__file__).read_text()
            assert f"def {name}(" in source, (key, test)
