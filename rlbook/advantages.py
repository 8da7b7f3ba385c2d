"""Advantage estimators: TD errors, n-step returns, GAE (Part II) and group-relative ones (Part III).

Conventions (book notation page): tensors are ``(..., T)``, time last; ``rewards[t]`` follows
``actions[t]``; ``terminated`` drops the bootstrap, ``truncated`` cuts the recursion but bootstraps
from ``next_values`` (V of the final observation).
"""

from __future__ import annotations

import torch

from rlbook import _checks

__all__: list[str] = []

# ===================== Part II: td_errors, n_step_returns, gae =====================

__all__ += ["td_errors", "gae", "n_step_returns"]


def _trajectory_inputs(rewards, values, next_values, terminated, truncated=None):
    """Validate and convert the shared (..., T) trajectory arguments of the Part II estimators."""
    rewards = _checks.as_float_tensor("rewards", rewards)
    _checks.check_min_ndim("rewards", rewards, 1)
    _checks.check_nonempty("rewards", rewards)
    values = _checks.as_float_tensor("values", values, dtype=rewards.dtype)
    next_values = _checks.as_float_tensor("next_values", next_values, dtype=rewards.dtype)
    _checks.check_same_shape(rewards=rewards, values=values, next_values=next_values)
    terminated = _checks.check_bool_like("terminated", terminated, shape=rewards.shape).to(rewards.device)
    if truncated is not None:
        truncated = _checks.check_bool_like("truncated", truncated, shape=rewards.shape).to(rewards.device)
    return rewards, values, next_values, terminated, truncated


def _discounts(gamma, rewards: torch.Tensor):
    """Validate γ: a float in [0, 1] is returned unchanged (the scalar path); a tensor of per-step
    discounts γ_t must broadcast to ``rewards``' shape (..., T) without enlarging it, be finite and
    lie in [0, 1]; it is returned in ``rewards``' dtype and device."""
    if not isinstance(gamma, torch.Tensor):
        _checks.check_in_range("gamma", gamma, 0.0, 1.0)
        return gamma
    gamma = _checks.as_float_tensor("gamma", gamma, dtype=rewards.dtype).to(rewards.device)
    if not _checks.broadcasts_to(gamma.shape, rewards.shape):
        raise ValueError(
            f"`gamma` must be a float or a tensor of per-step discounts broadcasting to the shape of "
            f"`rewards` {tuple(rewards.shape)}; got shape {tuple(gamma.shape)}"
        )
    if gamma.numel() and ((gamma < 0) | (gamma > 1)).any():
        raise ValueError(
            f"`gamma` (per-step discounts) must lie in [0, 1]; got values in "
            f"[{float(gamma.min())}, {float(gamma.max())}]"
        )
    return gamma


def td_errors(rewards, values, next_values, terminated, gamma) -> torch.Tensor:
    """One-step temporal-difference errors.

    δ_t = r_t + γ_t·(1 − terminated_t)·V(s_{t+1}) − V(s_t),   γ_t = γ for a float ``gamma``

    Source: book eq. (td-error); Schulman et al. 2016, arXiv:1506.02438, sec. 3 (δ^V_t).

    Args:
        rewards: (..., T) reward r_t received after action a_t.
        values: (..., T) V(s_t).
        next_values: (..., T) V(s_{t+1}); at a truncation it must hold V(final observation),
            at a termination its value is ignored.
        terminated: (..., T) bool, true where s_{t+1} is terminal (no bootstrap).
        gamma: discount γ in [0, 1] (float), or a tensor of per-step discounts γ_t in [0, 1]
            broadcasting to (..., T), as in :func:`gae`.
    Returns:
        (..., T) TD errors, same dtype as ``rewards``.
    Gradient:
        flows through ``values`` and ``next_values`` if they require grad; callers computing
        advantages should pass detached values.
    Raises:
        ValueError: shapes differ (the argument is named), gamma (or any γ_t) outside [0, 1],
            non-finite, or a γ tensor that does not broadcast to ``rewards``.
    See also:
        rlbook.gae, rlbook.reference.td_errors_loop
    Example:
        >>> td_errors([1.0], [0.5], [2.0], [False], gamma=0.5).tolist()
        [1.5]
    """
    rewards, values, next_values, terminated, _ = _trajectory_inputs(rewards, values, next_values, terminated)
    gamma = _discounts(gamma, rewards)
    not_terminal = (~terminated).to(rewards.dtype)
    return rewards + gamma * not_terminal * next_values - values


def gae(
    rewards, values, next_values, terminated, truncated, gamma, gae_lambda: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation, computed by the backward recursion.

    δ_t = r_t + γ_t(1 − terminated_t)V(s_{t+1}) − V(s_t)
    Â_t = δ_t + γ_tλ(1 − done_t)·Â_{t+1},   done_t = terminated_t ∨ truncated_t,   Â_T = 0
    returns_t = Â_t + V(s_t)   (the TD(λ) return, the value-function target)

    Within one episode this equals Σ_l (Π_{k<l} γ_{t+k}λ) δ_{t+l}, i.e. Σ_l (γλ)^l δ_{t+l} for a
    constant γ. ``terminated`` drops the bootstrap; ``truncated`` keeps it (through
    ``next_values`` = V(final obs)) but stops the sum, so no quantity leaks across episode
    boundaries. The last step of the rollout is treated as bootstrapped by
    ``next_values[..., -1]`` unless it is terminated.

    Per-step discounts. ``gamma`` may be a float γ (then γ_t = γ for every t) or a tensor of
    per-step discounts γ_t, the discount applied to what follows step t (rlax's ``discount_t``).
    γ_t and the flags combine multiplicatively: the bootstrap weight is γ_t·(1 − terminated_t)
    and the recursion weight is γ_t·λ·(1 − done_t). So γ_t = 0 acts exactly like
    ``terminated_t`` (no bootstrap, no carry), a flag always wins over γ_t (a terminated step
    never bootstraps whatever γ_t is, a truncated one always stops the sum), and with all flags
    false this is rlax's ``truncated_generalized_advantage_estimation`` with
    ``discount_t = γ_t`` (its last bootstrap value being ``next_values[..., -1]``). A tensor
    filled with the constant γ gives the float result.

    Source: book eq. (gae); Schulman et al. 2016, arXiv:1506.02438, eq. 16; PPO (arXiv:1707.06347) eq. 11–12;
    per-step discounts as in DeepMind's rlax (``truncated_generalized_advantage_estimation``).

    Args:
        rewards: (..., T) rewards r_t.
        values: (..., T) V(s_t).
        next_values: (..., T) V(s_{t+1}) (V of the final observation at a truncation).
        terminated: (..., T) bool, s_{t+1} terminal.
        truncated: (..., T) bool, episode cut by a time limit after step t.
        gamma: discount γ in [0, 1] (float), or a tensor of per-step discounts γ_t in [0, 1]
            of shape (..., T) or any shape broadcasting to it (e.g. (T,) shared by all rows).
        gae_lambda: λ in [0, 1]; 0 gives δ_t, 1 gives the Monte-Carlo return minus V.
    Returns:
        (advantages, returns), both (..., T).
    Gradient:
        none intended: pass detached values (the result is a constant target).
    Raises:
        ValueError: shapes differ (argument named), gamma (or any γ_t) or gae_lambda outside
            [0, 1], γ_t non-finite, or a γ tensor that does not broadcast to ``rewards``.
    See also:
        rlbook.td_errors, rlbook.n_step_returns, rlbook.reference.gae_loop
    Example:
        >>> adv, ret = gae([1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [False, True], [False, False], 1.0, 1.0)
        >>> adv.tolist()
        [2.0, 1.0]
        >>> adv, _ = gae([1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [False, False], [False, False],
        ...              torch.tensor([0.0, 1.0]), 1.0)   # γ_0 = 0 ends the sum like a termination
        >>> adv.tolist()
        [1.0, 1.0]
    """
    rewards, values, next_values, terminated, truncated = _trajectory_inputs(
        rewards, values, next_values, terminated, truncated
    )
    gamma = _discounts(gamma, rewards)  # a float, or (..., T) per-step γ_t
    _checks.check_in_range("gae_lambda", gae_lambda, 0.0, 1.0)
    deltas = td_errors(rewards, values, next_values, terminated, gamma)
    carry = (gamma * gae_lambda) * (~(terminated | truncated)).to(rewards.dtype)  # (..., T)
    carry = carry.expand_as(deltas)  # a broadcast γ_t, e.g. (T,) shared by every row
    advantages = torch.empty_like(deltas)
    running = torch.zeros_like(deltas[..., 0])
    for t in range(rewards.shape[-1] - 1, -1, -1):
        running = deltas[..., t] + carry[..., t] * running
        advantages[..., t] = running
    return advantages, advantages + values


def n_step_returns(rewards, values, next_values, terminated, truncated, gamma: float, n: int) -> torch.Tensor:
    """n-step bootstrapped returns (A3C style), never summing past an episode end.

    G_t^(n) = Σ_{l=0}^{k−1} γ^l r_{t+l} + γ^k (1 − terminated_{t+k−1}) V(s_{t+k})

    where k = min(n, steps to the end of the episode or rollout): the sum stops at the first
    termination (no bootstrap), truncation or end of rollout (bootstrap from ``next_values``).
    n ≥ T gives the Monte-Carlo return bootstrapped at truncations, i.e. GAE with λ = 1.

    Source: book eq. (n-step); Sutton & Barto 2018, eq. 7.1; Mnih et al. 2016 (A3C), arXiv:1602.01783, sec. 4.

    Args:
        rewards, values, next_values, terminated, truncated: (..., T), as in :func:`gae`.
        gamma: discount γ in [0, 1].
        n: number of reward steps before bootstrapping, n ≥ 1.
    Returns:
        (..., T) returns G_t^(n).
    Gradient:
        none intended (pass detached values).
    Raises:
        ValueError: shapes differ, gamma outside [0, 1], n < 1 or not an integer.
    See also:
        rlbook.gae, rlbook.reference.n_step_returns_loop
    """
    rewards, values, next_values, terminated, truncated = _trajectory_inputs(
        rewards, values, next_values, terminated, truncated
    )
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    if isinstance(n, bool) or not float(n).is_integer() or n < 1:
        raise ValueError(f"`n` must be an integer >= 1; got {n!r}")
    n = int(n)
    T = rewards.shape[-1]
    not_term = (~terminated).to(rewards.dtype)
    stop = terminated | truncated
    stop[..., -1] = True  # the rollout ends: bootstrap from next_values[..., -1]
    out = torch.zeros_like(rewards)  # out[..., t] accumulates G_t^(n)
    alive = torch.ones_like(rewards)  # 1 while the sum started at t has not stopped
    for l in range(min(n, T)):  # add the l-th reward after t, for every t at once
        ends = (stop[..., l:] | (l == n - 1)).to(rewards.dtype)  # (..., T − l)
        live = alive[..., : T - l]
        bootstrap = gamma * not_term[..., l:] * next_values[..., l:]
        out[..., : T - l] += live * gamma**l * (rewards[..., l:] + ends * bootstrap)
        alive[..., : T - l] = live * (1 - ends)
    return out

# ===================== Part III: group-relative advantages (GRPO, RLOO, MaxRL) =====================

def _grouped_rewards(rewards, group_size) -> torch.Tensor:
    """Validate ``rewards`` (B,) and ``group_size``; return a ``(B / G, G)`` view (one row per prompt)."""
    rewards = _checks.as_float_tensor("rewards", rewards)
    if rewards.dim() != 1:
        raise ValueError(
            f"`rewards` must have shape (B,) with B = num_prompts × group_size, group-contiguous; "
            f"got {tuple(rewards.shape)}"
        )
    _checks.check_nonempty("rewards", rewards)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"`group_size` must be a positive integer; got {group_size!r}")
    if rewards.numel() % group_size:
        raise ValueError(
            f"`group_size` ({group_size}) must divide the number of rewards ({rewards.numel()}); "
            "lay rewards out as num_prompts × group_size"
        )
    return rewards.reshape(-1, group_size)


def _zero_where_constant(grouped: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Exact zeros for every group whose rewards are all equal (no learning signal, no rounding dust)."""
    constant = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)
    return torch.where(constant, torch.zeros_like(advantages), advantages)


def group_relative_advantages(
    rewards, group_size: int, scale: str = "std", std: str = "population", eps: float = 1e-6
) -> torch.Tensor:
    """GRPO's group-relative advantage: each reward compared with its siblings (same prompt).

    Â_i = (r_i − mean_g r) / (std_g r + eps)     (scale="std", GRPO)
    Â_i =  r_i − mean_g r                        (scale="none", Dr. GRPO)

    The mean and std are over the G completions of the same prompt. ``std="population"`` divides
    the sum of squares by G (the worked example of chapter 9: rewards [1, 1, 0, 1, 0] give +0.82 and
    −1.22); ``std="sample"`` divides by G − 1 (``torch.std``'s default, as in TRL), which gives
    +0.73 and −1.10. Groups whose rewards are all equal get exactly 0 (never NaN): they carry no
    learning signal.

    Source: book eq. (grpo-adv); Shao et al. 2024 (DeepSeekMath), arXiv:2402.03300, §4.1.2
    (outcome supervision); Dr. GRPO: Liu et al. 2025, arXiv:2503.20783, §3.2 (no std).

    Args:
        rewards: (B,) one scalar reward per completion, B = num_prompts × group_size, laid out
            group-contiguous (completions of prompt 0 first, then prompt 1, ...).
        group_size: G ≥ 1, completions per prompt; must divide B. (G = 1 gives zeros.)
        scale: "std" (GRPO) or "none" (Dr. GRPO: mean-centering only).
        std: "population" (÷G) or "sample" (÷(G−1); needs G ≥ 2). Ignored when scale="none".
        eps: ≥ 0, added to the std (reward units) to keep small-variance groups finite.
    Returns:
        (B,) advantages, same dtype as rewards; mean 0 within each group.
    Gradient:
        none intended: advantages are constants of the loss (the result is detached).
    Raises:
        ValueError: rewards not 1-D, empty or non-finite; group_size not a positive integer
            dividing B; unknown scale or std; std="sample" with G = 1; eps < 0.
    See also:
        leave_one_out_advantages, maxrl_advantages, rlbook.reference.group_relative_advantages_loop
    Example:
        >>> group_relative_advantages(torch.tensor([1., 1., 0., 1., 0.]), group_size=5)
        tensor([ 0.8165,  0.8165, -1.2247,  0.8165, -1.2247])
    """
    grouped = _grouped_rewards(rewards, group_size).detach()
    if scale not in ("std", "none"):
        raise ValueError(f"`scale` must be 'std' (GRPO) or 'none' (Dr. GRPO); got {scale!r}")
    if std not in ("population", "sample"):
        raise ValueError(f"`std` must be 'population' (÷G) or 'sample' (÷(G−1)); got {std!r}")
    _checks.check_in_range("eps", eps, 0.0)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale == "std":
        if std == "sample" and group_size < 2:
            raise ValueError("`group_size` must be ≥ 2 for std='sample' (it divides by G − 1)")
        spread = grouped.std(dim=1, keepdim=True, correction=0 if std == "population" else 1)
        centred = centred / (spread + eps)
    return _zero_where_constant(grouped, centred).reshape(-1)


def leave_one_out_advantages(rewards, group_size: int) -> torch.Tensor:
    """RLOO advantage: each reward minus the mean reward of the *other* G − 1 completions.

    Â_i = r_i − 1/(G−1) Σ_{j≠i} r_j  =  G/(G−1) · (r_i − mean_g r)

    The baseline for completion i does not use r_i, so it is independent of completion i's
    score function and the policy gradient stays unbiased (unlike the plain group mean, whose
    bias factor is exactly (G−1)/G, as the identity above shows).

    Source: book eq. (rloo); Kool, van Hoof & Welling 2019, "Buy 4 REINFORCE samples, get a
    baseline for free!"; Ahmadian et al. 2024, arXiv:2402.14740, eq. 6 (RLOO).

    Args:
        rewards: (B,) one reward per completion, group-contiguous (see group_relative_advantages).
        group_size: G ≥ 2, completions per prompt; must divide B.
    Returns:
        (B,) advantages, mean 0 within each group; exact zeros for all-equal groups.
    Gradient:
        none intended (the result is detached).
    Raises:
        ValueError: bad rewards; group_size < 2 or not dividing B.
    See also:
        group_relative_advantages, rlbook.reference.leave_one_out_advantages_loop
    Example:
        >>> leave_one_out_advantages(torch.tensor([1., 0., 0., 0.]), group_size=4)
        tensor([ 1.0000, -0.3333, -0.3333, -0.3333])
    """
    grouped = _grouped_rewards(rewards, group_size).detach()
    if group_size < 2:
        raise ValueError(f"`group_size` must be ≥ 2 for leave-one-out (no other completions); got {group_size}")
    others_mean = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
    return _zero_where_constant(grouped, grouped - others_mean).reshape(-1)


def maxrl_advantages(rewards, group_size: int) -> torch.Tensor:
    """MaxRL-style advantage: the success-only estimator written as a REINFORCE advantage.

    With N = G completions, K = Σ r_i successes and r̂ = K/N, MaxRL's gradient estimate is
    ĝ = (1/K) Σ_i r_i ∇log π(y_i) for K ≥ 1, and 0 for K = 0. Subtracting the zero-mean control
    variate (1/N) Σ_i ∇log π(y_i) gives ĝ = (1/N) Σ_i Â_i ∇log π(y_i) with

    Â_i = (r_i − r̂) / r̂     for r̂ > 0;      Â_i = 0 when r̂ = 0.

    So the advantage is *mean-centred and divided by the success rate*: rare successes on hard
    prompts are weighted strongly (r̂ = 1/8 gives the success +7), easy prompts (r̂ ≈ 1) weakly.
    The (1/N)-form matches how this library averages over a group; published summaries write
    the same weight for a plain sum over completions, (r_i − r̂)/(N·r̂). For rewards in [0, 1],
    r̂ is the mean reward. Caveat: the control variate has mean zero only unconditionally; since
    groups with K = 0 are zeroed (as in ĝ), E[(1/N) Σ Â_i ∇log π] differs from E[ĝ] by
    E[(1/N) Σ_i ∇log π(y_i); K = 0] = −(1 − p)^{N−1}∇p, exactly the k = N term of ∇J^(N): so
    E[ĝ] = ∇J^(N) while this centred form is exactly unbiased for ∇J^(N−1)
    (:func:`rlbook.maxrl_truncated_objective`; the tests check both by enumeration).

    Source: book eq. (maxrl); Maximum Likelihood Reinforcement Learning (MaxRL),
    2026, arXiv:2602.02710 (the estimator ĝ_N(x), with Â ∝ (r_i − r̂)/r̂); the exact scale (1/N form) is derived above.

    Args:
        rewards: (B,) non-negative rewards (success indicators in the paper), group-contiguous.
        group_size: G = N ≥ 1 completions per prompt; must divide B.
    Returns:
        (B,) advantages; mean 0 within each group with r̂ > 0; exact zeros for all-equal groups.
    Gradient:
        none intended (the result is detached).
    Raises:
        ValueError: bad rewards or negative rewards; group_size not dividing B.
    See also:
        group_relative_advantages, rlbook.reference.maxrl_advantages_loop
    Example:
        >>> maxrl_advantages(torch.tensor([1., 0., 0., 0.]), group_size=4)
        tensor([ 3., -1., -1., -1.])
    """
    grouped = _grouped_rewards(rewards, group_size).detach()
    if (grouped < 0).any():
        raise ValueError("`rewards` must be non-negative for maxrl_advantages (success indicators in [0, 1])")
    success_rate = grouped.mean(dim=1, keepdim=True)
    safe_rate = torch.where(success_rate > 0, success_rate, torch.ones_like(success_rate))
    advantages = (grouped - success_rate) / safe_rate
    return _zero_where_constant(grouped, advantages).reshape(-1)


__all__ += ["group_relative_advantages", "leave_one_out_advantages", "maxrl_advantages"]


def magistral_advantages(rewards, group_size: int) -> torch.Tensor:
    """Magistral's advantage: centre within each group, then scale by the batch's spread.

    Ã_i = r_i − mean_g r                  (per group of G completions of one prompt)
    Â_i = Ã_i / std_batch(Ã),             std_batch(Ã) = √((1/B) Σ_j Ã_j²)   (population std)

    The group mean removes the prompt's difficulty, as in GRPO; the scale is one number for the
    whole (mini)batch passed in, not one per group, so a group whose rewards barely differ is not
    blown up to unit variance (GRPO's per-group std does that). Magistral also subtracts the
    batch mean of Ã, which is 0 here because every group is centred. Groups whose rewards are
    all equal get exact zeros; if every group is constant (std_batch = 0) the result is all zeros,
    never NaN. Call it once per minibatch to reproduce the paper's minibatch normalisation.

    Source: book eq. (magistral-adv); Mistral AI 2025, "Magistral", arXiv:2506.10910, §2
    (advantage normalisation: group-centred, then normalised within the minibatch).

    Args:
        rewards: (B,) one reward per completion, group-contiguous (see group_relative_advantages).
        group_size: G ≥ 1, completions per prompt; must divide B.
    Returns:
        (B,) advantages: mean 0 in every group, population std 1 over the batch (or all 0).
    Gradient:
        none intended (the result is detached).
    Raises:
        ValueError: rewards not 1-D, empty or non-finite; group_size not a positive integer
            dividing B.
    See also:
        group_relative_advantages, rlbook.reference.magistral_advantages_loop
    Example:
        >>> magistral_advantages(torch.tensor([1., 0., 1., 1.]), group_size=2)
        tensor([ 1.4142, -1.4142,  0.0000,  0.0000])
    """
    grouped = _grouped_rewards(rewards, group_size).detach()
    centred = _zero_where_constant(grouped, grouped - grouped.mean(dim=1, keepdim=True))
    spread = centred.std(correction=0)  # population std over the whole batch (÷B)
    if spread.item() == 0.0:
        return torch.zeros_like(centred).reshape(-1)
    return (centred / spread).reshape(-1)


__all__ += ["magistral_advantages"]


def pass_at_k_advantages(rewards, group_size: int, k: int, scale: str = "std") -> torch.Tensor:
    """Pass@k training's analytic group advantage: each completion's share of the k-subsets it sits in.

    Split a group of N completions (c correct) into all C(N, k) subsets of size k and give each
    subset the reward max (1 if it holds a correct completion). The subsets' mean reward is the
    unbiased pass@k estimate and their (population) variance that of a Bernoulli:

    R̄ = 1 − C(N−c, k) / C(N, k),      σ = √(R̄ (1 − R̄)).

    Each completion's advantage is the mean, over the C(N−1, k−1) subsets that contain it, of the
    subset's normalised advantage (max − R̄)/σ. Every subset holding a correct completion has max 1,
    and a wrong completion's subsets lack a correct one with probability C(N−c−1, k−1)/C(N−1, k−1), so

    Â_correct = (1 − R̄) / σ,          Â_wrong = (1 − R̄ − C(N−c−1, k−1) / C(N−1, k−1)) / σ.

    With k = 1 this is GRPO's advantage (population std). A group where every k-subset holds a
    correct completion (N − c < k) has R̄ = 1 and gets zeros: pass@k training stops pushing on
    problems it already solves at k, and spends its signal on the ones it does not. The advantages of
    a group sum to zero (each subset's normalised advantage is counted k times). With
    ``scale="none"`` the σ is left out; then (k/N) Σ_i Â_i ∇log π(y_i) has expectation exactly
    (1 − k/N) ∇pass@k (the baseline R̄ depends on every sample, which costs the factor 1 − k/N, as the
    group mean costs GRPO (G − 1)/G); the tests check this by enumeration.

    Source: Chen et al. 2025, "Pass@k Training for Adaptively Balancing Exploration and
    Exploitation of Large Reasoning Models", arXiv:2508.10751 (the analytical advantage of pass@k
    training); the subset reward and estimator: Chen et al. 2021 (Codex), arXiv:2107.03374, eq. 1.
    The closed form above is re-derived here and checked against the subset enumeration in
    ``tests/test_pass_at_k_advantages.py``.

    Args:
        rewards: (B,) binary rewards (0 wrong, 1 correct), group-contiguous, B = num_prompts × N.
        group_size: N ≥ 1 completions per prompt; must divide B.
        k: 1 ≤ k ≤ N, the k of the pass@k being trained.
        scale: "std" (divide by σ, as in the paper) or "none".
    Returns:
        (B,) advantages, same dtype as rewards; sum 0 within each group; exact zeros where σ = 0.
    Gradient:
        none intended (the result is detached).
    Raises:
        ValueError: rewards not 1-D, empty, non-finite or not in {0, 1}; group_size not a positive
            integer dividing B; k not an integer in [1, N]; unknown scale.
    See also:
        group_relative_advantages, rlbook.pass_at_k
    Example:
        >>> pass_at_k_advantages(torch.tensor([1., 0., 0., 0.]), group_size=4, k=2)
        tensor([ 1.0000, -0.3333, -0.3333, -0.3333])
    """
    grouped = _grouped_rewards(rewards, group_size).detach()
    if not ((grouped == 0) | (grouped == 1)).all():
        raise ValueError("`rewards` must be binary (0 or 1) for pass@k advantages")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= group_size:
        raise ValueError(f"`k` must be an integer in [1, group_size = {group_size}]; got {k!r}")
    if scale not in ("std", "none"):
        raise ValueError(f"`scale` must be 'std' (the paper) or 'none'; got {scale!r}")
    from math import comb

    n = group_size
    out = torch.zeros_like(grouped)
    for row, group in enumerate(grouped):
        c = int(group.sum().item())
        mean = 1.0 - comb(n - c, k) / comb(n, k)
        no_correct_with_wrong = comb(n - c - 1, k - 1) / comb(n - 1, k - 1) if c < n else 0.0
        a_right, a_wrong = 1.0 - mean, 1.0 - mean - no_correct_with_wrong
        if scale == "std":
            sigma = (mean * (1.0 - mean)) ** 0.5
            if sigma == 0.0:
                continue
            a_right, a_wrong = a_right / sigma, a_wrong / sigma
        elif mean in (0.0, 1.0):
            continue
        out[row] = torch.where(group == 1, torch.full_like(group, a_right), torch.full_like(group, a_wrong))
    return out.reshape(-1)


__all__ += ["pass_at_k_advantages"]
