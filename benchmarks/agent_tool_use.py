"""Tool use on the book's own model: does masked GRPO learn to call a calculator that pays, and stop calling one that does not?

Chapter 16's experiment, on paired seeds. The book's small character model (2 layers × 128,
``rl.lm.policy_config(size="small", n_positions=64)``) is warmed up on demonstrations of addition
(``rl.CalculatorEnv``): half of them call the calculator ``(a+b)``, read ``[a+b]`` and copy it; the other half
write the sum at once. The warmed-up model does both. Then masked GRPO (``rl.train_agent_grpo``: G = 8 episodes
of each of 8 problems a step, lr 1e-3, clip 0.2, token mean over the model's tokens) trains it for 100 steps with
the calculator working, or with it useless (it answers every call with ``[]``). Conditions, per seed (the seed
makes the model, draws the warm-up's batches and GRPO's samples; the demonstrations are the same for all):

  no_tool                 4-digit: supervised on 2,000 direct-answer demonstrations only, 600 steps
  mixed_sft               4-digit: supervised on 2,000 demonstrations, half with the tool, 300 steps
  mixed_grpo_calculator   mixed_sft, then GRPO with the calculator
  mixed_grpo_useless      mixed_sft, then GRPO with the useless tool
  mixed2_sft              the same three on 2-digit addition, where an answer written at once is
  mixed2_grpo_calculator  sometimes right (so calling a useless tool can be seen to cost something)
  mixed2_grpo_useless

Each is evaluated on the same 200 held-out problems (seeds 0–199; demonstrations use seeds from 10,000, GRPO
from 1,000,000), with the calculator: sampled (τ = 1, a fixed generator) and greedy accuracy, the sampled
call frequency, and the digit accuracy of the greedy answers (the share of the sum's digits right, aligned
from the units); and sampled with the useless tool. GRPO runs record their per-step reward, call frequency
and share of zero-variance groups.

    python benchmarks/agent_tool_use.py --workers 2 --save      # rlbook/data/agent_tool_use.json (about 15 min)
    python benchmarks/agent_tool_use.py --seeds 0 --conditions no_tool

Runs repeat exactly on one machine (one torch thread each); another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import copy
import platform
import time

from _runner import run_jobs, save_record, seed_parser, sort_and_tabulate, versions

CONDITIONS = ["no_tool", "mixed_sft", "mixed_grpo_calculator", "mixed_grpo_useless",
              "mixed2_sft", "mixed2_grpo_calculator", "mixed2_grpo_useless"]
EVAL_SEEDS = list(range(200))
NUM_DEMOS, TOOL_SHARE, WARMUP_STEPS, NO_TOOL_STEPS = 2000, 0.5, 300, 600
GRPO = {"group_size": 8, "prompts_per_step": 8, "num_steps": 100, "lr": 1e-3}
COMMON = (f"small model (2x128, n_positions 64); {NUM_DEMOS} demonstrations ({TOOL_SHARE:.0%} with the tool) for "
          f"{WARMUP_STEPS} steps, direct-only {NO_TOOL_STEPS} steps, batch 32, SFT lr 3e-3; GRPO {GRPO}, clip 0.2, "
          f"token mean; eval on {len(EVAL_SEEDS)} problems")
FIELDS = ("sampled", "greedy", "call_frequency", "digit_accuracy", "sampled_useless")


def make_env(tok, num_digits: int, tool: str = "calculator"):
    from rlbook.envs.text import CalculatorEnv

    return lambda: CalculatorEnv(tok, num_digits=num_digits, tool=tool, max_turns=3)


def demonstrations(tok, num_digits: int, n: int, tool_share: float) -> list:
    """``n`` scripted episodes on problems 10,000, 10,001, ...: the first ``tool_share`` of them call the
    calculator and copy its answer, the others write the sum at once."""
    from rlbook.envs.text import rollout

    eos = tok.eos_token_id
    enc = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731
    env = make_env(tok, num_digits)()

    def tool_user(context):
        seen = tok.decode(context[1:])
        if "[" not in seen:
            return enc("(" + seen[:-1] + ")")
        return enc(seen[seen.index("[") + 1: seen.index("]")]) + [eos]

    episodes = []
    for i in range(n):
        if i < tool_share * n:
            episodes.append(rollout(env, tool_user, seed=10_000 + i))
        else:
            env.reset(10_000 + i)
            episodes.append(rollout(env, lambda context, a=env.answer: enc(a) + [eos], seed=10_000 + i))
    return episodes


def evaluate(model, tok, num_digits: int, seeds=EVAL_SEEDS) -> dict:
    """Sampled (τ = 1, generator seed 9) and greedy accuracy, sampled call frequency, greedy digit accuracy, and
    sampled accuracy with the useless tool, on the problems of ``seeds``."""
    import torch

    from rlbook.algos.agent import evaluate_agent
    from rlbook.envs.text import batch_rollouts

    sample = lambda tool: evaluate_agent(model, make_env(tok, num_digits, tool), list(seeds), greedy=False,  # noqa: E731
                                         generator=torch.Generator().manual_seed(9))
    sampled, useless = sample("calculator"), sample("useless")
    envs = [make_env(tok, num_digits)() for _ in seeds]
    episodes = batch_rollouts(model, envs, list(seeds), greedy=True)
    digits = []
    for env, seed, ep in zip(envs, seeds, episodes):
        env.reset(seed)
        last = [i for i, m, t in zip(ep.input_ids, ep.loss_mask, ep.turn_ids) if m and t == ep.num_turns - 1]
        text = tok.decode(last).removesuffix("</s>")
        text = text if text.isdigit() else ""
        digits.append(sum(a == b for a, b in zip(reversed(text), reversed(env.answer))) / len(env.answer))
    return {"sampled": sampled["accuracy"], "greedy": sum(ep.reward for ep in episodes) / len(episodes),
            "call_frequency": sampled["call_frequency"], "digit_accuracy": sum(digits) / len(digits),
            "sampled_useless": useless["accuracy"], "turns_per_episode": sampled["turns_per_episode"],
            "failure_frequency": sampled["failure_frequency"], "malformed_frequency": sampled["malformed_frequency"]}


def one_run(job) -> list[dict]:
    """One seed's ``"no_tool"`` run, or one seed's warm-up and both GRPO runs from it (``"mixed"``, ``"mixed2"``)."""
    seed, family = job
    import torch

    import rlbook as rl
    from rlbook.algos.agent import AgentGRPOConfig, multiturn_sft, train_agent_grpo
    from rlbook.envs.text import TOOL_ALPHABET

    torch.set_num_threads(1)
    tok = rl.lm.build_char_tokenizer(TOOL_ALPHABET)
    digits = 2 if family == "mixed2" else 4
    model = rl.lm.build_policy(rl.lm.policy_config(tok, size="small", n_positions=64), seed=seed, device="cpu")
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    if family == "no_tool":
        multiturn_sft(model, demonstrations(tok, digits, NUM_DEMOS, 0.0), num_steps=NO_TOOL_STEPS, generator=generator)
        return [{"seed": seed, "condition": "no_tool", **evaluate(model, tok, digits),
                 "seconds": round(time.perf_counter() - start, 1)}]
    multiturn_sft(model, demonstrations(tok, digits, NUM_DEMOS, TOOL_SHARE), num_steps=WARMUP_STEPS, generator=generator)
    rows = [{"seed": seed, "condition": f"{family}_sft", **evaluate(model, tok, digits),
             "seconds": round(time.perf_counter() - start, 1)}]
    for tool in ("calculator", "useless"):
        trained = copy.deepcopy(model)
        begin = time.perf_counter()
        history = train_agent_grpo(trained, make_env(tok, digits, tool), AgentGRPOConfig(**GRPO, seed=seed), progress=False)
        rows.append({"seed": seed, "condition": f"{family}_grpo_{tool}", **evaluate(trained, tok, digits),
                     "seconds": round(time.perf_counter() - begin, 1),
                     "train_reward": [round(h["reward"], 4) for h in history],
                     "train_call_frequency": [round(h["call_frequency"], 4) for h in history],
                     "zero_variance_groups": [round(h["zero_variance_groups"], 4) for h in history]})
    return rows


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "agent_tool_use", CONDITIONS)
    args = parser.parse_args(argv)
    import torch

    print(f"{versions(args.workers)}; {COMMON}", flush=True)
    families = [f for f in ("no_tool", "mixed", "mixed2") if any(c == f or c.startswith(f + "_") for c in args.conditions)]
    jobs = [(seed, family) for seed in args.seeds for family in families]
    start = time.perf_counter()

    def show(rows):
        for r in rows:
            print(f"seed {r['seed']} {r['condition']:<24} sampled {r['sampled']:.3f} greedy {r['greedy']:.3f} "
                  f"calls {r['call_frequency']:.2f} digits {r['digit_accuracy']:.3f} useless {r['sampled_useless']:.3f} "
                  f"({r['seconds']:.0f} s)", flush=True)

    rows = [r for group in run_jobs(one_run, jobs, args.workers, show) for r in group if r["condition"] in args.conditions]
    table = sort_and_tabulate(rows, CONDITIONS, args.conditions, FIELDS, 24)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "common": COMMON, "grpo": GRPO, "conditions": args.conditions, "runs": rows,
              "table": table, "wall_s": round(wall, 1), "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/agent_tool_use.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("agent_tool_use", record)
    return record


if __name__ == "__main__":
    main()
