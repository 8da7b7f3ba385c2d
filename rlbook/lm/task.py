"""The book's verifiable task: fixed-width addition, ``"07+42="`` → ``"049</s>"``.

Why addition: the answer is checked by a few lines of exact arithmetic (a *verifiable* reward, the
RLVR setting), a ~0.4 M-parameter transformer can learn it on a CPU in a minute, and its difficulty
is one knob (``num_digits``).

Format. With ``num_digits = n`` both operands are zero-padded to n digits and the answer to n + 1
digits, so every prompt has the same width (no left padding, no position-id questions) and every
correct completion is exactly n + 1 digits then the end-of-sequence token:

    prompt      "07+42="          (the sampler prepends <s>)
    completion  "049</s>"

Split. All 10^(2n) operand pairs are shuffled once with ``seed``; the first ``held_out_fraction``
of them are held out and are never produced by :meth:`AdditionTask.sample_problems` for training.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from rlbook._checks import check_in_range

__all__ = ["Problem", "AdditionTask", "corrupt_answer"]


@dataclass(frozen=True)
class Problem:
    """One question and its reference answer (the answer without the end-of-sequence token)."""

    prompt: str
    answer: str


class AdditionTask:
    """n-digit addition with a deterministic train / held-out split and an exact verifier.

    Args:
        num_digits: digits per operand, 1 to 3 (10^(2n) problems in all).
        held_out_fraction: share of all problems held out for evaluation, in (0, 1).
        seed: seed of the split's shuffle (the split depends on nothing else).
        eos_token: the string that ends a completion (the tokenizer's EOS token).
    Raises:
        ValueError: an argument is out of range.
    Example:
        >>> task = AdditionTask(num_digits=2)
        >>> task.prompt_for(7, 42), task.answer_for(7, 42)
        ('07+42=', '049')
        >>> task.reward("07+42=", "049</s>"), task.reward("07+42=", "049<pad></s>")
        (1.0, 0.0)
    """

    def __init__(self, num_digits: int = 2, held_out_fraction: float = 0.1, seed: int = 0, eos_token: str = "</s>"):
        if isinstance(num_digits, bool) or not isinstance(num_digits, int) or not 1 <= num_digits <= 3:
            raise ValueError(f"`num_digits` must be an integer in [1, 3]; got {num_digits!r}")
        check_in_range("held_out_fraction", held_out_fraction, 0.0, 1.0, low_inclusive=False, high_inclusive=False)
        if not eos_token:
            raise ValueError("`eos_token` must be a non-empty string")
        self.num_digits = num_digits
        self.held_out_fraction = float(held_out_fraction)
        self.seed = int(seed)
        self.eos_token = eos_token
        self._prompt_re = re.compile(rf"^(\d{{{num_digits}}})\+(\d{{{num_digits}}})=$")
        n = 10**num_digits
        perm = torch.randperm(n * n, generator=torch.Generator().manual_seed(self.seed))
        num_held = max(1, int(round(self.held_out_fraction * n * n)))
        self._held_out_codes = perm[:num_held]  # code = a * 10^n + b
        self._train_codes = perm[num_held:]
        self._base = n

    # -- formatting -------------------------------------------------------------------------
    @property
    def prompt_width(self) -> int:
        """Characters in every prompt (2n + 2)."""
        return 2 * self.num_digits + 2

    @property
    def answer_width(self) -> int:
        """Characters in every answer (n + 1), without the EOS token."""
        return self.num_digits + 1

    def prompt_for(self, a: int, b: int) -> str:
        """The fixed-width prompt for ``a + b``, e.g. ``"07+42="``."""
        n = self.num_digits
        return f"{a:0{n}d}+{b:0{n}d}="

    def answer_for(self, a: int, b: int) -> str:
        """The fixed-width answer for ``a + b``, e.g. ``"049"`` (no EOS)."""
        return f"{a + b:0{self.num_digits + 1}d}"

    def _problem(self, code: int) -> Problem:
        a, b = divmod(int(code), self._base)
        return Problem(self.prompt_for(a, b), self.answer_for(a, b))

    # -- the split --------------------------------------------------------------------------
    @property
    def num_train(self) -> int:
        return int(self._train_codes.numel())

    @property
    def num_held_out(self) -> int:
        return int(self._held_out_codes.numel())

    def held_out_problems(self, num: int | None = None) -> list[Problem]:
        """The first ``num`` held-out problems (all of them when ``num`` is None), in a fixed order."""
        codes = self._held_out_codes if num is None else self._held_out_codes[: int(num)]
        return [self._problem(c) for c in codes.tolist()]

    def sample_problems(self, num: int, generator: torch.Generator, split: str = "train") -> list[Problem]:
        """Draw ``num`` problems uniformly with replacement from ``split`` ("train" or "held_out").

        Raises:
            ValueError: ``num`` < 1 or ``split`` unknown.
        """
        if int(num) < 1:
            raise ValueError(f"`num` must be a positive integer; got {num}")
        if split not in ("train", "held_out"):
            raise ValueError(f"`split` must be 'train' or 'held_out'; got {split!r}")
        codes = self._train_codes if split == "train" else self._held_out_codes
        idx = torch.randint(len(codes), (int(num),), generator=generator)
        return [self._problem(c) for c in codes[idx].tolist()]

    def carry_slip(self, problem: Problem) -> str:
        """The answer with the carry out of the units column forgotten (a classic human slip).

        a + b − 10·1[a₀ + b₀ ≥ 10], zero-padded; equal to the true answer when there is no such carry.
        Example: ``"07+45="`` → ``"042"`` (true ``"052"``).

        Raises:
            ValueError: ``problem.prompt`` is not a prompt of this task.
        """
        a, b = self._parse(problem.prompt)
        carry = (a % 10 + b % 10) >= 10
        return f"{a + b - 10 * carry:0{self.num_digits + 1}d}"

    def is_held_out(self, prompt: str) -> bool:
        """Whether ``prompt`` belongs to the held-out split."""
        a, b = self._parse(prompt)
        return bool((self._held_out_codes == a * self._base + b).any())

    # -- the verifier -----------------------------------------------------------------------
    def _parse(self, prompt: str) -> tuple[int, int]:
        m = self._prompt_re.match(prompt) if isinstance(prompt, str) else None
        if m is None:
            n = self.num_digits
            raise ValueError(f"`prompt` must look like {'0' * n}+{'0' * n}= ({n}-digit operands); got {prompt!r}")
        return int(m.group(1)), int(m.group(2))

    def reward(self, prompt: str, completion: str) -> float:
        """Verifiable correctness reward: 1.0 iff ``completion`` is exactly the answer then EOS.

        R(q, o) = 1[o = answer(q) + "</s>"]

        The completion is the decoded text the policy produced up to and including its first EOS,
        with special tokens kept (``skip_special_tokens=False``). Nothing is stripped before the
        comparison, so a completion holding ``<pad>``, ``<unk>`` or ``<s>`` anywhere scores 0, and
        so does one cut off before its EOS.

        Args:
            prompt: a prompt of this task, e.g. ``"07+42="``.
            completion: the decoded completion, e.g. ``"049</s>"``.
        Returns:
            1.0 or 0.0.
        Raises:
            ValueError: ``prompt`` is not a prompt of this task, or ``completion`` is not a string.
        """
        a, b = self._parse(prompt)
        if not isinstance(completion, str):
            raise ValueError(f"`completion` must be a string; got {type(completion).__name__}")
        return 1.0 if completion == self.answer_for(a, b) + self.eos_token else 0.0

    def format_reward(self, prompt: str, completion: str) -> float:
        """Format-only reward: 1.0 iff ``completion`` is n + 1 digits then EOS (right or wrong).

        Kept separate from :meth:`reward` so the two can be weighed, logged and ablated apart.

        Raises:
            ValueError: as :meth:`reward`.
        """
        self._parse(prompt)
        if not isinstance(completion, str):
            raise ValueError(f"`completion` must be a string; got {type(completion).__name__}")
        body = completion[: -len(self.eos_token)] if completion.endswith(self.eos_token) else None
        ok = body is not None and len(body) == self.answer_width and body.isascii() and body.isdigit()
        return 1.0 if ok else 0.0


def corrupt_answer(answer: str, generator: torch.Generator) -> str:
    """Replace one uniformly chosen digit of ``answer`` by a different uniformly chosen digit.

    Used by :func:`rlbook.lm.sft.train_sft` to make noisy labels: a "plausible mistake" one digit
    away from the truth, so the supervised policy keeps the right answer among its likely samples.

    Raises:
        ValueError: ``answer`` is empty or not all digits.
    """
    if not answer or not answer.isdigit():
        raise ValueError(f"`answer` must be a non-empty string of digits; got {answer!r}")
    pos = int(torch.randint(len(answer), (1,), generator=generator))
    shift = int(torch.randint(1, 10, (1,), generator=generator))
    digit = str((int(answer[pos]) + shift) % 10)
    return answer[:pos] + digit + answer[pos + 1:]
