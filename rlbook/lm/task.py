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

Families. ``family="units_carry"`` (or ``"no_units_carry"``) keeps, in both splits, only the problems whose
units digits do (do not) sum to 10 or more: two task families for multi-teacher distillation (chapter 18),
on the same split (a problem held out in the whole task is held out in its family).

A second task, :class:`ScratchpadAdditionTask`, has the same prompts and split but lets the model
write its working before the answer (``"27+45="`` → ``"7+5=12;2+4+1=7;072</s>"``), so the length
of a completion is under the model's control: the task on which length effects of a loss
aggregation (GRPO's sample-level mean, DAPO's overlong shaping) can be measured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from rlbook._checks import check_in_range

__all__ = ["Problem", "AdditionTask", "ScratchpadAdditionTask", "corrupt_answer", "FAMILIES"]

FAMILIES = ("all", "units_carry", "no_units_carry")


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
        family: "all", or "units_carry" / "no_units_carry": only the problems whose units digits sum to
            10 or more / less than 10, in both splits (the split itself does not change).
    Raises:
        ValueError: an argument is out of range.
    Example:
        >>> task = AdditionTask(num_digits=2)
        >>> task.prompt_for(7, 42), task.answer_for(7, 42)
        ('07+42=', '049')
        >>> task.reward("07+42=", "049</s>"), task.reward("07+42=", "049<pad></s>")
        (1.0, 0.0)
    """

    def __init__(self, num_digits: int = 2, held_out_fraction: float = 0.1, seed: int = 0, eos_token: str = "</s>",
                 family: str = "all"):
        if family not in FAMILIES:
            raise ValueError(f"`family` must be one of {FAMILIES}; got {family!r}")
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
        self.family = family
        if family != "all":
            def keep(codes):
                carries = (codes // n) % 10 + (codes % n) % 10 >= 10
                return codes[carries == (family == "units_carry")]

            self._held_out_codes, self._train_codes = keep(self._held_out_codes), keep(self._train_codes)

    def family_of(self, prompt: str) -> str:
        """The family of a prompt: ``"units_carry"`` when its units digits sum to 10 or more, else ``"no_units_carry"``.

        Raises:
            ValueError: ``prompt`` is not a prompt of this task.
        """
        a, b = self._parse(prompt)
        return "units_carry" if a % 10 + b % 10 >= 10 else "no_units_carry"

    # -- formatting -------------------------------------------------------------------------
    @property
    def alphabet(self) -> str:
        """The characters of prompts and completions, for ``rl.lm.build_char_tokenizer(task.alphabet)``.

        ``"0123456789+="``, equal to ``rl.lm.DEFAULT_ALPHABET``.
        """
        return "0123456789+="

    @property
    def max_completion_tokens(self) -> int:
        """Tokens of the longest reference completion, EOS included (n + 2; one character = one token)."""
        return self.answer_width + 1

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

    def corrupt(self, answer: str, generator: torch.Generator) -> str:
        """A one-digit mistake in a label: :func:`corrupt_answer` (the SFT label noise of
        :func:`rlbook.lm.sft_batch`; subclasses with other answer formats override it).

        Raises:
            ValueError: as :func:`corrupt_answer`.
        """
        return corrupt_answer(answer, generator)

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

    def _parse_scored(self, prompt: str, completion) -> tuple[int, int]:
        """The operands of ``prompt``, after checking that ``completion`` is a string (what every verifier checks)."""
        a, b = self._parse(prompt)
        if not isinstance(completion, str):
            raise ValueError(f"`completion` must be a string; got {type(completion).__name__}")
        return a, b

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
        a, b = self._parse_scored(prompt, completion)
        return 1.0 if completion == self.answer_for(a, b) + self.eos_token else 0.0

    def format_reward(self, prompt: str, completion: str) -> float:
        """Format-only reward: 1.0 iff ``completion`` is n + 1 digits then EOS (right or wrong).

        Kept separate from :meth:`reward` so the two can be weighed, logged and ablated apart.

        Raises:
            ValueError: as :meth:`reward`.
        """
        self._parse_scored(prompt, completion)
        body = completion[: -len(self.eos_token)] if completion.endswith(self.eos_token) else None
        ok = body is not None and len(body) == self.answer_width and body.isascii() and body.isdigit()
        return 1.0 if ok else 0.0

    def substring_reward(self, prompt: str, completion: str) -> float:
        """A verifier with a loophole: 1.0 iff the sum, written without zero padding, appears anywhere in ``completion``.

        R_sub(q, o) = 1[str(a + b) is a substring of o]

        This is the lenient check ``str(a + b) in completion`` that a grader writes to accept "an
        answer that contains the right number", and it is wrong twice over: the task's answers are
        zero-padded, so for a sum below 10^n any digit may stand in the padding (``"149"`` passes for
        ``29 + 20``), and anything may follow the number (``"490"`` passes too). Every completion that
        :meth:`reward` accepts is accepted here. Chapter 15 trains on it to watch a policy exploit a
        verifier, and audits it with :meth:`reward`; use :meth:`reward` for anything else.

        Args:
            prompt: a prompt of this task, e.g. ``"29+20="``.
            completion: the decoded completion, e.g. ``"149</s>"``.
        Returns:
            1.0 or 0.0.
        Raises:
            ValueError: ``prompt`` is not a prompt of this task, or ``completion`` is not a string.
        Example:
            >>> task = AdditionTask(num_digits=2)
            >>> task.substring_reward("29+20=", "149</s>"), task.reward("29+20=", "149</s>")
            (1.0, 0.0)
        """
        a, b = self._parse_scored(prompt, completion)
        return 1.0 if str(a + b) in completion else 0.0


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


class ScratchpadAdditionTask(AdditionTask):
    """Addition whose completions may show their working first, so their length is the model's choice.

    Format. The working writes the column sums from the units column upward, each step ending with
    ``";"``; a column after the units adds ``"+1"`` only when a carry comes into it. The answer and
    EOS follow, exactly as in :class:`AdditionTask`:

        prompt                     "27+45="
        completion with working    "7+5=12;2+4+1=7;072</s>"
        completion without         "072</s>"

    Reward. R(q, o) = 1 iff o = body + EOS, the body is made of :attr:`alphabet` characters only
    (so no special token before the EOS, and nothing after it), and its *final segment* (the text
    after the last ``";"``, or the whole body when there is none) equals the answer. The working is
    **not** checked: anything made of alphabet characters may stand before the last ``";"``. This
    is what puts the completion's length under the model's control: a right answer scores 1 after
    no working, the reference working, or a long wrong one, and only the token budget
    (``max_new_tokens``) bounds it.

    Data. Prompts, split and constructor arguments are those of :class:`AdditionTask`.
    :meth:`sample_problems` labels each problem with the working form with probability
    ``scratchpad_prob`` (one extra ``torch.rand`` draw per call, after the problem draws);
    :meth:`held_out_problems` returns the direct form (the reward does not care which form the
    model writes). Token budget: :attr:`max_completion_tokens` is 20 for n = 2 (``"99+99="``), 30
    for n = 3, which with the prompt exceeds :func:`rlbook.lm.policy_config`'s default context of
    32 (pass ``n_positions=64``).

    Source: the scratchpad idea of Nye et al. 2021, "Show Your Work: Scratchpads for Intermediate
    Computation with Language Models", arXiv:2112.00114 (there the working is supervised; here it
    is free, which is the point for the length experiments).

    Args:
        num_digits, held_out_fraction, seed, eos_token, family: as :class:`AdditionTask`.
        scratchpad_prob: share of training labels written with the working, in [0, 1].
    Raises:
        ValueError: an argument is out of range.
    Example:
        >>> task = ScratchpadAdditionTask(num_digits=2)
        >>> task.working_for(27, 45) + task.answer_for(27, 45)
        '7+5=12;2+4+1=7;072'
        >>> task.reward("27+45=", "7+5=12;2+4+1=7;072</s>"), task.reward("27+45=", "1;072</s>")
        (1.0, 1.0)
    """

    separator = ";"

    def __init__(self, num_digits: int = 2, held_out_fraction: float = 0.1, seed: int = 0, eos_token: str = "</s>",
                 scratchpad_prob: float = 0.5, family: str = "all"):
        check_in_range("scratchpad_prob", scratchpad_prob, 0.0, 1.0)
        super().__init__(num_digits, held_out_fraction, seed, eos_token, family)
        self.scratchpad_prob = float(scratchpad_prob)

    @property
    def alphabet(self) -> str:
        """``"0123456789+=;"``: the plain task's characters plus the step separator."""
        return super().alphabet + self.separator

    @property
    def max_completion_tokens(self) -> int:
        """Tokens of the longest reference completion with working, EOS included (one char = one token).

        The longest is ``9…9 + 9…9``: every column has a two-digit sum and all but the units a carry,
        so 7 + 9(n − 1) + (n + 1) + 1 tokens: 10, 20, 30 for n = 1, 2, 3.
        """
        largest = self._base - 1
        return len(self.working_for(largest, largest)) + self.answer_width + 1

    def working_for(self, a: int, b: int) -> str:
        """The reference working for ``a + b``, units column first, e.g. ``(27, 45)`` → ``"7+5=12;2+4+1=7;"``.

        Column i (i = 0 is the units) writes ``"{a_i}+{b_i}={s_i};"``, with ``"+1"`` before the
        ``"="`` when c_i = 1, where s_i = a_i + b_i + c_i, c_0 = 0, c_{i+1} = 1[s_i ≥ 10]. The
        answer (:meth:`answer_for`, not included) follows the last ``";"``.

        Raises:
            ValueError: ``a`` or ``b`` is not an integer in [0, 10^n).
        """
        return self._columns(a, b, units_carry=True)[0]

    def _columns(self, a: int, b: int, units_carry: bool) -> tuple[str, str]:
        """(working, answer) by column addition; ``units_carry=False`` drops the units column's carry."""
        for name, value in (("a", a), ("b", b)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self._base:
                raise ValueError(f"`{name}` must be an integer in [0, {self._base}); got {value!r}")
        steps, digits, carry = [], [], 0
        for i in range(self.num_digits):
            x, y = a // 10**i % 10, b // 10**i % 10
            s = x + y + carry
            steps.append(f"{x}+{y}{'+1' if carry else ''}={s}{self.separator}")
            digits.append(s % 10)
            carry = int(s >= 10) if (i > 0 or units_carry) else 0
        answer = str(carry) + "".join(str(d) for d in reversed(digits))
        return "".join(steps), answer

    def sample_problems(self, num: int, generator: torch.Generator, split: str = "train") -> list[Problem]:
        """As :meth:`AdditionTask.sample_problems`, each answer then written with its working
        (``working_for(a, b) + answer_for(a, b)``) with probability ``scratchpad_prob``.

        The problem draws are the plain task's; then one ``torch.rand(num, generator=generator)``
        picks the forms (also when ``scratchpad_prob`` is 0 or 1), so the draws are reproducible.

        Raises:
            ValueError: ``num`` < 1 or ``split`` unknown.
        """
        problems = super().sample_problems(num, generator, split)
        working = (torch.rand(len(problems), generator=generator) < self.scratchpad_prob).tolist()
        return [Problem(p.prompt, self.working_for(*self._parse(p.prompt)) + p.answer) if w else p
                for p, w in zip(problems, working)]

    def carry_slip(self, problem: Problem) -> str:
        """The label with the units carry forgotten, in ``problem.answer``'s form, working kept consistent.

        The slipped answer is :meth:`AdditionTask.carry_slip`'s. When ``problem.answer`` holds the
        separator (the working form) the working is rewritten to match: the tens step omits its
        ``"+1"`` and later carries follow the slipped sums, e.g. ``"07+45="`` →
        ``"7+5=12;0+4=4;042"`` (true ``"7+5=12;0+4+1=5;052"``); otherwise the direct form ``"042"``.

        Raises:
            ValueError: ``problem.prompt`` is not a prompt of this task.
        """
        working, answer = self._columns(*self._parse(problem.prompt), units_carry=False)
        return working + answer if self.separator in problem.answer else answer

    def corrupt(self, answer: str, generator: torch.Generator) -> str:
        """A one-digit mistake in the final segment of a label (after its last ``";"``); the working is kept.

        Same generator calls as :func:`corrupt_answer` on the final segment, e.g.
        ``"7+5=12;2+4+1=7;072"`` → ``"7+5=12;2+4+1=7;078"``.

        Raises:
            ValueError: the final segment is empty or not all digits.
        """
        head, sep, final = answer.rpartition(self.separator)
        return head + sep + corrupt_answer(final, generator)

    # -- the verifier -----------------------------------------------------------------------
    def _body(self, completion: str) -> str | None:
        """The completion without its final EOS, or None if it has no final EOS or a non-alphabet character."""
        if not isinstance(completion, str):
            raise ValueError(f"`completion` must be a string; got {type(completion).__name__}")
        if not completion.endswith(self.eos_token):
            return None
        body = completion[: -len(self.eos_token)]
        return body if set(body) <= set(self.alphabet) else None

    def reward(self, prompt: str, completion: str) -> float:
        """Verifiable correctness reward: 1.0 iff the final segment is the answer (working unchecked).

        R(q, o) = 1[o = w + s + "</s>", w ∈ alphabet* ending in ";" or empty, s = answer(q)]

        The completion is the decoded text up to and including its first EOS, special tokens kept;
        a special token (or any character outside :attr:`alphabet`) before the EOS, or a missing
        EOS (cut off by the budget), scores 0. The working ``w`` is not checked (see the class
        docstring).

        Args:
            prompt: a prompt of this task, e.g. ``"27+45="``.
            completion: the decoded completion, e.g. ``"7+5=12;2+4+1=7;072</s>"`` or ``"072</s>"``.
        Returns:
            1.0 or 0.0.
        Raises:
            ValueError: ``prompt`` is not a prompt of this task, or ``completion`` is not a string.
        """
        a, b = self._parse(prompt)
        body = self._body(completion)
        ok = body is not None and body.rpartition(self.separator)[2] == self.answer_for(a, b)
        return 1.0 if ok else 0.0

    def format_reward(self, prompt: str, completion: str) -> float:
        """Format-only reward: 1.0 iff the body is alphabet characters and its final segment n + 1 digits.

        Raises:
            ValueError: as :meth:`reward`.
        """
        self._parse(prompt)
        body = self._body(completion)
        final = None if body is None else body.rpartition(self.separator)[2]
        ok = final is not None and len(final) == self.answer_width and final.isdigit()
        return 1.0 if ok else 0.0
