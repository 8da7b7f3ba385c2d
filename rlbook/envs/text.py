"""Text environments on token ids, tools, and the multi-turn rollout of an agent (Part VII).

The contract follows Gymnasium's (``reset`` / ``step``), with token ids in place of observations and
actions, so that a trajectory is built from ids alone and never from decoded and re-encoded text
(token-in-token-out):

* ``reset(seed) -> prompt_ids``: the episode's first observation, a list of token ids.
* ``step(action_ids) -> (observation_ids, reward, terminated, truncated, info)``: the model's turn
  (the ids it generated, ending with a stop token) in, the environment's answer (a tool's output;
  empty when the episode ends) out. ``terminated`` ends the episode on the task's own terms (an answer
  was given), ``truncated`` on the budget's (``max_turns`` reached).

The tasks here make a tool *causally necessary*: the addition and multiplication of numbers longer
than the book's small model adds reliably, and a key-value lookup whose table is drawn afresh for each
episode (it cannot be memorised). Controls: the same calculator returning nothing (``tool="useless"``)
or noise (``tool="harmful"``).

The tool-call syntax is one character each way: the model writes ``(`` expression ``)`` to call the
tool and the environment answers ``[`` result ``]``; an answer is digits followed by the end-of-sequence
token. So ``)`` and ``</s>`` are the stop tokens of a model turn (:data:`STOP_TEXT`).

Source: Gymnasium's ``Env`` API (Towers et al. 2024, arXiv:2407.17032); multi-turn tool use with loss
masks as in TRL 1.16's ``GRPOTrainer`` (``tools=`` / ``environment_factory``, ``tool_mask``) and
verl's AgentLoop; the environment/agent split of GEM (Liu et al. 2025, arXiv:2510.01051).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

__all__ = [
    "STOP_TEXT",
    "TOOL_ALPHABET",
    "CalculatorEnv",
    "KeyValueLookupEnv",
    "ShapedRewards",
    "Trajectory",
    "batch_rollouts",
    "collate_trajectories",
    "model_policy",
    "rollout",
    "samples_from_turns",
]

# The characters of Part VII's tasks: digits, the two operators, the prompt's '=' and ':' and the
# tool-call brackets ('(' ... ')' a call, '[' ... ']' the tool's answer).
TOOL_ALPHABET = "0123456789+*=:()[]"
# What ends a model turn: a tool call's closing bracket, or the end-of-sequence token (an answer).
STOP_TEXT = (")", "</s>")


def _check_tokenizer(tokenizer) -> None:
    missing = [c for c in TOOL_ALPHABET if tokenizer.convert_tokens_to_ids(c) in (None, tokenizer.unk_token_id)]
    if missing:
        raise ValueError(f"`tokenizer` must know every character of TOOL_ALPHABET {TOOL_ALPHABET!r} "
                         f"(build it with rlbook.lm.build_char_tokenizer(TOOL_ALPHABET)); missing {missing}")


class _ToolEnv:
    """What the tool environments share: the tokenizer, the budget, the answer check and the turn."""

    def __init__(self, tokenizer, max_turns: int, seed: int | None):
        _check_tokenizer(tokenizer)
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"`max_turns` must be an integer ≥ 1; got {max_turns!r}")
        self.tokenizer = tokenizer
        self.max_turns = max_turns
        self.eos_token_id = tokenizer.eos_token_id
        self.stop_token_ids = tuple(tokenizer.convert_tokens_to_ids(t) for t in STOP_TEXT)
        self._generator = torch.Generator().manual_seed(0 if seed is None else int(seed))
        self._turn = 0
        self._answer: str | None = None

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def _randint(self, low: int, high: int) -> int:
        """An integer in [low, high), from the environment's own generator."""
        return int(torch.randint(low, high, (1,), generator=self._generator))

    def reset(self, seed: int | None = None) -> list[int]:
        """Start an episode: the prompt's ids (``<s>`` first). ``seed`` reseeds the environment."""
        if seed is not None:
            self._generator.manual_seed(int(seed))
        self._turn = 0
        prompt, self._answer = self._new_problem()
        return [self.tokenizer.bos_token_id, *self._encode(prompt)]

    @property
    def answer(self) -> str:
        """The current episode's reference answer (digits)."""
        if self._answer is None:
            raise RuntimeError("call reset() before reading the answer")
        return self._answer

    def step(self, action_ids: Sequence[int]) -> tuple[list[int], float, bool, bool, dict]:
        """One model turn: a tool call ``(...)`` is answered ``[...]``; an answer ``digits</s>`` ends
        the episode with reward 1 if it is the reference answer, else 0; anything else (no stop token,
        a malformed answer) ends it with reward 0. After ``max_turns`` turns the episode is truncated.

        Returns:
            ``(observation_ids, reward, terminated, truncated, info)``; ``info`` holds ``tool_call``
            (this turn called the tool), ``tool_failed`` (the call could not be evaluated) and
            ``malformed`` (the turn was neither a call nor an answer).
        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
            ValueError: ``action_ids`` is empty or not a sequence of token ids.
        """
        if self._answer is None or self._turn < 0:
            raise RuntimeError("call reset() before step(), and again after an episode ends")
        if isinstance(action_ids, torch.Tensor):
            action_ids = action_ids.tolist()
        if not action_ids or not all(isinstance(i, int) for i in action_ids):
            raise ValueError(f"`action_ids` must be a non-empty list of token ids; got {action_ids!r}")
        self._turn += 1
        text = self.tokenizer.decode(action_ids)  # the environment reads text; the trajectory keeps the ids
        info = {"tool_call": False, "tool_failed": False, "malformed": False}
        if text.startswith("(") and text.endswith(")") and "</s>" not in text:
            info["tool_call"] = True
            result = self._tool(text[1:-1])
            info["tool_failed"] = result is None
            observation = self._encode("[" + (result or "") + "]")
            truncated = self._turn >= self.max_turns
            if truncated:
                self._turn = -1
            return observation, 0.0, False, truncated, info
        self._turn = -1  # an answer, or a malformed turn: the episode ends
        if text.endswith("</s>") and text[:-4].isdigit():
            return [], float(text[:-4] == self._answer), True, False, info
        info["malformed"] = True
        return [], 0.0, True, False, info


class CalculatorEnv(_ToolEnv):
    """Arithmetic that needs a calculator: ``a+b`` or ``a*b`` with operands of ``num_digits`` digits.

    The prompt is ``<s>1234+5678=``; the model may call ``(1234+5678)`` and read ``[6912]``, then
    answer ``6912</s>`` (reward 1 if right, 0 otherwise). The answer is written without leading zeros.

    Args:
        tokenizer: a character tokenizer over :data:`TOOL_ALPHABET` (``build_char_tokenizer(TOOL_ALPHABET)``).
        num_digits: digits per operand, 1 to 6 (operands are drawn uniformly with exactly that many).
        operation: ``"+"`` or ``"*"`` (for multiplication the second operand has ``mul_digits`` digits).
        tool: ``"calculator"`` (exact), ``"useless"`` (answers ``[]``) or ``"harmful"`` (answers a random
            number with as many digits as the right result).
        max_turns: model turns before the episode is truncated (≥ 1).
        mul_digits: digits of the second operand of a multiplication (1 to 6).
        seed: seed of the environment's own generator (problems and the harmful tool's noise).
    Raises:
        ValueError: an argument is out of range, or the tokenizer lacks a character of the alphabet.
    Example:
        >>> from rlbook.lm import build_char_tokenizer
        >>> tok = build_char_tokenizer(TOOL_ALPHABET)
        >>> env = CalculatorEnv(tok, num_digits=4, seed=0)
        >>> prompt = env.reset()
        >>> obs, reward, terminated, truncated, info = env.step(tok("(12+30)").input_ids)
        >>> tok.decode(obs), reward, terminated, info["tool_call"]
        ('[42]', 0.0, False, True)
    """

    def __init__(self, tokenizer, num_digits: int = 4, operation: str = "+", tool: str = "calculator",
                 max_turns: int = 3, mul_digits: int = 2, seed: int | None = None):
        for name, value in (("num_digits", num_digits), ("mul_digits", mul_digits)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 6:
                raise ValueError(f"`{name}` must be an integer in [1, 6]; got {value!r}")
        if operation not in ("+", "*"):
            raise ValueError(f"`operation` must be '+' or '*'; got {operation!r}")
        if tool not in ("calculator", "useless", "harmful"):
            raise ValueError(f"`tool` must be 'calculator', 'useless' or 'harmful'; got {tool!r}")
        super().__init__(tokenizer, max_turns, seed)
        self.num_digits, self.operation, self.tool, self.mul_digits = num_digits, operation, tool, mul_digits

    def _operand(self, digits: int) -> int:
        return self._randint(10 ** (digits - 1) if digits > 1 else 0, 10**digits)

    def _new_problem(self) -> tuple[str, str]:
        a = self._operand(self.num_digits)
        b = self._operand(self.num_digits if self.operation == "+" else self.mul_digits)
        value = a + b if self.operation == "+" else a * b
        return f"{a}{self.operation}{b}=", str(value)

    def _tool(self, expression: str) -> str | None:
        for op in ("+", "*"):
            left, sep, right = expression.partition(op)
            if sep and left.isdigit() and right.isdigit() and len(left) <= 6 and len(right) <= 6:
                exact = str(int(left) + int(right) if op == "+" else int(left) * int(right))
                break
        else:
            return None
        if self.tool == "useless":
            return ""
        if self.tool == "harmful":
            return str(self._randint(10 ** (len(exact) - 1) if len(exact) > 1 else 0, 10 ** len(exact)))
        return exact


class KeyValueLookupEnv(_ToolEnv):
    """Follow ``hops`` links in a key-value table drawn afresh for each episode (it cannot be memorised).

    The table maps each of ``num_keys`` two-digit keys to another key. The prompt ``<s>37:2=`` asks for
    the key reached from 37 after 2 links; the tool answers ``(37)`` with ``[52]`` (37's link), so 2
    calls and the answer ``08</s>`` (if 52 links to 08) solve it. Without the tool the answer is a guess
    (probability 1/num_keys).

    Args:
        tokenizer: a character tokenizer over :data:`TOOL_ALPHABET`.
        hops: the links to follow, an integer in [1, 3], or a pair ``(low, high)`` drawn uniformly per episode.
        num_keys: size of the table, 2 to 100 (keys are distinct two-digit strings "00"-"99").
        max_turns: model turns before truncation (≥ 1; at least ``hops + 1`` to be solvable).
        seed: seed of the environment's generator (tables, starts and hop counts).
    Raises:
        ValueError: an argument is out of range, or the tokenizer lacks a character of the alphabet.
    """

    def __init__(self, tokenizer, hops: int | tuple[int, int] = 1, num_keys: int = 16, max_turns: int = 4,
                 seed: int | None = None):
        low, high = (hops, hops) if isinstance(hops, int) and not isinstance(hops, bool) else tuple(hops)
        if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high <= 3):
            raise ValueError(f"`hops` must be an integer in [1, 3] or a pair (low, high) within it; got {hops!r}")
        if isinstance(num_keys, bool) or not isinstance(num_keys, int) or not 2 <= num_keys <= 100:
            raise ValueError(f"`num_keys` must be an integer in [2, 100]; got {num_keys!r}")
        super().__init__(tokenizer, max_turns, seed)
        self.hops, self.num_keys = (low, high), num_keys
        self.table: dict[str, str] = {}

    def _new_problem(self) -> tuple[str, str]:
        keys = [f"{k:02d}" for k in torch.randperm(100, generator=self._generator)[: self.num_keys].tolist()]
        links = torch.randint(0, self.num_keys, (self.num_keys,), generator=self._generator).tolist()
        self.table = {k: keys[j] for k, j in zip(keys, links)}
        start = keys[self._randint(0, self.num_keys)]
        hops = self._randint(self.hops[0], self.hops[1] + 1)
        node = start
        for _ in range(hops):
            node = self.table[node]
        return f"{start}:{hops}=", node

    def _tool(self, expression: str) -> str | None:
        return self.table.get(expression)


class ShapedRewards:
    """Per-turn shaping rewards on a tool environment: a format penalty on each call, a tool bonus at the end.

    The wrapped environment's reward of turn k (the outcome: 1 on a right answer, else 0) becomes

        r_k = outcome_k − format_penalty · [turn k is a tool call] + tool_bonus · n_calls · [turn k is the last]

    with n_calls the episode's tool-call turns (``info["tool_call"]``, a failed call included). The penalty
    charges every turn that postpones the answer (the task's format is an answer; a call is a turn without
    one: an efficiency penalty per turn). The bonus pays for having used the tool, with the outcome, as
    rLLM's math reward does (``RewardConfig.toolcall_bonus``, added to a right answer's reward when the
    episode called a tool); here it is paid whatever the answer, per call, so that with
    ``tool_bonus == format_penalty`` the two cancel
    in every episode's undiscounted return from its first turn: the pair is potential-based shaping at γ = 1
    (Ng, Harada and Russell 1999, Theorem 1, with Φ(s) = −format_penalty × the calls made so far, and 0 once
    the episode is over), which cannot change which policy is best. Chapter 17 measures what it does to a
    credit scheme all the same.

    Everything else (``reset``, the observations, ``terminated``/``truncated``, ``tokenizer``, ``answer``, ...)
    is the wrapped environment's; ``info`` gains ``shaping`` (the amount added to the turn's reward).

    Args:
        env: a tool environment (:class:`CalculatorEnv`, :class:`KeyValueLookupEnv`).
        tool_bonus: b ≥ 0 per call, paid on the episode's last turn (the one that terminates or truncates
            it), in the outcome's units.
        format_penalty: p ≥ 0, charged on every tool-call turn.
    Raises:
        ValueError: ``env`` has no ``reset``/``step``, or a bonus or penalty that is negative or not finite.
    """

    def __init__(self, env, tool_bonus: float = 0.0, format_penalty: float = 0.0):
        if not (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))):
            raise ValueError(f"`env` must be a tool environment with reset() and step(); got {type(env).__name__}")
        for name, value in (("tool_bonus", tool_bonus), ("format_penalty", format_penalty)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
                raise ValueError(f"`{name}` must be a finite number ≥ 0; got {value!r}")
        self.env, self.tool_bonus, self.format_penalty = env, float(tool_bonus), float(format_penalty)
        self._calls = 0

    def __getattr__(self, name):  # tokenizer, answer, max_turns, ...: the wrapped environment's
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, seed: int | None = None) -> list[int]:
        """The wrapped environment's ``reset``."""
        self._calls = 0
        return self.env.reset(seed)

    def step(self, action_ids: Sequence[int]) -> tuple[list[int], float, bool, bool, dict]:
        """The wrapped environment's ``step``, its reward plus this turn's shaping (``info["shaping"]``)."""
        observation, reward, terminated, truncated, info = self.env.step(action_ids)
        shaping = 0.0
        if info.get("tool_call"):
            self._calls += 1
            shaping -= self.format_penalty
        if terminated or truncated:
            shaping += self.tool_bonus * self._calls
        return observation, reward + shaping, terminated, truncated, {**info, "shaping": shaping}


@dataclass
class Trajectory:
    """One multi-turn episode, as token ids and what each id is.

    Attributes:
        input_ids: the prompt, then each turn's action ids and the observation ids after them.
        loss_mask: 1 on the ids the model generated (its actions), 0 on the prompt and observations.
        turn_ids: the turn (0-based) each id belongs to (its action and the observation after it),
            −1 on the prompt.
        turn_rewards: one reward per turn.
        contexts: the ids the policy was given at each turn (each one extends the one before).
        terminated: the episode ended on the task's terms (an answer); truncated: on the budget's.
        infos: the environment's ``info`` of each turn.
    """

    input_ids: list[int]
    loss_mask: list[int]
    turn_ids: list[int]
    turn_rewards: list[float] = field(default_factory=list)
    contexts: list[list[int]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    infos: list[dict] = field(default_factory=list)

    @property
    def num_turns(self) -> int:
        return len(self.turn_rewards)

    def add_turn(self, action: list[int], step: tuple) -> bool:
        """Append one turn: the policy's ``action`` ids (given the ids so far, recorded as this turn's
        context) and the environment's ``step`` result ``(observation ids, reward, terminated,
        truncated, info)``. Returns whether the environment ended the episode."""
        observation, reward, terminated, truncated, info = step
        observation = list(observation)
        turn = self.num_turns
        self.input_ids += action + observation
        self.loss_mask += [1] * len(action) + [0] * len(observation)
        self.turn_ids += [turn] * (len(action) + len(observation))
        self.turn_rewards.append(float(reward))
        self.infos.append(dict(info))
        self.terminated, self.truncated = bool(terminated), bool(truncated)
        return bool(terminated or truncated)

    def end(self) -> None:
        """Mark the episode over: truncated unless the environment terminated it."""
        self.truncated = self.truncated or not self.terminated

    @property
    def reward(self) -> float:
        """The episode's total reward (the sum of its turns')."""
        return float(sum(self.turn_rewards))


def rollout(env, policy: Callable[[list[int]], list[int]], seed: int | None = None,
            max_turns: int | None = None) -> Trajectory:
    """Run one episode of ``env`` with ``policy``, token in, token out.

    At each turn the policy is given the ids so far (prompt, earlier actions and observations) and
    returns its action's ids; the environment's observation ids are appended after them. Nothing is
    decoded and re-encoded on the way: the context of turn t+1 starts with exactly the ids of turns ≤ t
    (the extension property), so the log-probabilities a trainer computes later are those of the ids
    the policy produced.

    Args:
        env: an environment with ``reset(seed) -> ids`` and ``step(ids) -> (ids, reward, terminated,
            truncated, info)``.
        policy: ``context ids -> action ids`` (a non-empty list, ending with a stop token or cut at the
            policy's own budget).
        seed: passed to ``env.reset``.
        max_turns: a budget of the rollout's own (the episode is marked truncated after it); None: the
            environment's.
    Returns:
        The :class:`Trajectory`.
    Raises:
        ValueError: the policy returned no ids, or ``max_turns`` < 1.
    """
    if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1):
        raise ValueError(f"`max_turns` must be None or an integer ≥ 1; got {max_turns!r}")
    ids = list(env.reset(seed))
    traj = Trajectory(input_ids=list(ids), loss_mask=[0] * len(ids), turn_ids=[-1] * len(ids))
    while True:
        traj.contexts.append(list(traj.input_ids))
        action = policy(list(traj.input_ids))
        action = action.tolist() if isinstance(action, torch.Tensor) else list(action)
        if not action:
            raise ValueError("`policy` returned no token ids for a turn")
        if traj.add_turn(action, env.step(action)) or (max_turns is not None and traj.num_turns >= max_turns):
            traj.end()
            return traj


def collate_trajectories(trajectories: Sequence[Trajectory], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-pad trajectories into the tensors a multi-turn loss and the credit schemes take.

    Returns:
        ``input_ids`` (B, T) long; ``attention_mask`` (B, T) bool; ``loss_mask`` (B, T) bool (model
        tokens only); ``turn_ids`` (B, T) long (−1 on the prompt and padding); ``turn_rewards`` (B, K)
        float32 and ``turn_mask`` (B, K) bool (K the most turns of any trajectory); ``rewards`` (B,)
        the episodes' total rewards.
    Raises:
        ValueError: no trajectories.
    """
    if not trajectories:
        raise ValueError("`trajectories` must hold at least one Trajectory")
    B = len(trajectories)
    T = max(len(t.input_ids) for t in trajectories)
    K = max(max(t.num_turns for t in trajectories), 1)
    out = {"input_ids": torch.full((B, T), int(pad_token_id), dtype=torch.long),
           "attention_mask": torch.zeros(B, T, dtype=torch.bool), "loss_mask": torch.zeros(B, T, dtype=torch.bool),
           "turn_ids": torch.full((B, T), -1, dtype=torch.long), "turn_rewards": torch.zeros(B, K),
           "turn_mask": torch.zeros(B, K, dtype=torch.bool)}
    for b, t in enumerate(trajectories):
        n = len(t.input_ids)
        out["input_ids"][b, :n] = torch.tensor(t.input_ids)
        out["attention_mask"][b, :n] = True
        out["loss_mask"][b, :n] = torch.tensor(t.loss_mask, dtype=torch.bool)
        out["turn_ids"][b, :n] = torch.tensor(t.turn_ids)
        out["turn_rewards"][b, : t.num_turns] = torch.tensor(t.turn_rewards)
        out["turn_mask"][b, : t.num_turns] = True
    out["rewards"] = out["turn_rewards"].sum(dim=1)
    return out


def batch_rollouts(model, envs: Sequence, seeds: Sequence[int | None], *, max_new_tokens: int = 12,
                   temperature: float = 1.0, generator: torch.Generator | None = None, greedy: bool = False,
                   max_turns: int | None = None) -> list[Trajectory]:
    """Run one episode in each of ``envs`` at once with a causal LM, token in, token out.

    Every turn, the episodes still running are sampled together (their contexts left-padded, one
    :func:`rlbook.lm.sample_completions` call that stops a row at ``)`` or ``</s>``), then each
    environment steps on its row's action. Equal to :func:`rollout` with :func:`model_policy`
    episode by episode, in fewer model calls (a group of G episodes of one problem: G environments
    reset with the same seed).

    Args:
        model: a causal LM (its context must hold the longest episode: ``n_positions`` ≥ 64 for the tool tasks).
        envs: the environments (each with a ``tokenizer``; one episode each).
        seeds: one ``reset`` seed per environment.
        max_new_tokens: each turn's budget (≥ 1).
        temperature: τ > 0 of the sampling softmax (ignored when ``greedy``).
        generator: the sampling generator.
        greedy: take the most likely token (evaluation).
        max_turns: a budget of the rollout's own (as :func:`rollout`); None: each environment's.
    Returns:
        The trajectories, in the order of ``envs``.
    Raises:
        ValueError: ``envs`` empty or of another length than ``seeds``.
    """
    from rlbook.lm.sampling import sample_completions
    from rlbook.lm.tokenizer import forbidden_token_ids

    if not envs or len(envs) != len(seeds):
        raise ValueError(f"`envs` and `seeds` must be non-empty and of equal length; got {len(envs)} and {len(seeds)}")
    tok = envs[0].tokenizer
    stops = [tok.convert_tokens_to_ids(t) for t in STOP_TEXT]
    trajs = []
    for env, seed in zip(envs, seeds):
        ids = list(env.reset(seed))
        trajs.append(Trajectory(input_ids=list(ids), loss_mask=[0] * len(ids), turn_ids=[-1] * len(ids)))
    active = list(range(len(envs)))
    while active:
        contexts = [trajs[i].input_ids for i in active]
        width = max(len(c) for c in contexts)
        prompt_ids = torch.full((len(active), width), tok.pad_token_id, dtype=torch.long)
        prompt_mask = torch.zeros(len(active), width, dtype=torch.bool)
        for row, c in enumerate(contexts):  # left padding
            prompt_ids[row, width - len(c):] = torch.tensor(c)
            prompt_mask[row, width - len(c):] = True
        out = sample_completions(model, prompt_ids, prompt_mask, max_new_tokens=max_new_tokens,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                 forbidden_ids=forbidden_token_ids(tok), temperature=temperature, greedy=greedy,
                                 generator=generator, stop_token_ids=stops)
        still = []
        for row, i in enumerate(active):
            traj = trajs[i]
            traj.contexts.append(list(traj.input_ids))
            action = out.completion_ids[row][out.completion_mask[row]].tolist()
            if traj.add_turn(action, envs[i].step(action)) or (max_turns is not None and traj.num_turns >= max_turns):
                traj.end()
            else:
                still.append(i)
        active = still
    return trajs


def samples_from_turns(turns: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[dict[str, list[int]]]:
    """Training samples from one episode's turns, each action kept after exactly the context it was sampled in.

    ``turns`` holds, per turn, the ids the policy was given (its context, as the chat template rendered
    it) and the ids it generated. While each turn's context *extends* the current sample (begins with
    exactly its ids), the turn joins it: the new context ids (the observation) are appended with loss
    mask 0, then the action with loss mask 1. A context that does not extend it, as when a template
    re-renders the history differently (drops an earlier turn's reasoning span, re-tokenises decoded
    text), starts a new sample from that context. Concatenating the turns anyway would score each
    action after ids the policy never saw: a silently wrong log-probability, hence a wrong importance
    ratio. With a token-in-token-out rollout (:func:`rollout`) every context extends, and the episode is
    one sample.

    Source: the extension property of multi-turn rollouts (each turn's prompt is a prefix of the
    next); verl's AgentLoop and prime-rl's multi-turn samples split where it fails.

    Args:
        turns: a sequence of ``(context_ids, action_ids)``; ``action_ids`` non-empty.
    Returns:
        A list of samples ``{"input_ids": [...], "loss_mask": [...]}`` (equal lengths; 1 on actions).
    Raises:
        ValueError: no turns, or a turn with no action ids.
    Example:
        >>> samples_from_turns([([1, 5], [6, 7]), ([1, 5, 6, 7, 8], [9])])  # extends: one sample
        [{'input_ids': [1, 5, 6, 7, 8, 9], 'loss_mask': [0, 0, 1, 1, 0, 1]}]
        >>> len(samples_from_turns([([1, 5], [6, 7]), ([1, 5, 8], [9])]))  # turn 1's context drops 6, 7
        2
    """
    if not turns:
        raise ValueError("`turns` must hold at least one (context_ids, action_ids) pair")
    samples: list[dict[str, list[int]]] = []
    current: dict[str, list[int]] | None = None
    for k, (context, action) in enumerate(turns):
        context = context.tolist() if isinstance(context, torch.Tensor) else list(context)
        action = action.tolist() if isinstance(action, torch.Tensor) else list(action)
        if not action:
            raise ValueError(f"`turns`: turn {k} has no action ids")
        if current is not None and context[: len(current["input_ids"])] == current["input_ids"]:
            new = context[len(current["input_ids"]):]
            current["input_ids"] += new + action
            current["loss_mask"] += [0] * len(new) + [1] * len(action)
        else:
            current = {"input_ids": context + action, "loss_mask": [0] * len(context) + [1] * len(action)}
            samples.append(current)
    return samples


def model_policy(model, stop_token_ids: Sequence[int], max_new_tokens: int = 12, temperature: float = 1.0,
                 generator: torch.Generator | None = None, forbidden_ids: Sequence[int] = (),
                 greedy: bool = False) -> Callable[[list[int]], list[int]]:
    """A causal LM as a policy for :func:`rollout`: it samples one turn, token by token with its KV
    cache, until a stop token (kept as the turn's last id) or ``max_new_tokens``.

    Args:
        model: a causal LM taking ``input_ids`` (1, L) and returning ``.logits`` (1, L, V).
        stop_token_ids: ids that end a turn (``)`` and ``</s>`` for the tool tasks).
        max_new_tokens: the turn's budget (≥ 1).
        temperature: τ > 0 of the sampling softmax (ignored when ``greedy``).
        generator: the sampling generator (reproducible rollouts).
        forbidden_ids: ids never sampled (``<pad>``, ``<s>``, ``<unk>``).
        greedy: take the most likely token instead of sampling.
    Returns:
        ``policy(context_ids) -> action_ids``.
    Raises:
        ValueError: ``max_new_tokens`` < 1, ``temperature`` ≤ 0 or no stop token.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"`max_new_tokens` must be an integer ≥ 1; got {max_new_tokens!r}")
    if not greedy and not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"`temperature` must be a finite number > 0; got {temperature!r}")
    stops = {int(i) for i in stop_token_ids}
    if not stops:
        raise ValueError("`stop_token_ids` must hold at least one id")
    forbidden = list(forbidden_ids)

    @torch.no_grad()
    def policy(context: list[int]) -> list[int]:
        from rlbook.lm.logprobs import cache_kwarg, output_cache

        device = next(model.parameters()).device
        ids = torch.tensor([context], dtype=torch.long, device=device)
        out = model(input_ids=ids, use_cache=True)
        action: list[int] = []
        for _ in range(max_new_tokens):
            logits = out.logits[:, -1, :].float()
            if forbidden:
                logits[:, forbidden] = float("-inf")
            if greedy:
                token = int(logits.argmax(dim=-1))
            else:
                probs = torch.softmax(logits / temperature, dim=-1).cpu()
                token = int(torch.multinomial(probs, 1, generator=generator))
            action.append(token)
            if token in stops:
                break
            nxt = torch.tensor([[token]], dtype=torch.long, device=device)
            out = model(input_ids=nxt, use_cache=True, **{cache_kwarg(model): output_cache(out)})
        return action

    return policy
