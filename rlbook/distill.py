"""On-policy distillation: the student samples, the teacher grades every token it wrote.

The student π_θ generates x = (x_1, ..., x_T) from a prompt; the teacher π_T scores the same tokens.
Two per-token signals train the student (shapes (B, T), nats):

* the sampled reward (k1 of :mod:`rlbook.kl`, with the teacher as the reference)
  r_t = log π_T(x_t | x_<t) − log π_θ(x_t | x_<t)  (:func:`distillation_rewards`), used as the
  reward of a policy-gradient loss; −r_t is a one-sample estimate of the reverse KL at position t;
* the full-vocabulary divergence at every position, computed from both models' logits
  (:func:`reverse_kl_per_token`, :func:`forward_kl_per_token`, and :func:`generalized_jsd`, GKD's
  family, which TRL's trainers minimise).

What the sampled reward's gradient estimates depends on the credit given to each token (exact,
by enumeration of a toy tabular policy; :func:`expected_distillation_gradient` and
tests/test_distill.py):

========================================  =================================================================
weight of ∇log π_θ(x_t|x_<t)              expected gradient
========================================  =================================================================
−Σ_{t'≥t} r_{t'}  (reward-to-go, γ = 1)   ∇ KL(π_θ ‖ π_T) of the *sequence* distributions
                                          (:func:`sequence_reverse_kl`; MiniLLM's objective)
−r_t  (the token's own reward, γ = 0)     ∇ Σ_t E_{x_<t∼π_θ}[KL(π_θ(·|x_<t) ‖ π_T(·|x_<t))] with the prefix
                                          distribution held fixed (:func:`stepwise_reverse_kl` with
                                          ``detach_states=True``): the full-vocabulary reverse KL
                                          (``generalized_jsd`` at β = 1) on on-policy prefixes; NOT the
                                          sequence KL's gradient, though the two objectives are equal in
                                          value (the chain rule of KL)
========================================  =================================================================

γ = 0 is what Thinking Machines' on-policy distillation uses (its per-token reward, discount 0), and
what TRL's per-position divergence optimises in expectation: it ignores a token's effect on the
teacher's later judgements (Tang & Munos 2025 analyse such per-token KL gradients), and its estimate carries no
later token's sampling noise.

Read as KL-regularised RL (:func:`rlbook.kl_regularised_optimum`, π* ∝ π_ref·exp(r/β)): the
sequence reward r(x) = log π_T(x) − log π_ref(x) with β = 1 has the optimum π* = π_T exactly;
with the reward scaled by α, π* ∝ π_ref^{1−α}·π_T^α, so α > 1 extrapolates past the teacher.

TRL 1.16's semantics, reproduced by :func:`generalized_jsd` (tests/test_distill_trl.py):
``GKDTrainer.generalized_jsd_loss`` (trl/experimental/gkd/gkd_trainer.py) and the chunked kernel
of ``DistillationTrainer`` (trl/kernels/chunked_divergence.py) both use the mixture
m = β·π_T + (1 − β)·π_θ and JSD_β = β·KL(π_T ‖ m) + (1 − β)·KL(π_θ ‖ m), with β = 0 replaced by the
forward KL(π_T ‖ π_θ) and β = 1 by the reverse KL(π_θ ‖ π_T); both divide the two models' logits by
the temperature before the softmax. ``DistillationTrainer`` passes its ``temperature`` to the loss;
``GKDTrainer.compute_loss`` does not (its loss is at temperature 1 whatever ``GKDConfig.temperature``,
which only sets the sampler's).

The book's settings (:class:`DistillationConfig`) and TRL's (:func:`to_trl_distillation_config`,
``trl.DistillationConfig`` of TRL 1.16):

====================  ==============================  ===============================================
rlbook                trl.DistillationConfig          note
====================  ==============================  ===============================================
beta                  beta                            0 forward KL … 1 reverse KL (same convention)
temperature           temperature                     the sampler's and the divergence's softmax
max_new_tokens        max_completion_length
lr                    learning_rate                   with ``lr_scheduler_type="constant"``, no warmup
num_steps             max_steps
seed                  seed
lmbda                 (none)                          TRL's trainer samples every completion from the
                                                      student: only ``lmbda = 1`` maps (GKDConfig's
                                                      ``lmbda`` mixes in dataset completions)
reward                (none)                          TRL's loss is the full-vocabulary divergence:
                                                      ``"full"`` maps as is; ``"sampled"`` (β = 1,
                                                      γ = 0) has the same expected gradient
gamma                 (none)                          TRL's loss is per token: only ``gamma = 0`` maps
prompts_per_step,     (per_device_train_batch_size,   not mapped: TRL counts completions per device and
samples_per_prompt    gradient_accumulation_steps)    accumulation steps; set them through trl_kwargs
distill_coef          (none)                          only 1 maps (TRL's loss is unweighted)
verifier_coef         (none)                          only 0 maps (no verifier reward in TRL's loss)
max_grad_norm         max_grad_norm                   the gradient-norm clip
====================  ==============================  ===============================================

Also set (overridable): ``bf16=False`` (the book trains in float32; TRL's default bf16 is refused on
a CPU), activation checkpointing off, ``report_to="none"``, ``save_strategy="no"``.

Sources: Agarwal et al. 2023 (GKD), "On-Policy Distillation of Language Models: Learning from
Self-Generated Mistakes", arXiv:2306.13649, eq. 1 (the generalised JSD) and Algorithm 1 (λ, the
share of student samples); Gu et al. 2023 (MiniLLM), arXiv:2306.08543 (the policy gradient of the
sequence-level reverse KL, with reward-to-go); K. Lu and Thinking Machines Lab, "On-Policy
Distillation" (Connectionism blog, Oct. 2025; the per-token reverse-KL reward, discount 0);
Tang & Munos 2025, arXiv:2506.09477 (per-token KL gradients are partial gradients);
von Werra et al., TRL 1.16 (``DistillationTrainer``, ``GKDTrainer.generalized_jsd_loss``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
import tempfile
from dataclasses import dataclass

import torch

from rlbook import _checks
from rlbook.returns import rewards_to_go

__all__ = [
    "distillation_rewards",
    "reverse_kl_per_token",
    "forward_kl_per_token",
    "generalized_jsd",
    "JSD_REDUCTIONS",
    "enumerate_sequences",
    "tabular_prefix_logits",
    "sequence_reverse_kl",
    "stepwise_reverse_kl",
    "expected_distillation_gradient",
    "DistillationConfig",
    "to_trl_distillation_config",
]

# reduction -> what it divides the sum over valid positions by (TRL's name in brackets)
JSD_REDUCTIONS = {
    "none": "nothing: the (..., T) per-position divergence, 0 where masked ([\"none\"], summed over V)",
    "sum": "1 ([\"sum\"])",
    "token_mean": "the number of valid positions, at least 1 ([\"batchmean\"] with labels; DistillationTrainer)",
    "batchmean": "the number of sequences, the product of the batch dims ([\"batchmean\"] without labels)",
    "mean": "valid positions × V, at least V ([\"mean\"]: F.kl_div's elementwise mean)",
}

_MAX_SEQUENCES = 100_000  # enumeration limit of the tabular tools


# ============================================================================= per-token signals


def _check_mask(mask, shape, device) -> torch.Tensor | None:
    """``mask`` as a bool tensor of ``shape`` on ``device`` (None stays None)."""
    if mask is None:
        return None
    return _checks.check_bool_like("mask", mask, shape).to(device)


def distillation_rewards(log_probs, teacher_log_probs, mask=None) -> torch.Tensor:
    """The per-token reward of on-policy distillation: r_t = log π_T(x_t|x_<t) − log π_θ(x_t|x_<t).

    The tokens x_t are sampled from the student π_θ. −r_t is the k1 estimate of the reverse KL
    KL(π_θ(·|x_<t) ‖ π_T(·|x_<t)) at position t (:func:`rlbook.kl_k1` with the teacher as π_ref), and
    E_{x∼π_θ}[−Σ_t r_t] = KL(π_θ ‖ π_T) over whole sequences (:func:`sequence_reverse_kl`). Used as
    the reward of a policy-gradient loss with the token's own reward (γ = 0) its expected gradient
    is that of the full-vocabulary reverse KL at on-policy prefixes; with the reward-to-go (γ = 1),
    that of the sequence reverse KL (:func:`expected_distillation_gradient`).

    Source: Agarwal et al. 2023 (GKD), arXiv:2306.13649; Gu et al. 2023 (MiniLLM),
    arXiv:2306.08543; K. Lu and Thinking Machines Lab, "On-Policy Distillation" (blog, Oct. 2025).

    Args:
        log_probs: (..., T) log π_θ of the sampled tokens, nats.
        teacher_log_probs: (..., T) log π_T of the same tokens, nats.
        mask: optional (..., T) bool or 0/1; False on padding. None = every position counts.
    Returns:
        (..., T) rewards in nats, detached (a reward carries no gradient), exactly 0 where
        ``mask`` is False; the dtype of ``log_probs``.
    Raises:
        ValueError: shapes differ, a value is NaN/inf, or ``mask`` is not 0/1 of that shape.
    See also:
        rlbook.kl_k1, expected_distillation_gradient
    Example:
        >>> distillation_rewards(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-0.5, -3.0]]))
        tensor([[ 0.5000, -1.0000]])
    """
    log_probs = _checks.as_float_tensor("log_probs", log_probs)
    teacher_log_probs = _checks.as_float_tensor("teacher_log_probs", teacher_log_probs, dtype=log_probs.dtype)
    _checks.check_min_ndim("log_probs", log_probs, 1, "(..., T)")
    _checks.check_same_shape(log_probs=log_probs, teacher_log_probs=teacher_log_probs)
    rewards = (teacher_log_probs.to(log_probs.device) - log_probs).detach()
    mask = _check_mask(mask, log_probs.shape, log_probs.device)
    return rewards if mask is None else torch.where(mask, rewards, torch.zeros_like(rewards))


def _log_softmax_pair(logits, teacher_logits, temperature) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax(logits / τ) and log softmax(teacher_logits / τ) after validation, float32 or float64."""
    _checks.check_positive("temperature", temperature)
    logits = _checks.as_float_tensor("logits", logits)
    teacher_logits = _checks.as_float_tensor("teacher_logits", teacher_logits)
    _checks.check_min_ndim("logits", logits, 2, "(..., T, V)")
    _checks.check_nonempty("logits", logits)
    _checks.check_same_shape(logits=logits, teacher_logits=teacher_logits)
    dtype = torch.float64 if torch.float64 in (logits.dtype, teacher_logits.dtype) else torch.float32
    log_p = torch.log_softmax(logits.to(dtype) / temperature, dim=-1)
    log_q = torch.log_softmax(teacher_logits.to(device=logits.device, dtype=dtype) / temperature, dim=-1)
    return log_p, log_q


def _masked(values: torch.Tensor, mask) -> torch.Tensor:
    mask = _check_mask(mask, values.shape, values.device)
    return values if mask is None else torch.where(mask, values, torch.zeros_like(values))


def reverse_kl_per_token(logits, teacher_logits, mask=None, temperature: float = 1.0) -> torch.Tensor:
    """Full-vocabulary reverse KL at each position: KL(π_θ(·|x_<t) ‖ π_T(·|x_<t)).

    KL_t = Σ_v p_v·(log p_v − log q_v),  p = softmax(logits_t / τ),  q = softmax(teacher_logits_t / τ)

    Its gradient w.r.t. the student's logits is ∂KL_t/∂z_v = p_v·(log p_v − log q_v − KL_t)/τ. The
    expected gradient of the sampled reward with γ = 0 is the gradient of Σ_t KL_t at on-policy
    prefixes (see the module docstring); this is GKD's (and TRL's) divergence at β = 1.

    Source: Agarwal et al. 2023 (GKD), arXiv:2306.13649 (the reverse KL as the distillation divergence); Gu et al. 2023 (MiniLLM),
    arXiv:2306.08543; Cover & Thomas, *Elements of Information Theory*, eq. 2.26.

    Args:
        logits: (..., T, V) student logits at each position (finite), any float dtype.
        teacher_logits: (..., T, V) teacher logits at the same positions.
        mask: optional (..., T) bool or 0/1; False on padding. None = every position.
        temperature: τ > 0; both models' logits are divided by it.
    Returns:
        (..., T) KL in nats, ≥ 0 up to rounding, exactly 0 where ``mask`` is False; float32
        (float64 if either input is float64).
    Gradient:
        through both logits (the teacher's normally carry none).
    Raises:
        ValueError: fewer than 2 dims, empty, shapes differ, NaN/inf present, ``mask`` not 0/1 of
            shape (..., T), or τ ≤ 0.
    See also:
        forward_kl_per_token, generalized_jsd, rlbook.categorical_kl
    Example:
        >>> reverse_kl_per_token(torch.zeros(1, 1, 2), torch.tensor([[[0.0, math.log(3.0)]]]))
        tensor([[0.1438]])
    """
    log_p, log_q = _log_softmax_pair(logits, teacher_logits, temperature)
    return _masked((log_p.exp() * (log_p - log_q)).sum(-1), mask)


def forward_kl_per_token(logits, teacher_logits, mask=None, temperature: float = 1.0) -> torch.Tensor:
    """Full-vocabulary forward KL at each position: KL(π_T(·|x_<t) ‖ π_θ(·|x_<t)).

    KL_t = Σ_v q_v·(log q_v − log p_v),  p = softmax(logits_t / τ),  q = softmax(teacher_logits_t / τ)

    Its gradient w.r.t. the student's logits is (p − q)/τ: the cross-entropy to the teacher's
    soft labels (supervised KD, Hinton et al. 2015) minus a constant. GKD's (and TRL's) divergence
    at β = 0.

    Source: Hinton, Vinyals & Dean 2015, arXiv:1503.02531; Agarwal et al. 2023 (GKD),
    arXiv:2306.13649 (the forward KL: supervised KD).

    Args:
        logits, teacher_logits, mask, temperature: as :func:`reverse_kl_per_token`.
    Returns:
        (..., T) KL in nats, exactly 0 where ``mask`` is False.
    Gradient:
        through both logits.
    Raises:
        ValueError: as :func:`reverse_kl_per_token`.
    Example:
        >>> forward_kl_per_token(torch.zeros(1, 1, 2), torch.tensor([[[0.0, math.log(3.0)]]]))
        tensor([[0.1308]])
    """
    log_p, log_q = _log_softmax_pair(logits, teacher_logits, temperature)
    return _masked((log_q.exp() * (log_q - log_p)).sum(-1), mask)


def generalized_jsd(logits, teacher_logits, beta: float, temperature: float = 1.0, mask=None,
                    reduction: str = "token_mean") -> torch.Tensor:
    """GKD's generalised Jensen–Shannon divergence between student and teacher, per position, reduced.

    m = β·π_T + (1 − β)·π_θ                     (the teacher gets β, as in TRL and GKD eq. 1)
    JSD_β = β·KL(π_T ‖ m) + (1 − β)·KL(π_θ ‖ m)     for 0 < β < 1
    JSD_0 = KL(π_T ‖ π_θ)   (forward KL),   JSD_1 = KL(π_θ ‖ π_T)   (reverse KL)

    The end points are TRL's special cases, not the formula's values there (which are 0); they are
    the limits of JSD_β/β as β → 0 and of JSD_β/(1 − β) as β → 1. β = ½ is the usual JSD (≤ log 2).
    π_θ = softmax(logits/τ), π_T = softmax(teacher_logits/τ). This reproduces TRL 1.16's
    ``GKDTrainer.generalized_jsd_loss`` and ``DistillationTrainer``'s chunked loss; TRL's reductions
    correspond as in ``JSD_REDUCTIONS`` (its ``labels != -100`` is ``mask`` here; its
    ``num_items_in_batch=N`` is ``"sum"`` divided by N).

    Source: Agarwal et al. 2023 (GKD), arXiv:2306.13649, eq. 1; Lin 1991, "Divergence measures
    based on the Shannon entropy" (IEEE Trans. Inf. Theory 37); von Werra et al., TRL 1.16,
    ``GKDTrainer.generalized_jsd_loss``.

    Args:
        logits: (..., T, V) student logits (finite).
        teacher_logits: (..., T, V) teacher logits.
        beta: β in [0, 1]: 0 forward KL, 1 reverse KL, in between the mixture above.
        temperature: τ > 0, dividing both models' logits.
        mask: optional (..., T) bool or 0/1; False positions contribute 0 and are not counted.
        reduction: one of ``JSD_REDUCTIONS``: "none" (..., T); "sum"; "token_mean" (sum over valid
            positions / their number, at least 1); "batchmean" (sum / number of sequences);
            "mean" (sum / (valid positions × V), TRL's elementwise mean).
    Returns:
        (..., T) for "none", else a 0-dim tensor; nats; float32 (float64 if an input is float64).
    Gradient:
        through both logits.
    Raises:
        ValueError: as :func:`reverse_kl_per_token`, β outside [0, 1], or an unknown ``reduction``.
    See also:
        reverse_kl_per_token, forward_kl_per_token
    Example:
        >>> z, zt = torch.zeros(1, 1, 2), torch.tensor([[[0.0, math.log(3.0)]]])
        >>> bool(generalized_jsd(z, zt, beta=1.0) == reverse_kl_per_token(z, zt).mean())
        True
    """
    _checks.check_in_range("beta", beta, 0.0, 1.0)
    if reduction not in JSD_REDUCTIONS:
        raise ValueError(f"`reduction` must be one of {sorted(JSD_REDUCTIONS)}; got {reduction!r}")
    beta = float(beta)
    log_p, log_q = _log_softmax_pair(logits, teacher_logits, temperature)
    if beta == 0.0:
        per_token = (log_q.exp() * (log_q - log_p)).sum(-1)
    elif beta == 1.0:
        per_token = (log_p.exp() * (log_p - log_q)).sum(-1)
    else:
        log_m = torch.logaddexp(log_p + math.log1p(-beta), log_q + math.log(beta))
        per_token = (beta * log_q.exp() * (log_q - log_m) + (1.0 - beta) * log_p.exp() * (log_p - log_m)).sum(-1)
    mask = _check_mask(mask, per_token.shape, per_token.device)
    if mask is not None:
        per_token = torch.where(mask, per_token, torch.zeros_like(per_token))
    if reduction == "none":
        return per_token
    total = per_token.sum()
    valid = per_token.numel() if mask is None else int(mask.sum())
    if reduction == "sum":
        return total
    if reduction == "token_mean":
        return total / max(valid, 1)
    if reduction == "batchmean":
        return total / max(math.prod(per_token.shape[:-1]), 1)
    return total / (max(valid, 1) * log_p.shape[-1])  # "mean"


# ============================================================================= exact enumeration (toy)


def _positive_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"`{name}` must be an integer ≥ {low}; got {value!r}")
    return int(value)


def enumerate_sequences(vocab_size: int, horizon: int) -> torch.Tensor:
    """Every token sequence of length ``horizon`` over ``vocab_size`` tokens, in lexicographic order.

    Row n is the base-V expansion of n, most significant token first (the last token varies
    fastest): the order of the rows of :func:`tabular_prefix_logits`.

    Args:
        vocab_size: V ≥ 2.
        horizon: H ≥ 1 tokens per sequence.
    Returns:
        (V^H, H) long tensor of token ids.
    Raises:
        ValueError: V or H not an integer of that range, or V^H above 100 000.
    Example:
        >>> enumerate_sequences(2, 2)
        tensor([[0, 0],
                [0, 1],
                [1, 0],
                [1, 1]])
    """
    vocab_size = _positive_int("vocab_size", vocab_size, 2)
    horizon = _positive_int("horizon", horizon, 1)
    if vocab_size ** horizon > _MAX_SEQUENCES:
        raise ValueError(f"`vocab_size` ** `horizon` must be ≤ {_MAX_SEQUENCES} sequences to enumerate; got "
                         f"{vocab_size}**{horizon} = {vocab_size ** horizon}")
    rows = list(itertools.product(range(vocab_size), repeat=horizon))
    return torch.tensor(rows, dtype=torch.long)


def _tabular(name: str, logits) -> tuple[torch.Tensor, int, int]:
    """Validate a tabular policy; return (logits, V, H)."""
    logits = _checks.as_float_tensor(name, logits)
    if logits.dim() != 2 or logits.shape[1] < 2:
        raise ValueError(f"`{name}` must have shape (P, V), one row of logits per prefix, with V ≥ 2; "
                         f"got {tuple(logits.shape)}")
    num_prefixes, vocab = logits.shape
    horizon, count = 0, 0
    while count < num_prefixes:
        count += vocab ** horizon
        horizon += 1
    if count != num_prefixes:
        sizes = [sum(vocab ** t for t in range(h)) for h in range(1, horizon + 2)]
        raise ValueError(f"`{name}` must have P = 1 + V + ... + V^(H−1) rows (one per prefix of length < H); "
                         f"with V = {vocab} that is one of {sizes}, ...; got P = {num_prefixes}")
    if vocab ** horizon > _MAX_SEQUENCES:
        raise ValueError(f"`{name}` describes V^H = {vocab}**{horizon} sequences, more than {_MAX_SEQUENCES} "
                         "to enumerate")
    return logits, vocab, horizon


def _tabular_pair(logits, teacher_logits) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    logits, vocab, horizon = _tabular("logits", logits)
    teacher_logits = _checks.as_float_tensor("teacher_logits", teacher_logits)
    _checks.check_same_shape(logits=logits, teacher_logits=teacher_logits)
    dtype = torch.float64 if torch.float64 in (logits.dtype, teacher_logits.dtype) else torch.float32
    return logits.to(dtype), teacher_logits.to(device=logits.device, dtype=dtype), vocab, horizon


def _prefix_rows(vocab: int, horizon: int, device=None) -> torch.Tensor:
    """(V^H, H) row of the table for the prefix x_<t of each enumerated sequence."""
    sequences = enumerate_sequences(vocab, horizon).to(device)
    rows, code, offset = [], torch.zeros(sequences.shape[0], dtype=torch.long, device=device), 0
    for t in range(horizon):
        rows.append(offset + code)
        offset += vocab ** t
        code = code * vocab + sequences[:, t]
    return torch.stack(rows, dim=-1)


def tabular_prefix_logits(logits) -> torch.Tensor:
    """The logits at each position of every sequence of a tabular autoregressive policy.

    A tabular policy over V tokens and horizon H has one row of logits per prefix, in
    breadth-first order: the empty prefix is row 0; the prefix (x_1, ..., x_t) is row
    (1 + V + ... + V^(t−1)) + Σ_{i≤t} x_i·V^(t−i). So P = 1 + V + ... + V^(H−1) rows and
    π(x_t = v | x_<t) = softmax(logits[row(x_<t)])_v.

    With ``sequences = enumerate_sequences(V, H)``, ``tabular_prefix_logits(logits)[n, t]`` are the
    logits that score ``sequences[n, t]``: the (B, T, V) layout of a language model's outputs, so
    every per-token function of this module applies to the enumeration.

    Args:
        logits: (P, V) float, one row per prefix (V ≥ 2, finite).
    Returns:
        (V^H, H, V) logits gathered from the table (gradient flows back to the table).
    Raises:
        ValueError: not 2-D, V < 2, P not of the form 1 + V + ... + V^(H−1), NaN/inf, or more than
            100 000 sequences.
    Example:
        >>> tabular_prefix_logits(torch.arange(6.0).reshape(3, 2))[:, :, 0]  # V = 2, H = 2; table rows 0, 1 + x_1
        tensor([[0., 2.],
                [0., 2.],
                [0., 4.],
                [0., 4.]])
    """
    logits, vocab, horizon = _tabular("logits", logits)
    return logits[_prefix_rows(vocab, horizon, logits.device)]


def _sequence_log_probs(logits: torch.Tensor, vocab: int, horizon: int) -> torch.Tensor:
    """(V^H, H) log π(x_t | x_<t) of every enumerated sequence."""
    sequences = enumerate_sequences(vocab, horizon).to(logits.device)
    log_probs = torch.log_softmax(logits, dim=-1)[_prefix_rows(vocab, horizon, logits.device)]
    return log_probs.gather(-1, sequences.unsqueeze(-1)).squeeze(-1)


def sequence_reverse_kl(logits, teacher_logits) -> torch.Tensor:
    """KL(π_θ ‖ π_T) between the sequence distributions of two tabular policies, by enumeration.

    KL = Σ_x π_θ(x)·(log π_θ(x) − log π_T(x)),   π(x) = Π_t π(x_t | x_<t), x over all V^H sequences

    The objective whose policy gradient with reward-to-go (γ = 1) the sampled distillation reward
    estimates (MiniLLM); by the chain rule of KL it equals :func:`stepwise_reverse_kl` in value.

    Source: Gu et al. 2023 (MiniLLM), arXiv:2306.08543 (the sequence-level reverse KL objective);
    Cover & Thomas, *Elements of Information Theory*, Thm. 2.5.3 (chain rule for KL).

    Args:
        logits: (P, V) the student's table (layout of :func:`tabular_prefix_logits`).
        teacher_logits: (P, V) the teacher's table.
    Returns:
        0-dim KL in nats, float32 (float64 if an input is float64).
    Gradient:
        through both tables.
    Raises:
        ValueError: as :func:`tabular_prefix_logits`, or the tables' shapes differ.
    Example:
        >>> z = torch.zeros(3, 2)
        >>> float(sequence_reverse_kl(z, z))
        0.0
    """
    logits, teacher_logits, vocab, horizon = _tabular_pair(logits, teacher_logits)
    log_p = _sequence_log_probs(logits, vocab, horizon).sum(-1)
    log_q = _sequence_log_probs(teacher_logits, vocab, horizon).sum(-1)
    return (log_p.exp() * (log_p - log_q)).sum()


def stepwise_reverse_kl(logits, teacher_logits, detach_states: bool = False) -> torch.Tensor:
    """Σ_t E_{x_<t ∼ π_θ}[KL(π_θ(·|x_<t) ‖ π_T(·|x_<t))]: the per-position reverse KLs, summed, by enumeration.

    S = Σ_{prefixes x_<t, t < H} P_θ(x_<t)·KL(π_θ(·|x_<t) ‖ π_T(·|x_<t)),   P_θ(x_<t) = Π_{i<t} π_θ(x_i|x_<i)

    Its value is the sequence KL (:func:`sequence_reverse_kl`, the chain rule of KL). With
    ``detach_states=False`` so is its gradient. With ``detach_states=True`` the prefix probabilities
    P_θ are constants (stop-gradient), and the gradient is the expected gradient of the sampled
    reward with each token's own reward (γ = 0; :func:`expected_distillation_gradient`), the same
    as that of the full-vocabulary reverse KL (:func:`reverse_kl_per_token`) on on-policy prefixes:
    it misses how a token changes the distribution of the later prefixes.

    Source: Cover & Thomas, *Elements of Information Theory*, Thm. 2.5.3; Tang & Munos 2025,
    arXiv:2506.09477 (the partial gradient of per-token KL terms).

    Args:
        logits: (P, V) the student's table. teacher_logits: (P, V) the teacher's.
        detach_states: hold the prefix distribution fixed (no gradient through P_θ).
    Returns:
        0-dim sum in nats.
    Gradient:
        through both tables (not through P_θ when ``detach_states``).
    Raises:
        ValueError: as :func:`sequence_reverse_kl`.
    """
    logits, teacher_logits, vocab, horizon = _tabular_pair(logits, teacher_logits)
    log_p = torch.log_softmax(logits, dim=-1)
    log_q = torch.log_softmax(teacher_logits, dim=-1)
    row_kl = (log_p.exp() * (log_p - log_q)).sum(-1)  # (P,)
    # log P_θ of each prefix, built level by level: children of row j are V consecutive rows
    levels = [log_p.new_zeros(1)]
    offset = 0
    for t in range(1, horizon):
        parents = slice(offset, offset + vocab ** (t - 1))
        levels.append((levels[-1][:, None] + log_p[parents]).reshape(-1))
        offset += vocab ** (t - 1)
    prefix_probs = torch.cat(levels).exp()
    if detach_states:
        prefix_probs = prefix_probs.detach()
    return (prefix_probs * row_kl).sum()


def expected_distillation_gradient(logits, teacher_logits, gamma: float = 0.0) -> torch.Tensor:
    """The exact expected gradient of the sampled distillation loss, by enumerating every sequence.

    For x ∼ π_θ, r_t = log π_T(x_t|x_<t) − log π_θ(x_t|x_<t) (:func:`distillation_rewards`, no
    gradient) and G_t = Σ_{t'≥t} γ^(t'−t)·r_{t'} (:func:`rlbook.rewards_to_go`), the sampled loss is
    L(x) = −Σ_t G_t·log π_θ(x_t|x_<t) and this returns

        g = E_{x∼π_θ}[∇_θ L(x)] = Σ_x π_θ(x)·Σ_t (−G_t(x))·∇ log π_θ(x_t|x_<t),

    the direction a stochastic optimiser descends on average. γ = 1: g = ∇ KL(π_θ ‖ π_T) over
    sequences (:func:`sequence_reverse_kl`). γ = 0: g = ∇ of :func:`stepwise_reverse_kl` with
    ``detach_states=True``, the full-vocabulary per-token reverse KL on on-policy prefixes.

    Source: Williams 1992 (REINFORCE with reward-to-go); Gu et al. 2023 (MiniLLM),
    arXiv:2306.08543; K. Lu and Thinking Machines Lab, "On-Policy Distillation" (blog, Oct. 2025;
    discount 0).

    Args:
        logits: (P, V) the student's table (:func:`tabular_prefix_logits` layout).
        teacher_logits: (P, V) the teacher's table.
        gamma: γ in [0, 1], the discount of the reward-to-go.
    Returns:
        (P, V) gradient w.r.t. the student's table (no graph), float32 (float64 if an input is).
    Raises:
        ValueError: as :func:`sequence_reverse_kl`, or γ outside [0, 1].
    """
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    logits, teacher_logits, vocab, horizon = _tabular_pair(logits, teacher_logits)
    with torch.enable_grad():
        table = logits.detach().clone().requires_grad_(True)
        log_p = _sequence_log_probs(table, vocab, horizon)  # (N, H)
        log_q = _sequence_log_probs(teacher_logits.detach(), vocab, horizon)
        returns = rewards_to_go(distillation_rewards(log_p, log_q), gamma=float(gamma))
        weights = log_p.sum(-1).exp().detach()  # π_θ(x)
        surrogate = (weights[:, None] * -returns * log_p).sum()
        (grad,) = torch.autograd.grad(surrogate, table)
    return grad


# ============================================================================= configuration


REWARDS = ("sampled", "full")


def _number(name: str, value, low: float, high: float = math.inf, low_inclusive: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"`{name}` must be a number; got {value!r}")
    _checks.check_in_range(name, value, low, high, low_inclusive=low_inclusive)
    if not math.isfinite(value):
        raise ValueError(f"`{name}` must be finite; got {value!r}")


@dataclass
class DistillationConfig:
    """Settings of on-policy distillation (the book's; :func:`to_trl_distillation_config` maps them to TRL).

    Attributes:
        beta: β in [0, 1], the divergence of ``reward="full"``: 0 forward KL(π_T ‖ π_θ), 1 reverse
            KL(π_θ ‖ π_T), in between GKD's generalised JSD (:func:`generalized_jsd`). Must be 1
            with ``reward="sampled"`` (the sampled reward estimates the reverse KL only).
        temperature: τ > 0, the student's sampling temperature and the divergence's softmax
            temperature (both models' logits divided by τ, as TRL).
        lmbda: λ in [0, 1], the share of training completions sampled from the student (GKD's and
            TRL's name); the rest come from the data set. 1: fully on-policy.
        max_new_tokens: completion length budget (≥ 1).
        lr: learning rate > 0.
        num_steps: optimiser steps (≥ 1).
        reward: "sampled" (the per-token k1 reward r_t = log π_T − log π_θ of the sampled tokens,
            :func:`distillation_rewards`, in a policy-gradient loss) or "full" (the full-vocabulary
            divergence chosen by ``beta`` at each position).
        gamma: γ in [0, 1], the discount of the sampled reward's reward-to-go: 0 each token its own
            reward (Thinking Machines, TRL), 1 the sequence-level reverse KL (MiniLLM). Must be 0
            with ``reward="full"``.
        seed: random seed.
        prompts_per_step: P ≥ 1, training problems per step (the book's trainer,
            :func:`rlbook.algos.distillation.distill_step`).
        samples_per_prompt: G ≥ 1, completions sampled per problem (P·G completions per step; G ≥ 2
            when ``verifier_coef`` ≠ 0, for GRPO's group comparison).
        distill_coef: c_d ≥ 0, the weight of the distillation term in the book's per-token loss.
        verifier_coef: c_v ≥ 0, the weight of the GRPO term (the verifier's group-relative advantage);
            0: pure distillation; c_d = 0, c_v = 1: GRPO alone.
        max_grad_norm: > 0, the gradient-norm clip of each update.
    Raises:
        ValueError: a field outside its range (the message names the field), or an inconsistent
            pair (``reward="sampled"`` with β ≠ 1; ``reward="full"`` with γ ≠ 0; ``verifier_coef``
            ≠ 0 with ``samples_per_prompt`` < 2; both coefficients 0).
    """

    beta: float = 1.0
    temperature: float = 1.0
    lmbda: float = 1.0
    max_new_tokens: int = 128
    lr: float = 1e-5
    num_steps: int = 100
    reward: str = "sampled"
    gamma: float = 0.0
    seed: int = 0
    prompts_per_step: int = 16
    samples_per_prompt: int = 4
    distill_coef: float = 1.0
    verifier_coef: float = 0.0
    max_grad_norm: float = 1.0

    def __post_init__(self):
        _number("beta", self.beta, 0.0, 1.0)
        _number("temperature", self.temperature, 0.0, low_inclusive=False)
        _number("lmbda", self.lmbda, 0.0, 1.0)
        _positive_int("max_new_tokens", self.max_new_tokens)
        _number("lr", self.lr, 0.0, low_inclusive=False)
        _positive_int("num_steps", self.num_steps)
        if self.reward not in REWARDS:
            raise ValueError(f"`reward` must be one of {REWARDS}; got {self.reward!r}")
        _number("gamma", self.gamma, 0.0, 1.0)
        _positive_int("seed", self.seed, 0)
        if self.reward == "sampled" and self.beta != 1.0:
            raise ValueError(f"`beta` must be 1.0 with reward='sampled' (the sampled reward estimates the reverse "
                             f"KL only); got {self.beta!r}")
        if self.reward == "full" and self.gamma != 0.0:
            raise ValueError(f"`gamma` must be 0.0 with reward='full' (a per-position divergence has no "
                             f"reward-to-go); got {self.gamma!r}")
        _positive_int("prompts_per_step", self.prompts_per_step)
        _positive_int("samples_per_prompt", self.samples_per_prompt)
        _number("distill_coef", self.distill_coef, 0.0)
        _number("verifier_coef", self.verifier_coef, 0.0)
        _number("max_grad_norm", self.max_grad_norm, 0.0, low_inclusive=False)
        if self.verifier_coef and self.samples_per_prompt < 2:
            raise ValueError(f"`samples_per_prompt` must be at least 2 when `verifier_coef` is not 0 (GRPO compares "
                             f"completions of one prompt); got {self.samples_per_prompt!r}")
        if not self.distill_coef and not self.verifier_coef:
            raise ValueError("`distill_coef` and `verifier_coef` must not both be 0 (the loss would be 0)")


# rlbook field -> trl.DistillationConfig field (the table of the module docstring)
TRL_FIELD_MAP = {
    "beta": "beta",
    "temperature": "temperature",
    "max_new_tokens": "max_completion_length",
    "lr": "learning_rate",
    "num_steps": "max_steps",
    "seed": "seed",
    "max_grad_norm": "max_grad_norm",
}


def to_trl_distillation_config(config: DistillationConfig, **trl_kwargs):
    """A ``trl.DistillationConfig`` (TRL 1.16) that carries the book's distillation settings.

    Mapped (table in the module docstring): ``beta`` → ``beta`` (the same convention: 0 forward,
    1 reverse KL, mixture β·π_T + (1 − β)·π_θ); ``temperature``; ``max_new_tokens`` →
    ``max_completion_length``; ``lr`` → ``learning_rate`` (constant schedule, no warmup);
    ``num_steps`` → ``max_steps``; ``seed``. ``reward="sampled"`` (β = 1, γ = 0) becomes TRL's
    full-vocabulary reverse KL, which has the same expected gradient (tests/test_distill.py) without
    the sampling noise. Also set, overridable through ``trl_kwargs``: ``bf16=False``, activation
    checkpointing off, ``report_to="none"``, ``save_strategy="no"``, ``output_dir`` a new temporary
    folder.

    Args:
        config: a :class:`DistillationConfig`.
        **trl_kwargs: other ``trl.DistillationConfig`` fields (``output_dir``,
            ``per_device_train_batch_size``, ``use_vllm``, ...). The mapped fields are not accepted
            here: set them on ``config``.
    Returns:
        a ``trl.DistillationConfig``.
    Raises:
        ValueError: ``config`` is not a :class:`DistillationConfig`; one message naming every setting
            TRL's ``DistillationTrainer`` cannot express (``lmbda`` ≠ 1: it samples every completion
            from the student; ``gamma`` ≠ 0: its loss is per token); or ``trl_kwargs`` names a
            mapped field.
        ImportError: TRL (with ``trl.DistillationConfig``) is not installed.
    """
    if not isinstance(config, DistillationConfig):
        raise ValueError(f"`config` must be an rlbook.DistillationConfig; got {type(config).__name__}")
    problems = []
    if config.lmbda != 1.0:
        problems.append(f"lmbda={config.lmbda!r}: TRL's DistillationTrainer samples every completion from the "
                        "student (lmbda = 1); trl.experimental.gkd.GKDConfig's `lmbda` mixes in dataset completions")
    if config.gamma != 0.0:
        problems.append(f"gamma={config.gamma!r}: TRL's distillation loss is per token (gamma = 0), with no "
                        "reward-to-go")
    if config.verifier_coef != 0.0:
        problems.append(f"verifier_coef={config.verifier_coef!r}: TRL's DistillationTrainer has no verifier "
                        "reward (its loss is the divergence alone)")
    if config.distill_coef != 1.0:
        problems.append(f"distill_coef={config.distill_coef!r}: TRL's DistillationTrainer does not weight its "
                        "divergence (scale the learning rate instead)")
    if problems:
        raise ValueError("TRL cannot express these rlbook settings:\n  - " + "\n  - ".join(problems))
    clash = sorted(set(trl_kwargs) & set(TRL_FIELD_MAP.values()))
    if clash:
        raise ValueError(f"`trl_kwargs` must not set {clash}: they come from the rlbook config "
                         f"(fields {[k for k, v in TRL_FIELD_MAP.items() if v in clash]})")
    try:
        import trl
    except ImportError as err:
        raise ImportError(f"to_trl_distillation_config needs TRL ({err}); install it with "
                          "`pip install \"rlbook[trl]\"`") from None
    trl_config = getattr(trl, "DistillationConfig", None)
    if trl_config is None:
        raise ImportError(f"trl {getattr(trl, '__version__', '?')} has no trl.DistillationConfig (TRL 1.16 has)")
    fields = {trl_name: getattr(config, name) for name, trl_name in TRL_FIELD_MAP.items()}
    names = {f.name for f in dataclasses.fields(trl_config)}
    defaults = dict(output_dir=None, bf16=False, lr_scheduler_type="constant", warmup_steps=0, report_to="none",
                    save_strategy="no")
    defaults["activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"] = False
    defaults.update(trl_kwargs)
    if defaults["output_dir"] is None:
        defaults["output_dir"] = tempfile.mkdtemp(prefix="rlbook-trl-distill-")
    return trl_config(**fields, **defaults)
