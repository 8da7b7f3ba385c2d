"""Would backpropagating through the sampler's own forward make the GRPO step faster? (No.)

At one optimisation pass per batch (μ = 1) and β = 0, GRPO's training forward recomputes exactly
the log-probs the sampler already computed, now with gradient. One way to skip that forward is to
sample with autograd on and backpropagate through the sampler's steps: the prompt's prefill and
then one graph per generated token, each attending over a key/value cache grown by concatenation
(an in-place cache cannot be differentiated through). This script times that against the book's
step (sample without gradient, then one forward over the completions after the shared prompt, then
backward), on the same model, prompts and sampled tokens, and checks first that both give the same
gradient.

Setting (both strategies): the book's small GPT-2 (2 × 128, character vocabulary, freshly
initialised, eval mode), 8 addition prompts × G = 8 completions, at most 8 new tokens,
temperature 1, the clipped surrogate at μ = 1 (ratio 1, so the loss is −A·log π averaged over the
completion tokens), fused AdamW, CPU, float32. Rewards are not computed; the advantages are fixed
random numbers, the same for both strategies. Only the part of the step the two strategies do
differently is timed: sampling, the gradient's forward, backward and the optimiser step.

Method: ``--repeats`` rounds alternate the strategies; each round runs ``--warmup`` untimed and
``--steps`` timed steps, and the fastest round of each is kept (CPU time per step; wall time is
printed too).

Measured 2026-11-26 (2-core Xeon, quiet machine: 1-minute load 0.4-0.5; torch 2.13, transformers
5.24), fastest of 3 rounds of 30 steps:

    threads   sample then score (the book)   backprop through the sampler   ratio
    1         33.4 CPU ms/step               39.0 CPU ms/step               1.17× slower
    2         24.8 wall ms/step              31.3 wall ms/step              1.26× slower

The backward through eight one-token graphs costs more than the forward it saves: the per-step
operations are many and small, and the concatenated caches copy the keys and values again at every
token. The gradients agree to within 3e-8 (the largest gap between the two flat gradients).

Usage:
    python benchmarks/grpo_backprop_through_sampler.py [--steps 30] [--warmup 3] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import platform
import time

import torch

N, G, T = 8, 8, 8  # prompts, completions per prompt, max new tokens


def setup(seed: int = 0):
    """The throughput benchmark's model (eval mode), N addition prompts (N, P) and the EOS id."""
    import grpo_throughput
    import rlbook as rl

    task, tok, policy = grpo_throughput.setup(seed)
    policy.eval()
    rng = torch.Generator().manual_seed(seed)
    pairs = torch.randint(10, 100, (N, 2), generator=rng).tolist()
    ids, _ = rl.lm.encode_prompts(tok, [task.prompt_for(a, b) for a, b in pairs])
    return policy, ids, tok.eos_token_id


def surrogate(log_probs, mask, advantages):
    """−A·log π averaged over the completion tokens: the clipped surrogate's value and gradient at ratio 1."""
    from rlbook.aggregation import token_mean

    return token_mean(-advantages * log_probs, mask)


def sample_then_score(policy, ids, eos, generator, advantages):
    """The book's step: sample without gradient, then log π of the completions with gradient."""
    import rlbook as rl

    c = rl.lm.sample_completions(policy, ids, num_samples=G, max_new_tokens=T, eos_token_id=eos, generator=generator)
    log_probs = rl.lm.completion_log_probs(policy, ids, c.completion_ids, completion_mask=c.completion_mask)
    loss = surrogate(log_probs, c.completion_mask, advantages[: log_probs.shape[0]])
    return loss, c.completion_ids


def through_sampler(policy, ids, eos, generator, advantages):
    """Sample with autograd on and keep the sampled tokens' log π: no second forward."""
    from rlbook.lm import gpt2_fast

    B, P = N * G, ids.shape[1]
    logits, prefix = gpt2_fast.gpt2_prefill(policy, ids)  # (N, V), per layer (N, H, P, d)
    logits = logits.repeat_interleave(G, dim=0)
    keys = [k.repeat_interleave(G, dim=0) for k, _ in prefix]
    values = [v.repeat_interleave(G, dim=0) for _, v in prefix]

    def attend(layer, k, v):  # grow the cache by concatenation (differentiable)
        keys[layer] = torch.cat([keys[layer], k], dim=2)
        values[layer] = torch.cat([values[layer], v], dim=2)
        return keys[layer], values[layer]

    finished = torch.zeros(B, dtype=torch.bool)
    tokens, log_probs, masks = [], [], []
    for t in range(T):
        log_p = torch.log_softmax(logits.float(), dim=-1)
        tok = torch.multinomial(log_p.detach().exp(), 1, generator=generator).squeeze(-1)
        tok = torch.where(finished, torch.zeros_like(tok), tok)
        tokens.append(tok)
        log_probs.append(log_p.gather(-1, tok[:, None]).squeeze(-1))
        masks.append(~finished)
        finished = finished | (tok == eos)
        if t + 1 == T or bool(finished.all()):
            break
        feed = torch.where(finished, torch.full_like(tok, eos), tok)
        logits = gpt2_fast.gpt2_forward(policy, feed[:, None], torch.full((B, 1), P + t), attend)[:, -1]
    mask = torch.stack(masks, dim=1)
    loss = surrogate(torch.stack(log_probs, dim=1), mask, advantages)
    return loss, torch.stack(tokens, dim=1) * mask


STRATEGIES = {"sample then score (the book)": sample_then_score, "backprop through the sampler": through_sampler}


def gradients(fn, policy, ids, eos, seed, advantages):
    """(loss, completion ids, flat gradient) of one strategy from a fresh generator."""
    policy.zero_grad()
    loss, completions = fn(policy, ids, eos, torch.Generator().manual_seed(seed), advantages)
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in policy.parameters()])
    policy.zero_grad()
    return loss.detach(), completions, grad


def check_same(policy, ids, eos, seed=0):
    """Both strategies sample the same tokens and give the same loss and gradient; returns the max gradient gap."""
    advantages = torch.randn(N * G, 1, generator=torch.Generator().manual_seed(seed + 1))
    (la, ca, ga), (lb, cb, gb) = (gradients(fn, policy, ids, eos, seed, advantages) for fn in STRATEGIES.values())
    if not torch.equal(ca, cb):
        raise AssertionError("the two strategies sampled different completions")
    if not torch.allclose(la, lb, rtol=1e-5, atol=1e-6) or not torch.allclose(ga, gb, rtol=1e-4, atol=1e-6):
        raise AssertionError(f"different loss or gradient: {la.item()} vs {lb.item()}, max gap {(ga - gb).abs().max().item()}")
    return float((ga - gb).abs().max())


def time_round(fn, policy, ids, eos, steps, warmup):
    """(CPU ms, wall ms) per step: strategy + backward + optimiser step."""
    optimiser = torch.optim.AdamW(policy.parameters(), lr=1e-4, weight_decay=0.0, fused=True)
    generator = torch.Generator().manual_seed(0)
    advantages = torch.randn(N * G, 1, generator=torch.Generator().manual_seed(1))
    for i in range(warmup + steps):
        if i == warmup:
            cpu, wall = time.process_time(), time.perf_counter()
        optimiser.zero_grad(set_to_none=True)
        loss, _ = fn(policy, ids, eos, generator, advantages)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimiser.step()
    return 1000 * (time.process_time() - cpu) / steps, 1000 * (time.perf_counter() - wall) / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    versions = {name: md.version(name) for name in ("torch", "transformers", "rlbook")}
    print(f"python {platform.python_version()}, " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"settings: {N} prompts × G={G}, ≤{T} new tokens, temperature 1, μ=1, fused AdamW, clip 1.0, "
          f"float32, CPU, {args.threads} thread(s); {args.repeats} rounds of {args.warmup} + {args.steps} steps")
    policy, ids, eos = setup()
    gap = check_same(policy, ids, eos)
    print(f"same samples, loss and gradient: yes (max gradient gap {gap:.1e})")
    best = {name: (float("inf"), float("inf")) for name in STRATEGIES}
    for r in range(args.repeats):
        for name, fn in STRATEGIES.items():
            cpu, wall = time_round(fn, policy, ids, eos, args.steps, args.warmup)
            print(f"  round {r + 1}: {name:<30} {cpu:6.1f} CPU ms/step  {wall:6.1f} wall ms/step")
            best[name] = min(best[name], (cpu, wall))
    base_cpu, base_wall = best["sample then score (the book)"]
    print(f"\n{'strategy':<30} {'CPU ms/step':>12} {'wall ms/step':>13} {'÷ book (CPU)':>13} {'÷ book (wall)':>14}")
    for name, (cpu, wall) in best.items():
        print(f"{name:<30} {cpu:12.1f} {wall:13.1f} {cpu / base_cpu:12.2f}× {wall / base_wall:13.2f}×")
    return best


if __name__ == "__main__":
    main()
