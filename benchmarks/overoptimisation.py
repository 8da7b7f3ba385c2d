"""Reward over-optimisation on the book's task: best-of-N and GRPO against a learned reward model,
proxy and gold reward against d = √KL, with Gao, Schulman & Hilton's functional forms fitted.

Setting (every seed s; Gao et al. 2022, arXiv:2210.10760, on a scale a laptop can run):

* Task and policy: the scratchpad addition task (``rl.lm.ScratchpadAdditionTask``, 2 digits; a
  completion may show its working, so its length is the model's choice), the book's small GPT-2
  trained by ``rl.lm.train_sft`` with ``SFTConfig(seed=s)`` and ``model_seed=s`` on one thread (the
  models of ``benchmarks/grpo_variants.py`` and ``benchmarks/dpo_vs_rl.py``, cached under
  ``runs/checkpoints/bench_scratchpad_sft_seed{s}``), 24 new tokens.
* Gold reward (``rl.lm.preference_task.GoldReward``): r*(q, o) = 1[right] − λ·|o|/24 with
  λ = 0.5: right answers first, then short ones.
* Preferences: ``NUM_PAIRS`` pairs of supervised samples on training prompts, labelled by
  Bradley–Terry on r* at temperature T = ``LABEL_TEMPERATURE`` (reward units); a proxy reward
  model (``rl.lm.build_reward_model``: the supervised transformer with a scalar head) trained on
  them by ``rl.lm.train_reward_model``; few comparisons, so it is exploitable. Its accuracy is
  measured on ``NUM_TEST_PAIRS`` fresh pairs of held-out prompts (against their labels, and
  against the gold order where the gold rewards differ).
* Best-of-N on the proxy: ``BON_PROMPTS`` held-out prompts × M = ``BON_SAMPLES`` supervised samples;
  the expected proxy and gold reward of best-of-N for N = 1 … M from those samples
  (``best_of_n_estimate``: the best of a random N-subset of the M samples), at d = √KL with KL the
  exact KL of best-of-N over each prompt's empirical distribution π̂ of its M samples (identical
  completions merged, mass count/M; ``rl.kl_regularised.best_of_n_kl``, N i.i.d. draws from π̂),
  averaged over prompts (``kl``); the bound log N − (N−1)/N (``best_of_n_kl_bound``) is kept as
  ``kl_bound``/``d_bound``. The two rewards' estimators differ slightly: subsets of the M samples
  (drawn without replacement) vs N i.i.d. draws from π̂; the proxy and gold reward of the latter
  are stored as ``proxy_iid``/``gold_iid`` to measure the gap (below). It is a KL to π̂, not to
  π_sft: 64 samples cannot show π_sft's tail.
* The reward model's recipe: ``--rm-lr`` and ``--rm-steps`` (default 40 updates at 1e-4, the
  study's under-fitted proxy); ``--select-rm`` chooses them instead by 4-fold cross-validation
  inside the training pairs (``select_recipe``; the held-out evaluation pairs are never drawn).
* RL on the proxy: GRPO (chapter 9's loss, β = 0: no KL penalty) with the reward model as the
  reward (``ProxyRewardTask``), 32 prompts × G = 8 per step, two minibatches per generation,
  ``RL_STEPS`` steps at lr ``RL_LR``; at the steps in ``EVAL_STEPS`` the policy is evaluated on
  ``EVAL_PROMPTS`` held-out prompts × 8 samples (sampling seed fixed): mean gold and proxy reward,
  accuracy, length, and KL(π‖π_sft) estimated by the mean of Σ_t log π/π_sft over those samples.
  The loop is ``train_grpo``'s own step (``rl.algos.grpo.grpo_step``) with an evaluation between
  steps, since ``train_grpo`` has no callback.

Fits (per seed, on the gold reward's gain over the supervised model, d > 0): best-of-N
R(d) = d(α − βd), peak at d* = α/(2β); RL R(d) = d(α − β·log d), peak at d* = exp(α/β − 1)
(``scipy.optimize.curve_fit``); a fitted peak counts as identified only with α > 0 and d* inside
the measured range of d. Reported per seed: the measured peak (d and gold at the best
evaluation), gold and proxy at the end, the fitted α, β and d*; across seeds the mean with its
95 % t-interval (``rl.mean_ci``). Seed s's best-of-N and RL share its supervised model, pairs and
reward model (paired).

Measured (seeds 0–9, 300 comparisons, 40 updates at 1e-4; ``rlbook/data/overoptimisation.json``;
935 s on one core of a 2-core Xeon shared with two other runs, supervised models cached; rerun on
the supervised checkpoints as regenerated on 2026-11-28, so every number moved from the first
ten-seed run). The reward models fit 0.54–0.61 of their own training pairs and order held-out
pairs as the gold reward does on 0.66 [0.62, 0.69] of the pairs whose gold rewards differ.
Best-of-N on them: the exact KL at N = 64 is 2.99 [2.97, 3.01] nats (the bound: 3.17; about 30
distinct completions among a prompt's 64); gold peaks at N = 4 (d = 0.78) on the mean curve,
+0.094 [0.071, 0.116] over the supervised model (paired over seeds), then falls by 0.344 [0.318,
0.369] by N = 64 (accuracy 0.42 → 0.03, length 10.8 → 4.4 tokens) while the proxy rises at every
N on all ten seeds; d(α − βd) identifies its peak on 10 of 10 seeds, d* = 0.57 [0.53, 0.60] √nats.
The two best-of-N estimators differ little: gold at N = 64 is higher by 0.030 [0.023, 0.037] for
64 i.i.d. draws from π̂ than for the top of the 64 samples (the i.i.d. draws miss the top sample
about a third of the time), against a fall of 0.344. GRPO on them (40 steps, β = 0): the gain at
the mean curve's peak (step 3) is +0.014 [−0.003, +0.032], no rise detected; the fall to the end
is 0.297 [0.274, 0.320]; the RL form d(α − β·log d) identifies a peak on no seed. The policies end on short wrong
answers the proxy likes ("008", "005").
The recipe (``--select-rm --seeds 0 1``, ``overoptimisation_rm_selection.json``, 4 folds of the 300
training pairs): the validation loss is lowest at 1e-4 after 25 updates (0.695 and 0.687, about
log 2: the labels at T = 0.25 are hard to predict) and grows with more (0.96–0.98 at 200, while the
training accuracy reaches 0.81–0.84); at 1e-3 it is higher at every count (0.75–0.77 at 25,
0.98–1.15 at 100). Early stopping thus keeps the study's 40 updates at 1e-4; the
``overoptimisation_fitted`` run (``--rm-lr 1e-3 --rm-steps 100``, chapter 12 §12.3's recipe) is a
reward model that fits its pairs, over-fitted by that validation (887 s). It fits 0.59–0.75 of its training pairs but is a worse
proxy: gold order on held-out pairs 0.59 [0.56, 0.62], 0.064 [0.048, 0.080] below the study's
reward model (paired by seed). Over-optimisation persists: best-of-N's mean curve peaks at N = 3,
+0.050 [0.026, 0.074], then falls 0.356 [0.315, 0.397] by N = 64, ending 0.056 [0.029, 0.082]
lower than with the study's reward model; GRPO's peaks at step 5, +0.041 [0.015, 0.068], then
falls 0.308 [0.268, 0.348]. (Gains here are at the mean curve's peak, as in chapter 12; the table
printed by ``main`` uses each seed's own peak.)
With 1000 comparisons (``--seeds 0 1 2 --num-pairs 1000 --rm-steps 133``,
``overoptimisation_pairs1000.json``, rerun with the exact KL, 206 s) the reward models fit 0.55–0.61
of their pairs and order held-out pairs as the gold reward does on 0.59–0.67 of those that differ
(three seeds: too few to compare with the 300-pair models). Earlier runs (seeds 0–2 on two-thread
supervised models, before the switch to the one-thread ones): a KL penalty (``--kl-coef 0.1``) slowed the drift but gold traced the same curve in
d, as Gao et al. found: the penalty acts like early stopping. 36 s for ``--seeds 0 --small``.

    python benchmarks/overoptimisation.py --seeds 0 1 2 3 4 5 6 7 8 9 --save   # rlbook/data/overoptimisation.json
    python benchmarks/overoptimisation.py --select-rm --seeds 0 1 --name overoptimisation_rm_selection --save
    python benchmarks/overoptimisation.py --seeds 0 1 2 3 4 5 6 7 8 9 --rm-lr 1e-3 --rm-steps 100 --name overoptimisation_fitted --save
    python benchmarks/overoptimisation.py --seeds 0 --small        # the chapter's live version

One torch thread; results repeat on one machine,
another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import time

import numpy as np

LENGTH_COEF = 0.5
MAX_NEW = 24
LABEL_TEMPERATURE = 0.25
NUM_PAIRS = 300
NUM_TEST_PAIRS = 500
RM_STEPS, RM_LR, RM_BATCH = 40, 1e-4, 32
BON_PROMPTS, BON_SAMPLES = 100, 64
BON_NS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
RL_STEPS, RL_LR = 40, 1e-4
EVAL_STEPS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 35, 40)
EVAL_PROMPTS, EVAL_SAMPLES = 100, 8
SMALL = dict(rl_steps=20, eval_steps=(0, 1, 2, 3, 4, 6, 8, 10, 13, 16, 20), bon_prompts=50, eval_prompts=50)


def setup(seed: int):
    """Task, tokenizer, gold reward and the seed's supervised model (trained once, then loaded from runs/)."""
    import rlbook as rl
    from rlbook.lm.preference_task import GoldReward

    task = rl.lm.ScratchpadAdditionTask(num_digits=2, held_out_fraction=0.1, seed=0, scratchpad_prob=0.5)
    tok = rl.lm.build_char_tokenizer(task.alphabet)
    checkpoint = rl.runs_dir() / "checkpoints" / f"bench_scratchpad_sft_seed{seed}"  # the models of grpo_variants.py
    policy, _, _ = rl.lm.load_or_train_sft(tok, task, rl.lm.SFTConfig(seed=seed), checkpoint=checkpoint, model_seed=seed,
                                           num_threads=1, progress=False)
    return task, tok, GoldReward(task, LENGTH_COEF, MAX_NEW), policy.eval()


def labelled_pairs(policy, tok, task, gold, num: int, generator, split: str):
    """``num`` supervised pairs on ``split`` prompts, labelled by Bradley–Terry on the gold reward."""
    from rlbook.lm.preference_task import bradley_terry_labels, sample_preference_pairs

    pairs = sample_preference_pairs(policy, tok, task, num, generator, max_new_tokens=MAX_NEW, split=split)
    ra, rb = gold.batch(pairs.prompts, pairs.completions_a), gold.batch(pairs.prompts, pairs.completions_b)
    pairs.a_preferred, pairs.prob_a = bradley_terry_labels(ra, rb, LABEL_TEMPERATURE, generator)
    return pairs, ra, rb


def _strip_eos(texts, eos="</s>"):
    return [t[: -len(eos)] if t.endswith(eos) else t for t in texts]


def train_proxy(policy, tok, task, gold, seed: int, num_pairs: int = NUM_PAIRS, rm_steps: int = RM_STEPS,
                rm_lr: float = RM_LR) -> tuple:
    """The proxy reward model and its accuracies (train labels, held-out labels, held-out gold order)."""
    import torch

    import rlbook as rl
    from rlbook.lm.preference_task import proxy_rewards

    generator = torch.Generator().manual_seed(seed)
    train, _, _ = labelled_pairs(policy, tok, task, gold, num_pairs, generator, "train")
    test, ra, rb = labelled_pairs(policy, tok, task, gold, NUM_TEST_PAIRS, generator, "held_out")
    rm = rl.lm.build_reward_model(policy, seed=seed)
    config = rl.lm.RewardModelConfig(num_steps=rm_steps, batch_size=RM_BATCH, lr=rm_lr, seed=seed)
    rl.lm.train_reward_model(rm, tok, train.prompts, _strip_eos(train.chosen), _strip_eos(train.rejected), config,
                             progress=False)
    rm.requires_grad_(False)
    accuracy = {split: rl.lm.reward_model_accuracy(rm, tok, pairs.prompts, _strip_eos(pairs.chosen), _strip_eos(pairs.rejected))
                for split, pairs in (("train", train), ("held_out", test))}
    sa = proxy_rewards(rm, tok, test.prompts, test.completions_a).numpy()
    sb = proxy_rewards(rm, tok, test.prompts, test.completions_b).numpy()
    differ = ra != rb
    accuracy["held_out_gold_order"] = float(np.mean(np.sign(sa - sb)[differ] == np.sign(ra - rb)[differ]))
    accuracy["held_out_gold_differ_share"] = float(differ.mean())
    return rm, accuracy


SELECT_LRS, SELECT_STEPS, SELECT_FOLDS = (1e-4, 1e-3), (25, 50, 100, 200), 4


def select_recipe(seed: int, num_pairs: int = NUM_PAIRS, lrs=SELECT_LRS, steps=SELECT_STEPS, folds: int = SELECT_FOLDS) -> dict:
    """The reward model's (lr, updates) by k-fold validation inside the seed's ``num_pairs`` training pairs.

    The pairs are those :func:`train_proxy` trains on (same generator); the held-out evaluation pairs are
    never drawn. For each fold a fresh reward model is trained on the other folds exactly as
    ``train_reward_model`` does (AdamW, ``RM_BATCH`` pairs drawn with replacement, seed ``seed``), and its
    Bradley–Terry loss and accuracy on the fold's pairs (against their labels) and its accuracy on its own
    training pairs are measured after each count in ``steps``. Returns the means over folds per lr and count.
    """
    import torch

    import rlbook as rl
    from rlbook.lm.reward_model import reward_model_step

    task, tok, gold, sft = setup(seed)
    torch.set_num_threads(1)
    pairs, _, _ = labelled_pairs(sft, tok, task, gold, num_pairs, torch.Generator().manual_seed(seed), "train")
    prompts, chosen, rejected = pairs.prompts, _strip_eos(pairs.chosen), _strip_eos(pairs.rejected)
    order = torch.randperm(num_pairs, generator=torch.Generator().manual_seed(10_000 + seed)).tolist()
    result = {"seed": seed, "folds": folds, "by": {}}
    for lr in lrs:
        cells = {n: {"val_loss": [], "val_accuracy": [], "train_accuracy": []} for n in steps}
        for f in range(folds):
            val = set(order[f::folds])
            tr = [i for i in range(num_pairs) if i not in val]
            va = sorted(val)
            pick_ = lambda idx, xs: [xs[i] for i in idx]  # noqa: E731
            rm = rl.lm.build_reward_model(sft, seed=seed)
            data = rl.lm.encode_preference_pairs(tok, pick_(tr, prompts), pick_(tr, chosen), pick_(tr, rejected))
            val_batch = rl.lm.encode_preference_pairs(tok, pick_(va, prompts), pick_(va, chosen), pick_(va, rejected))
            rm.eval()
            generator = torch.Generator().manual_seed(seed)
            optimizer = torch.optim.AdamW(rm.parameters(), lr=lr, weight_decay=0.0)
            n_tr = len(tr)
            for step in range(1, max(steps) + 1):
                pick = torch.randint(0, n_tr, (RM_BATCH,), generator=generator)
                batch = {k: v[torch.cat([pick, pick + n_tr])] for k, v in data.items()}
                reward_model_step(rm, optimizer, batch, 1.0)
                if step in steps:
                    with torch.no_grad():
                        r = rl.lm.sequence_rewards(rm, val_batch["input_ids"], val_batch["attention_mask"])
                        margin = r[: len(va)] - r[len(va):]
                        cells[step]["val_loss"].append(float(torch.nn.functional.softplus(-margin).mean()))
                        cells[step]["val_accuracy"].append(float((margin > 0).float().mean()))
                    cells[step]["train_accuracy"].append(rl.lm.reward_model_accuracy(
                        rm, tok, pick_(tr, prompts), pick_(tr, chosen), pick_(tr, rejected)))
        result["by"][f"{lr:g}"] = {n: {k: float(np.mean(v)) for k, v in c.items()} for n, c in cells.items()}
        for n, c in result["by"][f"{lr:g}"].items():
            print(f"seed {seed} lr {lr:g} updates {n:>4}: validation loss {c['val_loss']:.3f}, accuracy "
                  f"{c['val_accuracy']:.3f}; train accuracy {c['train_accuracy']:.3f}", flush=True)
    return result


def best_of_n_curve(policy, rm, tok, task, gold, seed: int, num_prompts: int) -> dict:
    """Proxy and gold reward of best-of-N on the proxy, N in ``BON_NS``, from M supervised samples per prompt."""
    import torch

    import rlbook as rl
    from rlbook.algos.grpo_rollouts import sample_kwargs
    from rlbook.kl_regularised import best_of_n_kl_bound
    from rlbook.lm.preference_task import best_of_n_estimate, proxy_rewards
    from rlbook.lm.tokenizer import encode_prompts, forbidden_token_ids

    problems = task.held_out_problems(num_prompts)
    ids, mask = encode_prompts(tok, [p.prompt for p in problems])
    out = rl.lm.sample_completions(policy, ids, mask, num_samples=BON_SAMPLES, generator=torch.Generator().manual_seed(1000 + seed),
                                   **sample_kwargs(tok, forbidden_token_ids(tok), MAX_NEW, 1.0))
    prompts = [p.prompt for p in problems for _ in range(BON_SAMPLES)]
    proxy = proxy_rewards(rm, tok, prompts, out.texts).double().view(num_prompts, BON_SAMPLES)
    gold_r = torch.tensor(gold.batch(prompts, out.texts)).view(num_prompts, BON_SAMPLES)
    correct = torch.tensor([task.reward(p, o) for p, o in zip(prompts, out.texts)], dtype=torch.float64).view_as(gold_r)
    length = out.lengths.double().view_as(gold_r)
    direct = torch.tensor([";" not in o for o in out.texts], dtype=torch.float64).view_as(gold_r)
    kl, iid, tie_spread = empirical_best_of_n(out.texts, proxy, gold_r, num_prompts)
    curve = {"n": list(BON_NS), "kl": kl, "kl_bound": [best_of_n_kl_bound(n) for n in BON_NS]}
    curve["d"] = [math.sqrt(max(k, 0.0)) for k in curve["kl"]]
    curve["d_bound"] = [math.sqrt(k) for k in curve["kl_bound"]]
    for name, values in (("proxy", proxy), ("gold", gold_r), ("correct", correct), ("length", length), ("direct", direct)):
        curve[name] = [float(best_of_n_estimate(proxy, values, n).mean()) for n in BON_NS]
    curve["proxy_iid"], curve["gold_iid"] = iid["proxy"], iid["gold"]
    curve["distinct_completions"] = iid["distinct"]
    curve["duplicate_proxy_spread"] = tie_spread
    top = proxy.argmax(dim=1)
    curve["top_samples"] = [{"prompt": problems[i].prompt, "completion": out.texts[i * BON_SAMPLES + int(top[i])],
                             "proxy": float(proxy[i, top[i]]), "gold": float(gold_r[i, top[i]])} for i in range(6)]
    return curve


def empirical_best_of_n(texts, proxy, gold_r, num_prompts: int) -> tuple:
    """Exact KL(π_N ‖ π̂) of best-of-N by the proxy over each prompt's empirical distribution π̂, mean over prompts.

    π̂ puts mass count/M on each distinct completion among a prompt's M samples (identical texts merged,
    each scored by the proxy once: the first copy's score). π_N and its KL come from
    ``rl.kl_regularised.best_of_n_probs``/``best_of_n_kl`` (N i.i.d. draws from π̂, ties broken by a rule
    blind to the answer). Also the mean proxy and gold reward of that π_N (``proxy_iid``, ``gold_iid``),
    the mean number of distinct completions per prompt, and the largest spread of the proxy's scores
    among copies of one text (float noise of batched scoring; merging removes it).
    """
    import torch

    from rlbook.kl_regularised import best_of_n_kl, best_of_n_probs

    m = proxy.shape[1]
    kl = np.zeros((num_prompts, len(BON_NS)))
    iid = {"proxy": np.zeros((num_prompts, len(BON_NS))), "gold": np.zeros((num_prompts, len(BON_NS)))}
    distinct, spread = [], 0.0
    for i in range(num_prompts):
        first, counts, copies = {}, {}, {}
        for j, text in enumerate(texts[i * m:(i + 1) * m]):
            first.setdefault(text, j)
            counts[text] = counts.get(text, 0) + 1
            copies.setdefault(text, []).append(float(proxy[i, j]))
        spread = max([spread] + [max(v) - min(v) for v in copies.values()])
        keys = list(first)
        ref = torch.tensor([counts[t] / m for t in keys], dtype=torch.float64)
        score = torch.tensor([float(proxy[i, first[t]]) for t in keys], dtype=torch.float64)
        gold = torch.tensor([float(gold_r[i, first[t]]) for t in keys], dtype=torch.float64)
        distinct.append(len(keys))
        for k, n in enumerate(BON_NS):
            pi_n = best_of_n_probs(ref, score, n)
            kl[i, k] = float(best_of_n_kl(ref, score, n))
            iid["proxy"][i, k], iid["gold"][i, k] = float((pi_n * score).sum()), float((pi_n * gold).sum())
    return ([float(x) for x in kl.mean(0)], {"proxy": [float(x) for x in iid["proxy"].mean(0)],
            "gold": [float(x) for x in iid["gold"].mean(0)], "distinct": float(np.mean(distinct))}, float(spread))


def _evaluate(policy, sft, rm, tok, gold, problems) -> dict:
    """Mean gold, proxy, accuracy, length and KL(π‖π_sft) over EVAL_SAMPLES samples per problem (seed fixed)."""
    import torch

    import rlbook as rl
    from rlbook.algos.grpo_rollouts import sample_kwargs
    from rlbook.lm.logprobs import completion_log_probs
    from rlbook.lm.preference_task import proxy_rewards
    from rlbook.lm.tokenizer import encode_prompts, forbidden_token_ids

    forbidden = forbidden_token_ids(tok)
    ids, mask = encode_prompts(tok, [p.prompt for p in problems])
    out = rl.lm.sample_completions(policy, ids, mask, num_samples=EVAL_SAMPLES, generator=torch.Generator().manual_seed(7),
                                   **sample_kwargs(tok, forbidden, MAX_NEW, 1.0))
    prompts = [p.prompt for p in problems for _ in range(EVAL_SAMPLES)]
    with torch.no_grad():
        args = (ids, out.completion_ids, mask)
        log_ratio = (completion_log_probs(policy, *args, completion_mask=out.completion_mask, forbidden_ids=forbidden)
                     - completion_log_probs(sft, *args, completion_mask=out.completion_mask, forbidden_ids=forbidden))
    parts = [gold.components(p, o) for p, o in zip(prompts, out.texts)]
    return {"kl": float(log_ratio.sum(dim=1).mean()), "proxy": float(proxy_rewards(rm, tok, prompts, out.texts).mean()),
            "gold": float(np.mean(gold.batch(prompts, out.texts))), "correct": float(np.mean([c["correct"] for c in parts])),
            "length": float(out.lengths.float().mean()), "direct": float(np.mean([";" not in o for o in out.texts])),
            "texts": out.texts, "prompts": prompts}


def rl_curve(sft, rm, tok, task, gold, seed: int, num_steps: int, eval_steps, eval_prompts: int,
             kl_coef: float = 0.0) -> dict:
    """GRPO (β = ``kl_coef``, default 0) against the proxy; gold, proxy and KL at ``eval_steps``."""
    import torch

    import rlbook as rl
    from rlbook.algos.grpo import grpo_optimizer, grpo_step
    from rlbook.lm.preference_task import ProxyRewardTask
    from rlbook.lm.tokenizer import forbidden_token_ids

    policy = copy.deepcopy(sft)
    config = rl.GRPOConfig(prompts_per_step=32, group_size=8, num_minibatches=2, max_new_tokens=MAX_NEW, kl_coef=kl_coef,
                           lr=RL_LR, num_steps=num_steps, log_ref_kl=False, seed=seed, device="cpu")
    proxy_task = ProxyRewardTask(task, rm, tok)
    optimizer, generator, forbidden = grpo_optimizer(policy, config), torch.Generator().manual_seed(seed), forbidden_token_ids(tok)
    problems = task.held_out_problems(eval_prompts)
    ref = copy.deepcopy(sft).requires_grad_(False) if kl_coef > 0 else None  # π_ref of the k3 penalty
    curve = {k: [] for k in ("step", "kl", "proxy", "gold", "correct", "length", "direct")}
    last = None
    for step in range(num_steps + 1):
        if step in eval_steps:
            last = _evaluate(policy, sft, rm, tok, gold, problems)
            curve["step"].append(step)
            for k in ("kl", "proxy", "gold", "correct", "length", "direct"):
                curve[k].append(last[k])
        if step == num_steps:
            break
        grpo_step(policy, ref, optimizer, tok, proxy_task, config, generator, forbidden)
    curve["d"] = [math.sqrt(max(k, 0.0)) for k in curve["kl"]]
    curve["final_samples"] = [{"prompt": p, "completion": o, "gold": gold(p, o), "correct": task.reward(p, o)}
                              for p, o in list(zip(last["prompts"], last["texts"]))[:48:4]]
    return curve


def bon_form(d, alpha, beta):
    """Gao et al.'s best-of-N form R(d) = d(α − βd) (gold gain over the initial policy)."""
    return d * (alpha - beta * d)


def rl_form(d, alpha, beta):
    """Gao et al.'s RL form R(d) = d(α − β·log d) (gold gain over the initial policy)."""
    return d * (alpha - beta * np.log(d))


def fit(form, d, gain) -> dict:
    """Least-squares α, β of ``form`` on the points with d > 0; d* and R(d*) where the curve has a maximum."""
    from scipy.optimize import curve_fit

    d, gain = np.asarray(d, float), np.asarray(gain, float)
    keep = d > 1e-6
    try:
        (alpha, beta), _ = curve_fit(form, d[keep], gain[keep], p0=(1.0, 1.0), maxfev=20000)
    except RuntimeError:
        return {"alpha": None, "beta": None, "d_peak": None, "gain_peak": None, "rmse": None, "identified": False}
    rmse = float(np.sqrt(np.mean((form(d[keep], alpha, beta) - gain[keep]) ** 2)))
    if beta <= 0:
        d_peak = None
    elif form is bon_form:
        d_peak = alpha / (2 * beta)
    else:
        d_peak = math.exp(alpha / beta - 1)
    gain_peak = None if d_peak is None else float(form(d_peak, alpha, beta))
    # a peak the data can speak for: a rise first (α > 0) and d* inside the measured range of d
    identified = bool(alpha > 0 and d_peak is not None and d[keep].min() <= d_peak <= d.max())
    return {"alpha": float(alpha), "beta": float(beta), "d_peak": d_peak, "gain_peak": gain_peak, "rmse": rmse,
            "identified": identified}


def _summary(curve: dict) -> dict:
    i = int(np.argmax(curve["gold"]))
    return {"peak_d": curve["d"][i], "peak_gold": curve["gold"][i], "start_gold": curve["gold"][0],
            "end_d": curve["d"][-1], "end_gold": curve["gold"][-1], "end_proxy": curve["proxy"][-1],
            "start_proxy": curve["proxy"][0], "peak_proxy": curve["proxy"][i], "start_correct": curve["correct"][0],
            "peak_correct": curve["correct"][i], "end_correct": curve["correct"][-1], "start_length": curve["length"][0],
            "peak_length": curve["length"][i], "end_length": curve["length"][-1], "end_direct": curve["direct"][-1]}


def one_seed(seed: int, small: bool = False, num_pairs: int = NUM_PAIRS, rm_steps: int = RM_STEPS,
             kl_coef: float = 0.0, rm_lr: float = RM_LR) -> dict:
    import torch

    start = time.perf_counter()
    task, tok, gold, sft = setup(seed)
    torch.set_num_threads(1)
    t_sft = time.perf_counter() - start
    rm, accuracy = train_proxy(sft, tok, task, gold, seed, num_pairs, rm_steps, rm_lr)
    sizes = SMALL if small else dict(rl_steps=RL_STEPS, eval_steps=EVAL_STEPS, bon_prompts=BON_PROMPTS, eval_prompts=EVAL_PROMPTS)
    bon = best_of_n_curve(sft, rm, tok, task, gold, seed, sizes["bon_prompts"])
    t_bon = time.perf_counter() - start
    rl_run = rl_curve(sft, rm, tok, task, gold, seed, sizes["rl_steps"], sizes["eval_steps"], sizes["eval_prompts"],
                      kl_coef)
    out = {"seed": seed, "reward_model_accuracy": accuracy, "best_of_n": bon, "rl": rl_run,
           "fits": {"best_of_n": fit(bon_form, bon["d"], np.array(bon["gold"]) - bon["gold"][0]),
                    "rl": fit(rl_form, rl_run["d"], np.array(rl_run["gold"]) - rl_run["gold"][0]),
                    # the other form on each curve, to compare the fits (rmse)
                    "best_of_n_rl_form": fit(rl_form, bon["d"], np.array(bon["gold"]) - bon["gold"][0]),
                    "rl_bon_form": fit(bon_form, rl_run["d"], np.array(rl_run["gold"]) - rl_run["gold"][0])},
           "summary": {"best_of_n": _summary(bon), "rl": _summary(rl_run)},
           "wall_s": {"sft": round(t_sft, 1), "to_best_of_n": round(t_bon, 1), "total": round(time.perf_counter() - start, 1)}}
    return out


def _print_seed(r):
    a = r["reward_model_accuracy"]
    print(f"seed {r['seed']}: reward model accuracy train {a['train']:.3f}, held-out {a['held_out']:.3f}, "
          f"held-out gold order {a['held_out_gold_order']:.3f} ({r['wall_s']['total']:.0f} s)")
    for name in ("best_of_n", "rl"):
        c, s, f = r[name], r["summary"][name], r["fits"][name]
        print(f"  {name:<9} d " + " ".join(f"{x:5.2f}" for x in c["d"]))
        print(f"  {'':<9} gold " + " ".join(f"{x:+.2f}" for x in c["gold"]))
        print(f"  {'':<9} proxy " + " ".join(f"{x:+.2f}" for x in c["proxy"]))
        print(f"  {'':<9} correct " + " ".join(f"{x:.2f}" for x in c["correct"]))
        print(f"  {'':<9} length " + " ".join(f"{x:4.1f}" for x in c["length"]))
        print(f"  {'':<9} peak d {s['peak_d']:.2f} gold {s['peak_gold']:+.3f} (start {s['start_gold']:+.3f}); end d {s['end_d']:.2f} "
              f"gold {s['end_gold']:+.3f} proxy {s['end_proxy']:+.3f}; fit {_fit_text(f)}", flush=True)
        other = r["fits"]["best_of_n_rl_form" if name == "best_of_n" else "rl_bon_form"]
        print(f"  {'':<9} the other form: {_fit_text(other)}")
    for sample in r["best_of_n"]["top_samples"][:4]:
        print(f"  best-of-64 pick  {sample['prompt']}{sample['completion']:<24} gold {sample['gold']:+.3f} proxy {sample['proxy']:+.3f}")
    for sample in r["rl"]["final_samples"][:6]:
        print(f"  RL sample (end)  {sample['prompt']}{sample['completion']:<24} gold {sample['gold']:+.3f}")


def _ci(cell) -> str:
    mean, low, high = cell
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"


def _fit_text(f) -> str:
    if f["alpha"] is None:
        return "did not converge"
    peak = "no maximum" if f["d_peak"] is None else f"d* {f['d_peak']:.2f}, gain {f['gain_peak']:+.3f}"
    peak += "" if f["identified"] else ", peak not identified"
    return f"α {f['alpha']:+.3f} β {f['beta']:+.3f} ({peak}; rmse {f['rmse']:.3f})"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    parser.add_argument("--small", action="store_true", help="the chapter's live size (fewer steps and prompts)")
    parser.add_argument("--num-pairs", type=int, default=NUM_PAIRS, help=f"training comparisons (default {NUM_PAIRS})")
    parser.add_argument("--rm-steps", type=int, default=RM_STEPS, help=f"reward-model updates (default {RM_STEPS})")
    parser.add_argument("--rm-lr", type=float, default=RM_LR, help=f"reward-model AdamW learning rate (default {RM_LR:g})")
    parser.add_argument("--select-rm", action="store_true",
                        help="only choose the reward model's recipe: k-fold validation within the training pairs")
    parser.add_argument("--kl-coef", type=float, default=0.0, help="β of GRPO's k3 penalty to the supervised model (default 0)")
    parser.add_argument("--save", action="store_true", help="write rlbook/data/<name>.json")
    parser.add_argument("--name", default="overoptimisation", help="the saved file's name (default overoptimisation)")
    args = parser.parse_args(argv)
    import torch

    import rlbook as rl

    print(f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, 1 thread")
    if args.select_rm:
        start = time.perf_counter()
        record = {"seeds": args.seeds, "num_pairs": args.num_pairs, "rm_batch": RM_BATCH,
                  "selection": [select_recipe(seed, args.num_pairs) for seed in args.seeds],
                  "wall_s": round(time.perf_counter() - start, 1), "torch": torch.__version__,
                  "command": "python benchmarks/overoptimisation.py --select-rm --seeds " + " ".join(map(str, args.seeds))
                             + f" --num-pairs {args.num_pairs} --name {args.name} --save"}
        if args.save:
            from rlbook.config import BENCHMARK_RESULTS

            (BENCHMARK_RESULTS / f"{args.name}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        return record
    start, rows = time.perf_counter(), []
    for seed in args.seeds:
        rows.append(one_seed(seed, args.small, args.num_pairs, args.rm_steps, args.kl_coef, args.rm_lr))
        _print_seed(rows[-1])
    table = {}
    if len(rows) >= 2:
        print(f"{'':<10} {'peak d':>22} {'gold at peak':>22} {'gold at end':>22} {'proxy at end':>22}")
        for name in ("best_of_n", "rl"):
            cells = {}
            for key in ("peak_d", "peak_gold", "end_gold", "end_proxy"):
                cells[key] = rl.mean_ci([r["summary"][name][key] for r in rows])
            print(f"{name:<10} " + " ".join(f"{m:+7.3f} [{lo:+.3f}, {hi:+.3f}]" for m, lo, hi in cells.values()))
            cells["start_gold"] = rl.mean_ci([r["summary"][name]["start_gold"] for r in rows])
            cells["peak_gain"] = rl.mean_ci([r["summary"][name]["peak_gold"] - r["summary"][name]["start_gold"] for r in rows])
            cells["end_minus_peak"] = rl.mean_ci([r["summary"][name]["end_gold"] - r["summary"][name]["peak_gold"] for r in rows])
            fits = [r["fits"][name] for r in rows]
            cells["fit_d_peak"] = rl.mean_ci([f["d_peak"] for f in fits]) if all(f["identified"] for f in fits) else None
            table[name] = cells
            print(f"{'':<10} gold gain at the peak {_ci(cells['peak_gain'])}, end − peak {_ci(cells['end_minus_peak'])}, "
                  f"fitted d* {'not identified on every seed' if cells['fit_d_peak'] is None else _ci(cells['fit_d_peak'])}")
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "small": args.small, "runs": rows, "table": table, "wall_s": round(wall, 1),
              "settings": dict(length_coef=LENGTH_COEF, max_new_tokens=MAX_NEW, label_temperature=LABEL_TEMPERATURE,
                               num_pairs=args.num_pairs, num_test_pairs=NUM_TEST_PAIRS, rm_steps=args.rm_steps, rm_lr=args.rm_lr,
                               rm_batch=RM_BATCH, bon_samples=BON_SAMPLES, rl_lr=RL_LR, kl_coef=args.kl_coef,
                               **(SMALL if args.small else dict(rl_steps=RL_STEPS, eval_steps=EVAL_STEPS,
                                                               bon_prompts=BON_PROMPTS, eval_prompts=EVAL_PROMPTS))),
              "torch": torch.__version__,
              "command": "python benchmarks/overoptimisation.py --seeds " + " ".join(map(str, args.seeds))
                         + (" --small" if args.small else "") + f" --num-pairs {args.num_pairs} --rm-steps {args.rm_steps} --rm-lr {args.rm_lr:g} --kl-coef {args.kl_coef} --name {args.name} --save"}
    if args.save:
        from rlbook.config import BENCHMARK_RESULTS

        path = BENCHMARK_RESULTS / f"{args.name}.json"
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"saved to {path}")
    return record


if __name__ == "__main__":
    main()
