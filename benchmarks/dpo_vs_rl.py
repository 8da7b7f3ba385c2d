"""Offline DPO, online DPO, RL against a learned reward model and RL on the gold reward, at one labelling
budget, on paired seeds: gold reward, accuracy, length, KL from the supervised model and held-out
preference accuracy (chapter 13's comparison; Xu et al. 2024, arXiv:2404.10719, at laptop scale).

Setting (every seed s; everything of seed s is shared by the four methods, so the seeds are paired):

* Task, gold reward and labels as ``benchmarks/overoptimisation.py``: the scratchpad addition task
  (2 digits; a completion may show its working), r*(q, o) = 1[right] − 0.5·|o|/24, labels drawn from
  Bradley–Terry on r* at temperature T = 0.25; 24 new tokens.
* Starting policy π_sft: ``SFTConfig(seed=s)``, ``model_seed=s`` (the supervised models of
  ``benchmarks/grpo_variants.py``, cached under ``runs/checkpoints/bench_scratchpad_sft_seed{s}``).
* Budget: ``BUDGET`` labelled comparisons per method (one comparison = one Bradley–Terry draw on a
  pair of completions of one prompt).
* ``offline_dpo``: DPO (sigmoid, β = ``DPO_BETA``, π_ref = π_sft) on ``BUDGET`` pairs of π_sft's
  samples, ``DPO_STEPS`` updates of ``DPO_BATCH`` pairs at lr ``DPO_LR``.
* ``online_dpo``: ``ROUNDS`` rounds of ``BUDGET/ROUNDS`` pairs sampled from the *current* policy and
  labelled the same way, ``DPO_STEPS/ROUNDS`` updates per round (``rl.algos.dpo.train_online_dpo``):
  the same labels, updates and β as offline DPO; only where the pairs come from differs.
* ``rl_reward_model``: a reward model (the supervised transformer with a scalar head) trained on
  the offline pairs (``RM_STEPS`` updates), then GRPO against it (``rl.train_grpo(..., reward_model=rm)``,
  ``GRPOConfig(reward_source="reward_model")``: 32 prompts × 8,
  two minibatches, k3 penalty β = ``RL_KL_COEF`` to π_sft, lr ``RL_LR``, ``RL_STEPS`` steps).
* ``rl_gold``: the same GRPO on the gold reward r* itself: no comparisons, an oracle's reward (the
  ceiling a learned reward aims at, not a method with the same budget).
* ``rl_implicit_reward``: the same GRPO against offline DPO's implicit reward log π_dpo/π_sft (the
  offline-DPO policy of the same seed read as a reward model, Rafailov et al. 2023 §5): RL on the
  best reward the same 256 comparisons gave, to separate "RL against a learned reward" from "this
  reward model".
* ``rm_curve`` (no RL): ``rl_reward_model``'s reward model trained on to ``RM_CURVE_STEPS`` updates, with
  its accuracy on its training pairs and on the held-out pairs and its held-out loss at each: whether
  training it to convergence gives a better reward (it does not: it over-fits).

Evaluation (sampling seed fixed, the same for every policy): ``EVAL_PROMPTS`` held-out prompts × 8
samples: mean gold reward, accuracy, length, KL(π‖π_sft) (mean of Σ_t log π/π_sft over the samples);
and preference accuracy on ``NUM_TEST_PAIRS`` held-out labelled pairs of π_sft's samples: the share of
pairs whose label the policy's implicit reward log π(y|x) − log π_sft(y|x) orders the same way (the
reward model's own score for ``rl_reward_model`` too; 0.5 for π_sft by definition, ties counted half).

Per seed, ``pairs`` records the ceiling of preference accuracy (the share of held-out pairs the gold reward r*
itself orders as labelled: Bradley–Terry labels at T = 0.25 flip some pairs, and ties count half) and the
share of identical pairs (the same completion twice: its label is a coin flip) among the training and the
held-out pairs.

Across seeds: the mean of each metric with its 95 % t-interval, and paired comparisons
(``rl.compare``) of every pair of methods on the gold reward.

    python benchmarks/dpo_vs_rl.py --seeds 0 1 2 3 4 5 6 7 8 9 --save   # rlbook/data/dpo_vs_rl.json
    python benchmarks/dpo_vs_rl.py --seeds 0                            # one seed, printed

One torch thread; results repeat on one machine, another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time

import numpy as np

LENGTH_COEF, MAX_NEW, LABEL_TEMPERATURE = 0.5, 24, 0.25
BUDGET, NUM_TEST_PAIRS = 256, 400
DPO_BETA, DPO_STEPS, DPO_BATCH, DPO_LR = 0.1, 48, 32, 1e-4
ROUNDS = 4
RM_STEPS, RM_LR, RM_BATCH = 40, 1e-4, 32
RM_CURVE_STEPS = (40, 80, 160, 320)
RL_STEPS, RL_LR, RL_KL_COEF = 16, 1e-4, 0.04
EVAL_PROMPTS, EVAL_SAMPLES = 100, 8
METHODS = ("offline_dpo", "online_dpo", "rl_reward_model", "rl_gold", "rl_implicit_reward")
METRICS = ("gold", "correct", "length", "kl", "preference_accuracy")


class GoldRewardTask:
    """The task with its reward replaced by the gold reward r* (for ``rl_gold``)."""

    def __init__(self, task, gold):
        self.task, self.gold = task, gold

    def __getattr__(self, name):
        if name in ("task", "gold"):
            raise AttributeError(name)
        return getattr(self.task, name)

    def reward(self, prompt, completion):
        return self.gold(prompt, completion)


class ImplicitRewardTask:
    """The task with its reward replaced by offline DPO's implicit reward (for ``rl_implicit_reward``).

    ``score(prompts, completions)`` is :func:`implicit_scorer` of the offline-DPO policy:
    log π_dpo(o|q) − log π_sft(o|q), Rafailov et al. 2023's implicit reward up to the factor β (GRPO's
    group-normalised advantages do not see a positive factor). A completion cut at ``MAX_NEW`` tokens is
    scored as if it ended there (rare here: answers are about six tokens).
    """

    def __init__(self, task, score):
        self.task, self.score = task, score

    def __getattr__(self, name):
        if name in ("task", "score"):
            raise AttributeError(name)
        return getattr(self.task, name)

    def reward_batch(self, prompts, completions):
        return self.score(list(prompts), list(completions))

    def reward(self, prompt, completion):
        return float(self.score([prompt], [completion])[0])


def setup(seed: int):
    import torch

    import rlbook as rl
    from rlbook.lm.preference_task import GoldReward

    torch.set_num_threads(1)
    task = rl.lm.ScratchpadAdditionTask(num_digits=2, held_out_fraction=0.1, seed=0, scratchpad_prob=0.5)
    tok = rl.lm.build_char_tokenizer(task.alphabet)
    checkpoint = rl.runs_dir() / "checkpoints" / f"bench_scratchpad_sft_seed{seed}"
    sft, _, _ = rl.lm.load_or_train_sft(tok, task, rl.lm.SFTConfig(seed=seed), checkpoint=checkpoint, model_seed=seed,
                                        progress=False)
    return task, tok, GoldReward(task, LENGTH_COEF, MAX_NEW), sft.eval().requires_grad_(False)


def strip_eos(texts, eos="</s>"):
    return [t[: -len(eos)] if t.endswith(eos) else t for t in texts]


def gold_labeller(gold, generator):
    """(prompts, a, b) -> (P,) bool: Bradley–Terry on the gold reward at LABEL_TEMPERATURE."""
    from rlbook.lm.preference_task import bradley_terry_labels

    def label(prompts, a, b):
        return bradley_terry_labels(gold.batch(prompts, a), gold.batch(prompts, b), LABEL_TEMPERATURE, generator)[0]
    return label


def labelled_pairs(policy, tok, task, gold, num, generator, split):
    from rlbook.lm.preference_task import sample_preference_pairs

    pairs = sample_preference_pairs(policy, tok, task, num, generator, max_new_tokens=MAX_NEW, split=split)
    pairs.a_preferred = gold_labeller(gold, generator)(pairs.prompts, pairs.completions_a, pairs.completions_b)
    return pairs


def dpo_config(seed: int, num_steps: int):
    from rlbook.algos.dpo import DPOConfig

    return DPOConfig(loss_type="sigmoid", beta=DPO_BETA, num_steps=num_steps, batch_size=DPO_BATCH, lr=DPO_LR, seed=seed,
                     device="cpu")


def grpo_config(seed: int, reward_source: str = "task"):
    import rlbook as rl

    return rl.GRPOConfig(prompts_per_step=32, group_size=8, num_minibatches=2, max_new_tokens=MAX_NEW, kl_coef=RL_KL_COEF,
                         lr=RL_LR, num_steps=RL_STEPS, log_ref_kl=False, seed=seed, device="cpu", reward_source=reward_source)


def preference_accuracy(score, tok, pairs) -> float:
    """Share of ``pairs`` whose label ``score(prompts, completions)`` orders the same way (ties half)."""
    sc = score(pairs.prompts, pairs.chosen)
    sr = score(pairs.prompts, pairs.rejected)
    return float(np.mean((sc > sr) + 0.5 * (sc == sr)))


def implicit_scorer(policy, sft, tok):
    """(prompts, completions) -> log π(o|q) − log π_sft(o|q), float64 numpy."""
    import torch

    from rlbook.lm.dpo import encode_preference_pairs, sequence_log_probs

    @torch.no_grad()
    def score(prompts, completions):
        texts = strip_eos(completions)
        batch = encode_preference_pairs(tok, prompts, texts, texts)  # chosen = rejected: the first half is enough
        half = len(prompts)
        rows = {k: v[:half] for k, v in batch.items()}
        return (sequence_log_probs(policy, **rows) - sequence_log_probs(sft, **rows)).double().numpy()
    return score


def evaluate(policy, sft, tok, task, gold, problems, test_pairs, score=None) -> dict:
    import torch

    import rlbook as rl
    from rlbook.algos.grpo_rollouts import sample_kwargs
    from rlbook.lm.logprobs import completion_log_probs
    from rlbook.lm.tokenizer import encode_prompts, forbidden_token_ids

    forbidden = forbidden_token_ids(tok)
    ids, mask = encode_prompts(tok, [p.prompt for p in problems])
    policy.eval()
    with torch.no_grad():
        out = rl.lm.sample_completions(policy, ids, mask, num_samples=EVAL_SAMPLES, generator=torch.Generator().manual_seed(7),
                                       **sample_kwargs(tok, forbidden, MAX_NEW, 1.0))
        args = (ids, out.completion_ids, mask)  # one prompt per group of samples (prefix sharing)
        log_ratio = (completion_log_probs(policy, *args, completion_mask=out.completion_mask, forbidden_ids=forbidden)
                     - completion_log_probs(sft, *args, completion_mask=out.completion_mask, forbidden_ids=forbidden))
    prompts = [p.prompt for p in problems for _ in range(EVAL_SAMPLES)]
    parts = [gold.components(p, o) for p, o in zip(prompts, out.texts)]
    score = score or implicit_scorer(policy, sft, tok)
    return {"gold": float(np.mean(gold.batch(prompts, out.texts))), "correct": float(np.mean([c["correct"] for c in parts])),
            "length": float(out.lengths.float().mean()), "kl": float(log_ratio.sum(dim=1).mean()),
            "preference_accuracy": preference_accuracy(score, tok, test_pairs),
            "samples": [{"prompt": p, "completion": o} for p, o in list(zip(prompts, out.texts))[:64:8]]}


def rl_on_reward_model(sft, tok, task, gold, problems, train, test, seed: int, rm_steps: int, rm_lr: float) -> dict:
    """Fit a reward model on ``train`` (``rm_steps`` AdamW updates at ``rm_lr``), then GRPO against it; evaluated.

    Besides :func:`evaluate`'s metrics (preference accuracy by the reward model's own score), it returns
    ``policy_preference_accuracy`` (the trained policy's implicit reward) and ``rm_train_accuracy`` (the
    share of its own training pairs the reward model orders as labelled: how far it fit them).
    """
    import rlbook as rl
    from rlbook.lm.preference_task import proxy_rewards

    rm = rl.lm.build_reward_model(sft, seed=seed)
    rl.lm.train_reward_model(rm, tok, train.prompts, strip_eos(train.chosen), strip_eos(train.rejected),
                             rl.lm.RewardModelConfig(num_steps=rm_steps, batch_size=RM_BATCH, lr=rm_lr, seed=seed), progress=False)
    rm.requires_grad_(False).eval()
    policy = copy.deepcopy(sft).requires_grad_(True)
    rl.train_grpo(policy, tok, task, grpo_config(seed, reward_source="reward_model"), progress=False, reward_model=rm)
    rm_score = lambda prompts, completions: proxy_rewards(rm, tok, prompts, completions).double().numpy()  # noqa: E731
    result = evaluate(policy, sft, tok, task, gold, problems, test, score=rm_score)
    result["policy_preference_accuracy"] = preference_accuracy(implicit_scorer(policy, sft, tok), tok, test)
    result["rm_train_accuracy"] = preference_accuracy(rm_score, tok, train)
    return result


def reward_model_curve(sft, tok, train, test, seed: int) -> dict:
    """The reward model of ``rl_reward_model`` trained on past its 40 updates: accuracy on its own training pairs
    and on the held-out pairs, and the held-out Bradley–Terry loss, after each of ``RM_CURVE_STEPS`` updates.

    The first point repeats ``rl_reward_model``'s reward model exactly (same seed, same 40 updates); each
    later stretch draws its minibatches from its own seed.
    """
    import torch

    import rlbook as rl
    from rlbook.lm.preference_task import proxy_rewards

    rm = rl.lm.build_reward_model(sft, seed=seed)
    score = lambda prompts, completions: proxy_rewards(rm, tok, prompts, completions).double().numpy()  # noqa: E731
    curve, done = {"steps": [], "train_accuracy": [], "test_accuracy": [], "test_loss": []}, 0
    for k, steps in enumerate(RM_CURVE_STEPS):
        rl.lm.train_reward_model(rm, tok, train.prompts, strip_eos(train.chosen), strip_eos(train.rejected),
                                 rl.lm.RewardModelConfig(num_steps=steps - done, batch_size=RM_BATCH, lr=RM_LR,
                                                         seed=seed + 1000 * k), progress=False)
        done = steps
        rm.eval()
        with torch.no_grad():
            margin = score(test.prompts, test.chosen) - score(test.prompts, test.rejected)
        curve["steps"].append(steps)
        curve["train_accuracy"].append(preference_accuracy(score, tok, train))
        curve["test_accuracy"].append(preference_accuracy(score, tok, test))
        curve["test_loss"].append(float(np.mean(np.logaddexp(0.0, -margin))))  # −log σ(margin), stably
    return curve


def one_seed(seed: int) -> dict:
    import torch

    import rlbook as rl
    from rlbook.algos.dpo import train_dpo, train_online_dpo

    start = time.perf_counter()
    task, tok, gold, sft = setup(seed)
    generator = torch.Generator().manual_seed(seed)
    train = labelled_pairs(sft, tok, task, gold, BUDGET, generator, "train")
    test = labelled_pairs(sft, tok, task, gold, NUM_TEST_PAIRS, generator, "held_out")
    problems = task.held_out_problems(EVAL_PROMPTS)
    results, wall, histories = {"sft": evaluate(sft, sft, tok, task, gold, problems, test)}, {}, {}
    gold_score = lambda prompts, completions: np.asarray(gold.batch(prompts, completions), dtype=np.float64)  # noqa: E731
    pairs = {"gold_preference_accuracy": preference_accuracy(gold_score, tok, test),  # the ceiling: r* itself orders them
             "identical_train": float(np.mean([a == b for a, b in zip(train.chosen, train.rejected)])),
             "identical_test": float(np.mean([a == b for a, b in zip(test.chosen, test.rejected)]))}

    t = time.perf_counter()
    policy = copy.deepcopy(sft).requires_grad_(True)
    h = train_dpo(policy, sft, tok, train.prompts, strip_eos(train.chosen), strip_eos(train.rejected),
                  dpo_config(seed, DPO_STEPS), progress=False)
    histories["offline_dpo"] = {k: h[k].tolist() for k in ("loss", "reward_accuracy", "chosen_log_prob", "rejected_log_prob")}
    results["offline_dpo"], wall["offline_dpo"] = evaluate(policy, sft, tok, task, gold, problems, test), time.perf_counter() - t
    dpo_policy = policy.eval().requires_grad_(False)  # its implicit reward is rl_implicit_reward's reward model

    t = time.perf_counter()
    policy = copy.deepcopy(sft).requires_grad_(True)
    h = train_online_dpo(policy, sft, tok, task, gold_labeller(gold, torch.Generator().manual_seed(100 + seed)), ROUNDS,
                         BUDGET // ROUNDS, dpo_config(seed, DPO_STEPS // ROUNDS),
                         generator=torch.Generator().manual_seed(200 + seed), max_new_tokens=MAX_NEW, progress=False)
    histories["online_dpo"] = {k: h[k].tolist() for k in ("loss", "reward_accuracy", "chosen_log_prob", "rejected_log_prob")}
    results["online_dpo"], wall["online_dpo"] = evaluate(policy, sft, tok, task, gold, problems, test), time.perf_counter() - t

    t = time.perf_counter()
    results["rl_reward_model"] = rl_on_reward_model(sft, tok, task, gold, problems, train, test, seed, RM_STEPS, RM_LR)
    wall["rl_reward_model"] = time.perf_counter() - t

    t = time.perf_counter()
    policy = copy.deepcopy(sft).requires_grad_(True)
    rl.train_grpo(policy, tok, GoldRewardTask(task, gold), grpo_config(seed), progress=False)
    results["rl_gold"], wall["rl_gold"] = evaluate(policy, sft, tok, task, gold, problems, test), time.perf_counter() - t

    # added later, and run last so that the four arms above repeat the runs stored before them
    t = time.perf_counter()
    policy = copy.deepcopy(sft).requires_grad_(True)
    rl.train_grpo(policy, tok, ImplicitRewardTask(task, implicit_scorer(dpo_policy, sft, tok)), grpo_config(seed),
                  progress=False)
    results["rl_implicit_reward"] = evaluate(policy, sft, tok, task, gold, problems, test,
                                             score=implicit_scorer(dpo_policy, sft, tok))
    results["rl_implicit_reward"]["policy_preference_accuracy"] = preference_accuracy(implicit_scorer(policy, sft, tok), tok, test)
    wall["rl_implicit_reward"] = time.perf_counter() - t

    t = time.perf_counter()
    rm_curve = reward_model_curve(sft, tok, train, test, seed)
    wall["rm_curve"] = time.perf_counter() - t
    wall["total"] = time.perf_counter() - start
    return {"seed": seed, "results": results, "histories": histories, "rm_curve": rm_curve, "pairs": pairs,
            "wall_s": {k: round(v, 1) for k, v in wall.items()}}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    parser.add_argument("--save", action="store_true", help="write rlbook/data/dpo_vs_rl.json")
    args = parser.parse_args(argv)
    import torch

    import rlbook as rl

    print(f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, 1 thread")
    print(f"budget {BUDGET} comparisons; DPO β {DPO_BETA}, {DPO_STEPS} updates × {DPO_BATCH} pairs, lr {DPO_LR}; online "
          f"{ROUNDS} rounds; RM {RM_STEPS} updates; GRPO {RL_STEPS} steps, β_KL {RL_KL_COEF}, lr {RL_LR}")
    start, rows = time.perf_counter(), []
    for seed in args.seeds:
        rows.append(one_seed(seed))
        r = rows[-1]["results"]
        print(f"seed {seed} ({rows[-1]['wall_s']['total']:.0f} s): " + "; ".join(
            f"{m} gold {r[m]['gold']:+.3f} acc {r[m]['correct']:.2f} len {r[m]['length']:.1f} KL {r[m]['kl']:.2f} "
            f"pref {r[m]['preference_accuracy']:.2f}" for m in ("sft",) + METHODS), flush=True)
    table, comparisons = {}, {}
    if len(rows) >= 2:
        print(f"{'':<16}" + "".join(f"{k:>26}" for k in METRICS))
        for m in ("sft",) + METHODS:
            table[m] = {k: rl.mean_ci([r["results"][m][k] for r in rows]) for k in METRICS}
            print(f"{m:<16}" + "".join(f"{c[0]:+8.3f} [{c[1]:+.3f}, {c[2]:+.3f}]" for c in table[m].values()))
        for i, a in enumerate(("sft",) + METHODS):
            for b in (("sft",) + METHODS)[i + 1:]:
                c = rl.compare([r["results"][b]["gold"] for r in rows], [r["results"][a]["gold"] for r in rows], names=(b, a))
                comparisons[f"{b} - {a}"] = {"mean_diff": c.mean_diff, "ci_low": c.ci_low, "ci_high": c.ci_high,
                                             "verdict": c.verdict, "n": c.n}
                print("gold: " + str(c))
        for key in ("gold_preference_accuracy", "identical_train", "identical_test"):
            print(f"{key}: {rl.mean_ci([r['pairs'][key] for r in rows])[0]:.3f}")
        for k, steps in enumerate(RM_CURVE_STEPS):
            print(f"reward model after {steps:>3} updates: " + "; ".join(
                f"{key} {rl.mean_ci([r['rm_curve'][key][k] for r in rows])[0]:.3f}"
                for key in ("train_accuracy", "test_accuracy", "test_loss")))
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "runs": rows, "table": table, "comparisons_gold": comparisons, "wall_s": round(wall, 1),
              "settings": dict(length_coef=LENGTH_COEF, max_new_tokens=MAX_NEW, label_temperature=LABEL_TEMPERATURE,
                               budget=BUDGET, num_test_pairs=NUM_TEST_PAIRS, dpo_beta=DPO_BETA, dpo_steps=DPO_STEPS,
                               dpo_batch=DPO_BATCH, dpo_lr=DPO_LR, rounds=ROUNDS, rm_steps=RM_STEPS, rm_lr=RM_LR,
                               rm_batch=RM_BATCH, rm_curve_steps=list(RM_CURVE_STEPS), rl_steps=RL_STEPS, rl_lr=RL_LR, rl_kl_coef=RL_KL_COEF,
                               eval_prompts=EVAL_PROMPTS, eval_samples=EVAL_SAMPLES),
              "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/dpo_vs_rl.py --seeds " + " ".join(map(str, args.seeds)) + " --save"}
    if args.save:
        from rlbook.config import BENCHMARK_RESULTS

        path = BENCHMARK_RESULTS / "dpo_vs_rl.json"
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"saved to {path}")
    return record


if __name__ == "__main__":
    main()
