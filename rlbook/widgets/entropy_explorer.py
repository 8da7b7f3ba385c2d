"""Entropy explorer: what repeated policy-gradient steps do to a softmax policy's entropy, and why.

A policy π = softmax(z) over six tokens starts confident (π₀ = 0.60, 0.15, 0.10, 0.05, 0.05, 0.05) and
is trained on a reward pattern (a preset) with PPO's clipped surrogate. Each step t takes π_old = π_t,
the advantages A = r − E_π_old[r] (the mean baseline, exact), and ``epochs`` plain gradient steps of
size η on the logits z of

    L(z) = Σ_a π_old(a) · ℓ_clip(a)  −  c · H(π_z),
    ℓ_clip(a) = −min(ρ_a A_a, clip(ρ_a, 1 − ε_low, 1 + ε_high) A_a),   ρ_a = π_z(a) / π_old(a),

the exact expectation over the tokens π_old samples (no sampling: every number is deterministic;
the "random ±1" preset draws its rewards from a seeded generator). ℓ_clip is
:func:`rlbook.losses.clipped_surrogate_loss` (ε_high > ε_low is DAPO's clip-higher, arXiv:2503.14476)
and H is :func:`rlbook.losses.entropy_from_logits` (the bonus c·H).

Cui et al. 2025 (arXiv:2505.22617, Lemma 1) give the entropy change of a softmax policy whose logits
move by Δz, to first order:

    ΔH ≈ −Cov_{a∼π}(log π(a), Δz(a)),   and for a policy-gradient step Δz = η·π·(A − E_π A):
    ΔH ≈ −η · Cov_{a∼π}(log π(a), π(a)·A(a)),

so a confident token with a positive advantage lowers the entropy and a rare one raises it. The
explorer draws the entropy over the steps (with the same run at symmetric clipping ε_high = ε_low
for comparison), each token's probability, the exact ΔH of each step's first gradient step against
this prediction, and π before and after. :func:`policy_covariance` is the covariance under π: the
limit of :func:`rlbook.entropy_control.token_covariance`'s batch mean when the batch holds the tokens
in proportion to π. ipywidgets is imported when the widget is built.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from rlbook import _checks
from rlbook.losses import clip_region, clipped_surrogate_loss, entropy_from_logits
from rlbook.plotting import get_ax

__all__ = ["START_PROBS", "PRESETS", "FIGSIZE", "start_logits", "preset_rewards", "policy_covariance",
           "entropy_trajectory", "plot_entropy", "entropy_readout", "entropy_frame", "entropy_explorer"]

# one dominant token; the probabilities are counts / 20 (12, 3, 2, 1, 1, 1), so a batch of 20 tokens
# holds π₀ exactly (the tests use it to tie policy_covariance to the library's token_covariance)
START_PROBS = (0.60, 0.15, 0.10, 0.05, 0.05, 0.05)
K = len(START_PROBS)
# name → rewards r (K,), or None: ±1 per token, drawn afresh each step from a generator seeded ``seed``
PRESETS = {
    "confident token rewarded": (1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    "rare token rewarded": (0.0, 0.0, 0.0, 0.0, 1.0, 0.0),
    "confident and rare rewarded": (1.0, 0.0, 0.0, 0.0, 1.0, 0.0),
    "random ±1": None,
    "every token rewarded (A = 0)": (1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
}
MAX_STEPS, MAX_EPOCHS = 1000, 64
FIGSIZE = (8.4, 6.4)  # inches: 2 × 2 panels, shown at 80 dpi, 672 px wide
_DT = torch.float64


def start_logits() -> torch.Tensor:
    """The starting logits z₀ = log π₀ (float64, (K,) with K = 6); softmax(z₀) = ``START_PROBS``."""
    return torch.tensor(START_PROBS, dtype=_DT).log()


def _check_preset(preset) -> str:
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError(f"`preset` must be one of: {', '.join(PRESETS)}; got {preset!r}")
    return preset


def preset_rewards(preset: str, steps: int, seed: int = 0) -> torch.Tensor:
    """The rewards of every step: (steps, K) float64; a fixed row repeated, or "random ±1" drawn per step.

    Raises:
        ValueError: an unknown ``preset``; ``steps`` not an integer in [1, 1000].
    """
    rewards = PRESETS[_check_preset(preset)]
    steps = _check_int("steps", steps, MAX_STEPS)
    if rewards is not None:
        return torch.tensor(rewards, dtype=_DT).expand(steps, K).clone()
    g = torch.Generator().manual_seed(int(seed))
    return (2 * torch.randint(0, 2, (steps, K), generator=g) - 1).to(_DT)


def policy_covariance(probs, x, y) -> torch.Tensor:
    """Cov_{a∼π}(x(a), y(a)) = Σ_a π(a)·(x(a) − E_π x)·(y(a) − E_π y), exactly (a 0-dim tensor).

    The expectation over tokens drawn from π of :func:`rlbook.entropy_control.token_covariance`'s
    per-token product (Cui et al. 2025, arXiv:2505.22617, eq. 9) as the batch grows.

    Args:
        probs: (K,) π, non-negative, summing to 1.
        x, y: (K,) per-token values (e.g. log π and Δz, nats).
    Raises:
        ValueError: shapes differ, or ``probs`` is not a distribution.
    """
    probs = _checks.as_float_tensor("probs", probs, dtype=_DT)
    x, y = _checks.as_float_tensor("x", x, dtype=_DT), _checks.as_float_tensor("y", y, dtype=_DT)
    _checks.check_same_shape(probs=probs, x=x, y=y)
    _checks.check_probabilities("probs", probs)
    return (probs * (x - probs @ x) * (y - probs @ y)).sum()


def _check_int(name, value, high) -> int:
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise ValueError(f"`{name}` must be an integer in [1, {high}]; got {value!r}")
    return value


def _check_setting(preset, clip_eps_low, clip_eps_high, entropy_coef, lr, steps, epochs):
    _check_preset(preset)
    for name, value in (("clip_eps_low", clip_eps_low), ("clip_eps_high", clip_eps_high),
                        ("entropy_coef", entropy_coef)):
        _checks.check_in_range(name, value, 0.0, math.inf, high_inclusive=False)
    _checks.check_in_range("lr", lr, 0.0, math.inf, low_inclusive=False, high_inclusive=False)
    return (preset, float(clip_eps_low), float(clip_eps_high), float(entropy_coef), float(lr),
            _check_int("steps", steps, MAX_STEPS), _check_int("epochs", epochs, MAX_EPOCHS))


def _loss(z, old_log_probs, advantages, clip_eps_low, clip_eps_high, entropy_coef):
    """L(z): the π_old-weighted clipped surrogate (the exact expectation over tokens) minus c·H."""
    per_token = clipped_surrogate_loss(torch.log_softmax(z, -1), old_log_probs, advantages, clip_eps_low, clip_eps_high)
    return (old_log_probs.exp() * per_token).sum() - entropy_coef * entropy_from_logits(z)


def _outer_step(z, rewards, clip_eps_low, clip_eps_high, entropy_coef, lr, epochs):
    """One step from π_old = softmax(z): ``epochs`` gradient steps; the first one's ΔH and prediction."""
    old = torch.log_softmax(z, -1)
    # A(a) = r(a) − E_π_old[r] written as Σ_b π_old(b)·(r(a) − r(b)): exactly 0 when every reward is equal
    advantages = (rewards[:, None] - rewards[None, :]) @ old.exp()
    for epoch in range(epochs):
        theta = z.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(_loss(theta, old, advantages, clip_eps_low, clip_eps_high, entropy_coef), theta)
        z = z - lr * grad
        if epoch == 0:  # one plain gradient step from π_old (ρ = 1: the clip is not active yet)
            one_step = float(entropy_from_logits(z) - entropy_from_logits(old))
            first_order = float(-policy_covariance(old.exp(), old, -lr * grad))
    ratio = torch.exp(torch.log_softmax(z, -1) - old)
    clipped = float(old.exp() @ clip_region(ratio, advantages, clip_eps_low, clip_eps_high).to(_DT))
    return z, advantages, one_step, first_order, clipped


@functools.lru_cache(maxsize=32)
def _trajectory(preset, clip_eps_low, clip_eps_high, entropy_coef, lr, steps, epochs, seed):
    rewards = preset_rewards(preset, steps, seed)
    z = start_logits()
    logits, advantages, rows = [z], [], []
    for t in range(steps):
        z, adv, *numbers = _outer_step(z, rewards[t], clip_eps_low, clip_eps_high, entropy_coef, lr, epochs)
        logits.append(z)
        advantages.append(adv)
        rows.append(numbers)
    logits = torch.stack(logits)
    one_step, first_order, clipped = (np.array(col) for col in zip(*rows))
    return {"probs": torch.softmax(logits, -1).numpy(), "entropy": entropy_from_logits(logits).numpy(),
            "rewards": rewards.numpy(), "advantages": torch.stack(advantages).numpy(), "one_step": one_step,
            "first_order": first_order, "clipped": clipped}


def entropy_trajectory(preset: str = "confident token rewarded", clip_eps_low: float = 0.2,
                       clip_eps_high: float = 0.28, entropy_coef: float = 0.0, lr: float = 1.0, steps: int = 40,
                       epochs: int = 4, seed: int = 0) -> dict:
    """The policy over ``steps`` clipped policy-gradient steps from π₀ (see the module's docstring).

    Args:
        preset: a key of ``PRESETS`` (the reward pattern).
        clip_eps_low, clip_eps_high: ε_low, ε_high ≥ 0, finite (ε_high > ε_low: clip-higher; ε ≥ 1 on
            the low side means no lower clip).
        entropy_coef: the entropy bonus c ≥ 0, finite.
        lr: the step size η > 0 of each gradient step on the logits (nats of logit per unit gradient).
        steps: outer steps (each a fresh π_old and fresh advantages), an integer in [1, 1000].
        epochs: gradient steps per outer step from the same π_old, an integer in [1, 64].
        seed: the generator's seed for "random ±1".
    Returns:
        a dict of float64 NumPy arrays: ``probs`` (steps+1, K) π_t; ``entropy`` (steps+1,) H(π_t), nats;
        ``rewards`` and ``advantages`` (steps, K), A = r − E_π_t[r]; per step (steps,): ``one_step`` the
        exact ΔH of the step's first gradient step, ``first_order`` its prediction −Cov_π_t(log π_t, Δz)
        (Cui et al. 2025, Lemma 1), ``clipped`` π_t's mass on tokens whose clip is active after the
        step (:func:`rlbook.losses.clip_region`); and the inputs.
    Raises:
        ValueError: an unknown ``preset``; ε, c negative or not finite; η ≤ 0 or not finite (``lr``);
            ``steps`` or ``epochs`` not an integer in range (each argument named).
    """
    setting = _check_setting(preset, clip_eps_low, clip_eps_high, entropy_coef, lr, steps, epochs)
    out = {k: v.copy() for k, v in _trajectory(*setting, int(seed)).items()}
    names = ("preset", "clip_eps_low", "clip_eps_high", "entropy_coef", "lr", "steps", "epochs")
    return {**out, **dict(zip(names, setting)), "seed": int(seed)}


def _reference_runs(s):
    """The same run at symmetric clipping (ε_high = ε_low) and without the bonus, where they differ."""
    preset, low, high, c = s["preset"], s["clip_eps_low"], s["clip_eps_high"], s["entropy_coef"]
    rest = (s["lr"], s["steps"], s["epochs"], s["seed"])
    refs = {}
    if high != low:
        refs[f"symmetric ε = {low:g}"] = (_trajectory(preset, low, low, c, *rest), "--")
    if c > 0:
        refs["no entropy bonus"] = (_trajectory(preset, low, high, 0.0, *rest), ":")
    return refs


def _token_labels(s) -> list[str]:
    if PRESETS[s["preset"]] is None:
        return [f"t{i + 1}" for i in range(K)]
    return [f"t{i + 1} (r = {r:g})" for i, r in enumerate(PRESETS[s["preset"]])]


def _plot_entropy_curve(ax, s):
    steps = np.arange(s["steps"] + 1)
    ax.plot(steps, s["entropy"], color="C0", lw=2, label=f"ε = ({s['clip_eps_low']:g}, {s['clip_eps_high']:g}), "
                                                         f"c = {s['entropy_coef']:g}")
    for label, (ref, style) in _reference_runs(s).items():
        ax.plot(steps, ref["entropy"], style, color="0.35", lw=1.5, label=label)
    ax.axhline(math.log(K), color="0.6", lw=0.8)
    ax.text(0, math.log(K), " uniform: log 6", va="bottom", fontsize=9, color="0.4")
    ax.set_ylim(0, math.log(K) * 1.12)
    ax.set_xlim(0, s["steps"])
    ax.set_xlabel("step")
    ax.set_ylabel("entropy H(π) (nats)")
    ax.set_title(f"{s['preset']}: η = {s['lr']:g}, {s['epochs']} epochs per step", fontsize=9)
    ax.legend(fontsize=9, frameon=False, loc="best")


def _plot_probs(ax, s):
    steps = np.arange(s["steps"] + 1)
    for i, label in enumerate(_token_labels(s)):
        ax.plot(steps, s["probs"][:, i], color=f"C{i}", lw=1.8, label=label)
    ax.set_yscale("log")
    ax.set_ylim(max(float(s["probs"].min()) / 2, 1e-8), 1.5)
    ax.set_xlim(0, s["steps"])
    ax.set_xlabel("step")
    ax.set_ylabel("π(token) (log scale)")
    ax.set_title("which tokens' probabilities grow", fontsize=9)
    ax.legend(fontsize=8.5, frameon=False, loc="lower left", ncol=2)


def _plot_lemma(ax, s):
    steps = np.arange(s["steps"])
    ax.plot(steps, s["one_step"], color="C0", lw=2, label="exact ΔH of the first gradient step")
    ax.plot(steps, s["first_order"], "--", color="C3", lw=1.5, label="first order: −Cov_π(log π, Δz)")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlim(0, max(s["steps"] - 1, 1))
    ax.set_xlabel("step t (the gradient step from π_t)")
    ax.set_ylabel("ΔH (nats)")
    ax.set_title("Cui et al. Lemma 1: ΔH ≈ −Cov(log π, Δz), Δz = η·π·A without a bonus", fontsize=9)
    ax.legend(fontsize=9, frameon=False)


def _plot_before_after(ax, s):
    k = np.arange(K)
    ax.bar(k - 0.2, s["probs"][0], 0.4, color="0.6", label="π at step 0")
    ax.bar(k + 0.2, s["probs"][-1], 0.4, color="C0", label=f"π at step {s['steps']}")
    adv = s["advantages"][0]
    ax.set_xticks(k, [f"t{i + 1}\nA₀ {a:+.2f}" for i, a in enumerate(adv)], fontsize=9)
    ax.set_ylim(0, 1.2)
    ax.set_ylabel("probability")
    ax.set_title(f"before and after: H {s['entropy'][0]:.3f} → {s['entropy'][-1]:.3f} nats", fontsize=9)
    ax.legend(fontsize=9, frameon=False, loc="upper center", ncol=2)


def plot_entropy(preset: str = "confident token rewarded", clip_eps_low: float = 0.2, clip_eps_high: float = 0.28,
                 entropy_coef: float = 0.0, lr: float = 1.0, steps: int = 40, epochs: int = 4, seed: int = 0,
                 axes=None):
    """Four panels: (top left) the entropy over the steps, with the same run at symmetric clipping and
    without the bonus (dashed, dotted) where those differ; (top right) each token's probability, log
    scale; (bottom left) the exact ΔH of each step's first gradient step and the first-order
    prediction −Cov_π(log π, Δz); (bottom right) π at step 0 and at the last step, A at step 0 below.

    Args:
        as :func:`entropy_trajectory`; axes: four Matplotlib axes (any shape that flattens to four), or
        None for a new figure of ``FIGSIZE``.
    Returns:
        the four axes, flattened.
    Raises:
        ValueError: as :func:`entropy_trajectory`.
    """
    s = entropy_trajectory(preset, clip_eps_low, clip_eps_high, entropy_coef, lr, steps, epochs, seed)
    if axes is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(2, 2, figsize=FIGSIZE, dpi=80)
    axes = [get_ax(a) for a in np.asarray(axes, dtype=object).flatten()]
    _plot_entropy_curve(axes[0], s)
    _plot_probs(axes[1], s)
    _plot_lemma(axes[2], s)
    _plot_before_after(axes[3], s)
    return axes


def _signed(x: float) -> str:
    return f"{round(x, 5) + 0.0:+.5f}"  # no "-0.00000"


def _row(name, values, fmt="7.3f") -> str:
    return f"{name:<14}" + "".join(f"{x + 0.0:{fmt}}" for x in values)


def entropy_readout(preset: str = "confident token rewarded", clip_eps_low: float = 0.2, clip_eps_high: float = 0.28,
                    entropy_coef: float = 0.0, lr: float = 1.0, steps: int = 40, epochs: int = 4,
                    seed: int = 0) -> tuple[str, list[str]]:
    """The explorer's numbers at one setting (text; pure, tested).

    Returns:
        (readout, warnings): per token r, A and π at step 0 and π at the last step; H at both ends and
        for the reference runs (symmetric clip, no bonus); at step 0 the exact one-step ΔH, the
        first-order prediction and their gap at η and at η/2 (the gap is O(η²): 4× smaller as η → 0);
        π_old's mass on tokens whose clip is active after the first and the last step. Warnings: ε_low = ε_high = 0
        (the band is empty).
    Raises:
        ValueError: as :func:`entropy_trajectory`.
    """
    s = entropy_trajectory(preset, clip_eps_low, clip_eps_high, entropy_coef, lr, steps, epochs, seed)
    half = entropy_trajectory(preset, clip_eps_low, clip_eps_high, entropy_coef, lr / 2, 1, 1, seed)
    gap, gap_half = (abs(x["one_step"][0] - x["first_order"][0]) for x in (s, half))
    rewards = "±1 drawn each step" if PRESETS[preset] is None else ""
    shrink = f" ({gap / gap_half:.1f}× smaller; an O(η²) gap shrinks 4× as η → 0)" if gap_half > 0 else ""
    lines = ["              " + "".join(f"{'t' + str(i + 1):>7}" for i in range(K)),
             _row("r (step 0)", s["rewards"][0]) + ("   " + rewards if rewards else ""),
             _row("A (step 0)", s["advantages"][0], "+7.3f"),
             _row("π step 0", s["probs"][0]), _row(f"π step {s['steps']}", s["probs"][-1]),
             f"H: {s['entropy'][0]:.4f} → {s['entropy'][-1]:.4f} nats (uniform: log 6 = {math.log(K):.4f})"]
    for label, (ref, _) in _reference_runs(s).items():
        lines.append(f"   {label}: H after {s['steps']} steps = {ref['entropy'][-1]:.4f}")
    lines += [f"first gradient step (η = {s['lr']:g}): exact ΔH = {_signed(s['one_step'][0])}, "
              f"first order −Cov = {_signed(s['first_order'][0])}, gap {gap:.2e}",
              f"   at η/2 the gap is {gap_half:.2e}{shrink}",
              f"clip active on {100 * s['clipped'][0]:.1f}% of π_old's mass after step 1, "
              f"{100 * s['clipped'][-1]:.1f}% after step {s['steps']}"]
    warnings = []
    if s["clip_eps_low"] == 0 and s["clip_eps_high"] == 0:
        warnings.append("ε_low = ε_high = 0: the band [1, 1] is empty; a token's gradient stops as soon as "
                        "its ratio moves the way its advantage pushes it")
    return "\n".join(lines), warnings


def entropy_frame(preset: str, clip_eps_low: float, clip_eps_high: float, entropy_coef: float, lr: float, steps: int,
                  epochs: int):
    """The explorer's render function: :func:`plot_entropy` on a new figure and :func:`entropy_readout`.

    Returns:
        a :class:`rlbook.widgets._live.Frame`.
    Raises:
        ValueError: as :func:`entropy_trajectory` (checked before a figure is made).
    """
    import matplotlib.pyplot as plt

    from rlbook.widgets._live import Frame

    args = (preset, clip_eps_low, clip_eps_high, entropy_coef, lr, steps, epochs)
    readout, warnings = entropy_readout(*args)
    fig, axes = plt.subplots(2, 2, figsize=FIGSIZE, dpi=80)
    plot_entropy(*args, axes=axes)
    fig.tight_layout()
    return Frame(fig, readout, warnings)


def entropy_explorer():
    """Interactive explorer: the reward pattern (a dropdown), sliders for ε_low, ε_high, the entropy
    bonus c, the step size η, the number of steps and the epochs per step; redraws
    :func:`plot_entropy` and prints :func:`entropy_readout`. η = 0 is on its slider and answered with
    a "⚠" line. Needs ipywidgets (imported here).

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); see :func:`rlbook.widgets._live.live_explorer`.
    """
    import ipywidgets as widgets

    from rlbook.widgets._live import live_explorer

    style = {"description_width": "initial"}
    controls = {
        "preset": widgets.Dropdown(options=list(PRESETS), value="confident token rewarded", description="rewards",
                                   style=style, layout=widgets.Layout(width="330px")),
        "clip_eps_low": widgets.FloatSlider(value=0.2, min=0.0, max=0.5, step=0.01, description="ε_low", style=style),
        "clip_eps_high": widgets.FloatSlider(value=0.28, min=0.0, max=1.0, step=0.01, description="ε_high",
                                             style=style),
        "entropy_coef": widgets.FloatSlider(value=0.0, min=0.0, max=0.5, step=0.01, description="entropy bonus c",
                                            style=style),
        "lr": widgets.FloatSlider(value=1.0, min=0.0, max=5.0, step=0.1, description="η", style=style),
        "steps": widgets.IntSlider(value=40, min=1, max=200, description="steps", style=style),
        "epochs": widgets.IntSlider(value=4, min=1, max=8, description="epochs", style=style),
    }
    layout = [["preset", "entropy_coef"], ["clip_eps_low", "clip_eps_high"], ["lr", "steps", "epochs"]]
    return live_explorer(controls, layout, entropy_frame)
