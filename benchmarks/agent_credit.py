"""Credit across turns: the same warm-up, the same episodes' rewards, four ways of turning them into token advantages.

Chapter 17's experiment, on paired seeds. Per seed, the book's small character model is warmed up exactly as in
chapter 16's 2-digit condition (``agent_tool_use.py``, ``mixed2_sft``: 2,000 demonstrations on 2-digit addition,
half calling the calculator, 300 steps), so that it both calls the calculator and sometimes answers at once: two
paths to the reward, one turn or two. Then masked GRPO (``rl.train_agent_grpo``, the settings of chapter 16: G = 8
episodes of each of 8 problems a step, 100 steps, lr 1e-3, clip 0.2, token mean) trains a copy of it under each
credit scheme (``AgentGRPOConfig.credit``, ``rl.episode_token_advantages``):

  sft          the warmed-up start (no GRPO)
  broadcast    GRPO's default: the episode's group-relative advantage on every model token (γ = 1)
  gigpo        GiGPO: that plus ω = 1 times the step-level advantage of turns taken from identical contexts (γ = 1)
  rebn         per-turn returns z-scored over every turn of the batch (GEM's ReBN), γ = 1
  rebn_gamma   the same with γ = 0.5 per turn
  gigpo_gamma  GiGPO with γ = 0.5 per turn

Each is evaluated on the same 200 held-out problems (seeds 0–199) with the calculator, as in chapter 16: sampled
(τ = 1, a fixed generator) and greedy accuracy, sampled call frequency, turns per episode and malformed
frequency, digit accuracy of the greedy answers. Training runs record their per-step reward, call frequency and
malformed frequency.

    python benchmarks/agent_credit.py --workers 2 --save      # rlbook/data/agent_credit.json (about 19 min on a busy 2-core machine)
    python benchmarks/agent_credit.py --seeds 0 --conditions sft rebn rebn_gamma

Runs repeat exactly on one machine (one torch thread each); another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import copy
import platform
import time

from _runner import run_jobs, save_record, seed_parser, sort_and_tabulate, versions
from agent_tool_use import GRPO, NUM_DEMOS, TOOL_SHARE, WARMUP_STEPS, demonstrations, evaluate, make_env

NUM_DIGITS = 2
GAMMA = 0.5
CREDIT = {"broadcast": {"credit": "broadcast"},
          "gigpo": {"credit": "gigpo", "gamma": 1.0, "step_weight": 1.0},
          "rebn": {"credit": "rebn", "gamma": 1.0},
          "rebn_gamma": {"credit": "rebn", "gamma": GAMMA},
          "gigpo_gamma": {"credit": "gigpo", "gamma": GAMMA, "step_weight": 1.0}}
CONDITIONS = ["sft", *CREDIT]
COMMON = (f"small model (2x128, n_positions 64); {NUM_DIGITS}-digit addition; {NUM_DEMOS} demonstrations "
          f"({TOOL_SHARE:.0%} with the tool) for {WARMUP_STEPS} steps, batch 32, SFT lr 3e-3; GRPO {GRPO}, clip 0.2, "
          f"token mean; credit {CREDIT}; eval on 200 problems")
FIELDS = ("sampled", "greedy", "call_frequency", "turns_per_episode", "malformed_frequency", "digit_accuracy")


def warm_start(seed: int):
    """Chapter 16's 2-digit warm-up for one seed (one torch thread): ``(tokenizer, model)``.

    The seed makes the model and draws the warm-up's batches; the demonstrations are the same for all seeds.
    Shared by this benchmark, ``agent_staleness.py`` and ``agent_echo_trap.py``, so that their starts are one
    configuration."""
    import torch

    import rlbook as rl
    from rlbook.algos.agent import multiturn_sft
    from rlbook.envs.text import TOOL_ALPHABET

    torch.set_num_threads(1)
    tok = rl.lm.build_char_tokenizer(TOOL_ALPHABET)
    model = rl.lm.build_policy(rl.lm.policy_config(tok, size="small", n_positions=64), seed=seed, device="cpu")
    multiturn_sft(model, demonstrations(tok, NUM_DIGITS, NUM_DEMOS, TOOL_SHARE), num_steps=WARMUP_STEPS,
                  generator=torch.Generator().manual_seed(seed))
    return tok, model


def grpo_row(model, tok, seed: int, name: str, setting: dict, traces: dict, train_env=None) -> dict:
    """Masked GRPO (chapter 16's settings ``GRPO`` updated by ``setting``) on a copy of ``model``, evaluated.

    ``train_env`` makes the training environments (default: chapter 16's 2-digit calculator); the evaluation is
    always :func:`agent_tool_use.evaluate`'s, on the calculator's outcome alone.
    Returns the run's row: seed, condition ``name``, :func:`agent_tool_use.evaluate`'s fields, the seconds of
    training and evaluation, and one list per step for each ``{row key: metric of rl.agent_grpo_step}`` of
    ``traces`` (rounded to 4 places)."""
    from rlbook.algos.agent import AgentGRPOConfig, train_agent_grpo

    trained = copy.deepcopy(model)
    begin = time.perf_counter()
    history = train_agent_grpo(trained, train_env or make_env(tok, NUM_DIGITS),
                               AgentGRPOConfig(**{**GRPO, **setting}, seed=seed), progress=False)
    return {"seed": seed, "condition": name, **evaluate(trained, tok, NUM_DIGITS),
            "seconds": round(time.perf_counter() - begin, 1),
            **{key: [round(h[metric], 4) for h in history] for key, metric in traces.items()}}


def one_run(seed: int) -> list[dict]:
    """One seed: the warm-up, its evaluation, and a GRPO run from it under each credit scheme."""
    start = time.perf_counter()
    tok, model = warm_start(seed)
    rows = [{"seed": seed, "condition": "sft", **evaluate(model, tok, NUM_DIGITS),
             "seconds": round(time.perf_counter() - start, 1)}]
    traces = {"train_reward": "reward", "train_call_frequency": "call_frequency",
              "train_malformed_frequency": "malformed_frequency"}
    return rows + [grpo_row(model, tok, seed, name, credit, traces) for name, credit in CREDIT.items()]


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "agent_credit", CONDITIONS)
    args = parser.parse_args(argv)
    import torch

    print(f"{versions(args.workers)}; {COMMON}", flush=True)
    start = time.perf_counter()

    def show(rows):
        for r in rows:
            print(f"seed {r['seed']} {r['condition']:<12} sampled {r['sampled']:.3f} greedy {r['greedy']:.3f} "
                  f"calls {r['call_frequency']:.2f} turns {r['turns_per_episode']:.2f} "
                  f"malformed {r['malformed_frequency']:.2f} ({r['seconds']:.0f} s)", flush=True)

    rows = [r for group in run_jobs(one_run, list(args.seeds), args.workers, show) for r in group
            if r["condition"] in args.conditions]
    table = sort_and_tabulate(rows, CONDITIONS, args.conditions, FIELDS, 12)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "common": COMMON, "grpo": GRPO, "credit": CREDIT, "num_digits": NUM_DIGITS,
              "conditions": args.conditions, "runs": rows, "table": table, "wall_s": round(wall, 1),
              "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/agent_credit.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("agent_credit", record)
    return record


if __name__ == "__main__":
    main()
