# %% [markdown]
# # 12. Learning from preferences: reward models and the KL-regularised objective
#
# **Goals.** By the end of this chapter you can
# * say when a reward has to be learned from comparisons, and why people are asked to compare two
#   answers rather than to score one;
# * derive the Bradley–Terry likelihood as a logistic regression on reward differences, fit it, and
#   explain why it recovers a reward only up to a constant;
# * train a reward model (the book's transformer with a scalar head) on comparisons of its own answers,
#   and measure its held-out accuracy as the number of comparisons and the label noise change;
# * derive the optimum of the KL-regularised objective $\max_\pi \mathbb E_\pi[r] - \beta\,\mathrm{KL}(\pi\,\|\,\pi_{\text{ref}})$,
#   $\pi^* \propto \pi_{\text{ref}}\,e^{r/\beta}$ with value $\beta\log Z$, and check both exactly by enumeration,
#   on a bandit and on the answers of the book's own model;
# * compute best-of-$N$'s exact distribution and KL, test the popular formula $\log N - (N-1)/N$ against
#   it, and place best-of-$N$ on the reward–KL plane beside $\pi^*$;
# * write the Plackett–Luce likelihood of a ranking of several answers, say why a reward model's output is
#   normalised, and test an ensemble of reward models against over-optimisation.
#
# **Prerequisites.** The KL divergence and its estimators (chapter 5), the small language model, its
# addition task and its supervised warm-up (chapter 8), and GRPO with its KL penalty (chapter 9).
#
# **Where this fits.** Chapters 8–11 had a verifier: an answer to "07+42=" is right or wrong, and the
# reward says so. Most of what people want from a language model has no such verifier. This chapter
# learns the reward from human-style comparisons instead, and then asks what a policy should do with a
# learned reward that it must not trust too far.

# %%
import inspect
import itertools
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm.auto import tqdm

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
# One thread, as in chapter 9: the supervised model is chapter 8's (trained with one thread), and a
# busy machine slows one thread down gently.
torch.set_num_threads(1)
device = rl.get_device()
SIZE = rl.get_size()  # "small" (default; 2 CPU cores) or "full", via RLBOOK_SIZE
print("size:", SIZE)

# %% [markdown]
# ## 12.1 Why preferences
#
# A verifier exists for arithmetic, for code with unit tests, for a proof checker's verdict. It does
# not exist for "is this summary faithful?", "is this reply helpful and polite?" or "is this the better
# explanation?". For those, the only judge is a person, and people are poor at giving *scores*: one
# labeller's 7 out of 10 is another's 5, and the same labeller drifts over a day. They are much more
# consistent at *comparisons*: shown two answers to the same prompt, most people agree which one is
# better, whatever scale they carry in their heads. A labeller who reports $a\,r + b$ plus noise,
# with their own $a > 0$ and $b$, changes every score but no noise-free comparison (with noise, $a$ acts as
# the temperature of the comparisons, exercise 5).
#
# So the standard recipe (Christiano et al. 2017, arXiv:1706.03741; Ziegler et al. 2019,
# arXiv:1909.08593; Stiennon et al. 2020, arXiv:2009.01325; Ouyang et al. 2022, arXiv:2203.02155) has
# three steps:
#
# 1. start from a supervised model $\pi_{\text{ref}}$ and sample pairs of answers to the same prompts;
# 2. ask people which answer of each pair they prefer, and fit a *reward model* $r_\phi(x, y)$ to
#    those comparisons (§12.2, §12.3);
# 3. optimise the policy against $r_\phi$, with a KL penalty that keeps it near $\pi_{\text{ref}}$,
#    because $r_\phi$ is only trustworthy where it was trained (§12.4, §12.5).
#
# To study this without people we need what real RLHF never has: the **gold** reward that the
# labellers' judgements come from. On the book's addition task we write it down, with two
# components: correctness first, and among wrong answers, closeness to the truth (a near miss is
# preferred to a wild guess):
#
# $$r_{\text{gold}}(x, y) = 2\cdot\mathbb 1[y = s(x)] \;-\; \log_{10}\bigl(1 + |y - s(x)|\bigr),
# \tag{12.1}$$
#
# where $s(x)$ is the true sum and $y$ the answer read as a number. A right answer scores 2, an answer
# off by 1 scores $-0.30$, off by 10 $-1.04$, off by 100 $-2.00$. Rewards are in Bradley–Terry logit
# units (§12.2): a gap of 2.3 between two answers means a labeller who follows (12.2) prefers the first
# about 91 % of the time.

# %%
def gold_reward(prompt: str, answer: str) -> float:
    """r_gold of eq. (12.1): the chapter's stand-in for a human judgement (answer: 3 digits, no EOS)."""
    true_sum = sum(int(term) for term in prompt.rstrip("=").split("+"))
    return 2.0 * (int(answer) == true_sum) - math.log10(1 + abs(int(answer) - true_sum))


# NBVAL_CHECK_OUTPUT
for answer in ["049", "048", "059", "149", "950"]:
    print(f"07+42= {answer}: r_gold = {gold_reward('07+42=', answer):+.3f}")

# %% [markdown]
# ## 12.2 Bradley–Terry: a logistic regression on reward differences
#
# **The model.** Suppose each answer $y$ to a prompt $x$ has a reward $r(x, y)$, and a labeller
# compares two answers by adding independent noise to each reward and picking the larger. If the noise
# follows a Gumbel distribution, the difference of two Gumbel variables is logistic, and
#
# $$\begin{gathered}P(y_1 \succ y_2 \mid x) = \frac{e^{r(x, y_1)}}{e^{r(x, y_1)} + e^{r(x, y_2)}} = \sigma\bigl(r(x, y_1) - r(x, y_2)\bigr),\cr
# \sigma(z) = \frac{1}{1 + e^{-z}}.\end{gathered} \tag{12.2}$$
#
# This is the Bradley–Terry model (Bradley & Terry 1952). Only the *difference* of rewards enters, so
# adding a constant $c(x)$ to every reward of a prompt changes no probability: a reward is identified
# only up to a per-prompt constant.
#
# **The likelihood.** Given comparisons $\mathcal D = \{(x_n, y_n^{c}, y_n^{r})\}$, where $y^c$ was
# chosen over $y^r$, and a parametric reward $r_\phi$, the negative log-likelihood per comparison is
#
# $$\mathcal L(\phi) = -\frac{1}{|\mathcal D|}\sum_n \log\sigma\bigl(r_\phi(x_n, y_n^c) - r_\phi(x_n, y_n^r)\bigr). \tag{12.3}$$
#
# On a bandit with $K$ arms and one free reward $\theta_k$ per arm, $r_\theta(k) = \theta_k$, write the
# comparison as the feature vector $z_n = e_{c_n} - e_{r_n}$ (a $+1$ for the chosen arm, $-1$ for the
# rejected one). Then $r(c_n) - r(r_n) = \theta^\top z_n$ and (12.3) is exactly **logistic regression
# without an intercept** on the features $z_n$, every label being "1". Its gradient is
#
# $$\nabla_\theta \mathcal L = -\frac{1}{|\mathcal D|}\sum_n \sigma(-\theta^\top z_n)\, z_n, \tag{12.4}$$
#
# and since every $z_n$ sums to zero, so does the gradient: gradient descent never changes
# $\sum_k \theta_k$. The loss is convex, and strictly convex on the subspace $\sum_k\theta_k = 0$ when the
# comparison graph is connected, so the maximum-likelihood estimate is unique up to that constant. It
# *exists* (is finite) under a stronger condition: the directed graph of wins must be strongly connected,
# every item beating, through some chain of wins, every other (Zermelo 1929; Ford 1957). If some set of
# items never loses to the rest, raising all their scores together lowers the loss forever. Chapter 13
# meets exactly this when DPO trains on a finite set of pairs.
#
# The library's loss is (12.3) per pair, unreduced:

# %%
print(inspect.getsource(rl.bradley_terry_loss).split('"""')[-1])

# %% [markdown]
# A hand-worked check: rewards $1$ and $0$ give $P = \sigma(1) = 0.7311$ and a loss of
# $\log(1 + e^{-1}) = 0.3133$; adding 5 to both changes nothing; and the gradient of (12.3) on any data
# sums to zero, as (12.4) says.

# %%
# NBVAL_CHECK_OUTPUT
chosen, rejected = torch.tensor([1.0], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64)
print("P(chosen ≻ rejected) =", round(rl.bradley_terry_probability(chosen, rejected).item(), 4),
      "  loss =", round(rl.bradley_terry_loss(chosen, rejected).item(), 4),
      "  loop oracle =", round(rl.reference.bradley_terry_loss_loop([1.0], [0.0])[0], 4))
print("shifted by 5:", round(rl.bradley_terry_loss(chosen + 5, rejected + 5).item(), 4))
theta = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(0), requires_grad=True)
pairs = torch.randint(0, 6, (2, 50), generator=torch.Generator().manual_seed(1))
rl.bradley_terry_loss(theta[pairs[0]], theta[pairs[1]]).mean().backward()
print("sum of the gradient over arms:", abs(round(theta.grad.sum().item(), 12)))

# %% [markdown]
# **Fitting it on a bandit with a known gold reward.** Five arms with gold rewards
# $r = (1.5, 1.0, 0.5, 0, -1)$. Each comparison draws two different arms uniformly and labels them by
# (12.2) itself, so the labels are as noisy as the model says: arms $0.5$ apart are ordered correctly
# only $\sigma(0.5) = 62\,\%$ of the time. We fit $\theta$ by minimising the mean of
# `rl.bradley_terry_loss` with L-BFGS, starting from $\theta = 0$.

# %%
GOLD_ARMS = torch.tensor([1.5, 1.0, 0.5, 0.0, -1.0], dtype=torch.float64)
K = len(GOLD_ARMS)


def draw_comparisons(gold, n, generator):
    """n comparisons of two different arms drawn uniformly, labelled by Bradley–Terry on ``gold``."""
    first = torch.randint(0, K, (n,), generator=generator)
    second = (first + torch.randint(1, K, (n,), generator=generator)) % K  # a different arm
    first_wins = torch.rand(n, generator=generator, dtype=torch.float64) < torch.sigmoid(gold[first] - gold[second])
    return torch.where(first_wins, first, second), torch.where(first_wins, second, first)  # chosen, rejected


def fit_bradley_terry(chosen, rejected):
    """The maximum-likelihood θ (K,) of eq. (12.3) on a bandit, by L-BFGS from θ = 0."""
    theta = torch.zeros(K, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([theta], lr=1.0, max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-14,
                                  line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = rl.bradley_terry_loss(theta[chosen], theta[rejected]).mean()
        loss.backward()
        return loss

    optimizer.step(closure)
    return theta.detach()


gen = torch.Generator().manual_seed(0)
chosen, rejected = draw_comparisons(GOLD_ARMS, 3000, gen)
theta_hat = fit_bradley_terry(chosen, rejected)
print("gold reward        ", GOLD_ARMS.numpy().round(3))
print("fitted θ           ", theta_hat.numpy().round(3), f"  (sum {theta_hat.sum().item():+.1e})")
print("gold − its mean    ", (GOLD_ARMS - GOLD_ARMS.mean()).numpy().round(3))
loss_at = lambda t: rl.bradley_terry_loss(t[chosen], t[rejected]).mean().item()
print(f"loss at θ̂ {loss_at(theta_hat):.6f}, at θ̂ + 7 {loss_at(theta_hat + 7):.6f}, at the gold reward {loss_at(GOLD_ARMS):.6f}")
assert abs(theta_hat.sum().item()) < 1e-9 and abs(loss_at(theta_hat) - loss_at(theta_hat + 7)) < 1e-12

# %% [markdown]
# The fit recovers the gold reward *minus its mean*: the sum of $\theta$ started at 0 and stayed there,
# and shifting every $\theta_k$ by 7 leaves the loss unchanged. No amount of comparison data can
# tell $r$ from $r + c$; a reward model's absolute level is arbitrary, and only its differences mean
# anything (which is why RLHF implementations normalise the reward model's output before RL). The
# loss at the fit is a little below the loss at the gold reward: the maximum-likelihood estimate fits
# this sample's noise too.
#
# **How the error shrinks with data.** Maximum-likelihood theory predicts the spread of $\hat\theta$: for
# $n$ comparisons its covariance approaches $(n F)^{+}$, where $F = \mathbb E[\sigma(\Delta)\sigma(-\Delta)\,z z^\top]$
# is the Fisher information of one comparison ($\Delta$ the reward gap of the pair; $^+$ the
# pseudo-inverse, since the direction $(1, \dots, 1)$ is not identified). So the root-mean-square error
# per arm of the centred estimate should fall like $\sqrt{\operatorname{tr}(F^+)/(nK)}$. We fit 40
# independent data sets at each $n$ and compare.

# %%
def fisher_per_comparison(gold):
    """F (K, K): E over a uniformly drawn pair of different arms of σ(Δ)σ(−Δ)·z zᵀ, z = e_i − e_j."""
    F = torch.zeros(K, K, dtype=torch.float64)
    for i in range(K):
        for j in range(K):
            if i != j:
                z = torch.zeros(K, dtype=torch.float64)
                z[i], z[j] = 1.0, -1.0
                p = torch.sigmoid(gold[i] - gold[j])
                F += p * (1 - p) * torch.outer(z, z) / (K * (K - 1))
    return F


F = fisher_per_comparison(GOLD_ARMS)
trace_pinv = torch.linalg.pinv(F).trace().item()
ns = [100, 300, 1000, 3000, 10000]
centred_gold = GOLD_ARMS - GOLD_ARMS.mean()
rmse = []
for n in tqdm(ns, desc="comparisons"):
    errors = []
    for seed in range(40):
        c, r = draw_comparisons(GOLD_ARMS, n, torch.Generator().manual_seed(1000 * n + seed))
        errors.append(((fit_bradley_terry(c, r) - centred_gold) ** 2).mean().item())
    rmse.append(math.sqrt(np.mean(errors)))
predicted = [math.sqrt(trace_pinv / (n * K)) for n in ns]
slope = np.polyfit(np.log(ns), np.log(rmse), 1)[0]
for n, m, p in zip(ns, rmse, predicted):
    print(f"n = {n:>6}: RMSE per arm {m:.4f}   predicted {p:.4f}   ratio {m / p:.3f}")
print(f"log-log slope {slope:.3f}")

# %%
ax = rl.get_ax(figsize=(5, 3.2))
ax.loglog(ns, rmse, "o", label="measured (40 data sets each)")
ax.loglog(ns, predicted, "-", label=r"predicted $\sqrt{\mathrm{tr}(F^+)/(nK)}$")
ax.set_xlabel("comparisons n")
ax.set_ylabel("RMSE per arm (centred)")
ax.set_title("Bradley–Terry MLE on a 5-armed bandit", fontsize=9)
ax.legend(fontsize=9)
plt.tight_layout();

# %% [markdown]
# The error falls as $1/\sqrt n$ (the fitted log-log slope is close to $-1/2$) and sits on the Fisher
# prediction: from 300 comparisons on, measured and predicted RMSE agree within 10 %. At 100 comparisons
# the measured error is a little larger than the prediction; the asymptotic formula
# ignores the curvature of the likelihood, which matters when some pairs have been seen only a few
# times.

# %%
rl.claim("the fitted log-log slope is close to $-1/2$", slope, -0.5, abs=0.05)
rl.claim("agree within 10 %", max(abs(m / p - 1) for m, p in zip(rmse[1:], predicted[1:])), high=0.10)

# %% [markdown]
# ## 12.3 A reward model for the book's task
#
# Now the reward is a network. We follow the recipe's first two steps on the book's task:
#
# * **the starting model** is chapter 8's supervised model (loaded from its checkpoint when chapter 8
#   has run here, trained here otherwise, as in chapter 9). Trained on labels of which 60 % are one-digit
#   mistakes, it answers right less than half of the time when sampled, so its answers differ;
# * **the comparisons**: for each training prompt, two answers sampled from that model. Pairs with a
#   malformed answer (not three digits and EOS) or with tied gold rewards are dropped;
# * **the labels** come from Bradley–Terry on the gold reward (12.1) with a known noise level, a
#   temperature $T$: $P(y_1 \succ y_2) = \sigma\bigl((r_{\text{gold}}(y_1) - r_{\text{gold}}(y_2))/T\bigr)$, and
#   $T = 0$ labels by the larger gold reward;
# * **the reward model** $r_\phi(x, y)$ is the supervised transformer with its language-model head replaced
#   by one scalar output (the critic's value head of chapter 10, `rl.lm.build_critic`), read at the answer's EOS token
#   (`rl.lm.build_reward_model`). Starting from the supervised model, as Ouyang et al. 2022 do, it
#   begins with everything that model knows about addition. `rl.lm.train_reward_model` minimises (12.3)
#   with AdamW.

# %%
task, tok = rl.lm.AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0), rl.lm.build_char_tokenizer()
sft_config = rl.lm.SFTConfig(num_steps=rl.by_size(small=800, full=2000), seed=0)  # chapter 8's settings
SFT_CHECKPOINT = rl.runs_dir() / "checkpoints" / "ch08_sft"
policy, _, loaded = rl.lm.load_or_train_sft(tok, task, sft_config, checkpoint=SFT_CHECKPOINT)
print("supervised model:", "loaded from chapter 8's checkpoint" if loaded else "trained here (no matching checkpoint)")
print(inspect.getsource(rl.lm.reward_model_step).split('"""')[-1])


# %%
def sample_answer_pairs(num_prompts, split, seed):
    """Two sampled answers per prompt; keeps well-formed pairs with different gold rewards.

    Returns (prompts, answers_a, answers_b, gold_a (P,), gold_b (P,)) and the share of pairs kept.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    problems = task.sample_problems(num_prompts, gen, split=split)
    prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, [q.prompt for q in problems])
    out = rl.lm.sample_completions(
        policy, prompt_ids.to(device), prompt_mask.to(device), num_samples=2, max_new_tokens=8,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, forbidden_ids=rl.lm.forbidden_token_ids(tok),
        generator=gen, tokenizer=tok,
    )
    well_formed = lambda text: len(text) == 3 + len(tok.eos_token) and text[:3].isdigit() and text.endswith(tok.eos_token)
    kept = ([], [], [], [], [])
    for q, text_a, text_b in zip(problems, out.texts[0::2], out.texts[1::2]):
        if well_formed(text_a) and well_formed(text_b):
            gold_a, gold_b = gold_reward(q.prompt, text_a[:3]), gold_reward(q.prompt, text_b[:3])
            if gold_a != gold_b:
                for column, value in zip(kept, (q.prompt, text_a[:3], text_b[:3], gold_a, gold_b)):
                    column.append(value)
    prompts, a, b, gold_a, gold_b = kept
    return (prompts, a, b, torch.tensor(gold_a, dtype=torch.float64), torch.tensor(gold_b, dtype=torch.float64)), len(prompts) / num_prompts


def label_pairs(pairs, temperature, seed):
    """Bradley–Terry labels at noise level T by the library's `bradley_terry_labels` (T = 0: the larger gold
    reward wins): (chosen, rejected) lists and the share of labels against the gold order."""
    prompts, a, b, gold_a, gold_b = pairs
    a_wins, _ = rl.lm.bradley_terry_labels(gold_a, gold_b, temperature, torch.Generator().manual_seed(seed))
    chosen = [x if w else y for x, y, w in zip(a, b, a_wins.tolist())]
    rejected = [y if w else x for x, y, w in zip(a, b, a_wins.tolist())]
    return chosen, rejected, (a_wins != (gold_a > gold_b)).double().mean().item()


train_pairs, kept_train = sample_answer_pairs(rl.by_size(small=6000, full=12000), "train", seed=1)
test_pairs, kept_test = sample_answer_pairs(1200, "held_out", seed=2)
test_chosen, test_rejected, _ = label_pairs(test_pairs, 0.0, seed=0)  # held-out pairs ordered by the gold reward
print(f"training pairs: {len(train_pairs[0])} ({kept_train:.0%} of the prompts)   held-out pairs: {len(test_pairs[0])}")
with_right = ((test_pairs[3] == 2.0) | (test_pairs[4] == 2.0)).double().mean().item()
print(f"held-out pairs with a right answer in them: {with_right:.2f}")
for i in range(4):
    print(f"  {train_pairs[0][i]} {train_pairs[1][i]} (gold {train_pairs[3][i]:+.2f})  vs  {train_pairs[2][i]} (gold {train_pairs[4][i]:+.2f})")

# %% [markdown]
# **Accuracy against data and noise.** We train reward models on $N$ = 25 to 1,600 comparisons at two
# noise levels, $T = 0$ (every label follows the gold order) and $T = 3$, and measure the share of
# *held-out* pairs (prompts never trained on) that each orders as the gold reward does. Every model gets
# the same training budget, 100 steps of 32 pairs, so a small data set is seen many times over and a
# large one about twice: the difference between the points is the data, not the compute. At $T = 0$ the
# smallest and the largest data set are repeated with four more seeds (another subset of pairs and other
# minibatches); at each $N$ the two noise levels share the pairs and the minibatches and differ only in
# their labels.

# %%
SIZES = [25, 100, 400, 1600]
TEMPERATURES = [0.0, 3.0]
RM_CONFIG = dict(num_steps=rl.by_size(small=100, full=400), batch_size=32, lr=1e-3)
SEEDS = range(5)
runs = [(n, T, 0) for T in TEMPERATURES for n in SIZES] + [(n, 0.0, s) for s in SEEDS[1:] for n in (SIZES[0], SIZES[-1])]
accuracy, flip_share, reward_models = {}, {}, {}
for n, T, seed in tqdm(runs, desc="reward models"):
    subset = torch.randperm(len(train_pairs[0]), generator=torch.Generator().manual_seed(seed))[:n].tolist()
    pairs = tuple([column[i] for i in subset] for column in train_pairs[:3]) + tuple(column[subset] for column in train_pairs[3:])
    chosen, rejected, flip_share[n, T, seed] = label_pairs(pairs, T, seed)
    reward_model = rl.lm.build_reward_model(policy)
    rl.lm.train_reward_model(reward_model, tok, pairs[0], chosen, rejected, rl.lm.RewardModelConfig(seed=seed, **RM_CONFIG),
                             progress=False)
    accuracy[n, T, seed] = rl.lm.reward_model_accuracy(reward_model, tok, test_pairs[0], test_chosen, test_rejected)
    reward_models[n, T, seed] = reward_model
for T in TEMPERATURES:
    print(f"T = {T:g}: labels against the gold order {flip_share[SIZES[-1], T, 0]:.1%}   held-out accuracy by N: "
          + "  ".join(f"{n}: {accuracy[n, T, 0]:.3f}" for n in SIZES))
for n in (SIZES[0], SIZES[-1]):
    print(f"T = 0, N = {n:>4}, seeds 0–4: " + "  ".join(f"{accuracy[n, 0.0, s]:.3f}" for s in SEEDS))
more_data = rl.compare([accuracy[SIZES[-1], 0.0, s] for s in SEEDS], [accuracy[SIZES[0], 0.0, s] for s in SEEDS],
                       names=(f"N={SIZES[-1]}", f"N={SIZES[0]}"))
noisier = rl.compare([accuracy[n, 3.0, 0] for n in SIZES], [accuracy[n, 0.0, 0] for n in SIZES], names=("T=3", "T=0"),
                     unit="data-set sizes")
print(more_data)
print(noisier)

# %%
ax = rl.get_ax(figsize=(5.5, 3.4))
for k, T in enumerate(TEMPERATURES):
    ax.plot(SIZES, [accuracy[n, T, 0] for n in SIZES], "o-", color=f"C{k}", label=f"T = {T:g}, seed 0")
for n in (SIZES[0], SIZES[-1]):
    ax.plot([n] * (len(SEEDS) - 1), [accuracy[n, 0.0, s] for s in SEEDS[1:]], "x", color="C0", ms=7)
ax.plot([], [], "x", color="C0", label="T = 0, seeds 1–4")
ax.set_xscale("log", base=2)
ax.set_xticks(SIZES, [str(n) for n in SIZES])
ax.set_xlabel("comparisons N (100 steps of 32 pairs each)")
ax.set_ylabel("held-out pair accuracy")
ax.set_title("Reward model accuracy against the gold order", fontsize=9)
ax.legend(fontsize=9)
plt.tight_layout();

# %% [markdown]
# The cell printed two paired differences of this run, and neither is evidence by the book's standard of
# ten paired seeds: the first is over five seeds, and the second is over $n = 4$ data-set sizes, which are
# nested subsets of one draw trained with one seed, not independent replicates. Read both as inconclusive.
# A difference of a few points between single reward models is also within what another machine's float
# order (another supervised model, other minibatches) can shift. The benchmark `benchmarks/reward_model_noise.py` therefore repeats this loop on
# ten paired seeds at 25 and 1,600 comparisons, both temperatures; the next cell prints it. Noisier labels
# cost accuracy: the reward models trained at $T = 3$ (where about 30 % of the labels go against the gold
# order) order fewer held-out pairs correctly than those trained at $T = 0$, at 1,600 comparisons by about
# three points and at 25 by about seven. More comparisons help too: from 25 to 1,600 comparisons, at the
# same budget of steps, held-out accuracy rises over the ten paired seeds, at both noise levels. But even
# the models trained on 1,600 noise-free comparisons order only between 0.68 and 0.80 of the held-out pairs
# correctly (0.72 on average over the ten seeds), and at 25 comparisons the seeds spread widely. Where do the errors sit?
# Splitting the held-out pairs of the model trained on 1,600 noise-free comparisons by kind:

# %%
rm_bench = rl.benchmark_results("reward_model_noise")
print(rm_bench["command"])
bench_acc = rm_bench["accuracy"]
print(f"{'seed':>4}" + "".join(f"{k:>13}" for k in bench_acc))
for i, seed in enumerate(rm_bench["seeds"]):
    print(f"{seed:>4}" + "".join(f"{v[i]:>13.3f}" for v in bench_acc.values()))
bench_noise = {n: rl.compare(bench_acc[f"N={n},T=3"], bench_acc[f"N={n},T=0"], names=(f"T=3, N={n}", f"T=0, N={n}")) for n in (25, 1600)}
bench_data = {T: rl.compare(bench_acc[f"N=1600,T={T}"], bench_acc[f"N=25,T={T}"], names=(f"N=1600, T={T}", f"N=25, T={T}")) for T in (0, 3)}
print(*bench_noise.values(), *bench_data.values(), sep="\n")
for n in (25, 1600):
    rl.claim_comparison("the reward models trained at $T = 3$ (where about 30 % of the labels go against the gold order) order fewer held-out pairs correctly", bench_noise[n], "<")
rl.claim("at 1,600 comparisons by about three points", bench_noise[1600].mean_diff, -0.03, abs=0.005)
rl.claim("and at 25 by about seven", bench_noise[25].mean_diff, -0.07, abs=0.01)
rl.claim("where about 30 % of the labels go against the gold order", flip_share[SIZES[-1], 3.0, 0], 0.30, abs=0.05, bounds=(0, 1))
for T in (0, 3):
    rl.claim_comparison("held-out accuracy rises over the ten paired seeds, at both noise levels", bench_data[T], ">")
# the benchmark's ten seeds, and this run's model among them (within 4 sd of the ten)
best = bench_acc["N=1600,T=0"]
rl.claim("between 0.68 and 0.80 of the held-out pairs", min(best), 0.68)
rl.claim("between 0.68 and 0.80 of the held-out pairs", max(best), 0.80)
rl.claim("(0.72 on average over the ten seeds)", np.mean(best), 0.72)
rl.claim_in_spread("order only between 0.68 and 0.80 of the held-out pairs", accuracy[SIZES[-1], 0.0, 0], best, bounds=(0, 1))

# %%
main_model = reward_models[SIZES[-1], 0.0, 0]
kinds = {"a right answer against a wrong one": [], "two wrong answers": []}
for prompt, c, r in zip(test_pairs[0], test_chosen, test_rejected):
    kinds["a right answer against a wrong one" if gold_reward(prompt, c) == 2.0 else "two wrong answers"].append((prompt, c, r))
by_kind = {}
for kind, rows in kinds.items():
    prompts_k, chosen_k, rejected_k = (list(column) for column in zip(*rows))
    by_kind[kind] = rl.lm.reward_model_accuracy(main_model, tok, prompts_k, chosen_k, rejected_k)
    print(f"{kind:<36} {len(rows):>4} pairs   accuracy {by_kind[kind]:.3f}")

# %% [markdown]
# Telling a right answer from a one-digit slip is the part that needs arithmetic, and it is where the
# reward model errs most: it orders a clearly smaller share of the pairs with a right answer correctly than
# of the pairs of two wrong answers (both accuracies are printed above), whose gold order mostly follows a
# visibly wrong digit (a hundreds digit other than 0 or 1 is far from any sum of two two-digit numbers).
# Exercise 6 asks whether longer training raises both. For the rest of the chapter, this imperfect reward model is what a policy would be
# optimised against.

# %%
rl.claim("a clearly smaller share of the pairs with a right answer correctly",
         by_kind["a right answer against a wrong one"] - by_kind["two wrong answers"], high=-0.05)

# %% [markdown]
# ## 12.4 The KL-regularised objective and its optimum
#
# Step 3 of the recipe optimises the policy against the reward, but not freely. RLHF maximises
#
# $$J(\pi) = \mathbb E_{y\sim\pi}[r(x, y)] - \beta\,\mathrm{KL}\bigl(\pi(\cdot\mid x)\,\|\,\pi_{\text{ref}}(\cdot\mid x)\bigr),
# \qquad \beta > 0, \tag{12.5}$$
#
# per prompt (Ziegler et al. 2019, arXiv:1909.08593). Chapter 9's GRPO also penalises the KL, with a per-token
# $k_3$ term in its loss, but the end of this section shows that this penalty has a different optimum. The penalty keeps the policy where the reward model was trained and where the
# reference model's fluency still holds.
#
# **The optimum, derived.** Over a finite set of answers, define
#
# $$\pi^*(y) = \frac{\pi_{\text{ref}}(y)\, e^{r(y)/\beta}}{Z}, \qquad Z = \sum_y \pi_{\text{ref}}(y)\, e^{r(y)/\beta}. \tag{12.6}$$
#
# Then $r(y) = \beta\log\frac{\pi^*(y)}{\pi_{\text{ref}}(y)} + \beta\log Z$, and substituting into (12.5),
#
# $$\begin{aligned}J(\pi) &= \sum_y \pi(y)\Bigl[\beta\log\frac{\pi^*(y)}{\pi_{\text{ref}}(y)} + \beta\log Z - \beta\log\frac{\pi(y)}{\pi_{\text{ref}}(y)}\Bigr]\cr
# &= \beta\log Z - \beta\,\mathrm{KL}(\pi\,\|\,\pi^*).\end{aligned} \tag{12.7}$$
#
# A KL divergence is never negative and is zero only for equal distributions, so $\pi^*$ is the unique
# maximiser and the optimal value is $J(\pi^*) = \beta\log Z$ (the Gibbs variational principle; Korbak,
# Perez & Buckley 2022, arXiv:2205.11275, read (12.6) as Bayesian inference with $\pi_{\text{ref}}$ as the
# prior). Two limits: as $\beta \to \infty$, $\pi^* \to \pi_{\text{ref}}$ and the value tends to
# $\mathbb E_{\pi_{\text{ref}}}[r]$; as $\beta \to 0$, $\pi^*$ puts all its mass on the best answers that
# $\pi_{\text{ref}}$ can produce, and the value tends to their reward. (12.6) read backwards, a reward as
# $\beta$ times a log-ratio of policies, is where the next chapter's DPO starts (Rafailov et al. 2023,
# arXiv:2305.18290).
#
# | symbol | code | shape |
# |---|---|---|
# | $\pi_{\text{ref}}(y)$, $r(y)$ | `ref_probs`, `rewards` | `(..., K)`, $K$ answers |
# | $\pi^*$ | `rl.kl_regularised_optimum(ref_probs, rewards, beta)` | `(..., K)` |
# | $\beta\log Z$ | `rl.kl_regularised_value(ref_probs, rewards, beta)` | `(...)` |
# | $J(\pi)$ | `rl.kl_regularised_objective(probs, ref_probs, rewards, beta)` | `(...)` |

# %%
print(inspect.getsource(rl.kl_regularised_optimum).split('"""')[-1])
print(inspect.getsource(rl.kl_regularised_value).split('"""')[-1])

# %% [markdown]
# **Checked exactly on a bandit.** The five arms of §12.2, a reference policy that prefers the middling
# arms, and $\beta = 0.5$. The closed form is compared with a numerical maximisation that never uses it
# (`rl.reference.kl_regularised_optimum_search`: mirror ascent on the simplex), its value with
# $\beta\log Z$, and identity (12.7) with random policies.

# %%
# NBVAL_CHECK_OUTPUT
ref_bandit = torch.tensor([0.10, 0.15, 0.30, 0.30, 0.15], dtype=torch.float64)
beta = 0.5
pi_star = rl.kl_regularised_optimum(ref_bandit, GOLD_ARMS, beta)
searched = rl.reference.kl_regularised_optimum_search(ref_bandit, GOLD_ARMS, beta)
value = rl.kl_regularised_value(ref_bandit, GOLD_ARMS, beta)
print("π_ref        ", ref_bandit.numpy().round(4))
print("π* (12.6)    ", pi_star.numpy().round(4))
print("π* by search ", searched.numpy().round(4), "  max |difference| < 1e-9:", (pi_star - searched).abs().max().item() < 1e-9)
print(f"J(π*) = {rl.kl_regularised_objective(pi_star, ref_bandit, GOLD_ARMS, beta).item():.6f}   β·log Z = {value.item():.6f}")
random_policies = torch.softmax(torch.randn(1000, K, dtype=torch.float64, generator=torch.Generator().manual_seed(0)), -1)
J = rl.kl_regularised_objective(random_policies, ref_bandit.expand(1000, K), GOLD_ARMS.expand(1000, K), beta)
gibbs = value - beta * rl.categorical_kl(random_policies.log(), pi_star.log().expand(1000, K))
print("1000 random π: max |J(π) − (β·log Z − β·KL(π‖π*))| < 1e-12:", (J - gibbs).abs().max().item() < 1e-12,
      "  every J(π) < β·log Z:", bool((J < value).all()))

# %% [markdown]
# **Checked exactly on the book's model.** Take one held-out prompt, "60+44=". Every well-formed answer
# is three digits and EOS, so there are exactly 1,000 of them, and the supervised model's own
# log-probabilities (`rl.lm.completion_log_probs`, summed over the four tokens) give each one's
# probability. Those 1,000 answers carry almost all of the model's mass; renormalised over them they
# are $\pi_{\text{ref}}$, a distribution we can hold in memory in full. With the gold reward (12.1) as $r$,
# everything in (12.5)–(12.7) is a finite sum.

# %%
ANSWERS = [f"{k:03d}" for k in range(1000)]
ANSWER_IDS = torch.tensor([ids + [tok.eos_token_id] for ids in tok(ANSWERS, add_special_tokens=False).input_ids])


@torch.no_grad()
def answer_log_probs(model, prompt):
    """(1000,) float64: log π(y + EOS | prompt) of every three-digit answer y, summed over its tokens."""
    prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, [prompt])
    log_probs = rl.lm.completion_log_probs(model, prompt_ids.to(device), ANSWER_IDS.to(device), prompt_mask.to(device),
                                           forbidden_ids=rl.lm.forbidden_token_ids(tok))  # (1000, 4), one prompt shared
    return log_probs.double().sum(-1).cpu()


PROMPT = task.held_out_problems(1)[0].prompt
log_p = answer_log_probs(policy, PROMPT)
ref_probs = torch.softmax(log_p, -1)  # π_ref over the 1000 answers (renormalised)
gold = torch.tensor([gold_reward(PROMPT, y) for y in ANSWERS], dtype=torch.float64)
right = int(gold.argmax())
print(f"prompt {PROMPT}  right answer {ANSWERS[right]}   mass on the 1000 answers: {log_p.exp().sum().item():.4f}")
print(f"π_ref(right answer) = {ref_probs[right].item():.3f}   E_π_ref[r_gold] = {(ref_probs * gold).sum().item():.3f}")
top = torch.argsort(ref_probs, descending=True)[:8]
print("most likely answers:", "  ".join(f"{ANSWERS[i]} {ref_probs[i].item():.3f}" for i in top))

for beta in (4.0, 1.0, 0.5, 0.25):
    pi_star = rl.kl_regularised_optimum(ref_probs, gold, beta)
    searched = rl.reference.kl_regularised_optimum_search(ref_probs, gold, beta)
    value = rl.kl_regularised_value(ref_probs, gold, beta)
    J_star = rl.kl_regularised_objective(pi_star, ref_probs, gold, beta)
    # (12.6) read backwards: log π* − log π_ref − r/β is the same constant, −log Z, for all 1000 answers
    spread = (pi_star.log() - ref_probs.log() - gold / beta).max() - (pi_star.log() - ref_probs.log() - gold / beta).min()
    print(f"β = {beta:<5g} π*(right) = {pi_star[right].item():.4f}   KL(π*‖π_ref) = {rl.categorical_kl(pi_star.log(), ref_probs.log()).item():.4f}"
          f"   β·log Z = {value.item():.6f}   |J(π*) − β·log Z| = {abs(J_star - value).item():.1e}"
          f"   max |π* − search| = {(pi_star - searched).abs().max().item():.1e}   spread of log π* − log π_ref − r/β: {spread.item():.1e}")
    assert abs(J_star - value).item() < 1e-9 and (pi_star - searched).abs().max().item() < 1e-9 and spread.item() < 1e-9

# %% [markdown]
# All three checks hold to $10^{-9}$ or better at every $\beta$: the closed form is the maximiser, its
# value is $\beta\log Z$, and $\log\pi^* - \log\pi_{\text{ref}} - r/\beta$ is one constant over all 1,000
# answers. The model gives the right answer about half of its mass; the rest is spread over the
# one-digit mistakes its noisy training labels taught it. (How much exactly is a property of one training
# run: `benchmarks/reference_policy.py` repeated §§12.4–12.5 for ten supervised models, and their right
# answers carry between 0.37 and 0.56; this one's share is printed above.)
#
# How $\pi^*$ moves with $\beta$: the left panel shows the twelve answers the model finds most likely.
# As $\beta$ falls, mass flows to the right answer first (its reward is 2.3 above any other), and
# among the wrong answers from far misses (a wrong hundreds digit, $r \approx -2.7$) to near ones (a wrong
# units digit, $r$ between $-0.3$ and $-0.7$). The right panel follows the trade-off: the expected gold reward rises
# and the KL grows as $\beta$ falls, and the value $\beta\log Z$ lies below the expected reward by exactly
# $\beta\,\mathrm{KL}$, the price (12.5) charges for the distance.

# %%
betas = np.logspace(-1.3, 1.3, 60)
curve = {"reward": [], "kl": [], "value": []}
for beta in betas:
    pi_star = rl.kl_regularised_optimum(ref_probs, gold, float(beta))
    curve["reward"].append((pi_star * gold).sum().item())
    curve["kl"].append(rl.categorical_kl(pi_star.log(), ref_probs.log()).item())
    curve["value"].append(rl.kl_regularised_value(ref_probs, gold, float(beta)).item())
shown = torch.argsort(ref_probs, descending=True)[:12].sort().values  # the 12 likeliest answers, in numeric order
fig, axes = plt.subplots(2, 1, figsize=(8.4, 6.6), dpi=80)
width = 0.2
for k, beta in enumerate([None, 4.0, 1.0, 0.5]):
    probs = ref_probs if beta is None else rl.kl_regularised_optimum(ref_probs, gold, beta)
    axes[0].bar(np.arange(12) + (k - 1.5) * width, probs[shown].numpy(), width=width,
                label="π_ref" if beta is None else f"π*, β = {beta:g}")
axes[0].set_xticks(np.arange(12), [f"{ANSWERS[i]}\n{gold[i].item():+.1f}" for i in shown], fontsize=8.5)
axes[0].set_xlabel(f"answer to {PROMPT} and its gold reward", fontsize=9)
axes[0].set_ylabel("probability")
axes[0].set_yscale("log")
axes[0].set_title("π* = π_ref·exp(r/β)/Z on the model's likeliest answers", fontsize=9)
axes[0].legend(fontsize=8.5, ncol=2)
axes[1].semilogx(betas, curve["reward"], label="E_π*[r_gold]")
axes[1].semilogx(betas, curve["value"], "--", label="β·log Z (the optimal value)")
axes[1].semilogx(betas, curve["kl"], label="KL(π*‖π_ref), nats")
axes[1].set_xlabel("β")
axes[1].set_title("The trade-off as β moves", fontsize=9)
axes[1].legend(fontsize=9)
plt.tight_layout();
pi_ref_right = ref_probs[right].item()

# %%
ref_bench = rl.benchmark_results("reference_policy")  # §§12.4–12.5 for ten supervised models
print(ref_bench["command"])
print("π_ref(right answer) over the ten models: " + "  ".join(f"{v:.3f}" for v in ref_bench["pi_ref_right"]))
rl.claim("The model gives the right answer about half of its mass", np.mean(ref_bench["pi_ref_right"]), 0.5, abs=0.05, bounds=(0, 1))
rl.claim("their right answers carry between 0.37 and 0.56", min(ref_bench["pi_ref_right"]), 0.37, abs=0.005)
rl.claim("their right answers carry between 0.37 and 0.56", max(ref_bench["pi_ref_right"]), 0.56, abs=0.005)
rl.claim_in_spread("The model gives the right answer about half of its mass", pi_ref_right, ref_bench["pi_ref_right"], bounds=(0, 1))

# %% [markdown]
# **What RL converges to: the KL in the reward or in the loss.** (12.6) is the maximiser of (12.5), but an
# RL algorithm lands on it only if the fixed point of its update is (12.6), and that depends on where the
# algorithm puts the KL. Two placements are in use.
#
# * *In the reward.* Ziegler et al. 2019 (arXiv:1909.08593) and InstructGPT (Ouyang et al. 2022,
#   arXiv:2203.02155) subtract the penalty from the reward of each sample, per token and summed over the
#   answer, $\tilde r(y) = r(y) - \beta\log\frac{\pi(y)}{\pi_{\text{ref}}(y)}$, and run a policy gradient
#   (REINFORCE, PPO) on $\tilde r$ as if it were the reward. For a softmax policy over the answers, with
#   logits $\theta$, the expected update is $\pi(y)\bigl(\tilde r(y) - \mathbb E_\pi[\tilde r]\bigr)$ in $\theta_y$
#   (differentiating the $\log\pi$ inside $\tilde r$ adds a term whose expectation is zero). This is the
#   gradient of (12.5) itself. It vanishes where $\tilde r$ is one constant over all answers, that is where
#   $\log\frac{\pi}{\pi_{\text{ref}}} = (r - c)/\beta$: at (12.6).
# * *In the loss.* GRPO (Shao et al. 2024, arXiv:2402.03300; chapter 9) leaves the reward alone and adds
#   $\beta\,k_3$ to the loss, per token. By §5.8, the expected gradient of $k_3$ used as a loss is the
#   gradient of the *forward* KL, $\mathrm{KL}(\pi_{\text{ref}}\,\|\,\pi)$, not of the $\mathrm{KL}(\pi\,\|\,\pi_{\text{ref}})$
#   whose value it estimates. The expected update is
#   $\pi(y)\bigl(r(y) - \mathbb E_\pi[r]\bigr) - \beta\bigl(\pi(y) - \pi_{\text{ref}}(y)\bigr)$, the gradient of
#   $\mathbb E_\pi[r] - \beta\,\mathrm{KL}(\pi_{\text{ref}}\,\|\,\pi)$. Setting it to zero gives
#   $r(y) + \beta\,\pi_{\text{ref}}(y)/\pi(y) = \lambda$ for every answer, so
#   $\pi(y) = \beta\,\pi_{\text{ref}}(y)/(\lambda - r(y))$, with $\lambda > \max_y r(y)$ fixed by normalisation.
#   A bad answer's probability falls like $1/(\lambda - r)$ instead of $e^{r/\beta}$, so this optimum keeps
#   much more of $\pi_{\text{ref}}$'s mass on bad answers than (12.6) does.
#
# We run both expected updates exactly (every answer's term computed, nothing sampled) on the bandit above,
# $\beta = 0.5$, by 4,000 steps of gradient ascent on the logits from $\pi_{\text{ref}}$.

# %%
# NBVAL_CHECK_OUTPUT
BANDIT_BETA = 0.5
bandit_pi_star = rl.kl_regularised_optimum(ref_bandit, GOLD_ARMS, BANDIT_BETA)


def expected_update(theta, kl_in):
    """The expected policy-gradient step on the bandit's logits θ (K,), with the KL in the reward or in the loss."""
    pi = torch.softmax(theta, -1)
    if kl_in == "reward":  # REINFORCE on r − β·log(π/π_ref), the KL-shaped reward of Ziegler et al.
        shaped = GOLD_ARMS - BANDIT_BETA * (pi.log() - ref_bandit.log())
        return pi * (shaped - (pi * shaped).sum())
    # GRPO-style: REINFORCE on r, plus β·k3 as a loss, whose expected gradient in θ is ∇KL(π_ref ‖ π) = π − π_ref
    return pi * (GOLD_ARMS - (pi * GOLD_ARMS).sum()) - BANDIT_BETA * (pi - ref_bandit)


fixed_point = {}
for kl_in in ("reward", "loss"):
    theta = ref_bandit.log().clone()
    for _ in range(4000):
        theta = theta + 2.0 * expected_update(theta, kl_in)
    fixed_point[kl_in] = torch.softmax(theta, -1)


def forward_kl_optimum(ref_probs, rewards, beta):
    """argmax_π E_π[r] − β·KL(π_ref ‖ π) = β·π_ref/(λ − r), λ > max r by bisection so that it sums to 1."""
    low, high = rewards.max().item(), rewards.max().item() + beta + 1.0  # the sum falls from ∞ to below 1 on (low, high]
    for _ in range(200):
        lam = (low + high) / 2
        low, high = (lam, high) if (beta * ref_probs / (lam - rewards)).sum().item() > 1 else (low, lam)
    return beta * ref_probs / ((low + high) / 2 - rewards)


forward_optimum = forward_kl_optimum(ref_bandit, GOLD_ARMS, BANDIT_BETA)
reward_gap = (fixed_point["reward"] - bandit_pi_star).abs().max().item()
worst_ratio = (fixed_point["loss"][-1] / bandit_pi_star[-1]).item()
print("π_ref                          ", ref_bandit.numpy().round(4))
print("π* (12.6)                      ", bandit_pi_star.numpy().round(4))
print("KL in the reward: fixed point  ", fixed_point["reward"].numpy().round(4), f"  max |· − π*| < 1e-9: {reward_gap < 1e-9}")
print("k3 in the loss: fixed point    ", fixed_point["loss"].numpy().round(4))
print("β·π_ref/(λ − r), forward KL    ", forward_optimum.numpy().round(4),
      f"  max |· − k3 fixed point| < 1e-9: {(fixed_point['loss'] - forward_optimum).abs().max().item() < 1e-9}")
print(f"mass on the worst arm (r = −1): π* {bandit_pi_star[-1].item():.4f}, k3 in the loss {fixed_point['loss'][-1].item():.4f}, "
      f"{worst_ratio:.2f} times π*'s")
assert (fixed_point["loss"] - forward_optimum).abs().max().item() < 1e-9

# %% [markdown]
# With the KL in the reward, the expected update lands on $\pi^*$ to within $10^{-9}$. With $k_3$ in the
# loss it lands on the forward-KL optimum $\beta\,\pi_{\text{ref}}/(\lambda - r)$ instead. That optimum keeps
# 6.08 times $\pi^*$'s mass on the worst arm. The two rules are
# not two estimates of one objective: they optimise different objectives, which agree only to first order
# near $\pi = \pi_{\text{ref}}$ (§5.8). Chapter 9's GRPO therefore does not solve (12.5). Two more details of
# GRPO shift its fixed point again. Its group baseline is the mean of $G$ samples, including the sample
# itself, which scales the reward term by $(G-1)/G$ and so acts as a slightly larger $\beta$. Its division by
# the group's standard deviation rescales the reward per prompt. Neither changes the forward KL into the
# reverse one. To make an RL run target (12.6), put the penalty in the reward, as Ziegler et al. and
# InstructGPT do.

# %%
rl.claim("lands on $\\pi^*$ to within $10^{-9}$", reward_gap, high=1e-9)
rl.claim("6.08 times $\\pi^*$'s mass on the worst arm", worst_ratio, 6.08)

# %% [markdown]
# ## 12.5 Best-of-N: the simplest policy that uses a reward
#
# Best-of-$N$ needs no training at all: draw $N$ answers from $\pi_{\text{ref}}$, score them, return the one
# with the highest reward (Stiennon et al. 2020; Nakano et al. 2021, arXiv:2112.09332, call it rejection
# sampling). It is the first thing to try with a reward model, and the point of comparison for any RL
# method: to be worth its training, RL has to reach a higher reward than best-of-$N$ at the same KL, or the
# same reward with fewer samples per query.
#
# **Its distribution.** Let $F(v) = P_{\pi_{\text{ref}}}(r(Y) \le v)$ and $F^-(v) = P_{\pi_{\text{ref}}}(r(Y) < v)$.
# The best of $N$ independent draws has reward exactly $v$ with probability $F(v)^N - F^-(v)^N$ (all $N$ at
# most $v$, not all below it). If no other answer shares $y$'s reward, best-of-$N$ returns $y$ with exactly
# that probability; answers with equal rewards share it in proportion to $\pi_{\text{ref}}$:
#
# $$\begin{gathered}\pi_N(y) = \frac{\pi_{\text{ref}}(y)}{\pi_{\text{ref}}(L_y)}\Bigl(F(r(y))^N - F^-(r(y))^N\Bigr),\cr
# L_y = \{y' : r(y') = r(y)\}.\end{gathered} \tag{12.8}$$
#
# (Beirami et al. 2024, arXiv:2401.01879, Lemma 1, for distinct rewards.)

# %%
print(inspect.getsource(rl.best_of_n_probs).split('"""')[-1])

# %% [markdown]
# **Checked by listing every draw.** On the bandit (with a tie between two arms, to exercise the shared
# case) we list all $5^N$ ordered draws of $N$ arms, keep the first (or the last) of highest reward, and
# add up the probabilities: `rl.reference.best_of_n_probs_enumeration`. On the book's model, where
# $1000^N$ draws are too many, we sample instead: 20,000 sets of $N = 4$ answers from $\pi_{\text{ref}}$.

# %%
# NBVAL_CHECK_OUTPUT
tied = torch.tensor([1.5, 1.0, 1.0, 0.0, -1.0], dtype=torch.float64)
for n in (1, 2, 3, 4):
    exact = rl.best_of_n_probs(ref_bandit, tied, n)
    listed = {keep: torch.tensor(rl.reference.best_of_n_probs_enumeration(ref_bandit, tied, n, keep=keep), dtype=torch.float64)
              for keep in ("first", "last")}
    agree = all((exact - v).abs().max().item() < 1e-12 for v in listed.values())
    print(f"N = {n}: π_N = {exact.numpy().round(4)}   equals the enumeration of all {5 ** n} draws (first and last kept): {agree}")

# %%
N, draws = 4, 20_000
samples = torch.multinomial(ref_probs, N * draws, replacement=True, generator=torch.Generator().manual_seed(0)).view(draws, N)
best_rewards = gold[samples].max(-1, keepdim=True).values
kept = samples.gather(1, (gold[samples] == best_rewards).double().argmax(-1, keepdim=True)).squeeze(1)  # first best
exact = rl.best_of_n_probs(ref_probs, gold, N)
frequency = torch.bincount(kept, minlength=1000).double() / draws
z = (frequency - exact) / torch.sqrt(exact * (1 - exact) / draws).clamp_min(1e-12)
for i in torch.argsort(exact, descending=True)[:5]:
    print(f"{ANSWERS[i]}: π_ref {ref_probs[i].item():.4f}   best-of-4 exact {exact[i].item():.4f}   sampled {frequency[i].item():.4f}")
print(f"largest |z| over the answers with π_4 > 0.001: {z[exact > 1e-3].abs().max().item():.2f}")
assert z[exact > 1e-3].abs().max().item() < 4.5

# %% [markdown]
# **Its KL from $\pi_{\text{ref}}$.** A formula for $\mathrm{KL}(\pi_N\,\|\,\pi_{\text{ref}})$ travels through the
# literature (Stiennon et al. 2020, App. G.3; Gao, Schulman & Hilton 2022, arXiv:2210.10760):
#
# $$\mathrm{KL}_{\text{bon}} = \log N - \frac{N - 1}{N}. \tag{12.9}$$
#
# It is exact when the reward of a draw is a continuous random variable (no two answers tie and none
# carries probability mass of its own). Beirami et al. 2024 prove that in general it is only an **upper
# bound**, and we can see how loose it is, because (12.8) gives the exact KL by a finite sum. Three
# reference distributions: the model's 1,000 answers to "60+44=" (one answer carries about half of the mass),
# 1,000 equally likely answers with distinct rewards (close to the continuous case), and 10 equally
# likely answers with distinct rewards.

# %%
Ns = [2 ** k for k in range(11)]
uniform = lambda K_: (torch.full((K_,), 1.0 / K_, dtype=torch.float64), torch.arange(K_, dtype=torch.float64))
cases = {f"the model's answers to {PROMPT}": (ref_probs, gold), "1000 equally likely answers": uniform(1000),
         "10 equally likely answers": uniform(10)}
exact_kl = {name: [rl.best_of_n_kl(p, r, n).item() for n in Ns] for name, (p, r) in cases.items()}
bound = [rl.best_of_n_kl_bound(n) for n in Ns]
print(f"{'N':>5} {'formula (12.9)':>15}" + "".join(f"{name[:26]:>28}" for name in cases))
for k, n in enumerate(Ns):
    print(f"{n:>5} {bound[k]:>15.4f}" + "".join(f"{max(exact_kl[name][k], 0.0):>28.4f}" for name in cases))
largest_excess = max(kl[k] - bound[k] for kl in exact_kl.values() for k in range(1, len(Ns)))
model_kl = exact_kl[f"the model's answers to {PROMPT}"]
near_continuous = exact_kl["1000 equally likely answers"]
print(f"largest exact KL − formula over N ≥ 2: {largest_excess:.2e}   −log π_ref(right answer) = {-math.log(pi_ref_right):.4f}")

# %%
ax = rl.get_ax(figsize=(5.5, 3.4))
ax.semilogx(Ns, bound, "k--", label="log N − (N−1)/N (12.9)")
for name, kl in exact_kl.items():
    ax.semilogx(Ns, kl, "o-", ms=3, label=f"exact: {name}")
ax.set_xlabel("N")
ax.set_ylabel("KL(π_N ‖ π_ref), nats")
ax.set_title("Best-of-N's KL: the formula is an upper bound", fontsize=9)
ax.legend(fontsize=8.5)
plt.tight_layout();

# %% [markdown]
# The exact KL never exceeds the formula, for any of the three, at any $N \ge 2$. With 1,000 equally likely
# answers the two agree closely up to $N$ of a few hundred (at $N = 16$ within 1 %); with 10 answers they part
# from about $N = 8$, and the exact KL levels off at $\log 10$. On the model's answers the formula is badly wrong: the right answer alone carries about half of the
# mass, so best-of-$N$ can never move further than putting all its mass there, and its KL levels off at
# $-\log \pi_{\text{ref}}$ of the right answer, at most about one nat (over the ten supervised models of the
# benchmark, between 0.59 and 1.00 nats), where the formula keeps growing like $\log N$
# (at $N = 1024$ the formula says 5.93 nats). A model that puts much of its mass on a few answers, as a
# confident language model does on a short answer, is exactly where (12.9) misleads.

# %%
rl.claim("The exact KL never exceeds the formula", largest_excess, high=0.0)
rl.claim("at $N = 16$ within 1 %", 1 - near_continuous[4] / bound[4], high=0.01, bounds=(0, 1))
rl.claim("between 0.59 and 1.00 nats", min(ref_bench["bon_kl_level"]), 0.59, abs=0.005)
rl.claim("between 0.59 and 1.00 nats", max(ref_bench["bon_kl_level"]), 1.00, abs=0.005)
rl.claim_in_spread("its KL levels off at", model_kl[-1], ref_bench["bon_kl_level"])
rl.claim("at $N = 1024$ the formula says 5.93 nats", bound[-1], 5.93, abs=0.005)
assert abs(model_kl[-1] + math.log(pi_ref_right)) < 1e-6

# %% [markdown]
# **Reward against KL, best-of-$N$ beside $\pi^*$.** Plot the expected gold reward of each policy against
# $\sqrt{\mathrm{KL}}$ from $\pi_{\text{ref}}$ (the axis Gao, Schulman & Hilton 2022 use, on which their
# reward curves are close to straight). By (12.7), $\pi^*_\beta$ maximises $\mathbb E[r] - \beta\,\mathrm{KL}$,
# so no policy with the same KL has a higher expected reward: the $\pi^*$ curve is the frontier, and
# best-of-$N$ must lie on or under it. To measure by how much, we find for each $N$ the $\beta$ at which
# $\pi^*_\beta$ has exactly best-of-$N$'s KL (bisection on $\log\beta$; the KL of $\pi^*_\beta$ falls as $\beta$
# grows) and compare their expected gold rewards.

# %%
def beta_with_kl(ref_probs, rewards, target_kl, iters=200):
    """The β at which KL(π*_β ‖ π_ref) equals ``target_kl`` (bisection on log β in [1e-4, 1e4])."""
    low, high = math.log(1e-4), math.log(1e4)
    for _ in range(iters):
        mid = (low + high) / 2
        pi_star = rl.kl_regularised_optimum(ref_probs, rewards, math.exp(mid))
        low, high = (mid, high) if rl.categorical_kl(pi_star.log(), ref_probs.log()).item() > target_kl else (low, mid)
    return math.exp((low + high) / 2)


print(f"{'N':>4} {'KL':>8} {'E[r] best-of-N':>15} {'β matched':>10} {'E[r] π*':>9} {'gap':>9}")
gaps = []
for n in Ns[1:6]:
    kl_n = rl.best_of_n_kl(ref_probs, gold, n).item()
    reward_n = (rl.best_of_n_probs(ref_probs, gold, n) * gold).sum().item()
    beta_n = beta_with_kl(ref_probs, gold, kl_n)
    pi_star = rl.kl_regularised_optimum(ref_probs, gold, beta_n)
    assert abs(rl.categorical_kl(pi_star.log(), ref_probs.log()).item() - kl_n) < 1e-9
    gaps.append((pi_star * gold).sum().item() - reward_n)
    print(f"{n:>4} {kl_n:>8.4f} {reward_n:>15.4f} {beta_n:>10.4f} {(pi_star * gold).sum().item():>9.4f} {gaps[-1]:>9.5f}")

bon_reward = [(rl.best_of_n_probs(ref_probs, gold, n) * gold).sum().item() for n in Ns]
ax = rl.get_ax(figsize=(5.5, 3.4))
ax.plot(np.sqrt(curve["kl"]), curve["reward"], "-", label="π*_β (β from 20 down to 0.05)")
root_kl = np.sqrt(np.maximum(model_kl, 0.0))  # N = 1 is π_ref itself: its KL is 0 up to rounding, a hair either side
ax.plot(root_kl, bon_reward, "o", ms=4, label="best-of-N (N = 1, 2, 4, …, 1024)")
for n, x, y in zip(Ns[:3], root_kl[:3], bon_reward[:3]):
    ax.annotate(f"N={n}", (x, y), textcoords="offset points", xytext=(6, -10), fontsize=8.5)
ax.set_xlabel("√KL(· ‖ π_ref), √nats")
ax.set_ylabel(f"expected gold reward on {PROMPT}")
ax.set_title("Best-of-N against the KL-regularised frontier", fontsize=9)
ax.legend(fontsize=9, loc="lower right")
plt.tight_layout();

# %% [markdown]
# At $N$ = 2, 4 and 8, $\pi^*$ reaches a higher expected gold reward than best-of-$N$ at the same KL, but
# never by much: the largest gap is about a tenth of a reward unit at most (over the ten supervised models
# of the benchmark, from 0.035 to 0.102), on a scale where the right answer is 2.3
# above the nearest wrong one, and it shrinks as $N$ grows. From $N = 16$ on both have put almost all
# their mass on the right answer and the gap is below $10^{-4}$. Best-of-$N$ is close to the frontier, as Yang et al. 2024
# (arXiv:2404.01730) prove it becomes asymptotically (as the answers grow long, for a memoryless language
# model and a linear reward: their assumptions, not this model's), which is why it is so hard for an RL method to
# clearly improve on it at equal KL. What best-of-$N$ spends is not KL but samples: $N$ of them per
# answer, at every query.

# %%
rl.claim("reaches a higher expected gold reward than best-of-$N$ at the same KL", min(gaps[:3]), low=1e-9)
largest_gaps = [max(g) for g in ref_bench["gaps"]]
rl.claim("from 0.035 to 0.102", min(largest_gaps), 0.035, abs=5e-4)
rl.claim("from 0.035 to 0.102", max(largest_gaps), 0.102, abs=5e-4)
rl.claim_in_spread("the largest gap is about a tenth of a reward unit at most", max(gaps), largest_gaps)
rl.claim("the gap is below $10^{-4}$", max(gaps[3:]), high=1e-4)
assert all(a > b for a, b in zip(gaps[:3], gaps[1:4])), "the gap shrinks as N grows"

# %% [markdown]
# **Explore.** The explorer below puts §12.4 and §12.5 side by side over six answers with fixed rewards:
# move $\beta$ and watch $\pi^*$ tilt away from $\pi_{\text{ref}}$ (its expected reward, its KL and
# $\beta\log Z$ are printed), move $N$ and watch best-of-$N$'s distribution and its exact KL against the
# $\log N - (N-1)/N$ bound. The third panel is where the next chapter starts: DPO's per-pair gradient
# weight $\sigma(\hat r_{\text{rejected}} - \hat r_{\text{chosen}})$ against the implicit-reward margin,
# at the current $\beta$. The static figure shows it at $\beta$ = 0.5, $N$ = 4.

# %%
from rlbook.widgets.preference_explorer import FIGSIZE, plot_preference, preference_explorer, preference_readout

fig, axes = plt.subplots(2, 2, figsize=(8.4, 6.6), dpi=80)
fig.delaxes(axes[1, 1])
plot_preference(0.5, 4, axes=axes.ravel()[:3])
fig.tight_layout()
print(preference_readout(0.5, 4)[0]);

# %%
try:
    display(preference_explorer())  # move the sliders in a live notebook
except ImportError:
    print("ipywidgets is not installed: the static figure above shows the explorer at β = 0.5, N = 4")

# %% [markdown]
# ## 12.6 When the reward is learned: a first look at over-optimisation
#
# Everything in §12.4 and §12.5 optimised the gold reward itself. In RLHF the policy never sees it: it
# sees the reward model $r_\phi$ of §12.3, which agrees with the gold order on about 70 % of held-out
# pairs. Best-of-$N$ by $r_\phi$ can be computed exactly too: score all 1,000 answers of a prompt with the
# reward model, and (12.8) with $r_\phi$ in place of $r$ gives $\pi_N$; the gold reward then measures what the
# selection really bought. We do this for the first 8 held-out prompts and average, with best-of-$N$ by the
# gold reward alongside.

# %%
proxy_model = reward_models[SIZES[-1], 0.0, 0]


@torch.no_grad()
def answer_rewards(reward_model, prompt):
    """(1000,) float64: r_φ(prompt, y) of every three-digit answer y, read at its EOS.

    The pair layout puts the first 500 answers in the "chosen" rows and the last 500 in the "rejected"
    rows, so the rows come out in the order of ANSWERS."""
    batch = rl.lm.encode_preference_pairs(tok, [prompt] * 500, ANSWERS[:500], ANSWERS[500:])
    return rl.lm.sequence_rewards(reward_model, batch["input_ids"].to(device), batch["attention_mask"].to(device)).double().cpu()


eval_prompts = [q.prompt for q in task.held_out_problems(8)]
favourite_ref, scored = [], {}
measured = {name: {"gold": np.zeros((len(eval_prompts), len(Ns))), "kl": np.zeros((len(eval_prompts), len(Ns))),
                   "proxy": np.zeros((len(eval_prompts), len(Ns)))} for name in ("reward model", "gold reward")}
for j, prompt in enumerate(eval_prompts):
    ref_j = torch.softmax(answer_log_probs(policy, prompt), -1)
    gold_j = torch.tensor([gold_reward(prompt, y) for y in ANSWERS], dtype=torch.float64)
    proxy_j = answer_rewards(proxy_model, prompt)
    scored[prompt] = (ref_j, gold_j, proxy_j)  # kept for §12.7's ensembles
    proxy_j = proxy_j - (ref_j * proxy_j).sum()  # its level is arbitrary (§12.2): measured from its mean under π_ref
    for selector, score in (("reward model", proxy_j), ("gold reward", gold_j)):
        for k, n in enumerate(Ns):
            pi_n = rl.best_of_n_probs(ref_j, score, n)
            measured[selector]["gold"][j, k] = (pi_n * gold_j).sum().item()
            measured[selector]["proxy"][j, k] = (pi_n * proxy_j).sum().item()
            measured[selector]["kl"][j, k] = rl.best_of_n_kl(ref_j, score, n).item()
    favourite_ref.append(ref_j[proxy_j.argmax()].item())
    print(f"{prompt} right answer {ANSWERS[int(gold_j.argmax())]} (π_ref {ref_j[gold_j.argmax()].item():.2f})   "
          f"the reward model's favourite: {ANSWERS[int(proxy_j.argmax())]} (gold {gold_j[proxy_j.argmax()].item():+.2f}, "
          f"π_ref {favourite_ref[-1]:.1e})")
mean_gold = {s: m["gold"].mean(0) for s, m in measured.items()}
mean_kl = {s: m["kl"].mean(0) for s, m in measured.items()}
peak = int(np.argmax(mean_gold["reward model"]))
print(f"best-of-N by the reward model: mean gold reward {mean_gold['reward model'][0]:.3f} at N = 1, "
      f"peak {mean_gold['reward model'][peak]:.3f} at N = {Ns[peak]}, {mean_gold['reward model'][-1]:.3f} at N = {Ns[-1]}")
print(f"best-of-N by the gold reward: {mean_gold['gold reward'][-1]:.3f} at N = {Ns[-1]}")
for selector in measured:
    print(f"{selector:>13}: mean gold reward by N  " + "  ".join(f"{n}: {v:+.2f}" for n, v in zip(Ns, mean_gold[selector])))

# %%
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), dpi=80)
for selector, style in (("gold reward", "o-"), ("reward model", "s-")):
    axes[0].plot(np.sqrt(mean_kl[selector]), mean_gold[selector], style, ms=4, label=f"best-of-N by the {selector}")
axes[1].plot(np.sqrt(mean_kl["reward model"]), measured["reward model"]["proxy"].mean(0), "s-", ms=4, color="C1")
axes[0].set_ylabel("gold reward (mean of 8 prompts)")
axes[1].set_ylabel("r_φ score (0: its mean under π_ref)")
axes[0].set_title("What the selection bought, by the gold reward", fontsize=9)
axes[1].set_title("What the reward model believes it bought", fontsize=9)
for ax in axes:
    ax.set_xlabel("√KL(π_N ‖ π_ref), √nats (N = 1, 2, 4, …, 1024)")
axes[0].legend(fontsize=9)
plt.tight_layout();

# %% [markdown]
# Selecting by the reward model buys a little gold reward at first and then gives it back: the mean gold
# reward peaks early (at $N = 2$ here) and by $N = 1{,}024$ it has fallen far below that of a plain sample from
# $\pi_{\text{ref}}$ ($N = 1$), while best-of-$N$ by the gold reward climbs to the right answer on every
# prompt. Meanwhile the reward model's own score of the answers it selects rises at every $N$, as it must
# (selecting the best of more samples by a score cannot lower the expected score): by its own
# measure, selection keeps paying. The answers it ends up choosing are ones the supervised model almost
# never writes (on every one of the 8 prompts its favourite has a reference probability below 0.5 %). The reward
# model was trained on the supervised model's own samples; away from them its scores are extrapolation,
# and a large $N$ searches the tail of $\pi_{\text{ref}}$ for exactly the answers where the extrapolation errs
# upwards. This is **reward over-optimisation** (Gao, Schulman & Hilton 2022): the proxy reward rises
# while the gold reward peaks and falls. The KL penalty of (12.5) is the standard defence, since it
# limits how far into that tail a policy may move; Gao et al. found that it acts much like stopping the
# optimisation early, and this chapter does not measure it.

# %%
rl.claim("the mean gold reward peaks early", Ns[peak], low=2, high=4)
rl.claim("it has fallen far below that of a plain sample", mean_gold["reward model"][-1] - mean_gold["reward model"][0], high=-0.5)
rl.claim("the reward model's own score of the answers it selects rises at every $N$",
         np.diff(measured["reward model"]["proxy"].mean(0)).min(), low=1e-9)
rl.claim("its favourite has a reference probability below 0.5 %", max(favourite_ref), high=5e-3, bounds=(0, 1))

# %% [markdown]
# **The full measurement, over ten seeds.** Eight prompts and one reward model are an anecdote. Gao,
# Schulman & Hilton 2022 (arXiv:2210.10760) measured over-optimisation as curves: proxy and gold reward
# against $d = \sqrt{\mathrm{KL}(\pi\,\|\,\pi_{\text{ref}})}$, for best-of-$N$ and for RL, and fitted
# $R_{\text{bon}}(d) = d(\alpha - \beta d)$ and $R_{\text{RL}}(d) = d(\alpha - \beta\log d)$ to the gold reward's gain (their $\beta$,
# a fitted coefficient, not the KL coefficient). `benchmarks/overoptimisation.py` does the same on the
# scratchpad task of chapter 10, where answers can be short or long, with a gold reward of two parts,
# $r^* = \mathbb 1[\text{right}] - 0.5\,|o|/24$ (right answers first, then short ones;
# `rl.lm.preference_task.GoldReward`). For each seed: a supervised model, 300 comparisons of its samples
# labelled by Bradley–Terry on $r^*$ at $T = 0.25$, a reward model trained on them, best-of-$N$ on it
# ($N$ = 1 … 64, from 64 samples of each of 100 held-out prompts), and GRPO against it for
# 40 steps with no KL penalty, evaluated on 100 held-out prompts × 8 samples as it goes. The runs take
# about a minute per seed, so the chapter reads the stored results.
#
# Two choices of this study must be read with its results. The first concerns the KL axis. The formula
# (12.9) is only an upper bound on the KL of best-of-$N$, far above the exact KL on a confident model (§12.5), so the benchmark
# computes the exact KL over what it has: each prompt's 64 samples, taken as an empirical distribution
# $\hat\pi$ (identical completions merged, each with mass count/64), with $\pi_N$ from (12.8) and its KL,
# averaged over the 100 prompts. On this task the bound is not far off: at $N = 64$ the exact KL is
# 2.99 nats (mean over the seeds), against the bound's 3.17, because the supervised model's completions vary:
# about 30 distinct ones among a prompt's 64. Two caveats. It is a KL to $\hat\pi$, not to $\pi_{\text{sft}}$: 64 samples cannot show the
# tail of $\pi_{\text{sft}}$. And the rewards are those of the best of $N$ of the 64 samples drawn without
# replacement (Gao et al.'s estimator), while the KL is that of $N$ draws with replacement from $\hat\pi$;
# the gold reward of the second kind of draw is higher at $N = 64$, by about 0.03 (printed below), small
# against the fall of about 0.34 from the peak that it sits beside. The GRPO column's KL is estimated on the policy's own samples, so both
# columns now stand on a KL axis, estimated in two ways.
#
# Second, the reward model is trained briefly: 40 AdamW steps of 32 pairs at learning rate $10^{-4}$ from a
# fresh head, against §12.3's 100 steps at $10^{-3}$. It does not even fit its own training pairs: it orders between 0.54 and 0.61 of its 300 training pairs as their labels do
# (the next cell prints each seed), and the benchmark's variant with 1,000 pairs, same recipe (three
# seeds), fits between 0.55 and 0.61 of them. The end of this
# section shows that this is close to where early stopping on held-in folds would stop, and repeats the study
# with a reward model trained to fit these 300 pairs closely.

# %%
oo = rl.benchmark_results("overoptimisation")
oo_runs = oo["runs"]
print(f"{len(oo_runs)} seeds ({oo['command']}; torch {oo['torch']})")
oo_1000 = rl.benchmark_results("overoptimisation_pairs1000")["runs"]
rm_fit = {name: [r["reward_model_accuracy"][key] for r in runs_] for name, key, runs_ in
          (("train, 300 pairs", "train", oo_runs), ("held out, 300 pairs", "held_out", oo_runs),
           ("train, 1,000 pairs", "train", oo_1000), ("held out, 1,000 pairs", "held_out", oo_1000))}
print("reward models' accuracy against the labels, per seed:")
for name, values in rm_fit.items():
    print(f"  {name:<22}" + " ".join(f"{v:.3f}" for v in values))
rl.claim("between 0.54 and 0.61 of its 300", min(rm_fit["train, 300 pairs"]), 0.54, abs=0.005)
rl.claim("between 0.54 and 0.61 of its 300", max(rm_fit["train, 300 pairs"]), 0.61, abs=0.005)
bon_kl = np.array([r["best_of_n"]["kl"] for r in oo_runs])  # (seeds, N): the exact KL over each prompt's samples
bon_bound = np.array(oo_runs[0]["best_of_n"]["kl_bound"])
print("best-of-N's KL, mean over seeds, by N:  " + "  ".join(f"{n}: {k:.2f} (bound {b:.2f})"
      for n, k, b in zip(oo_runs[0]["best_of_n"]["n"], bon_kl.mean(0), bon_bound)))
print(f"at N = 64: {rl.mean_ci(bon_kl[:, -1])}; distinct completions per prompt: "
      f"{np.mean([r['best_of_n']['distinct_completions'] for r in oo_runs]):.1f} of 64")
rl.claim("the exact KL is\n2.99 nats (mean over the seeds)", bon_kl[:, -1].mean(), 2.99)
rl.claim("against the bound's 3.17", bon_bound[-1], 3.17)
rl.claim("about 30 distinct ones among a prompt's 64", np.mean([r["best_of_n"]["distinct_completions"] for r in oo_runs]), 30)
draws = rl.compare([r["best_of_n"]["gold_iid"][-1] for r in oo_runs], [r["best_of_n"]["gold"][-1] for r in oo_runs],
                   names=("gold, 64 draws with replacement", "best of the 64 samples"))
print(draws)
rl.claim_comparison("the gold reward of the second kind of draw is higher at $N = 64$", draws, ">")
rl.claim("by about 0.03 (printed below)", draws.mean_diff, 0.03)
rl.claim("fits between 0.55 and 0.61 of them", min(rm_fit["train, 1,000 pairs"]), 0.55, abs=0.005)
rl.claim("fits between 0.55 and 0.61 of them", max(rm_fit["train, 1,000 pairs"]), 0.61, abs=0.005)
fig, axes = plt.subplots(2, 2, figsize=(8.4, 5.8), dpi=80, sharex="col")
for col, (name, label) in enumerate((("best_of_n", "best-of-N on the reward model"), ("rl", "GRPO on the reward model"))):
    for r in oo_runs:
        curve = r[name]
        axes[0, col].plot(curve["d"], np.array(curve["gold"]) - curve["gold"][0], color="C0", lw=0.8, alpha=0.6)
        axes[1, col].plot(curve["d"], np.array(curve["proxy"]) - curve["proxy"][0], color="C1", lw=0.8, alpha=0.6)
    axes[0, col].set_title(label, fontsize=9)
    axes[1, col].set_xlabel("d = √KL(π_N ‖ π̂), exact over the 64 samples" if name == "best_of_n" else "d = √KL(π ‖ π_sft), √nats (measured)")
    axes[0, col].axhline(0, color="grey", lw=0.5)
axes[0, 0].set_ylabel("gold reward r*, gain over π_sft")
axes[1, 0].set_ylabel("proxy r_φ, gain over π_sft")
d_grid = np.linspace(0.01, max(r["best_of_n"]["d"][-1] for r in oo_runs), 100)
fits = [r["fits"]["best_of_n"] for r in oo_runs]
axes[0, 0].plot(d_grid, np.mean([d_grid * (f["alpha"] - f["beta"] * d_grid) for f in fits], 0), "k--", lw=1.5,
                label="d(α − βd), mean of the seeds' fits")
axes[0, 0].plot(np.sqrt(bon_bound), np.mean([np.array(r["best_of_n"]["gold"]) - r["best_of_n"]["gold"][0] for r in oo_runs], 0),
                ":", color="grey", lw=1.5, label="mean curve placed at the bound (12.9)")
axes[0, 0].legend(fontsize=9)
plt.tight_layout()


def gains(name):
    """Per seed: gold at the mean curve's peak minus gold at the start, and gold at the end minus gold at that peak."""
    gold = np.array([r[name]["gold"] for r in oo_runs])  # (seeds, points)
    peak = int(np.argmax(gold.mean(0)))
    return peak, gold[:, peak] - gold[:, 0], gold[:, -1] - gold[:, peak]


oo_result = {}
for name in ("best_of_n", "rl"):
    peak, rise, fall = gains(name)
    proxy = np.array([r[name]["proxy"] for r in oo_runs])
    zeros = np.zeros(len(oo_runs))
    oo_result[name] = {"peak": peak, "rise": rl.compare(rise, zeros, names=("gold at the peak", "at the start")),
                       "fall": rl.compare(fall, zeros, names=("gold at the end", "at the peak")),
                       "proxy_rises_everywhere": int(np.sum(np.all(np.diff(proxy, axis=1) > 0, axis=1))),
                       "proxy_end": rl.compare(proxy[:, -1] - proxy[:, 0], zeros, names=("proxy at the end", "at the start")),
                       "identified": sum(r["fits"][name]["identified"] for r in oo_runs)}
    where = f"N = {oo_runs[0][name]['n'][peak]}" if name == "best_of_n" else f"step {oo_runs[0][name]['step'][peak]}"
    print(f"{name}: the mean curve peaks at {where}")
    for key in ("rise", "fall", "proxy_end"):
        print("  ", oo_result[name][key])
    print(f"   proxy rising at every point: {oo_result[name]['proxy_rises_everywhere']} of {len(oo_runs)} seeds;  "
          f"fitted peak identified on {oo_result[name]['identified']} seeds")
d_star = rl.mean_ci([f["d_peak"] for f in fits if f["identified"]])
rl.claim("the fall of about 0.34 from the peak", -oo_result["best_of_n"]["fall"].mean_diff, 0.34)
print(f"best-of-N's fitted peak d* = α/(2β), √nats of the exact KL: {d_star[0]:.2f} [{d_star[1]:.2f}, {d_star[2]:.2f}] over the seeds where it is identified")
for r in oo_runs[:1]:
    for sample in r["best_of_n"]["top_samples"][:3]:
        print(f"  best-of-64 pick   {sample['prompt']}{sample['completion']:<26} gold {sample['gold']:+.2f}")
    for sample in r["rl"]["final_samples"][:4]:
        print(f"  GRPO at the end   {sample['prompt']}{sample['completion']:<26} gold {sample['gold']:+.2f}")

# %% [markdown]
# Best-of-$N$ on the learned reward shows the whole shape on ten seeds. The gold reward rises at first:
# at $N = 4$, where the mean curve peaks, it is above the supervised model's (the interval of the gain,
# printed above, lies above zero), because the reward model has learned that short
# is good and the shortest of four samples is still usually right. Then it falls, far below where it
# started, by $N = 64$, while the proxy rises at every $N$ on all ten seeds (for best-of-$N$ it cannot do
# otherwise: the point is the gap between proxy and gold). The answers best-of-64 picks
# are short and mostly wrong (the samples above). Gao et al.'s best-of-$N$ form $d(\alpha - \beta d)$
# fits each seed's curve better than their RL form $d(\alpha - \beta\log d)$ does, with a lower RMSE on
# all ten seeds (the paired difference is printed below), though both come close: twelve points per
# curve tell the two shapes apart only weakly. The quadratic's peak lies inside the measured range
# of $d$ on all ten, at $d^* = 0.57$ (mean over the seeds, in √nats of the exact KL over the samples;
# its interval is printed above), a KL of about a third of a nat; the mean curve itself peaks further
# out, at $N = 4$, $d$ of about 0.78: the quadratic places the peak early.
#
# GRPO on the same reward models falls just as clearly, from its best point to a gold reward below the
# supervised model's after 40 steps, with the accuracy gone (the samples: short wrong answers the reward
# model scores highly). Its rise is another matter: at the mean curve's peak (step 3), the gain over the
# supervised model shows no difference detected at this scale, and the RL form $d(\alpha - \beta\log d)$
# identifies a peak on no seed, though that count reflects the criterion (a positive $\alpha$, which
# suits the best-of-$N$ form; this form's slope at $d = 0$ is infinite whatever $\alpha$ is) more than the
# data; the interval of the gain is the evidence. With a reward model this weak (it orders held-out pairs as the
# gold reward does about two times in three), gradient steps seem to find its errors almost at once,
# while best-of-$N$ only re-weights the supervised model's own samples; that reading is plausible, not
# tested here.
# Chapter 13 returns to this when it compares RL on a learned reward with DPO.

# %%
rl.claim_comparison("it is above the supervised model's", oo_result["best_of_n"]["rise"], ">")
rl.claim("at $N = 4$, where the mean curve peaks", oo_runs[0]["best_of_n"]["n"][oo_result["best_of_n"]["peak"]], 4, abs=0)
rl.claim_comparison("Then it falls, far below where it started", oo_result["best_of_n"]["fall"], "<")
rl.claim("far below where it started", np.mean([r["best_of_n"]["gold"][-1] - r["best_of_n"]["gold"][0] for r in oo_runs]), high=-0.1)
rl.claim("the proxy rises at every $N$ on all ten seeds", oo_result["best_of_n"]["proxy_rises_everywhere"], len(oo_runs), abs=0)
rl.claim("peak lies inside the measured range\nof $d$ on all ten", oo_result["best_of_n"]["identified"], len(oo_runs), abs=0)
rl.claim("at $d^* = 0.57$ (mean over the seeds", d_star[0], 0.57)
bon_rmse = [r["fits"]["best_of_n"]["rmse"] for r in oo_runs]
rl_form_rmse = [r["fits"]["best_of_n_rl_form"]["rmse"] for r in oo_runs]
form_cmp = rl.compare(bon_rmse, rl_form_rmse, names=("RMSE of d(α − βd)", "of d(α − β log d)"))
print("best-of-N curves, the two forms' fits:", form_cmp)
print("  RMSE per seed, d(α − βd):     ", " ".join(f"{v:.3f}" for v in bon_rmse))
print("  RMSE per seed, d(α − β log d):", " ".join(f"{v:.3f}" for v in rl_form_rmse))
rl.claim_comparison("fits each seed's curve better than their RL form", form_cmp, "<")
rl.claim("with a lower RMSE on\nall ten seeds", sum(a < b for a, b in zip(bon_rmse, rl_form_rmse)), len(oo_runs), abs=0)
peak_d = np.mean([r["best_of_n"]["d"][oo_result["best_of_n"]["peak"]] for r in oo_runs])
rl.claim("$d$ of about 0.78", peak_d, 0.78)
rl.claim("the quadratic places the peak early", d_star[2], high=peak_d)  # d*'s whole interval before the measured peak
rl.claim("a KL of about a third of a nat", d_star[0] ** 2, 1 / 3)
rl.claim_comparison("GRPO on the same reward models falls just as clearly", oo_result["rl"]["fall"], "<")
rl.claim("a gold reward below the supervised model's", np.mean([r["rl"]["gold"][-1] - r["rl"]["gold"][0] for r in oo_runs]), high=-0.1)
rl.claim("with the accuracy gone", np.mean([r["rl"]["correct"][-1] for r in oo_runs]), high=0.1, bounds=(0, 1))
rl.claim("(step 3)", oo_runs[0]["rl"]["step"][oo_result["rl"]["peak"]], 3, abs=0)
rl.claim_comparison("shows no difference detected at this scale", oo_result["rl"]["rise"], "none")
rl.claim("identifies a peak on no seed", oo_result["rl"]["identified"], 0, abs=0)
gold_order = rl.mean_ci([r["reward_model_accuracy"]["held_out_gold_order"] for r in oo_runs])  # tolerance: its 95 % CI
rl.claim("about two times in three", gold_order[0], 2 / 3, abs=(gold_order[2] - gold_order[1]) / 2, bounds=(0, 1))

# %% [markdown]
# **With a reward model fitted to its pairs.** Is this over-optimisation a product of a reward model that
# barely fits its data? Cross-validation says the study's recipe is close to where early stopping would
# stop. The benchmark's recipe search splits the 300 training pairs of seeds 0 and 1 into 4 folds (the
# held-out pairs are never used) and measures the Bradley–Terry loss on each fold after training on the
# other three. The loss is lowest at learning rate $10^{-4}$ after 25 updates, between 0.68 and 0.70, about
# $\log 2 = 0.693$, the loss of a model that predicts nothing; it grows with more updates while the
# accuracy on the training folds climbs past 0.8, and at $10^{-3}$ it exceeds the $10^{-4}$ loss at every
# count (printed below). Labels drawn by Bradley–Terry at $T = 0.25$, mostly between answers whose gold
# rewards differ by a few tokens of length, leave 300 pairs little to learn: the study's 40 updates sit
# near the early-stopping point, and a closer fit is over-fitting. The second run therefore takes §12.3's
# recipe, 100 updates at $10^{-3}$, a reward model that fits its own pairs (between 0.59 and 0.75 of them)
# though validation calls it over-fitted, and repeats everything else on the same seeds and samples.

# %%
selection = rl.benchmark_results("overoptimisation_rm_selection")
print(f"recipe selection ({selection['command']}): validation loss (accuracy) by learning rate and updates, mean of 4 folds")
for sel in selection["selection"]:
    for lr_, by in sel["by"].items():
        print(f"  seed {sel['seed']}, lr {lr_:>6}: " + "  ".join(f"{n}: {c['val_loss']:.3f} ({c['val_accuracy']:.2f}; train {c['train_accuracy']:.2f})"
                                                     for n, c in by.items()))
val_best = {sel["seed"]: min(((lr_, int(n)) for lr_, by in sel["by"].items() for n in by), key=lambda k: sel["by"][k[0]][str(k[1])]["val_loss"])
            for sel in selection["selection"]}
print("lowest validation loss at (lr, updates):", val_best)
oo_fit = rl.benchmark_results("overoptimisation_fitted")
oo_fit_runs = oo_fit["runs"]
print(f"{len(oo_fit_runs)} seeds ({oo_fit['command']})")
assert [r["seed"] for r in oo_fit_runs] == [r["seed"] for r in oo_runs]  # paired by seed
fit_acc = {key: [r["reward_model_accuracy"][key] for r in oo_fit_runs] for key in ("train", "held_out", "held_out_gold_order")}
for key, values in fit_acc.items():
    print(f"  fitted reward model, {key:<20}" + " ".join(f"{v:.3f}" for v in values))
fitted = {}
for name in ("best_of_n", "rl"):
    gold_u = np.array([r[name]["gold"] for r in oo_runs])
    gold_f = np.array([r[name]["gold"] for r in oo_fit_runs])
    proxy_f = np.array([r[name]["proxy"] for r in oo_fit_runs])
    peak_f = int(np.argmax(gold_f.mean(0)))
    zeros = np.zeros(len(oo_fit_runs))
    fitted[name] = {"peak": peak_f,
                    "rise": rl.compare(gold_f[:, peak_f] - gold_f[:, 0], zeros, names=("fitted: gold at the peak", "at the start")),
                    "fall": rl.compare(gold_f[:, -1] - gold_f[:, peak_f], zeros, names=("fitted: gold at the end", "at the peak")),
                    "end_vs_start": rl.compare(gold_f[:, -1], gold_f[:, 0], names=("fitted: gold at the end", "at the start")),
                    "proxy_rises": int(np.sum(np.all(np.diff(proxy_f, axis=1) > 0, axis=1))),
                    "max_gain_vs": rl.compare(gold_f.max(1) - gold_f[:, 0], gold_u.max(1) - gold_u[:, 0],
                                              names=("fitted: best gold gain", "under-fitted")),
                    "end_vs": rl.compare(gold_f[:, -1] - gold_f[:, 0], gold_u[:, -1] - gold_u[:, 0],
                                         names=("fitted: gold change by the end", "under-fitted")),
                    "end_d_vs": rl.compare([r[name]["d"][-1] for r in oo_fit_runs], [r[name]["d"][-1] for r in oo_runs],
                                           names=("fitted: d at the end", "under-fitted"))}
    where = f"N = {oo_fit_runs[0][name]['n'][peak_f]}" if name == "best_of_n" else f"step {oo_fit_runs[0][name]['step'][peak_f]}"
    print(f"{name}, fitted reward model: the mean curve peaks at {where}; proxy rising at every point on {fitted[name]['proxy_rises']} seeds")
    for key in ("rise", "fall", "end_vs_start", "max_gain_vs", "end_vs", "end_d_vs"):
        print("  ", fitted[name][key])
order_vs = rl.compare(fit_acc["held_out_gold_order"], [r["reward_model_accuracy"]["held_out_gold_order"] for r in oo_runs],
                      names=("fitted: held-out gold order", "under-fitted"))
print(order_vs)
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), dpi=80)
for ax, (name, label) in zip(axes, (("best_of_n", "best-of-N"), ("rl", "GRPO"))):
    for runs_, tag, colour in ((oo_runs, "40 updates at 1e-4", "C0"), (oo_fit_runs, "fitted", "C3")):
        d_mean = np.mean([r[name]["d"] for r in runs_], 0)
        ax.plot(d_mean, np.mean([np.array(r[name]["gold"]) - r[name]["gold"][0] for r in runs_], 0), "o-", ms=3, color=colour,
                label=f"gold, {tag}")
        ax.plot(d_mean, np.mean([np.array(r[name]["proxy"]) - r[name]["proxy"][0] for r in runs_], 0), "s--", ms=3, color=colour,
                alpha=0.6, label=f"proxy, {tag}")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_title(f"{label}: mean of ten seeds", fontsize=9)
    ax.set_xlabel("d = √KL, √nats")
axes[0].set_ylabel("gain over π_sft")
axes[0].legend(fontsize=8.5)
plt.tight_layout();
rl.claim("between 0.68 and 0.70", min(sel["by"]["0.0001"]["25"]["val_loss"] for sel in selection["selection"]), low=0.68, high=0.70)
rl.claim("between 0.68 and 0.70", max(sel["by"]["0.0001"]["25"]["val_loss"] for sel in selection["selection"]), low=0.68, high=0.70)
for lr_, updates in val_best.values():  # on both seeds
    rl.claim("The loss is lowest at learning rate $10^{-4}$ after 25 updates", float(lr_), 1e-4, abs=0)
    rl.claim("The loss is lowest at learning rate $10^{-4}$ after 25 updates", updates, 25, abs=0)
rl.claim("climbs past 0.8", min(sel["by"]["0.0001"]["200"]["train_accuracy"] for sel in selection["selection"]), low=0.8, bounds=(0, 1))
rl.claim("it grows with more updates", min(np.diff([sel["by"]["0.0001"][n]["val_loss"] for n in ("25", "50", "100", "200")]).min()
                                           for sel in selection["selection"]), low=1e-9)
rl.claim("it exceeds the $10^{-4}$ loss at every count", min(sel["by"]["0.001"][n]["val_loss"] - sel["by"]["0.0001"][n]["val_loss"]
                                                              for sel in selection["selection"] for n in sel["by"]["0.0001"]), low=1e-9)
rl.claim("between 0.59 and 0.75 of them", min(fit_acc["train"]), 0.59, abs=0.005)
rl.claim("between 0.59 and 0.75 of them", max(fit_acc["train"]), 0.75, abs=0.005)

# %% [markdown]
# Fitted this way, the reward model is a worse proxy: it orders held-out pairs as the gold reward does on
# about 0.59 of those whose gold rewards differ, and between 0.43 and 0.54 of held-out pairs as labelled.
# Over-optimisation persists with it. Best-of-$N$'s gold reward still rises first (the mean curve peaks at
# $N = 3$, with an interval of the gain above zero), then falls by 0.36 by $N = 64$, while the proxy rises at
# every $N$ on all ten seeds; paired by seed, its highest gain along the curve is lower than with the study's
# reward model, and it ends lower, by about 0.06. GRPO's gold reward also rises at first (to step 5) and
# then falls, by 0.31 to the end; its highest gain is higher than with the study's reward model by about
# 0.03, an interval just clear of zero, and for where it ends, no difference detected at this scale. Here
# the closer fit made the reward model a worse proxy, and over-optimisation did not go away with it. Gao
# et al.'s finding that a better reward model delays over-optimisation concerns reward models that rank
# held-out answers better (larger ones, or ones trained on more data), not ones that fit a few pairs more
# closely.

# %%
rl.claim_comparison("the reward model is a worse proxy", order_vs, "<")
rl.claim("about 0.59 of those whose gold rewards differ", np.mean(fit_acc["held_out_gold_order"]), 0.59)
rl.claim("between 0.43 and 0.54 of held-out pairs", min(fit_acc["held_out"]), 0.43, abs=0.005)
rl.claim("between 0.43 and 0.54 of held-out pairs", max(fit_acc["held_out"]), 0.54, abs=0.005)
rl.claim("the mean curve peaks at $N = 3$", oo_fit_runs[0]["best_of_n"]["n"][fitted["best_of_n"]["peak"]], 3, abs=0)
rl.claim_comparison("Best-of-$N$'s gold reward still rises first", fitted["best_of_n"]["rise"], ">")
rl.claim_comparison("then falls by 0.36 by $N = 64$", fitted["best_of_n"]["fall"], "<")
rl.claim("then falls by 0.36 by $N = 64$", -fitted["best_of_n"]["fall"].mean_diff, 0.36)
rl.claim("the proxy rises at every $N$ on all ten seeds", fitted["best_of_n"]["proxy_rises"], len(oo_fit_runs), abs=0)
rl.claim_comparison("its highest gain along the curve is lower than with the study's reward model", fitted["best_of_n"]["max_gain_vs"], "<")
rl.claim_comparison("it ends lower, by about 0.06", fitted["best_of_n"]["end_vs"], "<")
rl.claim("it ends lower, by about 0.06", -fitted["best_of_n"]["end_vs"].mean_diff, 0.06)
rl.claim("(to step 5)", oo_fit_runs[0]["rl"]["step"][fitted["rl"]["peak"]], 5, abs=0)
rl.claim_comparison("GRPO's gold reward also rises at first", fitted["rl"]["rise"], ">")
rl.claim_comparison("then falls, by 0.31 to the end", fitted["rl"]["fall"], "<")
rl.claim("then falls, by 0.31 to the end", -fitted["rl"]["fall"].mean_diff, 0.31)
rl.claim_comparison("its highest gain is higher than with the study's reward model by about 0.03", fitted["rl"]["max_gain_vs"], ">")
rl.claim("by about 0.03, an interval just clear of zero", fitted["rl"]["max_gain_vs"].mean_diff, 0.03)
rl.claim_comparison("for where it ends, no difference detected at this scale", fitted["rl"]["end_vs"], "none")
rl.claim_comparison("the closer fit made the reward model a worse proxy", order_vs, "<")
for name in ("best_of_n", "rl"):
    rl.claim_comparison("over-optimisation did not go away with it", fitted[name]["fall"], "<")

# %% [markdown]
# ## 12.7 Reward-model practice
#
# §12.3 trained a reward model in the plainest way: pairs of answers, one model, its raw output. Practice
# adds four habits: labelling rankings of several answers, normalising the reward model's output,
# combining several reward models, and training a large enough reward model to convergence. This section
# takes them in turn.
#
# **Rankings of $K$ answers.** InstructGPT's labellers ranked between $K = 4$ and $K = 9$ answers to a
# prompt at a time (Ouyang et al. 2022, arXiv:2203.02155, §3.5). The Plackett–Luce model (Luce 1959;
# Plackett 1975) gives a ranking $\sigma$ (best first) a likelihood, as $K - 1$ successive choices: the
# first answer is chosen from all $K$ with probability $e^{r}/\sum e^{r}$, the second from the $K - 1$ left,
# and so on:
#
# $$P(\sigma \mid x) = \prod_{i=1}^{K} \frac{e^{r(x, y_{\sigma(i)})}}{\sum_{j=i}^{K} e^{r(x, y_{\sigma(j)})}}. \tag{12.10}$$
#
# For $K = 2$ this is Bradley–Terry, (12.2), and, like (12.2), it is unchanged when a constant is added to
# every reward. It is also what §12.2's labeller produces when ranking several answers: add independent
# Gumbel noise to each reward and sort. `rl.plackett_luce_log_likelihood` computes $\log P(\sigma \mid x)$:

# %%
print(inspect.getsource(rl.plackett_luce_log_likelihood).split('"""')[-1])

# %% [markdown]
# Four answers to "60+44=": right, off by 1, off by 10 and off by 100, with their gold rewards (12.1). The
# cell checks (12.10) three ways: the probabilities of all $4! = 24$ rankings add up to 1; for two answers it
# is Bradley–Terry's probability; and sorting gold reward plus Gumbel noise, 200,000 times, produces each
# ranking as often as (12.10) says.

# %%
# NBVAL_CHECK_OUTPUT
four = ["104", "105", "114", "204"]
r_four = torch.tensor([gold_reward("60+44=", y) for y in four], dtype=torch.float64)
all_rankings = torch.tensor(list(itertools.permutations(range(4))))
pl_probs = rl.plackett_luce_log_likelihood(r_four.expand(len(all_rankings), 4), all_rankings).exp()
print("gold rewards:", "  ".join(f"{y} {v:+.3f}" for y, v in zip(four, r_four.tolist())))
print(f"{len(all_rankings)} rankings, probabilities sum to {pl_probs.sum().item():.12f};  "
      f"the gold order {four} has P = {pl_probs[0].item():.4f}")
pair_ll = rl.plackett_luce_log_likelihood(r_four[[0, 3]], torch.tensor([0, 1])).item()
print(f"K = 2: log P(104 ≻ 204) = {pair_ll:.6f};  −(Bradley–Terry loss) = {-rl.bradley_terry_loss(r_four[:1], r_four[3:]).item():.6f}")
gumbel_gen = torch.Generator().manual_seed(0)
uniform_draws = torch.rand(200_000, 4, generator=gumbel_gen, dtype=torch.float64)
sorted_draws = torch.argsort(r_four - torch.log(-torch.log(uniform_draws)), dim=-1, descending=True)
ranking_code = (sorted_draws * torch.tensor([64, 16, 4, 1])).sum(-1)
frequency = torch.bincount(ranking_code, minlength=256).double()[(all_rankings * torch.tensor([64, 16, 4, 1])).sum(-1)] / 200_000
z_rank = (frequency - pl_probs) / torch.sqrt(pl_probs * (1 - pl_probs) / 200_000)
print(f"Gumbel sort against (12.10): largest |z| over the {int((pl_probs > 1e-3).sum())} rankings with P > 0.001: "
      f"{z_rank[pl_probs > 1e-3].abs().max().item():.2f}")
print("pairs implied by one ranking:", {k: len(rl.ranking_pairs(torch.arange(k))) for k in (2, 4, 9)})
assert abs(pl_probs.sum().item() - 1) < 1e-12 and abs(pair_ll + rl.bradley_terry_loss(r_four[:1], r_four[3:]).item()) < 1e-12
assert z_rank[pl_probs > 1e-3].abs().max().item() < 4.5

# %% [markdown]
# A reward model can be trained on rankings in two ways: maximise (12.10), or split each ranking into the
# $\binom K2$ pairs it implies and minimise (12.3) on them. InstructGPT does the second, and keeps the pairs of
# one prompt in one batch element, because the pairs of one ranking are correlated and treating them as
# separate data points made its reward model over-fit (Ouyang et al. 2022, §3.5). Zhu, Jordan & Jiao 2023
# (arXiv:2301.11270) prove that both estimators converge under (12.10), and that the Plackett–Luce one is
# asymptotically more efficient. What $K$-wise data buys is more comparisons per prompt that a labeller
# reads: one ranking of 4 answers implies 6 ordered pairs and one of 9 answers 36, where reading 2 answers
# gives 1.
#
# **Normalising the reward.** A reward model's offset is arbitrary: Bradley–Terry's loss depends only on
# differences (§12.2), so training fixes no level, and each reward model ends up at its own. Its scale is
# set by the noise of the labels (exercise 5) and by how far training went, so it differs between models
# too. Neither changes which answer best-of-$N$ picks, but the scale does matter to the KL-regularised
# optimum: by (12.6), multiplying the reward by $a$ is the same as dividing $\beta$ by $a$, so a $\beta$ tuned for
# one reward model means something else for the next. Practitioners therefore normalise before RL: Ziegler
# et al. 2019 scale the reward model to mean 0 and variance 1 on samples of $\pi_{\text{ref}}$, and Ouyang et
# al. 2022 add a bias so that the labellers' demonstrations score 0 on average. The next cell scores all
# 1,000 answers of 12 held-out prompts (the 8 of §12.6 and 4 more) with the five reward models of §12.3
# trained on 1,600 noise-free comparisons (seeds 0–4), prints each model's mean and standard deviation under
# $\pi_{\text{ref}}$ over those prompts, and checks the two invariances exactly on one prompt.

# %%
MEMBERS = [reward_models[SIZES[-1], 0.0, s] for s in SEEDS]  # seed 0 is §12.6's proxy_model
ens_prompts = [q.prompt for q in task.held_out_problems(12)]
assert ens_prompts[:len(eval_prompts)] == eval_prompts and MEMBERS[0] is proxy_model
ens_ref, ens_gold, ens_scores = [], [], []
for prompt in ens_prompts:
    if prompt in scored:  # scored by §12.6 with the seed-0 model
        ref_j, gold_j, first = scored[prompt]
    else:
        ref_j = torch.softmax(answer_log_probs(policy, prompt), -1)
        gold_j = torch.tensor([gold_reward(prompt, y) for y in ANSWERS], dtype=torch.float64)
        first = answer_rewards(MEMBERS[0], prompt)
    ens_ref.append(ref_j)
    ens_gold.append(gold_j)
    ens_scores.append(torch.stack([first] + [answer_rewards(m, prompt) for m in MEMBERS[1:]]))
ens_ref, ens_gold, ens_scores = torch.stack(ens_ref), torch.stack(ens_gold), torch.stack(ens_scores)  # (12, 1000), (12, 1000), (12, 5, 1000)
member_mean = (ens_ref[:, None] * ens_scores).sum(-1).mean(0)  # (5,): E over prompts of E_π_ref[r_φ]
member_sd = (ens_ref[:, None] * (ens_scores - member_mean[:, None]) ** 2).sum(-1).mean(0).sqrt()
normalised = (ens_scores - member_mean[:, None]) / member_sd[:, None]  # mean 0, variance 1 under π_ref
print("mean under π_ref, by seed:", "  ".join(f"{v:.2f}" for v in member_mean.tolist()))
print("sd under π_ref, by seed:  ", "  ".join(f"{v:.2f}" for v in member_sd.tolist()))
sd_ratio = (member_sd.max() / member_sd.min()).item()
print(f"largest sd / smallest sd: {sd_ratio:.2f}")
r0, ref0 = ens_scores[0, 0], ens_ref[0]
shift_bon = max((rl.best_of_n_probs(ref0, r0 + 3.0, n) - rl.best_of_n_probs(ref0, r0, n)).abs().max().item() for n in (2, 16))
shift_opt = (rl.kl_regularised_optimum(ref0, r0 + 3.0, 0.5) - rl.kl_regularised_optimum(ref0, r0, 0.5)).abs().max().item()
scale_opt = (rl.kl_regularised_optimum(ref0, 2 * r0, 0.5) - rl.kl_regularised_optimum(ref0, r0, 0.25)).abs().max().item()
scale_moves = (rl.kl_regularised_optimum(ref0, 2 * r0, 0.5) - rl.kl_regularised_optimum(ref0, r0, 0.5)).abs().max().item()
print(f"r + 3: best-of-N changes by {shift_bon:.1e}, π*_β by {shift_opt:.1e};   "
      f"π*_β of 2r equals π*_(β/2) of r to {scale_opt:.1e}, and differs from π*_β of r by {scale_moves:.2f}")
assert max(shift_bon, shift_opt, scale_opt) < 1e-12 and scale_moves > 0.01

# %% [markdown]
# Adding 3 to every reward changed neither best-of-$N$ nor $\pi^*$, and doubling the reward moved $\pi^*$
# exactly as halving $\beta$ did. The five reward models share a recipe and differ only in their seed (which
# 1,600 pairs, which minibatches), yet their levels and spreads under $\pi_{\text{ref}}$ are their own: the
# largest standard deviation is more than 1.2 times the smallest. Averaged as they are, the reward model with
# the widest spread would carry the most weight, which is one reason to normalise them before combining them.

# %%
rl.claim("the largest standard deviation is more than 1.2 times the smallest", sd_ratio, low=1.2)

# %% [markdown]
# **Ensembles against over-optimisation.** §12.6's reward model was exploited where its errors pointed
# upwards. Several reward models trained with different seeds err in partly different places, so an
# optimiser that must please all of them at once has fewer errors to exploit. Coste et al. 2024
# (arXiv:2310.02743) report that conservative objectives over an ensemble of reward models, its minimum
# ("worst-case optimisation") or its mean minus a multiple of its spread ("uncertainty-weighted
# optimisation"), mitigate over-optimisation, for best-of-$N$ and for PPO, in Gao et al.'s setting with a
# gold reward model. Eisenstein et al. 2023
# (arXiv:2312.09244) add a limit: members that share their pretraining and differ only in their fine-tuning
# seed tend to share their errors, so the ensemble mitigates reward hacking but does not eliminate it, and
# ensembles whose members differ in pretraining seed generalised better.
#
# Our five reward models are the second kind: one supervised model, five fine-tuning seeds. The cell runs
# best-of-$N$ exactly, as in §12.6, on the 12 prompts, selecting by each normalised reward model alone, by
# the mean of the five and by their minimum, and scores the selections with the gold reward. The comparison
# is made at $N = 1{,}024$, §12.6's largest, where over-optimisation went furthest: each ensemble against one
# reward model (the average over the five of their gold reward), paired over the 12 prompts.

# %%
NS_ENS = Ns[::2]  # 1, 4, 16, 64, 256, 1024
selectors = {f"seed {seed}": normalised[:, seed] for seed in SEEDS} | {"mean of five": normalised.mean(1), "min of five": normalised.min(1).values}
ens_result = {name: np.array([[(rl.best_of_n_probs(ens_ref[j], score[j], n) * ens_gold[j]).sum().item() for n in NS_ENS]
                              for j in range(len(ens_prompts))]) for name, score in selectors.items()}  # (12 prompts, 6)
ens_result["one reward model"] = np.mean([ens_result[f"seed {seed}"] for seed in SEEDS], 0)
for name, g in ens_result.items():
    print(f"{name:>17}: mean gold reward by N  " + "  ".join(f"{n}: {v:+.2f}" for n, v in zip(NS_ENS, g.mean(0))))
ensemble_vs_one = {e: rl.compare(ens_result[e][:, -1], ens_result["one reward model"][:, -1], names=(e, "one reward model"), unit="prompts")
                   for e in ("mean of five", "min of five")}
ensemble_falls = {e: rl.compare(ens_result[e][:, -1], ens_result[e][:, 0], names=(f"{e} at N = 1024", "at N = 1"), unit="prompts")
                  for e in ("mean of five", "min of five")}
print(*ensemble_vs_one.values(), *ensemble_falls.values(), sep="\n")
ax = rl.get_ax(figsize=(5.5, 3.4))
for seed in SEEDS:
    ax.plot(NS_ENS, ens_result[f"seed {seed}"].mean(0), "-", color="grey", lw=0.7, label="one reward model (each seed)" if seed == 0 else None)
for k, name in enumerate(("mean of five", "min of five")):
    ax.plot(NS_ENS, ens_result[name].mean(0), "o-", color=f"C{k}", ms=4, label=f"best-of-N by the {name}")
ax.set_xscale("log", base=2)
ax.set_xlabel("N")
ax.set_ylabel("gold reward (mean of 12 prompts)")
ax.set_title("Best-of-N by one reward model or an ensemble of five", fontsize=9)
ax.legend(fontsize=9)
plt.tight_layout();

# %% [markdown]
# Here the ensembles did not prevent the collapse: best-of-$N$ by the mean of five and by the minimum of five
# both end far below a plain sample by $N = 1{,}024$, as each reward model alone does. Against one reward
# model at $N = 1{,}024$, for both the mean and the minimum, no difference detected at this scale (the two
# intervals are printed above; they cover the variation over prompts for these five trained models, not
# over retraining them). Five models fine-tuned from one supervised model, on pairs from one distribution,
# appear to share the errors that best-of-$N$ finds in the tail of $\pi_{\text{ref}}$, the failure Eisenstein et
# al. describe; members that differ more, or a gentler optimiser than $N = 1{,}024$, were not tried here.

# %%
for e in ("mean of five", "min of five"):
    rl.claim_comparison("both end far below a plain sample by $N = 1{,}024$", ensemble_falls[e], "<")
    rl.claim_comparison("for both the mean and the minimum, no difference detected at this scale", ensemble_vs_one[e], "none")
for seed in SEEDS:
    rl.claim_comparison("as each reward model alone does", rl.compare(ens_result[f"seed {seed}"][:, -1], ens_result[f"seed {seed}"][:, 0],
                                                                      names=(f"seed {seed} at N = 1024", "at N = 1"), unit="prompts"), "<")

# %% [markdown]
# **Size, data and training length.** Gao, Schulman & Hilton 2022 (arXiv:2210.10760) trained reward models of
# increasing size on the same comparisons and found that larger reward models over-optimise less: the gold
# reward peaks higher and at a larger KL, and the coefficients of their fitted forms change smoothly with
# the reward model's size; more comparisons moved the curves the same way. The book's reward models are tiny
# and, in §12.6's benchmark, deliberately under-trained (they do not fit their own training pairs, §12.6),
# so none of this is measured here; exercise 6 asks what longer training changes on this task. Training to
# convergence means to the minimum of the *held-out* loss: InstructGPT's observation that one pass over
# shuffled pairs of its rankings already over-fitted (above) is the other side of the same advice.

# %% [markdown]
# The next chapter starts from (12.6) read backwards: if the optimal policy determines the reward up to
# $\beta\log Z$, a policy can be fitted to the comparisons directly, with no reward model and no sampling:
# direct preference optimisation (DPO).

# %%
rl.report_headline(f"Preferences: π* = π_ref·exp(r/β)/Z exact to 1e-9 on {PROMPT}; reward model held-out accuracy "
                   f"{accuracy[SIZES[-1], 0.0, 0]:.2f}; best-of-N KL ≤ log N − (N−1)/N")

# %% [markdown]
# ## Summary
#
# * Where no verifier exists, a reward is learned from comparisons, which people give more consistently
#   than scores. The Bradley–Terry model $P(y_1 \succ y_2) = \sigma(r_1 - r_2)$, (12.2), turns comparisons
#   into a likelihood, and its negative log, (12.3), is a logistic regression on reward differences.
# * The fit identifies the reward only up to a constant per prompt: the gradient never changes the sum
#   of the rewards, and shifting them changes no probability. On a bandit the maximum-likelihood error
#   falls as $1/\sqrt n$, on the curve the Fisher information predicts.
# * A reward model is the policy's transformer with a scalar head, trained on (12.3). On the book's task
#   it orders between 0.68 and 0.80 of held-out pairs as the gold reward does (ten seeds, 1,600 comparisons), and errs most on the pairs that need
#   arithmetic: a right answer against a one-digit slip.
# * The KL-regularised objective $\mathbb E_\pi[r] - \beta\,\mathrm{KL}(\pi\,\|\,\pi_{\text{ref}})$ has the closed-form
#   optimum $\pi^* \propto \pi_{\text{ref}}\,e^{r/\beta}$ and the value $\beta\log Z$, because
#   $J(\pi) = \beta\log Z - \beta\,\mathrm{KL}(\pi\,\|\,\pi^*)$, (12.7). Both were checked to $10^{-9}$ by
#   enumerating all 1,000 answers of the book's model to one prompt.
# * Policy-gradient RL lands on $\pi^*$ when the KL is in the reward, $r - \beta\log(\pi/\pi_{\text{ref}})$, as in
#   Ziegler et al. 2019 and InstructGPT. GRPO's $k_3$ term in the loss has the gradient of the forward KL
#   $\mathrm{KL}(\pi_{\text{ref}}\,\|\,\pi)$ instead, and its fixed point is $\beta\,\pi_{\text{ref}}/(\lambda - r)$, not $\pi^*$
#   (on the bandit, six times $\pi^*$'s mass on the worst arm).
# * Best-of-$N$ has an exact distribution, (12.8). The formula $\log N - (N-1)/N$ for its KL is an upper
#   bound, close when no answer carries much probability and far off when one does, as on the book's
#   model, where the exact KL levels off at $-\log\pi_{\text{ref}}(\text{best answer})$.
# * At equal KL, best-of-$N$ by the gold reward lies just under the frontier that $\pi^*$ traces. Selecting
#   by a learned reward model instead, the gold reward bought by a larger $N$ stops tracking the reward
#   model's own score: the first sign of over-optimisation.
# * Over ten seeds, best-of-$N$ and GRPO against a briefly trained reward model (300 comparisons, 40 small
#   steps) reproduce over-optimisation: the proxy keeps rising (for best-of-$N$ it cannot fall, by
#   construction) while the gold reward falls below the supervised model's.
#   Best-of-$N$'s gold reward first rises and peaks (Gao et al.'s $d(\alpha - \beta d)$ fits it, with $d$ from
#   the exact KL over the samples, close to the bound (12.9) on this task); for GRPO's early rise, no difference
#   detected at this scale.
#   Early stopping on held-in folds keeps the reward model's short training; one trained longer fits its
#   pairs more closely but is a worse proxy, and over-optimisation persists with it.
# * Practice (§12.7): rankings of $K$ answers have the Plackett–Luce likelihood (12.10), Bradley–Terry at
#   $K = 2$, and imply $K(K-1)/2$ pairs per prompt read; a reward model's offset and scale are arbitrary, and
#   its scale acts as $1/\beta$, so it is normalised before RL; an ensemble of five reward models fine-tuned from
#   one supervised model still collapsed under best-of-1,024 on this task (against one reward model, no
#   difference detected at this scale).

# %%
for name in ("best_of_n", "rl"):
    gold_curves = np.array([r[name]["gold"] for r in oo_runs])
    rl.claim_comparison("while the gold reward falls below the supervised model's",
                        rl.compare(gold_curves[:, -1], gold_curves[:, 0], names=(f"{name}: gold at the end", "the supervised model's")), "<")
rl.claim_comparison("Best-of-$N$'s gold reward first rises and peaks", oo_result["best_of_n"]["rise"], ">")
rl.claim_comparison("for GRPO's early rise, no difference detected at this scale", oo_result["rl"]["rise"], "none")
rl.claim_comparison("is a worse proxy, and over-optimisation persists with it", order_vs, "<")
for name in ("best_of_n", "rl"):
    rl.claim_comparison("over-optimisation persists with it", fitted[name]["fall"], "<")
for e in ("mean of five", "min of five"):
    rl.claim_comparison("still collapsed under best-of-1,024 on this task", ensemble_falls[e], "<")
    rl.claim_comparison("against one reward model, no difference detected at this scale", ensemble_vs_one[e], "none")
rl.claim("between 0.68 and 0.80 of held-out pairs", min(best), 0.68)
rl.claim("between 0.68 and 0.80 of held-out pairs", max(best), 0.80)

# %% [markdown]
# ## Exercises
#
# 1. *(By hand.)* Two arms; arm 1 is preferred in $w$ of $n$ comparisons. Show that the maximum-likelihood
#    estimate of (12.3) satisfies $\hat\theta_1 - \hat\theta_2 = \log\frac{w}{n - w}$. What happens when
#    $w = n$, and what does that say about fitting a reward model to pairs that are all labelled the same
#    way?
# 2. Derive (12.6) a second way, with a Lagrange multiplier for $\sum_y \pi(y) = 1$. Then write
#    `my_kl_regularised_optimum(ref_probs, rewards, beta)` that computes $\pi_{\text{ref}}\,e^{r/\beta}/Z$
#    directly, compare it with `rl.kl_regularised_optimum` on the model's answers to "60+44=" at
#    $\beta = 0.5$, and find a $\beta$ at which yours fails. Why does the library's not?
# 3. Check the two limits of §12.4 numerically on the model's answers: $\beta\log Z \to \mathbb E_{\pi_{\text{ref}}}[r]$
#    as $\beta \to \infty$ and $\beta\log Z \to \max_y r(y)$ as $\beta \to 0$. How large must $\beta$ be for the
#    first to hold within 0.01?
# 4. For $K$ equally likely answers with distinct rewards, compute best-of-8's exact KL for
#    $K = 10, 100, 1000, 10^4$ and compare with (12.9). Explain, from (12.8), why the formula is the
#    $K \to \infty$ limit.
# 5. Draw the bandit's labels with a noise level $T = 2$, $P(y_1 \succ y_2) = \sigma((r_1 - r_2)/T)$, and fit
#    (12.3) to 20,000 comparisons. What does $\hat\theta$ estimate now? What does that say about the *scale*
#    of a reward model trained on noisy labels, and about the β to use with it?
# 6. *(A longer run.)* Train a reward model on all the training comparisons at $T = 0$ for 800 steps
#    (`RewardModelConfig(num_steps=800)`, a few minutes on a CPU), measure its held-out accuracy on the two
#    kinds of pairs of §12.3, and redo the best-of-$N$ experiment of §12.6 with it. Does the gold reward
#    still peak and fall? Where is the reward model's favourite answer now?

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions
#
# ### Solution to exercise 1
#
# With $d = \theta_1 - \theta_2$, the log-likelihood is $w\log\sigma(d) + (n - w)\log\sigma(-d)$. Its
# derivative is $w\,\sigma(-d) - (n - w)\,\sigma(d)$; it vanishes where $\sigma(d)/\sigma(-d) = e^d = w/(n - w)$.
# When $w = n$ the derivative $n\,\sigma(-d)$ is positive for every $d$: the likelihood increases forever
# and the estimate is $+\infty$. Data that are perfectly separated make the maximum-likelihood reward
# infinite; a reward model trained on them only stops growing its margins because training stops
# (or because of weight decay), which is one reason reward models are trained for a single epoch.

# %% tags=["solution"]
w, n = 35, 50
d = torch.tensor([math.log(w / (n - w))], dtype=torch.float64, requires_grad=True)
zero = torch.zeros(1, dtype=torch.float64)
nll = (w * rl.bradley_terry_loss(d, zero) + (n - w) * rl.bradley_terry_loss(zero, d)).sum() / n
nll.backward()
print(f"d = log(35/15) = {d.item():.4f}   derivative of the mean loss there: {d.grad.item():.1e}")
assert abs(d.grad.item()) < 1e-12

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# Maximise $\sum_y \pi(y) r(y) - \beta\sum_y \pi(y)\log\frac{\pi(y)}{\pi_{\text{ref}}(y)} + \lambda(1 - \sum_y\pi(y))$.
# Setting the derivative in $\pi(y)$ to zero gives $r(y) - \beta\log\frac{\pi(y)}{\pi_{\text{ref}}(y)} - \beta - \lambda = 0$,
# so $\pi(y) = \pi_{\text{ref}}(y)\,e^{r(y)/\beta}\,e^{-1-\lambda/\beta}$, and the constraint fixes the last factor
# to $1/Z$. (The objective is concave, so this stationary point is the maximum.) Computed directly,
# $e^{r/\beta}$ overflows once $r/\beta$ passes about 709 in float64, and then $\infty/\infty$ is NaN; the
# library adds $\log\pi_{\text{ref}}$ and $r/\beta$ and takes a softmax, which subtracts the largest term
# before exponentiating.

# %% tags=["solution"]
def my_kl_regularised_optimum(ref_probs, rewards, beta):
    unnormalised = ref_probs * torch.exp(rewards / beta)
    return unnormalised / unnormalised.sum()


print("β = 0.5:  max |mine − library| =",
      f"{(my_kl_regularised_optimum(ref_probs, gold, 0.5) - rl.kl_regularised_optimum(ref_probs, gold, 0.5)).abs().max().item():.1e}")
print("β = 0.002: mine has NaN:", bool(my_kl_regularised_optimum(ref_probs, gold, 0.002).isnan().any()),
      "  library π*(right answer) =", round(rl.kl_regularised_optimum(ref_probs, gold, 0.002)[right].item(), 6))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3

# %% tags=["solution"]
expected_reward = (ref_probs * gold).sum().item()
for beta in (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0):
    print(f"β = {beta:<7g} β·log Z = {rl.kl_regularised_value(ref_probs, gold, beta).item():+.4f}")
print(f"E_π_ref[r] = {expected_reward:+.4f}   max r = {gold.max().item():+.4f}")
first = next(b for b in np.logspace(-1, 4, 200) if rl.kl_regularised_value(ref_probs, gold, float(b)).item() - expected_reward < 0.01)
print(f"β·log Z is within 0.01 of E_π_ref[r] from β ≈ {first:.0f}")

# %% [markdown] tags=["solution"]
# For large β, $\beta\log Z = \mathbb E_{\pi_{\text{ref}}}[r] + \operatorname{Var}_{\pi_{\text{ref}}}(r)/(2\beta) + O(\beta^{-2})$ (a
# cumulant expansion), so the gap closes like $1/\beta$: it needs β of the order of the reward's variance
# divided by 0.02. For small β, $\beta\log Z = \max r + \beta\log\pi_{\text{ref}}(\text{best}) + \dots$, which
# tends to $\max r = 2$ from below.
#
# ### Solution to exercise 4

# %% tags=["solution"]
for K_ in (10, 100, 1000, 10_000):
    p_, r_ = uniform(K_)
    print(f"K = {K_:>6}: exact KL of best-of-8 {rl.best_of_n_kl(p_, r_, 8).item():.5f}   formula {rl.best_of_n_kl_bound(8):.5f}")

# %% [markdown] tags=["solution"]
# With distinct rewards and $\pi_{\text{ref}} = 1/K$, (12.8) gives $\pi_N(y_k) = (k/K)^N - ((k-1)/K)^N$ for the
# answer of rank $k$: a difference quotient of $u^N$ at $u = k/K$. As $K \to \infty$ it tends to
# $N u^{N-1}\,du$, the density of the maximum of $N$ uniforms, whose KL from the uniform density is
# $\int_0^1 N u^{N-1}\log(N u^{N-1})\,du = \log N - (N-1)/N$. A finite $K$ coarsens that density into $K$
# bins, and coarsening never increases a KL divergence, so the formula bounds the exact value from above.
#
# ### Solution to exercise 5

# %% tags=["solution"]
c, r = draw_comparisons(GOLD_ARMS / 2.0, 20_000, torch.Generator().manual_seed(5))  # σ(Δ/T) = σ(Δ/2)
theta_T = fit_bradley_terry(c, r)
print("fitted θ at T = 2  ", theta_T.numpy().round(3))
print("centred gold / 2   ", (centred_gold / 2).numpy().round(3))

# %% [markdown] tags=["solution"]
# The fit estimates $(r - \bar r)/T$: noisier labels give a reward model whose differences are smaller by the
# factor $T$, and from comparisons alone the noise level and the scale of the reward cannot be told apart.
# So the scale of a learned reward is as arbitrary as its level, and β has meaning only relative to it:
# $\pi^* \propto \pi_{\text{ref}}\,e^{r/(T\beta)}$ is the same policy for $(r/T, \beta)$ as for $(r, T\beta)$. This is
# one reason practitioners normalise the reward model's outputs and tune β per reward model.
#
# ### Solution to exercise 6
#
# The run takes minutes, so it is not repeated here; the code is §12.3's loop with `n = len(train_pairs[0])`,
# `T = 0` and `num_steps=800`, then §12.6's cell with `proxy_model` set to the new model. What to expect,
# and why: both accuracies keep rising with training (checking a sum is a skill the reward model builds
# slowly from the supervised model's features, and 100 steps are far from enough for it). Whether best-of-$N$ still over-optimises is
# decided by the tail of $\pi_{\text{ref}}$, not by the held-out accuracy: the held-out pairs come from the
# supervised model's own samples, and a large $N$ reaches answers no training pair contained. A more
# accurate reward model usually moves the peak to a larger $N$ without removing it, which is the pattern
# Gao, Schulman & Hilton 2022 measured across reward-model sizes.
