"""Where the entropy went: per-token entropy of the trained policies at the answer's positions and in the working
(chapter 10's entropy paragraph; ``grpo_b0`` against ``dr_grpo``, ten paired seeds).

``benchmarks/entropy_dynamics.py`` logs the *per-token mean* entropy of the sampled answers. A worked answer
adds about fourteen near-deterministic tokens (each column's digits follow from the prompt and the previous
columns), so that mean falls when a policy starts writing working whether or not it is surer where the answer is
decided. This benchmark trains the same two conditions (``entropy_dynamics``' settings and supervised models, one
run per seed) and then splits the entropy of the trained policy on its own held-out samples by position:

* ``entropy_token_mean``: the mean over every completion token (what ``train_grpo`` logs);
* ``entropy_answer``: the mean over the answer's positions: the ``answer_width`` (3) digits and EOS that end
  every completion that ended (cut completions are left out);
* ``entropy_working``: the mean over the working's positions (everything before the answer), over the
  completions that show working;
* ``entropy_answer_sum``: the entropy summed over the answer's four positions (nats per answer);
* ``worked_share``: the share of completions that show working.

Evaluation: ``EVAL_PROMPTS`` held-out prompts × ``EVAL_SAMPLES`` samples at temperature 1 (one sampling seed for
every policy), the entropy of each position's next-token distribution over the allowed tokens, the
distribution the policy samples from (``rl.lm.completion_log_probs(..., with_entropy=True)``).

    python benchmarks/answer_entropy.py --seeds 0 1 2 3 4 5 6 7 8 9 --workers 2 --save   # rlbook/data/answer_entropy.json

One thread per run; runs repeat exactly on one machine, another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import platform
import time

import numpy as np
from _runner import run_jobs, save_record, seed_parser, sort_and_tabulate, versions
from entropy_dynamics import COMMON, make_config
from grpo_variants import setup

CONDITIONS = ("before", "grpo_b0", "dr_grpo")
EVAL_PROMPTS, EVAL_SAMPLES = 100, 8
FIELDS = ("entropy_token_mean", "entropy_answer", "entropy_working", "entropy_answer_sum", "worked_share", "pass@1")


def position_entropies(policy, tok, task) -> dict:
    """The entropy of ``policy`` at the answer's and the working's positions of its own held-out samples."""
    import torch

    import rlbook as rl
    from rlbook.algos.grpo_rollouts import sample_kwargs
    from rlbook.lm.logprobs import completion_log_probs
    from rlbook.lm.tokenizer import encode_prompts, forbidden_token_ids

    forbidden = forbidden_token_ids(tok)
    problems = task.held_out_problems(EVAL_PROMPTS)
    ids, mask = encode_prompts(tok, [p.prompt for p in problems])
    policy.eval()
    with torch.no_grad():
        out = rl.lm.sample_completions(policy, ids, mask, num_samples=EVAL_SAMPLES, generator=torch.Generator().manual_seed(3),
                                       **sample_kwargs(tok, forbidden, COMMON["max_new_tokens"], 1.0))
        _, entropy = completion_log_probs(policy, ids, out.completion_ids, mask, completion_mask=out.completion_mask,
                                          forbidden_ids=forbidden, with_entropy=True)
    lengths = out.completion_mask.sum(dim=1)
    ended = out.completion_ids.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0] == tok.eos_token_id
    tail = task.answer_width + 1  # the answer's digits and EOS
    answer, working, sums = [], [], []
    for row in range(out.completion_ids.shape[0]):
        n = int(lengths[row])
        if not ended[row] or n < tail:
            continue
        e = entropy[row, :n].double()
        answer.append(e[n - tail:])
        sums.append(float(e[n - tail:].sum()))
        if n > tail:
            working.append(e[: n - tail])
    prompts = [p.prompt for p in problems for _ in range(EVAL_SAMPLES)]
    correct = [task.reward(p, o) for p, o in zip(prompts, out.texts)]
    return {"entropy_token_mean": float(entropy[out.completion_mask].double().mean()),
            "entropy_answer": float(torch.cat(answer).mean()),
            "entropy_working": float(torch.cat(working).mean()) if working else float("nan"),
            "entropy_answer_sum": float(np.mean(sums)),
            "worked_share": float(np.mean([task.separator in o for o in out.texts])),
            "pass@1": float(np.mean(correct)), "ended_share": float(ended.double().mean())}


def one_run(job) -> dict:
    seed, name = job
    import rlbook as rl

    task, tok, policy = setup(seed)
    start = time.perf_counter()
    if name != "before":
        rl.train_grpo(policy, tok, task, make_config(name, seed), progress=False)
    return {"seed": seed, "condition": name, **position_entropies(policy, tok, task),
            "seconds": round(time.perf_counter() - start, 1)}


def main(argv=None) -> dict:
    args = seed_parser(__doc__, "answer_entropy").parse_args(argv)
    import torch

    import rlbook as rl

    print(f"{versions(args.workers)}; {COMMON}; evaluation {EVAL_PROMPTS} held-out prompts × {EVAL_SAMPLES}", flush=True)
    jobs = [(seed, name) for seed in args.seeds for name in CONDITIONS]
    start = time.perf_counter()

    def show(r):
        print(f"seed {r['seed']} {r['condition']:<8} " + " ".join(f"{k} {r[k]:.3f}" for k in FIELDS) + f" ({r['seconds']:.0f} s)",
              flush=True)

    rows = run_jobs(one_run, jobs, args.workers, show)
    table = sort_and_tabulate(rows, list(CONDITIONS), list(CONDITIONS), FIELDS, 9)
    comparisons = {}
    if len(args.seeds) >= 2:
        for key in FIELDS:
            by = {c: [r[key] for r in rows if r["condition"] == c] for c in ("grpo_b0", "dr_grpo")}
            c = rl.compare(by["dr_grpo"], by["grpo_b0"], names=(f"dr_grpo {key}", "grpo_b0's"))
            comparisons[key] = {"mean_diff": c.mean_diff, "ci_low": c.ci_low, "ci_high": c.ci_high, "verdict": c.verdict}
            print(c)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "common": COMMON, "conditions": list(CONDITIONS), "eval_prompts": EVAL_PROMPTS,
              "eval_samples": EVAL_SAMPLES, "runs": rows, "table": table, "comparisons_dr_minus_grpo": comparisons,
              "wall_s": round(wall, 1), "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/answer_entropy.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("answer_entropy", record)
    return record


if __name__ == "__main__":
    main()
