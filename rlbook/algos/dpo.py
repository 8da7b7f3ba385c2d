"""Offline preference optimisation: DPO and its family (IPO, SimPO, ORPO) as config switches of one loop.

min_θ E_{(x, y_c, y_r) ∼ D} loss(log π_θ(y_c|x), log π_θ(y_r|x); π_ref, β)

Each step draws ``batch_size`` pairs from the data set, scores both responses with the policy (one
forward pass over the 2B rows of :func:`rlbook.lm.encode_preference_pairs`), and minimises the mean
of the per-pair loss that ``config.loss_type`` names:

==========  =================================================  ==================================
loss_type   per-pair loss                                      uses
==========  =================================================  ==================================
sigmoid     :func:`rlbook.dpo_loss` (β, label_smoothing ε)     π_ref; sequence sums
ipo         :func:`rlbook.ipo_loss` (β = τ)                    π_ref; per-token averages (as TRL)
simpo       :func:`rlbook.simpo_loss` (β, simpo_gamma)         no π_ref; per-token averages
orpo        :func:`rlbook.orpo_loss` (orpo_lambda)             no π_ref; per-token averages
==========  =================================================  ==================================

π_ref's log-probabilities are computed once, before training (the reference is frozen). The
logged metrics are the ones the DPO literature reads: the implicit-reward accuracy and margin, and
the chosen and rejected sequence log-probabilities (both falling is *likelihood displacement*,
Razin et al. 2024, arXiv:2410.08847).

Source: Rafailov et al. 2023, arXiv:2305.18290; Azar et al. 2023, arXiv:2310.12036; Meng, Xia &
Chen 2024, arXiv:2405.14734; Hong, Lee & Thorne 2024, arXiv:2403.07691.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from rlbook import _checks
from rlbook.algos._progress import close_progress
from rlbook.config import get_device
from rlbook.history import History
from rlbook.lm.dpo import encode_preference_pairs, sequence_log_probs
from rlbook.preferences import _log_odds, dpo_loss, ipo_loss, orpo_loss, simpo_loss

__all__ = ["DPO_LOSSES", "DPOConfig", "preference_loss", "dpo_step", "train_dpo", "train_online_dpo"]


def _sigmoid(c, r, ref_c, ref_r, len_c, len_r, cfg):
    return dpo_loss(c, r, ref_c, ref_r, cfg.beta, cfg.label_smoothing)


def _ipo(c, r, ref_c, ref_r, len_c, len_r, cfg):
    return ipo_loss(c / len_c, r / len_r, ref_c / len_c, ref_r / len_r, cfg.beta)


def _simpo(c, r, ref_c, ref_r, len_c, len_r, cfg):
    return simpo_loss(c, r, cfg.beta, cfg.simpo_gamma, len_c, len_r)


def _orpo(c, r, ref_c, ref_r, len_c, len_r, cfg):
    return orpo_loss(c, r, cfg.orpo_lambda, len_c, len_r)


# loss_type -> (per-pair loss from sequence sums and lengths, whether it needs π_ref)
DPO_LOSSES = {"sigmoid": (_sigmoid, True), "ipo": (_ipo, True), "simpo": (_simpo, False), "orpo": (_orpo, False)}


@dataclass
class DPOConfig:
    """Settings of :func:`train_dpo`.

    Attributes:
        loss_type: "sigmoid" (DPO), "ipo", "simpo" or "orpo" (table in the module docstring).
        beta: β > 0 (DPO's KL coefficient, IPO's τ, SimPO's reward scale; unused by ORPO).
        label_smoothing: cDPO's ε in [0, 0.5) (sigmoid only).
        simpo_gamma: SimPO's target margin γ ≥ 0.
        orpo_lambda: ORPO's odds-ratio weight λ ≥ 0.
        num_steps: optimiser updates.
        batch_size: pairs per update (drawn with replacement by ``seed``).
        lr: AdamW learning rate (constant). weight_decay: AdamW weight decay.
        max_grad_norm: global gradient-norm clip.
        seed: seed of the minibatch draws.
        device: "cpu", "cuda" or None (``rl.get_device()``).
    """

    loss_type: str = "sigmoid"
    beta: float = 0.1
    label_smoothing: float = 0.0
    simpo_gamma: float = 0.5
    orpo_lambda: float = 0.1
    num_steps: int = 200
    batch_size: int = 32
    lr: float = 1e-4
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 0
    device: str | None = None

    def __post_init__(self):
        if self.loss_type not in DPO_LOSSES:
            raise ValueError(f"`loss_type` must be one of {sorted(DPO_LOSSES)}; got {self.loss_type!r}")
        _checks.check_positive("beta", self.beta)
        _checks.check_in_range("label_smoothing", self.label_smoothing, 0.0, 0.5, high_inclusive=False)
        _checks.check_in_range("simpo_gamma", self.simpo_gamma, 0.0)
        _checks.check_in_range("orpo_lambda", self.orpo_lambda, 0.0)
        for name in ("num_steps", "batch_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"`{name}` must be ≥ 1; got {getattr(self, name)}")
        _checks.check_positive("lr", self.lr)
        _checks.check_in_range("weight_decay", self.weight_decay, 0.0)
        _checks.check_positive("max_grad_norm", self.max_grad_norm)


def preference_loss(log_probs, ref_log_probs, lengths, config: DPOConfig) -> torch.Tensor:
    """The per-pair loss of ``config.loss_type`` from the 2B rows' sequence log-probs (first half chosen).

    Args:
        log_probs: (2B,) log π_θ(y|x), nats (sums over the response tokens).
        ref_log_probs: (2B,) log π_ref(y|x), or None for the reference-free losses.
        lengths: (2B,) response token counts.
        config: a :class:`DPOConfig`.
    Returns:
        (B,) unreduced loss.
    Raises:
        ValueError: ``ref_log_probs`` missing for a loss that needs π_ref, or an odd row count.
    """
    loss_fn, needs_ref = DPO_LOSSES[config.loss_type]
    if log_probs.shape[0] % 2:
        raise ValueError(f"`log_probs` must hold 2B rows (B chosen, then B rejected); got {log_probs.shape[0]}")
    if ref_log_probs is None:
        if needs_ref:
            raise ValueError(f"`ref_log_probs` is required for loss_type={config.loss_type!r}")
        ref_log_probs = torch.zeros_like(log_probs)
    half = log_probs.shape[0] // 2
    lengths = lengths.to(log_probs.dtype)
    return loss_fn(log_probs[:half], log_probs[half:], ref_log_probs[:half], ref_log_probs[half:], lengths[:half],
                   lengths[half:], config)


def implicit_reward_of_loss(log_probs, ref_log_probs, lengths, config: DPOConfig) -> torch.Tensor:
    """The reward each ``loss_type`` implicitly ranks by, per row: what ``reward_margin`` is a margin of.

    ======== ===================================================== ====================================
    sigmoid  β·(log π_θ(y|x) − log π_ref(y|x))                       Rafailov et al. 2023, eq. 5
    ipo      (log π_θ(y|x) − log π_ref(y|x)) / |y|                   the per-token log-ratio (13.5's h̄)
    simpo    β·log π_θ(y|x) / |y|                                    Meng, Xia & Chen 2024, eq. 4
    orpo     log odds of p = exp(log π_θ(y|x) / |y|): log p − log(1 − p)   Hong, Lee & Thorne 2024, eq. 5
    ======== ===================================================== ====================================

    Args:
        log_probs: (2B,) log π_θ(y|x), nats (sums over the response tokens).
        ref_log_probs: (2B,) log π_ref(y|x), or None for the reference-free losses.
        lengths: (2B,) response token counts (≥ 1).
        config: a :class:`DPOConfig`.
    Returns:
        (2B,) rewards, same dtype as ``log_probs``.
    Raises:
        ValueError: ``ref_log_probs`` missing for a loss that needs π_ref.
    """
    _, needs_ref = DPO_LOSSES[config.loss_type]
    if ref_log_probs is None and needs_ref:
        raise ValueError(f"`ref_log_probs` is required for loss_type={config.loss_type!r}")
    lengths = lengths.to(log_probs.dtype)
    if config.loss_type == "sigmoid":
        return config.beta * (log_probs - ref_log_probs)
    if config.loss_type == "ipo":
        return (log_probs - ref_log_probs) / lengths
    mean_log_prob = log_probs / lengths
    if config.loss_type == "simpo":
        return config.beta * mean_log_prob
    return _log_odds(mean_log_prob)  # orpo: the log odds of the per-token mean probability


def dpo_step(policy, optimizer, batch: dict, ref_log_probs, config: DPOConfig) -> dict:
    """One update: zero_grad → score the 2B rows → mean per-pair loss → backward → clip → step.

    Args:
        policy: the causal LM (trained in place).
        optimizer: a torch optimizer over its parameters.
        batch: :func:`rlbook.lm.encode_preference_pairs`'s dict (2B rows, first half chosen).
        ref_log_probs: (2B,) log π_ref of the same rows (None for simpo / orpo).
        config: a :class:`DPOConfig`.
    Returns:
        dict of floats measured before the step: ``loss``, ``reward_accuracy`` and ``reward_margin``
        (of the reward the loss ranks by, :func:`implicit_reward_of_loss`: β·(log π − log π_ref) for
        DPO, the per-token log-ratio for IPO, β·log π/|y| for SimPO, the log odds for ORPO),
        ``chosen_log_prob`` and ``rejected_log_prob`` (batch means, nats), ``grad_norm``.
    Raises:
        ValueError: as :func:`preference_loss`.
    """
    optimizer.zero_grad(set_to_none=True)
    log_probs = sequence_log_probs(policy, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    lengths = batch["completion_mask"].sum(-1)
    loss = preference_loss(log_probs, ref_log_probs, lengths, config).mean()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
    optimizer.step()
    with torch.no_grad():
        half = log_probs.shape[0] // 2
        implicit = implicit_reward_of_loss(log_probs, ref_log_probs, lengths, config)
        margin = implicit[:half] - implicit[half:]
        return {"loss": loss.item(), "reward_accuracy": (margin > 0).float().mean().item(),
                "reward_margin": margin.mean().item(), "chosen_log_prob": log_probs[:half].mean().item(),
                "rejected_log_prob": log_probs[half:].mean().item(), "grad_norm": float(grad_norm)}


@torch.no_grad()
def _reference_log_probs(ref_policy, data: dict, device, batch_rows: int = 512) -> torch.Tensor:
    rows = data["input_ids"].shape[0]
    parts = [sequence_log_probs(ref_policy, *(data[k][i:i + batch_rows].to(device) for k in
                                              ("input_ids", "attention_mask", "completion_mask")))
             for i in range(0, rows, batch_rows)]
    return torch.cat(parts)


def train_dpo(policy, ref_policy, tokenizer, prompts, chosen, rejected, config: DPOConfig | None = None,
              progress: bool = True) -> History:
    """Train ``policy`` in place on preference pairs with DPO or a family member (``config.loss_type``).

    Args:
        policy: the causal LM to train (usually the SFT model).
        ref_policy: the frozen π_ref (usually a copy of the SFT model); None for simpo / orpo.
        tokenizer: their tokenizer.
        prompts, chosen, rejected: N strings each; ``chosen[i]`` is preferred to ``rejected[i]``.
        config: a :class:`DPOConfig`.
        progress: show a progress bar.
    Returns:
        a :class:`rlbook.History` with the per-step metrics of :func:`dpo_step`.
    Raises:
        ValueError: ``ref_policy`` missing for a loss that needs it; lists as
            :func:`rlbook.lm.encode_preference_pairs`.
    """
    config = config or DPOConfig()
    if ref_policy is None and DPO_LOSSES[config.loss_type][1]:
        raise ValueError(f"`ref_policy` is required for loss_type={config.loss_type!r}")
    device = get_device(config.device)
    data, n = encode_preference_pairs(tokenizer, prompts, chosen, rejected), len(prompts)
    policy.to(device).eval()  # eval(): dropout off; gradients still flow
    ref_all = None
    if DPO_LOSSES[config.loss_type][1]:
        ref_all = _reference_log_probs(ref_policy.to(device).eval(), data, device)
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history, start = History(config=config), time.perf_counter()
    bar = tqdm(total=config.num_steps, desc=f"DPO ({config.loss_type})", disable=not progress, mininterval=1.0)
    for _ in range(config.num_steps):
        pick = torch.randint(0, n, (config.batch_size,), generator=generator)
        rows = torch.cat([pick, pick + n])
        batch = {k: v[rows].to(device) for k, v in data.items()}
        metrics = dpo_step(policy, optimizer, batch, None if ref_all is None else ref_all[rows.to(device)], config)
        history.log(**metrics)
        bar.set_postfix({"loss": f"{metrics['loss']:.3f}", "acc": f"{metrics['reward_accuracy']:.2f}"}, refresh=False)
        bar.update(1)
    close_progress(bar)
    history.wall_seconds = time.perf_counter() - start
    return history


def _strip_eos(texts, eos: str) -> list:
    return [t[: -len(eos)] if eos and t.endswith(eos) else t for t in texts]


def train_online_dpo(policy, ref_policy, tokenizer, task, label_pairs, num_rounds: int, pairs_per_round: int,
                     config: DPOConfig | None = None, generator: torch.Generator | None = None, max_new_tokens: int = 24,
                     temperature: float = 1.0, progress: bool = True) -> History:
    """Online (iterative) DPO: each round labels fresh pairs sampled from the *current* policy, then trains on them.

    for round k = 0 … K−1:  draw P prompts, two samples o_a, o_b ∼ π_θk(·|q) each;
                            label them (o_a ≻ o_b or not) with ``label_pairs``;
                            θ_{k+1} = ``config.num_steps`` updates of :func:`train_dpo` on those P pairs
                            (π_ref fixed: the ``ref_policy`` given, usually the supervised model).

    The labelled comparisons number K·P in all, so a run is compared with offline DPO on K·P pairs
    of the starting policy at an equal labelling budget. Each round starts a fresh AdamW (as the
    iterative-DPO recipes do) and draws its minibatches with seed ``config.seed + k``.

    Source: Xu et al. 2023, arXiv:2312.16682 (iterative DPO, "pairwise Cringe"); Guo et al. 2024,
    arXiv:2402.04792 (online AI feedback, OAIF); Xiong et al. 2024, arXiv:2312.11456 (iterative
    DPO under KL regularisation); compared with offline DPO and PPO by Xu et al. 2024,
    arXiv:2404.10719.

    Args:
        policy: the causal LM (trained in place; sampled in eval mode).
        ref_policy: the frozen π_ref (None for the reference-free loss types).
        tokenizer: their tokenizer (EOS stripped from the sampled texts before encoding).
        task: provides ``sample_problems(n, generator, split)`` (training split used).
        label_pairs: callable ``(prompts, completions_a, completions_b) -> (P,) bool`` (True: a
            preferred), e.g. Bradley–Terry on a gold reward (:func:`rlbook.lm.preference_task.bradley_terry_labels`)
            or a reward model's order; the completions are the sampled texts, EOS included.
        num_rounds: K ≥ 1.
        pairs_per_round: P ≥ 1, comparisons labelled per round.
        config: :class:`DPOConfig`; ``num_steps`` is the updates *per round*.
        generator: torch.Generator of the prompts and samples (default: seeded by ``config.seed``).
        max_new_tokens, temperature: the sampler's budget (EOS included) and τ > 0.
        progress: show a progress bar over the rounds.
    Returns:
        :class:`rlbook.History` with one entry per update (the metrics of :func:`dpo_step`, plus
        ``round``) and, per round, ``history.extras["rounds"]``: a list of dicts with the round's
        ``pairs`` (prompts, a, b, a_preferred) so a reader can inspect what was labelled.
    Raises:
        ValueError: ``num_rounds`` or ``pairs_per_round`` < 1, ``label_pairs`` not callable or
            returning the wrong shape; as :func:`train_dpo`.
    """
    from rlbook.lm.preference_task import sample_preference_pairs

    config = config or DPOConfig()
    for name, value in (("num_rounds", num_rounds), ("pairs_per_round", pairs_per_round)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer; got {value!r}")
    if not callable(label_pairs):
        raise ValueError("`label_pairs` must be callable: (prompts, completions_a, completions_b) -> (P,) bool")
    generator = generator if generator is not None else torch.Generator().manual_seed(config.seed)
    eos = getattr(tokenizer, "eos_token", None) or ""
    history, start, rounds = History(config=config), time.perf_counter(), []
    bar = tqdm(total=num_rounds, desc=f"online DPO ({config.loss_type})", disable=not progress, mininterval=1.0)
    for k in range(num_rounds):
        policy.eval()
        with torch.no_grad():
            pairs = sample_preference_pairs(policy, tokenizer, task, pairs_per_round, generator,
                                            max_new_tokens=max_new_tokens, temperature=temperature, split="train")
        a_preferred = torch.as_tensor(label_pairs(pairs.prompts, pairs.completions_a, pairs.completions_b))
        if a_preferred.shape != (pairs_per_round,):
            raise ValueError(f"`label_pairs` must return ({pairs_per_round},) booleans; got shape {tuple(a_preferred.shape)}")
        pairs.a_preferred = a_preferred.bool()
        rounds.append({"prompts": pairs.prompts, "a": pairs.completions_a, "b": pairs.completions_b,
                       "a_preferred": pairs.a_preferred.tolist()})
        round_config = DPOConfig(**{**config.__dict__, "seed": config.seed + k})
        part = train_dpo(policy, ref_policy, tokenizer, pairs.prompts, _strip_eos(pairs.chosen, eos),
                         _strip_eos(pairs.rejected, eos), round_config, progress=False)
        for i in range(len(part["loss"])):
            history.log(round=float(k), **{key: float(part[key][i]) for key in
                                           ("loss", "reward_accuracy", "reward_margin", "chosen_log_prob",
                                            "rejected_log_prob", "grad_norm")})
        bar.update(1)
    close_progress(bar)
    history.extras = {"rounds": rounds}
    history.wall_seconds = time.perf_counter() - start
    return history
