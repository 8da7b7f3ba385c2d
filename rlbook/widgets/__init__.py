"""The book's interactive explorers (ipywidgets), each a pure, tested drawing function plus wiring.

``EXPLORERS`` names them ("module:function"); :func:`build_explorer` builds one by name. The chapters
display them beside a static figure; ``rlbook explore NAME`` serves them as live apps (Voilà).

* ``clip``: PPO's clipped objective and CISPO's clipped weight against the ratio (chapters 5, 7);
* ``advantage``: one group's advantages and the per-token push under each aggregation (chapter 9);
* ``kl``: the k1, k2, k3 estimators of a KL, their bias and spread as two distributions part (chapter 5);
* ``gae``: bias² and variance of GAE-λ against exact advantages on chapter 4's MDP;
* ``trust-region``: a two-parameter policy's KL ellipse, the vanilla and natural steps, the line search (chapter 6);
* ``preference``: β tilts π_ref into π*, best-of-N's distribution and KL, DPO's gradient weight (chapters 12, 13);
* ``mismatch``: a sampler that is not the trainer (temperature, top-p, precision), the ratio π/μ, and the
  bias and variance of the uncorrected, TIS and MIS gradient estimators against the cap C (chapter 14);
* ``entropy``: a six-token softmax policy under clipped policy-gradient steps: the entropy over the steps
  against the reward pattern, the clip range and an entropy bonus, and the first-order ΔH = −Cov (chapter 15);
* ``agent``: one multi-turn tool-use episode token by token (prompt, model, tool output, padding), its loss
  mask, and the per-token advantages of GRPO's broadcast, per-turn discounted returns, ReBN and GiGPO over a
  group of four episodes, with the loss's normaliser (chapters 16–17);
* ``distill``: a bimodal teacher and a one-mode student over fifteen tokens, the student fitted by the forward
  KL, the reverse KL or GKD's generalised JSD_β between them: mode-covering against mode-seeking as β, the
  modes' separation and weight and the temperature move (on-policy distillation, :mod:`rlbook.distill`).
"""

from __future__ import annotations

import importlib

__all__ = ["EXPLORERS", "build_explorer"]

EXPLORERS = {
    "clip": "rlbook.widgets.clip_explorer:clip_explorer",
    "advantage": "rlbook.widgets.advantage_explorer:advantage_explorer",
    "kl": "rlbook.widgets.kl_explorer:kl_explorer",
    "gae": "rlbook.widgets.gae_explorer:gae_explorer",
    "trust-region": "rlbook.widgets.trust_region_explorer:trust_region_explorer",
    "preference": "rlbook.widgets.preference_explorer:preference_explorer",
    "mismatch": "rlbook.widgets.mismatch_explorer:mismatch_explorer",
    "entropy": "rlbook.widgets.entropy_explorer:entropy_explorer",
    "agent": "rlbook.widgets.agent_explorer:agent_explorer",
    "distill": "rlbook.widgets.distill_explorer:distill_explorer",
}


def build_explorer(name: str):
    """Build explorer ``name`` (a key of ``EXPLORERS``) and return its ``ipywidgets.VBox``.

    Raises:
        ValueError: unknown ``name`` (the valid names are listed).
    """
    if name not in EXPLORERS:
        raise ValueError(f"unknown explorer {name!r}; choose from: {', '.join(EXPLORERS)}")
    module, function = EXPLORERS[name].split(":")
    return getattr(importlib.import_module(module), function)()
