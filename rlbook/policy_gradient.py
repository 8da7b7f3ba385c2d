"""Score functions, the REINFORCE surrogate and constant baselines.

The score function is ∇_θ log π_θ(a). The log-derivative trick ∇_θ E_π[f] = E_π[f·∇_θ log π]
turns the gradient of an expected return into an average we can sample; everything in this
module is one piece of that estimator, in closed form where the policy family allows it.
"""

from __future__ import annotations

import torch

from rlbook import _checks

__all__ = [
    "softmax_score",
    "gaussian_score",
    "reinforce_loss",
    "mean_baseline",
    "optimal_baseline",
    "score_sq_norms",
]


def _check_actions(actions, num_actions: int, batch_shape, device) -> torch.Tensor:
    actions = torch.as_tensor(actions, device=device)
    if actions.dtype.is_floating_point or actions.dtype == torch.bool or actions.is_complex():
        raise ValueError(f"`actions` must be integer action indices; got dtype {actions.dtype}")
    if tuple(actions.shape) != tuple(batch_shape):
        raise ValueError(f"`actions` must have shape {tuple(batch_shape)} (logits without the last dim); "
                         f"got {tuple(actions.shape)}")
    if actions.numel() and (actions.min() < 0 or actions.max() >= num_actions):
        raise ValueError(f"`actions` must lie in [0, {num_actions}); got values in "
                         f"[{int(actions.min())}, {int(actions.max())}]")
    return actions.long()


def softmax_score(logits, actions) -> torch.Tensor:
    """Score of a softmax (categorical) policy with respect to its logits, in closed form.

    ∇_z log softmax(z)[a] = onehot(a) − π,   π = softmax(z).

    Each entry says how the log-probability of the chosen action moves when one logit is raised:
    +(1 − π(a)) for its own logit, −π(b) for every competitor b. Averaged under π it is 0
    (Σ_a π(a)(onehot(a) − π) = π − π), which is why a baseline adds no bias.

    Source: book eq. (softmax-score); Sutton & Barto 2018, eq. 13.9
    (softmax in action preferences); worked example with π = [0.5, 0.3, 0.2].

    Args:
        logits: (..., A) unnormalised log-probabilities z.
        actions: (...) integer actions in [0, A).
    Returns:
        (..., A) the score vector of each action, dtype of ``logits``.
    Gradient:
        differentiable through π (the closed form is a value, not a graph of log π).
    Raises:
        ValueError: ``logits`` 0-d or empty; ``actions`` not integer, of a shape other than
            ``logits.shape[:-1]``, or out of range.
    See also:
        rlbook.reference.softmax_score_autograd, gaussian_score
    Example:
        >>> softmax_score(torch.log(torch.tensor([0.5, 0.3, 0.2])), torch.tensor(1))
        tensor([-0.5000,  0.7000, -0.2000])
    """
    logits = _checks.as_float_tensor("logits", logits)
    _checks.check_min_ndim("logits", logits, 1, "(..., A)")
    _checks.check_nonempty("logits", logits)
    actions = _check_actions(actions, logits.shape[-1], logits.shape[:-1], logits.device)
    onehot = torch.nn.functional.one_hot(actions, logits.shape[-1]).to(logits.dtype)
    return onehot - torch.softmax(logits, dim=-1)


def gaussian_score(mean, log_std, actions) -> tuple[torch.Tensor, torch.Tensor]:
    """Score of a diagonal Gaussian policy with respect to its mean and log standard deviation.

    log N(a; μ, σ) = Σ_d [−(a_d − μ_d)²/(2σ_d²) − log σ_d − ½ log 2π];  with z = (a − μ)/σ:
    ∂/∂μ_d = z_d/σ_d,   ∂/∂(log σ_d) = z_d² − 1.

    Source: book eq. (gaussian-score); Williams 1992, §6 (Gaussian units).

    Args:
        mean: (..., D) means μ.
        log_std: log σ, broadcastable to (..., D) (often a shared (D,) parameter).
        actions: (..., D) sampled actions a, broadcastable with ``mean``.
    Returns:
        (score_mean, score_log_std), each of the broadcast shape (..., D), per sample (a shared
        ``log_std`` is *not* summed over the batch).
    Gradient:
        differentiable in all inputs (treat ``actions`` as data).
    Raises:
        ValueError: inputs empty, 0-d, or not broadcastable.
    See also:
        rlbook.reference.gaussian_score_autograd, softmax_score
    Example:
        >>> gaussian_score(torch.zeros(1), torch.zeros(1), torch.ones(1))
        (tensor([1.]), tensor([0.]))
    """
    named = {"mean": mean, "log_std": log_std, "actions": actions}
    tensors = {}
    for name, x in named.items():
        x = _checks.as_float_tensor(name, x)
        _checks.check_min_ndim(name, x, 1, "(..., D)")
        _checks.check_nonempty(name, x)
        tensors[name] = x
    for name in ("log_std", "actions"):
        try:
            torch.broadcast_shapes(tensors["mean"].shape, tensors[name].shape)
        except RuntimeError:
            raise ValueError(f"`{name}` must broadcast with `mean` {tuple(tensors['mean'].shape)}; "
                             f"got {tuple(tensors[name].shape)}") from None
    mean, log_std, actions = tensors["mean"], tensors["log_std"], tensors["actions"]
    inv_std = torch.exp(-log_std)
    z = (actions - mean) * inv_std  # (..., D) standardised action
    shape = torch.broadcast_shapes(mean.shape, log_std.shape, actions.shape)
    return (z * inv_std).expand(shape), (z * z - 1.0).expand(shape)


def reinforce_loss(log_probs, weights) -> torch.Tensor:
    """Per-step REINFORCE surrogate loss (minimise): −log π(a_t|s_t) · w_t with w detached.

    loss_t = −log_probs_t · stopgrad(w_t);   ∇_θ Σ_t loss_t = −Σ_t w_t ∇_θ log π_θ(a_t|s_t).

    This is a *surrogate*: its value is not −J(θ) and means nothing on its own (it can go up while
    the policy improves); only its gradient matters, and that gradient is minus the score-function
    estimate of ∇J when w_t = R(τ) (vanilla), G_t (rewards-to-go) or G_t − b (with a baseline).
    Read as a loss it is weighted supervised fine-tuning: the negative log-likelihood of the
    policy's own samples, each token weighted by how good its outcome was. With w ≡ 1 on
    demonstrations it is exactly SFT; RL changes only where the data come from and the weights.

    Source: book eq. (reinforce-surrogate); Williams 1992, eq. 11.

    Args:
        log_probs: (..., T) log π_θ(a_t|s_t) of the taken actions, nats, with grad.
        weights: broadcastable to (..., T): returns, rewards-to-go or advantages (detached here).
    Returns:
        (..., T) unreduced loss; reduce with a (masked) mean or sum of your choice.
    Gradient:
        through ``log_probs`` only; ``weights`` is detached.
    Raises:
        ValueError: ``log_probs`` empty or 0-d; ``weights`` does not broadcast to its shape.
    See also:
        softmax_score, rlbook.returns.rewards_to_go, mean_baseline
    Example:
        >>> reinforce_loss(torch.tensor([-0.5, -1.0]), torch.tensor([2.0, -1.0]))
        tensor([ 1., -1.])
    """
    log_probs = _checks.as_float_tensor("log_probs", log_probs)
    _checks.check_min_ndim("log_probs", log_probs, 1)
    _checks.check_nonempty("log_probs", log_probs)
    weights = _checks.as_float_tensor("weights", weights, dtype=log_probs.dtype).to(log_probs.device)
    if not _checks.broadcasts_to(weights.shape, log_probs.shape):
        raise ValueError(f"`weights` must broadcast to the shape of `log_probs` {tuple(log_probs.shape)}; "
                         f"got {tuple(weights.shape)}")
    return -log_probs * weights.detach()


def mean_baseline(returns, mask=None) -> torch.Tensor:
    """Constant baseline b = mean of the returns (over the entries where ``mask`` is True).

    b = Σ_i m_i R_i / Σ_i m_i.

    Any b that does not depend on the action keeps the estimator unbiased, because
    E_π[∇log π] = 0; the mean is the simple, nearly optimal choice (see ``optimal_baseline``).
    Estimated from the same batch it adds a bias of order 1/N (leave-one-out removes it).

    Source: book eq. (baseline); Williams 1992 (reinforcement baseline);
    Sutton & Barto 2018, §13.4.

    Args:
        returns: (...) returns or rewards-to-go, any shape.
        mask: optional bool, same shape; False entries (padding) are ignored.
    Returns:
        scalar tensor b, dtype of ``returns``.
    Gradient:
        differentiable in ``returns`` (a baseline is used as a constant; ``reinforce_loss``
        detaches its weights).
    Raises:
        ValueError: ``returns`` empty; ``mask`` of another shape or selecting nothing.
    See also:
        optimal_baseline, rlbook.reference.optimal_baseline_loop
    Example:
        >>> mean_baseline(torch.tensor([1.0, 2.0, 9.0]), mask=torch.tensor([True, True, False]))
        tensor(1.5000)
    """
    returns = _checks.as_float_tensor("returns", returns)
    _checks.check_nonempty("returns", returns)
    if mask is None:
        return returns.mean()
    mask = _checks.check_bool_like("mask", mask, returns.shape).to(returns.device)
    if not mask.any():
        raise ValueError("`mask` selects no entries; the mean of nothing is undefined")
    m = mask.to(returns.dtype)
    return (returns * m).sum() / m.sum()


def optimal_baseline(returns, score_sq_norms, weights=None) -> torch.Tensor:
    """Variance-minimising constant baseline b* = E[‖∇log p(τ)‖² R] / E[‖∇log p(τ)‖²].

    Derivation. With s = ∇_θ log p_θ(τ) (the whole-trajectory score) the one-sample estimator is
    g(b) = s·(R − b). Since E[s] = 0, E[g(b)] = ∇J for every constant b, so the total variance
    tr Cov g(b) = E[‖s‖²(R − b)²] − ‖∇J‖² differs between baselines only through its first term.
    That term is a convex quadratic in b; setting d/db E[‖s‖²(R − b)²] = −2E[‖s‖²(R − b)] = 0 gives
    b* = E[‖s‖²R] / E[‖s‖²]: the mean return *weighted by the squared score norm*. It equals the
    plain mean when ‖s‖² and R are uncorrelated. (A per-coordinate b_k* = E[s_k²R]/E[s_k²] lowers
    the variance further; this function gives the single scalar.)

    Here the expectations are sample (or, with ``weights``, probability-weighted) averages. If every
    squared norm is 0 the variance does not depend on b at all, and the plain mean is returned.

    Source: book eq. (optimal-baseline); Greensmith, Bartlett & Baxter 2004, JMLR 5, Thm 13;
    Peters & Schaal 2008, "Reinforcement learning of motor skills with policy gradients", Sec. 3.

    Args:
        returns: (N,) returns R(τ_i) (any shape allowed; all entries are pooled).
        score_sq_norms: same shape, ‖∇_θ log p(τ_i)‖² ≥ 0.
        weights: optional same shape, non-negative probabilities or counts of each τ_i (exact
            enumeration); default uniform.
    Returns:
        scalar tensor b*, dtype of ``returns``.
    Gradient:
        differentiable in its inputs; use it as a constant.
    Raises:
        ValueError: empty input; shapes differ; a negative ``score_sq_norms`` or ``weights``;
            ``weights`` summing to 0.
    See also:
        mean_baseline, score_sq_norms, rlbook.reference.optimal_baseline_loop,
        rlbook.envs.bandits.SoftmaxBandit.estimator_variance
    Example:
        >>> optimal_baseline(torch.tensor([1.0, 0.0]), torch.tensor([3.0, 1.0]))
        tensor(0.7500)
    """
    returns = _checks.as_float_tensor("returns", returns)
    _checks.check_nonempty("returns", returns)
    sq = _checks.as_float_tensor("score_sq_norms", score_sq_norms, dtype=returns.dtype).to(returns.device)
    _checks.check_same_shape(returns=returns, score_sq_norms=sq)
    if (sq < 0).any():
        raise ValueError("`score_sq_norms` must be squared norms (>= 0); got a negative entry")
    if weights is None:
        w = torch.ones_like(returns)
    else:
        w = _checks.as_float_tensor("weights", weights, dtype=returns.dtype).to(returns.device)
        _checks.check_same_shape(returns=returns, weights=w)
        if (w < 0).any() or not (w.sum() > 0):
            raise ValueError("`weights` must be non-negative with a positive sum")
    plain = (w * returns).sum() / w.sum()
    denom = (w * sq).sum()
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.where(denom > 0, (w * sq * returns).sum() / safe, plain)


def score_sq_norms(scores, num_param_dims: int = 1) -> torch.Tensor:
    """Squared Euclidean norm of score vectors over their trailing parameter dims.

    ‖s‖² = Σ_k s_k²  over the last ``num_param_dims`` dims.

    Source: book eq. (optimal-baseline).

    Args:
        scores: (..., P) (or (..., *param_shape)) per-sample scores ∇_θ log p(τ_i).
        num_param_dims: how many trailing dims index parameters (1 for (..., P); 2 for a tabular
            (..., S, A) score).
    Returns:
        (...) squared norms.
    Gradient:
        differentiable.
    Raises:
        ValueError: ``scores`` has fewer than ``num_param_dims`` dims or is empty;
            ``num_param_dims`` < 1.
    See also:
        optimal_baseline
    Example:
        >>> score_sq_norms(torch.tensor([[3.0, 4.0]]))
        tensor([25.])
    """
    if isinstance(num_param_dims, bool) or not isinstance(num_param_dims, int) or num_param_dims < 1:
        raise ValueError(f"`num_param_dims` must be an integer >= 1; got {num_param_dims!r}")
    scores = _checks.as_float_tensor("scores", scores)
    _checks.check_min_ndim("scores", scores, num_param_dims, "(..., *param_shape)")
    _checks.check_nonempty("scores", scores)
    return scores.pow(2).sum(dim=tuple(range(-num_param_dims, 0)))

