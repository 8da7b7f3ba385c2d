"""A K-armed bandit with a softmax policy: the smallest problem where ∇J has a closed form.

One step, no state: pick arm a ~ π_θ = softmax(θ), receive r with mean r̄(a). Then
J(θ) = Σ_a π_θ(a) r̄(a) and ∇_θ J = π ⊙ (r̄ − J), so every Monte-Carlo estimator can be checked
against the exact answer, and its variance computed exactly by enumerating the K arms.
"""

from __future__ import annotations

import torch

from rlbook import _checks
from rlbook.policy_gradient import optimal_baseline, softmax_score

__all__ = ["SoftmaxBandit"]


def _as_generator(generator) -> torch.Generator:
    """Accept a ``torch.Generator`` or an integer seed; there is no hidden global RNG."""
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, int) and not isinstance(generator, bool) and generator >= 0:
        return torch.Generator().manual_seed(generator)
    raise ValueError(f"`generator` must be a torch.Generator or a non-negative integer seed; got {generator!r}")


def _check_count(name: str, n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"`{name}` must be an integer >= 1; got {n!r}")
    return n


class SoftmaxBandit:
    """K-armed bandit with reward means r̄ (K,) and Gaussian or Bernoulli reward noise.

    Rewards: r = r̄(a) + reward_std·ε, ε ~ N(0, 1) (default, ``reward_std=0`` is noiseless), or
    r ~ Bernoulli(r̄(a)) with ``bernoulli=True`` (a verifiable 0/1 reward; r̄ in [0, 1]).
    Policies are given as logits θ (K,) (or batched (..., K) where stated); π = softmax(θ).
    ``SoftmaxBandit.logits_from_probs([0.5, 0.3, 0.2])`` builds the book's three-token example.

    Args:
        reward_means: (K,) mean reward of each arm, K ≥ 1.
        reward_std: Gaussian noise scale ≥ 0 (must be 0 with ``bernoulli``).
        bernoulli: draw 0/1 rewards with success probability r̄(a).
        dtype: dtype of the stored means (default: that of ``reward_means`` if floating, else
            torch's default).
    Raises:
        ValueError: ``reward_means`` empty or not 1-D; ``reward_std`` < 0, or > 0 with
            ``bernoulli``; Bernoulli means outside [0, 1].
    Example:
        >>> bandit = SoftmaxBandit([1.0, 0.0, 0.0])
        >>> bandit.exact_gradient(SoftmaxBandit.logits_from_probs([0.5, 0.3, 0.2]))
        tensor([ 0.2500, -0.1500, -0.1000])
    """

    def __init__(self, reward_means, reward_std: float = 0.0, bernoulli: bool = False, dtype=None):
        means = _checks.as_float_tensor("reward_means", reward_means, dtype=dtype)
        if means.dim() != 1 or means.numel() == 0:
            raise ValueError(f"`reward_means` must have shape (K,) with K >= 1; got {tuple(means.shape)}")
        _checks.check_in_range("reward_std", reward_std, 0.0)
        if bernoulli:
            if float(reward_std) != 0.0:
                raise ValueError("`reward_std` must be 0 for Bernoulli rewards (their spread is r̄(1 − r̄))")
            if (means < 0).any() or (means > 1).any():
                raise ValueError("`reward_means` must lie in [0, 1] for Bernoulli rewards")
        self.reward_means = means
        self.reward_std = float(reward_std)
        self.bernoulli = bool(bernoulli)

    @property
    def num_arms(self) -> int:
        return self.reward_means.numel()

    @property
    def reward_variances(self) -> torch.Tensor:
        """(K,) Var[r | a]: reward_std² (Gaussian) or r̄(1 − r̄) (Bernoulli)."""
        if self.bernoulli:
            return self.reward_means * (1 - self.reward_means)
        return torch.full_like(self.reward_means, self.reward_std**2)

    @staticmethod
    def logits_from_probs(probs) -> torch.Tensor:
        """Logits θ = log p whose softmax is ``probs`` (K,) (positive, summing to 1)."""
        probs = _checks.as_float_tensor("probs", probs)
        _checks.check_probabilities("probs", probs)
        if (probs <= 0).any():
            raise ValueError("`probs` must be strictly positive to have finite logits")
        return probs.log()

    def _logits(self, logits, batched: bool = True) -> torch.Tensor:
        logits = _checks.as_float_tensor("logits", logits)
        if batched:
            _checks.check_last_dim("logits", logits, self.num_arms, "(..., K)")
        elif tuple(logits.shape) != (self.num_arms,):
            raise ValueError(f"`logits` must have shape ({self.num_arms},); got {tuple(logits.shape)}")
        return logits

    def _means(self, like: torch.Tensor) -> torch.Tensor:
        return self.reward_means.to(dtype=like.dtype, device=like.device)

    def probs(self, logits) -> torch.Tensor:
        """π = softmax(θ): (..., K) -> (..., K); differentiable."""
        return torch.softmax(self._logits(logits), dim=-1)

    def expected_return(self, logits) -> torch.Tensor:
        """J(θ) = Σ_a π_θ(a) r̄(a): (..., K) -> (...); differentiable (autograd gives ∇J).

        Source: book eq. (objective); Sutton & Barto 2018, §2.8 (gradient bandit).
        """
        pi = self.probs(logits)
        return (pi * self._means(pi)).sum(-1)

    def exact_gradient(self, logits) -> torch.Tensor:
        """∇_θ J = Σ_a π(a) r̄(a) (onehot(a) − π) = π ⊙ (r̄ − J): (..., K) -> (..., K), closed form.

        Source: book eq. (bandit-gradient); derived from the softmax score; Sutton & Barto
        2018, §2.8, eq. 2.12 (gradient bandit).
        """
        pi = self.probs(logits)
        means = self._means(pi)
        return pi * (means - (pi * means).sum(-1, keepdim=True))

    def sample(self, logits, n: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw n i.i.d. (arm, reward) pairs under π_θ.

        Args:
            logits: (K,) policy logits θ.
            n: number of pulls ≥ 1.
            generator: ``torch.Generator`` (CPU) or integer seed.
        Returns:
            actions (n,) int64 in [0, K), rewards (n,) with the dtype of ``logits``.
        Raises:
            ValueError: bad ``logits`` shape, ``n`` < 1, bad ``generator``.
        """
        logits = self._logits(logits, batched=False)
        n = _check_count("n", n)
        gen = _as_generator(generator)
        pi = torch.softmax(logits.detach(), -1).to(gen.device)
        actions = torch.multinomial(pi, n, replacement=True, generator=gen)  # (n,)
        means = self.reward_means.to(dtype=pi.dtype, device=pi.device)[actions]
        if self.bernoulli:
            rewards = torch.bernoulli(means, generator=gen)
        else:
            noise = torch.randn(n, generator=gen, dtype=pi.dtype, device=pi.device)
            rewards = means + self.reward_std * noise
        return actions.to(logits.device), rewards.to(logits.device)

    def score_function_samples(self, logits, n: int, generator, baseline=None) -> torch.Tensor:
        """Per-pull estimates g_i = (onehot(a_i) − π)(r_i − b): (n, K); their mean estimates ∇J.

        Unbiased for any constant ``baseline`` b (E_π[onehot(a) − π] = 0). Use the spread of the
        rows for standard errors. Source: book eq. (score-function-estimator); Williams 1992.

        Args:
            logits: (K,) θ. n: pulls ≥ 1. generator: ``torch.Generator`` or seed.
            baseline: None (0) or a number / scalar tensor b.
        Raises:
            ValueError: as ``sample``; ``baseline`` not a scalar.
        """
        logits = self._logits(logits, batched=False)
        b = _checks.as_float_tensor("baseline", 0.0 if baseline is None else baseline, dtype=logits.dtype)
        if b.numel() != 1:
            raise ValueError(f"`baseline` must be a scalar; got shape {tuple(b.shape)}")
        actions, rewards = self.sample(logits, n, generator)
        scores = softmax_score(logits.detach().expand(n, -1), actions)  # (n, K)
        return scores * (rewards - b.reshape(()).to(rewards.device)).unsqueeze(-1)

    def score_function_estimate(self, logits, n: int, generator, baseline=None) -> torch.Tensor:
        """Monte-Carlo ∇J ≈ (1/n) Σ_i (onehot(a_i) − π)(r_i − b): (K,). See ``score_function_samples``."""
        return self.score_function_samples(logits, n, generator, baseline).mean(0)

    def estimator_variance(self, logits, baseline=0.0) -> torch.Tensor:
        """Exact total variance tr Cov[g] of the one-pull estimator g = (onehot(a) − π)(r − b).

        tr Cov[g] = Σ_a π(a) ‖onehot(a) − π‖² ((r̄(a) − b)² + Var[r|a]) − ‖∇J‖²  (all arms).
        Divide by n for the variance of an n-pull average. ``baseline`` may be a tensor of any
        shape (a grid of b values); the result has that shape.
        """
        logits = self._logits(logits, batched=False)
        b = _checks.as_float_tensor("baseline", baseline, dtype=logits.dtype).unsqueeze(-1)  # (..., 1)
        pi = torch.softmax(logits, -1)
        sq = (torch.eye(self.num_arms, dtype=pi.dtype, device=pi.device) - pi).pow(2).sum(-1)  # (K,) ‖s_a‖²
        means, var = self._means(pi), self.reward_variances.to(dtype=pi.dtype, device=pi.device)
        second = (pi * sq * ((means - b) ** 2 + var)).sum(-1)
        return second - self.exact_gradient(logits).pow(2).sum()

    def exact_optimal_baseline(self, logits) -> torch.Tensor:
        """b* = Σ_a π(a)‖s_a‖² r̄(a) / Σ_a π(a)‖s_a‖², the minimiser of ``estimator_variance``."""
        logits = self._logits(logits, batched=False)
        pi = torch.softmax(logits, -1)
        sq = (torch.eye(self.num_arms, dtype=pi.dtype, device=pi.device) - pi).pow(2).sum(-1)
        return optimal_baseline(self._means(pi), sq, weights=pi)
