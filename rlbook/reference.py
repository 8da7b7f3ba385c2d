"""Slow, obviously-correct oracles: plain loops, exact enumeration, explicit matrices.

Every fast estimator in the library has one here; the tests compare the two over random inputs.
Nothing in this module is meant to be fast. Each section belongs to one part of the book.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

# ===================== Part I: returns, score functions, exact policy gradients =====================


def rewards_to_go_loop(rewards, gamma, terminated=None, truncated=None, next_values=None):
    """G_t for a 1-D trajectory as the explicit sum Σ_{k=t}^{end} γ^{k−t} r_k (+ γ^{end+1−t} V on
    truncation), where ``end`` is the first step ≥ t that ends an episode (or the last step)."""
    T = len(rewards)
    term = [bool(x) for x in terminated] if terminated is not None else [False] * T
    trunc = [bool(x) for x in truncated] if truncated is not None else [False] * T
    out = []
    for t in range(T):
        g, k = 0.0, t
        while True:
            g += gamma ** (k - t) * float(rewards[k])
            if term[k] or trunc[k] or k == T - 1:
                break
            k += 1
        if trunc[k] and not term[k] and next_values is not None:
            g += gamma ** (k + 1 - t) * float(next_values[k])
        out.append(g)
    return out


def discounted_returns_loop(rewards, gamma, terminated=None, truncated=None):
    """R(τ) = Σ_k γ^k r_k of each episode of a 1-D trajectory, repeated at every step of it."""
    T = len(rewards)
    ends = [
        (terminated is not None and bool(terminated[t])) or (truncated is not None and bool(truncated[t]))
        for t in range(T)
    ]
    out, start = [], 0
    for t in range(T):
        if ends[t] or t == T - 1:
            ret = sum(gamma ** (k - start) * float(rewards[k]) for k in range(start, t + 1))
            out.extend([ret] * (t + 1 - start))
            start = t + 1
    return out


def softmax_score_autograd(logits, action):
    """∇_z log softmax(z)[action] for one logit vector (A,), by autograd."""
    z = logits.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(torch.log_softmax(z, -1)[int(action)], z)
    return grad


def gaussian_score_autograd(mean, log_std, action):
    """(∇_μ, ∇_{log σ}) of log N(action; μ, σ) summed over D, for one sample (D,), by autograd."""
    mu = mean.detach().clone().requires_grad_(True)
    ls = log_std.detach().clone().requires_grad_(True)
    logp = torch.distributions.Normal(mu, ls.exp()).log_prob(action.detach()).sum()
    return torch.autograd.grad(logp, (mu, ls))


def bandit_expected_score(probs):
    """Σ_a π(a) ∇_z log π(a) at z = log π, each term by autograd; (K,), zero in exact arithmetic."""
    probs = torch.as_tensor(probs, dtype=torch.float64)
    logits = probs.log()
    total = torch.zeros_like(probs)
    for a in range(len(probs)):
        total += probs[a] * softmax_score_autograd(logits, a)
    return total


def bandit_gradient_enumeration(logits, reward_means):
    """∇J = Σ_a π(a) r̄(a) ∇log π(a), enumerating arms, each score by autograd; (K,)."""
    pi = torch.softmax(logits.detach(), -1)
    total = torch.zeros_like(pi)
    for a in range(len(pi)):
        total += pi[a] * float(reward_means[a]) * softmax_score_autograd(logits, a)
    return total


def bandit_estimator_variance_loop(logits, reward_means, reward_variances, baseline):
    """tr Cov[(∇log π(a))(r − b)] for a ~ π, r|a with the given mean and variance: the expected
    squared norm minus the squared norm of the mean, enumerating arms."""
    pi = torch.softmax(logits.detach(), -1)
    second, first = 0.0, torch.zeros_like(pi)
    for a in range(len(pi)):
        s = softmax_score_autograd(logits, a)
        second += float(pi[a]) * float(s @ s) * ((float(reward_means[a]) - baseline) ** 2 + float(reward_variances[a]))
        first += pi[a] * s * (float(reward_means[a]) - baseline)
    return second - float(first @ first)


def optimal_baseline_loop(returns, score_sq_norms, weights=None):
    """Σ_i w_i ‖s_i‖² R_i / Σ_i w_i ‖s_i‖² with plain Python sums."""
    n = len(returns)
    w = [1.0] * n if weights is None else [float(x) for x in weights]
    num = sum(w[i] * float(score_sq_norms[i]) * float(returns[i]) for i in range(n))
    den = sum(w[i] * float(score_sq_norms[i]) for i in range(n))
    return num / den


def finite_difference_gradient(fn, x, eps=1e-6):
    """Central differences (f(x + εe_i) − f(x − εe_i)) / 2ε of a scalar function, same shape as x."""
    x = x.detach().clone()
    grad = torch.zeros_like(x)
    flat, gflat = x.view(-1), grad.view(-1)
    for i in range(flat.numel()):
        old = float(flat[i])
        flat[i] = old + eps
        up = float(fn(x))
        flat[i] = old - eps
        down = float(fn(x))
        flat[i] = old
        gflat[i] = (up - down) / (2 * eps)
    return grad


def tabular_trajectories_loop(transitions, rewards, initial_dist, probs, horizon, terminal=None):
    """Every distinct (states, actions, rewards, probability, terminated) of positive probability,
    by brute force over all H-step sequences (itertools.product), cut at the first terminal state."""
    transitions, rewards, probs = (torch.as_tensor(x).tolist() for x in (transitions, rewards, probs))
    initial_dist = torch.as_tensor(initial_dist).tolist()
    S, A = len(initial_dist), len(probs[0])
    term = [False] * S if terminal is None else [bool(x) for x in terminal]
    found = {}
    for seq in itertools.product(range(S), *([range(A), range(S)] * horizon)):
        s0, p = seq[0], float(initial_dist[seq[0]])
        states, actions, rews, s, ended, last = [], [], [], s0, False, 0
        for t in range(horizon):
            a, nxt = seq[1 + 2 * t], seq[2 + 2 * t]
            p *= float(probs[s][a]) * float(transitions[s][a][nxt])
            states.append(s), actions.append(a), rews.append(float(rewards[s][a]))
            s, last = nxt, t
            if term[s]:
                ended = True
                break
        # the draws after the episode ended are free: count each run once, at its first tail
        if p > 0 and all(x == 0 for x in seq[3 + 2 * last:]):
            key = (tuple(states), tuple(actions), ended)
            found.setdefault(key, [rews, 0.0])
            found[key][1] += p  # summed over the unrecorded final (or terminal) state
    return [(list(k[0]), list(k[1]), v[0], v[1], k[2]) for k, v in found.items()]


def tabular_values_loop(transitions, rewards, probs, gamma, horizon, terminal=None, sweeps=2000):
    """V^π by repeated Bellman backups written with explicit loops over s, a, s'; ``horizon`` None
    runs ``sweeps`` backups (converged for γ ≤ 0.99)."""
    transitions, rewards, probs = (torch.as_tensor(x).tolist() for x in (transitions, rewards, probs))
    S, A = len(probs), len(probs[0])
    term = [False] * S if terminal is None else [bool(x) for x in terminal]
    v = [0.0] * S
    for _ in range(sweeps if horizon is None else horizon):
        new = []
        for s in range(S):
            if term[s]:
                new.append(0.0)
                continue
            total = 0.0
            for a in range(A):
                future = sum(float(transitions[s][a][s2]) * (0.0 if term[s2] else v[s2]) for s2 in range(S))
                total += float(probs[s][a]) * (float(rewards[s][a]) + gamma * future)
            new.append(total)
        v = new
    return v

# ===================== Part II: advantages, importance sampling, PPO/TRPO =====================


def td_errors_loop(rewards, values, next_values, terminated, gamma):
    """δ_t = r_t + γ(1 − terminated_t)V(s_{t+1}) − V(s_t) for a 1-D trajectory, one step at a time."""
    return [
        float(rewards[t]) + gamma * (0.0 if bool(terminated[t]) else float(next_values[t])) - float(values[t])
        for t in range(len(rewards))
    ]


def gae_loop(rewards, values, next_values, terminated, truncated, gamma, gae_lambda):
    """GAE as the explicit sum Â_t = Σ_{l≥0} (γλ)^l δ_{t+l}, stopping after the step that ends the episode.

    1-D inputs of length T; returns (advantages, returns) as float lists. A forward double loop,
    deliberately not the backward recursion used by :func:`rlbook.gae`: the constant-γ case of
    :func:`gae_per_step_discount_loop`.
    """
    return gae_per_step_discount_loop(rewards, values, next_values, terminated, truncated,
                                      [gamma] * len(rewards), gae_lambda)


def n_step_returns_loop(rewards, values, next_values, terminated, truncated, gamma, n):
    """n-step return for each t of a 1-D trajectory: sum up to n rewards, stop at an episode end,
    bootstrap with next_values at the last step taken unless that step terminated."""
    T = len(rewards)
    out = []
    for t in range(T):
        total = 0.0
        for k in range(t, min(t + n, T)):
            total += gamma ** (k - t) * float(rewards[k])
            last = bool(terminated[k]) or bool(truncated[k]) or k == t + n - 1 or k == T - 1
            if last:
                if not bool(terminated[k]):
                    total += gamma ** (k - t + 1) * float(next_values[k])
                break
        out.append(total)
    return out


def monte_carlo_returns_loop(rewards, next_values, terminated, truncated, gamma):
    """Discounted return to the end of each episode, bootstrapped with next_values at truncations
    and at the end of the rollout (if not terminated). 1-D lists in, list out."""
    T = len(rewards)
    out = [0.0] * T
    running = 0.0
    for t in reversed(range(T)):
        if bool(terminated[t]):
            running = 0.0
        elif bool(truncated[t]) or t == T - 1:
            running = float(next_values[t])
        out[t] = float(rewards[t]) + gamma * running
        running = out[t]
    return out


def clipped_surrogate_loss_loop(log_probs, old_log_probs, advantages, clip_eps_low, clip_eps_high=None):
    """−min(ρA, clip(ρ)A) element by element with math.exp and Python min/max (flat lists)."""
    high_eps = clip_eps_low if clip_eps_high is None else clip_eps_high
    out = []
    for lp, old, adv in zip(log_probs, old_log_probs, advantages):
        ratio = math.exp(float(lp) - float(old))
        clipped = min(max(ratio, 1.0 - clip_eps_low), 1.0 + high_eps)
        out.append(-min(ratio * float(adv), clipped * float(adv)))
    return out


def cispo_weight_loop(log_probs, old_log_probs, clip_eps_low, clip_eps_high):
    """CISPO's per-element weight clip(ρ, 1−ε_low, 1+ε_high) with Python floats (flat lists);
    the gradient of cispo_loss w.r.t. log_probs is −weight·advantage."""
    return [
        min(max(math.exp(float(lp) - float(old)), 1.0 - clip_eps_low), 1.0 + clip_eps_high)
        for lp, old in zip(log_probs, old_log_probs)
    ]


def categorical_kl_loop(probs_p, probs_q):
    """KL(p‖q) = Σ_a p_a log(p_a/q_a) from two probability lists (0·log 0 = 0)."""
    return sum(p * math.log(p / q) for p, q in zip(probs_p, probs_q) if p > 0)


def importance_sampling_estimate_loop(f_values, p_probs, q_probs, self_normalized=False):
    """(1/n)Σ w_i f_i or Σ w_i f_i / Σ w_i with w_i = p_i/q_i, from plain probabilities (lists)."""
    weights = [p / q for p, q in zip(p_probs, q_probs)]
    total = sum(w * f for w, f in zip(weights, f_values))
    return total / sum(weights) if self_normalized else total / len(weights)


def effective_sample_size_loop(weights):
    """Kish ESS (Σw)²/Σw² from plain (not log) weights."""
    return sum(weights) ** 2 / sum(w * w for w in weights)


def explained_variance_loop(values, returns):
    """1 − Var[R − V]/Var[R] with population variances, NaN when Var[R] = 0 (lists)."""
    n = len(returns)
    mean_r = sum(returns) / n
    var_r = sum((r - mean_r) ** 2 for r in returns) / n
    if var_r == 0:
        return float("nan")
    diffs = [r - v for r, v in zip(returns, values)]
    mean_d = sum(diffs) / n
    return 1.0 - sum((d - mean_d) ** 2 for d in diffs) / n / var_r


# --- TRPO: explicit Fisher matrices and KL Hessians (rlbook.trpo) ---


def _unflatten_like(module, flat):
    """{name: tensor} views of the flat vector, shaped like ``module``'s parameters."""
    out, offset = {}, 0
    for name, p in module.named_parameters():
        out[name] = flat[offset: offset + p.numel()].view_as(p)
        offset += p.numel()
    return out


def fisher_matrix_enumerated(policy, obs):
    """Exact Fisher of a categorical policy by enumerating actions, one backward pass per (s, a):

    F = (1/N) Σ_i Σ_a π(a∣s_i) ∇log π(a∣s_i) ∇log π(a∣s_i)ᵀ   (``policy(obs)`` gives (N, A) logits)."""
    params = list(policy.parameters())
    num_params = sum(p.numel() for p in params)
    log_p = torch.log_softmax(policy(obs), dim=-1)
    fisher = torch.zeros(num_params, num_params, dtype=log_p.dtype)
    for i in range(log_p.shape[0]):
        for a in range(log_p.shape[1]):
            grads = torch.autograd.grad(log_p[i, a], params, retain_graph=True)
            g = torch.cat([x.reshape(-1) for x in grads])
            fisher += log_p[i, a].detach().exp() * torch.outer(g, g)
    return fisher / log_p.shape[0]


def mean_kl_hessian(policy, obs):
    """Hessian at θ of θ' ↦ (1/N) Σ_i KL(π_θ(·∣s_i) ‖ π_θ'(·∣s_i)), by torch.autograd.functional.hessian.

    The KL is written out as Σ_a p(a)(log p(a) − log q(a)) on purpose (no library code)."""
    flat0 = torch.cat([p.detach().reshape(-1) for p in policy.parameters()])
    log_p_old = torch.log_softmax(policy(obs), dim=-1).detach()

    def mean_kl(flat):
        logits = torch.func.functional_call(policy, _unflatten_like(policy, flat), (obs,))
        log_q = torch.log_softmax(logits, dim=-1)
        return (log_p_old.exp() * (log_p_old - log_q)).sum(-1).mean()

    return torch.autograd.functional.hessian(mean_kl, flat0)


def conjugate_gradient_dense(matrix, b, iters):
    """Textbook CG on an explicit matrix, written with Python floats and lists (Nocedal & Wright Alg. 5.2)."""
    a = [[float(v) for v in row] for row in matrix]
    n = len(a)
    x, r, p = [0.0] * n, [float(v) for v in b], [float(v) for v in b]
    rr = sum(v * v for v in r)
    for _ in range(iters):
        if rr == 0.0:
            break
        ap = [sum(a[i][j] * p[j] for j in range(n)) for i in range(n)]
        alpha = rr / sum(p[i] * ap[i] for i in range(n))
        x = [x[i] + alpha * p[i] for i in range(n)]
        r = [r[i] - alpha * ap[i] for i in range(n)]
        rr_new = sum(v * v for v in r)
        p = [r[i] + rr_new / rr * p[i] for i in range(n)]
        rr = rr_new
    return x

# ===================== Part III: GRPO, KL estimators, aggregation, pass@k =====================

# --- LM scoring and completion masks (rlbook.lm.logprobs, rlbook.lm.sampling) ---


def token_log_probs_loop(logits, tokens):
    """log softmax(logits_t)[a_t] by explicit exp/sum per position (float64 nested lists out)."""
    logits = torch.as_tensor(logits, dtype=torch.float64).reshape(-1, logits.shape[-1])
    flat = torch.as_tensor(tokens).reshape(-1).tolist()
    out = []
    for row, a in zip(logits.tolist(), flat):
        m = max(row)
        z = sum(math.exp(x - m) for x in row)
        out.append(row[a] - m - math.log(z))
    return torch.tensor(out, dtype=torch.float64).reshape(torch.as_tensor(tokens).shape)


def completion_mask_from_eos_loop(completion_ids, eos_token_id):
    """Walk each row: True until and including the first EOS, False after (nested lists out)."""
    out = []
    for row in torch.as_tensor(completion_ids).tolist():
        seen, mask = False, []
        for tok in row:
            mask.append(not seen)
            seen = seen or tok == eos_token_id
        out.append(mask)
    return out


# --- group advantages, aggregation, pass@k, overlong penalty (rlbook.advantages Part III,
# rlbook.aggregation, rlbook.evaluation, rlbook.rewards) ---


def group_relative_advantages_loop(rewards, group_size, scale="std", std="population", eps=1e-6):
    """GRPO / Dr. GRPO advantages by a Python loop over groups and members (float64 list out)."""
    r = [float(v) for v in rewards]
    out = []
    for start in range(0, len(r), group_size):
        group = r[start : start + group_size]
        mean = sum(group) / group_size
        denom = group_size if std == "population" else group_size - 1
        sd = math.sqrt(sum((x - mean) ** 2 for x in group) / denom) if denom else 0.0
        for x in group:
            if max(group) == min(group):
                out.append(0.0)
            elif scale == "none":
                out.append(x - mean)
            else:
                out.append((x - mean) / (sd + eps))
    return out


def leave_one_out_advantages_loop(rewards, group_size):
    """RLOO: r_i minus the mean of the other members of its group, by explicit loops."""
    r = [float(v) for v in rewards]
    out = []
    for start in range(0, len(r), group_size):
        group = r[start : start + group_size]
        for i, x in enumerate(group):
            others = [y for j, y in enumerate(group) if j != i]
            out.append(x - sum(others) / len(others))
    return out


def maxrl_advantages_loop(rewards, group_size):
    """MaxRL weights read off the success-only estimator: with K ≥ 1 successes among N,
    ĝ = Σ_i (r_i/K − 1/N) ∇log π_i, i.e. Â_i = N·(r_i/K − 1/N) in the 1/N-averaged form."""
    r = [float(v) for v in rewards]
    out = []
    for start in range(0, len(r), group_size):
        group = r[start : start + group_size]
        total = sum(group)
        for x in group:
            out.append(0.0 if total == 0 else group_size * (x / total - 1.0 / group_size))
    return out


def seq_mean_token_mean_loop(loss, completion_mask):
    """1/B Σ_i (1/|o_i|) Σ_t m ℓ by loops; an empty row contributes 0."""
    rows = []
    for row_loss, row_mask in zip(loss.tolist(), completion_mask.tolist()):
        kept = [x for x, m in zip(row_loss, row_mask) if m]
        rows.append(sum(kept) / len(kept) if kept else 0.0)
    return sum(rows) / len(rows)


def token_mean_loop(loss, completion_mask, num_tokens=None):
    """Σ m ℓ / N by loops, N the number of masked tokens unless given."""
    kept = [x for rl_, rm in zip(loss.tolist(), completion_mask.tolist()) for x, m in zip(rl_, rm) if m]
    return sum(kept) / (len(kept) if num_tokens is None else num_tokens)


def fixed_length_mean_loop(loss, completion_mask, max_length, num_sequences=None):
    """Σ m ℓ / (B · L_max) by loops."""
    kept = [x for rl_, rm in zip(loss.tolist(), completion_mask.tolist()) for x, m in zip(rl_, rm) if m]
    return sum(kept) / ((len(loss) if num_sequences is None else num_sequences) * max_length)


def pass_at_k_enumeration(num_samples, num_correct, k):
    """pass@k by enumerating every k-subset of n samples (the first c correct): the fraction of
    subsets that contain at least one correct sample. Exponential; keep n small."""
    hits = total = 0
    for subset in itertools.combinations(range(num_samples), k):
        total += 1
        hits += any(i < num_correct for i in subset)
    return hits / total


def overlong_penalty_loop(lengths, max_length, cache_length):
    """DAPO eq. 13 by an if/elif per length."""
    out = []
    for length in [float(v) for v in lengths]:
        if length <= max_length - cache_length:
            out.append(0.0)
        elif length <= max_length:
            out.append((max_length - cache_length - length) / cache_length)
        else:
            out.append(-1.0)
    return out


# ===================== Part I (continued): value functions of a fixed policy =====================


def tabular_values_enumeration(transitions, rewards, probs, gamma, horizon, terminal=None):
    """V_H(s) = Σ_τ p(τ | s_0 = s) Σ_t γ^t r_t for every start state s, by brute force over every
    H-step sequence of actions and next states (``tabular_trajectories_loop``); 0 on terminal states.
    Independent of any Bellman recursion: the definition of the value, evaluated literally."""
    S = len(torch.as_tensor(probs))
    term = [False] * S if terminal is None else [bool(x) for x in terminal]
    values = []
    for s in range(S):
        if term[s]:
            values.append(0.0)
            continue
        start = [1.0 if i == s else 0.0 for i in range(S)]
        total = 0.0
        for _, _, rews, p, _ in tabular_trajectories_loop(transitions, rewards, start, probs, horizon, terminal):
            total += p * sum(gamma**t * r for t, r in enumerate(rews))
        values.append(total)
    return values



# ===================== Part II (appended): per-step discounts =====================


def gae_per_step_discount_loop(rewards, values, next_values, terminated, truncated, discounts, gae_lambda):
    """GAE with per-step discounts γ_t as the explicit forward sum, one trajectory (1-D lists).

    δ_t = r_t + γ_t·[not terminated_t]·V(s_{t+1}) − V(s_t), and
    Â_t = Σ_{k=t}^{end} (Π_{j=t}^{k−1} γ_j·λ) δ_k, where ``end`` is the first step ≥ t that is
    terminated or truncated (or the last step). Returns (advantages, returns) as float lists.
    """
    T = len(rewards)
    deltas = [
        float(rewards[t]) + float(discounts[t]) * (0.0 if bool(terminated[t]) else float(next_values[t]))
        - float(values[t])
        for t in range(T)
    ]
    advantages = []
    for t in range(T):
        total, weight = 0.0, 1.0
        for k in range(t, T):
            total += weight * deltas[k]
            if bool(terminated[k]) or bool(truncated[k]):
                break
            weight *= float(discounts[k]) * gae_lambda
        advantages.append(total)
    return advantages, [a + float(v) for a, v in zip(advantages, values)]


# ===================== Part III (appended): GRPO variants (GSPO, DPPO, Magistral, ScaleRL) =====================


def gspo_sequence_log_ratio_loop(log_probs, old_log_probs, completion_mask):
    """log s_i = mean over the row's valid tokens of (log π_θ − log π_old), one Python loop per row."""
    out = []
    for lp_row, old_row, m_row in zip(log_probs.tolist(), old_log_probs.tolist(), completion_mask.tolist()):
        diffs = [lp - old for lp, old, m in zip(lp_row, old_row, m_row) if m]
        out.append(sum(diffs) / len(diffs))
    return out


def gspo_sequence_loss_loop(log_probs, old_log_probs, advantages, completion_mask, clip_eps_low, clip_eps_high=None):
    """−min(s_i A_i, clip(s_i) A_i) per row with s_i = exp(mean token log-ratio), math.exp and min/max."""
    high_eps = clip_eps_low if clip_eps_high is None else clip_eps_high
    out = []
    for log_s, adv in zip(gspo_sequence_log_ratio_loop(log_probs, old_log_probs, completion_mask), advantages):
        s, adv = math.exp(log_s), float(adv)
        clipped = min(max(s, 1.0 - clip_eps_low), 1.0 + high_eps)
        out.append(-min(s * adv, clipped * adv))
    return out


def binary_tv_loop(log_probs, old_log_probs):
    """½ Σ over the two outcomes {sampled token, other} of |P(o) − Q(o)| (flat lists)."""
    out = []
    for lp, old in zip(log_probs, old_log_probs):
        p, q = math.exp(float(lp)), math.exp(float(old))
        out.append(0.5 * sum(abs(a - b) for a, b in zip([p, 1.0 - p], [q, 1.0 - q])))
    return out


def binary_kl_loop(log_probs, old_log_probs):
    """KL(Q ‖ P) of the explicit two-outcome distributions Q = (q, 1 − q), P = (p, 1 − p), q = π_old."""
    out = []
    for lp, old in zip(log_probs, old_log_probs):
        p, q = math.exp(float(lp)), math.exp(float(old))
        out.append(categorical_kl_loop([q, 1.0 - q], [p, 1.0 - p]))
    return out


def dppo_mask_loop(log_probs, old_log_probs, advantages, threshold, divergence="binary_tv"):
    """Keep flags by an if per element: blocked iff D > τ and the advantage pushes the ratio further out."""
    div = (binary_tv_loop if divergence == "binary_tv" else binary_kl_loop)(log_probs, old_log_probs)
    keep = []
    for d, lp, old, adv in zip(div, log_probs, old_log_probs, advantages):
        ratio = math.exp(float(lp) - float(old))
        pushing_out = (float(adv) > 0 and ratio > 1.0) or (float(adv) < 0 and ratio < 1.0)
        keep.append(not (d > threshold and pushing_out))
    return keep


def magistral_advantages_loop(rewards, group_size):
    """r_i − group mean, then ÷ the population std of all those centred values (0 → all zeros)."""
    r = [float(v) for v in rewards]
    centred = []
    for start in range(0, len(r), group_size):
        group = r[start : start + group_size]
        mean = sum(group) / group_size
        centred.extend(0.0 if max(group) == min(group) else x - mean for x in group)
    mean_all = sum(centred) / len(centred)
    sd = math.sqrt(sum((x - mean_all) ** 2 for x in centred) / len(centred))
    return [0.0 if sd == 0 else x / sd for x in centred]


def prompt_mean_loop(loss, completion_mask, group_size):
    """Mean over prompts of (Σ of the group's valid token losses / the group's token count), by loops."""
    rows = list(zip(loss.tolist(), completion_mask.tolist()))
    prompts = []
    for start in range(0, len(rows), group_size):
        kept = [x for row_loss, row_mask in rows[start : start + group_size] for x, m in zip(row_loss, row_mask) if m]
        prompts.append(sum(kept) / len(kept) if kept else 0.0)
    return sum(prompts) / len(prompts)


# ===================== Part V: preferences, the KL-regularised optimum, best-of-N =====================


def bradley_terry_loss_loop(chosen_rewards, rejected_rewards):
    """−log(e^{r_c} / (e^{r_c} + e^{r_r})) per pair, with Python floats (lists)."""
    out = []
    for c, r in zip(chosen_rewards, rejected_rewards):
        top = max(float(c), float(r))
        out.append(-(float(c) - top - math.log(math.exp(float(c) - top) + math.exp(float(r) - top))))
    return out


def dpo_loss_loop(pc, pr, rc, rr, beta, label_smoothing=0.0):
    """DPO / cDPO per pair from its two Bradley–Terry probabilities, with Python floats (lists):
    p = e^{r̂_c}/(e^{r̂_c} + e^{r̂_r}), loss = −(1−ε) log p − ε log(1 − p), r̂ = β(log π − log π_ref)."""
    out = []
    for a, b, c, d in zip(pc, pr, rc, rr):
        chosen, rejected = beta * (float(a) - float(c)), beta * (float(b) - float(d))
        (p_chosen,) = bradley_terry_loss_loop([chosen], [rejected])
        (p_rejected,) = bradley_terry_loss_loop([rejected], [chosen])
        out.append((1 - label_smoothing) * p_chosen + label_smoothing * p_rejected)
    return out



def ipo_loss_loop(pc, pr, rc, rr, beta):
    """IPO per pair with Python floats: (log[π(y_c)π_ref(y_r) / (π(y_r)π_ref(y_c))] − 1/(2β))²."""
    return [(math.log(math.exp(a) * math.exp(d) / (math.exp(b) * math.exp(c))) - 1 / (2 * beta)) ** 2
            for a, b, c, d in zip(*(map(float, x) for x in (pc, pr, rc, rr)))]


def simpo_loss_loop(chosen, rejected, beta, gamma, chosen_lengths, rejected_lengths):
    """SimPO per pair with Python floats: −log of the Bradley–Terry probability of the length-normalised,
    γ-shifted rewards, 1/(1 + exp(−(β·lp_c/|y_c| − β·lp_r/|y_r| − γ)))."""
    return [math.log1p(math.exp(-(beta * float(c) / float(lc) - beta * float(r) / float(lr) - gamma)))
            for c, r, lc, lr in zip(chosen, rejected, chosen_lengths, rejected_lengths)]


def orpo_loss_loop(chosen, rejected, lam):
    """ORPO per pair from the probabilities themselves: P = exp(mean log-prob), odds = P/(1 − P),
    loss = −mean log π(y_c) − λ·log(OR/(1 + OR)), OR = odds_c/odds_r."""
    out = []
    for c, r in zip(chosen, rejected):
        pc, pr = math.exp(float(c)), math.exp(float(r))
        ratio = (pc / (1 - pc)) / (pr / (1 - pr))
        out.append(-float(c) - lam * math.log(ratio / (1 + ratio)))
    return out

def dpo_population_loss_loop(log_probs, ref_log_probs, rewards, beta, sampling_probs=None):
    """Σ over ordered answer pairs (y, y') of μ(y)μ(y')·P_BT(y ≻ y')·DPO loss(y chosen, y' rejected), a double loop."""
    K = len(log_probs)
    mu = [math.exp(float(x)) for x in ref_log_probs] if sampling_probs is None else [float(x) for x in sampling_probs]
    total = 0.0
    for i in range(K):
        for j in range(K):
            p_pref = 1.0 / (1.0 + math.exp(float(rewards[j]) - float(rewards[i])))
            (loss,) = dpo_loss_loop([log_probs[i]], [log_probs[j]], [ref_log_probs[i]], [ref_log_probs[j]], beta)
            total += mu[i] * mu[j] * p_pref * loss
    return total


def best_of_n_probs_enumeration(ref_probs, rewards, n, keep="first"):
    """Best-of-N by listing all K^N draws: each N-tuple has probability Π π_ref(y_k); the kept draw
    is the first (``keep="first"``) or last (``"last"``) one of highest reward. Returns a list (K,)."""
    K = len(ref_probs)
    out = [0.0] * K
    for draws in itertools.product(range(K), repeat=n):
        prob = math.prod(float(ref_probs[y]) for y in draws)
        best = max(float(rewards[y]) for y in draws)
        tied = [y for y in draws if float(rewards[y]) == best]
        out[tied[0] if keep == "first" else tied[-1]] += prob
    return out


def kl_regularised_optimum_search(ref_probs, rewards, beta, iters=400):
    """argmax_π Σ π r − β KL(π‖π_ref) found by numerical optimisation, never using the closed form:
    exponentiated-gradient (mirror) ascent on the simplex, log π ← log π + η·∇_π J − log-normaliser,
    with ∇_π J by autograd and η = 1/(2β), from the uniform distribution on π_ref's support, in
    float64. J is concave on the simplex, so the iteration converges to the maximiser."""
    ref = torch.as_tensor(ref_probs, dtype=torch.float64)
    r = torch.as_tensor(rewards, dtype=torch.float64)
    support = ref > 0
    log_ref, r_s = ref[support].log(), r[support]

    def objective(pi):
        return (pi * r_s).sum() - beta * (pi * (pi.log() - log_ref)).sum()

    step = 0.5 / beta
    log_pi = torch.full_like(log_ref, -math.log(int(support.sum())))
    for _ in range(iters):
        pi = log_pi.exp().requires_grad_(True)
        (grad,) = torch.autograd.grad(objective(pi), pi)
        log_pi = torch.log_softmax(log_pi + step * grad, -1)
    out = torch.zeros_like(ref)
    out[support] = log_pi.exp()
    return out


def dpo_population_minimise(ref_probs, rewards, beta, sampling_probs=None, max_iter=50):
    """argmin over policies of :func:`rlbook.kl_regularised.dpo_population_loss`, by Newton's method on the
    logits θ (π = softmax θ), never using the closed form π* ∝ π_ref·e^{r/β}.

    The loss is Σ W_{yy'}·softplus(−(r̂_y − r̂_{y'})) with W_{yy'} = μ(y)μ(y')σ(r_y − r_{y'}) and
    r̂ = β(θ − log π_ref) up to a constant, so its Hessian in θ is the graph Laplacian
    β²·(diag(A·1) − A), A = S + Sᵀ, S = W·σ(D)σ(−D), D_{yy'} = r̂_y − r̂_{y'} (constant shifts of θ
    are its null space: the step is the minimum-norm solution, through the pseudo-inverse of the symmetric
    Hessian by its eigendecomposition, which is continuous in the matrix; a rank-revealing QR (LAPACK's gelsy,
    ``torch.linalg.lstsq``'s CPU default) can decide the rank of this singular matrix differently with the
    LAPACK build and thread count, and with it the step: a test of this function failed once in three runs on
    one machine). The gradient is autograd's.
    Starts at θ = log π_ref; float64; stops when max |∇| < 1e-14 or after ``max_iter`` steps.
    Returns ``(probs (K,), iterations, max |gradient|)``."""
    from rlbook.kl_regularised import dpo_population_loss

    ref = torch.as_tensor(ref_probs, dtype=torch.float64)
    r = torch.as_tensor(rewards, dtype=torch.float64)
    mu = ref if sampling_probs is None else torch.as_tensor(sampling_probs, dtype=torch.float64)
    log_ref = ref.log()
    weight = mu[:, None] * mu[None, :] * torch.sigmoid(r[:, None] - r[None, :])
    theta, grad_max = log_ref.clone(), float("inf")
    for step in range(1, max_iter + 1):
        th = theta.clone().requires_grad_(True)
        loss = dpo_population_loss(torch.log_softmax(th, -1), log_ref, r, beta, sampling_probs=mu)
        (grad,) = torch.autograd.grad(loss, th)
        grad_max = grad.abs().max().item()
        if grad_max < 1e-14:
            break
        implicit = beta * (theta - log_ref)
        d = implicit[:, None] - implicit[None, :]
        s = weight * torch.sigmoid(d) * torch.sigmoid(-d)
        a = s + s.T
        hessian = beta ** 2 * (torch.diag(a.sum(1)) - a)
        theta = theta - torch.linalg.pinv(hessian, hermitian=True) @ grad
    return torch.softmax(theta, -1), step, grad_max
