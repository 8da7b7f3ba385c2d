"""Trust-region explorer: a two-parameter policy's KL region, its Fisher ellipse, the vanilla and natural steps.

The policy is a softmax over three actions with logits z(θ) = (κ·θ₁, θ₂, 0) on a one-step bandit
with fixed rewards r (book chapter 6, §6.4–§6.7). Around the current point θ_old the explorer draws

* the surrogate L(θ) − L(θ_old) = Σ_a π_θ(a)·A(a), A(a) = r_a − Σ_b π_old(b) r_b (chapter 6's
  importance-weighted surrogate, eq. 6.2, evaluated exactly over the three actions; on a bandit it
  equals J(θ) − J(θ_old));
* the exact trust region {θ : KL(π_old ‖ π_θ) ≤ δ} (a contour of the true KL) and its quadratic
  model, the ellipse ½ ΔθᵀFΔθ = δ with F the Fisher information at θ_old (eq. 6.6);
* the vanilla step αg scaled to the same quadratic KL (½α² gᵀFg = δ) and the natural (TRPO) step
  s = √(2δ / gᵀF⁻¹g)·F⁻¹g (eq. 6.8), which maximises the linear model gᵀs on the ellipse;
* the backtracking line search's tried points θ_old + βᵏs and the one it accepts.

κ rescales the first parameter only: the policy at θ_old is the same for every κ, the natural step
(in logits) is the same too, the vanilla step is not — the natural gradient does not depend on the
parameterisation. Every number comes from the library (:func:`rlbook.trpo_surrogate`,
:func:`rlbook.fisher_vector_product`, :func:`rlbook.natural_gradient_step`,
:func:`rlbook.backtracking_line_search`, :func:`rlbook.categorical_kl`), so the picture is what the
TRPO trainer computes. :func:`trust_region_geometry` is pure and tested; :func:`trust_region_explorer`
wires ipywidgets (imported lazily) to :func:`plot_trust_region`.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from rlbook import _checks
from rlbook.kl import categorical_kl
from rlbook.trpo import (backtracking_line_search, fisher_vector_product, flat_grad, natural_gradient_step,
                         trpo_surrogate)

__all__ = ["DEFAULT_REWARDS", "policy_logits", "trust_region_geometry", "plot_trust_region",
           "trust_region_readout", "trust_region_explorer"]

DEFAULT_REWARDS = (1.0, 0.0, 0.5)
_NEARLY_DETERMINISTIC = 0.01  # smallest π_old(a) below which the readout warns


def policy_logits(theta, scale: float = 1.0) -> torch.Tensor:
    """The explorer's policy: logits z(θ) = (κ·θ₁, θ₂, 0) of a softmax over three actions.

    Source: book chapter 6, §6.4 (a softmax policy with one logit pinned to 0).

    Args:
        theta: (..., 2) parameters θ (tensor, float64 recommended).
        scale: κ > 0, the scale of the first parameter.
    Returns:
        (..., 3) logits; gradient flows through ``theta``.
    Raises:
        ValueError: ``theta``'s last dimension is not 2, or ``scale`` ≤ 0 / not finite.
    """
    theta = _checks.as_float_tensor("theta", theta)
    if theta.dim() < 1 or theta.shape[-1] != 2:
        raise ValueError(f"`theta` must have shape (..., 2); got {tuple(theta.shape)}")
    _checks.check_positive("scale", scale)
    if not math.isfinite(float(scale)):
        raise ValueError(f"`scale` must be finite; got {scale}")
    return torch.stack([float(scale) * theta[..., 0], theta[..., 1], torch.zeros_like(theta[..., 0])], dim=-1)


def _check_inputs(theta_old, max_kl, scale, rewards):
    theta_old = np.asarray(theta_old, dtype=np.float64)
    if theta_old.shape != (2,) or not np.all(np.isfinite(theta_old)):
        raise ValueError(f"`theta_old` must be 2 finite numbers, shape (2,); got shape {theta_old.shape}")
    if not isinstance(max_kl, (int, float, np.floating, np.integer)) or not math.isfinite(float(max_kl)):
        raise ValueError(f"`max_kl` (δ) must be a finite number; got {max_kl!r}")
    if max_kl <= 0:
        raise ValueError(f"`max_kl` (δ) must be > 0; got {max_kl:g}: with δ = 0 the trust region is the "
                         "single point θ_old and no step is possible")
    _checks.check_positive("scale", scale)
    if not math.isfinite(float(scale)):
        raise ValueError(f"`scale` must be finite; got {scale}")
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.shape != (3,) or not np.all(np.isfinite(rewards)):
        raise ValueError(f"`rewards` must be 3 finite numbers, shape (3,); got shape {rewards.shape}")
    return tuple(float(x) for x in theta_old), float(max_kl), float(scale), tuple(float(x) for x in rewards)


def trust_region_geometry(theta_old, max_kl: float, scale: float = 1.0, rewards=DEFAULT_REWARDS,
                          backtrack_coef: float = 0.5, max_backtracks: int = 10, accept_ratio: float = 0.1,
                          ) -> dict[str, np.ndarray]:
    """Gradient, Fisher, vanilla and natural steps and the line search at θ_old, from the library.

    With π_θ = softmax(z(θ)), z(θ) = (κθ₁, θ₂, 0), A(a) = r_a − Σ_b π_old(b) r_b:

        L(θ) − L(θ_old) = Σ_a π_old(a)·(π_θ(a)/π_old(a))·A(a)      (rlbook.trpo_surrogate, exact expectation)
        g = ∇L(θ_old) (autograd);  F = ∇²KL(π_old ‖ π_θ)|θ_old, column by column with
            rlbook.fisher_vector_product (= Σ_a π_old(a) ∇log π(a) ∇log π(a)ᵀ)
        natural = rlbook.natural_gradient_step(g, F·, δ)  = √(2δ / gᵀF⁻¹g) F⁻¹g   (½ sᵀFs = δ)
        vanilla = α g,  α = √(2δ / gᵀFg)                                         (½ sᵀFs = δ)
        line search: rlbook.backtracking_line_search on the exact L and the exact KL, along the natural step.

    Source: Schulman et al. 2015 (TRPO), arXiv:1502.05477, Sec. 6 and Appendix C; Kakade 2001,
    "A natural policy gradient" (NeurIPS); book eqs. (6.6)–(6.8).

    Args:
        theta_old: (2,) current parameters θ_old.
        max_kl: δ > 0, the trust-region radius in nats.
        scale: κ > 0, the scale of the first parameter (z₁ = κθ₁).
        rewards: (3,) the bandit's reward of each action.
        backtrack_coef, max_backtracks, accept_ratio: the line search's β ∈ (0, 1), number of tries
            ≥ 1 and required fraction of the predicted improvement ≥ 0 (as
            :func:`rlbook.backtracking_line_search`).
    Returns:
        dict of float64 NumPy arrays: ``theta_old`` (2,), ``probs_old`` (3,) π_old, ``advantages`` (3,),
        ``g`` (2,), ``fisher`` (2, 2), ``natural`` (2,) and ``vanilla`` (2,) steps, ``quad_kl`` (2,)
        ½sᵀFs of (natural, vanilla), ``exact_kl`` (2,) KL(π_old ‖ π_{θ_old+s}) of (natural, vanilla),
        ``predicted`` (2,) gᵀs and ``improvement`` (2,) L(θ_old + s) − L(θ_old) of (natural, vanilla),
        ``tried`` (K, 2) the points the line search evaluated, ``tried_fractions`` (K,) their βᵏ,
        ``accepted`` (2,) the point it returned, ``accepted_fraction`` () βᵏ of the accepted point
        (0 when nothing was accepted and θ_old is kept), ``accepted_kl`` () and
        ``accepted_improvement`` () at the accepted point; scalars ``max_kl``, ``scale``.
        When g = 0 (equal rewards) both steps are 0 and the line search accepts nothing.
    Raises:
        ValueError: ``theta_old`` not (2,), ``max_kl`` ≤ 0 (δ = 0: no step possible), ``scale`` ≤ 0,
            ``rewards`` not (3,), or a line-search argument out of range (the argument is named).
    See also:
        plot_trust_region, trust_region_readout
    """
    theta_old, max_kl, scale, rewards = _check_inputs(theta_old, max_kl, scale, rewards)
    return _geometry(theta_old, max_kl, scale, rewards, float(backtrack_coef), max_backtracks, float(accept_ratio))


@functools.lru_cache(maxsize=256)
def _geometry(theta_old, max_kl, scale, rewards, backtrack_coef, max_backtracks, accept_ratio):
    th0 = torch.tensor(theta_old, dtype=torch.float64)
    r = torch.tensor(rewards, dtype=torch.float64)
    logits_old = policy_logits(th0, scale)
    log_probs_old = torch.log_softmax(logits_old, -1)
    probs_old = log_probs_old.exp()
    advantages = r - (probs_old * r).sum()
    if max(rewards) == min(rewards):  # exactly 0, not rounding noise: g = 0 and no step
        advantages = torch.zeros_like(r)

    def surrogate(theta):  # L(θ) − L(θ_old): the exact expectation over the three actions
        log_probs = torch.log_softmax(policy_logits(theta, scale), -1)
        return (probs_old * trpo_surrogate(log_probs, log_probs_old, advantages)).sum()

    def kl(theta):  # KL(π_old ‖ π_θ), 0 at θ_old
        return categorical_kl(logits_old, policy_logits(theta, scale))

    param = th0.clone().requires_grad_(True)
    g = flat_grad(surrogate(param), [param])
    fvp = lambda v: fisher_vector_product(lambda: kl(param), [param], v)  # noqa: E731
    fisher = torch.stack([fvp(e) for e in torch.eye(2, dtype=torch.float64)], dim=1)
    fisher = 0.5 * (fisher + fisher.T)
    # F is positive-definite for every finite θ_old and κ > 0 (π_old has full support)
    if bool(g.any()):
        natural = natural_gradient_step(g, fvp, max_kl, cg_iters=2)  # CG is exact after 2 iterations in R²
        vanilla = math.sqrt(2.0 * max_kl / float(g @ fisher @ g)) * g
    else:
        natural = vanilla = torch.zeros(2, dtype=torch.float64)

    with torch.no_grad():
        steps = (natural, vanilla)
        quad_kl = [0.5 * float(s @ fisher @ s) for s in steps]
        exact_kl = [float(kl(th0 + s)) for s in steps]
        predicted = [float(g @ s) for s in steps]
        improvement = [float(surrogate(th0 + s)) for s in steps]
        tried = []

        def kl_fn(theta):  # the line search evaluates the KL once per candidate: record them
            tried.append(theta.clone())
            return kl(theta)

        accepted, ok, k = backtracking_line_search(surrogate, kl_fn, th0, natural, max_kl, predicted[0],
                                                   backtrack_coef, max_backtracks, accept_ratio)
    fractions = [backtrack_coef ** i for i in range(len(tried))]
    out = {
        "theta_old": th0.numpy(),
        "probs_old": probs_old.detach().numpy(),
        "advantages": advantages.detach().numpy(),
        "g": g.detach().numpy(),
        "fisher": fisher.detach().numpy(),
        "natural": natural.detach().numpy(),
        "vanilla": vanilla.detach().numpy(),
        "quad_kl": np.array(quad_kl),
        "exact_kl": np.array(exact_kl),
        "predicted": np.array(predicted),
        "improvement": np.array(improvement),
        "tried": torch.stack(tried).numpy() if tried else np.zeros((0, 2)),
        "tried_fractions": np.array(fractions),
        "accepted": accepted.detach().numpy(),
        "accepted_fraction": np.float64(backtrack_coef ** k if ok else 0.0),
        "accepted_kl": np.float64(float(kl(accepted))),
        "accepted_improvement": np.float64(float(surrogate(accepted))),
        "max_kl": np.float64(max_kl),
        "scale": np.float64(scale),
    }
    for value in out.values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False  # cached: callers must not modify the arrays in place
    return out


def _ellipse(fisher: np.ndarray, max_kl: float, num: int = 200) -> np.ndarray:
    """(num, 2) points Δθ on ½ ΔθᵀFΔθ = δ (F = V Λ Vᵀ, Δθ = √(2δ) V Λ^{-1/2} u, |u| = 1)."""
    lam, vec = np.linalg.eigh(fisher)
    angle = np.linspace(0.0, 2.0 * np.pi, num)
    u = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    return math.sqrt(2.0 * max_kl) * (u / np.sqrt(lam)) @ vec.T


@functools.lru_cache(maxsize=64)
def _grids(theta_old, half_width, scale, rewards, num):
    """The exact KL and surrogate on a num × num grid around θ_old (cached by the view)."""
    t1 = np.linspace(theta_old[0] - half_width, theta_old[0] + half_width, num)
    t2 = np.linspace(theta_old[1] - half_width, theta_old[1] + half_width, num)
    mesh = np.stack(np.meshgrid(t1, t2), axis=-1)  # (num, num, 2), [i, j] = (t1[j], t2[i])
    theta = torch.tensor(mesh, dtype=torch.float64)
    th0 = torch.tensor(theta_old, dtype=torch.float64)
    logits_old = policy_logits(th0, scale)
    log_probs_old = torch.log_softmax(logits_old, -1)
    r = torch.tensor(rewards, dtype=torch.float64)
    advantages = r - (log_probs_old.exp() * r).sum()
    logits = policy_logits(theta, scale)
    kl = categorical_kl(logits_old.expand_as(logits), logits).numpy()
    surrogate = (log_probs_old.exp() * trpo_surrogate(torch.log_softmax(logits, -1),
                                                      log_probs_old.expand_as(logits),
                                                      advantages.expand_as(logits))).sum(-1).numpy()
    return t1, t2, kl, surrogate


def plot_trust_region(theta_old=(-1.0, 1.0), max_kl: float = 0.2, scale: float = 1.0, rewards=DEFAULT_REWARDS,
                      ax=None, num: int = 121):
    """Draw the surrogate's contours, the exact KL region, the Fisher ellipse, both steps and the line search.

    Filled contours: L(θ) − L(θ_old) (green: improvement); solid red: the exact KL(π_old ‖ π_θ) = δ;
    dashed blue: ½ΔθᵀFΔθ = δ; grey arrow: the vanilla step; purple arrow: the natural step;
    crosses: the line search's tried points; star: the accepted one. Equal axes, centred on θ_old
    and sized to the ellipse.

    Args:
        as :func:`trust_region_geometry`; ax: matplotlib axes or None (a new figure);
        num: grid points per axis for the contours, ≥ 11.
    Returns:
        the matplotlib axes.
    Raises:
        ValueError: as :func:`trust_region_geometry`, or ``num`` < 11.
    """
    from matplotlib.lines import Line2D

    from rlbook.plotting import get_ax

    if isinstance(num, bool) or int(num) != num or num < 11:
        raise ValueError(f"`num` must be an integer >= 11; got {num!r}")
    geo = trust_region_geometry(theta_old, max_kl, scale, rewards)
    th0 = geo["theta_old"]
    ellipse = th0 + _ellipse(geo["fisher"], float(max_kl))
    extent = max(np.abs(ellipse - th0).max(), np.abs(geo["vanilla"]).max(), np.abs(geo["natural"]).max())
    half_width = float(f"{1.5 * extent:.3g}")  # rounded, so that nearby views share a cached grid
    t1, t2, kl, surrogate = _grids(tuple(map(float, th0)), half_width, float(scale),
                                   tuple(map(float, rewards)), int(num))
    ax = get_ax(ax, figsize=(5.0, 4.4))
    span = max(np.abs(surrogate).max(), 1e-12)
    ax.contourf(t1, t2, surrogate, levels=np.linspace(-span, span, 17), cmap="PiYG", alpha=0.55)
    ax.contour(t1, t2, surrogate, levels=[0.0], colors="0.4", linewidths=0.7, linestyles=":")
    ax.contour(t1, t2, kl, levels=[float(max_kl)], colors="C3", linewidths=2.0)
    ax.plot(ellipse[:, 0], ellipse[:, 1], color="C0", ls="--", lw=1.6)
    for key, color in (("vanilla", "0.3"), ("natural", "C4")):
        s = geo[key]
        if np.any(s):
            ax.annotate("", xy=th0 + s, xytext=th0,
                        arrowprops=dict(arrowstyle="-|>", color=color, lw=1.8, shrinkA=0, shrinkB=0))
    if len(geo["tried"]):
        ax.plot(geo["tried"][:, 0], geo["tried"][:, 1], "x", color="k", ms=6, mew=1.2)
    if geo["accepted_fraction"] > 0:
        ax.plot(*geo["accepted"], "*", color="gold", mec="k", ms=14)
    ax.plot(*th0, "o", color="k", ms=5)
    ax.set_xlim(t1[0], t1[-1])
    ax.set_ylim(t2[0], t2[-1])
    ax.set_aspect("equal")
    ax.set_xlabel("θ₁")
    ax.set_ylabel("θ₂")
    p = geo["probs_old"]
    ax.set_title(f"δ = {float(max_kl):.3g}, κ = {float(scale):.3g}; π_old = ({p[0]:.2f}, {p[1]:.2f}, {p[2]:.2f})",
                 fontsize=9)
    handles = [
        Line2D([], [], color="C3", lw=2, label="exact KL(π_old‖π_θ) = δ"),
        Line2D([], [], color="C0", lw=1.6, ls="--", label="½ΔθᵀFΔθ = δ"),
        Line2D([], [], color="0.3", lw=1.8, label="vanilla step αg"),
        Line2D([], [], color="C4", lw=1.8, label="natural step ∝ F⁻¹g"),
        Line2D([], [], color="k", marker="x", ls="", label="line search tries"),
        Line2D([], [], color="gold", mec="k", marker="*", ms=10, ls="", label="accepted"),
    ]
    ax.legend(handles=handles, fontsize=8.5, loc="upper left", framealpha=0.85)
    return ax


def _vec(x) -> str:
    return "(" + ", ".join(f"{v + 0.0:+.3f}" for v in x) + ")"


def trust_region_readout(theta_old, max_kl: float, scale: float = 1.0, rewards=DEFAULT_REWARDS,
                         ) -> tuple[str, list[str]]:
    """The explorer's numbers and warnings for these settings (text lines; pure, tested).

    Returns:
        (readout, warnings): π_old, g, F (2×2) and its condition number, for each step its ½sᵀFs,
        exact KL, predicted gᵀs and realised surrogate improvement, the line search's tried
        fractions and accepted fraction; warnings when g = 0 (nothing to improve), when π_old is
        nearly deterministic (some π_old(a) < 0.01: F nearly singular), or when the line search
        accepts nothing.
    Raises:
        ValueError: as :func:`trust_region_geometry` (δ = 0 included).
    """
    geo = trust_region_geometry(theta_old, max_kl, scale, rewards)
    F = geo["fisher"]
    lam = np.linalg.eigvalsh(F)
    cond = float(lam[-1] / lam[0]) if lam[0] > 0 else math.inf
    p = geo["probs_old"]
    lines = [
        f"π_old = ({p[0]:.3f}, {p[1]:.3f}, {p[2]:.3f});  r = {tuple(float(x) for x in rewards)}",
        f"g = {_vec(geo['g'])}",
        f"F = [[{F[0, 0]:.4f}, {F[0, 1]:+.4f}], [{F[1, 0]:+.4f}, {F[1, 1]:.4f}]]  (condition number {cond:.3g})",
    ]
    for i, name in enumerate(("natural", "vanilla")):
        lines.append(f"{name:7s} step {_vec(geo[name])}: ½sᵀFs = {geo['quad_kl'][i]:.4f}, exact KL = "
                     f"{geo['exact_kl'][i]:.4f}, gᵀs = {geo['predicted'][i]:+.4f}, "
                     f"ΔL = {geo['improvement'][i]:+.4f}")
    tried = ", ".join(f"{f:g}" for f in geo["tried_fractions"])
    lines.append(f"line search tried fractions {tried}: accepted fraction {float(geo['accepted_fraction']):g}, "
                 f"KL {float(geo['accepted_kl']):.4f}, ΔL {float(geo['accepted_improvement']):+.4f}")
    warnings = []
    if not np.any(geo["g"]):
        warnings.append("g = 0 (all rewards equal): there is nothing to improve, both steps are 0")
    elif p.min() < _NEARLY_DETERMINISTIC:
        warnings.append(f"π_old gives action {int(p.argmin()) + 1} probability {p.min():.2g}: the policy is nearly "
                        f"deterministic, F is nearly singular (condition number {cond:.3g}) and the trust region "
                        "stretches far along the direction that barely changes it")
    if np.any(geo["g"]) and geo["accepted_fraction"] == 0:
        warnings.append("the line search accepted no step: θ_old is kept")
    return "\n".join(lines), warnings


def trust_region_explorer():
    """Interactive explorer: sliders for δ, κ and the logits (z₁, z₂) of π_old; redraws
    :func:`plot_trust_region` and prints :func:`trust_region_readout`. θ_old = (z₁/κ, z₂), so moving
    κ changes the parameterisation, not the policy. Needs ipywidgets (imported here). δ = 0 (the
    slider allows it) is the nonsense value: no step is possible, and a "⚠" line says so.

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); see :func:`rlbook.widgets._live.live_explorer`.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    from rlbook.widgets._live import Frame, live_explorer

    style = {"description_width": "60px"}
    controls = {
        "max_kl": widgets.FloatSlider(value=0.2, min=0.0, max=1.0, step=0.01, description="δ", style=style),
        "scale": widgets.FloatSlider(value=1.0, min=0.25, max=4.0, step=0.05, description="κ", style=style),
        "z1": widgets.FloatSlider(value=-1.0, min=-4.0, max=4.0, step=0.1, description="z₁ old", style=style),
        "z2": widgets.FloatSlider(value=1.0, min=-4.0, max=4.0, step=0.1, description="z₂ old", style=style),
    }

    def render(max_kl, scale, z1, z2):
        theta_old = (z1 / scale, z2)
        readout, warnings = trust_region_readout(theta_old, max_kl, scale)
        fig, ax = plt.subplots(figsize=(5.0, 4.4), dpi=80)
        plot_trust_region(theta_old, max_kl, scale, ax=ax)
        return Frame(fig, f"θ_old = ({theta_old[0]:+.3f}, {theta_old[1]:+.3f})\n" + readout, warnings)

    return live_explorer(controls, [["max_kl", "scale"], ["z1", "z2"]], render)
