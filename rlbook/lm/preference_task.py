"""Preferences on the book's task: a known gold reward, sampled comparison pairs, Bradley–Terry labels.

To study reward models and their over-optimisation one needs what real RLHF never has: the *gold*
reward behind the human labels. Here it is written down. On the scratchpad addition task
(:class:`rlbook.lm.ScratchpadAdditionTask`) the gold reward has two components,

    r*(q, o) = 1[o is right] − λ · |o| / L,

correctness (the task's verifier) and brevity: |o| is the completion's length in tokens (EOS
included) and L the token budget, so a right direct answer ``"072</s>"`` (4 tokens of L = 24)
scores 1 − λ/6 and the same answer after its working (19 tokens) 1 − 19λ/24. It prefers a right
answer to a wrong one (when λ < 1) and, between equally right answers, the shorter one: "answer
correctly, and briefly".

The labeller sees pairs of completions (o_a, o_b) of one prompt sampled from a policy (the
supervised model) and prefers o_a with the Bradley–Terry probability

    P(o_a ≻ o_b) = σ((r*(q, o_a) − r*(q, o_b)) / T),

a logistic choice with a known noise level T (temperature, in reward units): T → 0 labels by the
larger gold reward (ties by a coin), large T labels at random. A reward model trained on such
pairs (:func:`rlbook.bradley_terry_loss`) is the *proxy*; the gold reward measures what optimising
it did.

The best-of-N estimator (:func:`best_of_n_estimate`) turns M samples per prompt into the expected
proxy or gold reward of best-of-n for every n ≤ M without resampling.

Sources: Bradley & Terry 1952, Biometrika 39(3/4) 324–345; Christiano et al. 2017, arXiv:1706.03741
(reward models from pairwise preferences); Gao, Schulman & Hilton 2022, arXiv:2210.10760 (a gold
reward model standing in for humans, to measure over-optimisation); Nakano et al. 2021 (WebGPT),
arXiv:2112.09332, appendix (the unbiased best-of-n estimator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from rlbook import _checks

__all__ = ["completion_num_tokens", "GoldReward", "PreferencePairs", "sample_preference_pairs",
           "bradley_terry_labels", "best_of_n_estimate", "proxy_rewards", "ProxyRewardTask"]


def completion_num_tokens(completion: str, eos_token: str = "</s>") -> int:
    """Tokens of a decoded completion of the book's character tokenizer: one per character, EOS one.

    |o| = len(body) + 1[o ends with EOS],  body = o without its final EOS.

    Args:
        completion: decoded text with special tokens kept, e.g. ``"072</s>"`` (4 tokens).
        eos_token: the end-of-sequence string.
    Returns:
        The number of tokens (a truncated completion, without EOS, counts its characters).
    Raises:
        ValueError: ``completion`` is not a string or ``eos_token`` is empty.
    """
    if not isinstance(completion, str):
        raise ValueError(f"`completion` must be a string; got {type(completion).__name__}")
    if not eos_token:
        raise ValueError("`eos_token` must be a non-empty string")
    if completion.endswith(eos_token):
        return len(completion) - len(eos_token) + 1
    return len(completion)


@dataclass(frozen=True)
class GoldReward:
    """The gold reward r*(q, o) = correct(q, o) − λ·|o|/L on an addition task (module docstring).

    Args:
        task: an :class:`rlbook.lm.AdditionTask` or :class:`rlbook.lm.ScratchpadAdditionTask`
            (its ``reward`` is the correctness component, its ``eos_token`` ends a completion).
        length_coef: λ ≥ 0, reward units per full budget of tokens (0: correctness only).
        max_new_tokens: L ≥ 1, the token budget the completions are sampled with.
    Raises:
        ValueError: ``length_coef`` < 0 or ``max_new_tokens`` < 1.
    Example:
        >>> import rlbook as rl
        >>> gold = GoldReward(rl.lm.ScratchpadAdditionTask(), length_coef=0.5, max_new_tokens=24)
        >>> gold("27+45=", "072</s>"), gold("27+45=", "7+5=12;2+4+1=7;072</s>"), gold("27+45=", "071</s>")
        (0.9166666666666666, 0.6041666666666667, -0.08333333333333333)
    """

    task: object
    length_coef: float = 0.5
    max_new_tokens: int = 24

    def __post_init__(self):
        _checks.check_in_range("length_coef", self.length_coef, 0.0)
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"`max_new_tokens` must be a positive integer; got {self.max_new_tokens!r}")

    def components(self, prompt: str, completion: str) -> dict:
        """``{"correct": 1.0 or 0.0, "length": |o|/L}`` (tokens as a share of the budget).

        Raises:
            ValueError: ``prompt`` is not a prompt of the task, or ``completion`` not a string.
        """
        correct = float(self.task.reward(prompt, completion))
        return {"correct": correct, "length": completion_num_tokens(completion, self.task.eos_token) / self.max_new_tokens}

    def __call__(self, prompt: str, completion: str) -> float:
        """r*(q, o) in reward units. Raises ValueError as :meth:`components`."""
        parts = self.components(prompt, completion)
        return parts["correct"] - self.length_coef * parts["length"]

    def batch(self, prompts, completions) -> np.ndarray:
        """r* of B (prompt, completion) pairs: (B,) float64.

        Raises:
            ValueError: the lists differ in length, or as :meth:`components`.
        """
        if len(prompts) != len(completions):
            raise ValueError(f"`prompts` and `completions` must have the same length; got {len(prompts)} and {len(completions)}")
        return np.array([self(p, o) for p, o in zip(prompts, completions)], dtype=np.float64)


@dataclass
class PreferencePairs:
    """Comparison pairs: for pair i two completions of ``prompts[i]``.

    Attributes:
        prompts: P prompt strings.
        completions_a, completions_b: P decoded completions each (special tokens kept).
        a_preferred: (P,) bool, the label (o_a ≻ o_b), or None before labelling.
        prob_a: (P,) float64 P(o_a ≻ o_b) the labeller used, or None.
    """

    prompts: list
    completions_a: list
    completions_b: list
    a_preferred: torch.Tensor | None = None
    prob_a: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def chosen(self) -> list:
        """The preferred completion of each labelled pair (y_w)."""
        self._require_labels()
        return [a if w else b for a, b, w in zip(self.completions_a, self.completions_b, self.a_preferred.tolist())]

    @property
    def rejected(self) -> list:
        """The other completion of each labelled pair (y_l)."""
        self._require_labels()
        return [b if w else a for a, b, w in zip(self.completions_a, self.completions_b, self.a_preferred.tolist())]

    def _require_labels(self):
        if self.a_preferred is None:
            raise ValueError("the pairs are not labelled yet: set `a_preferred` (see bradley_terry_labels)")

    def subset(self, index) -> "PreferencePairs":
        """The pairs at ``index`` (a slice or a list of positions), labels kept."""
        rows = list(range(len(self)))[index] if isinstance(index, slice) else [int(i) for i in index]
        pick = torch.tensor(rows, dtype=torch.long)
        take = lambda t: None if t is None else t[pick]  # noqa: E731
        return PreferencePairs([self.prompts[i] for i in rows], [self.completions_a[i] for i in rows],
                               [self.completions_b[i] for i in rows], take(self.a_preferred), take(self.prob_a))


def sample_preference_pairs(policy, tokenizer, task, num_pairs: int, generator: torch.Generator,
                            max_new_tokens: int = 24, temperature: float = 1.0, split: str = "train") -> PreferencePairs:
    """Draw ``num_pairs`` prompts from ``task`` and two independent completions of each from ``policy``.

    q_i ∼ split uniformly (with replacement), o_a, o_b ∼ π(·|q_i) i.i.d. at temperature τ; the two
    may be equal (then only a tie can follow). Unlabelled: label with :func:`bradley_terry_labels`.

    Args:
        policy: the causal LM whose samples are compared (usually the supervised model).
        tokenizer: its tokenizer.
        task: provides ``sample_problems(num, generator, split)``.
        num_pairs: P ≥ 1.
        generator: torch.Generator for the prompts and the samples.
        max_new_tokens: completion budget L, EOS included.
        temperature: τ > 0 of the sampler.
        split: "train" or "held_out" (the task's split).
    Returns:
        :class:`PreferencePairs` (unlabelled).
    Raises:
        ValueError: ``num_pairs`` < 1, τ ≤ 0, ``split`` unknown.
    """
    from rlbook.algos.grpo_rollouts import sample_kwargs
    from rlbook.lm.sampling import sample_completions
    from rlbook.lm.tokenizer import encode_prompts, forbidden_token_ids

    if isinstance(num_pairs, bool) or not isinstance(num_pairs, int) or num_pairs < 1:
        raise ValueError(f"`num_pairs` must be a positive integer; got {num_pairs!r}")
    problems = task.sample_problems(num_pairs, generator, split)
    prompts = [p.prompt for p in problems]
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts)
    out = sample_completions(policy, prompt_ids, prompt_mask, num_samples=2, generator=generator,
                             **sample_kwargs(tokenizer, forbidden_token_ids(tokenizer), max_new_tokens, temperature))
    return PreferencePairs(prompts, out.texts[0::2], out.texts[1::2])


def bradley_terry_labels(rewards_a, rewards_b, temperature: float, generator: torch.Generator):
    """Noisy preference labels from a known reward: o_a ≻ o_b with probability σ((r_a − r_b)/T).

    P(o_a ≻ o_b) = σ((r_a − r_b) / T);   T = 0: 1[r_a > r_b], and 1/2 on a tie.

    One ``torch.rand(P, generator=generator)`` draw decides the P labels (also when T = 0).

    Source: Bradley & Terry 1952, Biometrika 39(3/4) 324–345 (the model); Christiano et al. 2017,
    arXiv:1706.03741, eq. 1 (preferences over trajectory segments); the temperature is the
    labeller's noise level ("rationality"), e.g. Jeon et al. 2020, arXiv:2002.04833.

    Args:
        rewards_a, rewards_b: (P,) gold rewards of the two completions, reward units.
        temperature: T ≥ 0, in reward units.
        generator: torch.Generator for the draws.
    Returns:
        ``(a_preferred, prob_a)``: (P,) bool labels and (P,) float64 P(o_a ≻ o_b).
    Raises:
        ValueError: shapes differ or are not 1-D, a reward is not finite, or T < 0.
    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> bradley_terry_labels(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), 0.0, g)[1]
        tensor([1.0000, 0.5000], dtype=torch.float64)
    """
    ra = torch.as_tensor(rewards_a, dtype=torch.float64)
    rb = torch.as_tensor(rewards_b, dtype=torch.float64)
    if ra.dim() != 1 or ra.shape != rb.shape:
        raise ValueError(f"`rewards_a` and `rewards_b` must both be (P,); got {tuple(ra.shape)} and {tuple(rb.shape)}")
    if not (torch.isfinite(ra).all() and torch.isfinite(rb).all()):
        raise ValueError("`rewards_a` and `rewards_b` must be finite")
    _checks.check_in_range("temperature", temperature, 0.0)
    diff = ra - rb
    if temperature == 0:
        prob_a = (diff > 0).double() + 0.5 * (diff == 0).double()
    else:
        prob_a = torch.sigmoid(diff / temperature)
    return torch.rand(ra.shape, generator=generator, dtype=torch.float64) < prob_a, prob_a


def best_of_n_estimate(scores, values, n: int) -> torch.Tensor:
    """Expected ``values`` of the best-of-n sample by ``scores``, estimated from M ≥ n samples per row.

    With the M samples of a row sorted by score (ascending, i = 1 … M), the sample of rank i is the
    best of a uniformly random n-subset (drawn without replacement) with probability
    C(i−1, n−1)/C(M, n), so

        E[value of best-of-n] ≈ Σ_i C(i−1, n−1)/C(M, n) · value_(i),

    the mean over all C(M, n) subsets of the M samples: unbiased for best-of-n from the sampling
    policy (ties in score are broken by sample order). n = 1 gives the plain mean, n = M the value
    of the top-scored sample.

    Source: Nakano et al. 2021 (WebGPT), arXiv:2112.09332, appendix; Gao, Schulman & Hilton 2022,
    arXiv:2210.10760, §2.2 (best-of-n curves computed this way).

    Args:
        scores: (..., M) the ranking reward (e.g. the proxy reward model's scores).
        values: (..., M) what is measured on the chosen sample (e.g. the gold reward, or the
            scores themselves).
        n: 1 ≤ n ≤ M.
    Returns:
        (...,) float64 estimates.
    Raises:
        ValueError: shapes differ or are 0-d, a value is not finite, or n outside [1, M].
    See also:
        rlbook.kl_regularised.best_of_n_kl_bound (its KL from the sampling policy, log n − (n−1)/n).
    Example:
        >>> best_of_n_estimate(torch.tensor([[0.1, 0.5, 0.3]]), torch.tensor([[1.0, 2.0, 3.0]]), 2)
        tensor([2.3333], dtype=torch.float64)
    """
    s = torch.as_tensor(scores, dtype=torch.float64)
    v = torch.as_tensor(values, dtype=torch.float64)
    if s.dim() == 0 or s.shape != v.shape:
        raise ValueError(f"`scores` and `values` must have the same shape (..., M); got {tuple(s.shape)} and {tuple(v.shape)}")
    if not (torch.isfinite(s).all() and torch.isfinite(v).all()):
        raise ValueError("`scores` and `values` must be finite")
    m = s.shape[-1]
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= int(n) <= m:
        raise ValueError(f"`n` must be an integer in [1, M={m}]; got {n!r}")
    n = int(n)
    order = torch.sort(s, dim=-1, stable=True).indices
    ranked = torch.gather(v, -1, order)
    i = torch.arange(1, m + 1, dtype=torch.float64)
    log_w = (torch.lgamma(i) - torch.lgamma((i - n + 1).clamp(min=1)) - math.lgamma(n)
             - (math.lgamma(m + 1) - math.lgamma(m - n + 1) - math.lgamma(n + 1)))
    weights = torch.where(i >= n, log_w.exp(), torch.zeros_like(log_w))  # C(i−1, n−1)/C(M, n)
    return (ranked * weights).sum(dim=-1)


@torch.no_grad()
def proxy_rewards(reward_model, tokenizer, prompts, completions, batch_size: int = 1024,
                  by_length: bool = False) -> torch.Tensor:
    """A reward model's score of each (prompt, decoded completion), the completion's tokens as sampled.

    r_φ(q, o) = :func:`rlbook.lm.sequence_rewards` of ``<s> q o`` read at o's last token. The
    decoded text is re-encoded as it is: a completion that ends in EOS is scored at its EOS (the
    layout :func:`rlbook.lm.encode_preference_pairs` gives the same response without its EOS
    string), a truncated one (no EOS) at its last token, so a reward model can tell them apart.

    Two layouts of the forward passes, equal up to float rounding:

    * ``by_length=False``: rows right-padded to the longest, ``batch_size`` rows per pass (the
      fewest passes). A row's score then differs from the score of the row alone in the last bits
      (measured on the CPU, float32: 195 of 256 sampled completions, by at most 9.5e-7): the
      attention over a padded row and the head over a longer batch round differently.
    * ``by_length=True``: rows of equal token length are stacked without padding, one pass per
      length (at most ``batch_size`` rows each), and the scalar head is applied to each row's
      positions on their own, exactly as in a one-row pass, so every score is bit-identical to
      scoring its row alone (``proxy_rewards(rm, tok, [q], [o])``) wherever a matrix product's row
      does not depend on the rows stacked beside it (true of the CPU kernels the tests run on;
      :func:`ProxyRewardTask.reward_batch` relies on it and a test checks it). One pass per
      distinct length: about 10 for a batch of completions of up to 8 tokens.

    Args:
        reward_model: from :func:`rlbook.lm.build_reward_model` (a GPT-2 body ``base_model``
            and a one-output ``lm_head``).
        tokenizer: the policy's tokenizer (its EOS string, e.g. ``"</s>"``, encodes to the EOS id).
        prompts, completions: B strings each.
        batch_size: rows per forward pass (≥ 1).
        by_length: the layout above.
    Returns:
        (B,) float32 rewards (logit units of Bradley–Terry), on the CPU, in the order given.
    Gradient:
        none (runs under ``torch.no_grad``).
    Raises:
        ValueError: the lists differ in length or are empty, a completion encodes to no tokens,
            or ``batch_size`` < 1.
    """
    if isinstance(prompts, str) or isinstance(completions, str) or len(prompts) != len(completions) or not prompts:
        raise ValueError("`prompts` and `completions` must be non-empty lists of strings of the same length")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer; got {batch_size!r}")
    from rlbook.lm.reward_model import sequence_rewards

    device = next(reward_model.parameters()).device
    bos = [] if tokenizer.bos_token_id is None else [int(tokenizer.bos_token_id)]
    pad = int(tokenizer.pad_token_id or 0)
    ps = tokenizer(list(prompts), add_special_tokens=False).input_ids
    cs = tokenizer(list(completions), add_special_tokens=False).input_ids
    if any(len(c) == 0 for c in cs):
        raise ValueError("`completions` contains a completion that encodes to no tokens")
    rows = [bos + list(p) + list(c) for p, c in zip(ps, cs)]
    if by_length:
        return _rewards_by_length(reward_model, rows, batch_size, device)
    out = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        width = max(len(r) for r in chunk)
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in chunk], dtype=torch.long, device=device)
        mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in chunk], device=device)
        out.append(sequence_rewards(reward_model, ids, mask).float().cpu())
    return torch.cat(out)


def _rewards_by_length(reward_model, rows: list, batch_size: int, device) -> torch.Tensor:
    """The ``by_length=True`` layout of :func:`proxy_rewards`: (B,) float32, each as its row alone.

    A one-row pass of :func:`rlbook.lm.sequence_rewards` runs the body on (1, L) ids with an
    all-True mask and position ids 0 … L−1, then the head on the (1, L, d) hidden states, and reads
    position L−1; here the body runs on (n, L) rows of one length with the same mask and positions,
    and the head on each (L, d) slice.
    """
    from rlbook.lm.reward_model import sequence_rewards

    head = getattr(reward_model, "lm_head", None)
    if getattr(head, "out_features", None) != 1 or not hasattr(reward_model, "base_model"):
        raise ValueError("`reward_model` must come from build_reward_model (an lm_head with one output)")
    by_len: dict = {}
    for i, r in enumerate(rows):
        by_len.setdefault(len(r), []).append(i)
    out = torch.empty(len(rows), dtype=torch.float32)
    for length, index in by_len.items():
        for start in range(0, len(index), batch_size):
            part = index[start:start + batch_size]
            ids = torch.tensor([rows[i] for i in part], dtype=torch.long, device=device)
            if len(part) == 1:  # the reference path itself
                out[part[0]] = sequence_rewards(reward_model, ids, torch.ones_like(ids, dtype=torch.bool))[0].float().cpu()
                continue
            mask = torch.ones_like(ids)
            positions = torch.arange(length, device=device).expand(len(part), length)
            hidden = reward_model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                             use_cache=False).last_hidden_state  # (n, L, d)
            values = torch.stack([head(hidden[j:j + 1])[0, -1, 0] for j in range(len(part))])
            out[torch.tensor(part)] = values.float().cpu()
    return out


class ProxyRewardTask:
    """A task whose ``reward`` is a learned reward model's score: how a proxy reward enters :func:`rlbook.train_grpo`.

    ``train_grpo`` scores completions with ``task.reward_batch(prompts, completions)`` when the
    task has it, else ``task.reward(prompt, completion)`` one at a time (and, with
    ``format_coef``, ``task.format_reward``). This wrapper keeps everything of ``task`` (prompts,
    split, ``format_reward``, ``held_out_problems``) and replaces ``reward`` by r_φ(q, o) from
    :func:`proxy_rewards`, memoised by (prompt, completion) (a policy repeats itself, so many
    calls are cache hits): :meth:`reward` scores one completion per forward pass,
    :meth:`reward_batch` all the new ones of a batch in one pass per token length, with scores
    bit-identical to :meth:`reward`'s. GRPO's logged ``reward`` and ``pass@1`` are then the mean
    proxy reward of the batch, not an accuracy; the gold reward must be measured apart.
    ``rl.train_grpo(..., reward_model=rm)`` with ``GRPOConfig(reward_source="reward_model")``
    builds this wrapper itself.

    Args:
        task: the underlying task (e.g. :class:`rlbook.lm.ScratchpadAdditionTask`).
        reward_model: from :func:`rlbook.lm.build_reward_model` (frozen: it is only read).
        tokenizer: the policy's tokenizer.
        max_cache: the memo's size in entries (then it is cleared), ≥ 0.
    Raises:
        ValueError: ``max_cache`` < 0.
    Usage::

        proxy_task = ProxyRewardTask(task, rm, tok)
        rl.train_grpo(policy, tok, proxy_task, rl.GRPOConfig(kl_coef=0.0))   # RL against the proxy
    """

    def __init__(self, task, reward_model, tokenizer, max_cache: int = 200_000):
        _checks.check_in_range("max_cache", max_cache, 0)
        self.task, self.reward_model, self.tokenizer = task, reward_model, tokenizer
        self.max_cache, self._cache = int(max_cache), {}

    def __getattr__(self, name):  # everything but ``reward`` / ``reward_batch`` is the underlying task's
        if name in ("task", "reward_model", "tokenizer", "max_cache", "_cache"):
            raise AttributeError(name)
        return getattr(self.task, name)

    def _remember(self, key, value: float):
        if len(self._cache) >= self.max_cache:
            self._cache.clear()
        if self.max_cache:
            self._cache[key] = value

    def reward(self, prompt: str, completion: str) -> float:
        """r_φ(q, o), a float in logit units (one forward pass unless memoised).

        Raises:
            ValueError: as :func:`proxy_rewards`.
        """
        key = (prompt, completion)
        if key in self._cache:
            return self._cache[key]
        value = float(proxy_rewards(self.reward_model, self.tokenizer, [prompt], [completion])[0])
        self._remember(key, value)
        return value

    def reward_batch(self, prompts, completions) -> np.ndarray:
        """r_φ of B (prompt, completion) pairs: (B,) float64 in logit units, each equal bit for bit to :meth:`reward`.

        The pairs not in the memo are deduplicated and scored together by
        :func:`proxy_rewards` with ``by_length=True`` (one forward pass per token length), then
        memoised. Measured (CPU, 1 thread; a reward model on the supervised scratchpad model, 256
        completions of it, 188 distinct, 5 token lengths): 0.040 s, against 0.245 s one
        completion at a time and 0.08 s for one padded pass (whose scores differ by up to 7e-7).

        Args:
            prompts, completions: B strings each (B ≥ 0).
        Returns:
            (B,) float64 array (the float32 scores, widened exactly).
        Raises:
            ValueError: the lists differ in length or are strings, or as :func:`proxy_rewards`.
        """
        if isinstance(prompts, str) or isinstance(completions, str) or len(prompts) != len(completions):
            raise ValueError("`prompts` and `completions` must be lists of strings of the same length; "
                             f"got {type(prompts).__name__} and {type(completions).__name__}")
        keys = list(zip(prompts, completions))
        known = {key: self._cache[key] for key in keys if key in self._cache}
        new = list(dict.fromkeys(key for key in keys if key not in known))
        if new:
            scores = proxy_rewards(self.reward_model, self.tokenizer, [p for p, _ in new], [o for _, o in new],
                                   by_length=True)
            for key, value in zip(new, scores.tolist()):
                known[key] = value
                self._remember(key, value)
        return np.array([known[key] for key in keys], dtype=np.float64)
