"""Small tabular MDPs with exact J(θ), V^π, Q^π, A^π, occupancies and enumerated trajectories.

Conventions, shared by every method (so J, the enumeration and the sampler agree):
- An episode starts at s_0 ~ ``initial_dist``; at step t the agent in s_t takes a_t ~ π(·|s_t),
  receives r_t = ``rewards[s_t, a_t]`` (the *expected* reward of the pair; the sampler returns it
  as is) and moves to s_{t+1} ~ ``transitions[s_t, a_t]``.
- The episode stops after ``horizon`` steps (t = 0 … H−1), or earlier when s_{t+1} is a
  ``terminal`` state (then ``terminated[t]`` is True; a terminal state is never acted in and is
  worth 0). ``horizon=None`` means an infinite horizon and needs γ < 1.
- J(θ) = E[Σ_t γ^t r_t]; V^π, Q^π, A^π are the time-0 values of the same (H-step) problem.
- Policies: *logits* (S, A) where a method differentiates w.r.t. θ (``policy_probs``,
  ``expected_return``, ``exact_policy_gradient``, ``policy_gradient_theorem``,
  ``score_function_*``); *probabilities* (S, A) elsewhere (``state_values``, ``action_values``,
  ``advantages``, ``occupancy``, ``enumerate_trajectories``, ``sample_trajectories``).
  Inputs are cast to the MDP's dtype (float64 by default); gradients flow through the cast.
- A method's ``horizon`` argument defaults to the MDP's own ``horizon``.
- Everything lives on the CPU: these MDPs are tiny and exist to give exact answers.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rlbook import _checks
from rlbook.envs.bandits import _as_generator, _check_count
from rlbook.policy_gradient import softmax_score
from rlbook.returns import discounted_returns, rewards_to_go

__all__ = ["TabularMDP", "TabularTrajectories"]


class TabularTrajectories(NamedTuple):
    """A batch of episodes padded to H steps: each field (N, H). Steps after an episode's
    ``terminated`` step are padding (state 0, action 0, reward 0, terminated False); ``mask``
    marks the real steps."""

    states: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor

    @property
    def mask(self) -> torch.Tensor:
        """(N, H) bool: True on real steps (up to and including the terminating one)."""
        ended_before = torch.cumsum(self.terminated.long(), -1) - self.terminated.long()
        return ended_before == 0


class TabularMDP:
    """A finite MDP (S states, A actions) with exact, differentiable policy evaluation.

    Args:
        transitions: (S, A, S) P(s'|s, a); each [s, a, :] a probability vector.
        rewards: (S, A) expected reward r(s, a).
        initial_dist: (S,) distribution of s_0 (no mass on terminal states).
        gamma: discount γ in [0, 1]; γ < 1 when ``horizon`` is None.
        horizon: None (infinite) or an integer H ≥ 1.
        terminal: optional (S,) bool, states that end the episode on arrival.
        dtype: floating dtype of every computation (default float64, for exactness).
    Raises:
        ValueError: a shape mismatch, non-probability ``transitions``/``initial_dist``, ``gamma``
            out of range, a bad ``horizon``, or initial mass on a terminal state.
    Example:
        >>> mdp = TabularMDP.chain()
        >>> round(float(mdp.expected_return(torch.zeros(4, 2))), 4)
        0.5132
    """

    def __init__(self, transitions, rewards, initial_dist, gamma, horizon=None, terminal=None,
                 dtype=torch.float64):
        P = _checks.as_float_tensor("transitions", transitions, dtype=dtype)
        if P.dim() != 3 or P.shape[0] != P.shape[2] or P.numel() == 0:
            raise ValueError(f"`transitions` must have shape (S, A, S); got {tuple(P.shape)}")
        S, A = P.shape[0], P.shape[1]
        _checks.check_probabilities("transitions", P, dim=-1)
        R = _checks.as_float_tensor("rewards", rewards, dtype=dtype)
        if tuple(R.shape) != (S, A):
            raise ValueError(f"`rewards` must have shape (S, A) = ({S}, {A}); got {tuple(R.shape)}")
        d0 = _checks.as_float_tensor("initial_dist", initial_dist, dtype=dtype)
        if tuple(d0.shape) != (S,):
            raise ValueError(f"`initial_dist` must have shape (S,) = ({S},); got {tuple(d0.shape)}")
        _checks.check_probabilities("initial_dist", d0)
        _checks.check_in_range("gamma", gamma, 0.0, 1.0)
        self.horizon = self._check_horizon(horizon, allow_none=True)
        if horizon is None and float(gamma) >= 1.0:
            raise ValueError("`gamma` must be < 1 for an infinite horizon (horizon=None); got 1.0")
        term = torch.zeros(S, dtype=torch.bool) if terminal is None else _checks.check_bool_like(
            "terminal", terminal, (S,))
        if (d0[term] > 0).any():
            raise ValueError("`initial_dist` puts mass on a terminal state")
        self.transitions, self.rewards, self.initial_dist, self.terminal = P, R, d0, term
        self.gamma, self.dtype = float(gamma), P.dtype
        live = (~term).to(P.dtype)
        # Sub-stochastic kernels: a terminal state is never entered "alive" and earns nothing.
        self._P_live = P * live[:, None, None] * live[None, None, :]  # (S, A, S)
        self._R_live = R * live[:, None]  # (S, A)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def random(cls, num_states: int, num_actions: int, gamma: float, horizon=None, seed: int = 0,
               num_terminal: int = 0, dtype=torch.float64) -> "TabularMDP":
        """A random MDP: P(·|s,a) = softmax(2·N(0,1)), r(s,a) ~ U[0,1), s_0 ~ softmax(N(0,1)).

        The last ``num_terminal`` states are terminal (s_0 never starts there). Seeded, no global RNG.
        """
        S = _check_count("num_states", num_states)
        A = _check_count("num_actions", num_actions)
        if isinstance(num_terminal, bool) or not isinstance(num_terminal, int) or not 0 <= num_terminal < S:
            raise ValueError(f"`num_terminal` must be an integer in [0, {S}); got {num_terminal!r}")
        gen = _as_generator(seed)
        P = torch.softmax(2.0 * torch.randn(S, A, S, generator=gen, dtype=dtype), -1)
        R = torch.rand(S, A, generator=gen, dtype=dtype)
        logits0 = torch.randn(S, generator=gen, dtype=dtype)
        terminal = torch.arange(S) >= S - num_terminal
        d0 = torch.softmax(logits0.masked_fill(terminal, -torch.inf), -1)
        return cls(P, R, d0, gamma, horizon, terminal if num_terminal else None, dtype=dtype)

    @classmethod
    def chain(cls, length: int = 4, gamma: float = 0.9, horizon=None, slip: float = 0.0,
              left_reward: float = 0.05, dtype=torch.float64) -> "TabularMDP":
        """A corridor 0 … L−1 starting at 0; the right end is terminal and pays 1 on arrival.

        Action 0 moves left (clamped at 0), action 1 right; with probability ``slip`` the move goes
        the other way. Pressing left at state 0 pays ``left_reward``: a small sure reward that a
        short-sighted policy prefers to the distant goal. Rewards are expected rewards r(s, a).
        """
        L = _check_count("length", length)
        if L < 2:
            raise ValueError(f"`length` must be >= 2; got {length}")
        _checks.check_in_range("slip", slip, 0.0, 1.0)
        P = torch.zeros(L, 2, L, dtype=dtype)
        for s in range(L):
            left, right = max(s - 1, 0), min(s + 1, L - 1)
            P[s, 0, left] += 1 - slip
            P[s, 0, right] += slip
            P[s, 1, right] += 1 - slip
            P[s, 1, left] += slip
        R = P[:, :, L - 1].clone()  # expected reward of arriving at the goal
        R[0, 0] += left_reward
        d0 = torch.zeros(L, dtype=dtype)
        d0[0] = 1.0
        terminal = torch.arange(L) == L - 1
        return cls(P, R, d0, gamma, horizon, terminal, dtype=dtype)

    # ------------------------------------------------------------------ checks and helpers
    @property
    def num_states(self) -> int:
        return self.transitions.shape[0]

    @property
    def num_actions(self) -> int:
        return self.transitions.shape[1]

    @staticmethod
    def _check_horizon(horizon, allow_none: bool):
        if horizon is None and allow_none:
            return None
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f"`horizon` must be an integer >= 1{' or None' if allow_none else ''}; got {horizon!r}")
        return horizon

    def _resolve_horizon(self, horizon, need_finite: bool = False):
        h = self.horizon if horizon is None else self._check_horizon(horizon, allow_none=False)
        if h is None and need_finite:
            raise ValueError("`horizon` must be given (an integer >= 1): this MDP has an infinite horizon")
        return h

    def _check_policy(self, name: str, x) -> torch.Tensor:
        x = _checks.as_float_tensor(name, x)
        if tuple(x.shape) != (self.num_states, self.num_actions):
            raise ValueError(f"`{name}` must have shape (S, A) = ({self.num_states}, {self.num_actions}); "
                             f"got {tuple(x.shape)}")
        x = x.to(self.dtype)
        if name == "probs":
            _checks.check_probabilities("probs", x)
        return x

    def _policy_kernels(self, pi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """r_π (S,) = Σ_a π(a|s) r(s,a) and P_π (S, S) = Σ_a π(a|s) P(s'|s,a), live parts only."""
        return (pi * self._R_live).sum(-1), torch.einsum("sa,sat->st", pi, self._P_live)

    def _values(self, pi: torch.Tensor, steps) -> torch.Tensor:
        """V of the ``steps``-step problem (None: infinite), (S,)."""
        r_pi, P_pi = self._policy_kernels(pi)
        if steps is None:
            eye = torch.eye(self.num_states, dtype=self.dtype)
            return torch.linalg.solve(eye - self.gamma * P_pi, r_pi)
        v = torch.zeros_like(r_pi)
        for _ in range(steps):
            v = r_pi + self.gamma * P_pi @ v
        return v

    # ------------------------------------------------------------------ exact quantities
    def policy_probs(self, logits) -> torch.Tensor:
        """π(a|s) = softmax over a of logits (S, A) -> (S, A); differentiable."""
        return torch.softmax(self._check_policy("logits", logits), -1)

    def expected_return(self, logits, horizon=None) -> torch.Tensor:
        """J(θ) = E[Σ_{t<H} γ^t r_t] = Σ_s d_0(s) V^π(s), scalar; differentiable in ``logits``.

        Finite H: backward induction V_{k+1} = r_π + γ P_π V_k, H times from V_0 = 0. Infinite:
        the linear solve (I − γP_π) V = r_π. Source: book eq. (1.4); Puterman 1994, Ch. 4 and 6.
        """
        pi = self.policy_probs(logits)
        return self.initial_dist @ self._values(pi, self._resolve_horizon(horizon))

    def state_values(self, probs, horizon=None) -> torch.Tensor:
        """V^π(s) = E[Σ_{t<H} γ^t r_t | s_0 = s], (S,) from ``probs`` (S, A); 0 on terminal states.

        Source: book eq. (1.15): V = r_π + γ P_π V (infinite horizon); Sutton & Barto 2018, eq. 3.14.
        """
        return self._values(self._check_policy("probs", probs), self._resolve_horizon(horizon))

    def action_values(self, probs, horizon=None) -> torch.Tensor:
        """Q^π(s, a) = r(s, a) + γ Σ_s' P(s'|s, a) V^π_{H−1}(s'), (S, A) from ``probs``.

        V_{H−1} is the value with one step fewer (V itself for an infinite horizon); rows of
        terminal states are 0. Source: book eq. (1.14).
        """
        pi = self._check_policy("probs", probs)
        h = self._resolve_horizon(horizon)
        v_next = self._values(pi, None if h is None else h - 1)
        return self._R_live + self.gamma * self._P_live @ v_next

    def advantages(self, probs, horizon=None) -> torch.Tensor:
        """A^π(s, a) = Q^π(s, a) − V^π(s), (S, A) from ``probs``; Σ_a π(a|s) A(s, a) = 0."""
        pi = self._check_policy("probs", probs)
        return self.action_values(pi, horizon) - self.state_values(pi, horizon)[:, None]

    def occupancy(self, probs, horizon=None, normalize: bool = False) -> torch.Tensor:
        """Discounted state occupancy ρ_π(s) = Σ_{t<H} γ^t P(s_t = s, episode still running), (S,).

        Unnormalised by default: Σ_s ρ = Σ_t γ^t P(alive at t), which is 1/(1 − γ) for an infinite
        horizon without terminal states (and H for γ = 1, no terminals); then J = Σ_s ρ(s) r_π(s).
        ``normalize=True`` divides by that sum (the distribution d_π = (1 − γ)ρ of the
        performance-difference lemma when nothing terminates).
        Source: Kakade & Langford 2002, Sec. 2; Sutton et al. 2000.
        """
        pi = self._check_policy("probs", probs)
        h = self._resolve_horizon(horizon)
        _, P_pi = self._policy_kernels(pi)
        if h is None:
            eye = torch.eye(self.num_states, dtype=self.dtype)
            rho = torch.linalg.solve(eye - self.gamma * P_pi.T, self.initial_dist)
        else:
            d, rho = self.initial_dist, torch.zeros_like(self.initial_dist)
            for t in range(h):
                rho = rho + self.gamma**t * d
                d = d @ P_pi
        return rho / rho.sum() if normalize else rho

    def policy_gradient_theorem(self, logits, horizon=None) -> torch.Tensor:
        """∂J/∂θ_{s,a} = Σ_{t<H} γ^t P(s_t = s) π(a|s) A_t(s, a), (S, A), for softmax logits.

        A_t is the advantage with H − t steps left (the same A for every t if H is infinite, so
        the sum is ρ_π(s) π(a|s) A^π(s, a)). Source: Sutton et al. 2000, Thm 1, with the softmax
        score ∂log π(b|s)/∂θ_{s,a} = 1[a=b] − π(a|s).
        """
        pi = self.policy_probs(logits)
        h = self._resolve_horizon(horizon)
        if h is None:
            return self.occupancy(pi)[:, None] * pi * self.advantages(pi)
        values = [self._values(pi, k) for k in range(h + 1)]  # values[k]: k steps to go
        _, P_pi = self._policy_kernels(pi)
        d, grad = self.initial_dist, torch.zeros_like(pi)
        for t in range(h):
            adv = self._R_live + self.gamma * self._P_live @ values[h - t - 1] - values[h - t][:, None]
            grad = grad + self.gamma**t * d[:, None] * pi * adv
            d = d @ P_pi
        return grad

    # ------------------------------------------------------------------ trajectories
    def enumerate_trajectories(self, probs, horizon=None, max_trajectories: int = 200_000):
        """Every distinct trajectory (s_0, a_0, …, s_{L−1}, a_{L−1}, terminated) of positive probability.

        Two runs that differ only in what is not recorded (the state after the last step, or
        which terminal state ended the episode) are one trajectory; their probabilities add.

        Returns:
            (trajectories, probability): a ``TabularTrajectories`` of (N, H) tensors and (N,) p(τ) =
            d_0(s_0) Π_t π(a_t|s_t) P(s_{t+1}|s_t, a_t), differentiable in ``probs``; Σ p = 1.
        Raises:
            ValueError: no finite ``horizon``; more than ``max_trajectories`` trajectories.
        """
        pi = self._check_policy("probs", probs)
        h = self._resolve_horizon(horizon, need_finite=True)
        S, A = self.num_states, self.num_actions
        # Outcomes of a step: o < S "alive in state o", o = S "terminated" (which terminal state
        # is not recorded). On the last step every live state is merged into o = 0.
        live = (~self.terminal).to(self.dtype)
        outcome = torch.cat([self.transitions * live, (self.transitions * (1 - live)).sum(-1, keepdim=True)], -1)
        last = torch.zeros_like(outcome)
        last[..., 0], last[..., S] = outcome[..., :S].sum(-1), outcome[..., S]
        cur = torch.nonzero(self.initial_dist > 0).flatten()  # (N,) current state of each row
        prob = self.initial_dist[cur]
        alive = torch.ones_like(cur, dtype=torch.bool)
        hist = [torch.zeros(len(cur), 0, dtype=dt) for dt in (torch.long, torch.long, self.dtype, torch.bool)]
        for t in range(h):
            kernel = last if t == h - 1 else outcome  # (S, A, S + 1)
            live_rows = torch.nonzero(alive).flatten()
            parent = live_rows.repeat_interleave(A * (S + 1))  # (n_live·A·(S+1),)
            act = torch.arange(A).repeat_interleave(S + 1).repeat(len(live_rows))
            out = torch.arange(S + 1).repeat(A * len(live_rows))
            s = cur[parent]
            w = pi[s, act] * kernel[s, act, out]
            keep = w.detach() > 0
            parent, act, out, s, w = parent[keep], act[keep], out[keep], s[keep], w[keep]
            dead = torch.nonzero(~alive).flatten()
            if len(dead) + len(parent) > max_trajectories:
                raise ValueError(f"`horizon` {h} gives more than max_trajectories={max_trajectories} trajectories")
            rows = torch.cat([dead, parent])
            pad = torch.zeros(len(dead), dtype=torch.long)
            ended = out == S
            cols = [torch.cat([pad, s]), torch.cat([pad, act]),
                    torch.cat([pad.to(self.dtype), self.rewards[s, act]]), torch.cat([pad.bool(), ended])]
            hist = [torch.cat([old[rows], new[:, None]], 1) for old, new in zip(hist, cols)]
            prob = torch.cat([prob[dead], prob[parent] * w])
            alive = torch.cat([torch.zeros(len(dead), dtype=torch.bool), ~ended])
            cur = torch.cat([cur[dead], torch.where(ended, torch.zeros_like(out), out)])
        return TabularTrajectories(*hist), prob

    def sample_trajectories(self, probs, n: int, horizon=None, generator=None) -> TabularTrajectories:
        """n i.i.d. episodes under π = ``probs``, padded to H steps: the process that
        ``enumerate_trajectories`` lists, so sample averages converge to its exact sums.

        Args:
            probs: (S, A) policy probabilities.
            n: number of episodes ≥ 1.
            horizon: steps H (default: the MDP's; required if that is infinite).
            generator: a CPU ``torch.Generator`` or an integer seed (required; no global RNG).
        Returns:
            ``TabularTrajectories`` of (n, H) tensors: states, actions (int64), rewards r(s_t, a_t)
            (the MDP's dtype), terminated (bool); ``.mask`` marks the real steps.
        Raises:
            ValueError: bad ``probs``, ``n``, ``horizon`` or ``generator``.
        """
        pi = self._check_policy("probs", probs).detach()
        h = self._resolve_horizon(horizon, need_finite=True)
        n = _check_count("n", n)
        gen = _as_generator(generator)
        s = torch.multinomial(self.initial_dist.expand(n, -1), 1, replacement=True, generator=gen)[:, 0]
        alive = torch.ones(n, dtype=torch.bool)
        cols = ([], [], [], [])
        for _ in range(h):
            a = torch.multinomial(pi[s], 1, generator=gen)[:, 0]
            nxt = torch.multinomial(self.transitions[s, a], 1, generator=gen)[:, 0]
            term = self.terminal[nxt]
            for col, val, pad in zip(cols, (s, a, self.rewards[s, a], term), (0, 0, 0.0, False)):
                col.append(torch.where(alive, val, torch.full_like(val, pad)))
            alive = alive & ~term
            s = nxt
        return TabularTrajectories(*(torch.stack(c, -1) for c in cols))

    def trajectory_gradients(self, logits, trajectories: TabularTrajectories, kind: str = "total",
                             baseline=None) -> torch.Tensor:
        """Per-episode score-function terms g(τ) = Σ_t ∇_θ log π(a_t|s_t) · w_t.

        kind="total": w_t = R(τ) − b with R(τ) = Σ_k γ^k r_k (vanilla REINFORCE).
        kind="rewards_to_go": w_t = γ^t (G_t − b), G_t = Σ_{k≥t} γ^{k−t} r_k. The γ^t keeps the
        estimator unbiased for the discounted J (practice often drops it, which biases it when
        γ < 1). ∇_θ log π(a|s) is the softmax score onehot(a) − π(·|s) placed in row s.

        Source: book eq. (2.5) and §3.2; Williams 1992;
        Sutton & Barto 2018, Sec. 13.3.

        Args:
            logits: (S, A) policy logits θ.
            trajectories: a ``TabularTrajectories`` (or 4-tuple) of (N, H) tensors.
            kind: "total" or "rewards_to_go".
            baseline: None (0) or a scalar b, subtracted from R(τ) or G_t.
        Returns:
            (N, S, A) g(τ_i); padding steps contribute nothing.
        Gradient:
            none (a value; ``logits`` is detached).
        Raises:
            ValueError: bad ``logits``, ``kind``, ``baseline`` or ``trajectories`` shapes.
        """
        logits = self._check_policy("logits", logits).detach()
        if kind not in ("total", "rewards_to_go"):
            raise ValueError(f"`kind` must be 'total' or 'rewards_to_go'; got {kind!r}")
        b = _checks.as_float_tensor("baseline", 0.0 if baseline is None else baseline, dtype=self.dtype)
        if b.numel() != 1:
            raise ValueError(f"`baseline` must be a scalar; got shape {tuple(b.shape)}")
        if len(trajectories) != 4:
            raise ValueError("`trajectories` must be (states, actions, rewards, terminated)")
        trajectories = TabularTrajectories(*trajectories)
        states, actions, rewards, terminated = trajectories
        _checks.check_min_ndim("trajectories", states, 2, "(N, H)")
        _checks.check_same_shape(states=states, actions=actions, rewards=rewards, terminated=terminated)
        mask = trajectories.mask.to(self.dtype)
        b = b.reshape(())
        if kind == "total":
            w = discounted_returns(rewards, self.gamma, terminated) - b
        else:
            discount = self.gamma ** torch.arange(rewards.shape[-1], dtype=self.dtype)
            w = discount * (rewards_to_go(rewards, self.gamma, terminated) - b)
        scores = softmax_score(logits[states], actions)  # (N, H, A)
        onehot = torch.nn.functional.one_hot(states, self.num_states).to(self.dtype)  # (N, H, S)
        return torch.einsum("nh,nhs,nha->nsa", w * mask, onehot, scores)

    def exact_policy_gradient(self, logits, horizon=None, kind: str = "total") -> torch.Tensor:
        """Exact ∇J as the policy-gradient sum over every trajectory: Σ_τ p(τ) g(τ).

        g(τ) = Σ_t ∇_θ log π(a_t|s_t)·R(τ) (kind="total") or Σ_t ∇_θ log π(a_t|s_t)·γ^t G_t
        (kind="rewards_to_go"); see ``trajectory_gradients``. Both equal autograd of
        ``expected_return(logits, horizon)``; only their variances differ. Small S, A, H only.

        Source: book eq. (2.5); Williams 1992; Sutton et al. 2000
        (policy-gradient theorem); Sutton & Barto 2018, Sec. 13.2.

        Args:
            logits: (S, A) policy logits θ.
            horizon: steps H (default: the MDP's; required if that is infinite).
            kind: "total" or "rewards_to_go".
        Returns:
            (S, A) ∂J/∂θ, the MDP's dtype.
        Raises:
            ValueError: bad ``logits`` or ``kind``; no finite ``horizon``; too many trajectories.
        """
        pi = self.policy_probs(logits).detach()
        trajectories, prob = self.enumerate_trajectories(pi, horizon)
        return torch.einsum("n,nsa->sa", prob, self.trajectory_gradients(logits, trajectories, kind))

    def score_function_samples(self, logits, n: int, horizon=None, generator=None, kind: str = "total",
                               baseline=None) -> torch.Tensor:
        """n independent Monte-Carlo terms g(τ_i), τ_i ~ π_θ, (n, S, A); their mean estimates ∇J
        and their spread gives its standard error. Arguments as ``score_function_estimate``."""
        pi = self.policy_probs(logits).detach()
        trajectories = self.sample_trajectories(pi, n, horizon, generator)
        return self.trajectory_gradients(logits, trajectories, kind, baseline)

    def score_function_estimate(self, logits, n: int, horizon=None, generator=None, kind: str = "total",
                                baseline=None) -> torch.Tensor:
        """Monte-Carlo score-function estimate ∇J ≈ (1/n) Σ_i g(τ_i), τ_i ~ π_θ (unbiased).

        Args:
            logits: (S, A) policy logits θ.
            n: episodes ≥ 1.
            horizon: steps H (default: the MDP's; required if that is infinite).
            generator: a CPU ``torch.Generator`` or integer seed (required).
            kind: "total" or "rewards_to_go" (see ``trajectory_gradients``).
            baseline: None or a scalar b (unbiased for any constant).
        Returns:
            (S, A) estimate of ∂J/∂θ.
        Raises:
            ValueError: as ``sample_trajectories`` and ``trajectory_gradients``.
        """
        return self.score_function_samples(logits, n, horizon, generator, kind, baseline).mean(0)
