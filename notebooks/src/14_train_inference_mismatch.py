# %% [markdown]
# # 14. When the sampler is not the policy: train–inference mismatch
#
# **Goals.** By the end of this chapter you can
# * name the four ways a production sampler differs from the policy being trained (precision,
#   temperature, truncation, staleness) and turn each on in rlbook as one `GRPOConfig` switch;
# * measure the mismatch token by token: the log-ratio $\log\pi - \log\mu$, its tails, its dependence on
#   the token's probability, and the sequence-level ratio;
# * compute, exactly, the bias that each source puts into the policy gradient on the book's model, and
#   what the corrections (truncated and masked importance sampling, token- and sequence-level) do to it;
# * read a ten-seed comparison of training with each source, uncorrected and corrected, with confidence
#   intervals, and say which sources a correction can repair and which only a fix at the source can.
#
# **Prerequisites.** Importance sampling and its variance (chapter 5), PPO's ratio (chapter 7), GRPO on
# the book's model (chapter 9).
#
# **Where this fits.** Chapters 9–11 let the policy sample its own completions: the probabilities the
# trainer differentiates are the probabilities the tokens were drawn from. Real trainers do not work
# that way. The completions come from an inference engine (vLLM, SGLang) with its own kernels, its own
# precision and its own sampling settings, often running a copy of the weights that is a few updates
# old. Since 2025 this *train–inference mismatch* has been recognised as a main cause of unstable and
# collapsing RL runs (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
# training"), and its corrections are now on by default in TRL. This chapter measures the mismatch on
# the book's model, where everything can be computed exactly, and finds out which corrections work.

# %%
import copy
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
torch.set_num_threads(1)  # as in chapters 9–13: exact repeats on one machine, gentle when it is busy
device = rl.get_device()
SIZE = rl.get_size()  # "small" (default; 2 CPU cores) or "full", via RLBOOK_SIZE
print("size:", SIZE)

# %% [markdown]
# ## 14.1 Four ways a sampler differs from the policy
#
# Write $\pi_\theta$ for the trainer's policy and $\mu$ for the distribution the sampler actually draws
# tokens from. GRPO's gradient (chapter 9) is an expectation under $\pi_\theta$; what the trainer computes is
# an average over tokens drawn from $\mu$. They agree only when $\mu = \pi_\theta$. Four things break that.
#
# 1. **Precision.** The engine runs the network in bfloat16 or float16 with its own kernels; the trainer in
#    float32 (or in bf16 with other kernels). The same weights give slightly different logits. bf16 keeps
#    8 significant bits, fp16 11; Qi et al. 2025 (arXiv:2510.26788) trace much of the mismatch of large runs
#    to bf16's coarse rounding and propose sampling *and* training in fp16.
# 2. **Temperature.** The engine samples from $\mathrm{softmax}(z/T_s)$; if the trainer scores the tokens at
#    another temperature (or at none), the two distributions differ everywhere.
# 3. **Truncation.** Top-$k$ and top-$p$ (Holtzman et al. 2019, arXiv:1904.09751) sample only from the most
#    probable tokens. The trainer's $\pi_\theta$ still gives the cut tokens their probability.
# 4. **Staleness.** Asynchronous pipelines keep generating while the trainer updates, so the tokens come
#    from the weights of $k$ updates ago (PipelineRL, Piché et al. 2025, arXiv:2509.19128; AReaL, Fu et
#    al. 2025, arXiv:2505.24298).
#
# In the order engines apply them, the sampler's distribution at each position is
#
# $$\mu(\cdot) = \mathrm{trunc}_{k,p}\Bigl(\mathrm{softmax}\bigl(\mathrm{round}(z_{\theta_{t-k}})/T_s\bigr)\Bigr), \tag{14.1}$$
#
# where the weights $\theta_{t-k}$ are themselves rounded, and truncation renormalises over the kept tokens.
# `rl.sampler_log_probs` computes $\log\mu$ from the trainer's logits, and `rl.MismatchedSampler` is a sampler
# built from (14.1): a copy of the policy, $k$ updates stale, with weights and logits rounded to a precision.
# In `rl.train_grpo` each source is one switch of `GRPOConfig`, and the trainer logs the mismatch it sees
# at every step:

# %%
config = rl.GRPOConfig(sampler_lag=4, sampler_temperature=None, sampler_top_p=1.0, sampler_precision=None)
print({name: getattr(config, name) for name in ("sampler_temperature", "sampler_top_p", "sampler_top_k", "sampler_precision",
                                                "sampler_lag", "is_correction", "is_cap")})
print(config.mismatched_sampler())
print("with every switch at its default the policy samples itself:", rl.GRPOConfig().mismatched_sampler())

# %% [markdown]
# `sampler_temperature=None` means "the trainer's temperature" (no mismatch from that source). The
# rounding is applied to the weights and to the logits, the two ends of a low-precision forward pass; the
# arithmetic in between stays float32. This is a model of the precision mismatch, not a measurement of
# an engine's: a real bf16 engine also differs from its trainer by its kernels and by the order in which
# it accumulates sums through every layer and along long sequences, which nothing here simulates, and a
# trainer that itself computes with bf16 weights shares the weight rounding with its engine.
#
# ## 14.2 Seeing the mismatch, token by token
#
# We take the policy in the middle of training: chapter 9's supervised model after 40 steps of GRPO,
# keeping a copy of the weights after every step (the snapshots give the stale samplers). Then each
# sampler draws 8 completions for each of 128 held-out prompts, and the trainer scores the same tokens.
# For each sampled token the **log-ratio** $\log\rho_t = \log\pi_\theta(o_t\mid\cdot) - \log\mu(o_t\mid\cdot)$ is
# what a correction reweights by. Its mean over the sampler's tokens is $-\mathrm{KL}(\mu\,\|\,\pi_\theta)$.

# %%
task, tok = rl.lm.AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0), rl.lm.build_char_tokenizer()
sft_policy, _, loaded = rl.lm.load_or_train_sft(tok, task, rl.lm.SFTConfig(num_steps=rl.by_size(small=800, full=2000), seed=0),
                                                checkpoint=rl.runs_dir() / "checkpoints" / "ch08_sft")
print("chapter 8's model:", "loaded from its checkpoint" if loaded else "trained here (no matching checkpoint)")
FORBIDDEN = rl.lm.forbidden_token_ids(tok)
MID_STEPS = 40
snapshots = []  # the weights after each GRPO step
policy = copy.deepcopy(sft_policy)
rl.train_grpo(policy, tok, task, rl.GRPOConfig(num_steps=MID_STEPS, seed=0), progress=False,
              callback=lambda step, model, metrics: snapshots.append(copy.deepcopy(model.state_dict())))


def model_from(state):
    model = copy.deepcopy(sft_policy)
    model.load_state_dict(state)
    return model.eval().requires_grad_(False)


policy = model_from(snapshots[-1])
print(f"{len(snapshots)} GRPO steps from chapter 8's model; snapshots kept for the stale samplers")

# %%
SOURCES = {  # name -> (sampler switches, the sampler's weights: k steps back)
    "bf16": (dict(precision="bf16"), 0), "fp16": (dict(precision="fp16"), 0),
    "T_s = 0.5": (dict(temperature=0.5), 0), "T_s = 1.5": (dict(temperature=1.5), 0),
    "top-p 0.8": (dict(top_p=0.8), 0),
    "lag 1": ({}, 1), "lag 2": ({}, 2), "lag 4": ({}, 4), "lag 8": ({}, 8),
}
from rlbook.algos.grpo_rollouts import sample_kwargs

problems = task.held_out_problems(rl.by_size(small=128, full=512))
prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, [p.prompt for p in problems])
token_stats, scatter = {}, {}
for name, (switches, lag) in SOURCES.items():
    sampler = rl.MismatchedSampler(**switches)
    drawn_by = model_from(snapshots[-1 - lag])
    out = sampler(drawn_by, prompt_ids, prompt_mask, num_samples=8, generator=torch.Generator().manual_seed(1),
                  **sample_kwargs(tok, FORBIDDEN, 8, 1.0))
    with torch.no_grad():
        trainer = rl.lm.completion_log_probs(policy, prompt_ids, out.completion_ids, prompt_mask,
                                             completion_mask=out.completion_mask, forbidden_ids=FORBIDDEN)
    m = out.completion_mask
    token_stats[name] = rl.log_ratio_stats(trainer, out.log_probs, weights=m, quantiles=(0.01, 0.5, 0.99), cap=2.0)
    sequence_log_ratio = ((trainer - out.log_probs) * m).sum(dim=1)
    token_stats[name]["sequence_q"] = np.quantile(sequence_log_ratio.cpu().numpy(), [0.01, 0.99])
    scatter[name] = (trainer[m].exp().cpu().numpy(), (trainer - out.log_probs)[m].cpu().numpy())
print("per sampled token; −mean log ρ estimates KL(μ‖π); k3 estimates it only where E_μ[ρ] = 1 (not under top-p)")
print(f"{'sampler':<11}{'k3':>10}{'mean log ρ':>12}{'mean ρ':>8}{'1 %':>9}{'99 %':>9}{'ρ outside [½, 2]':>18}{'seq. log ρ 1 % / 99 %':>24}")
for name, s in token_stats.items():
    q = s["quantiles"]
    print(f"{name:<11}{s['kl_k3']:>10.2e}{s['mean']:>12.4f}{s['ratio_mean']:>8.4f}{q[0.01]:>9.3f}{q[0.99]:>9.3f}{s['frac_masked']:>18.4f}"
          f"{s['sequence_q'][0]:>12.3f} / {s['sequence_q'][1]:.3f}")

# %%
fig, axes = plt.subplots(2, 2, figsize=(8.4, 6.2), dpi=80)
fig.delaxes(axes[1, 1])
axes = axes.ravel()[:3]  # three panels in a 2 × 2 grid
for ax, group in zip(axes, (("bf16", "fp16"), ("T_s = 0.5", "T_s = 1.5", "top-p 0.8"), ("lag 1", "lag 4", "lag 8"))):
    for k, name in enumerate(group):
        p, x = scatter[name]
        ax.scatter(p, x, s=4, alpha=0.35, color=f"C{k}", label=name)
    if ax is not axes[0]:  # the precision panel has its own, far smaller, scale
        ax.axhline(np.log(2), color="0.5", lw=0.8, ls=":")
        ax.axhline(-np.log(2), color="0.5", lw=0.8, ls=":")
        ax.set_ylim(-3, 3)
    ax.set_xscale("log")
    ax.set_xlabel("π(token) under the trainer")
    ax.legend(fontsize=8.5, markerscale=3)
axes[0].set_ylabel("log ρ = log π − log μ")
axes[0].set_title("precision", fontsize=9)
axes[1].set_title("temperature and top-p", fontsize=9)
axes[2].set_title("stale weights", fontsize=9)
plt.tight_layout();

# %% [markdown]
# The dotted lines mark $\rho = 2$ and $\rho = \tfrac12$, the band of the corrections below at their default
# cap $C = 2$ (the precision panel, on its own scale, lies far inside it). Three pictures:
#
# * **Precision** is tiny on this model: rounding to bf16 moves the middle 98 % of the sampled tokens'
#   log-probabilities within a band about two hundredths of a nat wide, and fp16's changes are about an eighth
#   of bf16's (the ratio of their mean $|\log\rho|$), as the mantissas predict: fp16 keeps 11 significant
#   bits and bf16 8, so its relative rounding error is $2^{-3}$ of bf16's. The single *largest* change is a
#   poor measure: over the ten seeds of `benchmarks/precision_mismatch.py` (this section's run, repeated from
#   ten GRPO runs and samplers) bf16's ranges from 0.03 to 0.10 nats and the fp16/bf16 ratio of the largest
#   changes from 0.05 to 0.19, one token's luck each time. Softmax does not favour rare tokens here: a
#   change $\Delta z$ of the logits moves token $a$'s log-probability by $\Delta z_a - \mathbb E_\pi[\Delta z]$, the
#   same amount at any probability. Rounding is relative, though, so a token whose logit is large in
#   magnitude gets a larger $\Delta z_a$.
# * **Temperature and top-p** shift every token. A cold sampler ($T_s = 0.5$) over-samples the likely tokens
#   ($\log\rho < 0$ on the right) and, when it does draw an unlikely token, draws it far less often than the
#   trainer would ($\log\rho \gg 0$ on the left). Top-$p$ raises every kept token's probability by the same
#   factor, $1/(\text{kept mass})$, so $\log\rho$ is one negative number per position, and the cut tokens are
#   never seen at all. This is also where the usual KL estimate fails. Schulman's $k_3 = \rho - 1 - \log\rho$,
#   averaged over the sampler's tokens, estimates $\mathrm{KL}(\mu\,\|\,\pi)$ only when $\mathbb E_\mu[\rho] = 1$;
#   under truncation $\mathbb E_\mu[\rho] = 1 - m$, with $m$ the trainer's mass on the cut tokens (exercise 1),
#   so $k_3$ estimates $\mathrm{KL} - m$. For top-$p$ 0.8 the plain estimate, minus the mean $\log\rho$, is more
#   than ten times $k_3$: a logged $k_3$ understates a truncating sampler's mismatch, and a mean $\rho$ below 1
#   is the sign.
# * **Staleness** grows with the lag: the tokens the policy has learned to avoid in the last $k$ steps are
#   still drawn by the stale sampler, with $\log\rho$ far below zero.

# %%
precision_bench = rl.benchmark_results("precision_mismatch")["runs"]  # this section's run over ten seeds
bf16_band = token_stats["bf16"]["quantiles"][0.99] - token_stats["bf16"]["quantiles"][0.01]
rl.claim("within a band about two hundredths of a nat wide", np.mean(precision_bench["bf16"]["range_1_99"]), 0.02, abs=0.0025)
rl.claim_in_spread("within a band about two hundredths of a nat wide", bf16_band, precision_bench["bf16"]["range_1_99"])
rl.claim("fp16's changes are about an eighth", np.mean(precision_bench["ratio"]["mean_abs"]), 1 / 8)  # the words allow ±1/144
rl.claim_in_spread("fp16's changes are about an eighth", token_stats["fp16"]["mean_abs"] / token_stats["bf16"]["mean_abs"],
                   precision_bench["ratio"]["mean_abs"])
rl.claim("bf16's ranges from 0.03 to 0.10 nats", min(precision_bench["bf16"]["largest"]), 0.03, abs=0.005)
rl.claim("bf16's ranges from 0.03 to 0.10 nats", max(precision_bench["bf16"]["largest"]), 0.10, abs=0.005)
rl.claim("changes from 0.05 to 0.19", min(precision_bench["ratio"]["largest"]), 0.05, abs=0.005)
rl.claim("changes from 0.05 to 0.19", max(precision_bench["ratio"]["largest"]), 0.19, abs=0.005)
rl.claim("the tokens the policy has learned to avoid", token_stats["lag 8"]["quantiles"][0.01], high=-np.log(2))
rl.claim("grows with the lag", token_stats["lag 8"]["kl_k3"] / token_stats["lag 1"]["kl_k3"], low=4.0)
rl.claim("one negative number per position", token_stats["top-p 0.8"]["max"], high=0.0)
top_p_stats = token_stats["top-p 0.8"]
rl.claim("than ten times $k_3$", -top_p_stats["mean"] / top_p_stats["kl_k3"], low=10.0)
rl.claim("a mean $\\rho$ below 1", top_p_stats["ratio_mean"], high=0.999)

# %% [markdown]
# ## 14.3 What the mismatch does to the gradient, exactly
#
# With tokens from $\mu$, the estimator GRPO computes has expectation
#
# $$\begin{aligned}&\mathbb E_{o\sim\mu}\Bigl[A_\mu(o)\sum_t \nabla_\theta\log\pi_\theta(o_t\mid q, o_{<t})\Bigr]\cr
# &\qquad\ne\; \mathbb E_{o\sim\pi_\theta}\Bigl[A_\pi(o)\sum_t \nabla_\theta\log\pi_\theta(o_t\mid q, o_{<t})\Bigr] = g^*,\end{aligned} \tag{14.2}$$
#
# where $A_\mu$ is centred on the sampler's mean reward, as a group of the sampler's completions centres it.
# Importance sampling (chapter 5) removes the bias by weighting each completion by
# $\pi_\theta(o)/\mu(o) = \prod_t\rho_t$, at the price of a variance that grows with the mismatch and with the
# length. The corrections in use keep most of the repair and bound the variance. With a cap $C$:
#
# $$w_t^{\text{TIS}} = \min(\rho_t, C), \qquad w_t^{\text{MIS}} = \rho_t\,\mathbb 1[1/C \le \rho_t \le C] \tag{14.3}$$
#
# for the token-level truncation and mask, and for the sequence-level masks, on TRL's product ratio and on
# its geometric mean,
#
# $$\begin{gathered}w_t^{\text{seq}} = \rho_{\text{seq}}\,\mathbb 1[1/C \le \rho_{\text{seq}} \le C],\ \ \rho_{\text{seq}} = \textstyle\prod_t \rho_t;\cr
# w_t^{\text{geo}} = \bar\rho\,\mathbb 1[1/C \le \bar\rho \le C],\ \ \bar\rho = \bigl(\textstyle\prod_t\rho_t\bigr)^{1/|o|},\end{gathered} \tag{14.4}$$
#
# and the per-token loss is multiplied by the detached $w_t$. TIS is due to Yao et al. 2025; masking outside
# a band to IcePop (the Ring-1T report, arXiv:2510.18855); TRL implements the first three as the modes
# "token_truncate", "token_mask" and "sequence_mask" of `vllm_importance_sampling_mode`.
# `rl.importance_correction` computes all of them; the check below compares it with (14.3)–(14.4) written
# out for one completion.

# %%
old = torch.tensor([[-0.2, -1.5, -0.1, -3.0]], dtype=torch.float64)  # log π of four tokens
drawn = torch.tensor([[-0.4, -0.3, -0.1, -2.0]], dtype=torch.float64)  # log μ of the same tokens
mask = torch.ones_like(old, dtype=torch.bool)
rho = (old - drawn).exp()[0].tolist()
by_hand = {"token_truncate": [min(r, 2.0) for r in rho],
           "token_mask": [r if 0.5 <= r <= 2.0 else 0.0 for r in rho],
           "sequence_mask": [float(np.prod(rho)) if 0.5 <= np.prod(rho) <= 2.0 else 0.0] * 4,
           "geometric_mask": [float(np.prod(rho)) ** 0.25 if 0.5 <= np.prod(rho) ** 0.25 <= 2.0 else 0.0] * 4}
print("ρ_t =", np.round(rho, 4))
for mode, want in by_hand.items():
    weights, _, _ = rl.importance_correction(old, drawn, mask, mode, 2.0)
    print(f"{mode:<15} w = {np.round(weights[0].tolist(), 4)}   max |library − (14.3)–(14.4)| = {np.abs(weights[0].numpy() - want).max():.1e}")
    assert np.abs(weights[0].numpy() - want).max() < 1e-12

# %% [markdown]
# On the book's model the expectation (14.2) can be computed exactly. An answer is three digits and an end
# token, so there are 1,000 answers per prompt, and the trained model puts nearly all its probability on
# them. Take the answers' probabilities under $\pi_\theta$ and under each sampler $\mu$, the reward
# $r = \mathbb 1[\text{right sum}]$, and write the gradient with respect to the model's *logits at each prefix*
# (the 1,111 prefixes of the answer tree: a tabular policy, as in chapter 5's explorer): the score of token
# $a$ at prefix $s$ is $e_a - \pi(\cdot\mid s)$. Each estimator's expectation is then a finite sum, and we
# compare it with $g^*$ on 16 held-out prompts by the **relative bias** $\lVert \mathbb E[\hat g] - g^*\rVert / \lVert g^*\rVert$
# and by the cosine between the two directions.

# %%
ANSWERS = [f"{k:03d}" for k in range(1000)]
ANSWER_IDS = torch.tensor([ids + [tok.eos_token_id] for ids in tok(ANSWERS, add_special_tokens=False).input_ids])  # (1000, 4)
index = torch.arange(1000)
PREFIX = torch.stack([torch.zeros(1000, dtype=torch.long), index // 100, index // 10, index], 1)  # prefix node at t
NODES = (1, 10, 100, 1000)
bias_prompts = task.held_out_problems(rl.by_size(small=16, full=64))


@torch.no_grad()
def answer_logits(model, prompt):
    """(1000, 4, V) float64 logits at each answer position (forbidden ids at −inf, as the sampler sees them)."""
    ids, _ = rl.lm.encode_prompts(tok, [prompt])
    z = model(input_ids=torch.cat([ids.repeat(1000, 1), ANSWER_IDS], 1).to(device)).logits[:, ids.shape[1] - 1:-1].double().cpu()
    z[..., FORBIDDEN] = -torch.inf
    return z


def tabular_gradient(log_pi, coef):
    """Σ_answers coef[y, t]·(e_{y_t} − π(·|prefix)), summed into the prefix nodes: one flat vector."""
    pi, parts = log_pi.exp(), []
    for t in range(4):
        score = torch.nn.functional.one_hot(ANSWER_IDS[:, t], pi.shape[-1]).double() - pi[:, t]
        parts.append(torch.zeros(NODES[t], pi.shape[-1], dtype=torch.float64).index_add_(0, PREFIX[:, t], coef[:, t, None] * score).flatten())
    return torch.cat(parts)


def expected_gradient(log_pi, log_mu, reward, mode, cap=2.0):
    """E over answers y ~ μ of w_t(y)·A_μ(y)·score_t(y) (mode "on_policy": μ = π, w = 1)."""
    lp = log_pi.gather(-1, ANSWER_IDS[..., None])[..., 0]  # (1000, 4) log π of each answer's tokens
    lm = lp if mode == "on_policy" else log_mu.gather(-1, ANSWER_IDS[..., None])[..., 0]
    prob = lm.sum(1).exp()
    prob = prob / prob.sum()  # μ over the 1,000 answers
    advantage = reward - (prob * reward).sum()
    seen = torch.isfinite(lm).all(1, keepdim=True).expand_as(lm)  # answers μ can emit (top-p cuts some)
    if mode in ("on_policy", "none"):
        weights = torch.ones_like(lp)
    elif mode == "is":
        weights = torch.where(seen, (lp - lm).sum(1, keepdim=True).exp().expand_as(lp), 0.0)
    else:
        weights, _, _ = rl.importance_correction(lp, torch.where(seen, lm, lp), seen, mode, cap)
    return tabular_gradient(log_pi, (prob * advantage)[:, None] * weights)


ESTIMATORS = ["none", "is", "token_truncate", "token_mask", "sequence_mask", "geometric_mask"]
start = time.perf_counter()
trainer_log_pi = {p.prompt: torch.log_softmax(answer_logits(policy, p.prompt), -1) for p in bias_prompts}
rewards = {p.prompt: torch.tensor([float(a == p.answer) for a in ANSWERS], dtype=torch.float64) for p in bias_prompts}
coverage = np.mean([trainer_log_pi[p.prompt].gather(-1, ANSWER_IDS[..., None])[..., 0].sum(1).exp().sum().item() for p in bias_prompts])
g_star = torch.cat([expected_gradient(trainer_log_pi[p.prompt], None, rewards[p.prompt], "on_policy") for p in bias_prompts])
bias, uncapped = {}, {}  # uncapped: token-level IS with no cap at all (w_t = ρ_t), for the paragraph after the table
for name, (switches, lag) in SOURCES.items():
    sampler_model = model_from(snapshots[-1 - lag])
    if "precision" in switches:  # the sampler's weights rounded too, as rl.MismatchedSampler rounds them
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[switches["precision"]]
        with torch.no_grad():
            for weight in sampler_model.parameters():
                weight.copy_(weight.to(dtype).float())
    rounding = dict(dtype=switches.get("precision"), temperature=switches.get("temperature", 1.0), top_p=switches.get("top_p", 1.0))
    log_mu = {p.prompt: torch.log_softmax(rl.sampler_log_probs(answer_logits(sampler_model, p.prompt), **rounding), -1)
              for p in bias_prompts}
    bias[name] = {}
    for mode in ESTIMATORS:
        g = torch.cat([expected_gradient(trainer_log_pi[p.prompt], log_mu[p.prompt], rewards[p.prompt], mode) for p in bias_prompts])
        bias[name][mode] = ((g - g_star).norm() / g_star.norm()).item(), torch.nn.functional.cosine_similarity(g, g_star, 0).item()
    g = torch.cat([expected_gradient(trainer_log_pi[p.prompt], log_mu[p.prompt], rewards[p.prompt], "token_truncate", 1e12)
                   for p in bias_prompts])
    uncapped[name] = ((g - g_star).norm() / g_star.norm()).item()
print(f"the 1,000 answers hold {coverage:.4f} of the trainer's probability (mean over {len(bias_prompts)} prompts); "
      f"{time.perf_counter() - start:.0f} s")
print("relative bias ‖E ĝ − g*‖/‖g*‖ (cosine with g*), cap C = 2")
print(f"{'sampler':<11}" + "".join(f"{m:>17}" for m in ESTIMATORS))
for name, row in bias.items():
    print(f"{name:<11}" + "".join(f"{b:>9.3f} ({c:+.2f})" for b, c in row.values()))

# %% [markdown]
# The table is exact (sums over the 1,000 answers; nothing is sampled), but it is exact for *this* policy,
# one run of 40 GRPO steps, and on another machine the same seed trains another one. So
# `benchmarks/mismatch_bias.py` computed the same table for ten GRPO seeds (the next cell prints the mean
# and the range of each entry), and what follows is said of those ten; the cell after it checks that this
# run's table is one of the runs they describe. It predicts much of what training will show, though not all
# of it.
#
# * **Full importance sampling** ("is") would be exactly unbiased over all completions; over the 1,000
#   answers it is close (a bias of at most 0.14 on every seed, largest on every seed for the hot sampler,
#   which puts more of its mass on malformed answers outside the sums). Under top-$p$ it cannot be
#   unbiased: an answer the sampler never emits has no sample to weight.
# * **Precision**: the uncorrected bias is about 0.009 for bf16 and 0.001 for fp16.
# * **Staleness**: the uncorrected bias grows with the lag, from 0.10 at one step to 0.38 at eight on
#   average (one seed need not rise at every step). TIS cuts it to 0.010 at one step but only to 0.18 at
#   eight. Part of what remains is the cap, which leaves the large ratios of a far-off sampler uncorrected,
#   and part is that TIS weights tokens, not answers (the paragraph after the next cell). The masks drop whole tokens or
#   whole answers, and from two steps of lag on they keep at least four fifths of the uncorrected bias on
#   average, although their direction stays within about 40 degrees of $g^*$ (a cosine of at least 0.75 on
#   every seed).
# * **A cold sampler and top-p**: the bias is large and no capped weight removes it, because the weight that
#   would (a large $\rho$ on the tokens the sampler rarely or never draws) is exactly the one the cap cuts.
#
# On the expected gradient alone, then, a mask looks little better than no correction.
# Training will disagree (§14.4): the expectation is not the whole story.

# %%
bias_bench = rl.benchmark_results("mismatch_bias")
print(bias_bench["command"])
B, COS = bias_bench["bias"], bias_bench["cosine"]
seeds = range(len(bias_bench["seeds"]))
print(f"relative bias, mean [min, max] over {len(bias_bench['seeds'])} GRPO seeds")
print(f"{'sampler':<11}" + "".join(f"{m:>24}" for m in ESTIMATORS))
for name in SOURCES:
    print(f"{name:<11}" + "".join(f"{np.mean(B[name][m]):>9.3f} [{min(B[name][m]):.3f}, {max(B[name][m]):.3f}]" for m in ESTIMATORS))
NOT_TOP_P = [name for name in SOURCES if name != "top-p 0.8"]
MASKS, LAGS = ("token_mask", "sequence_mask"), (1, 2, 4, 8)
mean = lambda name, mode: float(np.mean(B[name][mode]))
# per seed: the largest IS bias, the smallest cosine of a mask under staleness, the capped weights' share of the bias
is_largest = [max(B[name]["is"][i] for name in NOT_TOP_P) for i in seeds]
mask_cosine = [min(COS[f"lag {k}"][m][i] for k in LAGS for m in MASKS) for i in seeds]
capped_share = [min(B[name][m][i] / B[name]["none"][i] for name in ("T_s = 0.5", "top-p 0.8") for m in ("token_truncate", "token_mask"))
                for i in seeds]

# %%
rl.claim("a bias of at most 0.14 on every seed", max(is_largest), high=0.14)
assert all(max(NOT_TOP_P, key=lambda name: B[name]["is"][i]) == "T_s = 1.5" for i in seeds), "the hot sampler, on every seed"
rl.claim("largest on every seed for the hot sampler", max(bias[name]["is"][0] for name in NOT_TOP_P), bias["T_s = 1.5"]["is"][0], abs=0)
rl.claim_in_spread("a bias of at most 0.14 on every seed", max(bias[name]["is"][0] for name in NOT_TOP_P), is_largest)
rl.claim("Under top-$p$ it cannot be unbiased", min(B["top-p 0.8"]["is"]), low=0.1)
rl.claim("Under top-$p$ it cannot be unbiased", bias["top-p 0.8"]["is"][0], low=0.1)
for name, said in (("bf16", 0.009), ("fp16", 0.001)):
    rl.claim("the uncorrected bias is about 0.009 for bf16 and 0.001 for fp16", mean(name, "none"), said, abs=5e-4)
    rl.claim_in_spread("the uncorrected bias is about 0.009 for bf16 and 0.001 for fp16", bias[name]["none"][0], B[name]["none"])
for name, mode, said in (("lag 1", "none", 0.10), ("lag 8", "none", 0.38), ("lag 1", "token_truncate", 0.010),
                         ("lag 8", "token_truncate", 0.18)):
    rl.claim("from 0.10 at one step to 0.38 at eight on average" if mode == "none" else "TIS cuts it to 0.010 at one step but only to 0.18",
             mean(name, mode), said, abs=5e-3 if said > 0.05 else 5e-4)
    rl.claim_in_spread("grows with the lag" if mode == "none" else "TIS cuts it", bias[name][mode][0], B[name][mode])
assert all(mean(f"lag {a}", "none") < mean(f"lag {b}", "none") for a, b in ((1, 2), (2, 4), (4, 8))), "grows with the lag, on average"
rl.claim("they keep at least four fifths of the uncorrected bias on average",
         min(mean(f"lag {k}", m) / mean(f"lag {k}", "none") for k in (2, 4, 8) for m in MASKS), low=0.8)
rl.claim("a cosine of at least 0.75 on every seed", min(mask_cosine), low=0.75, bounds=(-1, 1))
rl.claim_in_spread("a cosine of at least 0.75 on every seed",
                   min(bias[f"lag {k}"][m][1] for k in LAGS for m in MASKS), mask_cosine, bounds=(-1, 1))
rl.claim("no capped weight removes it", min(capped_share), low=0.7)
rl.claim_in_spread("no capped weight removes it", min(bias[name][m][0] / bias[name]["none"][0] for name in ("T_s = 0.5", "top-p 0.8")
                                                    for m in ("token_truncate", "token_mask")), capped_share)

# %% [markdown]
# **A per-token weight is biased even without a cap.** A weight $\rho_t$ corrects which token the sampler
# chose at a prefix. It does not correct how often the sampler reaches that prefix (the product of the
# earlier ratios, $\prod_{s<t}\rho_s$), nor the rest of the answer, also drawn from $\mu$, on which the reward and
# so the advantage depend (the later ratios). Only the product $\prod_t\rho_t$ of full importance sampling
# corrects both. Token-level weighting is a first-order approximation of the sequence-level correction,
# close only while every $\rho_t$ stays near 1 (Zheng et al. 2025, arXiv:2512.01374; Liu, Li et al. 2025, "When
# speed kills stability"). The hot sampler shows it without any cap in the way: its weights stay below
# $C = 2$ (in this run TIS and token-level weighting with no cap agree to four decimals, printed below), and
# over the ten seeds TIS's bias is 0.28 on average against 0.09 for full importance sampling, at least twice
# as large on every seed. The cell prints, for this run, token-level importance sampling with no cap at all
# ($w_t = \rho_t$) beside TIS and full importance sampling: for the temperature and staleness samplers the
# uncapped per-token bias stays above full importance sampling's. (The structure of all these corrections,
# a detached behaviour weight $\pi_{\text{old}}/\mu$ times PPO's proximal ratio $\pi_\theta/\pi_{\text{old}}$, is decoupled
# PPO's: Hilton et al. 2021, arXiv:2110.00641. Truncated importance weights are older than RL for language
# models, from Retrace, Munos et al. 2016, to IMPALA's V-trace, Espeholt et al. 2018; and the symmetric band
# $[1/C, C]$ of the masks is this book's choice, where IcePop sets its own pair of bounds.)

# %%
print(f"relative bias in this run: {'full IS':>9}{'TIS, C = 2':>12}{'token IS, no cap':>18}")
for name in SOURCES:
    print(f"{name:<27}{bias[name]['is'][0]:>9.4f}{bias[name]['token_truncate'][0]:>12.4f}{uncapped[name]:>18.4f}")
hot = "T_s = 1.5"
rl.claim("agree to four decimals", abs(uncapped[hot] - bias[hot]["token_truncate"][0]), high=5e-5)
rl.claim("TIS's bias is 0.28 on average", mean(hot, "token_truncate"), 0.28)
rl.claim("against 0.09 for full importance sampling", mean(hot, "is"), 0.09)
rl.claim("at least twice as large on every seed", min(np.divide(B[hot]["token_truncate"], B[hot]["is"])), low=2.0)
UNTRUNCATED = ["T_s = 0.5", "T_s = 1.5", "lag 1", "lag 2", "lag 4", "lag 8"]
rl.claim("the uncapped per-token bias stays above full importance sampling's",
         min(uncapped[name] / bias[name]["is"][0] for name in UNTRUNCATED), low=1.0)

# %% [markdown]
# ## 14.4 Training with a sampler that is not the policy
#
# Now the runs. Chapter 9's recipe for 60 steps (64 prompts × 8 completions, $\mu = 1$, no KL penalty), with
# one switch changed per condition. First one seed here, live: no mismatch, a sampler 8 steps stale, and
# the same stale sampler with TIS. The trainer logs the mismatch it sees (`sampler_kl`, the $k_3$ estimate
# of $\mathrm{KL}(\mu\,\|\,\pi)$ per token, which under top-$p$ misses the cut mass, §14.2) and the share of
# tokens the cap truncates.

# %%
LIVE = {"no mismatch": {}, "lag 8": dict(sampler_lag=8), "lag 8 + TIS": dict(sampler_lag=8, is_correction="token_truncate")}
held_out = task.held_out_problems(500)
live = {}
for name, switches in LIVE.items():
    model = copy.deepcopy(sft_policy)
    start = time.perf_counter()
    hist = rl.train_grpo(model, tok, task, rl.GRPOConfig(num_steps=60, seed=0, **switches), progress=False)
    live[name] = (hist, rl.evaluate(model, tok, held_out, num_samples=16, k=8, seed=1))
    print(f"{name:<13} held-out pass@1 {live[name][1]['pass@1']:.3f}, greedy {live[name][1]['greedy_accuracy']:.3f}; "
          f"{time.perf_counter() - start:.0f} s")

# %%
fig, axes = plt.subplots(2, 2, figsize=(8.4, 6.0), dpi=80)
fig.delaxes(axes[1, 1])
axes = axes.ravel()[:3]  # three panels in a 2 × 2 grid
for k, (name, (hist, _)) in enumerate(live.items()):
    axes[0].plot(hist["reward"], color=f"C{k}", label=name)
    if "sampler_kl" in hist:
        axes[1].plot(hist["sampler_kl"], color=f"C{k}", label=name)
    axes[2].plot(hist["kl"], color=f"C{k}", label=name)
axes[0].set_ylabel("training reward (the sampler's samples)")
axes[1].set_ylabel("sampler mismatch per token (k3)")
axes[2].set_ylabel("KL(π ‖ π_start) per token (k3)")
axes[2].set_yscale("log")
for ax in axes:
    ax.set_xlabel("GRPO step")
    ax.legend(fontsize=8.5)
plt.tight_layout();

# %% [markdown]
# The cell printed where each of the three runs ended. How far the stale run falls behind, and how much of
# that TIS wins back, moves from run to run: on the machine that made these outputs and on others, one
# seed has put TIS anywhere from level with the on-policy run to several points below it, so one seed
# cannot rank them, and the ten seeds below do. The middle panel shows the mechanism, why an uncorrected
# stale run is unstable rather than merely slow: the mismatch it trains on feeds on itself. A stale token the policy has since learned to avoid has $\pi \ll \mu$; uncorrected, a negative
# advantage pushes its log-probability down further with the full score $e_a - \pi$, the policy moves
# further from the stale sampler, and the next batch is more off-policy still. Every correction
# down-weights or drops exactly those tokens ($\rho \ll 1$). We think this is why the masks help in training
# although their *expected* gradient in §14.3 was hardly closer to $g^*$ than no correction's, but that is a
# hypothesis: no run here isolates it. An estimator's bias is not all that matters in training either; its
# variance, not computed here, matters too. One seed shows a mechanism, not a
# conclusion, so `benchmarks/mismatch_training.py` ran sixteen conditions on ten paired seeds (seed $s$
# of every condition starts from the same supervised model and draws from the same generator), and the
# chapter reads its stored results. Held-out pass@1 is measured on the *trainer's* policy at $T = 1$, on 500
# problems × 16 samples.

# %%
bench = rl.benchmark_results("mismatch_training")
runs, conditions = bench["runs"], list(bench["conditions"])
per_seed = {c: np.array([r["pass@1"] for r in runs if r["condition"] == c]) for c in conditions}
greedy = {c: np.array([r["greedy_accuracy"] for r in runs if r["condition"] == c]) for c in conditions}
share = {c: np.array([r["truncated"] + r["masked"] for r in runs if r["condition"] == c]) for c in conditions}
print(f"{len(bench['seeds'])} paired seeds, {bench['num_steps']} steps each ({bench['command']}; torch {bench['torch']})")
print(f"{'condition':<15}{'pass@1 [95 % CI]':>24}{'greedy':>8}{'sampler k3':>12}{'tokens cut/reweighted':>23}")
for c in conditions:
    mean, low, high = rl.mean_ci(per_seed[c])
    kl = np.mean([r["sampler_kl"] for r in runs if r["condition"] == c])
    print(f"{c:<15}{mean:>8.3f} [{low:.3f}, {high:.3f}]{greedy[c].mean():>8.3f}{kl:>12.4f}{share[c].mean():>23.3f}")

# %%
def versus(a, b):
    return rl.compare(per_seed[a], per_seed[b], names=(a, b))


comparisons = {(a, b): versus(a, b) for a, b in [
    ("lag1", "on_policy"), ("lag2", "on_policy"), ("lag4", "on_policy"), ("lag8", "on_policy"),
    ("lag8_tis", "lag8"), ("lag8_mis", "lag8"), ("lag8_seq_mask", "lag8"), ("lag8_geo_mask", "lag8"),
    ("lag8_tis", "on_policy"), ("lag8_tis", "lag8_mis"), ("lag8_tis", "lag8_geo_mask"), ("lag8_tis", "lag8_seq_mask"),
    ("bf16", "on_policy"), ("fp16", "on_policy"), ("temp0.5", "on_policy"), ("temp0.5_tis", "temp0.5"),
    ("top_p0.8", "on_policy"), ("top_p0.8_tis", "top_p0.8"), ("temp1.5", "on_policy")]}
for c in comparisons.values():
    print(c)

# %%
fig, axes = plt.subplots(2, 1, figsize=(8.4, 7.2), dpi=80, gridspec_kw={"height_ratios": [1.25, 1]})
order = conditions
for k, c in enumerate(order):
    mean, low, high = rl.mean_ci(per_seed[c])
    color = "C0" if c == "on_policy" else ("C3" if "_" not in c or c in ("top_p0.8", "temp0.5", "temp1.5") else "C2")
    axes[0].errorbar([k], [mean], yerr=[[mean - low], [high - mean]], fmt="o", color=color, capsize=3)
    axes[0].scatter(np.full(len(per_seed[c]), k) + 0.2, per_seed[c], s=5, color=color, alpha=0.4)
axes[0].axhline(per_seed["on_policy"].mean(), color="C0", lw=0.8, ls=":")
axes[0].set_xticks(range(len(order)), order, rotation=60, fontsize=8.5)
axes[0].set_ylabel("held-out pass@1 (trainer's policy)")
axes[0].set_title("mean, 95 % CI and seeds; blue: no mismatch, red: uncorrected, green: corrected", fontsize=9)
steps = np.arange(bench["num_steps"])
for k, c in enumerate(("lag8_tis", "lag8_mis", "lag8_seq_mask", "lag8_geo_mask")):
    key = "is_truncated_fraction" if c == "lag8_tis" else "is_masked_fraction"
    curve = np.mean([r["curves"][key] for r in runs if r["condition"] == c], axis=0)
    axes[1].plot(steps, curve, color=f"C{k}", label=c)
axes[1].set_xlabel("GRPO step")
axes[1].set_ylabel("share of tokens truncated / masked")
axes[1].set_title("mean over the ten seeds", fontsize=9)
axes[1].legend(fontsize=8.5)
plt.tight_layout();

# %% [markdown]
# What ten seeds show, condition by condition:
#
# * **Staleness hurts, and it hurts early.** Even one step of lag lowers pass@1, and the loss grows with the
#   lag from one step to two and from two to four; from four to eight there is no difference detected at
#   this scale. Eight steps cost 0.36 of pass@1, with a wide spread across seeds (some seeds collapse, with the
#   KL from the start exploding). The stale runs also train on a larger mismatch than the corrected ones
#   (the sampler-$k_3$ column): uncorrected, the drift feeds on itself.
# * **Every correction repairs most of it.** TIS, token masking, the sequence mask and the geometric mask
#   all beat the uncorrected stale run. TIS does best: it comes back to within about a point and a half of
#   on-policy training, still below it (the interval excludes zero). TIS beats the sequence mask, token
#   masking and the geometric mask; the geometric mean hides a single far-off token inside a long answer's
#   average, and recovers least.
# * **Precision makes no difference detected at this scale**, for bf16 and for fp16: their exact bias was
#   a percent or less (§14.3), far below what sixty steps can feel.
# * **A cold sampler and a top-p sampler hurt pass@1 at $T = 1$, and TIS made no difference detected at
#   this scale** for either, as §14.3's exact bias predicted. In greedy accuracy there is no difference
#   detected at this scale from on-policy training: the policy learns the right answer, but the tail the
#   sampler never shows it is never pushed down, so sampling at $T = 1$ keeps drawing it. (Pass@1 under the
#   sampler's own $T_s$ or top-$p$, which a deployment with the same settings would see, was not measured.)
# * **A hotter sampler** ($T_s = 1.5$) ends slightly above on-policy training at $T = 1$: its samples show the
#   trainer more of the tail to push down.
#
# This section makes 19 paired comparisons. A Holm correction for their number (family-wise error rate 5 %)
# keeps every detected difference except three: TIS's margins over the sequence mask and over token
# masking, and the loss from one step of lag. Read those three as likely but not established at ten seeds.

# %%
rl.claim_comparison("Even one step of lag lowers pass@1", comparisons["lag1", "on_policy"], "<")
drop = {k: -comparisons[f"lag{k}", "on_policy"].mean_diff for k in (1, 2, 4, 8)}  # pass@1 lost to a lag of k steps
for a, b in ((1, 2), (2, 4)):
    rl.claim_comparison("the loss grows with the lag from one step to two and from two to four",
                        rl.compare(per_seed[f"lag{a}"], per_seed[f"lag{b}"], names=(f"lag {a}", f"lag {b}")), ">")
rl.claim_comparison("from four to eight there is no difference detected",
                    rl.compare(per_seed["lag4"], per_seed["lag8"], names=("lag 4", "lag 8")), "none")
rl.claim("Eight steps cost 0.36 of pass@1", drop[8], 0.36, abs=5e-3)
sampler_kl = {c: np.array([r["sampler_kl"] for r in runs if r["condition"] == c]) for c in conditions}
rl.claim_comparison("train on a larger mismatch than the corrected ones", rl.compare(sampler_kl["lag8"], sampler_kl["lag8_tis"],
                                                                                    names=("lag 8's sampler KL", "lag 8 + TIS's")), ">")
lag8_runs = [r for r in runs if r["condition"] == "lag8"]
rl.claim("some seeds collapse", sum(r["max_kl"] > 10 for r in lag8_runs), low=1, high=len(lag8_runs) - 1)
for fix in ("lag8_tis", "lag8_mis", "lag8_seq_mask", "lag8_geo_mask"):
    rl.claim_comparison("all beat the uncorrected stale run", comparisons[fix, "lag8"], ">")
rl.claim_comparison("still below it (the interval excludes zero)", comparisons["lag8_tis", "on_policy"], "<")
rl.claim("within about a point and a half", -comparisons["lag8_tis", "on_policy"].mean_diff, 0.015,
         abs=0.005)  # "about a point and a half": nearer 1.5 points than 1 or 2
rl.claim_comparison("TIS does best", comparisons["lag8_tis", "lag8_seq_mask"], ">")
rl.claim_comparison("TIS beats the sequence mask", comparisons["lag8_tis", "lag8_seq_mask"], ">")
rl.claim_comparison("token masking", comparisons["lag8_tis", "lag8_mis"], ">")
rl.claim_comparison("and the geometric mask", comparisons["lag8_tis", "lag8_geo_mask"], ">")
rl.claim("recovers least", per_seed["lag8_geo_mask"].mean() - max(per_seed[c].mean() for c in ("lag8_tis", "lag8_mis", "lag8_seq_mask")),
         high=0.0)
rl.claim_comparison("Precision makes no difference detected at this scale", comparisons["bf16", "on_policy"], "none")
rl.claim_comparison("for bf16 and for fp16", comparisons["fp16", "on_policy"], "none")
rl.claim_comparison("A cold sampler and a top-p sampler hurt", comparisons["temp0.5", "on_policy"], "<")
rl.claim_comparison("and a top-p sampler hurt", comparisons["top_p0.8", "on_policy"], "<")
rl.claim_comparison("and TIS made no difference detected at this scale", comparisons["temp0.5_tis", "temp0.5"], "none")
rl.claim_comparison("and TIS made no difference detected at this scale", comparisons["top_p0.8_tis", "top_p0.8"], "none")
for c in ("temp0.5", "top_p0.8"):
    rl.claim_comparison("In greedy accuracy there is no difference detected at this scale from on-policy training",
                        rl.compare(greedy[c], greedy["on_policy"], names=(f"{c} greedy", "on-policy greedy")), "none")
rl.claim_comparison("ends slightly above on-policy training", comparisons["temp1.5", "on_policy"], ">")
holm = dict(zip(comparisons, rl.adjust_p_values([c.p_value for c in comparisons.values()], method="holm")))
lost_to_holm = {pair for pair, c in comparisons.items() if c.p_value <= 0.05 < holm[pair]}
print(f"Holm over {len(comparisons)} comparisons; detected before but not after:", sorted(lost_to_holm))
rl.claim("This section makes 19 paired comparisons", len(comparisons), 19, abs=0)
assert lost_to_holm == {("lag8_tis", "lag8_seq_mask"), ("lag8_tis", "lag8_mis"), ("lag1", "on_policy")}, "except three"
assert sum(c.p_value <= 0.05 for c in comparisons.values()) - len(lost_to_holm) == sum(holm[p] <= 0.05 for p in comparisons)

# %% [markdown]
# ## 14.5 Fixes at the source
#
# The corrections are a repair for a mismatch that is already there. Where the mismatch comes from a
# setting, the better fix is to remove it, and for two of the four sources nothing else works:
#
# * **Truncation** cannot be corrected by any weight: a token the sampler never draws has no sample to
#   reweight, and the trainer keeps its probability. Either sample without top-$p$/top-$k$ during RL, or apply
#   the same truncation in the trainer's log-probabilities (score with the renormalised $\mu$'s support;
#   vLLM can return the processed log-probabilities for exactly this).
# * **Temperature**: score the tokens at the temperature they were sampled at. In rlbook that means
#   `GRPOConfig(temperature=T)` rather than `sampler_temperature=T`: one number used in both places, as TRL
#   does with its single `temperature`.
# * **Precision**: Qi et al. 2025 found that running *both* the trainer and the engine in fp16 instead of
#   bf16 removes most of the mismatch of large runs; fp16's 10-bit mantissa keeps steps 8 times finer than
#   bf16's 7. On this model, fp16's bias is well under half of bf16's (§14.3; the mantissas alone predict an
#   eighth, and the ratio over one run's 16 prompts moves with that run's weights). Two more fixes act at
#   the source: computing the LM head in float32 in both (MiniMax-M1, arXiv:2506.13585; `fp32_lm_head=True`
#   here, §11.6; `cast_lm_head_to_fp32` in TRL) removes the logit rounding that (14.1) simulates, and
#   batch-invariant inference kernels (Thinking Machines, "Defeating nondeterminism in LLM inference",
#   2025) remove the part that comes from the engine's kernels. In mixture-of-experts models the two
#   stacks can also route a token to different experts; Rollout Routing Replay (arXiv:2510.11370) replays
#   the engine's routing in the trainer (the end of this section shows why on a toy layer).
# * **Staleness**: bound the lag (AReaL's maximum staleness $\eta$), or update the sampler's weights in
#   flight, between tokens of a generation (PipelineRL), and correct what remains with TIS.
#
# Precision made no difference here; where does it start to? Rounding error is relative to the logit, so
# it grows with the logits' size, and real models' logits sit far from zero, while this model's are
# small. The explorer below computes the exact bias of the uncorrected and corrected estimators on ten
# tokens, and its offset slider shifts all logits by a constant (softmax ignores the shift, rounding does
# not). The cell below reads the bias it gives for bf16 at growing offsets.

# %%
from rlbook.widgets.mismatch_explorer import FIGSIZE as MISMATCH_FIGSIZE
from rlbook.widgets.mismatch_explorer import mismatch_explorer, mismatch_numbers, mismatch_readout, plot_mismatch

offsets = [0.0, 10.0, 30.0, 100.0, 300.0]
bf16_bias = [mismatch_numbers(precision="bf16", offset=o)["moments"]["uncorrected"]["bias_norm"] for o in offsets]
print("bf16, uncorrected ‖bias‖ against the logit offset: "
      + ", ".join(f"{o:g}: {b:.4f}" for o, b in zip(offsets, bf16_bias)))
rl.claim("fp16's bias is well under half of bf16's", bias["fp16"]["none"][0] / bias["bf16"]["none"][0], high=0.5)

# %% [markdown]
# At this model's scale (offset 0) the bf16 bias is nothing: 0.0008. As the logits move away from zero it
# grows, though not at every step, since rounding is a staircase: about 0.013 at an offset of 30, a size
# real logits reach, and 0.079 at 300, more than twice the bias of a sampler at $T_s = 0.7$ in the same setting
# (printed under the figure below). At 300, bf16's spacing is 2 nats, so that end of the scan is an
# extreme that shows the direction, not a model of a real engine. Large logits are one reason the
# precision mismatch shows in large models and not here; the others (the engine's kernels, sums
# accumulated through many layers and long sequences, expert routing) are not in this simulation at all.
#
# **Explore.** The `mismatch` explorer (also `rlbook explore mismatch`) sets a trainer distribution over ten
# tokens and a sampler with its own temperature, top-$p$ and precision. It draws the two distributions,
# the ratio $\rho = \pi/\mu$ against the band $[1/C, C]$, and the exact bias and variance of the uncorrected,
# importance-weighted, TIS and MIS estimators as the cap $C$ moves: a larger cap trades bias for variance,
# and under top-$p$ no cap removes the bias. The static figure shows $T_s = 0.7$, top-$p$ 1, fp32, $C = 2$.

# %%
rl.claim("At this model's scale (offset 0) the bf16 bias is nothing", bf16_bias[0], high=1e-3)
rl.claim("more than twice the bias of a sampler at", bf16_bias[-1] / mismatch_numbers(temperature=0.7)["moments"]["uncorrected"]["bias_norm"], low=2.0)
rl.claim("the bf16 bias is nothing: 0.0008", bf16_bias[0], 0.0008, abs=5e-5)
rl.claim("about 0.013 at an offset of 30", bf16_bias[2], 0.013)
rl.claim("and 0.079 at 300", bf16_bias[-1], 0.079, abs=5e-4)
rl.claim("though not at every step", min(np.diff(bf16_bias)), high=0.0)

# %%
fig, axes = plt.subplots(2, 2, figsize=(8.4, 6.4), dpi=80)
plot_mismatch(0.7, 1.0, "fp32", 2.0, axes=axes.flatten())
fig.tight_layout()
print(mismatch_readout(0.7, 1.0, "fp32", 2.0)[0]);

# %%
try:
    display(mismatch_explorer())  # move the sliders in a live notebook
except ImportError:
    print("ipywidgets is not installed: the static figure above shows the explorer at T_s = 0.7, C = 2")

# %% [markdown]
# **Routing in mixture-of-experts models.** A mixture-of-experts layer sends each token to the experts with
# the largest router logits (top-1 below, top-$k$ in practice). That choice is discrete, so a difference in
# the router logits too small to matter anywhere else, a rounding like (14.1), flips it for every token whose
# two largest router logits are closer than the rounding; the sampler and the trainer then compute that token
# with different experts, and its log-ratio jumps by far more than the rounding could move it. No weight
# corrects this well: the ratio is large because the two sides evaluated different functions, not because
# the sampler drew an unlikely token. The fix is at the source. Rollout Routing Replay (R3; Ma et al. 2025,
# arXiv:2510.11370) records the inference engine's expert choice for every token and layer and replays it
# in the trainer's forward pass; only the discrete choice is replayed, and the gate weights are recomputed
# from the trainer's router, so the router still gets its gradient. DeepSeek-V3.2 (arXiv:2512.02556) does
# the same under the name Keep Routing, beside Keep Sampling Mask, which applies the sampler's top-$p$/top-$k$
# mask to the trainer's probabilities (the truncation fix above).
#
# The cell builds a toy top-1 layer: 1,000 token states, a router over 4 experts, each expert a linear map to
# 32 token logits, scaled by its gate weight. The sampler computes the router and expert logits rounded to
# bf16, the trainer in float64; both score the tokens the sampler drew. In this one layer 2 of the 1,000
# tokens are routed differently, both with their two largest router logits within bf16's rounding of each
# other, and their log-ratios jump to 0.33 and 0.93, against at most 0.012 for every other token. Replaying
# the sampler's routing in the trainer brings the largest log-ratio down to 0.012, what the rounding of the
# expert logits alone leaves. A real model has dozens of such layers, and a token's computation differs if
# any of them routes it differently.

# %%
import torch
moe_gen = torch.Generator().manual_seed(0)
NUM_TOKENS, DIM, EXPERTS, VOCAB = 1000, 16, 4, 32
hidden = torch.randn(NUM_TOKENS, DIM, generator=moe_gen, dtype=torch.float64)
router = torch.randn(EXPERTS, DIM, generator=moe_gen, dtype=torch.float64)
experts = torch.randn(EXPERTS, VOCAB, DIM, generator=moe_gen, dtype=torch.float64) / DIM ** 0.5


def bf16(x):
    return x.to(torch.bfloat16).to(torch.float64)


def moe_log_probs(router_logits, expert_logits, route):
    """Top-1 MoE: the routed expert's logits scaled by its gate weight (softmax of the router's own logits)."""
    gate = torch.softmax(router_logits, -1).gather(1, route[:, None])
    return torch.log_softmax(gate * expert_logits.gather(1, route[:, None, None].expand(-1, 1, VOCAB))[:, 0], -1)


router_logits = hidden @ router.T  # (tokens, experts), the trainer's exact router
expert_logits = torch.einsum("evd,td->tev", experts, hidden)  # (tokens, experts, vocab)
sampler_router, sampler_experts = bf16(router_logits), bf16(expert_logits)  # the engine's rounded copy
sampler_route, trainer_route = sampler_router.argmax(-1), router_logits.argmax(-1)
moe_log_mu = moe_log_probs(sampler_router, sampler_experts, sampler_route)
tokens = torch.multinomial(moe_log_mu.exp(), 1, generator=moe_gen)[:, 0]  # the sampled tokens
moe_log_mu = moe_log_mu.gather(1, tokens[:, None])[:, 0]
log_pi_own = moe_log_probs(router_logits, expert_logits, trainer_route).gather(1, tokens[:, None])[:, 0]
log_pi_replay = moe_log_probs(router_logits, expert_logits, sampler_route).gather(1, tokens[:, None])[:, 0]
flipped = sampler_route != trainer_route
own_ratio, replay_ratio = (log_pi_own - moe_log_mu).abs(), (log_pi_replay - moe_log_mu).abs()
print(f"tokens routed differently by the sampler and the trainer: {int(flipped.sum())} of {NUM_TOKENS}")
print(f"|log π − log μ|, trainer's own routing: largest on a flipped token {own_ratio[flipped].max():.3f}, "
      f"on the others {own_ratio[~flipped].max():.2e}")
print(f"|log π − log μ|, sampler's routing replayed: largest {replay_ratio.max():.2e}")

# %%
top2 = router_logits.topk(2, dim=-1).values
gaps_flipped = (top2[:, 0] - top2[:, 1])[flipped]
rl.claim("In this one layer 2 of the 1,000", int(flipped.sum()), 2, abs=0)
# bf16 keeps 8 significant bits: its spacing at |x| is 2^(⌊log2|x|⌋ − 7); a flip needs a gap below it
spacing = 2.0 ** (torch.floor(torch.log2(top2[flipped, 0].abs())) - 7)
rl.claim("within bf16's rounding of each other", (gaps_flipped / spacing).max().item(), high=1.0)
jumps = sorted(own_ratio[flipped].tolist())
rl.claim("their log-ratios jump to 0.33 and 0.93", jumps[0], 0.33)
rl.claim("their log-ratios jump to 0.33 and 0.93", jumps[1], 0.93)
rl.claim("against at most 0.012 for every other token", own_ratio[~flipped].max().item(), 0.012)
rl.claim("brings the largest log-ratio down to 0.012", replay_ratio.max().item(), 0.012)

# %% [markdown]
# ## 14.6 In TRL and verl
#
# TRL's `GRPOTrainer` applies a correction whenever it samples with vLLM, and by default:
# `vllm_importance_sampling_correction=True` with `vllm_importance_sampling_mode="sequence_mask"` on the
# product ratio $\rho_{\text{seq}}$ of (14.4), bounded above only. With `vllm_importance_sampling_clip_max=3.0`
# and `vllm_importance_sampling_clip_min=None` (the defaults in TRL 1.16), a sequence with $\rho_{\text{seq}} > 3$
# is dropped and one with $\rho_{\text{seq}} < 1/3$ is kept, at weight $\rho_{\text{seq}}$: the band is $[0, 3]$, not
# the $[1/C, C]$ of (14.4), which needs `vllm_importance_sampling_clip_min` set. `rl.bridge.to_trl_config` maps
# the book's settings to TRL's: `is_correction` "token_truncate", "token_mask", "sequence_truncate" and
# "sequence_mask" to the mode of the same name, with `vllm_importance_sampling_clip_min` set to $1/C$ for the
# masks (the band $[1/C, C]$) and $\min(\rho, C)$ for the truncations, and "none" to
# `vllm_importance_sampling_correction=False`; `sampler_top_p` and `sampler_top_k` to TRL's `top_p` and
# `top_k`, which TRL applies where it samples and not where it scores, the truncation mismatch of §14.2.
# It refuses by name what TRL cannot express: the geometric-mean masks, a sampler temperature other
# than the trainer's, a sampler precision and a lag. The losses and gradients of the four mapped modes
# equal TRL's to 1e-6 (`tests/test_bridge.py`).
#
# verl groups the same switches under `algorithm.rollout_correction` ("rollout correction", after Liu, Li
# et al. 2025; read here from verl 0.7's source and its `docs/algo/rollout_corr.md`, not run by the book).
# Its defaults differ from TRL's: `rollout_is: null` and `rollout_rs: null`, so verl corrects nothing until
# asked. Importance *weights* and *rejection* are separate fields, and the book's modes map onto them so:
#
# | book (`is_correction`, cap $C$) | verl `algorithm.rollout_correction` |
# |---|---|
# | "token_truncate" | `rollout_is="token"`, `rollout_is_threshold=C` (weights $\min(\rho_t, C)$, capped above only) |
# | "sequence_truncate" | `rollout_is="sequence"`, `rollout_is_threshold=C` (weight $\min(\rho_{\text{seq}}, C)$) |
# | "token_mask" | `rollout_is="token"` and `rollout_rs="token_k1"`, both thresholds $C$ (a single number sets the band $[1/C, C]$; the weight $\rho_t$ is kept inside it) |
# | "sequence_mask" | `rollout_is="sequence"` and `rollout_rs="seq_sum_k1"`, both thresholds $C$ |
# | "geometric_mask" | the band only: `rollout_rs="seq_mean_k1"` (the mean of $\log\rho_t$ over the sequence); verl has no field for the weight $\rho_{\text{geo}}$ |
#
# In the masks verl takes rejected tokens out of the loss mask, and so out of the normaliser; TRL and the
# book keep them there at weight 0. verl can also reject on $k_2$/$k_3$ statistics of the ratio
# (`token_k3`, `seq_max_k3`, …), normalise the weights to mean 1 per batch (`rollout_is_batch_normalize`),
# and, with `bypass_mode=true`, use the sampler's log-probabilities as PPO's $\pi_{\text{old}}$ (two policies
# instead of three). Two practical notes from TRL's and verl's issue trackers:
#
# * A clip fraction of exactly zero with one pass per batch does not mean the samples were on-policy: the
#   ratio the clip sees is $\pi_\theta/\pi_{\text{old}}$ with the trainer's own $\pi_{\text{old}}$, which is 1 at the first pass
#   whatever drew the tokens. Log the trainer-to-sampler ratio of §14.2 instead (`sampler_log_ratio_mean`
#   and `sampler_kl` here, the second a $k_3$ that misses a truncating sampler's cut mass; TRL logs its
#   importance-sampling ratio).
# * The product ratio of a long completion drifts far from 1 even when every token's ratio is close, so
#   a sequence mask with a small cap drops most long answers: watch the masked share.
#
# **What to set.** A rule of thumb drawn from this chapter's measurements and the papers it cites, not a
# recipe tested here as a whole:
#
# * *Temperature and truncation*: fix them at the source, since no correction repaired either here (§14.4).
#   Score at the temperature you sample at (TRL's single `temperature` does that), and sample without `top_p`
#   or `top_k` during RL unless the trainer applies the sampler's truncation to its own log-probabilities
#   (DeepSeek-V3.2, arXiv:2512.02556, keeps the sampler's mask for exactly this).
# * *Precision*: the same format on both sides, fp16 where the model tolerates it, and the LM head in float32
#   (`cast_lm_head_to_fp32=True` in TRL).
# * *Mixture of experts*: replay the sampler's expert routing in the trainer (R3, DeepSeek-V3.2's Keep Routing;
#   §14.5), which needs an engine that returns the routing it used.
# * *Staleness and what numeric mismatch remains*: a correction. Token-level TIS with $C = 2$ repaired most of
#   an eight-step lag on these short answers (§14.4). For long answers or a large lag, where a per-token weight
#   is a poor approximation of the sequence's (§14.3), use a sequence-level mask, TRL's default
#   `sequence_mask` with `vllm_importance_sampling_clip_min` set for a two-sided band, and watch the share it
#   drops.
# * *Log* the mean log-ratio between trainer and sampler (minus the KL) and the mean ratio, not $k_3$ alone;
#   the share of tokens or sequences truncated or masked; and how both move over training. A mean ratio
#   below 1 points at truncation (or at a cold sampler, which nearly never draws some tokens the trainer
#   gives mass to), a growing mean log-ratio at staleness or drift.
#
# ## Summary
#
# * A production sampler differs from the trainer's policy by precision, temperature, truncation and
#   staleness, (14.1). Each is one `GRPOConfig` switch here, and the trainer logs the mismatch it sees.
# * Token by token, precision moves log-probabilities by hundredths of a nat on this model, temperature and
#   top-$p$ by tenths, staleness by more as the lag grows, on the tokens the policy has just learned to avoid.
# * The bias of the uncorrected gradient, computed exactly over the model's 1,000 answers, grows with the
#   lag; TIS reduces it, less as the lag grows; no capped weight repairs a cold or truncated sampler. Even
#   with no cap a per-token weight leaves a bias that only the sequence's product ratio removes: it corrects
#   the token drawn at a prefix, not how often the sampler reaches that prefix. The expected gradient does
#   not tell the whole story: the masks repair training though they barely reduce the expected bias,
#   plausibly (untested here) because they drop the far-off tokens that make the uncorrected run drift.
# * Over ten paired seeds: staleness degraded training at every lag tried (eight steps cost 0.36
#   of pass@1; one step's loss would not survive a correction for the number of tests) and all four
#   corrections repaired most of it, TIS the most (its lead over two of the masks would not survive that
#   correction either); bf16 and fp16 made no difference
#   detected at this scale; a cold or top-$p$ sampler hurt, and TIS made no difference detected for either:
#   those need a fix at the source.
# * In a mixture-of-experts layer a rounding-sized difference in the router logits sends the tokens near a
#   tie to different experts in the sampler and the trainer, and their log-ratios jump; replaying the
#   sampler's routing in the trainer (R3, DeepSeek-V3.2's Keep Routing) leaves only the rounding (§14.5).

# %%
rl.claim_comparison("staleness degraded training at every lag tried", comparisons["lag1", "on_policy"], "<")
rl.claim_comparison("all four corrections repaired most of it", comparisons["lag8_geo_mask", "lag8"], ">")
rl.claim("repaired most of it", min(per_seed[c].mean() - per_seed["lag8"].mean() for c in ("lag8_tis", "lag8_mis", "lag8_seq_mask", "lag8_geo_mask"))
         / (per_seed["on_policy"].mean() - per_seed["lag8"].mean()), low=0.5)
rl.claim_comparison("and TIS made no difference detected for either", comparisons["top_p0.8_tis", "top_p0.8"], "none")
rl.claim_comparison("and TIS made no difference detected for either", comparisons["temp0.5_tis", "temp0.5"], "none")
rl.claim_comparison("a cold or top-$p$ sampler hurt", comparisons["top_p0.8", "on_policy"], "<")
rl.claim("eight steps cost 0.36", drop[8], 0.36)
rl.report_headline(f"Mismatch: lag 8 − on-policy pass@1 {comparisons['lag8', 'on_policy'].mean_diff:+.3f} "
                   f"[{comparisons['lag8', 'on_policy'].ci_low:+.3f}, {comparisons['lag8', 'on_policy'].ci_high:+.3f}]; "
                   f"TIS − uncorrected {comparisons['lag8_tis', 'lag8'].mean_diff:+.3f} "
                   f"[{comparisons['lag8_tis', 'lag8'].ci_low:+.3f}, {comparisons['lag8_tis', 'lag8'].ci_high:+.3f}] "
                   f"({len(bench['seeds'])} paired seeds)")

# %% [markdown]
# ## Exercises
#
# 1. *(By hand.)* Show that for a sampler that truncates to top-$p$, $\mathbb E_\mu[\rho] = 1 - m$, where $m$ is the
#    trainer's probability of the cut tokens. What does a logged mean ratio below 1 tell you?
# 2. In §14.3, raise the cap $C$ of TIS from 2 to 4, 8 and 16 for the lag-8 sampler. How does the relative
#    bias move? At what cap is it half of the $C = 2$ value?
# 3. Show that the product ratio $\rho_{\text{seq}}$ of a completion whose tokens all have $\log\rho_t = \delta$ is
#    $e^{|o|\delta}$, and find the longest completion a sequence mask with $C = 3$ keeps when $\delta = 0.05$.
#    What does the geometric mean do instead?
# 4. Compute §14.3's table for a sampler that is both 4 steps stale and at $T_s = 1.5$. Are the biases of the
#    two sources additive?
# 5. *(A longer run.)* Run `benchmarks/mismatch_training.py --conditions on_policy lag8 lag8_tis` with
#    `GRPOConfig(num_inner_epochs=4)` in its config (four passes per batch, as chapter 9's second run).
#    Does the PPO clip, now active, protect the stale run?

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions
#
# ### Solution to exercise 1
#
# $\mathbb E_\mu[\rho] = \sum_{a:\,\mu(a)>0}\mu(a)\,\pi(a)/\mu(a) = \sum_{a \text{ kept}}\pi(a) = 1 - m$. A logged mean
# ratio below 1 says that the sampler cuts (or nearly never draws) tokens the trainer gives mass to: the
# trainer's probability of tokens it never sees. The cell checks it on the top-$p$ sampler of §14.2.

# %% tags=["solution"]
s = token_stats["top-p 0.8"]
print(f"top-p 0.8: mean ratio over the sampled tokens {s['ratio_mean']:.4f} (below 1: the trainer's mass on the cut tokens)")
z = torch.tensor([2.0, 1.0, 0.5, -1.0], dtype=torch.float64)
mu = rl.sampler_log_probs(z, top_p=0.8).exp()
pi = torch.softmax(z, -1)
print(f"exactly, on four tokens: E_μ[ρ] = {(mu[mu > 0] * (pi / mu)[mu > 0]).sum().item():.6f}, "
      f"1 − m = {1 - pi[mu == 0].sum().item():.6f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# A larger cap lets more of the large ratios through, so the bias falls as long as the cap still binds;
# once the cap is above every ratio the sampler produces, it stops moving. It does not fall to full
# importance sampling's: it levels off at the bias of token-level weighting with no cap, which §14.3
# showed stays above full importance sampling's, because a per-token weight does not correct the prefix
# the sampler reached. The rest of the bias is the token-level approximation, not the cap. The variance,
# not computed here, rises with the cap. The cell prints the relative bias for each cap, the two limits,
# and the first cap at which the bias is half its $C = 2$ value (on one run the cap may stop binding before
# that, and then no cap halves it).

# %% tags=["solution"]
stale = model_from(snapshots[-1 - 8])
stale_log_mu = {p.prompt: torch.log_softmax(answer_logits(stale, p.prompt), -1) for p in bias_prompts}
by_cap = {}
for cap in (2.0, 4.0, 8.0, 16.0, 64.0):
    g = torch.cat([expected_gradient(trainer_log_pi[p.prompt], stale_log_mu[p.prompt], rewards[p.prompt], "token_truncate", cap)
                   for p in bias_prompts])
    by_cap[cap] = ((g - g_star).norm() / g_star.norm()).item()
    print(f"C = {cap:>4g}: relative bias {by_cap[cap]:.3f}")
print(f"no cap (token-level IS): {uncapped['lag 8']:.3f};  full importance sampling: {bias['lag 8']['is'][0]:.3f}")
halved = [cap for cap, b in by_cap.items() if b <= by_cap[2.0] / 2]
print("first cap at which the bias is half its C = 2 value:", f"C = {halved[0]:g}" if halved else "none of these")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# $\rho_{\text{seq}} = \prod_t e^{\delta} = e^{|o|\delta}$. The mask keeps it while $e^{|o|\delta} \le 3$, that is
# $|o| \le \ln 3/\delta = 21.97$: 21 tokens at $\delta = 0.05$. The geometric mean is $e^{\delta}$ whatever the
# length, so it keeps every such completion: it does not punish length, but it also averages one far-off
# token away in a long answer.

# %% tags=["solution"]
delta = 0.05
lengths = np.arange(1, 40)
kept = lengths[np.exp(lengths * delta) <= 3.0]
print(f"longest completion the sequence mask keeps at δ = {delta}: {kept.max()} tokens (ln 3 / δ = {np.log(3) / delta:.2f})")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# Build the sampler from the snapshot 4 steps back with `temperature=1.5` and rerun the loop of §14.3. The
# biases are not additive: the norm of a sum of two bias vectors is at most the sum of their norms, and the
# two sources push in partly different directions. The cell prints both.

# %% tags=["solution"]
combined = model_from(snapshots[-1 - 4])
combined_log_mu = {p.prompt: torch.log_softmax(rl.sampler_log_probs(answer_logits(combined, p.prompt), temperature=1.5), -1)
                   for p in bias_prompts}
g = torch.cat([expected_gradient(trainer_log_pi[p.prompt], combined_log_mu[p.prompt], rewards[p.prompt], "none") for p in bias_prompts])
print(f"lag 4 and T_s = 1.5 together: relative bias {((g - g_star).norm() / g_star.norm()).item():.3f}; "
      f"alone: {bias['lag 4']['none'][0]:.3f} and {bias['T_s = 1.5']['none'][0]:.3f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# With four passes per batch the ratio $\pi_\theta/\pi_{\text{old}}$ moves within a batch and the clip acts, but it
# compares with the *trainer's* $\pi_{\text{old}}$, not with the stale sampler's $\mu$: it bounds how far one batch
# moves the policy, not how far the tokens are from it. Expect the stale run to stay below the on-policy
# one, and TIS to repair it again; the run takes about 20 minutes on two cores, and we have not stored it.
