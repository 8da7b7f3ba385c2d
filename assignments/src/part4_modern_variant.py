# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Assignment 4 (Part IV): a modern variant of GRPO, implemented, trained and compared
#
# Read chapters 10 and 11 of the book first. Since GRPO, many papers have changed one piece of its
# loss. Pick **one** of these three, implement its per-token loss, train with it on a small task and
# compare it with GRPO's clipped loss:
#
# | `VARIANT` | what changes | source | ε_low, ε_high |
# |---|---|---|---|
# | `"dapo_clip_higher"` | the clip band is asymmetric: low-probability tokens may rise further | Yu et al. 2025, arXiv:2503.14476, "Clip-Higher" | 0.2, 0.28 |
# | `"cispo"` | clip the importance *weight* (stop-gradient), not the update: no token's gradient is ever dropped | MiniMax 2025, arXiv:2506.13585, CISPO | 1.0, 0.28 |
# | `"gspo"` | one ratio per sequence, the geometric mean of its tokens' ratios, clipped in a very narrow band | Zheng et al. 2025, arXiv:2507.18071, eq. 5–7 | 3e-4, 4e-4 |
#
# With $\rho_t = \exp(\log\pi_\theta(o_t) - \log\pi_{\theta_\text{old}}(o_t))$ and the completion's
# advantage $\hat A$ (the same for all its tokens), the per-token losses to *minimise* are
#
# * clip-higher: $-\min\big(\rho_t\hat A,\ \operatorname{clip}(\rho_t, 1-\varepsilon_\text{low}, 1+\varepsilon_\text{high})\hat A\big)$;
# * CISPO: $-\operatorname{sg}\big[\operatorname{clip}(\rho_t, 1-\varepsilon_\text{low}, 1+\varepsilon_\text{high})\big]\,\hat A\,\log\pi_\theta(o_t)$,
#   where sg is stop-gradient (`.detach()`);
# * GSPO: $-\min\big(s\hat A,\ \operatorname{clip}(s, 1-\varepsilon_\text{low}, 1+\varepsilon_\text{high})\hat A\big)$ on every
#   token of the completion, with $s = \exp\big(\tfrac{1}{|o|}\sum_{t} (\log\pi_\theta(o_t) - \log\pi_{\theta_\text{old}}(o_t))\big)$
#   over the completion's real tokens ($|o|$ of them, the mask).
#
# **14 points** in all: 6 autograded (one test is hidden and runs only when your notebook is
# graded), and 8 for the written comparison, graded by hand. The tests compare your loss with values
# of the `rlbook` library's implementation of the variant you chose (stored numbers in the visible
# tests, inputs you have not seen in the hidden one). Write your code where it says
# `YOUR CODE HERE` (delete the `raise NotImplementedError()` line) and do not change the test cells.
#
# **How your notebook is graded.** It runs in a fresh kernel in a sandbox (no network, no files but its
# own). Of your code cells, only function and class definitions, imports and constant assignments
# (`EPS = 1e-8`) run at grading: calls and prints you add to try things out are left out. You may
# import `torch`, `numpy`, `math`, `random`, `itertools`, `functools`, `collections`, `typing`,
# `dataclasses`, `statistics`, `warnings` and `matplotlib`. Your code may not call the `rlbook`
# library's implementations of the functions you write (nor the notebook's reference functions), and
# may not reach IPython, files, the operating system or the tests' tools; a cell that does is not run,
# and the instructor sees why. Two rules cost points with no trick in sight: a constant computed from
# other names (`N = len(x)`, `SCALE = 1 / K`) is left out like a call, so a function that reads it fails
# with a `NameError`; and a decorator (`@torch.no_grad()`) makes its whole cell not run. Compute such
# values inside your functions. A test fails when it raises: a failed assertion, an error, or running
# longer than the time limit per cell. What you print, and warnings (stderr), never fail a test.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import matplotlib.pyplot as plt
import torch

import rlbook as rl

rl.seed_everything(0)
torch.set_num_threads(1)

# The task: 4 prompts, each with a hidden target string of 8 tokens from a vocabulary of 6. The policy
# is a table of logits (one softmax per prompt and position); a completion's reward is the fraction of
# its tokens that match the target. Each step samples G = 8 completions per prompt, computes GRPO's
# group advantages, and takes 8 Adam steps on the same batch (so the policy moves away from the one
# that sampled it, and the ratios and the clip matter).
NUM_PROMPTS, LENGTH, VOCAB, GROUP_SIZE = 4, 8, 6, 8
TARGET = torch.randint(0, VOCAB, (NUM_PROMPTS, LENGTH), generator=torch.Generator().manual_seed(123))


def train(loss_fn, num_steps=25, epochs=8, lr=0.1, seed=0):
    """GRPO-style training with the per-token loss ``loss_fn(log_probs, old_log_probs, advantages, mask)``.

    Returns a dict: ``reward`` (the exact expected reward after each step), ``moved`` (the share of
    tokens whose ratio left [0.8, 1.2] by the last epoch of each step)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.zeros(NUM_PROMPTS, LENGTH, VOCAB, requires_grad=True)
    optimizer = torch.optim.Adam([logits], lr=lr)
    prompt = torch.arange(NUM_PROMPTS).repeat_interleave(GROUP_SIZE)
    mask = torch.ones(NUM_PROMPTS * GROUP_SIZE, LENGTH, dtype=torch.bool)
    out = {"reward": [], "moved": []}
    for _ in range(num_steps):
        with torch.no_grad():
            probs = torch.softmax(logits, -1)[prompt]  # (B, L, V)
            tokens = torch.multinomial(probs.reshape(-1, VOCAB), 1, generator=g).reshape(-1, LENGTH)
            rewards = (tokens == TARGET[prompt]).float().mean(-1)
            advantages = rl.group_relative_advantages(rewards, GROUP_SIZE)[:, None]
            old_log_probs = torch.log_softmax(logits, -1)[prompt].gather(-1, tokens[..., None]).squeeze(-1)
        for _ in range(epochs):
            log_probs = torch.log_softmax(logits, -1)[prompt].gather(-1, tokens[..., None]).squeeze(-1)
            loss = rl.token_mean(loss_fn(log_probs, old_log_probs, advantages, mask), mask)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            ratio = torch.exp(log_probs - old_log_probs)
            out["moved"].append(float(((ratio < 0.8) | (ratio > 1.2)).float().mean()))
            out["reward"].append(float(torch.softmax(logits, -1).gather(-1, TARGET[..., None]).mean()))
    return out

# %% build_only=true
# Run when the assignment is built, then removed: the library's losses, the visible tests' inputs,
# and GRPO's training curves (stored as numbers).
LIBRARY = {
    "grpo": lambda lp, old, adv, mask: rl.clipped_surrogate_loss(lp, old, adv, 0.2),
    "dapo_clip_higher": lambda lp, old, adv, mask: rl.clipped_surrogate_loss(lp, old, adv, 0.2, 0.28),
    "cispo": lambda lp, old, adv, mask: rl.cispo_loss(lp, old, adv, 1.0, 0.28),
    "gspo": lambda lp, old, adv, mask: rl.gspo_loss(lp, old, adv, mask, 3e-4, 4e-4),
}
LOSS_CASES = []
_g = torch.Generator().manual_seed(0)
for _B, _T in [(4, 5), (6, 4)]:
    _lp = -torch.rand(_B, _T, generator=_g) * 3
    LOSS_CASES.append((_lp, _lp + 0.3 * torch.randn(_B, _T, generator=_g), torch.randn(_B, 1, generator=_g),
                       torch.arange(_T)[None, :] < torch.randint(1, _T + 1, (_B, 1), generator=_g)))

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_choose", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1. Choose and implement (4 points)
#
# Set `VARIANT` to one of `"dapo_clip_higher"`, `"cispo"`, `"gspo"` in the first cell below. Then
# write `variant_loss`: `log_probs`, `old_log_probs` and `mask` are `(B, T)` (mask True on real
# tokens), `advantages` is `(B, 1)`; return the per-token loss, `(B, T)`, with the ε's of the table.
# The value on masked-out tokens does not matter (the aggregation ignores it). Keep it differentiable
# with respect to `log_probs`: the gradient is what trains the policy, and the tests compare it too.

# %% nbgrader={"grade": false, "grade_id": "choose_variant", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
VARIANT = "cispo"
### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "variant_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def variant_loss(log_probs, old_log_probs, advantages, mask):
    """(B, T) log-probs now and at sampling, (B, 1) advantages, (B, T) bool mask -> (B, T) per-token loss."""
    ### BEGIN SOLUTION
    ratio = torch.exp(log_probs - old_log_probs)
    if VARIANT == "dapo_clip_higher":
        return -torch.min(ratio * advantages, ratio.clamp(1 - 0.2, 1 + 0.28) * advantages)
    if VARIANT == "cispo":
        weight = ratio.clamp(1 - 1.0, 1 + 0.28).detach()
        return -weight * advantages * log_probs
    if VARIANT == "gspo":
        m = mask.to(log_probs.dtype)
        seq_log_ratio = ((log_probs - old_log_probs) * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True)
        s = torch.exp(seq_log_ratio).expand_as(log_probs)
        return -torch.min(s * advantages, s.clamp(1 - 3e-4, 1 + 4e-4) * advantages)
    raise ValueError(f"VARIANT: unknown {VARIANT!r}")
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_variant_loss", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert VARIANT in ("dapo_clip_higher", "cispo", "gspo"), f"VARIANT must be one of the three names, got {VARIANT!r}"
# (log_probs, old_log_probs, advantages, mask), and each variant's loss by the library's
# implementation on them (stored numbers; only the real tokens are compared)
CASES = snapshot(LOSS_CASES)
EXPECTED = snapshot({name: [LIBRARY[name](*case) for case in LOSS_CASES] for name in ("dapo_clip_higher", "cispo", "gspo")})
for (log_probs, old, adv, mask), expected in zip(CASES, EXPECTED[VARIANT]):
    torch.testing.assert_close(variant_loss(log_probs, old, adv, mask)[mask], expected[mask])
### BEGIN HIDDEN TESTS
REFERENCE = {
    "dapo_clip_higher": lambda lp, old, adv, mask: rl.clipped_surrogate_loss(lp, old, adv, 0.2, 0.28),
    "cispo": lambda lp, old, adv, mask: rl.cispo_loss(lp, old, adv, 1.0, 0.28),
    "gspo": lambda lp, old, adv, mask: rl.gspo_loss(lp, old, adv, mask, 3e-4, 4e-4),
}
g = torch.Generator().manual_seed(GRADING_SEED)
for B, T in [(4, 5), (16, 8), (9, 3)]:
    log_probs = -torch.rand(B, T, generator=g) * 3
    old = log_probs + 0.3 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, 1, generator=g)
    mask = torch.arange(T)[None, :] < torch.randint(1, T + 1, (B, 1), generator=g)
    torch.testing.assert_close(variant_loss(log_probs, old, adv, mask)[mask],
                               REFERENCE[VARIANT](log_probs, old, adv, mask)[mask])
### END HIDDEN TESTS
print(f"{VARIANT} loss: OK")

# %% nbgrader={"grade": true, "grade_id": "test_variant_gradient", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# the gradient of the aggregated loss, which is what training uses
### BEGIN HIDDEN TESTS
REFERENCE = {
    "dapo_clip_higher": lambda lp, old, adv, mask: rl.clipped_surrogate_loss(lp, old, adv, 0.2, 0.28),
    "cispo": lambda lp, old, adv, mask: rl.cispo_loss(lp, old, adv, 1.0, 0.28),
    "gspo": lambda lp, old, adv, mask: rl.gspo_loss(lp, old, adv, mask, 3e-4, 4e-4),
}
g = torch.Generator().manual_seed(GRADING_SEED + 1)
log_probs = (-torch.rand(12, 6, generator=g) * 3).requires_grad_(True)
old = log_probs.detach() + 0.4 * torch.randn(12, 6, generator=g)
adv = torch.randn(12, 1, generator=g)
mask = torch.arange(6)[None, :] < torch.randint(1, 7, (12, 1), generator=g)
(mine,) = torch.autograd.grad(rl.token_mean(variant_loss(log_probs, old, adv, mask), mask), log_probs)
(theirs,) = torch.autograd.grad(rl.token_mean(REFERENCE[VARIANT](log_probs, old, adv, mask), mask), log_probs)
torch.testing.assert_close(mine * mask, theirs * mask)
### END HIDDEN TESTS
print("gradient: checked when graded")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_train", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 2. Train with it (2 points)
#
# The cell below trains with your loss for 25 steps on three seeds and plots it beside GRPO's clipped
# loss (the library's, trained on the same seeds when the assignment was built: its curves are
# stored). The expected reward starts at 1/6 (every token uniformly likely); your variant must reach
# an average of at least 0.75 over the three seeds. Each run takes well under a second.

# %% nbgrader={"grade": true, "grade_id": "test_variant_training", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# GRPO's clipped loss (the library's) trained by `train` on seeds 0-2 when the assignment was built
GRPO_RUNS = snapshot([{k: [round(x, 4) for x in v] for k, v in train(LIBRARY["grpo"], seed=seed).items()}
                      for seed in range(3)])
runs = {"grpo (library, stored)": GRPO_RUNS, f"{VARIANT} (yours)": [train(variant_loss, seed=seed) for seed in range(3)]}
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), dpi=80)
for k, (name, results) in enumerate(runs.items()):
    for i, r in enumerate(results):
        axes[0].plot(r["reward"], color=f"C{k}", alpha=0.8, label=name if i == 0 else None)
        axes[1].plot(r["moved"], color=f"C{k}", alpha=0.8, label=name if i == 0 else None)
    finals = [r["reward"][-1] for r in results]
    early = sum(r["reward"][3] for r in results) / 3
    print(f"{name:24s} final expected reward per seed {[round(x, 3) for x in finals]}, mean {sum(finals) / 3:.3f}; "
          f"mean after 4 steps {early:.2f}; "
          f"tokens whose ratio left [0.8, 1.2]: {sum(sum(r['moved']) for r in results) / 75:.1%}")
axes[0].set_xlabel("step")
axes[0].set_ylabel("expected reward")
axes[0].legend(fontsize=8)
axes[1].set_xlabel("step")
axes[1].set_ylabel("share of tokens with ρ outside [0.8, 1.2]")
axes[1].legend(fontsize=8)
fig.tight_layout()
plt.show()
mine = [r["reward"][-1] for r in runs[f"{VARIANT} (yours)"]]
assert sum(mine) / 3 >= 0.75, f"the variant should reach an average expected reward of 0.75 (got {sum(mine) / 3:.3f})"

# %% [markdown] nbgrader={"grade": false, "grade_id": "question_compare", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3. Compare (8 points, graded by hand)
#
# In the cell below, in 150–300 words: (a) what your variant changes in the *gradient* compared with
# GRPO's clipped loss, token by token (which tokens does GRPO ignore that your variant does not, or the
# reverse?) (3 points); (b) what the two runs above show, with numbers from the printed lines: speed,
# final reward, spread over seeds, how far the ratios moved (3 points); (c) one reason the paper that
# introduced your variant gives for it, and whether this small experiment can support or contradict
# that reason (2 points).

# %% [markdown] nbgrader={"grade": true, "grade_id": "answer_compare", "locked": false, "points": 8, "schema_version": 3, "solution": true, "task": false}
# (a) CISPO keeps every token's gradient. GRPO's clipped loss has zero gradient for a token whose ratio
# has already left the band in the direction its advantage favours (ρ > 1.2 with Â > 0, ρ < 0.8 with
# Â < 0), so after a few epochs on the same batch those tokens stop contributing. CISPO's gradient is
# −clip(ρ)·Â·∇log π for every token: the weight is capped at 1.28 but never zeroed, so a token that
# moved a lot still pushes, with bounded strength.
#
# (b) In the instructor's run (seeds 0–2; a different machine may differ in the last digits), GRPO
# ended at a mean expected reward of about 0.95 with the three seeds close together, CISPO at about
# 0.91 with a wide spread (from about 0.84 to 0.99). CISPO starts faster (a mean of 0.56 against 0.45
# after four steps) but two of its seeds then slow down and end below GRPO's.
# Keeping every gradient did not make the ratios move further overall: about 18% of tokens left
# [0.8, 1.2] under CISPO against 24% under GRPO. So on this task CISPO bought early speed at the
# price of predictability.
#
# (c) MiniMax-M1 introduced CISPO because in long reasoning outputs the rare "fork" tokens (e.g.
# "wait", "recheck") get large ratios and PPO's clip drops their gradient after the first update, which
# slowed learning. This toy task has no such tokens (every position is equally important and the
# reward is dense), so it cannot test that claim; it only shows what never dropping a gradient does
# here: faster early progress, and a wider spread over seeds at the end.
#
# *Marking: (a) 3 points for a correct token-level description of which gradients the variant keeps or
# drops; (b) 3 points for an account that quotes the printed numbers; (c) 2 points for the paper's
# motivation and an honest statement of what this experiment can and cannot show.*
