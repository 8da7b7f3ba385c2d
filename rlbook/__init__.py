"""rlbook: the library beside the book *Reinforcement learning for language models*.

Flat public API: ``import rlbook as rl`` then ``rl.rewards_to_go(...)``, ``rl.gae(...)``, ...
Each name lives in one small module (one equation, one pure function); this file only gathers
them. The language-model pieces live in :mod:`rlbook.lm` (imported on first use, as they pull in
``transformers``). The book's machinery (the ``rlbook`` command, the site, the explorers' server,
claims and headlines, exercise checkers) lives in :mod:`rlbook.app`.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Modules whose ``__all__`` is re-exported here, in reading order of the book.
_MODULES = [
    "seeding",
    "config",
    "history",
    "app.headline",
    "app.claims",
    "stats",
    # --- Part I (returns, score functions, REINFORCE) ---
    "returns",
    "policy_gradient",
    "envs.bandits",
    "envs.tabular",
    "values",
    "envs.cartpole",
    "plotting",
    "algos.reinforce",
    # --- Part II (advantages, importance sampling, TRPO, PPO) ---
    "advantages",
    "importance",
    "losses",
    "kl",
    "diagnostics",
    "nets",
    "trpo",
    "envs.vector",
    "algos.ppo",
    "algos.trpo",
    # --- Part III (KL estimators, aggregation, group advantages, GRPO) ---
    "aggregation",
    "evaluation",
    "compute_curves",
    "sequence_losses",
    "dppo",
    "rewards",
    "is_corrections",
    "mismatch",
    "entropy_control",
    "steps",
    "algos.grpo",
    # --- Part V (preferences: Bradley–Terry, the KL-regularised optimum, best-of-N, DPO) ---
    "preferences",
    "ranking",
    "kl_regularised",
    "algos.dpo",
    # --- Part VII (agents: text environments on token ids, multi-turn rollouts) ---
    "envs.text",
    "credit",
    "algos.agent",
    # --- Part VII (on-policy distillation) ---
    "distill",
    "algos.distillation",
]

# The modules above are imported, and their names gathered here, on the first use of a public name
# (``rl.gae``, ``from rlbook import gae``, ``from rlbook import *``, ``dir(rl)``), all at once and in
# this order: ``import rlbook`` alone, as the ``rlbook`` command and ``import rlbook.app.cli`` do,
# imports no module of the library, so neither torch nor numpy.
_loaded = False
_loading = False


def _load() -> None:
    """Import every module of ``_MODULES`` and gather its ``__all__`` here (once)."""
    global _loaded, _loading, __all__
    if _loaded or _loading:
        return
    _loading = True
    try:
        names: list[str] = []
        for _name in _MODULES:
            _mod = importlib.import_module(f"rlbook.{_name}")
            for _public in _mod.__all__:
                if _public in globals() and globals()[_public] is not getattr(_mod, _public):
                    raise ImportError(f"rlbook: public name {_public!r} defined twice (in rlbook.{_name})")
                globals()[_public] = getattr(_mod, _public)
                names.append(_public)
        __all__ = names
        _loaded = True
    finally:
        _loading = False


# the book's machinery lives in rlbook.app (see its docstring); these names stay reachable as
# rl.<name> and `from rlbook import <name>`, imported on first use
_APP = ("cli", "site", "explore", "claims", "headline", "exercises")


def __getattr__(name: str):
    if name in ("lm", "widgets", "reference"):
        return importlib.import_module(f"rlbook.{name}")
    if name in _APP:
        return importlib.import_module(f"rlbook.app.{name}")
    if not (name.startswith("_") and name != "__all__"):  # `from rlbook import _checks` finds the module itself
        _load()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module 'rlbook' has no attribute {name!r}")


def __dir__() -> list[str]:
    _load()
    return sorted(globals())
