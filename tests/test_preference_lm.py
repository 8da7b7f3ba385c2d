"""Preference pairs on the book's transformer: layout, sequence log-probs, CS336's DPO loss, the reward model.

Independent computations: the pair layout against TRL's own collator; sequence log-probs against
the book's left-padded scorer and against a token-by-token loop over prefixes; the reward model's
score against the model run on each unpadded row alone; one reward-model update against
−lr·∇(the Bradley–Terry loss written out) with stale gradients planted (a skipped ``zero_grad``, a
skipped ``step`` or a flipped sign each fail it); and a learning test with a stated threshold.
"""

import copy

import pytest
import torch

import rlbook as rl
from rlbook.lm.dpo import compute_per_instance_dpo_loss, encode_preference_pairs, sequence_log_probs
from rlbook.lm.reward_model import (RewardModelConfig, build_reward_model, reward_model_accuracy, reward_model_step,
                                    sequence_rewards, train_reward_model)

DT = torch.float64
TOK = rl.lm.build_char_tokenizer()
TINY = dict(n_layer=1, n_embd=32, n_head=2)

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(seed=0):
    return rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=seed, device="cpu").double()


PROMPTS = ["07+42=", "13+08=", "55+55="]
CHOSEN = ["49", "21", "110"]
REJECTED = ["48", "2", "1100"]


# ============================== layout and sequence log-probs ==============================


def test_encode_preference_pairs_hand_worked_layout():
    b = encode_preference_pairs(TOK, ["1+2="], ["3"], ["34"])
    enc = {c: TOK.convert_tokens_to_ids(c) for c in "1+2=34"}
    bos, eos, pad = TOK.bos_token_id, TOK.eos_token_id, TOK.pad_token_id
    assert b["input_ids"].tolist() == [[bos, enc["1"], enc["+"], enc["2"], enc["="], enc["3"], eos, pad],
                                       [bos, enc["1"], enc["+"], enc["2"], enc["="], enc["3"], enc["4"], eos]]
    assert b["attention_mask"].tolist() == [[True] * 7 + [False], [True] * 8]
    assert b["completion_mask"].tolist() == [[False] * 5 + [True, True, False], [False] * 5 + [True] * 3]


def test_encode_preference_pairs_equals_trls_collator():
    trl_dpo = pytest.importorskip("trl.trainer.dpo_trainer", reason="compares with TRL's collator (the `trl` extra)")
    b = encode_preference_pairs(TOK, PROMPTS, CHOSEN, REJECTED)
    examples = [{"prompt_ids": [TOK.bos_token_id] + TOK(p, add_special_tokens=False).input_ids,
                 "chosen_ids": TOK(c, add_special_tokens=False).input_ids + [TOK.eos_token_id],
                 "rejected_ids": TOK(r, add_special_tokens=False).input_ids + [TOK.eos_token_id]}
                for p, c, r in zip(PROMPTS, CHOSEN, REJECTED)]
    want = trl_dpo.DataCollatorForPreference(pad_token_id=TOK.pad_token_id)(examples)
    for key in ("input_ids", "attention_mask", "completion_mask"):
        assert torch.equal(b[key].long(), want[key].long()), key


def test_sequence_log_probs_equals_the_book_scorer_and_a_prefix_loop():
    model = _model()
    b = encode_preference_pairs(TOK, PROMPTS, CHOSEN, REJECTED)
    got = sequence_log_probs(model, **b)
    # the book's scorer: left-padded prompts (all width 7 here), right-padded completions with a mask
    P = 7
    book = rl.lm.completion_log_probs(model, b["input_ids"][:, :P], b["input_ids"][:, P:],
                                      completion_mask=b["completion_mask"][:, P:]).sum(-1)
    assert torch.allclose(got, book, atol=1e-12)
    # a loop: one forward pass per response token, on the unpadded prefix
    for row in range(len(got)):
        ids, mask = b["input_ids"][row], b["completion_mask"][row]
        total = 0.0
        for t in torch.nonzero(mask).flatten().tolist():
            logits = model(input_ids=ids[None, :t]).logits[0, -1]
            total += torch.log_softmax(logits, -1)[ids[t]].item()
        assert abs(got[row].item() - total) < 1e-10


def test_compute_per_instance_dpo_loss_equals_a_manual_computation_and_trains_only_lm():
    lm, lm_ref = _model(0), _model(1)
    beta = 0.5
    loss = compute_per_instance_dpo_loss(lm, lm_ref, TOK, beta, "07+42=", "49", "4")

    def seq_logp(model, response):  # by hand: BOS + prompt + response + EOS, sum of the response tokens' log-probs
        ids = [TOK.bos_token_id] + TOK("07+42=", add_special_tokens=False).input_ids
        resp = TOK(response, add_special_tokens=False).input_ids + [TOK.eos_token_id]
        full = torch.tensor([ids + resp])
        logp = torch.log_softmax(model(input_ids=full).logits[0], -1)
        return sum(logp[len(ids) - 1 + k, tok] for k, tok in enumerate(resp))

    with torch.no_grad():
        h = (seq_logp(lm, "49") - seq_logp(lm_ref, "49")) - (seq_logp(lm, "4") - seq_logp(lm_ref, "4"))
        want = -torch.nn.functional.logsigmoid(beta * h)
    assert loss.dim() == 0 and abs(loss.item() - want.item()) < 1e-12
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in lm.parameters())
    assert all(p.grad is None for p in lm_ref.parameters())
    # identical models: h = 0 and the loss is log 2
    same = compute_per_instance_dpo_loss(lm, copy.deepcopy(lm), TOK, beta, "07+42=", "49", "4")
    assert abs(same.item() - 0.6931471805599453) < 1e-12


def test_per_instance_dpo_gradient_is_minus_beta_weight_times_the_sequence_score_difference():
    """Through the transformer: ∇L = −β·σ(r̂_r − r̂_c)·(∇log π(y_c|x) − ∇log π(y_r|x)), each score by autograd."""
    lm, lm_ref = _model(0), _model(1)
    beta = 0.7
    b = encode_preference_pairs(TOK, ["55+55="], ["110"], ["11"])
    params = list(lm.parameters())
    grad_loss = torch.autograd.grad(compute_per_instance_dpo_loss(lm, lm_ref, TOK, beta, "55+55=", "110", "11"), params)
    seq = sequence_log_probs(lm, **b)
    score_c = torch.autograd.grad(seq[0], params, retain_graph=True)
    score_r = torch.autograd.grad(seq[1], params)
    with torch.no_grad():
        ref = sequence_log_probs(lm_ref, **b)
        weight = rl.dpo_gradient_weight(rl.implicit_rewards(seq[:1], ref[:1], beta), rl.implicit_rewards(seq[1:], ref[1:], beta))
    assert 0.01 < weight.item() < 0.99
    for g, c, r in zip(grad_loss, score_c, score_r):
        assert torch.allclose(g, -beta * weight * (c - r), atol=1e-13)


def test_preference_layout_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="rejected"):
        encode_preference_pairs(TOK, ["1+2="], ["3"], ["3", "4"])
    with pytest.raises(ValueError, match="prompts"):
        encode_preference_pairs(TOK, "1+2=", ["3"], ["4"])
    with pytest.raises(ValueError, match="beta"):
        compute_per_instance_dpo_loss(_model(), _model(1), TOK, 0.0, "1+2=", "3", "4")
    b = encode_preference_pairs(TOK, ["1+2="], ["3"], ["4"])
    with pytest.raises(ValueError, match="completion_mask"):
        sequence_log_probs(_model(), b["input_ids"], b["attention_mask"], b["completion_mask"][:, :-1])


# ============================== the reward model ==============================


def test_sequence_rewards_reads_the_last_real_token_whatever_the_padding():
    rm = build_reward_model(_model(), init_std=0.1)
    b = encode_preference_pairs(TOK, PROMPTS, CHOSEN, REJECTED)
    got = sequence_rewards(rm, b["input_ids"], b["attention_mask"])
    for row in range(len(got)):
        ids = b["input_ids"][row][b["attention_mask"][row]]
        alone = rm(input_ids=ids[None]).logits[0, -1, 0]
        assert abs(got[row].item() - alone.item()) < 1e-12
    # the same rows left-padded
    width = b["input_ids"].shape[1]
    left = torch.full_like(b["input_ids"], TOK.pad_token_id)
    left_mask = torch.zeros_like(b["attention_mask"])
    for row in range(len(got)):
        ids = b["input_ids"][row][b["attention_mask"][row]]
        left[row, width - len(ids):], left_mask[row, width - len(ids):] = ids, True
    assert torch.allclose(sequence_rewards(rm, left, left_mask), got, atol=1e-12)
    assert torch.equal(sequence_rewards(build_reward_model(_model()), b["input_ids"], b["attention_mask"]),
                       torch.zeros(6, dtype=DT))  # init_std = 0: every reward starts at 0


def _stale(model, seed=123):
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = 10.0 * torch.randn(p.shape, generator=g, dtype=p.dtype)


def test_reward_model_step_is_minus_lr_times_the_gradient_of_the_bradley_terry_loss():
    rm = build_reward_model(_model(), init_std=0.1)
    b = encode_preference_pairs(TOK, PROMPTS, CHOSEN, REJECTED)
    before = copy.deepcopy(rm)
    # the loss written out: mean over pairs of log(1 + exp(r_rejected − r_chosen)), r at each row's EOS
    out = before(input_ids=b["input_ids"], attention_mask=b["attention_mask"].long()).logits[..., 0]
    last = b["attention_mask"].long().sum(-1) - 1
    r = out[torch.arange(6), last]
    want_loss = torch.log1p(torch.exp(r[3:] - r[:3])).mean()
    grads = torch.autograd.grad(want_loss, list(before.parameters()))
    lr = 0.5
    opt = torch.optim.SGD(rm.parameters(), lr=lr)
    _stale(rm)  # a step that skips zero_grad would add these
    metrics = reward_model_step(rm, opt, b)
    assert abs(metrics["loss"] - want_loss.item()) < 1e-12
    assert metrics["accuracy"] == pytest.approx((r[:3] > r[3:]).double().mean().item())
    moved = 0.0
    for p_after, p_before, g in zip(rm.parameters(), before.parameters(), grads):
        assert torch.allclose(p_after, p_before - lr * g, atol=1e-12)
        moved += (p_after - p_before).abs().sum().item()
    assert moved > 1e-3  # the step happened


def test_reward_model_step_raises_the_chosen_minus_rejected_margin():
    rm = build_reward_model(_model(), init_std=0.1)
    b = encode_preference_pairs(TOK, PROMPTS, CHOSEN, REJECTED)
    opt = torch.optim.SGD(rm.parameters(), lr=0.05)
    first = reward_model_step(rm, opt, b)["margin"]
    with torch.no_grad():
        r = sequence_rewards(rm, b["input_ids"], b["attention_mask"])
    assert (r[:3] - r[3:]).mean().item() > first


def _length_pairs(n, seed):
    """Prompts of the task; the shorter of two random digit strings is preferred (1–2 vs 4–6 digits)."""
    g = torch.Generator().manual_seed(seed)
    problems = rl.lm.AdditionTask().sample_problems(n, g)

    def digits(low, high):
        length = int(torch.randint(low, high + 1, (1,), generator=g))
        return "".join(str(int(d)) for d in torch.randint(0, 10, (length,), generator=g))

    short = [digits(1, 2) for _ in range(n)]
    long = [digits(4, 6) for _ in range(n)]
    return [p.prompt for p in problems], short, long


def test_train_reward_model_learns_to_prefer_shorter_answers():
    torch.manual_seed(0)
    rm = build_reward_model(rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu"), init_std=0.02)
    prompts, short, long = _length_pairs(256, seed=0)
    test_prompts, test_short, test_long = _length_pairs(200, seed=1)
    assert reward_model_accuracy(rm, TOK, test_prompts, test_short, test_long) < 0.9  # not already solved at init
    config = RewardModelConfig(num_steps=60, batch_size=32, lr=3e-3, seed=0, device="cpu")
    hist = train_reward_model(rm, TOK, prompts, short, long, config, progress=False)
    assert len(hist["loss"]) == 60 and hist["loss"][-10:].mean() < 0.1
    assert reward_model_accuracy(rm, TOK, test_prompts, test_short, test_long) >= 0.98
    # the labels flipped: it learns the opposite preference (the sign of the loss is the labels' sign)
    flipped = build_reward_model(rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu"), init_std=0.02)
    train_reward_model(flipped, TOK, prompts, long, short, config, progress=False)
    assert reward_model_accuracy(flipped, TOK, test_prompts, test_short, test_long) <= 0.02


def test_reward_model_config_fields_are_used():
    prompts, short, long = _length_pairs(64, seed=2)

    def run(**fields):
        rm = build_reward_model(_model(), init_std=0.02)
        hist = train_reward_model(rm, TOK, prompts, short, long, RewardModelConfig(device="cpu", **{
            "num_steps": 3, "batch_size": 4, "lr": 1e-3, "seed": 0, **fields}), progress=False)
        return rm, hist

    base_rm, base = run()
    assert len(base["loss"]) == 3 and len(run(num_steps=5)[1]["loss"]) == 5
    assert run(seed=1)[1]["loss"][0] != base["loss"][0]  # the seed picks the minibatches
    assert run(batch_size=16)[1]["loss"][0] != base["loss"][0]
    # lr: Adam's first step moves each parameter by about lr
    rm0 = build_reward_model(_model(), init_std=0.02)
    rm1, _ = run(num_steps=1, lr=1e-2)
    step = max((a - b).abs().max().item() for a, b in zip(rm1.parameters(), rm0.parameters()))
    assert 0.5e-2 < step < 1.5e-2
    # max_grad_norm: the logged norm is before clipping; a clip far below it shrinks Adam's first step
    # (every clipped entry is ≤ 1e-10, far below Adam's ε = 1e-8: a step ≤ lr/100)
    rm_clipped, clipped = run(num_steps=1, lr=1e-2, max_grad_norm=1e-10)
    assert clipped["grad_norm"][0] == pytest.approx(run(num_steps=1, lr=1e-2)[1]["grad_norm"][0])
    assert clipped["grad_norm"][0] > 1e-3
    step = max((a - b).abs().max().item() for a, b in zip(rm_clipped.parameters(), rm0.parameters()))
    assert step < 0.2e-2
    for bad in (dict(num_steps=0), dict(batch_size=0), dict(lr=0.0), dict(max_grad_norm=0.0), dict(weight_decay=-1.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RewardModelConfig(**bad)


def test_reward_model_step_clips_the_gradient_norm():
    """With SGD the clipped step is the unclipped one scaled by c/‖g‖."""
    b = encode_preference_pairs(TOK, PROMPTS, CHOSEN, REJECTED)
    steps = []
    for clip in (float("inf"), 1e-3):
        rm = build_reward_model(_model(), init_std=0.1)
        before = [p.detach().clone() for p in rm.parameters()]
        norm = reward_model_step(rm, torch.optim.SGD(rm.parameters(), lr=1.0), b, max_grad_norm=clip)["grad_norm"]
        steps.append(torch.cat([(p.detach() - q).reshape(-1) for p, q in zip(rm.parameters(), before)]))
    assert norm > 1e-3
    assert torch.allclose(steps[1], steps[0] * 1e-3 / norm, atol=1e-12)


def test_reward_model_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="reward_model"):
        sequence_rewards(_model(), torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.bool))
    rm = build_reward_model(_model())
    with pytest.raises(ValueError, match="attention_mask"):
        sequence_rewards(rm, torch.ones(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="attention_mask"):
        sequence_rewards(rm, torch.ones(2, 3, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool))
