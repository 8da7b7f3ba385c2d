"""Small networks for the CartPole chapters: an MLP builder and a categorical actor-critic.

These are thin modules with no learning rules inside; every equation a trainer uses lives in its
own pure function (:mod:`rlbook.advantages`, :mod:`rlbook.losses`, :mod:`rlbook.trpo`).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

__all__ = ["mlp", "orthogonal_init_", "ActorCritic"]

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "elu": nn.ELU}


def _activation_class(activation) -> type[nn.Module]:
    if isinstance(activation, str):
        key = activation.lower()
        if key not in _ACTIVATIONS:
            raise ValueError(f"`activation` must be one of {sorted(_ACTIVATIONS)} or an nn.Module class; got {activation!r}")
        return _ACTIVATIONS[key]
    if isinstance(activation, type) and issubclass(activation, nn.Module):
        return activation
    raise ValueError(f"`activation` must be a name or an nn.Module class; got {activation!r}")


def mlp(sizes: Sequence[int], activation="tanh", output_activation=None) -> nn.Sequential:
    """A multilayer perceptron ``sizes[0] -> sizes[1] -> ... -> sizes[-1]``.

    Linear layers with ``activation`` between them and ``output_activation`` (default none) after
    the last one: ``mlp([4, 64, 64, 2])`` is ``Linear(4,64), Tanh, Linear(64,64), Tanh, Linear(64,2)``.

    Args:
        sizes: layer widths, at least two positive integers (input and output).
        activation: ``"tanh"``, ``"relu"``, ``"gelu"``, ``"elu"`` or an ``nn.Module`` class.
        output_activation: same choices, or ``None`` for a linear output.
    Returns:
        ``nn.Sequential`` mapping ``(..., sizes[0])`` to ``(..., sizes[-1])``.
    Raises:
        ValueError: fewer than two sizes, a non-positive size, or an unknown activation.
    Example:
        >>> mlp([4, 8, 2])
        Sequential(
          (0): Linear(in_features=4, out_features=8, bias=True)
          (1): Tanh()
          (2): Linear(in_features=8, out_features=2, bias=True)
        )
    """
    sizes = list(sizes)
    if len(sizes) < 2:
        raise ValueError(f"`sizes` must hold at least two widths (input, output); got {sizes}")
    if any(int(s) != s or s < 1 for s in sizes):
        raise ValueError(f"`sizes` must be positive integers; got {sizes}")
    act = _activation_class(activation)
    out_act = None if output_activation is None else _activation_class(output_activation)
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(int(n_in), int(n_out)))
        last = i == len(sizes) - 2
        if not last:
            layers.append(act())
        elif out_act is not None:
            layers.append(out_act())
    return nn.Sequential(*layers)


def orthogonal_init_(net: nn.Module, gain: float = math.sqrt(2), last_gain: float | None = None) -> nn.Module:
    """Orthogonal weights and zero biases for every ``nn.Linear`` in ``net``, in place.

    The usual PPO initialisation (Engstrom et al. 2020, arXiv:2005.12729, "orthogonal
    initialisation"): hidden layers with gain √2, the policy head with 0.01 (a near-uniform
    initial policy), the value head with 1.

    Args:
        net: a module (typically from :func:`mlp`).
        gain: gain of the hidden layers.
        last_gain: gain of the last ``nn.Linear`` (``None``: same as ``gain``).
    Returns:
        ``net`` itself.
    Raises:
        ValueError: a negative gain.
    """
    if gain < 0 or (last_gain is not None and last_gain < 0):
        raise ValueError(f"`gain` and `last_gain` must be >= 0; got {gain}, {last_gain}")
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        g = last_gain if (last_gain is not None and i == len(linears) - 1) else gain
        nn.init.orthogonal_(layer.weight, gain=g)
        nn.init.zeros_(layer.bias)
    return net


class ActorCritic(nn.Module):
    """Separate actor (logits) and critic (value) MLPs for a discrete-action task.

    ``actor``: ``(..., obs_dim) -> (..., num_actions)`` logits of π_θ(·∣s);
    ``critic``: ``(..., obs_dim) -> (...)`` value V_φ(s). No weights are shared, so the TRPO
    natural step (actor only) and the critic's Adam fit touch disjoint parameters.

    Args:
        obs_dim, num_actions: input and output sizes.
        hidden_sizes: widths of the hidden layers of both networks.
        activation: see :func:`mlp`.
        orthogonal_init: use :func:`orthogonal_init_` (gains √2 / 0.01 / 1) instead of torch's default.
    """

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: Sequence[int] = (64, 64),
                 activation="tanh", orthogonal_init: bool = True):
        super().__init__()
        hidden = list(hidden_sizes)
        self.actor = mlp([obs_dim, *hidden, num_actions], activation)
        self.critic = mlp([obs_dim, *hidden, 1], activation)
        if orthogonal_init:
            orthogonal_init_(self.actor, math.sqrt(2), last_gain=0.01)
            orthogonal_init_(self.critic, math.sqrt(2), last_gain=1.0)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        """(..., obs_dim) -> (..., num_actions) action logits."""
        return self.actor(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """(..., obs_dim) -> (...) state values."""
        return self.critic(obs).squeeze(-1)
