"""The scratchpad addition task: working format, free-length verifier, split, SFT data and label noise."""

import hashlib
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlbook.lm.sft import _sft_fingerprint, sft_batch
from rlbook.lm.task import AdditionTask, Problem, ScratchpadAdditionTask, corrupt_answer
from rlbook.lm.tokenizer import DEFAULT_ALPHABET, build_char_tokenizer

PLAIN = AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0)
TASK = ScratchpadAdditionTask(num_digits=2, held_out_fraction=0.1, seed=0, scratchpad_prob=0.5)
TOK = build_char_tokenizer(TASK.alphabet)


def working_loop(a: int, b: int, n: int) -> str:
    """Oracle: schoolbook addition on the digit strings, right to left, one column per step."""
    text, carry = "", 0
    for x, y in zip(reversed(f"{a:0{n}d}"), reversed(f"{b:0{n}d}")):
        total = int(x) + int(y) + carry
        text += f"{x}+{y}" + ("+1" if carry else "") + f"={total};"
        carry = 1 if total > 9 else 0
    return text


def test_alphabets_and_tokenizer():
    assert PLAIN.alphabet == DEFAULT_ALPHABET == "0123456789+="
    assert TASK.alphabet == "0123456789+=;"
    text = "7+5=12;2+4+1=7;072</s>"
    ids = TOK(text, add_special_tokens=False).input_ids
    assert len(ids) == 19 and TOK.unk_token_id not in ids
    assert TOK.decode(ids, skip_special_tokens=False) == text


def test_reward_hand_worked_cases():
    r = TASK.reward
    assert r("27+45=", "072</s>") == 1.0  # right, direct
    assert r("27+45=", "7+5=12;2+4+1=7;072</s>") == 1.0  # right, with the reference working
    assert r("27+45=", "7+5=11;9+9=0;072</s>") == 1.0  # right answer after wrong working: working unchecked
    assert r("27+45=", ";;;+=;072</s>") == 1.0  # any alphabet characters before the last ";"
    assert r("27+45=", "7+5=12;2+4+1=7;071</s>") == 0.0  # wrong final answer
    assert r("27+45=", "7+5=12;2+4+1=7;072") == 0.0  # missing EOS (truncated by the budget)
    assert r("27+45=", "7+5=12;2+4+1=7;07") == 0.0  # truncated mid-answer
    assert r("27+45=", "7+5=12;2+4+1=7;</s>") == 0.0  # empty final segment
    assert r("27+45=", "7+5=12;2+4+1=7;72</s>") == 0.0  # missing leading zero
    assert r("27+45=", "072;</s>") == 0.0  # the answer in the working, not the final segment
    assert r("27+45=", "7+5=12;2+4+1=7=072</s>") == 0.0  # final segment is "2+4+1=7=072"
    for bad in ("7+5=12;<pad>072</s>", "<s>072</s>", "07<unk>2</s>", "072</s></s>", "072<pad></s>", "072 </s>"):
        assert r("27+45=", bad) == 0.0, bad
    assert r("99+99=", "9+9=18;9+9+1=19;198</s>") == 1.0
    with pytest.raises(ValueError, match="prompt"):
        r("7+45=", "072</s>")
    with pytest.raises(ValueError, match="completion"):
        r("27+45=", None)


def test_format_reward_cases():
    f = TASK.format_reward
    assert f("27+45=", "071</s>") == 1.0  # wrong but well-formed
    assert f("27+45=", "1+1=3;071</s>") == 1.0
    assert f("27+45=", "7+5=12;2+4+1=7;72</s>") == 0.0
    assert f("27+45=", "7+5=12;0072</s>") == 0.0
    assert f("27+45=", "7+5=12;<pad>072</s>") == 0.0
    assert f("27+45=", "7+5=12;072") == 0.0
    for bad in ("27+4=", "x", 27):  # the prompt is checked as in reward, even for a well-formed completion
        with pytest.raises(ValueError, match="prompt"):
            f(bad, "071</s>")


def test_working_matches_column_loop_for_all_two_digit_pairs():
    for a in range(100):
        for b in range(100):
            working = TASK.working_for(a, b)
            assert working == working_loop(a, b, 2), (a, b)
            assert TASK.reward(TASK.prompt_for(a, b), working + TASK.answer_for(a, b) + "</s>") == 1.0
            assert TASK._columns(a, b, units_carry=True)[1] == TASK.answer_for(a, b)
            slip = TASK._columns(a, b, units_carry=False)[1]
            assert slip == PLAIN.carry_slip(Problem(TASK.prompt_for(a, b), "")), (a, b)


@pytest.mark.parametrize("num_digits", [1, 3])
def test_working_matches_column_loop_other_widths(num_digits):
    task = ScratchpadAdditionTask(num_digits=num_digits, scratchpad_prob=0.5)
    g = torch.Generator().manual_seed(0)
    pairs = torch.randint(10**num_digits, (300, 2), generator=g).tolist() + [[10**num_digits - 1] * 2, [0, 0]]
    for a, b in pairs:
        assert task.working_for(a, b) == working_loop(a, b, num_digits)


def test_carry_handling():
    w = TASK.working_for
    assert w(27, 45) == "7+5=12;2+4+1=7;"
    assert w(7, 42) == "7+2=9;0+4=4;"  # no carry: no "+1"
    assert w(55, 50) == "5+0=5;5+5=10;"  # a tens carry goes to the answer's leading digit
    assert w(5, 5) == "5+5=10;0+0+1=1;"  # a carry into a column of zeros
    assert w(99, 99) == "9+9=18;9+9+1=19;"
    assert w(0, 0) == "0+0=0;0+0=0;"
    three = ScratchpadAdditionTask(num_digits=3)
    assert three.working_for(999, 1) == "9+1=10;9+0+1=10;9+0+1=10;"  # a carry chain
    assert three.answer_for(999, 1) == "1000"


def test_max_completion_tokens_is_the_longest_reference():
    longest = max(len(TOK(TASK.working_for(a, b) + TASK.answer_for(a, b) + "</s>", add_special_tokens=False).input_ids)
                  for a in range(100) for b in range(100))
    assert TASK.max_completion_tokens == longest == 20
    assert [ScratchpadAdditionTask(num_digits=n).max_completion_tokens for n in (1, 2, 3)] == [10, 20, 30]
    assert PLAIN.max_completion_tokens == 4


def test_split_is_the_plain_tasks():
    for seed in (0, 3):
        plain, pad = AdditionTask(seed=seed), ScratchpadAdditionTask(seed=seed, scratchpad_prob=0.7)
        assert pad.held_out_problems() == plain.held_out_problems()  # direct form
        assert torch.equal(pad._train_codes, plain._train_codes)
        assert (pad.num_train, pad.num_held_out) == (plain.num_train, plain.num_held_out)
    held = {p.prompt for p in TASK.held_out_problems()}
    drawn = TASK.sample_problems(3000, torch.Generator().manual_seed(1))
    assert not held & {p.prompt for p in drawn}


def test_sample_problems_reproducible_and_share_of_working():
    a = TASK.sample_problems(4000, torch.Generator().manual_seed(7))
    b = TASK.sample_problems(4000, torch.Generator().manual_seed(7))
    assert a == b
    # the problem draws are the plain task's (the form draw comes after them)
    assert [p.prompt for p in a] == [p.prompt for p in PLAIN.sample_problems(4000, torch.Generator().manual_seed(7))]
    for p in a:
        x, y = TASK._parse(p.prompt)
        assert p.answer in (TASK.answer_for(x, y), TASK.working_for(x, y) + TASK.answer_for(x, y))
        assert TASK.reward(p.prompt, p.answer + "</s>") == 1.0
        assert TASK.format_reward(p.prompt, p.answer + "</s>") == 1.0
    for prob in (0.2, 0.5, 0.9):
        task = ScratchpadAdditionTask(scratchpad_prob=prob)
        n = 4000
        share = sum(";" in p.answer for p in task.sample_problems(n, torch.Generator().manual_seed(3))) / n
        assert abs(share - prob) < 4 * math.sqrt(prob * (1 - prob) / n), (prob, share)
    g = torch.Generator().manual_seed(0)
    assert not any(";" in p.answer for p in ScratchpadAdditionTask(scratchpad_prob=0.0).sample_problems(200, g))
    assert all(";" in p.answer for p in ScratchpadAdditionTask(scratchpad_prob=1.0).sample_problems(200, g))


@given(st.integers(0, 99), st.integers(0, 99), st.booleans(), st.integers(0, 2**31 - 1))
def test_corrupt_changes_exactly_one_digit_of_the_final_segment(a, b, working, seed):
    answer = (TASK.working_for(a, b) if working else "") + TASK.answer_for(a, b)
    noisy = TASK.corrupt(answer, torch.Generator().manual_seed(seed))
    head, _, final = noisy.rpartition(";")
    true_head, _, true_final = answer.rpartition(";")
    assert head == true_head and len(final) == 3 and final.isdigit()
    assert sum(x != y for x, y in zip(final, true_final)) == 1
    # the same generator calls as corrupt_answer on the final segment
    assert final == corrupt_answer(true_final, torch.Generator().manual_seed(seed))
    assert PLAIN.corrupt(true_final, torch.Generator().manual_seed(seed)) == final


def test_carry_slip_keeps_the_form_and_the_working_consistent():
    assert TASK.carry_slip(Problem("07+45=", "7+5=12;0+4+1=5;052")) == "7+5=12;0+4=4;042"
    assert TASK.carry_slip(Problem("07+45=", "052")) == "042"
    assert TASK.carry_slip(Problem("07+42=", "7+2=9;0+4=4;049")) == "7+2=9;0+4=4;049"  # no units carry
    assert TASK.carry_slip(Problem("99+99=", "x;198")) == "9+9=18;9+9=18;188"
    assert TASK.carry_slip(Problem("55+58=", "x;113")) == "5+8=13;5+5=10;103"  # tens carry kept
    with pytest.raises(ValueError, match="prompt"):
        TASK.carry_slip(Problem("7+5=", ""))


def _decoded_targets(tok, target_ids, target_mask):
    rows = [ids[m].tolist() for ids, m in zip(target_ids, target_mask)]
    assert all(r[-1] == tok.eos_token_id for r in rows)
    return [tok.decode(r[:-1], skip_special_tokens=False) for r in rows]


def test_sft_batch_targets_decode_to_the_answers():
    problems = TASK.sample_problems(64, torch.Generator().manual_seed(5))
    prompt_ids, _, target_ids, target_mask, noisy = sft_batch(TOK, TASK, 64, 0.0, torch.Generator().manual_seed(5))
    assert _decoded_targets(TOK, target_ids, target_mask) == [p.answer for p in problems]
    assert target_ids.shape[1] == max(len(p.answer) for p in problems) + 1 and not noisy.any()
    assert TOK.batch_decode(prompt_ids[:, 1:]) == [p.prompt for p in problems]


def test_sft_batch_noise_on_the_scratchpad_task():
    problems = TASK.sample_problems(256, torch.Generator().manual_seed(2))
    generator = torch.Generator().manual_seed(2)
    *_, target_ids, target_mask, noisy = sft_batch(TOK, TASK, 256, 0.5, generator, carry_noise=0.3)
    labels = _decoded_targets(TOK, target_ids, target_mask)
    assert noisy.tolist() == [x != p.answer for x, p in zip(labels, problems)]
    assert 0.4 < noisy.float().mean() < 0.8
    for label, p in zip(labels, problems):
        assert (";" in label) == (";" in p.answer)  # the form is kept
        assert TASK.format_reward(p.prompt, label + "</s>") == 1.0


# sha256[:16] of each tensor sft_batch returned for the plain task, recorded before the scratchpad task existed
PLAIN_SFT_BATCH = {
    (0.6, 0.0): ["042933bc4daddb25", "3cd0285c92983397", "9850fec8f5209d7b", "6caf38d537984e26", "0ab0e21be640d5ad"],
    (0.5, 0.6): ["042933bc4daddb25", "3cd0285c92983397", "c1875e6eb036fe44", "6caf38d537984e26", "8a782bfded56b16a"],
}


@pytest.mark.parametrize("label_noise, carry_noise", list(PLAIN_SFT_BATCH))
def test_plain_sft_batch_is_unchanged(label_noise, carry_noise):
    out = sft_batch(build_char_tokenizer(), PLAIN, 128, label_noise, torch.Generator().manual_seed(0), carry_noise)
    hashes = [hashlib.sha256(t.numpy().tobytes()).hexdigest()[:16] for t in out]
    assert hashes == PLAIN_SFT_BATCH[label_noise, carry_noise]


def test_plain_sample_stream_is_unchanged():
    g = torch.Generator().manual_seed(5)
    assert [p.answer for p in PLAIN.sample_problems(5, g)] == ["123", "164", "140", "187", "114"]
    assert torch.rand(1, generator=g).item() == pytest.approx(0.1166452169418335, abs=1e-12)


def test_sft_fingerprint_names_scratchpad_prob_only_for_the_scratchpad_task():
    from rlbook.lm.model import policy_config
    from rlbook.lm.sft import SFTConfig

    cpu = torch.device("cpu")
    plain = _sft_fingerprint(policy_config(build_char_tokenizer()), PLAIN, SFTConfig(), cpu)["task"]
    assert plain == {"type": "AdditionTask", "num_digits": 2, "held_out_fraction": 0.1, "seed": 0}
    pad = _sft_fingerprint(policy_config(TOK), TASK, SFTConfig(), cpu)["task"]
    assert pad == {"type": "ScratchpadAdditionTask", "num_digits": 2, "held_out_fraction": 0.1, "seed": 0,
                   "scratchpad_prob": 0.5}


def test_bad_arguments():
    for bad in (-0.1, 1.5, float("nan"), "x"):
        with pytest.raises(ValueError, match="scratchpad_prob"):
            ScratchpadAdditionTask(scratchpad_prob=bad)
    with pytest.raises(ValueError, match="num_digits"):
        ScratchpadAdditionTask(num_digits=4)
    with pytest.raises(ValueError, match="`a`"):
        TASK.working_for(100, 1)
    with pytest.raises(ValueError, match="`b`"):
        TASK.working_for(1, -1)
    with pytest.raises(ValueError, match="answer"):
        TASK.corrupt("7+5=12;", torch.Generator())
    with pytest.raises(ValueError, match="split"):
        TASK.sample_problems(2, torch.Generator(), split="test")


def test_sft_fingerprint_records_the_whole_model_config():
    # every field, defaults included: a transformers release that changes a default must not let an
    # old checkpoint pass for the new config
    import json

    from rlbook.lm.model import policy_config
    from rlbook.lm.sft import SFTConfig

    config = policy_config(TOK)
    recorded = json.loads(_sft_fingerprint(config, TASK, SFTConfig(), torch.device("cpu"))["model_config"])
    assert recorded == json.loads(config.to_json_string(use_diff=False))
    assert "layer_norm_epsilon" in recorded and "activation_function" in recorded  # GPT-2 defaults


# -- the verifier with a loophole (chapter 15's reward-hacking experiment) ----------------------------------

def test_substring_reward_accepts_the_unpadded_sum_anywhere_and_so_accepts_wrong_answers():
    cases = {  # completion for 29+20 (answer "049"): (strict, substring)
        "049</s>": (1.0, 1.0),
        "9+0=9;2+2=4;049</s>": (1.0, 1.0),
        "149</s>": (0.0, 1.0),  # a wrong digit in the zero padding
        "490</s>": (0.0, 1.0),  # the number, then anything
        "9+0=9;2+2=4;0494949494": (0.0, 1.0),  # never stops: cut off by the budget
        "048</s>": (0.0, 0.0),
        "4+9=13;": (0.0, 0.0),
    }
    for completion, (strict, substring) in cases.items():
        assert (TASK.reward("29+20=", completion), TASK.substring_reward("29+20=", completion)) == (strict, substring), completion
    assert TASK.substring_reward("88+37=", "12</s>") == 0.0 and TASK.substring_reward("88+37=", "x125y") == 1.0
    assert AdditionTask(num_digits=2).substring_reward("29+20=", "149</s>") == 1.0  # inherited by both tasks


@given(st.integers(0, 99), st.integers(0, 99), st.text(alphabet="0123456789+=;", max_size=12), st.booleans())
def test_substring_reward_accepts_everything_the_strict_verifier_accepts(a, b, working, stop):
    prompt = TASK.prompt_for(a, b)
    completion = (working + ";" if working else "") + TASK.answer_for(a, b) + ("</s>" if stop else "")
    assert TASK.substring_reward(prompt, completion) >= TASK.reward(prompt, completion)
    assert TASK.substring_reward(prompt, completion) == 1.0  # the sum's digits are always in the answer


def test_substring_reward_checks_its_arguments_like_reward():
    for bad in ("27+4=", "x", 27):
        with pytest.raises(ValueError, match="prompt"):
            TASK.substring_reward(bad, "71</s>")
    with pytest.raises(ValueError, match="completion"):
        TASK.substring_reward("27+45=", 72)
