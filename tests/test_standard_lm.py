"""Course-standard LM pieces (rlbook.lm.standard) and the book's loops built on rlbook.steps."""

from types import SimpleNamespace

import pytest
import torch

import rlbook as rl
import rlbook.algos.grpo as grpo_module
import rlbook.lm.sft as sft_module
from rlbook.lm.sft import _lr_factor

TOK = rl.lm.build_char_tokenizer()  # <pad>=0 <s>=1 </s>=2 <unk>=3, '0'..'9'=4..13, '+'=14, '='=15
PAD, BOS, EOS = 0, 1, 2


def tiny_policy(seed=0):
    return rl.lm.build_policy(rl.lm.policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=seed, device="cpu")


POLICY = tiny_policy()


# ------------------------------------------------------------------------------ tokenize


def test_tokenize_hand_worked_ids():
    out = rl.lm.tokenize_prompt_and_output(["<s>07+42=", "<s>1+2="], ["49</s>", "3</s>"], TOK)
    # row 0: <s> 0 7 + 4 2 = | 4 9 </s>  (10 ids);  row 1: <s> 1 + 2 = | 3 </s> (7 ids) + 3 pads
    row0 = [BOS, 4, 11, 14, 8, 6, 15, 8, 13, EOS]
    row1 = [BOS, 5, 14, 6, 15, 7, EOS, PAD, PAD, PAD]
    assert out["input_ids"].tolist() == [row0[:-1], row1[:-1]]
    assert out["labels"].tolist() == [row0[1:], row1[1:]]
    # labels that are output tokens: row 0 columns 6-8 (4, 9, </s>), row 1 columns 4-5 (3, </s>)
    assert out["response_mask"].tolist() == [[False] * 6 + [True] * 3, [False] * 4 + [True] * 2 + [False] * 3]
    assert {k: (v.shape, v.dtype) for k, v in out.items()} == {
        "input_ids": ((2, 9), torch.long), "labels": ((2, 9), torch.long), "response_mask": ((2, 9), torch.bool)}


def test_tokenize_encodes_prompt_and_output_separately_without_special_tokens():
    # a tokenizer that would add BOS by default must not add it here; empty output → empty mask row
    out = rl.lm.tokenize_prompt_and_output(["1+", "12+3="], ["", "15"], TOK)
    assert out["input_ids"].tolist() == [[5, 14, PAD, PAD, PAD, PAD], [5, 6, 14, 7, 15, 5]]
    assert out["labels"].tolist() == [[14, PAD, PAD, PAD, PAD, PAD], [6, 14, 7, 15, 5, 9]]
    assert out["response_mask"].tolist() == [[False] * 6, [False] * 4 + [True] * 2]
    # an empty prompt: the first output token is never a label
    out = rl.lm.tokenize_prompt_and_output([""], ["123"], TOK)
    assert out["labels"].tolist() == [[6, 7]] and out["response_mask"].tolist() == [[True, True]]


def test_tokenize_errors_name_the_argument():
    with pytest.raises(ValueError, match="output_strs"):
        rl.lm.tokenize_prompt_and_output(["1+2="], ["3", "4"], TOK)
    with pytest.raises(ValueError, match="prompt_strs"):
        rl.lm.tokenize_prompt_and_output([], [], TOK)
    with pytest.raises(ValueError, match="prompt_strs"):
        rl.lm.tokenize_prompt_and_output("1+2=", ["3"], TOK)
    with pytest.raises(ValueError, match="output_strs"):
        rl.lm.tokenize_prompt_and_output(["1+2="], [3], TOK)
    with pytest.raises(ValueError, match="tokenizer"):
        rl.lm.tokenize_prompt_and_output(["1"], ["2"], SimpleNamespace(pad_token_id=None))
    with pytest.raises(ValueError, match="fewer than 2 tokens"):
        rl.lm.tokenize_prompt_and_output(["1"], [""], TOK)


# ------------------------------------------------------------------------ log-probs


def loop_log_probs_and_entropy(model, input_ids, labels):
    """Oracle: one forward per prefix, read the last column's distribution."""
    B, T = input_ids.shape
    lp, ent = torch.zeros(B, T), torch.zeros(B, T)
    with torch.no_grad():
        for i in range(B):
            for t in range(T):
                logits = model(input_ids=input_ids[i : i + 1, : t + 1]).logits[0, -1].double()
                p = torch.softmax(logits, -1)
                lp[i, t] = torch.log(p[labels[i, t]])
                ent[i, t] = -(p * torch.log(p)).sum()
    return lp, ent


def test_get_response_log_probs_matches_a_loop_oracle():
    batch = rl.lm.tokenize_prompt_and_output(["<s>07+42=", "<s>1+2="], ["49</s>", "3</s>"], TOK)
    out = rl.lm.get_response_log_probs(POLICY, batch["input_ids"], batch["labels"], return_token_entropy=True)
    lp, ent = loop_log_probs_and_entropy(POLICY, batch["input_ids"], batch["labels"])
    assert out["log_probs"].dtype == torch.float32 and out["log_probs"].shape == (2, 9)
    torch.testing.assert_close(out["log_probs"], lp, atol=1e-5, rtol=1e-5)  # padding columns too: no masking
    torch.testing.assert_close(out["token_entropy"], ent, atol=1e-5, rtol=1e-5)
    assert set(rl.lm.get_response_log_probs(POLICY, batch["input_ids"], batch["labels"])) == {"log_probs"}


def test_get_response_log_probs_agrees_with_completion_log_probs_on_the_book_model():
    policy = rl.lm.build_policy(rl.lm.policy_config(TOK, size="small"), seed=1, device="cpu")
    prompts, outputs = ["07+42=", "99+01=", "12+34="], ["49</s>", "1</s>", "046</s>"]
    prompt_ids, prompt_mask = rl.lm.encode_prompts(TOK, prompts)  # <s> + prompt, no padding
    rows = [TOK(o, add_special_tokens=False).input_ids for o in outputs]
    completion_ids = torch.tensor([r + [PAD] * (4 - len(r)) for r in rows])
    completion_mask = torch.tensor([[j < len(r) for j in range(4)] for r in rows])
    expected, expected_entropy = rl.lm.completion_log_probs(policy, prompt_ids, completion_ids, prompt_mask,
                                                            completion_mask=completion_mask, with_entropy=True)
    batch = rl.lm.tokenize_prompt_and_output(["<s>" + p for p in prompts], outputs, TOK)
    out = rl.lm.get_response_log_probs(policy, batch["input_ids"], batch["labels"], return_token_entropy=True)
    mask = batch["response_mask"]
    assert mask.sum(-1).tolist() == completion_mask.sum(-1).tolist()
    torch.testing.assert_close(out["log_probs"][mask], expected[completion_mask])
    torch.testing.assert_close(out["token_entropy"][mask], expected_entropy[completion_mask])


def test_get_response_log_probs_gradient_reaches_the_parameters():
    policy = tiny_policy()
    batch = rl.lm.tokenize_prompt_and_output(["<s>1+2="], ["3</s>"], TOK)
    rl.lm.get_response_log_probs(policy, batch["input_ids"], batch["labels"])["log_probs"].sum().backward()
    assert all(p.grad is not None for p in policy.parameters())


def test_get_response_log_probs_errors():
    ids = torch.tensor([[1, 4, 5]])
    with pytest.raises(ValueError, match="labels"):
        rl.lm.get_response_log_probs(POLICY, ids, ids[:, :2])
    with pytest.raises(ValueError, match="input_ids"):
        rl.lm.get_response_log_probs(POLICY, ids.float(), ids)
    with pytest.raises(ValueError, match="input_ids"):
        rl.lm.get_response_log_probs(POLICY, ids[0], ids[0])
    with pytest.raises(ValueError, match="tokens"):
        rl.lm.get_response_log_probs(POLICY, ids, torch.tensor([[1, 4, 99]]))
    with pytest.raises(ValueError, match="model"):
        rl.lm.get_response_log_probs(lambda input_ids: torch.zeros(1, 2, 5), ids, ids)


# ------------------------------------------- the standard pieces end to end, with accumulation


def grads(model):
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("kind", ["sft", "grpo"])
def test_accumulation_on_a_model_k_micro_batches_equal_one_batch(kind):
    prompts = ["<s>07+42=", "<s>1+2=", "<s>99+01=", "<s>3+3="]
    outputs = ["49</s>", "3</s>", "100</s>", ""]  # different lengths, one empty response
    batch = rl.lm.tokenize_prompt_and_output(prompts, outputs, TOK)
    advantages = torch.tensor([[1.0], [-0.5], [2.0], [0.3]])
    with torch.no_grad():
        old = rl.lm.get_response_log_probs(POLICY, batch["input_ids"], batch["labels"])["log_probs"] + 0.1

    def step(model, rows, k):
        lp = rl.lm.get_response_log_probs(model, batch["input_ids"][rows], batch["labels"][rows])["log_probs"]
        mask = batch["response_mask"][rows]
        if kind == "sft":
            return rl.sft_microbatch_train_step(lp, mask, k, normalize_constant=3.0)[0]
        return rl.grpo_microbatch_train_step(lp, mask, k, "grpo_clip", advantages=advantages[rows],
                                             old_log_probs=old[rows], cliprange=0.2)[0]

    full, micro = tiny_policy(), tiny_policy()
    loss = step(full, slice(0, 4), 1)
    total = step(micro, slice(0, 2), 2) + step(micro, slice(2, 4), 2)
    for a, b in zip(grads(micro), grads(full)):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert total.item() == pytest.approx(loss.item(), abs=1e-6)


# ---------------------------------------------------- the book's loops use the standard steps


def old_sft_loop(policy, config):
    """train_sft as it was written before the standard steps: −Σ m·log π / N, inline."""
    generator = torch.Generator().manual_seed(config.seed)
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, config.warmup_steps, config.num_steps))
    losses = []
    for _ in range(config.num_steps):
        prompt_ids, prompt_mask, target_ids, target_mask, _ = rl.lm.sft_batch(
            TOK, rl.lm.AdditionTask(), config.batch_size, config.label_noise, generator, config.carry_noise)
        log_probs = rl.lm.completion_log_probs(policy, prompt_ids, target_ids, prompt_mask, completion_mask=target_mask)
        loss = -log_probs.sum() / target_mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def test_train_sft_is_bit_identical_to_the_inline_token_mean(monkeypatch):
    config = rl.lm.SFTConfig(num_steps=4, batch_size=32, device="cpu")
    calls = []
    monkeypatch.setattr(sft_module, "sft_microbatch_train_step",
                        lambda *a, **kw: calls.append(1) or rl.sft_microbatch_train_step(*a, **kw))
    new, old = tiny_policy(), tiny_policy()
    hist = rl.lm.train_sft(new, TOK, rl.lm.AdditionTask(), config, progress=False)
    losses = old_sft_loop(old, config)
    assert len(calls) == config.num_steps  # every update goes through the standard step
    assert hist["loss"].tolist() == losses
    assert all(torch.equal(a, b) for a, b in zip(new.state_dict().values(), old.state_dict().values()))


def test_grpo_step_goes_through_grpo_microbatch_train_step(monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append((args[3], kwargs["cliprange"], kwargs["kl_coef"]))
        return rl.grpo_microbatch_train_step(*args, **kwargs)

    monkeypatch.setattr(grpo_module, "grpo_microbatch_train_step", spy)
    config = rl.GRPOConfig(group_size=4, prompts_per_step=2, num_steps=2, num_inner_epochs=2, max_new_tokens=5,
                           kl_coef=0.05, clip_eps_high=0.28, per_token_loss="cispo", device="cpu")
    rl.train_grpo(tiny_policy(), TOK, rl.lm.AdditionTask(), config, progress=False)
    assert calls == [("cispo", (0.2, 0.28), 0.05)] * 4  # μ = 2 passes × 2 steps, every loss through the one path
