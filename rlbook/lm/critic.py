"""A value model for PPO on a language model, and the FP32 LM head of low-precision runs.

PPO as used for language models before GRPO (Ouyang et al. 2022, arXiv:2203.02155; the "PPO"
baseline of Shao et al. 2024, arXiv:2402.03300, §4.1) trains a *critic* V_φ(s_t) beside the policy:
one scalar per completion position t, the expected final reward given the prompt and the tokens
so far. Its advantages are GAE over tokens (:func:`rlbook.gae`, γ = 1 by default, reward only at
the last token). GRPO's group baseline exists to remove exactly this network.

The critic here is the usual construction: a copy of the policy's transformer (initialised from
the policy, e.g. the SFT model) whose LM head is replaced by a linear map to one number. Reusing
the policy's scorer gives V at every completion position with the prompt encoded once per group.

``fp32_lm_head`` computes the LM head's matrix product in float32 for a model whose weights are
bf16/fp16 (MiniMax 2025, arXiv:2506.13585, §3; ScaleRL, arXiv:2510.13786, §3 "FP32 precision at
the LM head"): the sampler's and the trainer's logits then agree far more closely, and so do the
importance ratios built from them.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from rlbook import _checks

__all__ = ["build_critic", "critic_values", "FP32LMHead", "fp32_lm_head"]


def build_critic(policy, init_std: float = 0.0):
    """A value model: a deep copy of ``policy`` whose LM head maps each hidden state to one number.

    V_φ(s_t) = w·h_t + b,  h_t the final hidden state after the prompt and completion tokens < t.

    Args:
        policy: a causal LM with an ``lm_head`` linear layer over hidden size ``config.n_embd``
            (a GPT-2 such as :func:`rlbook.lm.build_policy` returns).
        init_std: std of the head's initial weights; 0 (default) starts from V ≡ 0.
    Returns:
        The critic module (same device and dtype as ``policy``, train/eval mode copied); its
        parameters are separate from the policy's (nothing shared).
    Raises:
        ValueError: ``policy`` has no ``lm_head`` / ``config.n_embd``, or ``init_std`` < 0.
    """
    _checks.check_in_range("init_std", init_std, 0.0)
    hidden = getattr(getattr(policy, "config", None), "n_embd", None)
    head = getattr(policy, "lm_head", None)
    if hidden is None or head is None:
        raise ValueError("`policy` must be a causal LM with `lm_head` and `config.n_embd` (e.g. a GPT-2)")
    critic = copy.deepcopy(policy)
    weight = next(critic.parameters())
    critic.lm_head = torch.nn.Linear(hidden, 1, bias=True, device=weight.device, dtype=weight.dtype)
    torch.nn.init.normal_(critic.lm_head.weight, std=init_std) if init_std else torch.nn.init.zeros_(critic.lm_head.weight)
    torch.nn.init.zeros_(critic.lm_head.bias)
    critic.requires_grad_(True)
    return critic


def critic_values(critic, prompt_ids, completion_ids, prompt_mask=None, completion_mask=None) -> torch.Tensor:
    """V_φ(s_t) for every completion position: (B, T) float32, 0 where ``completion_mask`` is False.

    s_t is the prompt plus completion tokens 0 … t−1, so V at t = 0 is the value of the prompt
    alone. Layouts as :func:`rlbook.lm.completion_log_probs` (``prompt_ids`` (B, P), or (N, P)
    with B = N·G and the prompt encoded once per group).

    Args:
        critic: a model from :func:`build_critic`.
        prompt_ids, completion_ids, prompt_mask, completion_mask: as
            :func:`rlbook.lm.completion_log_probs`.
    Returns:
        (B, T) float32 values, in reward units.
    Gradient:
        through the critic's parameters (wrap in ``torch.no_grad()`` for the rollout values).
    Raises:
        ValueError: shapes as :func:`rlbook.lm.completion_log_probs`, or a critic whose head
            does not output one number.
    """
    from rlbook.lm.logprobs import _completion_outputs

    if getattr(getattr(critic, "lm_head", None), "out_features", None) != 1:
        raise ValueError("`critic` must come from build_critic (an lm_head with one output)")
    out, _, completion_mask = _completion_outputs(critic, prompt_ids, completion_ids, prompt_mask, completion_mask)
    values = out[..., 0].float()  # (B, T)
    if completion_mask is not None:
        values = torch.where(completion_mask, values, torch.zeros_like(values))
    return values


class FP32LMHead(torch.nn.Module):
    """Wraps a linear LM head so its product runs in float32: logits = float32(h)·float32(W)ᵀ + b.

    The wrapped layer keeps its parameters (tied embeddings stay tied); gradients flow to them
    through the casts. Source: MiniMax 2025, arXiv:2506.13585, §3 (LM-head precision).
    """

    def __init__(self, head: torch.nn.Linear):
        super().__init__()
        self.head = head

    @property
    def weight(self):
        return self.head.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        bias = None if self.head.bias is None else self.head.bias.float()
        return F.linear(hidden.float(), self.head.weight.float(), bias)


def fp32_lm_head(model):
    """Make ``model``'s LM head compute in float32 (in place; idempotent). Returns ``model``.

    Logits come out float32 whatever the weights' dtype; for a float32 model nothing changes.

    Raises:
        ValueError: ``model`` has no ``lm_head`` linear layer.
    """
    head = getattr(model, "lm_head", None)
    if isinstance(head, FP32LMHead):
        return model
    if not isinstance(head, torch.nn.Linear):
        raise ValueError("`model` must have an `lm_head` torch.nn.Linear (a causal LM such as GPT-2)")
    model.lm_head = FP32LMHead(head)
    return model
