"""A bridge to TRL for preferences: DPO (sigmoid, IPO) and the reward model, losses checked equal.

As :mod:`rlbook.bridge` does for GRPO, this module expresses the book's preference losses with
TRL's trainers and evaluates TRL's own loss code on a batch given from outside, so a test can
compare value and gradient with rlbook's on the same float64 model:

* :func:`to_trl_dpo_config` maps an :class:`rlbook.DPOConfig` onto a ``trl.DPOConfig`` (and names
  what TRL's DPOTrainer cannot express); :func:`build_trl_dpo_trainer` makes the ``trl.DPOTrainer``
  for our policy and reference model; :func:`trl_dpo_loss` runs ``DPOTrainer._compute_loss``;
  :func:`rlbook_dpo_loss` is the same loss from :func:`rlbook.lm.sequence_log_probs` and
  :func:`rlbook.dpo_loss` / :func:`rlbook.ipo_loss`.
* :func:`to_trl_reward_model` copies a reward model (:func:`rlbook.lm.build_reward_model`) into
  the ``GPT2ForSequenceClassification`` TRL's ``RewardTrainer`` trains; :func:`trl_reward_loss`
  runs ``RewardTrainer.compute_loss``; :func:`rlbook_reward_loss` is the mean
  :func:`rlbook.bradley_terry_loss` from :func:`rlbook.lm.sequence_rewards`.

The correspondence:

==================  ===========================================  =========================================
TRL                 rlbook                                       note
==================  ===========================================  =========================================
loss_type sigmoid   dpo_loss(Σ log π_c, Σ log π_r, …, β)          sums over the response tokens (EOS too)
loss_type ipo       ipo_loss(Σ log π_c/|y_c|, …, β)               TRL averages per token before IPO's square
RewardTrainer       bradley_terry_loss(r_c, r_r).mean()          r read at the last non-pad token
==================  ===========================================  =========================================

TRL's ``DPOConfig.label_smoothing`` is not read by its "sigmoid" loss (TRL 1.16; its "robust" loss
is a different correction), so cDPO (``dpo_loss(..., label_smoothing=ε)``) has no TRL counterpart
here. TRL's reward model (a sequence classifier) has no bias in its head; the bridge drops the
bias of ours, which shifts every reward by the same constant and leaves Bradley–Terry unchanged.

Batches are :func:`rlbook.lm.encode_preference_pairs` dicts: TRL's own collator layout.

TRL is an optional dependency (``pip install "rlbook[trl]"``); this module imports it on use.

Source: von Werra et al., TRL (2020–), ``DPOTrainer._compute_loss``, ``RewardTrainer.compute_loss``;
Rafailov et al. 2023, arXiv:2305.18290; Azar et al. 2023, arXiv:2310.12036.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile

import torch

from rlbook.algos.dpo import DPOConfig, preference_loss
from rlbook.bridge import _quiet_trl_internals, require_trl
from rlbook.config import get_device
from rlbook.lm.dpo import sequence_log_probs
from rlbook.lm.model import quiet_weight_progress
from rlbook.lm.reward_model import sequence_rewards
from rlbook.preferences import bradley_terry_loss

__all__ = ["DPO_LOSS_TYPES", "to_trl_dpo_config", "build_trl_dpo_trainer", "trl_dpo_loss", "rlbook_dpo_loss", "to_trl_reward_model",
           "build_trl_reward_trainer", "trl_reward_loss", "rlbook_reward_loss"]

DPO_LOSS_TYPES = ("sigmoid", "ipo")


def _common_args(config_class, output_dir: str | None) -> dict:
    """Settings shared by both trainers: CPU, float32/64 (no bf16), no logging service, no saves, no
    activation checkpointing (set under the name this transformers knows, so it does not warn)."""
    names = {field.name for field in dataclasses.fields(config_class)}
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    return {"output_dir": output_dir or tempfile.mkdtemp(prefix="rlbook-trl-"), "use_cpu": True, "bf16": False,
            "report_to": "none", "save_strategy": "no", "per_device_train_batch_size": 2, "max_steps": 1,
            "disable_dropout": True, checkpointing: False}


@contextlib.contextmanager
def _quiet_construction():
    """TRL's trainers map their data set on construction, and ``datasets`` draws a bar per map; within
    the block it draws none (the setting is restored after), and TRL's own notices are filtered as in
    :func:`rlbook.bridge.build_trl_trainer`."""
    from datasets.utils import logging as ds_logging

    _quiet_trl_internals()
    was_enabled = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()
    try:
        with quiet_weight_progress():
            yield
    finally:
        if was_enabled:
            ds_logging.enable_progress_bar()


def _pair_dataset(tokenizer, pairs):
    from datasets import Dataset

    pairs = pairs or [("1+2=", "3", "4")]
    bos = tokenizer.bos_token or ""
    return Dataset.from_dict({"prompt": [bos + p for p, _, _ in pairs], "chosen": [c for _, c, _ in pairs],
                              "rejected": [r for _, _, r in pairs]})


def _check_batch(batch: dict, keys) -> None:
    missing = [k for k in keys if k not in batch]
    if missing:
        raise ValueError(f"`batch` must be an rlbook.lm.encode_preference_pairs dict; missing {missing}")
    if batch["input_ids"].shape[0] % 2:
        raise ValueError(f"`batch` must hold 2B rows (B chosen, then B rejected); got {batch['input_ids'].shape[0]}")


def to_trl_dpo_config(config: DPOConfig, output_dir: str | None = None, **overrides):
    """A ``trl.DPOConfig`` that trains what :func:`rlbook.train_dpo` trains with ``config``.

    Mapped: ``loss_type`` ("sigmoid", "ipo"), ``beta``, ``lr`` → ``learning_rate`` with a constant
    schedule and no warm-up, ``weight_decay``, ``max_grad_norm``, ``batch_size`` →
    ``per_device_train_batch_size`` (one process, no accumulation), ``num_steps`` → ``max_steps``,
    ``seed``; CPU unless ``device`` says otherwise, no bf16, no dropout, the reference model's
    log-probs computed on the fly. Not mapped: TRL's batches are drawn by its sampler (epochs over
    the data set), rlbook's with replacement by ``seed``.

    Args:
        config: an :class:`rlbook.DPOConfig`.
        output_dir: TRL's output folder (default: a new temporary folder).
        **overrides: any ``trl.DPOConfig`` field, applied last.
    Returns:
        a ``trl.DPOConfig``.
    Raises:
        ValueError: one message naming every setting TRL's DPOTrainer cannot express (SimPO and
            ORPO are other TRL trainers; TRL's "sigmoid" ignores label smoothing).
        ImportError: TRL is not installed.
    """
    if not isinstance(config, DPOConfig):
        raise ValueError(f"`config` must be an rlbook.DPOConfig; got {type(config).__name__}")
    problems = []
    if config.loss_type not in DPO_LOSS_TYPES:
        problems.append(f"loss_type={config.loss_type!r}: TRL's DPOTrainer bridge covers {DPO_LOSS_TYPES} "
                        "(SimPO is trl.CPOTrainer with loss_type='simpo', ORPO is trl.ORPOTrainer)")
    if config.label_smoothing:
        problems.append(f"label_smoothing={config.label_smoothing!r}: TRL's 'sigmoid' loss does not read it (cDPO)")
    if problems:
        raise ValueError("TRL cannot express these rlbook settings:\n  - " + "\n  - ".join(problems))
    trl = require_trl()
    cpu = get_device(config.device).type == "cpu"
    fields = {**_common_args(trl.DPOConfig, output_dir), "beta": config.beta, "loss_type": [config.loss_type],
              "learning_rate": config.lr, "lr_scheduler_type": "constant", "warmup_steps": 0,
              "weight_decay": config.weight_decay, "max_grad_norm": config.max_grad_norm,
              "per_device_train_batch_size": config.batch_size, "gradient_accumulation_steps": 1,
              "max_steps": config.num_steps, "seed": config.seed, "use_cpu": cpu, "max_length": None,
              "precompute_ref_log_probs": False}
    fields.update(overrides)
    return trl.DPOConfig(**fields)


def build_trl_dpo_trainer(policy, ref_policy, tokenizer, config: DPOConfig, pairs=None, output_dir: str | None = None,
                          **overrides):
    """A ``trl.DPOTrainer`` over ``policy`` with ``ref_policy`` as π_ref, configured by :func:`to_trl_dpo_config`.

    Args:
        policy: the causal LM to train (TRL patches its forward with a fused log-prob head; the
            ordinary call is unchanged).
        ref_policy: the frozen reference model (a separate object).
        tokenizer: their tokenizer.
        config: an :class:`rlbook.DPOConfig` with ``loss_type`` "sigmoid" or "ipo".
        pairs: (prompt, chosen, rejected) strings for TRL's data set (only needed to train with
            ``trainer.train()``; default one placeholder pair).
        output_dir, **overrides: passed to :func:`to_trl_dpo_config`.
    Returns:
        a ``trl.DPOTrainer``.
    Raises:
        ValueError, ImportError: as :func:`to_trl_dpo_config`.
    """
    trl = require_trl()
    args = to_trl_dpo_config(config, output_dir, **overrides)
    with _quiet_construction():
        return trl.DPOTrainer(model=policy, ref_model=ref_policy, args=args, train_dataset=_pair_dataset(tokenizer, pairs),
                              processing_class=tokenizer)


def trl_dpo_loss(trainer, batch: dict) -> torch.Tensor:
    """TRL's DPO loss on one batch, by TRL's own code (``DPOTrainer._compute_loss``), mean over pairs.

    Args:
        trainer: a ``trl.DPOTrainer`` (e.g. from :func:`build_trl_dpo_trainer`).
        batch: :func:`rlbook.lm.encode_preference_pairs`'s dict (``input_ids``, ``attention_mask``,
            ``completion_mask``; first half chosen).
    Returns:
        the 0-d loss with its graph (``.backward()`` gives TRL's gradient in ``trainer.model``).
    Raises:
        ValueError: a key is missing or the rows are odd in number.
    """
    _check_batch(batch, ("input_ids", "attention_mask", "completion_mask"))
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"].long(),
              "completion_mask": batch["completion_mask"].long()}
    trainer.model.train()
    try:
        return trainer._compute_loss(trainer.model, inputs, return_outputs=False)
    finally:
        trainer.model.eval()


def rlbook_dpo_loss(policy, ref_policy, batch: dict, config: DPOConfig) -> torch.Tensor:
    """rlbook's DPO (or IPO) loss on the batch, mean over pairs: the counterpart of :func:`trl_dpo_loss`.

    The loss :func:`rlbook.algos.dpo.dpo_step` minimises: sequence log-probs by
    :func:`rlbook.lm.sequence_log_probs` (π_ref under ``torch.no_grad()``), then
    :func:`rlbook.algos.dpo.preference_loss` (:func:`rlbook.dpo_loss` on the sums, or
    :func:`rlbook.ipo_loss` on the per-token averages, TRL's normalisation).

    Args:
        policy, ref_policy: the causal LMs. batch: as :func:`trl_dpo_loss`.
        config: an :class:`rlbook.DPOConfig`.
    Returns:
        the 0-d loss with its graph through ``policy``.
    Raises:
        ValueError: as :func:`trl_dpo_loss`, or ``config`` not a DPOConfig.
    """
    if not isinstance(config, DPOConfig):
        raise ValueError(f"`config` must be an rlbook.DPOConfig; got {type(config).__name__}")
    _check_batch(batch, ("input_ids", "attention_mask", "completion_mask"))
    log_probs = sequence_log_probs(policy, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    with torch.no_grad():
        ref = sequence_log_probs(ref_policy, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    return preference_loss(log_probs, ref, batch["completion_mask"].sum(-1), config).mean()


def to_trl_reward_model(reward_model):
    """The same network as a ``transformers.GPT2ForSequenceClassification`` (``num_labels=1``).

    The transformer's weights are copied and the scalar head's weight becomes ``score.weight``;
    the head's bias is dropped (the classifier has none; Bradley–Terry ignores a shared shift).

    Args:
        reward_model: a GPT-2 from :func:`rlbook.lm.build_reward_model`.
    Returns:
        the classifier (same dtype and device, ``eval()`` mode), independent of ``reward_model``.
    Raises:
        ValueError: not a GPT-2 reward model (a ``transformer`` and a one-output ``lm_head``).
    """
    from transformers import GPT2ForSequenceClassification

    head = getattr(reward_model, "lm_head", None)
    if getattr(head, "out_features", None) != 1 or not hasattr(reward_model, "transformer"):
        raise ValueError("`reward_model` must be a GPT-2 from rlbook.lm.build_reward_model")
    config = reward_model.config.__class__.from_dict(reward_model.config.to_dict())
    config.num_labels = 1
    weight = head.weight
    classifier = GPT2ForSequenceClassification(config).to(device=weight.device, dtype=weight.dtype)
    classifier.transformer.load_state_dict(reward_model.transformer.state_dict())
    with torch.no_grad():
        classifier.score.weight.copy_(weight)
    return classifier.eval()


def build_trl_reward_trainer(classifier, tokenizer, pairs=None, output_dir: str | None = None, **overrides):
    """A ``trl.RewardTrainer`` over ``classifier`` (from :func:`to_trl_reward_model`).

    Args:
        classifier: a sequence classifier with ``num_labels=1``.
        tokenizer: its tokenizer. pairs: (prompt, chosen, rejected) strings for TRL's data set
            (default one placeholder pair).
        output_dir, **overrides: TRL's output folder and any ``trl.RewardConfig`` field.
    Returns:
        a ``trl.RewardTrainer`` (``center_rewards_coefficient`` None: the plain Bradley–Terry loss).
    Raises:
        ImportError: TRL is not installed.
    """
    trl = require_trl()
    from datasets import Dataset

    args = trl.RewardConfig(**{**_common_args(trl.RewardConfig, output_dir), "center_rewards_coefficient": None, "max_length": None,
                               **overrides})
    data = _pair_dataset(tokenizer, pairs)
    data = Dataset.from_dict({"chosen": [p + c for p, c in zip(data["prompt"], data["chosen"])],
                              "rejected": [p + r for p, r in zip(data["prompt"], data["rejected"])]})
    with _quiet_construction():
        return trl.RewardTrainer(model=classifier, args=args, train_dataset=data, processing_class=tokenizer)


def trl_reward_loss(trainer, batch: dict) -> torch.Tensor:
    """TRL's reward-model loss on one batch, by TRL's own code (``RewardTrainer.compute_loss``).

    Args:
        trainer: a ``trl.RewardTrainer``.
        batch: :func:`rlbook.lm.encode_preference_pairs`'s dict (its ``completion_mask`` unused).
    Returns:
        the 0-d loss with its graph through ``trainer.model``.
    Raises:
        ValueError: a key is missing or the rows are odd in number.
    """
    _check_batch(batch, ("input_ids", "attention_mask"))
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"].long()}
    trainer.model.train()
    try:
        return trainer.compute_loss(trainer.model, inputs)
    finally:
        trainer.model.eval()


def rlbook_reward_loss(reward_model, batch: dict) -> torch.Tensor:
    """mean_i −log σ(r_φ(x_i, y_c) − r_φ(x_i, y_r)): the counterpart of :func:`trl_reward_loss`.

    Args:
        reward_model: from :func:`rlbook.lm.build_reward_model`. batch: as :func:`trl_reward_loss`.
    Returns:
        the 0-d loss with its graph through ``reward_model``.
    Raises:
        ValueError: as :func:`trl_reward_loss` or :func:`rlbook.lm.sequence_rewards`.
    """
    _check_batch(batch, ("input_ids", "attention_mask"))
    rewards = sequence_rewards(reward_model, batch["input_ids"], batch["attention_mask"])
    half = rewards.shape[0] // 2
    return bradley_terry_loss(rewards[:half], rewards[half:]).mean()
