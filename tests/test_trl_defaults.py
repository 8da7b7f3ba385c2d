"""TRL's ``GRPOConfig`` defaults that the book relies on: a TRL release that changes one fails here, loudly.

Each default below is stated in the book (chapters 9 and 14, the "Where next" page generated from
``rlbook.frameworks.TRL_DEFAULTS``) or is the reason ``rlbook.bridge.to_trl_config`` overrides a
setting. The message of a failure says which text or code to revisit. The TRL test skips without the
``trl`` extra; the check that the page's list equals this one does not.
"""

from __future__ import annotations

import warnings

import pytest

from rlbook import frameworks

# field -> (TRL 1.16's default, what in the book depends on it)
BOOK_RELIES_ON = {
    "loss_type": ("dapo", "book/where_next.md says TRL's default loss is DAPO's token mean (loss_aggregation="
                          "'token_mean'), not the GRPO paper's per-sequence mean"),
    "beta": (0.0, "book/where_next.md says TRL's default has no KL penalty and no reference model, so GRPO's "
                  "β = 0.04 (GRPO_RECIPES['grpo']) must be set; to_trl_config sets beta = kl_coef"),
    "scale_rewards": ("group", "ch. 9 §9.8 and the bridge's advantage mapping: TRL divides by the group's sample std "
                               "(advantage_std='sample'); book/where_next.md states the default"),
    "use_bias_correction_kl": (True, "ch. 9 §9.8 says TRL by default multiplies the k3 penalty by the ratio, which "
                                     "is why to_trl_config sets use_bias_correction_kl=False"),
    "vllm_importance_sampling_correction": (True, "ch. 14 §14.6 says TRL corrects by default whenever vLLM samples; "
                                                  "to_trl_config sets it False for is_correction='none'"),
    "vllm_importance_sampling_mode": ("sequence_mask", "ch. 14 §14.6 and its 'What to set' name sequence_mask as "
                                                       "TRL's default mode"),
    "vllm_importance_sampling_clip_max": (3.0, "ch. 14 §14.6 ('the defaults in TRL 1.16') and GRPOConfig.is_cap's "
                                               "docstring state C_max = 3"),
    "vllm_importance_sampling_clip_min": (None, "ch. 14 §14.6 says the default band is [0, 3], not [1/C, C], "
                                                "unless clip_min is set"),
    "gradient_checkpointing": (True, "to_trl_config switches checkpointing off, and benchmarks/grpo_throughput.py "
                                     "says TRL's defaults turn it on"),
    "bf16": (True, "to_trl_config sets bf16=False because TRL's default trains in bf16 (rlbook in float32), and "
                   "ch. 9 §9.8 tells the reader to pass bf16=True on a GPU"),
}


def test_the_where_next_page_lists_these_defaults():
    assert frameworks.TRL_DEFAULTS == {name: value for name, (value, _) in BOOK_RELIES_ON.items()}


def test_trl_grpo_config_defaults_are_the_ones_the_book_relies_on(tmp_path):
    trl = pytest.importorskip("trl", reason="the TRL defaults test needs the `trl` extra")
    with warnings.catch_warnings():
        # TRL's own default sets `gradient_checkpointing`, which transformers 5 calls a deprecated alias
        warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", category=FutureWarning)
        # use_cpu: TRL's default bf16=True is refused without a GPU otherwise; it resolves bf16 the same way
        args = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True)
    changed = [f"{name}: TRL {trl.__version__}'s default is now {getattr(args, name)!r}, the book relies on "
               f"{value!r}. Revisit: {why}."
               for name, (value, why) in BOOK_RELIES_ON.items() if getattr(args, name) != value]
    assert not changed, "TRL changed defaults the book relies on:\n" + "\n".join(changed)
