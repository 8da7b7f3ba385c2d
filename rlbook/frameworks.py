"""Where next: each concept of the book by its name in five RL-for-LLMs frameworks, with the source of each name.

One mapping, :data:`FRAMEWORK_NAMES`, gives for every concept the book's ``GRPOConfig`` field(s) and the
setting that expresses it in TRL, verl, OpenRLHF, prime-rl and SkyRL, each with the file (in the
framework's repository, or TRL's installed package) where the name was read. A framework with no
setting for a concept has "—" there, with nothing invented; :data:`NOTES` says, where the source
shows it, what that framework does instead. :func:`where_next_markdown` renders the mapping, the
ladder from this book to a cluster and TRL's defaults as the book's "Where next" page
(``book/where_next.md``, written by ``tools/build_where_next.py``; a test checks the page is up to
date).

The names were read from these sources (a framework's newer release can rename a setting):

* TRL 1.16.0, the installed package (``trl/``), von Werra et al., https://github.com/huggingface/trl;
* verl 0.8.0.dev (Sheng et al. 2024, HybridFlow, arXiv:2409.19256), commit ``b178a3c`` of
  https://github.com/volcengine/verl;
* OpenRLHF 0.11.0 (Hu et al. 2024, arXiv:2405.11143), commit ``3c3be62`` of
  https://github.com/OpenRLHF/OpenRLHF;
* prime-rl 0.8.0, commit ``559b447`` of https://github.com/PrimeIntellect-ai/prime-rl;
* SkyRL, commit ``a956457`` of https://github.com/NovaSky-AI/SkyRL.
"""

from __future__ import annotations

__all__ = ["FRAMEWORKS", "FRAMEWORK_SOURCES", "FRAMEWORK_NAMES", "NOTES", "NONE", "REQUIRED_FIELDS", "TRL_DEFAULTS",
           "where_next_markdown"]

NONE = "—"
FRAMEWORKS = ("TRL", "verl", "OpenRLHF", "prime-rl", "SkyRL")

# framework -> (what was read, the base URL a source path is appended to, or None: the installed package)
FRAMEWORK_SOURCES = {
    "TRL": ("TRL 1.16.0 from PyPI; paths inside its installed `trl` package", None),
    "verl": ("verl 0.8.0.dev, commit b178a3c",
             "https://github.com/volcengine/verl/blob/b178a3cd56f58b2d502255daba591e92833930a7/"),
    "OpenRLHF": ("OpenRLHF 0.11.0, commit 3c3be62",
                 "https://github.com/OpenRLHF/OpenRLHF/blob/3c3be6234e0cb353e76bb8019947db9dfe99fca7/"),
    "prime-rl": ("prime-rl 0.8.0, commit 559b447",
                 "https://github.com/PrimeIntellect-ai/prime-rl/blob/559b44772e471d1538537b8805cc77f3824a5e64/"),
    "SkyRL": ("SkyRL, commit a956457",
              "https://github.com/NovaSky-AI/SkyRL/blob/a9564572eb8e91076be43c1bd5e4615e3de17265/"),
}

_TRL_CONFIG = "trl/trainer/grpo_config.py"
_VERL_ACTOR = "verl/trainer/config/actor/actor.yaml"
_VERL_ROLLOUT = "verl/trainer/config/rollout/rollout.yaml"
_VERL_TRAINER = "verl/trainer/config/ppo_trainer.yaml"
_VERL_ALGOS = "verl/trainer/ppo/core_algos.py"
_VERL_DAPO = "docs/algo/dapo.md"
_ORLHF_CLI = "openrlhf/cli/train_ppo_ray.py"
_PRIME_ORCH = "packages/prime-rl-configs/src/prime_rl/configs/orchestrator.py"
_PRIME_GRPO = "src/prime_rl/orchestrator/algo/grpo.py"
_SKYRL = "skyrl/train/config/config.py"

# concept -> the book's GRPOConfig fields ("fields"), the book's setting as shown ("book"), and per
# framework (name, source path); (NONE, "") where the framework has no setting for the concept
FRAMEWORK_NAMES = {
    "completions per prompt G": {
        "fields": ("group_size",), "book": "`group_size`",
        "TRL": ("`num_generations`", _TRL_CONFIG),
        "verl": ("`actor_rollout_ref.rollout.n`", _VERL_ROLLOUT),
        "OpenRLHF": ("`--rollout.n_samples_per_prompt`", _ORLHF_CLI),
        "prime-rl": ("`orchestrator.group_size`", _PRIME_ORCH),
        "SkyRL": ("`generator.n_samples_per_prompt`", _SKYRL),
    },
    "clip band ε_low, ε_high": {
        "fields": ("clip_eps_low", "clip_eps_high"), "book": "`clip_eps_low`, `clip_eps_high`",
        "TRL": ("`epsilon`, `epsilon_high`", _TRL_CONFIG),
        "verl": ("`actor_rollout_ref.actor.clip_ratio_low`, `clip_ratio_high`", _VERL_ACTOR),
        "OpenRLHF": ("`--actor.eps_clip_low_high` (two numbers)", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.eps_clip_low`, `eps_clip_high`", _SKYRL),
    },
    "KL penalty coefficient β": {
        "fields": ("kl_coef",), "book": "`kl_coef`",
        "TRL": ("`beta`", _TRL_CONFIG),
        "verl": ("`actor_rollout_ref.actor.kl_loss_coef` (with `use_kl_loss`)", _VERL_ACTOR),
        "OpenRLHF": ("`--algo.kl.init_coef` (with `--algo.kl.use_loss`)", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.kl_loss_coef` (with `use_kl_loss`)", _SKYRL),
    },
    "KL estimator (the book: k3)": {
        "fields": (), "book": "k3 (`rl.kl_k3`)",
        "TRL": (NONE, ""),
        "verl": ("`actor_rollout_ref.actor.kl_loss_type` (`low_var_kl` or `k3`)", _VERL_ACTOR),
        "OpenRLHF": ("`--algo.kl.estimator k3`", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.kl_estimator_type` (`k3`)", _SKYRL),
    },
    "loss aggregation: sequence mean of token means, token mean, fixed length": {
        "fields": ("loss_aggregation",),
        "book": "`loss_aggregation`: `seq_mean_token_mean`, `token_mean`, `fixed_length_mean`",
        "TRL": ("`loss_type`: `grpo`, `dapo`, `dr_grpo`", _TRL_CONFIG),
        "verl": ("`actor_rollout_ref.actor.loss_agg_mode`: `seq-mean-token-mean`, `token-mean`, "
                 "`seq-mean-token-sum-norm`", _VERL_ALGOS),
        "OpenRLHF": (NONE, ""),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.loss_reduction`: `sequence_mean`, `token_mean`, `seq_mean_token_sum_norm`",
                  _SKYRL),
    },
    "group advantage divided by the group std (GRPO)": {
        "fields": ("advantage_estimator", "advantage_std"), "book": "`advantage_estimator=\"grpo\"`",
        "TRL": ("`scale_rewards=\"group\"`", _TRL_CONFIG),
        "verl": ("`algorithm.adv_estimator=grpo`", _VERL_TRAINER),
        "OpenRLHF": ("`--algo.advantage.estimator group_norm`", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.advantage_estimator=\"grpo\"`", _SKYRL),
    },
    "group advantage without the std (Dr. GRPO)": {
        "fields": ("advantage_estimator",), "book": "`advantage_estimator=\"dr_grpo\"`",
        "TRL": ("`scale_rewards=\"none\"`", _TRL_CONFIG),
        "verl": ("`algorithm.norm_adv_by_std_in_grpo=False`", _VERL_TRAINER),
        "OpenRLHF": ("`--algo.advantage.estimator dr_grpo`", _ORLHF_CLI),
        "prime-rl": ("`orchestrator.algo.type=\"grpo\"`", _PRIME_GRPO),
        "SkyRL": ("`trainer.algorithm.grpo_norm_by_std=false`", _SKYRL),
    },
    "leave-one-out baseline (RLOO)": {
        "fields": ("advantage_estimator",), "book": "`advantage_estimator=\"rloo\"`",
        "TRL": ("`RLOOTrainer`", "trl/trainer/rloo_trainer.py"),
        "verl": ("`algorithm.adv_estimator=rloo`", _VERL_ALGOS),
        "OpenRLHF": ("`--algo.advantage.estimator rloo`", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.advantage_estimator=\"rloo\"`", _SKYRL),
    },
    "dynamic sampling (DAPO)": {
        "fields": ("dynamic_sampling",), "book": "`dynamic_sampling`",
        "TRL": (NONE, ""),
        "verl": ("`algorithm.filter_groups.enable`", _VERL_DAPO),
        "OpenRLHF": ("`--algo.dynamic_filtering_enable`", _ORLHF_CLI),
        "prime-rl": ("an `advantage_range` gate in `curriculum.gates`", _PRIME_ORCH),
        "SkyRL": ("`trainer.algorithm.dynamic_sampling.type=\"filter\"`", _SKYRL),
    },
    "overlong filtering (truncated completions out of the loss)": {
        "fields": ("overlong_filter",), "book": "`overlong_filter`",
        "TRL": ("`mask_truncated_completions`", _TRL_CONFIG),
        "verl": (NONE, ""),
        "OpenRLHF": (NONE, ""),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`generator.apply_overlong_filtering`", _SKYRL),
    },
    "soft overlong penalty (DAPO)": {
        "fields": ("overlong_cache_length",), "book": "`overlong_cache_length`",
        "TRL": ("`trl.rewards.get_soft_overlong_punishment` (a reward function)", "trl/rewards/other_rewards.py"),
        "verl": ("`reward_model.overlong_buffer.enable`, `.len`, `.penalty_factor`", _VERL_DAPO),
        "OpenRLHF": ("`--reward.overlong_buffer_len`, `--reward.overlong_penalty_factor`", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.overlong_buffer_len` (the DAPO example)",
                  "examples/train/algorithms/dapo/main_dapo.py"),
    },
    "passes over each batch μ": {
        "fields": ("num_inner_epochs",), "book": "`num_inner_epochs`",
        "TRL": ("`num_iterations`", _TRL_CONFIG),
        "verl": ("`actor_rollout_ref.actor.ppo_epochs`", _VERL_ACTOR),
        "OpenRLHF": ("`--train.max_epochs`", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.update_epochs_per_batch`", _SKYRL),
    },
    "sequence-level ratio (GSPO)": {
        "fields": ("per_token_loss",), "book": "`per_token_loss=\"gspo\"`",
        "TRL": ("`importance_sampling_level=\"sequence\"`", _TRL_CONFIG),
        "verl": ("`actor_rollout_ref.actor.policy_loss.loss_mode=gspo`", _VERL_ALGOS),
        "OpenRLHF": ("`--actor.policy_loss_type gspo`", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.policy_loss_type=\"gspo\"`", _SKYRL),
    },
    "clipped importance-sampling weight (CISPO)": {
        "fields": ("per_token_loss",), "book": "`per_token_loss=\"cispo\"`",
        "TRL": ("`loss_type=\"cispo\"`", _TRL_CONFIG),
        "verl": ("`actor_rollout_ref.actor.policy_loss.loss_mode=cispo`", _VERL_ALGOS),
        "OpenRLHF": (NONE, ""),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.policy_loss_type=\"cispo\"`", _SKYRL),
    },
    "truncated or masked importance sampling (train–inference mismatch)": {
        "fields": ("is_correction", "is_cap"), "book": "`is_correction`, `is_cap`",
        "TRL": ("`vllm_importance_sampling_mode`, `vllm_importance_sampling_clip_max`", _TRL_CONFIG),
        "verl": ("`algorithm.rollout_correction.rollout_is`, `rollout_rs`",
                 "verl/trainer/config/algorithm/rollout_correction.yaml"),
        "OpenRLHF": ("`--algo.advantage.is_correction_enable`, `--algo.advantage.is_correction_type`", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.off_policy_correction.tis_ratio_type`, `sequence_mask_metric`", _SKYRL),
    },
    "entropy bonus": {
        "fields": ("entropy_coef",), "book": "`entropy_coef`",
        "TRL": ("`entropy_coef`", _TRL_CONFIG),
        "verl": ("`actor_rollout_ref.actor.entropy_coeff`", _VERL_ACTOR),
        "OpenRLHF": ("`--actor.entropy_coef`", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.use_entropy_loss`, `entropy_loss_coef`", _SKYRL),
    },
    "reference model reset (ProRL)": {
        "fields": ("ref_reset_every",), "book": "`ref_reset_every`",
        "TRL": ("`sync_ref_model`", _TRL_CONFIG),
        "verl": (NONE, ""),
        "OpenRLHF": (NONE, ""),
        "prime-rl": (NONE, ""),
        "SkyRL": (NONE, ""),
    },
    "completion budget in tokens": {
        "fields": ("max_new_tokens",), "book": "`max_new_tokens`",
        "TRL": ("`max_completion_length`", _TRL_CONFIG),
        "verl": ("`data.max_response_length`", "verl/trainer/config/data/legacy_data.yaml"),
        "OpenRLHF": ("`--rollout.max_new_tokens`", _ORLHF_CLI),
        "prime-rl": ("`orchestrator.train.sampling.max_completion_tokens`", _PRIME_ORCH),
        "SkyRL": ("`generator.sampling_params.max_generate_length`", _SKYRL),
    },
    "sampling temperature": {
        "fields": ("temperature",), "book": "`temperature`",
        "TRL": ("`temperature`", _TRL_CONFIG),
        "verl": ("`actor_rollout_ref.rollout.temperature`", _VERL_ROLLOUT),
        "OpenRLHF": ("`--rollout.temperature`", _ORLHF_CLI),
        "prime-rl": ("`orchestrator.train.sampling.temperature`", _PRIME_ORCH),
        "SkyRL": ("`generator.sampling_params.temperature`", _SKYRL),
    },
    "PPO with a critic: GAE λ": {
        "fields": ("advantage_estimator", "gae_lambda", "gamma"), "book": "`advantage_estimator=\"gae\"`, `gae_lambda`",
        "TRL": (NONE, ""),
        "verl": ("`algorithm.adv_estimator=gae`, `algorithm.lam`", _VERL_TRAINER),
        "OpenRLHF": ("`--algo.advantage.estimator gae`, `--algo.advantage.lambd`", _ORLHF_CLI),
        "prime-rl": (NONE, ""),
        "SkyRL": ("`trainer.algorithm.advantage_estimator=\"gae\"`, `lambd`", _SKYRL),
    },
}

# concept -> what the sources show beyond the name (a "—" explained, a difference from the book)
NOTES = {
    "clip band ε_low, ε_high": [
        "prime-rl's default loss does not clip the ratio: it drops the gradient of tokens whose probability moved "
        "more than `trainer.loss.dppo_mask_low` / `dppo_mask_high` from the inference engine's (DPPO's binary-TV "
        "mask, the book's `per_token_loss=\"dppo\"`; `src/prime_rl/trainer/rl/loss.py`).",
    ],
    "KL penalty coefficient β": [
        "prime-rl's `trainer.loss.kl_tau` weights a squared log-ratio to the inference engine's policy, not a KL to "
        "a frozen reference model (`src/prime_rl/trainer/rl/loss.py`).",
    ],
    "KL estimator (the book: k3)": [
        "TRL has no setting: its KL term is k3, exp(r) − r − 1 with r = log π_ref − log π_θ "
        "(`GRPOTrainer._compute_loss`), multiplied by the ratio unless `use_bias_correction_kl=False`.",
    ],
    "loss aggregation: sequence mean of token means, token mean, fixed length": [
        "OpenRLHF has no command-line setting: `PolicyLoss(token_level_loss=True)` takes the token mean, and "
        "`--actor.policy_loss_type gspo` switches it to the per-sequence mean (`openrlhf/models/loss.py`).",
        "The fixed-length normalisers differ: TRL's `dr_grpo` divides the batch's sum by B × "
        "`max_completion_length` (the book's `fixed_length_mean`); verl's `seq-mean-token-sum-norm` divides the "
        "micro-batch's sum by `loss_scale_factor` (default: the padded response length); SkyRL's "
        "`seq_mean_token_sum_norm` divides each "
        "sequence's sum by `trainer.algorithm.max_seq_len`, which must be set, and averages over the batch.",
    ],
    "group advantage divided by the group std (GRPO)": [
        "prime-rl's `grpo` advantage is the reward minus the group mean, with no std "
        "(`src/prime_rl/orchestrator/algo/grpo.py`); hence its entry in the Dr. GRPO row.",
    ],
    "leave-one-out baseline (RLOO)": [
        "In TRL, RLOO is a trainer of its own (`RLOOTrainer`, `RLOOConfig`), not a setting of `GRPOTrainer`.",
    ],
    "dynamic sampling (DAPO)": [
        "verl: the DAPO recipe's setting (`recipe.dapo.main_dapo`, documented in `docs/algo/dapo.md`), not the "
        "main PPO trainer's.",
        "prime-rl: a group whose advantages all lie in [`reject_min`, `reject_max`] (default [0, 0]) is not "
        "admitted to the batch (`src/prime_rl/orchestrator/curriculum/gates/adv.py`), which fills with admitted "
        "groups (`src/prime_rl/orchestrator/train_sink.py`).",
    ],
    "overlong filtering (truncated completions out of the loss)": [
        "OpenRLHF's `--reward.stop_properly_penalty_coef` penalises truncated completions in the reward instead "
        "of masking them.",
    ],
    "soft overlong penalty (DAPO)": [
        "verl: the DAPO recipe's reward manager (`verl/workers/reward_manager/dapo.py`). SkyRL: a setting that its "
        "DAPO example adds to the configuration, not one of SkyRL's own.",
    ],
    "truncated or masked importance sampling (train–inference mismatch)": [
        "prime-rl's default loss weights each token by π_θ/π_inference itself and masks by DPPO's thresholds "
        "(`src/prime_rl/trainer/rl/loss.py`); it has no separate correction setting.",
        "Chapter 14, §14.6, maps the book's modes onto TRL's and verl's settings one by one.",
    ],
    "entropy bonus": [
        "TRL's bonus is a token mean whatever the loss aggregation; verl aggregates it like the loss (§15.8).",
    ],
    "reference model reset (ProRL)": [
        "TRL's `sync_ref_model` mixes π_ref ← α·π_θ + (1 − α)·π_ref every `ref_model_sync_steps` (TR-DPO); "
        "with "
        "`ref_model_mixup_alpha=1.0` it copies the policy, but keeps the optimiser state, which ProRL resets.",
    ],
    "PPO with a critic: GAE λ": [
        "TRL 1.16 ships no PPO trainer (see below).",
    ],
}

# the GRPOConfig fields that the table must cover: every concept of the book's GRPO family that a
# framework may name (tests/test_where_next.py checks each is a concept's field)
REQUIRED_FIELDS = ("group_size", "clip_eps_low", "clip_eps_high", "kl_coef", "loss_aggregation", "advantage_estimator",
                   "dynamic_sampling", "overlong_filter", "overlong_cache_length", "num_inner_epochs", "per_token_loss",
                   "is_correction", "entropy_coef", "ref_reset_every", "max_new_tokens", "temperature", "gae_lambda")

# TRL 1.16's defaults that the book states (here and in chapters 9 and 14), and that rlbook.bridge
# sets explicitly because they differ from what rlbook does; tests/test_trl_defaults.py checks them
TRL_DEFAULTS = {
    "loss_type": "dapo",
    "beta": 0.0,
    "scale_rewards": "group",
    "use_bias_correction_kl": True,
    "vllm_importance_sampling_correction": True,
    "vllm_importance_sampling_mode": "sequence_mask",
    "vllm_importance_sampling_clip_max": 3.0,
    "vllm_importance_sampling_clip_min": None,
    "gradient_checkpointing": True,
    "bf16": True,
}

_DEFAULT_MEANINGS = {
    "loss_type": "DAPO's token mean (the book's `loss_aggregation=\"token_mean\"`), not the GRPO paper's "
                 "per-sequence mean",
    "beta": "no KL penalty and no reference model: GRPO's β = 0.04 has to be set",
    "scale_rewards": "the group advantage divided by the group's *sample* std (`advantage_std=\"sample\"`)",
    "use_bias_correction_kl": "the k3 penalty multiplied by the ratio, which the book's (ch. 9, eq. 9.2) is not",
    "vllm_importance_sampling_correction": "a sampler correction whenever vLLM samples",
    "vllm_importance_sampling_mode": "the sequence-level mask on the product ratio",
    "vllm_importance_sampling_clip_max": "C_max = 3",
    "vllm_importance_sampling_clip_min": "no lower bound: the band is [0, 3], not [1/C, C]",
    "gradient_checkpointing": "activations recomputed in the backward pass (same arithmetic, slower)",
    "bf16": "bf16 mixed precision (the book trains in float32)",
}


def _cell(entry) -> str:
    name, _ = entry
    return name.replace("|", "\\|")


def _sources() -> list[str]:
    lines = []
    for fw in FRAMEWORKS:
        what, base = FRAMEWORK_SOURCES[fw]
        by_path: dict[str, list[str]] = {}
        for concept, row in FRAMEWORK_NAMES.items():
            name, path = row[fw]
            if name != NONE:
                by_path.setdefault(path, []).append(concept)
        lines.append(f"**{fw}** ({what}):")
        lines.append("")
        for path, concepts in by_path.items():
            where = f"[`{path}`]({base}{path})" if base else f"`{path}`"
            lines.append(f"- {where}: {'; '.join(concepts)}")
        lines.append("")
    return lines


def where_next_markdown() -> str:
    """The "Where next" page of the book (MyST markdown), rendered from :data:`FRAMEWORK_NAMES`,
    :data:`NOTES`, :data:`FRAMEWORK_SOURCES` and :data:`TRL_DEFAULTS`.

    Returns:
        the page's text, ending in a newline.
    """
    header = "| concept | this book (`GRPOConfig`) | " + " | ".join(FRAMEWORKS) + " |"
    rule = "|" + "---|" * (2 + len(FRAMEWORKS))
    rows = [f"| {concept} | {row['book']} | " + " | ".join(_cell(row[fw]) for fw in FRAMEWORKS) + " |"
            for concept, row in FRAMEWORK_NAMES.items()]
    notes = [f"- *{concept}*: {note}" for concept, items in NOTES.items() for note in items]
    defaults = [f"- `{name}={value!r}`: {_DEFAULT_MEANINGS[name]}" for name, value in TRL_DEFAULTS.items()]
    lines = [
        "<!-- Generated by tools/build_where_next.py from rlbook/frameworks.py; edit those, not this page. -->",
        "",
        "# Where next",
        "",
        "The book trains a small model on a CPU with `rl.train_grpo`, a loop written to be read. This page is for "
        "the step after: the same settings in the frameworks that train real models, and the order in which to "
        "reach for them.",
        "",
        "## The ladder",
        "",
        "1. **This book, on a CPU.** `rl.train_grpo` with a `GRPOConfig`: every setting in the table below is a "
        "field you have run and measured.",
        "2. **One GPU: TRL with vLLM colocated.** `rlbook.bridge.to_trl_config(config, use_vllm=True, "
        "vllm_mode=\"colocate\", bf16=True)` gives TRL's `GRPOConfig` for the same recipe, and refuses, by name, "
        "the settings TRL cannot express; the book's tests check that TRL's loss and gradient equal the book's on "
        "one batch ({doc}`ch. 9 <09_grpo>`). In colocate mode vLLM samples in the training process and shares the "
        "GPU (`vllm_gpu_memory_utilization`); TRL then applies its sampler correction ({doc}`ch. 14 "
        "<14_train_inference_mismatch>`).",
        "3. **One node, several GPUs.** The same TRL configuration launched with `accelerate` over the node's GPUs, "
        "with vLLM colocated or served on GPUs of its own (`trl vllm-serve` and `vllm_mode=\"server\"`).",
        "4. **Several nodes.** verl or OpenRLHF, which place the policy, the reference model, a critic and the "
        "vLLM engines on a Ray cluster (verl: `trainer.nnodes`, `trainer.n_gpus_per_node`; OpenRLHF: "
        "`openrlhf.cli.train_ppo_ray` with `--actor.num_nodes`, `--ref.num_nodes`, `--vllm.num_engines`). "
        "prime-rl (an orchestrator, trainers and inference servers, asynchronous) and SkyRL are the other "
        "two frameworks of the table.",
        "",
        "**PPO with a critic.** TRL 1.16 ships no PPO trainer: its package has no `PPOTrainer` or `PPOConfig`, "
        "experimental ones included (the trainers in `trl/trainer/` are SFT, DPO, KTO, reward, distillation, GRPO "
        "and RLOO). A recipe with a critic ({doc}`ch. 7 <07_ppo>`; `rl.GRPOConfig.recipe(\"ppo\")`, GAE over tokens) "
        "continues on verl "
        "(`algorithm.adv_estimator=gae` and its `critic` section) or OpenRLHF (`--algo.advantage.estimator gae` "
        "with `--critic.model_name_or_path`); SkyRL also has `advantage_estimator=\"gae\"` and a critic.",
        "",
        "## The book's settings, by framework",
        "",
        "Each name was read in the framework's source (listed below the table, with the version). \"—\" means "
        "the framework has no setting for it; the notes say what it does instead where its source shows it. "
        "Names change between releases: check them against the version you install.",
        "",
        header,
        rule,
        *rows,
        "",
        "Notes:",
        "",
        *notes,
        "",
        "## TRL's defaults",
        "",
        "A `trl.GRPOConfig()` with nothing set trains with these (TRL 1.16), which `rlbook.bridge.to_trl_config` "
        "overrides where the book does otherwise:",
        "",
        *defaults,
        "",
        "## Sources",
        "",
        *_sources(),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"
