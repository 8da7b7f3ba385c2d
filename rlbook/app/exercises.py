"""Checkers for the coded exercises: ``rl.exercises.check("name", my_fn)``.

Each exercise compares a learner's function with the library's on random inputs (seeded, so an
instructor sees the same cases as the student) and prints a one-line verdict, or raises
``AssertionError`` showing the first input where the two disagree. Instructors can grade with the
same call (it returns ``True``/raises), in the nbgrader style of "autograded" cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = ["Exercise", "EXERCISES", "register", "check"]


@dataclass
class Exercise:
    """An exercise: the reference implementation and a generator of random argument tuples."""

    reference: Callable[..., Any]
    make_inputs: Callable[[torch.Generator], tuple]
    description: str = ""
    atol: float = 1e-6


EXERCISES: dict[str, Exercise] = {}


def register(name: str, exercise: Exercise) -> None:
    """Add an exercise (later parts of the book register theirs here)."""
    EXERCISES[name] = exercise


def _done_flags(gen: torch.Generator, shape) -> tuple[torch.Tensor, torch.Tensor]:
    ends = torch.rand(shape, generator=gen, dtype=torch.float64) < 0.15
    trunc = ends & (torch.rand(shape, generator=gen, dtype=torch.float64) < 0.3)
    return ends & ~trunc, trunc


def _rtg_inputs(gen):
    B, T = int(torch.randint(1, 4, (1,), generator=gen)), int(torch.randint(1, 9, (1,), generator=gen))
    rewards = torch.randn(B, T, generator=gen, dtype=torch.float64)
    terminated, truncated = _done_flags(gen, (B, T))
    gamma = float(torch.rand((), generator=gen, dtype=torch.float64))
    return rewards, gamma, terminated, truncated


def _score_inputs(gen):
    B, A = int(torch.randint(1, 5, (1,), generator=gen)), int(torch.randint(2, 6, (1,), generator=gen))
    return torch.randn(B, A, generator=gen, dtype=torch.float64), torch.randint(0, A, (B,), generator=gen)


def _mdp_inputs(gen):
    S, A = int(torch.randint(1, 6, (1,), generator=gen)), int(torch.randint(1, 4, (1,), generator=gen))
    transitions = torch.softmax(2 * torch.randn(S, A, S, generator=gen, dtype=torch.float64), -1)
    rewards = torch.randn(S, A, generator=gen, dtype=torch.float64)
    probs = torch.softmax(torch.randn(S, A, generator=gen, dtype=torch.float64), -1)
    return transitions, rewards, probs, 0.95 * float(torch.rand((), generator=gen, dtype=torch.float64))


def _td0_inputs(gen):
    S = int(torch.randint(1, 6, (1,), generator=gen))
    values = torch.randn(S, generator=gen, dtype=torch.float64)
    state, next_state = (int(torch.randint(0, S, (1,), generator=gen)) for _ in range(2))
    reward = float(torch.randn((), generator=gen, dtype=torch.float64))
    terminated = bool(torch.rand((), generator=gen) < 0.3)
    gamma = float(torch.rand((), generator=gen, dtype=torch.float64))
    step_size = float(torch.rand((), generator=gen, dtype=torch.float64)) * 0.99 + 0.01
    return values, state, reward, next_state, terminated, gamma, step_size


def _builtin() -> None:
    _register_part1()
    _register_part2()
    _register_part3()


# ----------------------------------------------------------------------------------------------
# Part I (chapters 1-3)
# ----------------------------------------------------------------------------------------------


def _register_part1() -> None:
    from rlbook.policy_gradient import softmax_score
    from rlbook.returns import discounted_returns, rewards_to_go
    from rlbook.values import policy_evaluation, td0_update

    register("rewards_to_go", Exercise(rewards_to_go, _rtg_inputs,
                                       "my_fn(rewards, gamma, terminated, truncated) -> (B, T) rewards-to-go"))
    register("discounted_returns", Exercise(discounted_returns, _rtg_inputs,
                                            "my_fn(rewards, gamma, terminated, truncated) -> (B, T) episode returns"))
    register("softmax_score", Exercise(softmax_score, _score_inputs,
                                       "my_fn(logits (B, A), actions (B,)) -> (B, A) gradient of log-softmax"))
    register("policy_evaluation", Exercise(policy_evaluation, _mdp_inputs,
                                           "my_fn(transitions (S, A, S), rewards (S, A), probs (S, A), gamma) "
                                           "-> (S,) V^π", atol=1e-8))
    register("td0_update", Exercise(td0_update, _td0_inputs,
                                    "my_fn(values (S,), state, reward, next_state, terminated, gamma, step_size) "
                                    "-> (S,) updated values"))


# ----------------------------------------------------------------------------------------------
# Part II (chapters 4-7)
# ----------------------------------------------------------------------------------------------


def _kl_inputs(gen):
    B, T = int(torch.randint(1, 4, (1,), generator=gen)), int(torch.randint(1, 9, (1,), generator=gen))
    logits = torch.randn(B, T, 5, generator=gen, dtype=torch.float64) * 2
    ref_logits = logits + torch.randn(B, T, 5, generator=gen, dtype=torch.float64)
    tokens = torch.randint(0, 5, (B, T, 1), generator=gen)
    pick = lambda z: torch.log_softmax(z, -1).gather(-1, tokens).squeeze(-1)  # noqa: E731
    return pick(logits), pick(ref_logits)


def _gae_inputs(gen):
    rewards, gamma, terminated, truncated = _rtg_inputs(gen)
    values = torch.randn(rewards.shape, generator=gen, dtype=torch.float64)
    next_values = torch.randn(rewards.shape, generator=gen, dtype=torch.float64)
    gae_lambda = float(torch.rand((), generator=gen, dtype=torch.float64))
    return rewards, values, next_values, terminated, truncated, gamma, gae_lambda


def _register_part2() -> None:
    from rlbook.advantages import gae
    from rlbook.kl import kl_k3

    register("gae", Exercise(lambda *args: gae(*args)[0], _gae_inputs,
                             "my_fn(rewards, values, next_values, terminated, truncated, gamma, gae_lambda) "
                             "-> (B, T) GAE advantages"))
    register("kl_k3", Exercise(kl_k3, _kl_inputs,
                               "my_fn(log_probs (B, T), ref_log_probs (B, T)) -> (B, T) k3 = r − 1 − log r"))


# ----------------------------------------------------------------------------------------------
# Part III (chapters 8-9)
# ----------------------------------------------------------------------------------------------


def _register_part3() -> None:
    pass


def check(name: str, fn: Callable[..., Any], num_cases: int = 20, seed: int = 0) -> bool:
    """Compare ``fn`` with the reference of exercise ``name`` on ``num_cases`` random inputs.

    Returns:
        True when every case agrees (within the exercise's tolerance); prints a verdict line.
    Raises:
        ValueError: unknown exercise ``name``.
        AssertionError: a case disagrees (the message shows the inputs and both outputs).
    """
    if not EXERCISES:
        _builtin()
    if name not in EXERCISES:
        raise ValueError(f"`name` must be one of {sorted(EXERCISES)}; got {name!r}")
    ex = EXERCISES[name]
    gen = torch.Generator().manual_seed(seed)
    for i in range(num_cases):
        args = ex.make_inputs(gen)
        expected = torch.as_tensor(ex.reference(*args))
        got = torch.as_tensor(fn(*args), dtype=expected.dtype)
        if got.shape != expected.shape or not torch.allclose(got, expected, atol=ex.atol, rtol=1e-5):
            raise AssertionError(f"{name}: case {i} differs.\ninputs: {args}\nexpected: {expected}\ngot: {got}")
    print(f"✓ {name}: {num_cases} random cases agree with the library")
    return True
