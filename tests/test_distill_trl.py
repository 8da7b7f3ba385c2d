"""rl.generalized_jsd against TRL 1.16's own distillation losses, and the config bridge to trl.DistillationConfig.

Two pieces of TRL's code are run on the same batch of random logits (B = 2, T = 5, V = 11, the last
row padded) at β ∈ {0, 0.3, 0.5, 1} and temperature 0.7: ``GKDTrainer.generalized_jsd_loss`` (a static
method, under ``trl.experimental.gkd`` in TRL 1.16) with every reduction, and the chunked
hidden-state kernel behind ``DistillationTrainer`` (``_chunked_divergence_loss``) with an identity
LM head, so that its hidden states are the logits. Loss and gradient w.r.t. the student's logits
must equal rlbook's.
"""

import warnings

import pytest
import torch

trl = pytest.importorskip("trl", reason="the TRL comparison tests need the `trl` extra: pip install -e '.[trl]'")

import rlbook as rl  # noqa: E402

BETAS = [0.0, 0.3, 0.5, 1.0]  # 0.3: β ≠ 1 − β, so a swapped mixture would show
TAU = 0.7


def _gkd_jsd_loss():
    """TRL's ``GKDTrainer.generalized_jsd_loss``, wherever this TRL version keeps the trainer."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TRLExperimentalWarning on importing trl.experimental
        try:
            from trl.experimental.gkd import GKDTrainer
        except ImportError:
            GKDTrainer = getattr(trl, "GKDTrainer", None)
    if GKDTrainer is None:
        pytest.skip(f"trl {trl.__version__} has no GKDTrainer")
    return GKDTrainer.generalized_jsd_loss


def _batch(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=g, dtype=dtype) * 2
    teacher = torch.randn(2, 5, 11, generator=g, dtype=dtype) * 2
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    labels = torch.where(mask, torch.zeros(2, 5, dtype=torch.long), torch.full((2, 5), -100))  # TRL's padding
    return logits, teacher, mask, labels


def _loss_and_grad(fn, logits):
    z = logits.clone().requires_grad_(True)
    loss = fn(z)
    (grad,) = torch.autograd.grad(loss, z)
    return loss.detach(), grad


# (TRL's reduction, does TRL get labels, rlbook's reduction, does rlbook get the mask)
REDUCTIONS = [
    ("batchmean", True, "token_mean", True),
    ("sum", True, "sum", True),
    ("mean", True, "mean", True),
    ("batchmean", False, "batchmean", False),
    ("sum", False, "sum", False),
]


@pytest.mark.parametrize("trl_reduction, with_labels, reduction, with_mask", REDUCTIONS)
@pytest.mark.parametrize("beta", BETAS)
def test_gkd_generalized_jsd_loss_equals_rlbook(beta, trl_reduction, with_labels, reduction, with_mask):
    trl_jsd = _gkd_jsd_loss()
    logits, teacher, mask, labels = _batch()
    want, want_grad = _loss_and_grad(lambda z: trl_jsd(z, teacher, labels=labels if with_labels else None, beta=beta,
                                                       temperature=TAU, reduction=trl_reduction), logits)
    got, got_grad = _loss_and_grad(lambda z: rl.generalized_jsd(z, teacher, beta, temperature=TAU,
                                                                mask=mask if with_mask else None,
                                                                reduction=reduction), logits)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-14)
    assert float(want) > 1e-3 and float(want_grad.abs().max()) > 1e-4


@pytest.mark.parametrize("beta", BETAS)
def test_gkd_unreduced_and_num_items_in_batch(beta):
    """TRL's "none" is elementwise over the valid positions, (N_valid, V): its sum over V is rlbook's
    per-position value; ``num_items_in_batch=N`` is the sum divided by N."""
    trl_jsd = _gkd_jsd_loss()
    logits, teacher, mask, labels = _batch()
    weights = torch.rand(int(mask.sum()), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    want, want_grad = _loss_and_grad(lambda z: (trl_jsd(z, teacher, labels=labels, beta=beta, temperature=TAU,
                                                        reduction="none").sum(-1) * weights).sum(), logits)
    got, got_grad = _loss_and_grad(lambda z: (rl.generalized_jsd(z, teacher, beta, temperature=TAU, mask=mask,
                                                                 reduction="none")[mask] * weights).sum(), logits)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-14)
    n = 13
    torch.testing.assert_close(
        rl.generalized_jsd(logits, teacher, beta, temperature=TAU, mask=mask, reduction="sum") / n,
        trl_jsd(logits, teacher, labels=labels, beta=beta, temperature=TAU, num_items_in_batch=n),
        rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("beta", BETAS)
def test_distillation_trainer_chunked_loss_equals_rlbook(beta):
    """The loss ``DistillationTrainer`` optimises (its chunked kernel, float32, run by torch on a CPU)
    with an identity LM head: hidden states = logits, so its gradient w.r.t. them is w.r.t. the logits."""
    try:
        from trl.trainer.distillation_trainer import _chunked_divergence_loss
    except ImportError:
        pytest.skip(f"trl {trl.__version__} has no trl.trainer.distillation_trainer._chunked_divergence_loss")
    logits, teacher, mask, _ = _batch(torch.float32)
    eye = torch.eye(logits.shape[-1])
    want, want_grad = _loss_and_grad(
        lambda z: _chunked_divergence_loss(z, teacher, eye, eye, mask.long(), beta, temperature=TAU)[0], logits)
    got, got_grad = _loss_and_grad(
        lambda z: rl.generalized_jsd(z, teacher, beta, temperature=TAU, mask=mask, reduction="token_mean"), logits)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=1e-6)
    assert float(want) > 1e-3


def test_to_trl_distillation_config_carries_the_book_values(tmp_path):
    config = rl.DistillationConfig(temperature=0.7, max_new_tokens=33, lr=3e-4, num_steps=17, seed=5, max_grad_norm=0.5)
    trl_config = rl.to_trl_distillation_config(config, output_dir=str(tmp_path), per_device_train_batch_size=3)
    assert isinstance(trl_config, trl.DistillationConfig)
    got = {name: getattr(trl_config, name) for name in
           ("beta", "temperature", "max_completion_length", "learning_rate", "max_steps", "seed", "max_grad_norm")}
    assert got == {"beta": 1.0, "temperature": 0.7, "max_completion_length": 33, "learning_rate": 3e-4,
                   "max_steps": 17, "seed": 5, "max_grad_norm": 0.5}
    assert trl_config.output_dir == str(tmp_path) and trl_config.per_device_train_batch_size == 3
    assert trl_config.bf16 is False and trl_config.warmup_steps == 0
    assert str(getattr(trl_config.lr_scheduler_type, "value", trl_config.lr_scheduler_type)) == "constant"
    assert not getattr(trl_config, "activation_checkpointing", trl_config.gradient_checkpointing)
    full = rl.to_trl_distillation_config(rl.DistillationConfig(reward="full", beta=0.25), output_dir=str(tmp_path))
    assert full.beta == 0.25 and full.max_steps == 100 and full.max_completion_length == 128
    assert full.learning_rate == rl.DistillationConfig().lr
