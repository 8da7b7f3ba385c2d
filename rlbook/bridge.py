"""A bridge to TRL: the book's GRPO recipe as a TRL ``GRPOTrainer``, with the loss checked equal.

Chapters 9 and later train with :func:`rlbook.train_grpo`, a loop written to be read. To take a
recipe to a real model on a GPU, use a production trainer, and make sure it optimises the same
loss. This module does both halves:

* :func:`to_trl_config` maps every :class:`rlbook.GRPOConfig` field that TRL has onto a
  ``trl.GRPOConfig`` (and sets the TRL switches whose defaults differ from the book's, such as
  ``use_bias_correction_kl``), and raises one error that names *every* setting TRL cannot express.
* :func:`build_trl_trainer` makes a ``trl.GRPOTrainer`` for the book's model and task.
* :func:`trl_loss` evaluates TRL's own loss code (``GRPOTrainer._compute_loss``) on a batch
  given from outside, so a test can compare it with rlbook's loss and gradient on the same batch.

The correspondence (rlbook ``per_token_loss`` × ``loss_aggregation`` → TRL ``loss_type``):

=====================  ======================  ==========  ==============================================
per_token_loss         loss_aggregation        TRL         normaliser
=====================  ======================  ==========  ==============================================
clipped_surrogate      seq_mean_token_mean     grpo        mean over sequences of per-sequence token means
clipped_surrogate      token_mean              dapo        all response tokens of the batch
clipped_surrogate      fixed_length_mean       dr_grpo     B · max_completion_length
cispo                  token_mean              cispo       all response tokens of the batch
=====================  ======================  ==========  ==============================================

TRL's ``bnpo`` is the token mean of each micro-batch; with one micro-batch per step it equals
``dapo``, and :func:`to_trl_config` maps ``token_mean`` to ``dapo``, whose normaliser is the whole
batch's token count as in rlbook. TRL's ``cispo`` caps the weight at ``epsilon_high`` (a ratio, not
an offset) and has no lower cap, so it expresses rlbook's CISPO only with ``clip_eps_low ≥ 1`` (no
lower cap, as MiniMax-M1 uses), mapping ``epsilon_high = 1 + clip_eps_high``.

Advantages: TRL's ``scale_rewards="group"`` divides by the *sample* std of the group
(``torch.std``), plus 1e-4; rlbook's ``advantage_std="sample"`` divides by the same std plus 1e-6.
The constants differ (TRL's is not configurable): for 0/1 rewards the group std is 0 (both give 0)
or at least 0.35, so the advantages agree to a relative 3e-4. :func:`trl_loss` takes advantages
as given, so the equality tests compare the losses themselves exactly.

The policy: rlbook's sampler and scorer remove the special tokens other than EOS from the softmax
(``forbidden_ids``), while TRL scores with the full vocabulary. The loss *functions* are the same;
to compare them on one policy, :func:`rlbook_grpo_loss` scores with ``forbidden_ids=()`` by default.
For a model that rarely emits those tokens (the book's, after supervised training) the two policies
differ little; a TRL run can forbid them in sampling with ``generation_kwargs={"bad_words_ids":
[[i] for i in rl.lm.forbidden_token_ids(tok)]}``.

Monitoring settings with no TRL counterpart are not mapped: ``log_ref_kl`` (TRL logs the KL only
when β > 0), ``eval_every``, ``eval_steps`` and ``eval_num_problems`` (use TRL's ``eval_strategy`` and an eval
data set).

TRL is an optional dependency (``pip install "rlbook[trl]"``); this module imports it on use.

Source: von Werra et al., TRL (2020–), ``GRPOTrainer._compute_loss`` and ``GRPOConfig``;
Shao et al. 2024 (DeepSeekMath), arXiv:2402.03300, eq. 21; Yu et al. 2025 (DAPO),
arXiv:2503.14476; Liu et al. 2025 (Dr. GRPO), arXiv:2503.20783; MiniMax 2025 (CISPO),
arXiv:2506.13585.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import warnings

import torch

from rlbook.algos.grpo import GRPOConfig, _entropy_switches, _parts
from rlbook.config import get_device
from rlbook.lm.logprobs import completion_log_probs
from rlbook.lm.model import quiet_weight_progress
from rlbook.steps import grpo_microbatch_train_step

__all__ = ["TRL_LOSS_TYPES", "TRL_FIELDS", "TRL_IS_FIELDS", "require_trl", "trl_loss_type", "to_trl_config",
           "build_trl_trainer", "trl_loss", "rlbook_grpo_loss"]

TRL_LOSS_TYPES = {
    ("clipped_surrogate", "seq_mean_token_mean"): "grpo",
    ("clipped_surrogate", "token_mean"): "dapo",
    ("clipped_surrogate", "fixed_length_mean"): "dr_grpo",
    ("cispo", "token_mean"): "cispo",
}

# Every ``trl.GRPOConfig`` field (TRL 1.16) for a concept the book teaches, with what
# :func:`to_trl_config` sets it from: an rlbook.GRPOConfig field, or the fixed value that matches what
# rlbook does. to_trl_config sets each one explicitly, so no TRL default decides it (tests/test_bridge.py
# checks both, and that each name is still a field of trl.GRPOConfig).
TRL_FIELDS = {
    "num_generations": "group_size",
    "per_device_train_batch_size": "prompts_per_step × group_size (TRL counts completions)",
    "gradient_accumulation_steps": "1 (one optimiser step per generation and pass)",
    "steps_per_generation": "1 (num_minibatches = 1)",
    "num_iterations": "num_inner_epochs (μ)",
    "max_steps": "num_steps × num_inner_epochs (TRL counts optimiser steps)",
    "learning_rate": "lr",
    "lr_scheduler_type": "'constant' (rlbook's learning rate is constant)",
    "weight_decay": "0.0 (rlbook.grpo_optimizer: AdamW without weight decay)",
    "max_grad_norm": "max_grad_norm",
    "epsilon": "clip_eps_low",
    "epsilon_high": "clip_eps_high (None: clip_eps_low); CISPO: 1 + clip_eps_high",
    "delta": "None: rlbook's clipped surrogate has no cap on the ratio of negative-advantage tokens",
    "beta": "kl_coef",
    "use_bias_correction_kl": "False: rlbook's k3 penalty is not multiplied by the ratio",
    "loss_type": "per_token_loss × loss_aggregation (TRL_LOSS_TYPES)",
    "importance_sampling_level": "'token': the clipped surrogate's ratio is per token (GSPO is refused)",
    "scale_rewards": "advantage_estimator: 'grpo' → 'group', 'dr_grpo' → 'none'",
    "multi_objective_aggregation": "'sum_then_normalize': rlbook adds format_coef × format reward, then normalises",
    "mask_truncated_completions": "False (overlong_filter is refused)",
    "sync_ref_model": "False (ref_reset_every is refused)",
    "off_policy_mask_threshold": "None: rlbook has no off-policy sequence mask",
    "vllm_importance_sampling_correction": "is_correction != 'none'",
    "entropy_coef": "entropy_coef",
    "use_adaptive_entropy": "False: rlbook's entropy coefficient is constant",
    "top_entropy_quantile": "top_entropy_quantile",
    "cast_lm_head_to_fp32": "fp32_lm_head",
    "temperature": "temperature",
    "top_p": "sampler_top_p",
    "top_k": "sampler_top_k (None → 0, TRL's 'off')",
    "max_completion_length": "max_new_tokens",
    "seed": "seed",
    "bf16": "False: rlbook trains in float32",
    "disable_dropout": "True: rlbook's policies have no dropout",
}
# the sampler correction's mode and band: set when is_correction is not "none" (else TRL applies none)
TRL_IS_FIELDS = {
    "vllm_importance_sampling_mode": "is_correction",
    "vllm_importance_sampling_clip_max": "is_cap",
    "vllm_importance_sampling_clip_min": "1 / is_cap for the masks, None for the truncations",
}


def require_trl():
    """Import and return the ``trl`` module, or raise an ImportError that says how to install it."""
    try:
        import trl  # noqa: F401
        import datasets  # noqa: F401  (GRPOTrainer needs both)
    except ImportError as err:
        raise ImportError(f"the TRL bridge needs TRL and its `datasets` package ({err}); "
                          "install them with `pip install \"rlbook[trl]\"` (or `pip install -e \".[trl]\"` in a clone)") from None
    return trl


class _DropMessage(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


_PADDING_NOTICE = "We strongly recommend passing in an `attention_mask`"


def _quiet_trl_internals() -> None:
    """Silence two notices that TRL's own code triggers in transformers and a reader cannot act on.

    * TRL 1.16 reads ``model.is_gradient_checkpointing`` before generating, a name transformers 5
      deprecated (``FutureWarning``): a warning about TRL's code, not the reader's.
    * transformers' generation loop writes the pad id after each finished completion, and TRL's
      decoding step then calls the model on that id with no mask, which trips the "passing in an
      `attention_mask`" heuristic (it looks for the pad id in the first and last column); those
      positions come after the completion's EOS, which TRL's completion mask cuts off.

    Only these two messages are filtered (the exact texts), so any other warning still shows.
    """
    warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    log = logging.getLogger("transformers.modeling_utils")
    if not any(isinstance(f, _DropMessage) and f.text == _PADDING_NOTICE for f in log.filters):
        log.addFilter(_DropMessage(_PADDING_NOTICE))


def _problems(config: GRPOConfig) -> tuple[list[str], str | None]:
    """The settings TRL cannot express (each as one sentence), and the TRL loss type if there is one."""
    problems = []
    estimator = config.advantage_estimator
    if callable(estimator) or estimator not in ("grpo", "dr_grpo"):
        problems.append(f"advantage_estimator={estimator!r}: TRL's GRPOTrainer computes group advantages only as "
                        "(r − mean)/std ('grpo', scale_rewards='group') or r − mean ('dr_grpo', scale_rewards='none')")
    elif estimator == "grpo" and config.advantage_std != "sample":
        problems.append(f"advantage_std={config.advantage_std!r}: TRL divides by the sample std (÷(G−1), torch.std); "
                        "set advantage_std='sample'")
    aggregation = config.loss_aggregation
    loss_type = None
    if callable(aggregation):
        problems.append("loss_aggregation=<callable>: TRL offers only its named loss types")
    else:
        loss_type = TRL_LOSS_TYPES.get((config.per_token_loss, aggregation))
        if loss_type is None:
            pairs = ", ".join(f"{p} × {a}" for p, a in TRL_LOSS_TYPES)
            problems.append(f"per_token_loss={config.per_token_loss!r} with loss_aggregation={aggregation!r}: "
                            f"TRL's loss types cover {pairs}")
    if config.per_token_loss == "cispo" and config.clip_eps_low < 1.0:
        problems.append(f"clip_eps_low={config.clip_eps_low!r} with per_token_loss='cispo': TRL's CISPO weight has no "
                        "lower cap; set clip_eps_low ≥ 1 (no lower cap, as MiniMax-M1)")
    if config.is_correction.startswith("geometric"):
        problems.append(f"is_correction={config.is_correction!r}: TRL's sequence-level ratio is the product "
                        "Π_t π_old/π_s (vllm_importance_sampling_mode='sequence_truncate' / 'sequence_mask'), "
                        "not the geometric mean; use one of those or a token-level mode")
    if config.overlong_cache_length:
        problems.append(f"overlong_cache_length={config.overlong_cache_length}: TRL's config has no soft overlong "
                        "penalty; add trl.rewards.get_soft_overlong_punishment(max_new_tokens, overlong_cache_length) "
                        "to the reward functions instead")
    defaults = GRPOConfig()
    for name, what in _NO_TRL_FIELD.items():
        if getattr(config, name) != getattr(defaults, name):
            problems.append(f"{name}={getattr(config, name)!r}: {what}; leave it at {getattr(defaults, name)!r}")
    return problems, loss_type


# rlbook settings (Part IV) that the bridge does not map to TRL, with the reason
_NO_TRL_FIELD = {
    "num_minibatches": "TRL splits a generation into steps_per_generation optimiser steps of its own, not mapped here",
    "overlong_filter": "TRL's mask_truncated_completions is not mapped (its loss normalisers are not checked equal)",
    "dynamic_sampling": "TRL's GRPOTrainer has no dynamic sampling (resampling prompts until groups are mixed)",
    "zero_variance_filter": "TRL's GRPOTrainer does not drop zero-variance groups",
    "retire_pass_rate": "TRL's GRPOTrainer has no prompt retirement",
    "ref_reset_every": "TRL's sync_ref_model mixes π_ref toward π_θ and keeps the optimiser state (not ProRL's hard reset)",
    "max_completions": "TRL counts optimiser steps, not generated completions",
    "sampler_temperature": ("TRL applies one temperature both where it samples and where it scores (its "
                            "`temperature`); a sampler temperature the trainer does not apply is not expressible"),
    "sampler_precision": ("TRL's sampler runs at the model's own dtype (vLLM's dtype is not a GRPOConfig field); "
                          "rounding only the sampler is not mapped"),
    "sampler_lag": ("TRL samples with the current weights (its asynchronous GRPO trainer is a separate class, "
                    "not mapped)"),
    "entropy_control": ("TRL's GRPOTrainer has no covariance-based entropy control (Cui et al.'s Clip-Cov / "
                        "KL-Cov); its entropy switches are entropy_coef and top_entropy_quantile"),
    "reward_source": ("the bridge scores with the task's reward functions; a learned reward model is not mapped "
                      "(TRL's reward_funcs would take it as a sequence-classification model)"),
}


def trl_loss_type(config: GRPOConfig) -> str:
    """TRL's ``loss_type`` for the config's per-token loss and aggregation (table in the module doc).

    Raises:
        ValueError: the pair has no TRL loss type (the message lists the pairs that do).
    """
    _, loss_type = _problems(config)
    if loss_type is None:
        raise ValueError(f"no TRL loss_type for per_token_loss={config.per_token_loss!r} with "
                         f"loss_aggregation={config.loss_aggregation!r}; TRL's cover {sorted(TRL_LOSS_TYPES)}")
    return loss_type


def to_trl_config(config: GRPOConfig, output_dir: str | None = None, **overrides):
    """A ``trl.GRPOConfig`` that trains what :func:`rlbook.train_grpo` trains with ``config``.

    Mapped fields (rlbook → TRL): ``group_size`` → ``num_generations``; ``prompts_per_step`` ×
    ``group_size`` → ``per_device_train_batch_size`` (TRL counts completions; one process, no
    gradient accumulation, one generation per step); ``num_inner_epochs`` (μ) →
    ``num_iterations``; ``num_steps`` × μ → ``max_steps`` (TRL counts optimiser steps, rlbook
    generations); ``lr`` → ``learning_rate`` with a constant schedule, AdamW without weight decay
    (as :func:`rlbook.grpo_optimizer`); ``clip_eps_low``/``clip_eps_high`` → ``epsilon``/
    ``epsilon_high`` (for CISPO ``epsilon_high = 1 + clip_eps_high``, a cap on the ratio);
    ``kl_coef`` → ``beta`` with ``use_bias_correction_kl=False`` (rlbook's k3 penalty is not
    multiplied by the ratio); the per-token loss and aggregation → ``loss_type``;
    ``advantage_estimator`` → ``scale_rewards``; ``temperature``; ``max_new_tokens`` →
    ``max_completion_length``; ``sampler_top_p`` → ``top_p`` and ``sampler_top_k`` → ``top_k``
    (None → 0, TRL's "off"): TRL truncates where it samples and scores the full distribution, as
    rlbook's sampler switches do; ``max_grad_norm``; ``format_coef`` → ``reward_weights = [1,
    format_coef]`` (pass the correctness and the format reward, in that order, as
    ``reward_funcs``) with ``multi_objective_aggregation="sum_then_normalize"`` (rlbook adds the
    weighted rewards, then computes the group advantage of the sum; TRL's "normalize_then_sum",
    GDPO, normalises each reward first); ``entropy_coef`` and ``top_entropy_quantile`` → TRL's
    fields of the same names (the same bonus, −c·mean token entropy over the tokens the policy term
    keeps; TRL's quantile keeps the tokens at or above ``torch.quantile(H, 1 − ρ)``, rlbook the
    ⌈ρ·N⌉ highest, which can differ by a token at the threshold), with
    ``use_adaptive_entropy=False`` (rlbook's coefficient is constant; Skywork-OR1's adaptive
    control, He et al. 2025, arXiv:2505.22312, moves it toward a target entropy, and TRL's
    ``entropy_coef_min``/``_max``/``_delta`` and ``entropy_target`` act only with it on);
    ``fp32_lm_head`` → ``cast_lm_head_to_fp32`` (the LM head's product in float32, for the policy
    and the reference model, as ScaleRL, Khatri et al. 2025, arXiv:2510.13786; TRL also stores
    the head's weights in float32 where rlbook keeps the model's dtype, the same logits for a
    float32 model; TRL 1.16 supports it only for untied embeddings, see
    :func:`build_trl_trainer`); ``seed``; ``device`` "cpu" → ``use_cpu``.

    Set to what rlbook does: dropout disabled; ``bf16=False`` (rlbook trains in float32; TRL's
    default is bf16 mixed precision, refused on a CPU unless ``use_cpu``); activation (gradient)
    checkpointing off (the same arithmetic, recomputed; TRL's default is on); TRL's GSPO switch
    ``importance_sampling_level`` stays "token" (rlbook's ratio is per token);
    ``delta=None`` (INTELLECT-2's two-sided clip, arXiv:2505.07291, caps the unclipped ratio at δ
    in ``min(ρ·A, clip(ρ)·A)``, which bounds it for negative advantages; rlbook's clipped surrogate
    has no such cap); ``off_policy_mask_threshold=None`` (DeepSeek-V3.2's off-policy sequence
    mask, arXiv:2512.02556, eq. 9, which drops negative-advantage sequences whose mean sampler KL
    exceeds δ; rlbook has none); ``sync_ref_model=False`` and ``mask_truncated_completions=False``
    (their rlbook settings are refused below). The full list, with the rlbook field each is set
    from, is ``TRL_FIELDS`` (and ``TRL_IS_FIELDS`` for the sampler correction).

    The sampler correction: ``is_correction`` "none" →
    ``vllm_importance_sampling_correction=False`` (TRL's default is True); "token_truncate",
    "token_mask", "sequence_truncate", "sequence_mask" → ``vllm_importance_sampling_correction=True``
    and ``vllm_importance_sampling_mode`` of the same name, with ``is_cap`` C →
    ``vllm_importance_sampling_clip_max = C`` (never the deprecated ``vllm_importance_sampling_cap``)
    and ``vllm_importance_sampling_clip_min`` = None for
    the truncate modes (min(ρ, C)) or 1/C for the mask modes (the band [1/C, C]). TRL applies
    these only when it samples with vLLM (``use_vllm=True``, a GPU); rlbook's equivalent sampler is
    ``train_grpo(..., sampler=)``.

    Args:
        config: an :class:`rlbook.GRPOConfig`.
        output_dir: TRL's output folder (default: a new temporary folder).
        **overrides: any ``trl.GRPOConfig`` field, applied last (e.g. ``logging_steps=1``,
            ``bf16=True`` on a GPU).
    Returns:
        a ``trl.GRPOConfig``.
    Raises:
        ValueError: one message naming every rlbook setting TRL cannot express, each with what to
            change (e.g. ``advantage_std='population'``; ``advantage_estimator='rloo'``;
            ``per_token_loss='cispo'`` with ``clip_eps_low < 1``; a callable aggregation;
            ``overlong_cache_length > 0``; the GSPO and DPPO losses; any Part IV switch left off its
            default: minibatches, overlong filtering, dynamic sampling, zero-variance filtering,
            prompt retirement, reference resets, a completion budget, a reward model as the reward,
            a sampler temperature, precision or lag, an ``entropy_control`` (Clip-Cov, KL-Cov);
            ``is_correction`` "geometric_truncate" / "geometric_mask", whose geometric-mean ratio TRL
            does not have).
        ImportError: TRL is not installed (the message says how to install it).
    """
    if not isinstance(config, GRPOConfig):
        raise ValueError(f"`config` must be an rlbook.GRPOConfig; got {type(config).__name__}")
    trl = require_trl()
    problems, loss_type = _problems(config)
    if problems:
        raise ValueError("TRL cannot express these rlbook settings:\n  - " + "\n  - ".join(problems))
    high = config.clip_eps_low if config.clip_eps_high is None else config.clip_eps_high
    cpu = get_device(config.device).type == "cpu"
    fields = dict(
        output_dir=output_dir or tempfile.mkdtemp(prefix="rlbook-trl-"),
        num_generations=config.group_size,
        per_device_train_batch_size=config.prompts_per_step * config.group_size,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=config.num_inner_epochs,
        max_steps=config.num_steps * config.num_inner_epochs,
        learning_rate=config.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=config.max_grad_norm,
        epsilon=config.clip_eps_low,
        epsilon_high=(1.0 + high) if config.per_token_loss == "cispo" else high,
        delta=None,
        beta=config.kl_coef,
        use_bias_correction_kl=False,
        loss_type=loss_type,
        importance_sampling_level="token",
        scale_rewards="group" if config.advantage_estimator == "grpo" else "none",
        multi_objective_aggregation="sum_then_normalize",
        mask_truncated_completions=False,
        sync_ref_model=False,
        off_policy_mask_threshold=None,
        vllm_importance_sampling_correction=config.is_correction != "none",
        entropy_coef=config.entropy_coef,
        use_adaptive_entropy=False,
        top_entropy_quantile=config.top_entropy_quantile,
        cast_lm_head_to_fp32=config.fp32_lm_head,
        temperature=config.temperature,
        top_p=config.sampler_top_p,
        top_k=0 if config.sampler_top_k is None else config.sampler_top_k,
        max_completion_length=config.max_new_tokens,
        seed=config.seed,
        use_cpu=cpu,
        bf16=False,
        disable_dropout=True,
        report_to="none",
        save_strategy="no",
    )
    # TRL's default recomputes activations (slower here, same math): off. transformers 5 renamed the
    # option to activation_checkpointing and warns on the old name.
    names = {field.name for field in dataclasses.fields(trl.GRPOConfig)}
    fields["activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"] = False
    if config.format_coef:
        fields["reward_weights"] = [1.0, config.format_coef]
    if config.is_correction != "none":
        fields.update(vllm_importance_sampling_mode=config.is_correction, vllm_importance_sampling_clip_max=config.is_cap,
                      vllm_importance_sampling_clip_min=1.0 / config.is_cap if config.is_correction.endswith("_mask") else None)
    fields.update(overrides)
    return trl.GRPOConfig(**fields)


def build_trl_trainer(policy, tokenizer, task, config: GRPOConfig, num_prompts: int | None = None,
                      output_dir: str | None = None, **overrides):
    """A ``trl.GRPOTrainer`` for the book's model and task, configured by :func:`to_trl_config`.

    The prompts are drawn from ``task``'s training split with ``config.seed``. TRL decodes
    completions without special tokens, so the reward function adds the EOS back before calling
    ``task.reward`` (a completion TRL cut at the token budget has no EOS and stays wrong only if
    it is wrong: keep ``max_new_tokens`` above the answer length). With ``config.format_coef`` the
    format reward is the second reward function.

    Args:
        policy: the causal LM (trained in place by ``trainer.train()``).
        tokenizer: its tokenizer (``bos_token``, ``eos_token``, ``pad_token`` set).
        task: an :class:`rlbook.lm.AdditionTask` (``sample_problems``, ``reward``, ``format_reward``).
        config: an :class:`rlbook.GRPOConfig` that TRL can express.
        num_prompts: prompts in the data set (default: enough for every step).
        output_dir, **overrides: passed to :func:`to_trl_config`.
    Returns:
        a ``trl.GRPOTrainer`` (its ``beta`` is ``config.kl_coef``; see below).
    Raises:
        ValueError, ImportError: as :func:`to_trl_config`; also ``config.fp32_lm_head`` with a
            policy whose LM head is tied to its input embeddings (``tie_word_embeddings``, as the
            book's GPT-2): TRL 1.16's ``cast_lm_head_to_fp32`` supports untied heads only (its
            tied branch looks for ``model.model.embed_tokens``, which GPT-2 does not have).

    TRL builds its frozen reference model by loading the policy's hub id or folder again, which a
    model built in memory does not have. With ``kl_coef > 0`` the policy is therefore saved to a
    temporary folder and TRL is given that folder, so ``trainer.model`` is a copy of ``policy``
    with the same weights. Saving and loading draw no progress bars, and two notices that TRL's own
    code triggers in transformers (a deprecated attribute, a padding heuristic) are silenced by their
    exact texts.
    """
    trl = require_trl()
    from datasets import Dataset

    _quiet_trl_internals()
    args = to_trl_config(config, output_dir=output_dir, **overrides)
    if args.cast_lm_head_to_fp32 and getattr(getattr(policy, "config", None), "tie_word_embeddings", False):
        raise ValueError("fp32_lm_head=True (TRL's cast_lm_head_to_fp32) needs a policy whose LM head is not tied to "
                         "its input embeddings (tie_word_embeddings=False); TRL 1.16 supports untied heads only")
    count = num_prompts or config.prompts_per_step * (config.num_steps + 1)
    problems = task.sample_problems(count, torch.Generator().manual_seed(config.seed))
    bos = tokenizer.bos_token or ""
    data = Dataset.from_dict({"prompt": [bos + p.prompt for p in problems]})

    def correctness(prompts, completions, **kwargs):
        return [task.reward(p[len(bos):], c + tokenizer.eos_token) for p, c in zip(prompts, completions)]

    def format_reward(prompts, completions, **kwargs):
        return [task.format_reward(p[len(bos):], c + tokenizer.eos_token) for p, c in zip(prompts, completions)]

    reward_funcs = [correctness, format_reward] if config.format_coef else [correctness]
    model = policy
    with quiet_weight_progress():  # the save below and TRL's loads of the policy and its reference
        if config.kl_coef > 0:
            folder = tempfile.mkdtemp(prefix="rlbook-trl-policy-")
            policy.save_pretrained(folder)
            model = folder
        trainer = trl.GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=data,
                                  processing_class=tokenizer)
    if model is not policy:
        trainer.model.to(next(policy.parameters()).dtype)
    return trainer


def trl_loss(trainer, prompt_ids, prompt_mask, completion_ids, completion_mask, advantages,
             old_log_probs=None, ref_log_probs=None, importance_sampling_ratio=None, tool_mask=None) -> torch.Tensor:
    """TRL's GRPO loss on one given batch, by TRL's own code (``GRPOTrainer._compute_loss``).

    The batch is one optimiser step with no gradient accumulation (TRL's training mode with
    ``current_gradient_accumulation_steps = 1``); the loss keeps its graph, so ``.backward()``
    gives TRL's gradient in ``trainer.model``'s parameters. The KL term uses ``trainer.beta``.

    Args:
        trainer: a ``trl.GRPOTrainer`` (e.g. from :func:`build_trl_trainer`).
        prompt_ids: (B, P) token ids, left-padded. prompt_mask: (B, P) 1 on real tokens.
        completion_ids: (B, T) token ids, right-padded. completion_mask: (B, T) 1 on response tokens.
        advantages: (B,) one advantage per completion.
        old_log_probs: (B, T) log π_old, nats; None = the current policy's (ratio 1).
        ref_log_probs: (B, T) log π_ref, nats; required when ``trainer.beta`` > 0.
        importance_sampling_ratio: None, or the (B, T) or (B, 1) weights TRL's sampler correction
            multiplies the per-token loss by (its ``inputs["importance_sampling_ratio"]``, computed in
            TRL's generation step from the vLLM log-probs); TRL applies them when
            ``trainer.vllm_importance_sampling_correction`` is True, here with ``use_vllm`` switched
            on for the call only.
        tool_mask: None, or (B, T) 1 on the tokens the model generated and 0 on a multi-turn completion's
            tool or environment output (TRL's ``inputs["tool_mask"]``): those tokens are attended to
            but carry no loss, and TRL's ``num_items_in_batch`` counts the model's tokens only.
    Returns:
        the 0-d loss (with grad).
    Raises:
        ValueError: ``ref_log_probs`` missing with β > 0; shapes that do not line up.
    """
    B, T = completion_ids.shape
    if tuple(completion_mask.shape) != (B, T) or tuple(prompt_mask.shape) != tuple(prompt_ids.shape) or len(prompt_ids) != B:
        raise ValueError(f"`prompt_ids`/`prompt_mask` must be (B, P) and `completion_mask` (B, T) = {(B, T)}; got "
                         f"{tuple(prompt_ids.shape)}, {tuple(prompt_mask.shape)}, {tuple(completion_mask.shape)}")
    if tuple(advantages.shape) != (B,):
        raise ValueError(f"`advantages` must have shape (B,) = ({B},); got {tuple(advantages.shape)}")
    if trainer.beta and ref_log_probs is None:
        raise ValueError("`ref_log_probs` is required when trainer.beta > 0")
    if tool_mask is not None and tuple(tool_mask.shape) != (B, T):
        raise ValueError(f"`tool_mask` must have the shape of `completion_ids` (B, T) = {(B, T)}; "
                         f"got {tuple(tool_mask.shape)}")
    mask = completion_mask.long()
    loss_mask = mask if tool_mask is None else mask * tool_mask.long()
    inputs = dict(prompt_ids=prompt_ids, prompt_mask=prompt_mask.long(), completion_ids=completion_ids,
                  completion_mask=mask, advantages=advantages, num_items_in_batch=loss_mask.sum())
    if tool_mask is not None:
        inputs["tool_mask"] = tool_mask.long()
    if old_log_probs is not None:
        inputs["old_per_token_logps"] = old_log_probs
    if ref_log_probs is not None:
        inputs["ref_per_token_logps"] = ref_log_probs
    use_vllm = trainer.use_vllm
    if importance_sampling_ratio is not None:
        inputs["importance_sampling_ratio"] = importance_sampling_ratio
        trainer.use_vllm = True  # TRL reads the ratio only when vLLM sampled; nothing else in the loss uses it
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    try:
        return trainer._compute_loss(trainer.model, inputs)
    finally:
        trainer.model.eval()
        trainer.use_vllm = use_vllm


def rlbook_grpo_loss(policy, prompt_ids, prompt_mask, completion_ids, completion_mask, advantages, config: GRPOConfig,
                     old_log_probs=None, ref_log_probs=None, forbidden_ids=(), sampler_log_probs=None,
                     tool_mask=None) -> torch.Tensor:
    """rlbook's GRPO loss on one given batch, by the pieces :func:`rlbook.algos.grpo.grpo_step` uses.

    Scores the completions with :func:`rlbook.lm.completion_log_probs` (at ``config.temperature``),
    then one call of :func:`rlbook.grpo_microbatch_train_step` with the config's per-token loss,
    clip band, aggregation and ``kl_coef`` (and its entropy switches, the entropy scored with its
    gradient; Clip-Cov draws with a generator seeded ``config.seed``); that call runs
    ``backward()``, so the gradient is in ``policy``'s parameters afterwards. The counterpart of :func:`trl_loss`.

    Args:
        policy: the causal LM.
        prompt_ids, prompt_mask, completion_ids, completion_mask, advantages, old_log_probs,
            ref_log_probs: as :func:`trl_loss` (old_log_probs None = ratio 1).
        config: the :class:`rlbook.GRPOConfig` whose loss to compute.
        forbidden_ids: token ids removed from the softmax (default none, TRL's policy).
        sampler_log_probs: (B, T) log π_s of the tokens by the sampler, nats; used with the
            config's ``is_correction`` and ``is_cap`` (π_old = ``old_log_probs``).
        tool_mask: None, or (B, T) 1 on the model's tokens and 0 on tool/environment output: the
            completion is scored whole (the output is context), the loss is over ``completion_mask``
            and ``tool_mask`` together.
    Returns:
        the 0-d loss (detached from nothing; its backward has already run).
    Raises:
        ValueError: as :func:`rlbook.grpo_microbatch_train_step`.
    """
    _, loss_type, cliprange, aggregate = _parts(config)
    mask = completion_mask.bool()
    log_probs, entropy = completion_log_probs(policy, prompt_ids, completion_ids, prompt_mask.bool(),
                                              temperature=config.temperature, forbidden_ids=forbidden_ids,
                                              completion_mask=mask, with_entropy=True)
    old = log_probs.detach() if old_log_probs is None else old_log_probs
    if tool_mask is not None:  # the loss counts the model's tokens only
        mask = mask & tool_mask.bool()
    loss, _ = grpo_microbatch_train_step(log_probs, mask, 1, loss_type, advantages=advantages[:, None], old_log_probs=old,
                                         cliprange=cliprange, aggregation=aggregate, ref_log_probs=ref_log_probs,
                                         kl_coef=config.kl_coef, sampler_log_probs=sampler_log_probs,
                                         is_correction=config.is_correction, is_cap=config.is_cap,
                                         **_entropy_switches(config, entropy, torch.Generator().manual_seed(config.seed)))
    return loss
