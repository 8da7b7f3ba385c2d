"""Value functions of a fixed policy on a tabular MDP: exact evaluation and TD(0).

Notation (book §1.6–§1.8): S states, A actions; ``transitions`` (S, A, S) holds P(s'|s, a),
``rewards`` (S, A) the expected reward r(s, a) of taking a in s, ``probs`` (S, A) the policy
π(a|s). Optional ``terminal`` (S,) bool marks states that end the episode on arrival: they are
never acted in and are worth 0 (the convention of :class:`rlbook.TabularMDP`).

    V^π(s)    = E_π[Σ_t γ^t r_t | s_0 = s]
    Q^π(s, a) = r(s, a) + γ Σ_s' P(s'|s, a) V^π(s')
    A^π(s, a) = Q^π(s, a) − V^π(s)

Everything here is infinite-horizon and discounted unless a function takes a ``horizon``
(then V is the value with ``horizon`` steps to go). These are teaching-size tools: dense
(S, S) matrices, float64 recommended. No global RNG: the learner takes a ``torch.Generator``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rlbook import _checks

__all__ = [
    "policy_reward_and_transitions",
    "bellman_expectation_backup",
    "policy_evaluation",
    "iterative_policy_evaluation",
    "action_values_from_state_values",
    "td0_update",
    "TD0Result",
    "td0_policy_evaluation",
]


def _check_mdp(transitions, rewards, probs, terminal):
    """Validate and convert (P, r, π, terminal); return them in P's floating dtype."""
    P = _checks.as_float_tensor("transitions", transitions)
    if P.dim() != 3 or P.shape[0] != P.shape[2] or P.numel() == 0:
        raise ValueError(f"`transitions` must have shape (S, A, S); got {tuple(P.shape)}")
    S, A = P.shape[0], P.shape[1]
    _checks.check_probabilities("transitions", P, dim=-1)
    R = _checks.as_float_tensor("rewards", rewards, dtype=P.dtype)
    if tuple(R.shape) != (S, A):
        raise ValueError(f"`rewards` must have shape (S, A) = ({S}, {A}); got {tuple(R.shape)}")
    pi = _checks.as_float_tensor("probs", probs, dtype=P.dtype)
    if tuple(pi.shape) != (S, A):
        raise ValueError(f"`probs` must have shape (S, A) = ({S}, {A}); got {tuple(pi.shape)}")
    _checks.check_probabilities("probs", pi, dim=-1)
    term = torch.zeros(S, dtype=torch.bool) if terminal is None else _checks.check_bool_like(
        "terminal", terminal, (S,))
    return P, R, pi, term.to(P.device)


def _check_values(values, S: int, dtype) -> torch.Tensor:
    v = _checks.as_float_tensor("values", values, dtype=dtype)
    if tuple(v.shape) != (S,):
        raise ValueError(f"`values` must have shape (S,) = ({S},); got {tuple(v.shape)}")
    return v


def policy_reward_and_transitions(transitions, rewards, probs, terminal=None):
    """The Markov reward process a policy induces: r_π and P_π.

    r_π(s) = Σ_a π(a|s) r(s, a);   P_π(s, s') = Σ_a π(a|s) P(s'|s, a)

    Rows of terminal states, and columns leading into them, are zeroed (arriving in a terminal
    state ends the episode, whose future is worth 0), so P_π is sub-stochastic when anything
    terminates.

    Source: Sutton & Barto 2018, Sec. 3.5 (the expectation over π inside eq. 3.14);
    Puterman 1994, Sec. 5.1.

    Args:
        transitions: (S, A, S) P(s'|s, a), rows summing to 1.
        rewards: (S, A) expected reward r(s, a), reward units.
        probs: (S, A) π(a|s), rows summing to 1.
        terminal: optional (S,) bool.
    Returns:
        (r_pi, P_pi): (S,) and (S, S), in the dtype of ``transitions``.
    Gradient:
        flows to every input (useful for exact gradients of values w.r.t. a policy).
    Raises:
        ValueError: wrong shapes, rows that are not probability vectors, bad ``terminal``.
    """
    P, R, pi, term = _check_mdp(transitions, rewards, probs, terminal)
    live = (~term).to(P.dtype)
    r_pi = (pi * R).sum(-1) * live
    P_pi = torch.einsum("sa,sat->st", pi, P) * live[:, None] * live[None, :]
    return r_pi, P_pi


def bellman_expectation_backup(transitions, rewards, probs, values, gamma, terminal=None) -> torch.Tensor:
    """One application of the Bellman expectation operator: (T^π V)(s) = r_π(s) + γ Σ_s' P_π(s, s') V(s').

    V^π is its unique fixed point (for γ < 1, or γ = 1 when every state reaches a terminal
    state); ``bellman_expectation_backup(..., V) − V`` is the Bellman residual.

    Source: Sutton & Barto 2018, eq. 3.14 (Bellman equation for v_π) and eq. 4.5.

    Args:
        transitions, rewards, probs, terminal: as in ``policy_reward_and_transitions``.
        values: (S,) current estimate V, reward units (entries of terminal states are ignored).
        gamma: discount γ in [0, 1].
    Returns:
        (S,) T^π V; 0 on terminal states.
    Gradient:
        flows to every input.
    Raises:
        ValueError: as ``policy_reward_and_transitions``; ``values`` not (S,); ``gamma`` outside [0, 1].
    """
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    r_pi, P_pi = policy_reward_and_transitions(transitions, rewards, probs, terminal)
    v = _check_values(values, r_pi.shape[0], r_pi.dtype)
    return r_pi + float(gamma) * P_pi @ v


def policy_evaluation(transitions, rewards, probs, gamma, terminal=None) -> torch.Tensor:
    """Exact V^π of the discounted, infinite-horizon problem by one linear solve.

    V^π = r_π + γ P_π V^π   ⇔   V^π = (I − γ P_π)^{-1} r_π

    Source: Sutton & Barto 2018, eq. 3.14 and Sec. 4.1 ("a system of |S| simultaneous linear
    equations"); Puterman 1994, Thm. 6.1.1.

    Args:
        transitions, rewards, probs, terminal: as in ``policy_reward_and_transitions``.
        gamma: discount γ in [0, 1]. γ = 1 is allowed only when I − P_π is invertible, i.e. every
            state reaches a terminal state with probability 1 under π.
    Returns:
        (S,) V^π(s) = E_π[Σ_{t≥0} γ^t r_t | s_0 = s], reward units; 0 on terminal states.
    Gradient:
        flows to every input (through ``torch.linalg.solve``).
    Raises:
        ValueError: bad inputs (see ``policy_reward_and_transitions``), ``gamma`` outside [0, 1],
            or I − γP_π singular (γ = 1 and some state never terminates).
    See also:
        ``iterative_policy_evaluation`` (the same V by repeated backups);
        ``rlbook.reference.tabular_values_enumeration`` (brute force, finite horizon).
    Example:
        >>> P = torch.tensor([[[1.0]]]); r = torch.tensor([[1.0]]); pi = torch.tensor([[1.0]])
        >>> round(float(policy_evaluation(P, r, pi, gamma=0.9)), 4)  # 1 + 0.9 + 0.81 + … = 1 / (1 − 0.9)
        10.0
    """
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    r_pi, P_pi = policy_reward_and_transitions(transitions, rewards, probs, terminal)
    eye = torch.eye(r_pi.shape[0], dtype=r_pi.dtype, device=r_pi.device)
    system = eye - float(gamma) * P_pi
    solution, info = torch.linalg.solve_ex(system, r_pi)
    ill = float(torch.linalg.cond(system.detach())) > 1e12
    if int(info) != 0 or ill or not torch.isfinite(solution).all():
        raise ValueError(f"`gamma`={float(gamma)} makes I − γP_π singular: with gamma = 1 every state "
                         "must reach a terminal state under `probs`")
    return solution


class TD0Result(NamedTuple):
    """Output of ``td0_policy_evaluation``.

    values: (S,) final estimate. history: (K, S) the estimate after each of ``steps``.
    steps: (K,) int64, the number of updates made when each row of ``history`` was recorded.
    """

    values: torch.Tensor
    history: torch.Tensor
    steps: torch.Tensor


def iterative_policy_evaluation(transitions, rewards, probs, gamma, terminal=None, horizon=None,
                                tol: float = 1e-12, max_sweeps: int = 100_000) -> torch.Tensor:
    """V^π by repeated synchronous Bellman backups V_{k+1} = r_π + γ P_π V_k from V_0 = 0.

    With ``horizon=H`` it makes exactly H backups: V_H(s) is the expected discounted return of an
    H-step episode from s (the value with H steps to go; time-dependent values of a finite
    horizon are V_H, V_{H−1}, …). Without a horizon it sweeps until max_s |V_{k+1} − V_k| ≤ tol:
    the discounted infinite-horizon V^π (error ≤ γ·tol/(1 − γ) for γ < 1).

    Source: Sutton & Barto 2018, Sec. 4.1, eq. 4.5 (iterative policy evaluation);
    Puterman 1994, Sec. 4.5 (finite-horizon backward induction).

    Args:
        transitions, rewards, probs, terminal: as in ``policy_reward_and_transitions``.
        gamma: discount γ in [0, 1].
        horizon: None (iterate to convergence) or an integer H ≥ 0.
        tol: convergence tolerance > 0 on the sup-norm change, reward units.
        max_sweeps: limit on the number of backups (≥ 1).
    Returns:
        (S,) values, reward units; 0 on terminal states.
    Gradient:
        flows to every input (unrolled).
    Raises:
        ValueError: bad inputs, ``horizon`` not None or an integer ≥ 0, ``tol`` ≤ 0, ``max_sweeps`` < 1.
        RuntimeError: no convergence within ``max_sweeps`` (γ too close to 1, or γ = 1 without
            termination).
    """
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    if horizon is not None and (isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 0):
        raise ValueError(f"`horizon` must be None or an integer >= 0; got {horizon!r}")
    if not tol > 0:
        raise ValueError(f"`tol` must be > 0; got {tol}")
    if isinstance(max_sweeps, bool) or not isinstance(max_sweeps, int) or max_sweeps < 1:
        raise ValueError(f"`max_sweeps` must be an integer >= 1; got {max_sweeps!r}")
    r_pi, P_pi = policy_reward_and_transitions(transitions, rewards, probs, terminal)
    v = torch.zeros_like(r_pi)
    for _ in range(horizon if horizon is not None else max_sweeps):
        new = r_pi + float(gamma) * P_pi @ v
        change = float((new - v).abs().max())
        v = new
        if horizon is None and change <= tol:
            return v
    if horizon is None:
        raise RuntimeError(f"iterative policy evaluation did not converge in {max_sweeps} sweeps "
                           f"(last change {change:.3g} > tol {tol:g})")
    return v


def action_values_from_state_values(transitions, rewards, values, gamma, terminal=None) -> torch.Tensor:
    """Q(s, a) = r(s, a) + γ Σ_s' P(s'|s, a) V(s') (one step, then follow π): Q from V.

    With V = V^π this is Q^π; then Σ_a π(a|s) Q^π(s, a) = V^π(s), and A^π = Q^π − V^π has
    Σ_a π(a|s) A^π(s, a) = 0. Arriving in a terminal state adds nothing after r(s, a).

    Source: Sutton & Barto 2018, Sec. 3.5 (q_π in terms of v_π, Exercise 3.13).

    Args:
        transitions: (S, A, S) P(s'|s, a).
        rewards: (S, A) r(s, a), reward units.
        values: (S,) V(s), reward units.
        gamma: discount γ in [0, 1].
        terminal: optional (S,) bool; rows of terminal states are 0.
    Returns:
        (S, A) Q(s, a).
    Gradient:
        flows to every input.
    Raises:
        ValueError: wrong shapes, bad ``transitions`` rows or ``terminal``, ``gamma`` outside [0, 1].
    """
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    P = _checks.as_float_tensor("transitions", transitions)
    if P.dim() != 3 or P.shape[0] != P.shape[2] or P.numel() == 0:
        raise ValueError(f"`transitions` must have shape (S, A, S); got {tuple(P.shape)}")
    uniform = torch.full(P.shape[:2], 1.0 / P.shape[1], dtype=P.dtype)
    P, R, _, term = _check_mdp(P, rewards, uniform, terminal)
    v = _check_values(values, P.shape[0], P.dtype)
    live = (~term).to(P.dtype)
    return (R + float(gamma) * P @ (v * live)) * live[:, None]


def td0_update(values, state, reward, next_state, terminated, gamma, step_size) -> torch.Tensor:
    """One tabular TD(0) update, returned as a new tensor (``values`` is not modified).

    δ = r + γ(1 − terminated) V(s') − V(s);   V(s) ← V(s) + α δ

    Only ``terminated`` drops the bootstrap term; a time-limit truncation must still bootstrap
    from V(s') (pass ``terminated=False``).

    Source: Sutton & Barto 2018, Sec. 6.1, eq. 6.2 (tabular TD(0)).

    Args:
        values: (S,) current estimate V, reward units.
        state: int index s in [0, S).
        reward: float r received after acting in s, reward units.
        next_state: int index s' in [0, S) (ignored when ``terminated``).
        terminated: bool, True when s' ended the episode (its future is worth 0).
        gamma: discount γ in [0, 1].
        step_size: α in (0, 1].
    Returns:
        (S,) updated values (only entry ``state`` changes).
    Gradient:
        none intended; use it on detached estimates (it is a semi-gradient method).
    Raises:
        ValueError: ``values`` not 1-D, a state index out of range, ``gamma`` outside [0, 1],
            ``step_size`` outside (0, 1].
    Example:
        >>> td0_update(torch.tensor([0.0, 2.0]), 0, 1.0, 1, False, gamma=0.5, step_size=0.5)
        tensor([1., 2.])
    """
    v = _checks.as_float_tensor("values", values)
    if v.dim() != 1 or v.numel() == 0:
        raise ValueError(f"`values` must have shape (S,); got {tuple(v.shape)}")
    S = v.shape[0]
    for name, idx in (("state", state), ("next_state", next_state)):
        i = int(idx)
        if i != idx or not 0 <= i < S:
            raise ValueError(f"`{name}` must be an integer in [0, {S}); got {idx!r}")
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    if not 0.0 < float(step_size) <= 1.0:
        raise ValueError(f"`step_size` must be in (0, 1]; got {step_size}")
    s, s2 = int(state), int(next_state)
    bootstrap = 0.0 if bool(terminated) else float(gamma) * float(v[s2])
    td_error = float(reward) + bootstrap - float(v[s])
    new = v.clone()
    new[s] = v[s] + float(step_size) * td_error
    return new


def td0_policy_evaluation(transitions, rewards, probs, initial_dist, gamma, num_steps: int, step_size: float,
                          generator, terminal=None, step_size_power: float = 0.0,
                          record_every: int = 100) -> TD0Result:
    """Learn V^π from experience with tabular TD(0): act with π, update after every step.

    The agent starts in s_0 ~ ``initial_dist``; each step draws a ~ π(·|s), s' ~ P(·|s, a),
    receives r(s, a) and applies ``td0_update``. Arriving in a terminal state ends the episode
    (no bootstrap) and a new one starts from ``initial_dist``. The step size of the n-th update
    of state s is α_n(s) = ``step_size`` · n^(−``step_size_power``): power 0 is a constant α
    (the estimate keeps fluctuating, with a noise floor ∝ α); a power in (0.5, 1] satisfies the
    Robbins–Monro conditions Σα = ∞, Σα² < ∞, under which V converges to V^π for every state
    visited infinitely often.

    Source: Sutton & Barto 2018, Sec. 6.1 (tabular TD(0) for estimating v_π) and Sec. 2.7
    (step-size conditions, eq. 2.7).

    Args:
        transitions, rewards, probs, terminal: as in ``policy_reward_and_transitions``.
        initial_dist: (S,) distribution of s_0 (no mass on terminal states).
        gamma: discount γ in [0, 1].
        num_steps: number of environment steps (= updates), ≥ 1.
        step_size: α in (0, 1].
        generator: a CPU ``torch.Generator`` (required; no global RNG).
        step_size_power: exponent in [0, 1].
        record_every: record the estimate every this many steps (≥ 1); the last step is always recorded.
    Returns:
        ``TD0Result(values (S,), history (K, S), steps (K,))``; history starts with V_0 = 0 at step 0.
    Gradient:
        none (a learner).
    Raises:
        ValueError: bad MDP inputs, ``initial_dist`` not a distribution on non-terminal states,
            ``num_steps``/``record_every`` < 1, ``step_size`` outside (0, 1],
            ``step_size_power`` outside [0, 1], ``generator`` not a ``torch.Generator``.
    """
    P, R, pi, term = _check_mdp(transitions, rewards, probs, terminal)
    S = P.shape[0]
    d0 = _checks.as_float_tensor("initial_dist", initial_dist, dtype=P.dtype)
    if tuple(d0.shape) != (S,):
        raise ValueError(f"`initial_dist` must have shape (S,) = ({S},); got {tuple(d0.shape)}")
    _checks.check_probabilities("initial_dist", d0)
    if (d0[term] > 0).any():
        raise ValueError("`initial_dist` puts mass on a terminal state")
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    for name, n in (("num_steps", num_steps), ("record_every", record_every)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"`{name}` must be an integer >= 1; got {n!r}")
    if not 0.0 < float(step_size) <= 1.0:
        raise ValueError(f"`step_size` must be in (0, 1]; got {step_size}")
    _checks.check_in_range("step_size_power", step_size_power, 0.0, 1.0)
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"`generator` must be a torch.Generator; got {type(generator).__name__}")
    # Pre-draw all randomness as uniforms and invert CDFs: one RNG call, no per-step tensor overhead.
    u = torch.rand(num_steps, 3, generator=generator, dtype=torch.float64).tolist()
    cdf_pi, cdf_P, cdf_0 = (torch.cumsum(x.double(), -1).tolist() for x in (pi, P, d0))
    r, live = R.double().tolist(), (~term).tolist()

    def draw(cdf, x):
        for i, c in enumerate(cdf):
            if x < c:
                return i
        return len(cdf) - 1

    v, visits = torch.zeros(S, dtype=P.dtype), [0] * S
    history, steps = [v], [0]
    s = draw(cdf_0, u[0][2])
    for n in range(1, num_steps + 1):
        a = draw(cdf_pi[s], u[n - 1][0])
        s2 = draw(cdf_P[s][a], u[n - 1][1])
        done = not live[s2]
        visits[s] += 1
        alpha = float(step_size) * visits[s] ** (-float(step_size_power))
        v = td0_update(v, s, r[s][a], s2, done, gamma, alpha)
        s = draw(cdf_0, u[n - 1][2]) if done else s2
        if n % record_every == 0 or n == num_steps:
            history.append(v)
            steps.append(n)
    out = v
    return TD0Result(out, torch.stack(history), torch.tensor(steps, dtype=torch.long))
