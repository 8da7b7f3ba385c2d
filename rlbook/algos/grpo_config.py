"""``GRPOConfig``: the parts of a GRPO-family method, and the published methods as named recipes.

The training loop that reads these settings is :func:`rlbook.train_grpo` (module
:mod:`rlbook.algos.grpo`, whose docstring has the table of parts); this module only holds the
settings, their checks and the recipes, so the loop stays short enough to read in one sitting.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rlbook import _checks
from rlbook.advantages import group_relative_advantages, leave_one_out_advantages, magistral_advantages, maxrl_advantages
from rlbook.aggregation import fixed_length_mean, prompt_mean, seq_mean_token_mean, token_mean
from rlbook.entropy_control import CLIP_COV_BOUNDS, CLIP_COV_RATIO, KL_COV_COEF, KL_COV_RATIO
from rlbook.is_corrections import IS_CORRECTION_MODES

__all__ = ["GRPOConfig", "ADVANTAGE_ESTIMATORS", "PER_TOKEN_LOSSES", "LOSS_AGGREGATIONS", "GRPO_RECIPES",
           "REWARD_SOURCES", "ENTROPY_CONTROLS"]

ADVANTAGE_ESTIMATORS = {
    "grpo": functools.partial(group_relative_advantages, scale="std"),
    "dr_grpo": functools.partial(group_relative_advantages, scale="none"),
    "rloo": leave_one_out_advantages,
    "maxrl": maxrl_advantages,
    "magistral": magistral_advantages,  # centred per group, scaled by the minibatch std
    "gae": None,  # PPO with a critic: GAE over tokens (see _gae_advantages), no group baseline
}
# config name -> ``loss_type`` of :func:`rlbook.policy_gradient_loss`
PER_TOKEN_LOSSES = {"clipped_surrogate": "grpo_clip", "cispo": "cispo", "gspo": "gspo", "gspo_token": "gspo_token",
                    "dppo": "dppo"}
# ``GRPOConfig.entropy_control``: none, or Cui et al.'s covariance-based Clip-Cov / KL-Cov (rlbook.entropy_control)
ENTROPY_CONTROLS = ("none", "clip_cov", "kl_cov")
# ``GRPOConfig.reward_source``: the task's own reward (a verifier), or a learned reward model's score
REWARD_SOURCES = ("task", "reward_model")
LOSS_AGGREGATIONS = {
    "seq_mean_token_mean": seq_mean_token_mean,
    "token_mean": token_mean,
    "fixed_length_mean": fixed_length_mean,
    "prompt_mean": prompt_mean,
}
_DAPO = dict(clip_eps_high=0.28, loss_aggregation="token_mean", kl_coef=0.0, overlong_filter=True,
             overlong_cache_length=4, dynamic_sampling=True)
# The published methods as settings of the parts (papers in the GRPOConfig docstring). Numbers that
# the papers tuned for 7B-32B models (ε of GSPO, τ of DPPO, ε_high of ProRL and Magistral) are
# kept as published; the budget-dependent ones (the overlong zone) are scaled to this book's tasks.
GRPO_RECIPES = {
    "grpo": dict(kl_coef=0.04),
    "dr_grpo": dict(advantage_estimator="dr_grpo", loss_aggregation="fixed_length_mean", kl_coef=0.0),
    "dapo": _DAPO,
    "rloo": dict(advantage_estimator="rloo", kl_coef=0.0),
    "cispo": dict(per_token_loss="cispo", clip_eps_low=1.0, clip_eps_high=0.28, loss_aggregation="token_mean",
                  kl_coef=0.0),
    "gspo": dict(per_token_loss="gspo", clip_eps_low=3e-4, clip_eps_high=4e-4, kl_coef=0.0),
    "maxrl": dict(advantage_estimator="maxrl", kl_coef=0.0),
    "dppo": dict(per_token_loss="dppo", divergence="binary_tv", divergence_threshold=0.15, kl_coef=0.0),
    "prorl": dict(clip_eps_high=0.4, loss_aggregation="token_mean", dynamic_sampling=True, kl_coef=1e-2,
                  ref_reset_every=50),
    # Magistral tuned ε_high between 0.26 and 0.28 (Mistral AI 2025, arXiv:2506.10910, "Relaxing the trust region's upper bound"): the top of that range
    "magistral": {**_DAPO, "clip_eps_high": 0.28, "advantage_estimator": "magistral"},
    "scalerl": dict(per_token_loss="cispo", clip_eps_low=1.0, clip_eps_high=3.0, advantage_estimator="magistral",
                    loss_aggregation="prompt_mean", zero_variance_filter=True, retire_pass_rate=0.9, fp32_lm_head=True,
                    kl_coef=0.0),
    "ppo": dict(advantage_estimator="gae", kl_coef=0.04),
}


@dataclass
class GRPOConfig:
    """Settings of :func:`train_grpo` (defaults: the book's tuned small run; see the module docstring).

    Sources of the variants: Shao et al. 2024 (GRPO), arXiv:2402.03300; Liu et al. 2025 (Dr. GRPO),
    arXiv:2503.20783; Yu et al. 2025 (DAPO), arXiv:2503.14476; Ahmadian et al. 2024 (RLOO),
    arXiv:2402.14740; MiniMax 2025 (CISPO), arXiv:2506.13585; Zheng et al. 2025 (GSPO),
    arXiv:2507.18071; MaxRL (maximum-likelihood RL, 2026), arXiv:2602.02710; Qi et al. 2026 (DPPO),
    arXiv:2602.04879; Liu et
    al. 2025 (ProRL), arXiv:2505.24864; Mistral AI 2025 (Magistral), arXiv:2506.10910; Khatri et
    al. 2025 (ScaleRL), arXiv:2510.13786; Ouyang et al. 2022 (PPO with a critic for LMs),
    arXiv:2203.02155.

    Attributes:
        group_size: G, completions sampled per prompt (≥ 2).
        prompts_per_step: prompts per step; the batch holds B = prompts_per_step · G completions.
        num_steps: sampling + update rounds (at most; see ``max_completions``).
        lr: AdamW learning rate (constant).
        clip_eps_low: ε_low of the ratio band [1 − ε_low, 1 + ε_high] (GSPO: of the sequence ratio).
        clip_eps_high: ε_high; None = ε_low (symmetric PPO/GRPO), 0.28 = DAPO's clip-higher.
        kl_coef: β of the per-token k3 penalty to the frozen reference policy π_ref (0 = none).
        num_inner_epochs: μ, optimiser passes over each batch (μ = 1 and M = 1: ρ ≡ 1, clip inactive).
        num_minibatches: M ≥ 1, minibatches (of whole groups) per pass; μ·M optimiser steps per
            generation. Must divide the number of groups in the batch.
        max_new_tokens: completion budget in tokens, EOS included.
        temperature: τ of the sampling distribution softmax(logits/τ) (also used in the loss).
        loss_aggregation: name in ``LOSS_AGGREGATIONS`` or a callable(loss, mask) -> 0-d tensor.
        advantage_estimator: name in ``ADVANTAGE_ESTIMATORS`` or a callable(rewards, group_size).
        advantage_std: the group std of the "grpo" estimator: "population" (÷G, the default) or
            "sample" (÷(G−1), ``torch.std``'s default, as in TRL); passed as ``std=`` to
            :func:`rlbook.group_relative_advantages`. Only "grpo" divides by a group std, so any
            other estimator requires the default.
        per_token_loss: name in ``PER_TOKEN_LOSSES`` (see :func:`rlbook.policy_gradient_loss`).
        divergence: DPPO's divergence estimate, "binary_tv" or "binary_kl" (:func:`rlbook.dppo_mask`).
        divergence_threshold: DPPO's τ > 0: a token whose estimated divergence exceeds τ (and
            whose update would push it further) gets no gradient.
        gae_lambda: λ of GAE over tokens ("gae" estimator).
        gamma: γ of GAE over tokens ("gae" estimator; 1 = undiscounted, the usual choice for LMs).
        critic_lr: AdamW learning rate of the critic ("gae" estimator).
        reward_source: which reward the completions are scored with: "task" (``task.reward``, the
            verifier) or "reward_model" (a learned reward model's score r_φ(q, o), in logit units
            of Bradley–Terry; the model is ``train_grpo``'s ``reward_model`` argument, an object
            like the task, and the task keeps supplying prompts, ``format_reward`` and the
            held-out evaluation). Ouyang et al. 2022, arXiv:2203.02155, §3.5 (RL against a
            reward model); Gao, Schulman & Hilton 2022, arXiv:2210.10760 (its over-optimisation).
        format_coef: weight of ``task.format_reward`` added to the correctness reward.
        overlong_cache_length: DAPO soft overlong punishment zone in tokens (0 = off); the
            budget L_max is ``max_new_tokens``.
        overlong_filter: mask truncated completions (no EOS within the budget) out of the loss
            (DAPO); they still count in their group's advantage statistics.
        dynamic_sampling: keep only groups with mixed rewards, resampling prompts to fill the
            batch (DAPO).
        max_sampling_rounds: cap ≥ 1 on sampling rounds per step with ``dynamic_sampling``.
        zero_variance_filter: drop groups with all-equal rewards, no resampling (ScaleRL).
        retire_pass_rate: a prompt whose group pass rate exceeds this value leaves the training
            pool for good (ScaleRL's no-positive-resampling: 0.9); None = never.
        ref_reset_every: K ≥ 1: every K steps π_ref ← π_θ and the optimiser state is reset
            (ProRL); None = never.
        fp32_lm_head: compute the LM head in float32 (:func:`rlbook.lm.fp32_lm_head`), for
            bf16/fp16 weights (MiniMax, ScaleRL); the policy is modified in place.
        is_correction: the importance-sampling correction for tokens drawn by a sampler π_s that
            is not the trainer's π_old (``train_grpo(..., sampler=)``), a mode of
            ``rl.IS_CORRECTION_MODES`` (:func:`rlbook.importance_correction`): "none" (no
            reweighting, the default), "token_truncate" (TIS, min(ρ_t, C); Yao et al. 2025,
            fengyao.notion.site blog), "token_mask" (MIS: ρ_t kept inside [1/C, C], else 0;
            IcePop, arXiv:2510.18855), "sequence_truncate" / "sequence_mask" (TRL's sequence
            ratio Π_t ρ_t), "geometric_truncate" / "geometric_mask" (its geometric mean). With
            the policy as its own sampler every weight is 1 and the run is unchanged.
        is_cap: C ≥ 1 of the correction. Default 2, the default threshold of ms-swift's
            ``rollout_importance_sampling_threshold`` (its TIS/MIS modes carry TRL's names): a
            token may count at most twice, and the mask band is [0.5, 2]. TRL's own default is
            C_max = 3 for its default, the sequence-level mask (a product of token ratios drifts
            further from 1 than one token's ratio).
        sampler_temperature, sampler_top_p, sampler_top_k, sampler_precision, sampler_lag: a
            sampler that is not the policy, built from these switches
            (:class:`rlbook.MismatchedSampler`; chapter 14): its temperature T_s (None = the
            trainer's ``temperature``), nucleus p, top-k (None = all), precision of its weights and
            logits (None, "fp32", "bf16", "fp16") and staleness in steps k ≥ 0. At the defaults the
            policy samples its own completions. The trainer's loss keeps ``temperature`` and no
            truncation: the difference is the mismatch that ``is_correction`` corrects.
        entropy_coef: c ≥ 0 of the entropy bonus: the loss becomes L − c·H̄, H̄ the mean per-token
            entropy of π_θ (nats, with gradient) over the tokens the policy-gradient term acts on
            (those kept by ``top_entropy_quantile``), per minibatch: TRL's ``entropy_coef`` (its
            definition: a token mean whatever the loss aggregation; verl's ``entropy_coeff``
            aggregates it like the loss instead). 0 = no bonus (the default).
        top_entropy_quantile: ρ in (0, 1]: only the top ρ share of each minibatch's response
            tokens by entropy (the "forking" tokens, :func:`rlbook.high_entropy_mask`) keep their
            policy-gradient term; the others get none (the KL penalty still applies to all, and the
            aggregation's normaliser is unchanged). Wang et al. 2025, arXiv:2506.01939, train on
            ρ = 0.2; TRL's field of the same name. 1 = all tokens (the default).
        entropy_control: "none" (default) | "clip_cov" | "kl_cov", one of ``ENTROPY_CONTROLS``:
            Cui et al. 2025, arXiv:2505.22617, eqs. 10-11, which act on the few tokens of largest
            covariance c = (A − Ā)(log π − mean log π) (:func:`rlbook.token_covariance`). Clip-Cov
            removes the gradient of ⌊r·N⌋ (at least 1) tokens drawn at random among the N response
            tokens of the minibatch that the clip left unclipped and whose c lies in
            (ω_low, ω_high) (:func:`rlbook.clip_cov_mask`, the clip band being
            ``clip_eps_low``/``clip_eps_high``); KL-Cov replaces the clipped surrogate by the
            unclipped −A·ρ plus κ·|log π_θ − log π_old| on the top ⌊k·N⌋ tokens by c
            (:func:`rlbook.kl_cov_loss`). Both need ``per_token_loss="clipped_surrogate"``.
            Clip-Cov draws from the run's generator (so it also shifts the later samples). KL-Cov's
            |log ρ| has the gradient sign(log ρ)·∇log π: in the first minibatch π_old equals π_θ only
            up to rounding (on a float32 tiny model |log ρ| ≤ 5e-7, non-zero on 6-9 % of the
            tokens), so a penalised token there gets ±κ·∇log π of the rounding's sign.
        clip_cov_ratio, clip_cov_lb, clip_cov_ub: Clip-Cov's r in (0, 1] and its band
            ω_low < ω_high (verl's names; defaults the paper's 2e-4, 1 and 5:
            ``rl.CLIP_COV_RATIO``, ``rl.CLIP_COV_BOUNDS``).
        kl_cov_ratio, kl_cov_coef: KL-Cov's k in (0, 1] and κ ≥ 0 (verl: ``kl_cov_ratio``,
            ``ppo_kl_coef``; defaults the paper's 2e-3, its 7B setting, and 1: ``rl.KL_COV_RATIO``,
            ``rl.KL_COV_COEF``).
        max_completions: stop once this many completions were generated (all rounds counted);
            None = run ``num_steps`` steps. Compares methods at equal sampling budget.
        max_grad_norm: gradient-norm clip.
        log_ref_kl: keep a frozen copy π_ref of the initial policy and log the k3 KL to it even
            when ``kl_coef`` = 0 (one extra no-grad forward per step).
        eval_every: evaluate on ``task.held_out_problems(eval_num_problems)`` every this many
            steps (0 = never; costs time).
        eval_steps: further steps (before that step's update) at which to evaluate, besides every
            ``eval_every``-th: early points put a compute curve's first evaluations before its
            midpoint (e.g. (1, 2, 3) with ``eval_every=5``).
        eval_num_problems: held-out problems per evaluation.
        seed: seeds prompt draws and sampling (a private torch.Generator).
        device: None = ``rl.get_device()``.
    Raises:
        ValueError: a field out of range (named), e.g. τ ≤ 0, a sampling cap or a reset period < 1,
            or a ``reward_source`` other than "task" / "reward_model", an unknown ``is_correction``,
            ``is_cap`` < 1, a sampler switch out of range (T_s ≤ 0, p outside (0, 1], k < 1, an
            unknown precision, a lag < 0), ``entropy_coef`` < 0, ``top_entropy_quantile`` outside
            (0, 1], an unknown ``entropy_control`` or one with a per-token loss other than
            "clipped_surrogate", a Clip-Cov / KL-Cov parameter out of range (each named).
    """

    group_size: int = 8
    prompts_per_step: int = 64
    num_steps: int = 150
    lr: float = 2e-4
    clip_eps_low: float = 0.2
    clip_eps_high: float | None = None
    kl_coef: float = 0.0
    num_inner_epochs: int = 1
    num_minibatches: int = 1
    max_new_tokens: int = 8
    temperature: float = 1.0
    loss_aggregation: object = "seq_mean_token_mean"
    advantage_estimator: object = "grpo"
    advantage_std: str = "population"
    per_token_loss: str = "clipped_surrogate"
    divergence: str = "binary_tv"
    divergence_threshold: float = 0.15
    gae_lambda: float = 0.95
    gamma: float = 1.0
    critic_lr: float = 1e-3
    reward_source: str = "task"
    format_coef: float = 0.0
    overlong_cache_length: int = 0
    overlong_filter: bool = False
    dynamic_sampling: bool = False
    max_sampling_rounds: int = 4
    zero_variance_filter: bool = False
    retire_pass_rate: float | None = None
    ref_reset_every: int | None = None
    fp32_lm_head: bool = False
    is_correction: str = "none"
    is_cap: float = 2.0
    sampler_temperature: float | None = None
    sampler_top_p: float = 1.0
    sampler_top_k: int | None = None
    sampler_precision: str | None = None
    sampler_lag: int = 0
    entropy_coef: float = 0.0
    top_entropy_quantile: float = 1.0
    entropy_control: str = "none"
    clip_cov_ratio: float = CLIP_COV_RATIO
    clip_cov_lb: float = CLIP_COV_BOUNDS[0]
    clip_cov_ub: float = CLIP_COV_BOUNDS[1]
    kl_cov_ratio: float = KL_COV_RATIO
    kl_cov_coef: float = KL_COV_COEF
    max_completions: int | None = None
    max_grad_norm: float = 1.0
    log_ref_kl: bool = True
    eval_every: int = 0
    eval_steps: tuple = ()
    eval_num_problems: int = 200
    seed: int = 0
    device: str | None = None

    def mismatched_sampler(self):
        """The sampler the ``sampler_*`` switches describe (:class:`rlbook.MismatchedSampler`), or None
        when they are all at their defaults (the policy samples).

        Raises:
            ValueError: a switch out of range, naming the ``sampler_*`` field.
        """
        from rlbook.mismatch import MismatchedSampler

        fields = dict(temperature=self.sampler_temperature, top_p=self.sampler_top_p, top_k=self.sampler_top_k,
                      precision=self.sampler_precision, lag=self.sampler_lag)
        try:
            sampler = MismatchedSampler(**fields)
        except ValueError as err:
            message = str(err)
            for name in fields:
                message = message.replace(f"`{name}`", f"`sampler_{name}`")
            raise ValueError(message) from None
        return None if sampler.is_policy else sampler

    def _check_entropy_switches(self):
        """The entropy-management fields (ValueError naming the field)."""
        for name in ("entropy_coef", "top_entropy_quantile", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub",
                     "kl_cov_ratio", "kl_cov_coef"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise ValueError(f"`{name}` must be a number; got {value!r}")
        _checks.check_in_range("entropy_coef", self.entropy_coef, 0.0, float("inf"), high_inclusive=False)
        for name in ("top_entropy_quantile", "clip_cov_ratio", "kl_cov_ratio"):
            _checks.check_in_range(name, getattr(self, name), 0.0, 1.0, low_inclusive=False)
        _checks.check_in_range("kl_cov_coef", self.kl_cov_coef, 0.0, float("inf"), high_inclusive=False)
        if not -float("inf") < self.clip_cov_lb < self.clip_cov_ub < float("inf"):
            raise ValueError(f"`clip_cov_lb` must be below `clip_cov_ub` (both finite); got {self.clip_cov_lb!r} "
                             f"and {self.clip_cov_ub!r}")
        if self.entropy_control not in ENTROPY_CONTROLS:
            raise ValueError(f"`entropy_control` must be one of {list(ENTROPY_CONTROLS)}; got {self.entropy_control!r}")
        if self.entropy_control != "none" and self.per_token_loss != "clipped_surrogate":
            raise ValueError(f"`entropy_control`={self.entropy_control!r} modifies the clipped surrogate; it needs "
                             f"per_token_loss='clipped_surrogate', got {self.per_token_loss!r}")

    @classmethod
    def recipe(cls, name: str, **overrides) -> "GRPOConfig":
        """The config of a published method (``GRPO_RECIPES[name]``), with ``overrides`` on top.

        Raises:
            ValueError: unknown ``name`` (the message lists the recipes), or an invalid field.
        """
        if name not in GRPO_RECIPES:
            raise ValueError(f"`name` must be one of {sorted(GRPO_RECIPES)}; got {name!r}")
        return cls(**{**GRPO_RECIPES[name], **overrides})

    def __post_init__(self):
        for name in ("group_size", "prompts_per_step", "num_steps", "num_inner_epochs", "num_minibatches",
                     "max_new_tokens", "max_sampling_rounds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer; got {value!r}")
        for name in ("ref_reset_every", "max_completions"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"`{name}` must be None or a positive integer; got {value!r}")
        if self.group_size < 2:
            raise ValueError(f"`group_size` must be ≥ 2 (a group needs siblings to compare); got {self.group_size}")
        if self.prompts_per_step % self.num_minibatches:
            raise ValueError(f"`num_minibatches` must divide `prompts_per_step`={self.prompts_per_step} (minibatches "
                             f"hold whole groups); got {self.num_minibatches}")
        for name in ("lr", "temperature", "divergence_threshold", "critic_lr"):
            _checks.check_positive(name, getattr(self, name))
        # any finite ε ≥ 0, as the per-token losses accept (ε_low ≥ 1: no lower clip)
        _checks.check_in_range("clip_eps_low", self.clip_eps_low, 0.0, float("inf"), high_inclusive=False)
        if self.clip_eps_high is not None:
            _checks.check_in_range("clip_eps_high", self.clip_eps_high, 0.0, float("inf"), high_inclusive=False)
        _checks.check_in_range("kl_coef", self.kl_coef, 0.0)
        _checks.check_in_range("gae_lambda", self.gae_lambda, 0.0, 1.0)
        _checks.check_in_range("gamma", self.gamma, 0.0, 1.0)
        _checks.check_in_range("overlong_cache_length", self.overlong_cache_length, 0, self.max_new_tokens)
        _checks.check_in_range("eval_every", self.eval_every, 0)
        if not isinstance(self.eval_steps, (tuple, list)) or any(
                isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in self.eval_steps):
            raise ValueError(f"`eval_steps` must be a tuple of step numbers ≥ 0; got {self.eval_steps!r}")
        self.eval_steps = tuple(sorted(set(self.eval_steps)))
        if self.retire_pass_rate is not None:
            _checks.check_in_range("retire_pass_rate", self.retire_pass_rate, 0.0, 1.0, high_inclusive=False)
        if not callable(self.advantage_estimator) and self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"`advantage_estimator` must be one of {sorted(ADVANTAGE_ESTIMATORS)} or a callable; got {self.advantage_estimator!r}")
        if self.advantage_std not in ("population", "sample"):
            raise ValueError(f"`advantage_std` must be 'population' (÷G) or 'sample' (÷(G−1)); got {self.advantage_std!r}")
        if self.advantage_std != "population" and self.advantage_estimator != "grpo":
            raise ValueError(f"`advantage_std` applies only to advantage_estimator='grpo' (the one that divides by a std); "
                             f"got advantage_std={self.advantage_std!r} with advantage_estimator={self.advantage_estimator!r}")
        if not callable(self.loss_aggregation) and self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(f"`loss_aggregation` must be one of {sorted(LOSS_AGGREGATIONS)} or a callable; got {self.loss_aggregation!r}")
        if self.per_token_loss not in PER_TOKEN_LOSSES:
            raise ValueError(f"`per_token_loss` must be one of {sorted(PER_TOKEN_LOSSES)}; got {self.per_token_loss!r}")
        if self.is_correction not in IS_CORRECTION_MODES:
            raise ValueError(f"`is_correction` must be one of {list(IS_CORRECTION_MODES)}; got {self.is_correction!r}")
        if isinstance(self.is_cap, bool) or not isinstance(self.is_cap, (int, float)):
            raise ValueError(f"`is_cap` must be a number C ≥ 1; got {self.is_cap!r}")
        _checks.check_in_range("is_cap", self.is_cap, 1.0, float("inf"), high_inclusive=False)
        self.mismatched_sampler()  # checks the sampler switches (names the field)
        self._check_entropy_switches()
        if self.reward_source not in REWARD_SOURCES:
            raise ValueError(f"`reward_source` must be one of {list(REWARD_SOURCES)}; got {self.reward_source!r}")
        if self.divergence not in ("binary_tv", "binary_kl"):
            raise ValueError(f"`divergence` must be 'binary_tv' or 'binary_kl'; got {self.divergence!r}")
        if self.dynamic_sampling and self.zero_variance_filter:
            raise ValueError("`dynamic_sampling` (resample to refill, DAPO) and `zero_variance_filter` (drop, ScaleRL) "
                             "are alternatives; set at most one")
