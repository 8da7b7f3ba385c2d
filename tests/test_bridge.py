"""The TRL bridge: config mapping, named errors, and rlbook's GRPO loss = TRL's own, value and gradient.

The equality tests build one batch the way a GRPO step does (prompts from the task, completions
sampled from the model, rewards from the verifier, group advantages, old log-probs that differ from
the current ones so the clip acts, and a reference model's log-probs), then evaluate the loss with
rlbook's pieces and with TRL's ``GRPOTrainer._compute_loss`` on the same float64 model, for every
loss type both sides implement, with and without the KL term.
"""

import dataclasses
import warnings

import pytest
import torch

import rlbook as rl

trl = pytest.importorskip("trl", reason="the TRL bridge tests need the `trl` extra: pip install -e '.[trl]'")
pytest.importorskip("datasets", reason="TRL's GRPOTrainer needs `datasets` (the `trl` extra)")

from rlbook import bridge  # noqa: E402

TOK = rl.lm.build_char_tokenizer()
TASK = rl.lm.AdditionTask()
TINY = dict(n_layer=1, n_embd=32, n_head=2)

VARIANTS = {
    "grpo": dict(advantage_std="sample"),
    "dapo": dict(advantage_std="sample", loss_aggregation="token_mean", clip_eps_high=0.28),
    "dr_grpo": dict(advantage_estimator="dr_grpo", loss_aggregation="fixed_length_mean"),
    "cispo": dict(advantage_std="sample", per_token_loss="cispo", loss_aggregation="token_mean", clip_eps_low=1.0,
                  clip_eps_high=0.3),
    # TRL's bnpo is the token mean of each micro-batch: with one micro-batch, rlbook's token_mean again
    "bnpo": dict(advantage_std="sample", loss_aggregation="token_mean", clip_eps_high=0.28),
}
TRL_OVERRIDES = {"bnpo": dict(loss_type="bnpo")}


def small_config(**fields):
    return rl.GRPOConfig(group_size=4, prompts_per_step=3, num_steps=2, max_new_tokens=6, device="cpu", **fields)


def make_batch(policy, config, seed=0):
    """Prompts, sampled completions (variable lengths), rewards, advantages, old and ref log-probs."""
    gen = torch.Generator().manual_seed(seed)
    problems = TASK.sample_problems(config.prompts_per_step, gen)
    prompt_ids, prompt_mask = rl.lm.encode_prompts(TOK, [p.prompt for p in problems])
    batch = rl.lm.sample_completions(policy, prompt_ids, prompt_mask, num_samples=config.group_size, generator=gen,
                                     max_new_tokens=config.max_new_tokens, eos_token_id=TOK.eos_token_id,
                                     pad_token_id=TOK.pad_token_id, tokenizer=TOK)
    rewards = torch.tensor([TASK.reward(problems[j // config.group_size].prompt, t) for j, t in enumerate(batch.texts)])
    rewards = rewards + torch.rand(len(rewards), generator=gen)  # graded rewards: every group has signal
    advantages = rl.algos.grpo._parts(config)[0](rewards, config.group_size).double()
    P = prompt_ids.repeat_interleave(config.group_size, 0)
    M = prompt_mask.repeat_interleave(config.group_size, 0)
    with torch.no_grad():
        now = rl.lm.completion_log_probs(policy, P, batch.completion_ids, M, completion_mask=batch.completion_mask).double()
        ref_model = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=seed + 1, device="cpu").double()
        ref = rl.lm.completion_log_probs(ref_model, P, batch.completion_ids, M, completion_mask=batch.completion_mask).double()
    old = now + 0.3 * torch.randn(now.shape, generator=gen, dtype=torch.float64)  # ratios far enough from 1 to clip
    return dict(prompt_ids=P, prompt_mask=M, completion_ids=batch.completion_ids, completion_mask=batch.completion_mask,
                advantages=advantages, old_log_probs=old, ref_log_probs=ref)


def assert_same_loss_and_gradient(trainer, model, batch, config):
    """TRL's loss (``bridge.trl_loss``) and rlbook's (``bridge.rlbook_grpo_loss``) on ``batch``: equal
    values and equal gradients (to 1e-6 in float64), the gradient not ~0. Returns TRL's loss."""
    model.zero_grad(set_to_none=True)
    loss_trl = bridge.trl_loss(trainer, **batch)
    loss_trl.backward()
    grads_trl = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    loss_rl = bridge.rlbook_grpo_loss(model, **batch, config=config)
    grads_rl = [p.grad.clone() for p in model.parameters()]
    assert abs(loss_rl.item() - loss_trl.item()) < 1e-6
    worst = max((a - b).abs().max().item() for a, b in zip(grads_rl, grads_trl))
    scale = max(a.abs().max().item() for a in grads_trl)
    assert scale > 1e-3 and worst < 1e-6, (worst, scale)
    return loss_trl


@pytest.mark.parametrize("kl_coef", [0.0, 0.04])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rlbook_loss_equals_trl_loss_and_gradient(variant, kl_coef, tmp_path):
    config = small_config(kl_coef=kl_coef, **VARIANTS[variant])
    policy = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu").double()
    trainer = bridge.build_trl_trainer(policy, TOK, TASK, config, output_dir=str(tmp_path), **TRL_OVERRIDES.get(variant, {}))
    assert trainer.loss_type == variant and trainer.beta == kl_coef
    model = trainer.model  # the policy itself, or (β > 0) TRL's reload of it: same weights
    for a, b in zip(model.parameters(), policy.parameters()):
        assert torch.equal(a, b)
    batch = make_batch(model, config)
    assert batch["completion_mask"].sum(1).unique().numel() > 1, "the batch should have completions of several lengths"

    assert_same_loss_and_gradient(trainer, model, batch, config)


def test_the_clip_and_the_penalty_act_in_the_equality_batch():
    """The equality is not between two zeros: the batch has clipped tokens and a non-zero KL."""
    config = small_config(advantage_std="sample")
    policy = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu").double()
    batch = make_batch(policy, config)
    with torch.no_grad():
        now = rl.lm.completion_log_probs(policy, batch["prompt_ids"], batch["completion_ids"], batch["prompt_mask"],
                                         completion_mask=batch["completion_mask"]).double()
    ratio = torch.exp(now - batch["old_log_probs"])
    clipped = rl.clip_region(ratio, batch["advantages"][:, None].expand_as(ratio), 0.2, 0.2) & batch["completion_mask"]
    assert clipped.any() and not clipped[batch["completion_mask"]].all()
    assert rl.masked_mean(rl.kl_k3(now, batch["ref_log_probs"]), batch["completion_mask"]) > 0.01


def test_a_wrong_rlbook_side_is_caught():
    """The comparison has teeth: the token mean against TRL's sample-level "grpo" loss differs."""
    config = small_config(advantage_std="sample", kl_coef=0.0)
    policy = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu").double()
    trainer = bridge.build_trl_trainer(policy, TOK, TASK, config)
    batch = make_batch(policy, config)
    loss_trl = bridge.trl_loss(trainer, **batch)
    wrong = small_config(advantage_std="sample", loss_aggregation="token_mean")
    loss_wrong = bridge.rlbook_grpo_loss(policy, **batch, config=wrong)
    assert abs(loss_wrong.item() - loss_trl.item()) > 1e-4


def test_to_trl_config_maps_every_field():
    config = rl.GRPOConfig(group_size=6, prompts_per_step=10, num_steps=7, num_inner_epochs=3, lr=3e-4,
                           clip_eps_low=0.15, clip_eps_high=0.3, kl_coef=0.02, temperature=0.9, max_new_tokens=12,
                           advantage_std="sample", loss_aggregation="token_mean", max_grad_norm=0.5, seed=5,
                           format_coef=0.1, device="cpu")
    args = bridge.to_trl_config(config, output_dir="/tmp/rlbook-trl-test", logging_steps=3)
    assert args.num_generations == 6 and args.per_device_train_batch_size == 60
    assert args.gradient_accumulation_steps == 1 and args.steps_per_generation == 1
    assert args.num_iterations == 3 and args.max_steps == 21
    assert args.learning_rate == 3e-4 and args.lr_scheduler_type == "constant" and args.weight_decay == 0.0
    assert (args.epsilon, args.epsilon_high, args.beta) == (0.15, 0.3, 0.02)
    assert args.use_bias_correction_kl is False and args.importance_sampling_level == "token"
    assert args.loss_type == "dapo" and args.scale_rewards == "group" and args.mask_truncated_completions is False
    assert (args.temperature, args.max_completion_length, args.max_grad_norm, args.seed) == (0.9, 12, 0.5, 5)
    assert args.reward_weights == [1.0, 0.1] and args.use_cpu and not args.bf16 and args.logging_steps == 3
    assert args.gradient_checkpointing is False and getattr(args, "activation_checkpointing", False) is False
    with warnings.catch_warnings():
        warnings.filterwarnings("error", ".*checkpointing.*", FutureWarning)  # set under its current name
        bridge.to_trl_config(config)
    dr = bridge.to_trl_config(rl.GRPOConfig(advantage_estimator="dr_grpo", loss_aggregation="fixed_length_mean", device="cpu"))
    assert dr.loss_type == "dr_grpo" and dr.scale_rewards == "none" and dr.epsilon_high == 0.2
    cispo = bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", per_token_loss="cispo", loss_aggregation="token_mean",
                                               clip_eps_low=1.0, clip_eps_high=4.0, device="cpu"))
    assert cispo.loss_type == "cispo" and cispo.epsilon_high == 5.0  # TRL caps the ratio itself


def test_to_trl_config_names_every_setting_trl_cannot_express():
    with pytest.raises(ValueError, match="advantage_std='population'.*sample std"):
        bridge.to_trl_config(rl.GRPOConfig(device="cpu"))  # the book's default population std
    config = rl.GRPOConfig(advantage_estimator="rloo", per_token_loss="cispo", loss_aggregation="seq_mean_token_mean",
                           overlong_cache_length=2, device="cpu")
    with pytest.raises(ValueError) as err:
        bridge.to_trl_config(config)
    message = str(err.value)
    for named in ("advantage_estimator='rloo'", "per_token_loss='cispo' with loss_aggregation='seq_mean_token_mean'",
                  "clip_eps_low=0.2 with per_token_loss='cispo'", "overlong_cache_length=2"):
        assert named in message
    with pytest.raises(ValueError, match="loss_aggregation=<callable>"):
        bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", loss_aggregation=rl.token_mean, device="cpu"))
    with pytest.raises(ValueError, match="rlbook.GRPOConfig"):
        bridge.to_trl_config({"group_size": 8})
    with pytest.raises(ValueError, match="no TRL loss_type"):
        bridge.trl_loss_type(rl.GRPOConfig(per_token_loss="cispo"))
    assert bridge.trl_loss_type(rl.GRPOConfig()) == "grpo"


@pytest.mark.parametrize("field, value", [("num_minibatches", 2), ("overlong_filter", True), ("dynamic_sampling", True),
                                          ("zero_variance_filter", True), ("retire_pass_rate", 0.9),
                                          ("ref_reset_every", 5), ("max_completions", 64),
                                          ("reward_source", "reward_model"), ("sampler_temperature", 0.7),
                                          ("sampler_precision", "bf16"), ("sampler_lag", 2),
                                          ("entropy_control", "clip_cov"), ("entropy_control", "kl_cov")])
def test_to_trl_config_refuses_each_unmapped_part_iv_setting(field, value):
    base = dict(advantage_std="sample", device="cpu")
    bridge.to_trl_config(rl.GRPOConfig(**base))  # mappable without the setting
    with pytest.raises(ValueError, match=f"{field}={value!r}"):
        bridge.to_trl_config(rl.GRPOConfig(**base, **{field: value}))


def test_to_trl_config_maps_the_entropy_bonus_and_the_top_entropy_quantile():
    args = bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", device="cpu", entropy_coef=0.01,
                                              top_entropy_quantile=0.2))
    assert (args.entropy_coef, args.top_entropy_quantile) == (0.01, 0.2)
    assert args.use_adaptive_entropy is False  # TRL's controller of the coefficient stays off
    default = bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", device="cpu"))
    assert (default.entropy_coef, default.top_entropy_quantile) == (0.0, 1.0)


def _recorded_trl_fields(monkeypatch, config) -> dict:
    """The keyword arguments ``to_trl_config`` passes to ``trl.GRPOConfig`` (recorded by a subclass)."""
    seen = {}

    class Recording(trl.GRPOConfig):
        def __init__(self, **fields):
            seen.update(fields)
            super().__init__(**fields)

    monkeypatch.setattr(trl, "GRPOConfig", Recording)
    bridge.to_trl_config(config)
    return seen


def test_to_trl_config_sets_every_trl_field_of_a_book_concept(monkeypatch):
    """Each field in bridge.TRL_FIELDS (and TRL_IS_FIELDS with a correction on) is a trl.GRPOConfig field
    and is passed explicitly, so no TRL default decides a concept the book teaches."""
    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    for name in list(bridge.TRL_FIELDS) + list(bridge.TRL_IS_FIELDS):
        assert name in fields, f"trl.GRPOConfig (TRL {trl.__version__}) has no field {name!r}: renamed?"
    plain = _recorded_trl_fields(monkeypatch, rl.GRPOConfig(advantage_std="sample", device="cpu"))
    missing = set(bridge.TRL_FIELDS) - set(plain)
    assert not missing, f"to_trl_config leaves these to TRL's defaults: {sorted(missing)}"
    assert "vllm_importance_sampling_cap" not in plain  # deprecated since TRL 1.6
    corrected = _recorded_trl_fields(monkeypatch, rl.GRPOConfig(advantage_std="sample", device="cpu",
                                                                is_correction="sequence_mask"))
    missing = (set(bridge.TRL_FIELDS) | set(bridge.TRL_IS_FIELDS)) - set(corrected)
    assert not missing, f"to_trl_config leaves these to TRL's defaults with a correction: {sorted(missing)}"
    assert "vllm_importance_sampling_cap" not in corrected


def test_to_trl_config_switches_off_what_rlbook_does_not_do():
    args = bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", device="cpu", format_coef=0.1))
    assert args.delta is None  # no INTELLECT-2 cap on the ratio of negative-advantage tokens
    assert args.off_policy_mask_threshold is None  # no DeepSeek-V3.2 off-policy sequence mask
    assert args.multi_objective_aggregation == "sum_then_normalize"  # rlbook sums the rewards, then normalises
    assert args.use_adaptive_entropy is False and args.sync_ref_model is False
    assert args.bf16 is False and args.fp16 is False and args.use_cpu is True
    assert args.cast_lm_head_to_fp32 is False


def test_to_trl_config_maps_the_fp32_lm_head():
    args = bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", device="cpu", fp32_lm_head=True))
    assert args.cast_lm_head_to_fp32 is True


def test_build_trl_trainer_casts_an_untied_head_and_refuses_a_tied_one(tmp_path):
    """TRL 1.16's cast_lm_head_to_fp32 supports untied heads only: for the book's tied GPT-2 the bridge
    names the problem; for an untied bf16 model TRL's trainer holds the head in float32."""
    config = small_config(advantage_std="sample", fp32_lm_head=True)
    tied = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu")
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        bridge.build_trl_trainer(tied, TOK, TASK, config, output_dir=str(tmp_path))
    untied = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY, tie_word_embeddings=False), seed=0, device="cpu")
    untied.to(torch.bfloat16)
    trainer = bridge.build_trl_trainer(untied, TOK, TASK, config, output_dir=str(tmp_path))
    assert trainer.model.lm_head.weight.dtype == torch.float32
    assert trainer.model.transformer.wte.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("switches", [dict(entropy_coef=0.3), dict(top_entropy_quantile=0.4),
                                      dict(entropy_coef=0.3, top_entropy_quantile=0.4)])
def test_rlbook_loss_with_the_entropy_switches_equals_trl_loss_and_gradient(switches, tmp_path):
    """TRL's entropy bonus (−c · token-mean entropy over the kept tokens) and its top-entropy mask
    (torch.quantile threshold) against rlbook's, on one batch: same loss and gradient. The batch's
    token count makes ⌈ρN⌉ and TRL's quantile rule keep the same tokens (asserted)."""
    config = small_config(advantage_std="sample", **switches)
    policy = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu").double()
    trainer = bridge.build_trl_trainer(policy, TOK, TASK, config, output_dir=str(tmp_path))
    assert (trainer.entropy_coef, trainer.top_entropy_quantile) == (config.entropy_coef, config.top_entropy_quantile)
    model = trainer.model
    batch = make_batch(model, config)
    if config.top_entropy_quantile < 1:
        with torch.no_grad():
            _, entropy = rl.lm.completion_log_probs(model, batch["prompt_ids"], batch["completion_ids"],
                                                    batch["prompt_mask"], completion_mask=batch["completion_mask"],
                                                    with_entropy=True)
        ours = rl.high_entropy_mask(entropy, batch["completion_mask"], config.top_entropy_quantile)
        theirs = trainer.get_high_entropy_mask(entropy, batch["completion_mask"], 1 - config.top_entropy_quantile)
        assert torch.equal(ours, theirs) and 0 < ours.sum() < batch["completion_mask"].sum()

    loss_trl = assert_same_loss_and_gradient(trainer, model, batch, config)
    model.zero_grad(set_to_none=True)  # the switches act: without them the loss differs
    plain = bridge.rlbook_grpo_loss(model, **batch, config=small_config(advantage_std="sample"))
    assert abs(plain.item() - loss_trl.item()) > 1e-4


@pytest.mark.parametrize("loss", ["gspo", "gspo_token", "dppo"])
def test_to_trl_config_refuses_the_sequence_and_divergence_losses(loss):
    with pytest.raises(ValueError, match=f"per_token_loss='{loss}'"):
        bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", per_token_loss=loss, device="cpu"))


def test_trl_loss_checks_its_inputs():
    config = small_config(advantage_std="sample", kl_coef=0.0)
    policy = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu")
    trainer = bridge.build_trl_trainer(policy, TOK, TASK, config)
    ids = torch.ones(4, 6, dtype=torch.long)
    with pytest.raises(ValueError, match="advantages"):
        bridge.trl_loss(trainer, ids, ids, ids[:, :3], ids[:, :3], torch.zeros(4, 1))
    with pytest.raises(ValueError, match="completion_mask"):
        bridge.trl_loss(trainer, ids, ids, ids[:, :3], ids[:, :2], torch.zeros(4))
    trainer.beta = 0.1
    with pytest.raises(ValueError, match="ref_log_probs"):
        bridge.trl_loss(trainer, ids, ids, ids[:, :3], ids[:, :3], torch.zeros(4))


# ------------------------------ the sampler correction (train–inference mismatch) ------------------------------

TRL_IS_MODES = ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


def _trl_is_ratio(trainer, old_log_probs, sampler_log_probs, completion_mask):
    """TRL 1.16's importance-sampling weights, as ``GRPOTrainer._generate_and_score_completions`` computes
    them from the trainer's ``vllm_importance_sampling_*`` settings (written out here, not rlbook's code)."""
    diff = (old_log_probs - sampler_log_probs) * completion_mask
    if trainer.vllm_importance_sampling_mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    low, high = trainer.vllm_importance_sampling_clip_min, trainer.vllm_importance_sampling_clip_max
    if trainer.vllm_importance_sampling_mode.endswith("truncate"):
        return torch.clamp(ratio, min=low, max=high)
    low = -float("inf") if low is None else low
    high = float("inf") if high is None else high
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


@pytest.mark.parametrize("mode", TRL_IS_MODES)
def test_to_trl_config_maps_the_sampler_correction(mode):
    args = bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", device="cpu", is_correction=mode, is_cap=2.5))
    assert args.vllm_importance_sampling_correction is True and args.vllm_importance_sampling_mode == mode
    assert args.vllm_importance_sampling_clip_max == 2.5
    assert args.vllm_importance_sampling_clip_min == (1 / 2.5 if mode.endswith("mask") else None)
    off = bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", device="cpu"))
    assert off.vllm_importance_sampling_correction is False  # TRL's default (True) would correct


def test_to_trl_config_maps_the_samplers_truncation_to_trls_generation_settings():
    args = bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", device="cpu", sampler_top_p=0.8, sampler_top_k=5))
    assert (args.top_p, args.top_k) == (0.8, 5)
    default = bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", device="cpu"))
    assert (default.top_p, default.top_k) == (1.0, 0)  # TRL's "no truncation"
    # TRL truncates where it generates, not where it scores: its generation config carries them
    import inspect

    import trl

    source = inspect.getsource(trl.GRPOTrainer)
    assert "top_p=self.top_p" in source or "top_p=args.top_p" in source


@pytest.mark.parametrize("mode", ["geometric_truncate", "geometric_mask"])
def test_to_trl_config_refuses_the_geometric_mean_corrections_by_name(mode):
    with pytest.raises(ValueError, match=f"is_correction='{mode}'.*product"):
        bridge.to_trl_config(rl.GRPOConfig(advantage_std="sample", device="cpu", is_correction=mode))


@pytest.mark.parametrize("mode", TRL_IS_MODES)
def test_rlbook_corrected_loss_equals_trl_loss_and_gradient(mode, tmp_path):
    config = small_config(kl_coef=0.04, advantage_std="sample", is_correction=mode, is_cap=1.5)
    policy = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu").double()
    trainer = bridge.build_trl_trainer(policy, TOK, TASK, config, output_dir=str(tmp_path))
    model = trainer.model
    batch = make_batch(model, config)
    gen = torch.Generator().manual_seed(3)
    noise = 0.4 * torch.randn(batch["old_log_probs"].shape, generator=gen, dtype=torch.float64)
    sampler = torch.where(batch["completion_mask"], (batch["old_log_probs"] + noise).clamp(max=0.0), torch.zeros_like(noise))
    mask = batch["completion_mask"].double()
    ratio = _trl_is_ratio(trainer, batch["old_log_probs"], sampler, mask)
    weights = ratio.expand_as(mask)[batch["completion_mask"]]
    assert ((weights != 1) & (weights != 0)).any() and (weights != weights[0]).any()  # the weights act
    if mode.endswith("mask"):
        assert (weights == 0).any() or mode.startswith("sequence")

    model.zero_grad(set_to_none=True)
    loss_trl = bridge.trl_loss(trainer, **batch, importance_sampling_ratio=ratio)
    loss_trl.backward()
    grads_trl = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    loss_rl = bridge.rlbook_grpo_loss(model, **batch, config=config, sampler_log_probs=sampler)
    grads_rl = [p.grad.clone() for p in model.parameters()]
    assert trainer.use_vllm is False  # restored after the call

    assert abs(loss_rl.item() - loss_trl.item()) < 1e-6
    worst = max((a - b).abs().max().item() for a, b in zip(grads_rl, grads_trl))
    scale = max(a.abs().max().item() for a in grads_trl)
    assert scale > 1e-3 and worst < 1e-6, (worst, scale)
    model.zero_grad(set_to_none=True)  # teeth: the uncorrected loss differs
    uncorrected = bridge.rlbook_grpo_loss(model, **batch, config=dataclasses.replace(config, is_correction="none"))
    assert abs(uncorrected.item() - loss_trl.item()) > 1e-4


def _multiturn_batch(policy, tokenizer, gen, group_size=4, num_prompts=2):
    """Multi-turn episodes of the calculator task (a scripted agent: a tool call, then the tool's answer or a
    guess), split the way TRL's multi-turn trainer holds them: the prompt, then one completion holding the
    model's turns and the tool's output, with ``tool_mask`` 0 on the tool's output."""
    from rlbook.envs.text import CalculatorEnv, collate_trajectories, rollout

    env = CalculatorEnv(tokenizer, num_digits=3, seed=0)
    enc = lambda s: tokenizer(s, add_special_tokens=False).input_ids  # noqa: E731
    eos = tokenizer.eos_token_id

    def agent(episode):
        def policy_fn(context):
            seen = tokenizer.decode(context[1:])
            if "[" not in seen:
                return enc("(" + seen[:-1] + ")")
            return (enc(seen[seen.index("[") + 1: seen.index("]")]) if episode % 2 else enc("1" * (episode % 3 + 1))) + [eos]
        return policy_fn

    trajs = [rollout(env, agent(e), seed=e // group_size) for e in range(group_size * num_prompts)]
    batch = collate_trajectories(trajs, pad_token_id=tokenizer.pad_token_id)
    P = int((batch["turn_ids"][0] == -1).sum() - (~batch["attention_mask"][0]).sum())  # the prompt's length (equal here)
    assert all(len(t.contexts[0]) == P for t in trajs)
    completion_ids, completion_mask = batch["input_ids"][:, P:], batch["attention_mask"][:, P:]
    tool_mask = batch["loss_mask"][:, P:] | ~completion_mask  # TRL pads tool_mask with 1
    rewards = batch["rewards"] + torch.rand(len(trajs), generator=gen)
    advantages = rl.group_relative_advantages(rewards, group_size, std="sample").double()
    prompt_ids, prompt_mask = batch["input_ids"][:, :P], batch["attention_mask"][:, :P]
    with torch.no_grad():
        now = rl.lm.completion_log_probs(policy, prompt_ids, completion_ids, prompt_mask,
                                         completion_mask=completion_mask).double()
    old = now + 0.3 * torch.randn(now.shape, generator=gen, dtype=torch.float64)
    return dict(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                completion_mask=completion_mask, advantages=advantages, old_log_probs=old), tool_mask


@pytest.mark.parametrize("variant", ["grpo", "dapo"])
def test_multiturn_loss_with_the_tool_mask_equals_trl(variant, tmp_path):
    """A multi-turn batch (model turns with the tool's output between them) through TRL 1.16's
    ``GRPOTrainer._compute_loss`` with ``tool_mask`` and through rlbook's loss masked to the model's
    tokens: equal loss and gradient. Without the tool mask on rlbook's side, the loss differs (the
    comparison has teeth), and the tool's output tokens are a real share of the completion."""
    from rlbook.envs.text import TOOL_ALPHABET

    tokenizer = rl.lm.build_char_tokenizer(TOOL_ALPHABET)
    config = small_config(kl_coef=0.0, **VARIANTS[variant])
    policy = rl.lm.build_policy(rl.lm.policy_config(tokenizer, n_positions=64, **TINY), seed=0, device="cpu").double()
    trainer = bridge.build_trl_trainer(policy, tokenizer, TASK, config, output_dir=str(tmp_path))
    model = trainer.model
    batch, tool_mask = _multiturn_batch(model, tokenizer, torch.Generator().manual_seed(0))
    tool_tokens = (~tool_mask & batch["completion_mask"]).sum().item()
    assert tool_tokens >= 0.25 * batch["completion_mask"].sum().item(), tool_tokens

    loss_trl = assert_same_loss_and_gradient(trainer, model, {**batch, "tool_mask": tool_mask}, config)
    model.zero_grad(set_to_none=True)
    unmasked = bridge.rlbook_grpo_loss(model, **batch, config=config)  # the tool's output trained on as if the model wrote it
    assert abs(unmasked.item() - loss_trl.item()) > 1e-4
    with pytest.raises(ValueError, match="tool_mask"):
        bridge.trl_loss(trainer, **batch, tool_mask=tool_mask[:, :-1])
