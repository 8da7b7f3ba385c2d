"""Language-model pieces: tokenizer, task + verifier, policy, sampler, log-probs, SFT, checkpoints.

Accessed as ``rl.lm.<name>`` (``import rlbook as rl``). Names resolve lazily, so importing
:mod:`rlbook` does not import ``transformers``; the first ``rl.lm.build_policy`` (say) does.

==========================  ======================================================================
module                      public names
==========================  ======================================================================
``rlbook.lm.tokenizer``     build_char_tokenizer, encode_prompts, forbidden_token_ids
``rlbook.lm.task``          AdditionTask (reward, format_reward), ScratchpadAdditionTask (free-length
                            working before the answer), Problem, corrupt_answer
``rlbook.lm.model``         policy_config, build_policy, load_policy, count_parameters
``rlbook.lm.sampling``      sample_completions, Completions, completion_mask_from_eos,
                            decode_completions
``rlbook.lm.logprobs``      token_log_probs, completion_log_probs, position_ids_from_mask
``rlbook.lm.gpt2_fast``     gpt2_forward, gpt2_prefill (a GPT-2's forward written out: the
                            sampler's and the scorer's fast path)
``rlbook.lm.sft``           SFTConfig, train_sft, sft_batch, load_or_train_sft
``rlbook.lm.standard``      tokenize_prompt_and_output, get_response_log_probs (the course-standard
                            right-padded layout; the loss steps are in :mod:`rlbook.steps`)
``rlbook.lm.checkpoint``    save_checkpoint, load_checkpoint
``rlbook.lm.critic``        build_critic, critic_values (a value head on the policy's GPT-2, for PPO),
                            FP32LMHead, fp32_lm_head (ScaleRL's float32 output layer)
``rlbook.lm.dpo``           encode_preference_pairs (TRL's pair layout), sequence_log_probs,
                            compute_per_instance_dpo_loss (CS336's signature)
``rlbook.lm.reward_model``  build_reward_model, sequence_rewards, RewardModelConfig,
                            reward_model_step, train_reward_model, reward_model_accuracy
==========================  ======================================================================

``rlbook.lm.preference_task``: GoldReward (correctness − λ·length), sample_preference_pairs,
PreferencePairs, bradley_terry_labels, best_of_n_estimate, proxy_rewards, ProxyRewardTask (a reward
model as GRPO's reward), completion_num_tokens.

GRPO itself lives in :mod:`rlbook.algos.grpo` (``rl.train_grpo``, ``rl.GRPOConfig``, ``rl.evaluate``).
"""

from __future__ import annotations

import importlib

_SUBMODULES = ("tokenizer", "task", "model", "sampling", "logprobs", "gpt2_fast", "sft", "standard", "checkpoint", "critic",
               "dpo", "reward_model", "preference_task")
_EXPORTS = {
    "tokenizer": ["SPECIAL_TOKENS", "DEFAULT_ALPHABET", "build_char_tokenizer", "encode_prompts", "forbidden_token_ids"],
    "task": ["Problem", "AdditionTask", "ScratchpadAdditionTask", "corrupt_answer", "FAMILIES"],
    "model": ["policy_config", "build_policy", "load_policy", "count_parameters"],
    "sampling": ["Completions", "completion_mask_from_eos", "sample_completions", "decode_completions"],
    "logprobs": ["token_log_probs", "completion_log_probs", "position_ids_from_mask"],
    "gpt2_fast": ["gpt2_forward", "gpt2_prefill"],
    "sft": ["SFTConfig", "sft_batch", "train_sft", "load_or_train_sft"],
    "standard": ["tokenize_prompt_and_output", "get_response_log_probs"],
    "checkpoint": ["save_checkpoint", "load_checkpoint"],
    "critic": ["build_critic", "critic_values", "FP32LMHead", "fp32_lm_head"],
    "dpo": ["encode_preference_pairs", "sequence_log_probs", "compute_per_instance_dpo_loss"],
    "reward_model": ["build_reward_model", "sequence_rewards", "RewardModelConfig", "reward_model_step",
                     "train_reward_model", "reward_model_accuracy"],
    "preference_task": ["completion_num_tokens", "GoldReward", "PreferencePairs", "sample_preference_pairs",
                        "bradley_terry_labels", "best_of_n_estimate", "proxy_rewards", "ProxyRewardTask"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f"rlbook.lm.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"rlbook.lm.{name}")
    raise AttributeError(f"module 'rlbook.lm' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
