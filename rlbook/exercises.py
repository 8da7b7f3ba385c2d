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


def _builtin() -> None:
    from rlbook.policy_gradient import softmax_score
    from rlbook.returns import discounted_returns, rewards_to_go

    register("rewards_to_go", Exercise(rewards_to_go, _rtg_inputs,
                                       "my_fn(rewards, gamma, terminated, truncated) -> (B, T) rewards-to-go"))
    register("discounted_returns", Exercise(discounted_returns, _rtg_inputs,
                                            "my_fn(rewards, gamma, terminated, truncated) -> (B, T) episode returns"))
    register("softmax_score", Exercise(softmax_score, _score_inputs,
                                       "my_fn(logits (B, A), actions (B,)) -> (B, A) gradient of log-softmax"))


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
