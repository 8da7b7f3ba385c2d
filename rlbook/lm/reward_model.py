"""A reward model: the book's transformer with a scalar head, trained on comparisons by Bradley–Terry.

r_φ(x, y) = w·h_last + b, where h_last is the final hidden state at the last real token of x ‖ y
(the response's EOS). The network is the critic's (:func:`rlbook.lm.build_critic`: a copy of the
policy whose LM head maps a hidden state to one number); a reward model reads that number at one
position instead of at every position. Training maximises the Bradley–Terry likelihood of the
labelled preferences (:func:`rlbook.bradley_terry_loss`), as in Ouyang et al. 2022
(arXiv:2203.02155, §3.5) and TRL's ``RewardTrainer``.

Usage:
    >>> rm = rl.lm.build_reward_model(policy)
    >>> hist = rl.lm.train_reward_model(rm, tok, prompts, chosen, rejected, rl.lm.RewardModelConfig(num_steps=100))
    >>> rl.lm.reward_model_accuracy(rm, tok, test_prompts, test_chosen, test_rejected)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from rlbook import _checks
from rlbook.config import get_device
from rlbook.history import History
from rlbook.lm.critic import build_critic
from rlbook.lm.dpo import encode_preference_pairs
from rlbook.lm.logprobs import position_ids_from_mask
from rlbook.preferences import bradley_terry_loss

__all__ = ["build_reward_model", "sequence_rewards", "RewardModelConfig", "reward_model_step", "train_reward_model",
           "reward_model_accuracy"]


def build_reward_model(policy, init_std: float = 0.0, seed: int = 0):
    """A reward model initialised from ``policy``: the critic's network (:func:`rlbook.lm.build_critic`).

    Args:
        policy: a GPT-2 causal LM (e.g. the SFT model, as in Ouyang et al. 2022; or a fresh one).
        init_std: std of the scalar head's initial weights (0: every reward starts at 0).
        seed: seed of the head's initial weights (a local generator state; the global RNG is
            restored afterwards).
    Returns:
        A separate model whose ``lm_head`` outputs one number per position.
    Raises:
        ValueError: as :func:`rlbook.lm.build_critic`.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return build_critic(policy, init_std=init_std)


def sequence_rewards(reward_model, input_ids, attention_mask) -> torch.Tensor:
    """r_φ of each row, read at its last real token (the EOS of the response).

    Rows may be right- or left-padded: the last True of ``attention_mask`` is the scored position,
    and position ids count from each row's first real token.

    Source: Ouyang et al. 2022, arXiv:2203.02155, §3.5; Stiennon et al. 2020, arXiv:2009.01325,
    §3.4 (the scalar read at the final token).

    Args:
        reward_model: a model from :func:`build_reward_model`.
        input_ids: (N, L) long. attention_mask: (N, L) bool, at least one True per row.
    Returns:
        (N,) rewards, float32 (float64 for a float64 model), logit units of Bradley–Terry, on the
        reward model's device (ids and mask elsewhere are moved there first).
    Gradient:
        through the reward model's parameters.
    Raises:
        ValueError: shapes differ, not 2-D, a row with no real token, or a model whose head does
            not output one number.
    """
    if getattr(getattr(reward_model, "lm_head", None), "out_features", None) != 1:
        raise ValueError("`reward_model` must come from build_reward_model (an lm_head with one output)")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError("`input_ids` must be a 2-D tensor (N, L) of token ids")
    input_ids = input_ids.to(reward_model.lm_head.weight.device)  # the ids meet the model's embedding: move them once
    mask = _checks.check_bool_like("attention_mask", attention_mask, input_ids.shape).to(input_ids.device)
    if not mask.any(-1).all():
        raise ValueError("`attention_mask` has a row with no real token")
    out = reward_model(input_ids=input_ids, attention_mask=mask.long(), position_ids=position_ids_from_mask(mask),
                       use_cache=False).logits[..., 0]  # (N, L)
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).amax(-1)  # (N,) last real column
    values = out.gather(1, last[:, None]).squeeze(1)
    return values if values.dtype == torch.float64 else values.float()


@dataclass
class RewardModelConfig:
    """Settings of :func:`train_reward_model`.

    Attributes:
        num_steps: optimiser updates.
        batch_size: preference pairs per update (drawn with replacement by ``seed``).
        lr: AdamW learning rate (constant).
        weight_decay: AdamW weight decay.
        max_grad_norm: global gradient-norm clip (``inf``: none).
        seed: seed of the minibatch draws.
        device: "cpu", "cuda" or None (``rl.get_device()``).
    """

    num_steps: int = 200
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 0
    device: str | None = None

    def __post_init__(self):
        for name in ("num_steps", "batch_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"`{name}` must be ≥ 1; got {getattr(self, name)}")
        _checks.check_positive("lr", self.lr)
        _checks.check_in_range("weight_decay", self.weight_decay, 0.0)
        _checks.check_positive("max_grad_norm", self.max_grad_norm)


def reward_model_step(reward_model, optimizer, batch: dict, max_grad_norm: float = float("inf")) -> dict:
    """One update of the reward model on a batch of pairs: L = mean_i −log σ(r_φ(x_i, y_c) − r_φ(x_i, y_r)).

    zero_grad → forward on the 2B rows → Bradley–Terry loss (mean over pairs) → backward → clip →
    ``optimizer.step()``.

    Args:
        reward_model: from :func:`build_reward_model`.
        optimizer: a torch optimizer over its parameters.
        batch: :func:`rlbook.lm.encode_preference_pairs`'s dict (first half chosen).
        max_grad_norm: clip of the global gradient norm.
    Returns:
        dict of floats measured before the step: ``loss``, ``accuracy`` (share of pairs with
        r_c > r_r), ``margin`` (mean r_c − r_r), ``grad_norm`` (before clipping).
    Raises:
        ValueError: as :func:`sequence_rewards`, or an odd number of rows.
    """
    rows = batch["input_ids"].shape[0]
    if rows % 2:
        raise ValueError(f"`batch` must hold 2B rows (B chosen, then B rejected); got {rows}")
    optimizer.zero_grad(set_to_none=True)
    rewards = sequence_rewards(reward_model, batch["input_ids"], batch["attention_mask"])
    chosen, rejected = rewards[: rows // 2], rewards[rows // 2 :]
    loss = bradley_terry_loss(chosen, rejected).mean()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(reward_model.parameters(), max_grad_norm)
    optimizer.step()
    with torch.no_grad():
        return {"loss": loss.item(), "accuracy": (chosen > rejected).float().mean().item(),
                "margin": (chosen - rejected).mean().item(), "grad_norm": float(grad_norm)}


def train_reward_model(reward_model, tokenizer, prompts, chosen, rejected, config: RewardModelConfig | None = None,
                       progress: bool = True) -> History:
    """Fit the reward model to preference pairs by Bradley–Terry maximum likelihood (AdamW).

    Each step draws ``batch_size`` pairs with replacement (seeded by ``config.seed``) and calls
    :func:`reward_model_step`.

    Args:
        reward_model: from :func:`build_reward_model` (trained in place).
        tokenizer: the policy's tokenizer.
        prompts, chosen, rejected: N strings each; ``chosen[i]`` is preferred to ``rejected[i]``.
        config: a :class:`RewardModelConfig`.
        progress: show a progress bar.
    Returns:
        a :class:`rlbook.History` with per-step ``loss``, ``accuracy``, ``margin``, ``grad_norm``.
    Raises:
        ValueError: the lists differ in length or are empty (see :func:`rlbook.lm.encode_preference_pairs`).
    """
    config = config or RewardModelConfig()
    device = get_device(config.device)
    data = encode_preference_pairs(tokenizer, prompts, chosen, rejected)
    n = len(prompts)
    reward_model.to(device).eval()  # eval(): dropout off; gradients still flow
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(reward_model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history, start = History(config=config), time.perf_counter()
    for _ in tqdm(range(config.num_steps), desc="reward model", disable=not progress, mininterval=1.0):
        pick = torch.randint(0, n, (config.batch_size,), generator=generator)
        rows = torch.cat([pick, pick + n])
        batch = {k: v[rows].to(device) for k, v in data.items()}
        history.log(**reward_model_step(reward_model, optimizer, batch, config.max_grad_norm))
    history.wall_seconds = time.perf_counter() - start
    return history


@torch.no_grad()
def reward_model_accuracy(reward_model, tokenizer, prompts, chosen, rejected, batch_size: int = 256) -> float:
    """Share of pairs the reward model orders as labelled: mean_i [r_φ(x_i, y_c) > r_φ(x_i, y_r)].

    Args:
        reward_model, tokenizer: as :func:`train_reward_model`.
        prompts, chosen, rejected: N strings each.
        batch_size: pairs scored per forward pass.
    Returns:
        accuracy in [0, 1] (ties count as wrong).
    Raises:
        ValueError: as :func:`rlbook.lm.encode_preference_pairs`.
    """
    device = next(reward_model.parameters()).device
    right = 0
    for start in range(0, len(prompts), batch_size):
        end = start + batch_size
        batch = encode_preference_pairs(tokenizer, prompts[start:end], chosen[start:end], rejected[start:end])
        rewards = sequence_rewards(reward_model, batch["input_ids"].to(device), batch["attention_mask"].to(device))
        half = rewards.shape[0] // 2
        right += int((rewards[:half] > rewards[half:]).sum())
    return right / len(prompts)
