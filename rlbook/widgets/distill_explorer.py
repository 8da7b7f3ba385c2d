"""Distillation explorer: a bimodal teacher, a one-mode student, and the divergence that fits it.

The teacher π_T over V = 15 tokens (0 … 14) has two modes, at c₁ = 7 − d/2 and c₂ = 7 + d/2 (the
separation d between them in tokens, 0 ≤ d ≤ 8), with weights w and 1 − w:

    z_T(i) = log(w·exp(−(i − c₁)²/(2s²)) + (1 − w)·exp(−(i − c₂)²/(2s²))),   s = 0.8 tokens

(:func:`teacher_logits`). The student has two parameters, a location μ and a width σ, and so one mode:

    z_θ(i) = −(i − μ)²/(2σ²)                                    (:func:`student_logits`)

Both models' logits are divided by the temperature τ before the softmax (TRL's convention,
:mod:`rlbook.distill`): π_T = softmax(z_T/τ), π_θ = softmax(z_θ/τ). The student is fitted by minimising
GKD's generalised JSD (:func:`rlbook.generalized_jsd`, TRL's β: m = β·π_T + (1 − β)·π_θ, β = 0 the
forward KL(π_T ‖ π_θ), β = 1 the reverse KL(π_θ ‖ π_T)) over (μ, σ) by a grid search
(:func:`fit_student`: 141 locations × 81 log-spaced widths, then a finer grid around the best), exact
up to the grid's resolution and the same every time. The student cannot cover both modes with one:

* β = 0, the forward KL Σ π_T·log(π_T/π_θ), is large wherever π_θ is small under the teacher's mass,
  so the fit spreads over both modes and puts mass in the valley between them (*mode-covering*, the
  mean-seeking fit of supervised distillation);
* β = 1, the reverse KL Σ π_θ·log(π_θ/π_T), is large wherever π_θ has mass the teacher does not, so
  the fit sits on one mode, the heavier (*mode-seeking*, what on-policy distillation's per-token
  reward minimises).

A mode's mass is the mass on the tokens nearer its centre than the other's (:func:`mode_masses`; the
token at 7, equidistant, belongs to neither). Every number is a sum over the V tokens; the divergences
come from :func:`rlbook.forward_kl_per_token`, :func:`rlbook.reverse_kl_per_token` and
:func:`rlbook.generalized_jsd`, in nats. The pure functions do the computing (and are tested);
:func:`distill_explorer` only wires ipywidgets sliders to :func:`plot_distill` and
:func:`distill_readout`. ipywidgets is imported when the widget is built.

Sources: Agarwal et al. 2023 (GKD), arXiv:2306.13649 (the generalised JSD, forward against reverse KL
in distillation); Gu et al. 2023 (MiniLLM), arXiv:2306.08543 (the reverse KL is mode-seeking);
Minka 2005, "Divergence measures and message passing" (MSR-TR-2005-173; the fits of α-divergences
between a bimodal target and a unimodal approximation).
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np
import torch

from rlbook.distill import forward_kl_per_token, generalized_jsd, reverse_kl_per_token

__all__ = ["VOCAB_SIZE", "MODE_WIDTH", "SEPARATION_MAX", "FIGSIZE", "teacher_logits", "student_logits",
           "divergences", "mode_masses", "student_grid", "fit_student", "distill_fits", "mass_against_beta",
           "plot_distill", "distill_readout", "distill_frame", "distill_explorer"]

VOCAB_SIZE = 15  # tokens 0 … 14
CENTRE = (VOCAB_SIZE - 1) / 2  # the modes sit symmetrically about token 7
MODE_WIDTH = 0.8  # s: each teacher mode's width in tokens (in the logits, τ = 1)
SEPARATION_MAX = 8.0  # d = 8 puts the modes at tokens 3 and 11
# the student's grid: μ from token 0 to 14 every 0.1, σ log-spaced in [0.2, 20] tokens
MU_GRID = np.linspace(0.0, VOCAB_SIZE - 1.0, 141)
SIGMA_GRID = np.geomspace(0.2, 20.0, 81)
REFINE = 41  # points per axis of the finer grid around the coarse optimum (± one coarse step)
OFF_TEACHER = 0.01  # a token "off the teacher": π_T < 1 %
FIGSIZE = (8.4, 3.7)  # inches: shown at 80 dpi, 672 px wide
FONT = 9  # points
COLORS = {"teacher": "0.72", "chosen": "C0", "forward": "C1", "reverse": "C3"}
_DT = torch.float64


SYMBOLS = {"beta": "β", "temperature": "τ", "separation": "d", "weight": "w"}  # as the sliders name them


def _number(name: str, value, low: float, high: float, low_inclusive: bool = True,
            high_inclusive: bool = True) -> float:
    """``value`` as a float, or ValueError naming ``name`` and its symbol (booleans, non-numbers, NaN,
    infinities, out of range)."""
    label = f"`{name}` ({SYMBOLS[name]})" if name in SYMBOLS else f"`{name}`"
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(float(value)):
        raise ValueError(f"{label} must be a number; got {value!r}")
    v = float(value)
    ok = (v >= low if low_inclusive else v > low) and (v <= high if high_inclusive else v < high)
    if not ok or math.isinf(v):
        lb, rb = "[" if low_inclusive else "(", "]" if high_inclusive else ")"
        raise ValueError(f"{label} must be a finite number in {lb}{low:g}, {high:g}{rb}; got {value!r}")
    return v


def _check_separation(separation) -> float:
    return _number("separation", separation, 0.0, SEPARATION_MAX)


def _check_weight(weight) -> float:
    return _number("weight", weight, 0.0, 1.0, low_inclusive=False, high_inclusive=False)


def _check_beta(beta) -> float:
    return _number("beta", beta, 0.0, 1.0)


def _check_temperature(temperature) -> float:
    return _number("temperature", temperature, 0.0, math.inf, low_inclusive=False, high_inclusive=False)


def _modes(separation: float) -> tuple[float, float]:
    return CENTRE - separation / 2, CENTRE + separation / 2


def teacher_logits(separation: float = 6.0, weight: float = 0.6) -> torch.Tensor:
    """The bimodal teacher's logits z_T, shape (V,) = (15,), float64 (natural-log units).

    z_T(i) = log(w·exp(−(i − c₁)²/(2s²)) + (1 − w)·exp(−(i − c₂)²/(2s²))), c₁,₂ = 7 ∓ d/2, s = 0.8:
    softmax(z_T) is a mixture of two discretised Gaussians with weights w and 1 − w (each normalised
    over the tokens only up to its tails; for d ≥ 2 the tokens' weights are within 1e-3 of w, 1 − w).

    Args:
        separation: d in [0, 8], the distance between the modes in tokens (0: one mode at token 7).
        weight: w in (0, 1), the weight of the left mode (at c₁).
    Raises:
        ValueError: ``separation`` outside [0, 8]; ``weight`` outside (0, 1); either not a number.
    """
    d, w = _check_separation(separation), _check_weight(weight)
    i = torch.arange(VOCAB_SIZE, dtype=_DT)
    c1, c2 = _modes(d)
    return torch.logaddexp(math.log(w) - (i - c1) ** 2 / (2 * MODE_WIDTH ** 2),
                           math.log1p(-w) - (i - c2) ** 2 / (2 * MODE_WIDTH ** 2))


def student_logits(mu, sigma) -> torch.Tensor:
    """The one-mode student's logits z_θ(i) = −(i − μ)²/(2σ²), float64.

    Args:
        mu: μ, the location in tokens (finite): a number or a tensor/array of shape S.
        sigma: σ > 0, the width in tokens: broadcastable with ``mu``.
    Returns:
        shape S + (V,) (a number gives (V,)).
    Raises:
        ValueError: ``mu`` not finite; ``sigma`` not finite and > 0.
    """
    mu, sigma = torch.as_tensor(mu, dtype=_DT), torch.as_tensor(sigma, dtype=_DT)
    if not torch.isfinite(mu).all():
        raise ValueError("`mu` must be finite")
    if not (torch.isfinite(sigma).all() and (sigma > 0).all()):
        raise ValueError("`sigma` must be finite and > 0")
    i = torch.arange(VOCAB_SIZE, dtype=_DT)
    return -(i - mu[..., None]) ** 2 / (2 * sigma[..., None] ** 2)


def divergences(logits, teacher, beta: float = 0.5, temperature: float = 1.0) -> dict:
    """KL(π_T ‖ π_θ), KL(π_θ ‖ π_T) and JSD_β between student and teacher at temperature τ.

    Args:
        logits: student logits, shape (V,) or (N, V).
        teacher: teacher logits, shape (V,) (broadcast to the student's).
        beta: β in [0, 1] for JSD_β (TRL's convention: 0 forward KL, 1 reverse KL).
        temperature: τ > 0, dividing both models' logits.
    Returns:
        a dict of float64 tensors of shape () (for (V,)) or (N,), in nats: ``forward`` KL(π_T ‖ π_θ),
        ``reverse`` KL(π_θ ‖ π_T), ``jsd`` JSD_β (equal to ``forward`` at β = 0, ``reverse`` at β = 1).
    Raises:
        ValueError: ``beta`` outside [0, 1]; ``temperature`` not finite and > 0.
    """
    beta, temperature = _check_beta(beta), _check_temperature(temperature)
    z = torch.as_tensor(logits, dtype=_DT)
    one = z.dim() == 1
    z = z.reshape(-1, VOCAB_SIZE)
    zt = torch.as_tensor(teacher, dtype=_DT).expand_as(z)
    out = {"forward": forward_kl_per_token(z, zt, temperature=temperature),
           "reverse": reverse_kl_per_token(z, zt, temperature=temperature),
           "jsd": generalized_jsd(z, zt, beta, temperature=temperature, reduction="none")}
    return {k: v[0] if one else v for k, v in out.items()}


def mode_masses(probs, separation: float) -> dict:
    """A distribution's mass on each of the teacher's modes.

    Mode 1's tokens are those strictly nearer c₁ = 7 − d/2 than c₂ = 7 + d/2 (tokens 0 … 6 for any
    d > 0), mode 2's those nearer c₂ (8 … 14); the token at 7 is equidistant and in neither (at d = 0
    every token is: both masses are 0).

    Args:
        probs: (V,) probabilities.
        separation: d in [0, 8].
    Returns:
        ``{"left": mass on mode 1, "right": mass on mode 2, "centre": the rest}`` (floats summing to 1
        up to rounding).
    Raises:
        ValueError: ``separation`` outside [0, 8]; ``probs`` not of shape (V,).
    """
    c1, c2 = _modes(_check_separation(separation))
    p = torch.as_tensor(probs, dtype=_DT)
    if p.shape != (VOCAB_SIZE,):
        raise ValueError(f"`probs` must have shape ({VOCAB_SIZE},); got {tuple(p.shape)}")
    i = torch.arange(VOCAB_SIZE, dtype=_DT)
    left, right = (i - c1).abs() < (i - c2).abs(), (i - c2).abs() < (i - c1).abs()
    return {"left": float(p[left].sum()), "right": float(p[right].sum()), "centre": float(p[~(left | right)].sum())}


def student_grid(mu_grid=MU_GRID, sigma_grid=SIGMA_GRID) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (μ, σ) pair of the two grids, flattened: two float64 tensors of shape (len(μ)·len(σ),)."""
    mu, sigma = torch.meshgrid(torch.as_tensor(mu_grid, dtype=_DT), torch.as_tensor(sigma_grid, dtype=_DT),
                               indexing="ij")
    return mu.flatten(), sigma.flatten()


def _objective(logits: torch.Tensor, teacher: torch.Tensor, beta: float, temperature: float) -> torch.Tensor:
    """JSD_β of each row of ``logits`` (N, V) against ``teacher`` (V,) at τ: (N,) nats."""
    return generalized_jsd(logits, teacher.expand_as(logits), beta, temperature=temperature, reduction="none")


def _first_min(values: torch.Tensor) -> int:
    """The first index whose value is within rounding (1e-12 relative) of the minimum: ties, such as a
    symmetric teacher's two modes, go to the earlier grid point (smaller μ) whatever the rounding."""
    low = float(values.min())
    return int(torch.nonzero(values <= low + 1e-12 * max(1.0, abs(low)))[0])


@functools.lru_cache(maxsize=256)
def _fit(separation: float, weight: float, beta: float, temperature: float) -> tuple[float, float]:
    teacher = teacher_logits(separation, weight)
    mu, sigma = student_grid()
    values = _objective(student_logits(mu, sigma), teacher, beta, temperature)
    best = _first_min(values)
    mu0, sigma0 = float(mu[best]), float(sigma[best])
    # a finer grid, ± one coarse step around the coarse optimum (inside the coarse grid's bounds)
    step_mu, ratio = MU_GRID[1] - MU_GRID[0], SIGMA_GRID[1] / SIGMA_GRID[0]
    fine_mu = np.linspace(max(mu0 - step_mu, MU_GRID[0]), min(mu0 + step_mu, MU_GRID[-1]), REFINE)
    fine_sigma = np.geomspace(max(sigma0 / ratio, SIGMA_GRID[0]), min(sigma0 * ratio, SIGMA_GRID[-1]), REFINE)
    mu_f, sigma_f = student_grid(fine_mu, fine_sigma)
    fine = _objective(student_logits(mu_f, sigma_f), teacher, beta, temperature)
    j = _first_min(fine)
    if float(fine[j]) < float(values[best]):
        return float(mu_f[j]), float(sigma_f[j])
    return mu0, sigma0


def fit_student(separation: float = 6.0, weight: float = 0.6, beta: float = 0.3, temperature: float = 1.0) -> dict:
    """The student (μ, σ) minimising JSD_β(π_θ, π_T) at temperature τ, by grid search.

    The coarse grid is ``MU_GRID`` × ``SIGMA_GRID`` (μ in [0, 14] every 0.1 tokens, σ in [0.2, 20]
    tokens, 81 log-spaced values); a finer grid of 41 × 41 points, ± one coarse step around the coarse
    optimum, refines it. The result is never worse than any grid point, and the same every call. When
    two fits are equally good (within 1e-12 relative: a symmetric teacher, w = ½, at a mode-seeking β)
    the one with the smaller μ is taken, so such a fit sits on the left mode.
    The divergence can have two local minima, one covering both modes and one on a mode: the grid
    finds the global one, so the fit jumps from one to the other as β crosses the β where they tie.

    Args:
        separation, weight: the teacher's (see :func:`teacher_logits`).
        beta: β in [0, 1], the divergence minimised (0 forward KL, 1 reverse KL).
        temperature: τ > 0, dividing both models' logits.
    Returns:
        a dict: ``mu``, ``sigma`` (tokens), ``logits`` (V,) z_θ, ``probs`` (V,) π_θ = softmax(z_θ/τ),
        ``teacher_probs`` (V,) π_T = softmax(z_T/τ) (float64 tensors), ``forward``, ``reverse``,
        ``jsd`` (floats, nats, of the fitted student; ``jsd`` at ``beta``), ``masses``
        (:func:`mode_masses` of π_θ), ``off_teacher`` (π_θ's mass on tokens with π_T < 1 %),
        ``at_edge`` (True if σ is at the grid's bound), and the inputs.
    Raises:
        ValueError: ``separation`` outside [0, 8], ``weight`` outside (0, 1), ``beta`` outside [0, 1],
            ``temperature`` not finite and > 0 (each named).
    """
    d, w = _check_separation(separation), _check_weight(weight)
    beta, temperature = _check_beta(beta), _check_temperature(temperature)
    mu, sigma = _fit(d, w, beta, temperature)
    logits, teacher = student_logits(mu, sigma), teacher_logits(d, w)
    probs, teacher_probs = torch.softmax(logits / temperature, 0), torch.softmax(teacher / temperature, 0)
    div = {k: float(v) for k, v in divergences(logits, teacher, beta, temperature).items()}
    return {"mu": mu, "sigma": sigma, "logits": logits, "probs": probs, "teacher_probs": teacher_probs, **div,
            "masses": mode_masses(probs, d), "off_teacher": float(probs[teacher_probs < OFF_TEACHER].sum()),
            "at_edge": sigma in (float(SIGMA_GRID[0]), float(SIGMA_GRID[-1])),
            "separation": d, "weight": w, "beta": beta, "temperature": temperature}


def distill_fits(separation: float = 6.0, weight: float = 0.6, beta: float = 0.3, temperature: float = 1.0) -> dict:
    """The explorer's three fits: ``"chosen"`` (at ``beta``), ``"forward"`` (β = 0) and ``"reverse"`` (β = 1).

    Returns:
        ``{"chosen": fit, "forward": fit, "reverse": fit, "teacher": {...}}``, each fit as
        :func:`fit_student`'s, each with ``jsd_chosen``: its JSD at the chosen β (nats); ``teacher``
        holds ``probs`` (V,) π_T at τ, its ``masses``, and the modes' centres ``modes`` (c₁, c₂).
    Raises:
        ValueError: as :func:`fit_student`.
    """
    chosen = fit_student(separation, weight, beta, temperature)
    fits = {"chosen": chosen, "forward": fit_student(separation, weight, 0.0, temperature),
            "reverse": fit_student(separation, weight, 1.0, temperature)}
    teacher = teacher_logits(separation, weight)
    for fit in fits.values():
        fit["jsd_chosen"] = float(divergences(fit["logits"], teacher, chosen["beta"], chosen["temperature"])["jsd"])
    probs = chosen["teacher_probs"]
    return {**fits, "teacher": {"probs": probs, "masses": mode_masses(probs, chosen["separation"]),
                                "modes": _modes(chosen["separation"])}}


@functools.lru_cache(maxsize=64)
def _curves(separation: float, weight: float, temperature: float, num: int) -> dict:
    betas = np.linspace(0.0, 1.0, num)
    fits = [fit_student(separation, weight, float(b), temperature) for b in betas]
    return {"beta": betas, **{k: np.array([f["masses"][k] for f in fits]) for k in ("left", "right", "centre")},
            "off_teacher": np.array([f["off_teacher"] for f in fits])}


def mass_against_beta(separation: float = 6.0, weight: float = 0.6, temperature: float = 1.0, num: int = 21) -> dict:
    """The fitted student's mass on each mode as β runs from 0 to 1.

    Returns:
        a dict of arrays of shape (num,): ``beta`` (0 … 1), ``left``, ``right``, ``centre`` (the fits'
        :func:`mode_masses`) and ``off_teacher`` (cached: do not mutate).
    Raises:
        ValueError: as :func:`fit_student`; ``num`` not an integer ≥ 2.
    """
    if isinstance(num, bool) or not isinstance(num, numbers.Integral) or num < 2:
        raise ValueError(f"`num` must be an integer ≥ 2; got {num!r}")
    return _curves(_check_separation(separation), _check_weight(weight), _check_temperature(temperature), int(num))


def plot_distill(separation: float = 6.0, weight: float = 0.6, beta: float = 0.3, temperature: float = 1.0,
                 axes=None):
    """Two panels: (left) π_T as grey bars, the student fitted at ``beta`` as narrower bars, and the
    β = 0 (forward KL, mode-covering) and β = 1 (reverse KL, mode-seeking) fits as lines, the modes'
    centres dotted; (right) the fitted student's mass on each mode and off the teacher against β,
    the chosen β marked.

    Args:
        as :func:`fit_student`; axes: two Matplotlib axes, or None for a new figure of ``FIGSIZE``.
    Returns:
        the two axes. The left panel's first V patches are the teacher's bars, the next V the chosen
        fit's, in token order; its first two lines are the β = 0 and β = 1 fits.
    Raises:
        ValueError: as :func:`fit_student` (checked before anything is drawn); ``axes`` not two axes.
    """
    fits = distill_fits(separation, weight, beta, temperature)
    curves = mass_against_beta(separation, weight, temperature)
    if axes is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(1, 2, figsize=FIGSIZE, dpi=80, gridspec_kw={"width_ratios": [1.55, 1.0]})
    axes = list(np.asarray(axes, dtype=object).flatten())
    if len(axes) != 2:
        raise ValueError(f"`axes` must hold two Matplotlib axes; got {len(axes)}")
    left, right = axes
    c, t = fits["chosen"], np.arange(VOCAB_SIZE)
    left.bar(t, fits["teacher"]["probs"].numpy(), 0.8, color=COLORS["teacher"], label="teacher π_T")
    left.bar(t, c["probs"].numpy(), 0.38, color=COLORS["chosen"], alpha=0.85, label=f"π_θ fitted, β = {c['beta']:.2f}")
    left.plot(t, fits["forward"]["probs"].numpy(), "o-", color=COLORS["forward"], ms=4, lw=1.3,
              label="β = 0: forward KL")
    left.plot(t, fits["reverse"]["probs"].numpy(), "^--", color=COLORS["reverse"], ms=4, lw=1.3,
              label="β = 1: reverse KL")
    if c["separation"] > 0:
        for m in fits["teacher"]["modes"]:
            left.axvline(m, color="0.35", ls=":", lw=0.9)
    top = max(float(fits["teacher"]["probs"].max()), *(float(fits[k]["probs"].max()) for k in ("chosen", "forward", "reverse")))
    left.set_ylim(0, top * 1.32)
    left.set_xticks(t)
    left.set_xlabel("token i", fontsize=FONT)
    left.set_ylabel("probability at τ", fontsize=FONT)
    left.set_title(f"d = {c['separation']:g}, w = {c['weight']:.2f}, τ = {c['temperature']:g}; "
                   f"π_θ ∝ exp(−(i−μ)²/(2σ²τ))", fontsize=FONT)
    left.legend(fontsize=FONT, loc="upper center", ncol=2, frameon=False, handlelength=1.6, columnspacing=1.0)

    b = curves["beta"]
    right.plot(b, curves["left"], color="C2", lw=1.6, label="on mode 1 (left)")
    right.plot(b, curves["right"], color="C4", lw=1.6, label="on mode 2 (right)")
    right.plot(b, curves["off_teacher"], color="0.3", ls="--", lw=1.2, label="where π_T < 1 %")
    right.axvline(c["beta"], color=COLORS["chosen"], lw=1.0)
    right.set_xlim(0, 1)
    right.set_ylim(-0.02, 1.25)
    right.set_xlabel("β (0 forward KL … 1 reverse KL)", fontsize=FONT)
    right.set_ylabel("fitted π_θ's mass", fontsize=FONT)
    right.set_title("the fit's mass against β", fontsize=FONT)
    right.legend(fontsize=FONT, loc="upper center", frameon=False, ncol=1, handlelength=1.6)
    for ax in axes:
        ax.tick_params(labelsize=FONT)
    return axes


def _row(name: str, fit: dict) -> str:
    m = fit["masses"]

    def r(x, n):  # rounded, and never "-0.000"
        return round(x, n) + 0.0

    return (f"{name:<18}{fit['mu']:6.2f}{fit['sigma']:7.2f}{r(fit['forward'], 4):9.4f}{r(fit['reverse'], 4):9.4f}"
            f"{r(fit['jsd_chosen'], 4):9.4f}{r(m['left'], 3):8.3f}{r(m['centre'], 3):7.3f}{r(m['right'], 3):8.3f}"
            f"{r(fit['off_teacher'], 3):8.3f}")


def distill_readout(separation: float = 6.0, weight: float = 0.6, beta: float = 0.3,
                    temperature: float = 1.0) -> tuple[str, list[str]]:
    """The explorer's numbers at one setting (text; pure, tested).

    Returns:
        (readout, warnings): the teacher's modes and their mass at τ; for the fit at ``beta``, at β = 0
        and at β = 1: μ, σ, KL(π_T‖π_θ), KL(π_θ‖π_T), JSD at the chosen β (nats), the mass on mode 1,
        on the middle token, on mode 2, and where π_T < 1 %. Warnings: d = 0 (one mode: nothing to
        choose between), w = ½ with a mode-seeking fit (either mode fits as well), a fitted σ at the
        grid's bound.
    Raises:
        ValueError: as :func:`fit_student`.
    """
    f = distill_fits(separation, weight, beta, temperature)
    c, t = f["chosen"], f["teacher"]
    c1, c2 = t["modes"]
    if c["separation"] == 0:
        head = f"teacher π_T: one mode, at token {c1:g} (d = 0)"
    else:
        head = (f"teacher π_T: modes at tokens {c1:g} and {c2:g} (weights {c['weight']:.2f}, {1 - c['weight']:.2f}); "
                f"at τ = {c['temperature']:g} mode 1 holds {t['masses']['left']:.3f}, mode 2 {t['masses']['right']:.3f}")
    lines = [head,
             f"student π_θ ∝ exp(−(i−μ)²/(2σ²τ)), fitted by grid search; nats; JSD at β = {c['beta']:.2f}",
             f"{'fit':<18}{'μ':>6}{'σ':>7}{'KL(T‖θ)':>9}{'KL(θ‖T)':>9}{'JSD_β':>9}{'mode 1':>8}{'mid':>7}"
             f"{'mode 2':>8}{'π_T<1%':>8}",
             _row(f"β = {c['beta']:.2f} (chosen)", c), _row("β = 0 (forward)", f["forward"]),
             _row("β = 1 (reverse)", f["reverse"])]
    warnings = []
    if c["separation"] == 0:
        warnings.append("d = 0: the teacher has one mode, so every β fits the same bump: move d above 0 to see "
                        "mode-covering against mode-seeking")
    elif c["weight"] == 0.5 and max(c["masses"]["left"], c["masses"]["right"]) > 0.9:
        warnings.append("w = ½: the teacher's two modes weigh the same, so this mode-seeking fit is as good on the "
                        "right mode as on the left one shown")
    edges = [name for name in ("chosen", "forward", "reverse") if f[name]["at_edge"]]
    if edges:
        warnings.append(f"σ of the {', '.join(edges)} fit is at the grid's bound ({SIGMA_GRID[0]:g} or "
                        f"{SIGMA_GRID[-1]:g} tokens): the best student of the family lies beyond it")
    return "\n".join(lines), warnings


def distill_frame(separation: float, weight: float, beta: float, temperature: float):
    """The explorer's render function: :func:`plot_distill` on a new figure and :func:`distill_readout`.

    Returns:
        a :class:`rlbook.widgets._live.Frame`.
    Raises:
        ValueError: as :func:`fit_student` (checked before a figure is made).
    """
    import matplotlib.pyplot as plt

    from rlbook.widgets._live import Frame

    readout, warnings = distill_readout(separation, weight, beta, temperature)
    fig, axes = plt.subplots(1, 2, figsize=FIGSIZE, dpi=80, gridspec_kw={"width_ratios": [1.55, 1.0]})
    plot_distill(separation, weight, beta, temperature, axes=axes)
    fig.tight_layout()
    return Frame(fig, readout, warnings)


def distill_explorer():
    """Interactive explorer: sliders for β (0 forward KL … 1 reverse KL), the teacher's mode separation d
    and left-mode weight w, and the temperature τ; redraws :func:`plot_distill` and prints
    :func:`distill_readout`. τ = 0 is on its slider and answered with a "⚠" line (τ must be > 0); d = 0
    is answered with a warning. Needs ipywidgets (imported here).

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); see :func:`rlbook.widgets._live.live_explorer`.
    """
    import ipywidgets as widgets

    from rlbook.widgets._live import live_explorer

    style = {"description_width": "initial"}
    controls = {
        "beta": widgets.FloatSlider(value=0.3, min=0.0, max=1.0, step=0.05, description="β (0 forward, 1 reverse KL)",
                                    style=style),
        "separation": widgets.FloatSlider(value=6.0, min=0.0, max=SEPARATION_MAX, step=0.5,
                                          description="mode separation d", style=style),
        "weight": widgets.FloatSlider(value=0.6, min=0.05, max=0.95, step=0.05, description="mode 1's weight w",
                                      style=style),
        "temperature": widgets.FloatSlider(value=1.0, min=0.0, max=3.0, step=0.05, description="τ", style=style),
    }
    layout = [["beta", "temperature"], ["separation", "weight"]]
    return live_explorer(controls, layout, distill_frame)
