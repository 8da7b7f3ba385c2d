"""The TRL bridge for preferences: rlbook's DPO (sigmoid), IPO and reward-model losses = TRL's own, value and gradient.

One batch of preference pairs on the book's task (responses of several lengths, policy ≠ reference
so the margins are not 0), a float64 model, and TRL's ``DPOTrainer._compute_loss`` /
``RewardTrainer.compute_loss`` against rlbook's pieces. TRL 1.16's DPO scores tokens with a fused
LM-head kernel that takes the log-softmax in float32 whatever the model's dtype, so the DPO/IPO
comparisons hold to float32 rounding (measured on this batch, β = 0.1 / 0.5: loss |Δ| 2.9e-8 / 1.5e-7
(sigmoid), 6.5e-7 of 25.2 / 1.7e-7 (IPO); gradient max |Δ| 1.5e-8 / 1.4e-7 (sigmoid, largest entries
0.09 / 0.45), 8.8e-7 / 2.5e-7 (IPO, largest 5.3 / 1.1)), asserted at 1e-6 relative as for the GRPO
bridge; the reward model runs in float64 end to end and agrees exactly (0.0 measured; asserted 1e-12).
"""

import pytest
import torch

import rlbook as rl

trl = pytest.importorskip("trl", reason="the TRL bridge tests need the `trl` extra: pip install -e '.[trl]'")
pytest.importorskip("datasets", reason="TRL's trainers need `datasets` (the `trl` extra)")

from rlbook import preference_bridge as pb  # noqa: E402
from rlbook.lm.dpo import encode_preference_pairs  # noqa: E402

TOK = rl.lm.build_char_tokenizer()
TINY = dict(n_layer=1, n_embd=32, n_head=2)
PROMPTS = ["07+42=", "13+08=", "55+55=", "90+01="]
CHOSEN = ["49", "21", "110", "91"]
REJECTED = ["48", "2", "1100", "9111"]


def _model(seed):
    return rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=seed, device="cpu").double()


def _batch():
    b = encode_preference_pairs(TOK, PROMPTS, CHOSEN, REJECTED)
    assert b["completion_mask"].sum(-1).unique().numel() > 2  # responses of several lengths
    return b


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("beta", [0.1, 0.5])
@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_rlbook_dpo_loss_equals_trl_dpo_trainer_loss_and_gradient(loss_type, beta, tmp_path):
    policy, ref = _model(0), _model(1)
    config = rl.DPOConfig(loss_type=loss_type, beta=beta)
    trainer = pb.build_trl_dpo_trainer(policy, ref, TOK, config, output_dir=str(tmp_path))
    assert trainer.model is policy and trainer.ref_model is ref and trainer.loss_types == [loss_type]
    batch = _batch()
    policy.zero_grad(set_to_none=True)
    loss_trl = pb.trl_dpo_loss(trainer, batch)
    loss_trl.backward()
    grads_trl = _grads(policy)
    policy.zero_grad(set_to_none=True)
    loss_rl = pb.rlbook_dpo_loss(policy, ref, batch, config)
    loss_rl.backward()
    grads_rl = _grads(policy)
    assert all(p.grad is None for p in ref.parameters())
    assert abs(loss_rl.item() - loss_trl.item()) < 1e-6 * max(1.0, abs(loss_trl.item()))
    worst = max((a - b).abs().max().item() for a, b in zip(grads_rl, grads_trl))
    scale = max(a.abs().max().item() for a in grads_trl)
    assert scale > 1e-2 and worst < 1e-6 * scale, (worst, scale)


def test_the_dpo_comparison_has_teeth():
    """Wrong β, IPO without TRL's per-token averaging, or swapped chosen/rejected all differ from TRL."""
    policy, ref = _model(0), _model(1)
    batch = _batch()
    with torch.no_grad():
        trl_sigmoid = pb.trl_dpo_loss(pb.build_trl_dpo_trainer(policy, ref, TOK, rl.DPOConfig(beta=0.5)), batch).item()
        trl_ipo = pb.trl_dpo_loss(pb.build_trl_dpo_trainer(policy, ref, TOK, rl.DPOConfig(loss_type="ipo", beta=0.5)),
                                  batch).item()
        assert abs(pb.rlbook_dpo_loss(policy, ref, batch, rl.DPOConfig(beta=0.4)).item() - trl_sigmoid) > 1e-3
        lp = rl.lm.sequence_log_probs(policy, **batch)
        rp = rl.lm.sequence_log_probs(ref, **batch)
        unnormalised = rl.ipo_loss(lp[:4], lp[4:], rp[:4], rp[4:], 0.5).mean().item()
        assert abs(unnormalised - trl_ipo) > 1e-2
        swapped = rl.dpo_loss(lp[4:], lp[:4], rp[4:], rp[:4], 0.5).mean().item()
        assert abs(swapped - trl_sigmoid) > 1e-3
        # the margins are not all 0 (policy ≠ reference)
        h = (lp[:4] - rp[:4]) - (lp[4:] - rp[4:])
        assert h.abs().min() > 1e-2


def test_rlbook_reward_loss_equals_trl_reward_trainer_loss_and_gradient(tmp_path):
    reward_model = rl.lm.build_reward_model(_model(0), init_std=0.1)
    with torch.no_grad():
        reward_model.lm_head.bias.fill_(0.7)  # dropped by the conversion: Bradley–Terry ignores a shared shift
    classifier = pb.to_trl_reward_model(reward_model)
    trainer = pb.build_trl_reward_trainer(classifier, TOK, output_dir=str(tmp_path))
    assert trainer.model is classifier
    batch = _batch()
    loss_trl = pb.trl_reward_loss(trainer, batch)
    loss_trl.backward()
    loss_rl = pb.rlbook_reward_loss(reward_model, batch)
    loss_rl.backward()
    assert loss_rl.dtype == loss_trl.dtype == torch.float64
    assert abs(loss_rl.item() - loss_trl.item()) < 1e-12 and abs(loss_rl.item() - 0.6931) > 1e-3
    ours = dict(reward_model.named_parameters())
    worst, scale = 0.0, 0.0
    for name, p in classifier.named_parameters():
        mine = ours["lm_head.weight" if name == "score.weight" else name]
        worst = max(worst, (p.grad - mine.grad).abs().max().item())
        scale = max(scale, p.grad.abs().max().item())
    assert scale > 1e-3 and worst < 1e-12, (worst, scale)
    assert ours["lm_head.bias"].grad.abs().item() < 1e-12  # the shared shift has no gradient


def test_to_trl_dpo_config_maps_every_field_and_names_what_trl_cannot_express():
    config = rl.DPOConfig(loss_type="ipo", beta=0.3, num_steps=7, batch_size=12, lr=2e-4, weight_decay=0.01,
                          max_grad_norm=0.5, seed=4, device="cpu")
    args = pb.to_trl_dpo_config(config, output_dir="/tmp/rlbook-trl-dpo-test", logging_steps=2)
    assert args.loss_type == ["ipo"] and args.beta == 0.3 and args.max_steps == 7
    assert args.per_device_train_batch_size == 12 and args.gradient_accumulation_steps == 1
    assert args.learning_rate == 2e-4 and args.lr_scheduler_type == "constant" and args.warmup_steps == 0
    assert (args.weight_decay, args.max_grad_norm, args.seed) == (0.01, 0.5, 4)
    assert args.use_cpu and not args.bf16 and not args.precompute_ref_log_probs and args.logging_steps == 2
    with pytest.raises(ValueError) as err:
        pb.to_trl_dpo_config(rl.DPOConfig(loss_type="simpo", label_smoothing=0.1))
    assert "loss_type='simpo'" in str(err.value) and "label_smoothing=0.1" in str(err.value)
    with pytest.raises(ValueError, match="rlbook.DPOConfig"):
        pb.to_trl_dpo_config({"beta": 0.1})


def test_bridge_bad_inputs_name_the_argument():
    policy, ref = _model(0), _model(1)
    with pytest.raises(ValueError, match="loss_type='orpo'"):
        pb.build_trl_dpo_trainer(policy, ref, TOK, rl.DPOConfig(loss_type="orpo"))
    with pytest.raises(ValueError, match="config"):
        pb.rlbook_dpo_loss(policy, ref, _batch(), 0.1)
    with pytest.raises(ValueError, match="batch"):
        pb.rlbook_dpo_loss(policy, ref, {"input_ids": torch.ones(2, 3, dtype=torch.long)}, rl.DPOConfig())
    with pytest.raises(ValueError, match="reward_model"):
        pb.to_trl_reward_model(policy)


def test_the_same_config_trains_with_trls_dpo_trainer(tmp_path):
    """The mapped config drives a real TRL run on the book's model: two optimiser steps, weights move."""
    policy = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu")
    ref = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu")
    before = [p.detach().clone() for p in policy.parameters()]
    pairs = list(zip(PROMPTS, CHOSEN, REJECTED)) * 2
    config = rl.DPOConfig(num_steps=2, batch_size=4, lr=1e-3, device="cpu")
    trainer = pb.build_trl_dpo_trainer(policy, ref, TOK, config, pairs=pairs, output_dir=str(tmp_path), disable_tqdm=True)
    result = trainer.train()
    assert result.global_step == 2
    assert max((p - q).abs().max().item() for p, q in zip(policy.parameters(), before)) > 1e-4


def test_building_the_trainers_prints_nothing_a_reader_cannot_act_on(tmp_path, capfd):
    from datasets.utils import logging as ds_logging

    policy, ref = _model(0), _model(1)
    pb.build_trl_dpo_trainer(policy, ref, TOK, rl.DPOConfig(), output_dir=str(tmp_path / "dpo"))
    pb.build_trl_reward_trainer(pb.to_trl_reward_model(rl.lm.build_reward_model(_model(0))), TOK,
                                output_dir=str(tmp_path / "rm"))
    out, err = capfd.readouterr()
    for noise in ("Adding EOS", "Tokenizing", "examples/s", "checkpointing", "Loading weights"):
        assert noise not in out + err, (noise, err[-500:])
    assert ds_logging.is_progress_bar_enabled()  # restored for the reader's own data sets
