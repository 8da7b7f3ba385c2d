"""Tokenizer round trips, the addition task's split and its verifier."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlbook.lm.task import AdditionTask, Problem, corrupt_answer
from rlbook.lm.tokenizer import build_char_tokenizer, encode_prompts, forbidden_token_ids

TOK = build_char_tokenizer()
TASK = AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0)
TEXT = st.lists(st.sampled_from(list("0123456789+=") + ["<pad>", "<s>", "</s>", "<unk>"]), max_size=12).map("".join)


@given(TEXT)
def test_tokenizer_round_trip(text):
    ids = TOK(text, add_special_tokens=False).input_ids
    assert TOK.decode(ids, skip_special_tokens=False) == text


def test_tokenizer_ids_and_unknown_characters():
    assert (TOK.pad_token_id, TOK.bos_token_id, TOK.eos_token_id, TOK.unk_token_id) == (0, 1, 2, 3)
    assert TOK("07+42=", add_special_tokens=False).input_ids == [4, 11, 14, 8, 6, 15]
    assert TOK("x", add_special_tokens=False).input_ids == [TOK.unk_token_id]
    assert forbidden_token_ids(TOK) == [0, 1, 3]
    with pytest.raises(ValueError, match="alphabet"):
        build_char_tokenizer("aa")


def test_tokenizer_save_and_autoload(tmp_path):
    from transformers import AutoTokenizer

    TOK.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(str(tmp_path), local_files_only=True)
    assert again("07+42=</s>", add_special_tokens=False).input_ids == TOK("07+42=</s>", add_special_tokens=False).input_ids
    assert again.eos_token_id == TOK.eos_token_id and again.pad_token_id == TOK.pad_token_id


def test_encode_prompts_left_pads_and_prepends_bos():
    ids, mask = encode_prompts(TOK, ["07+42=", "1+2="])
    assert ids.shape == (2, 7) and ids[0, 0] == TOK.bos_token_id
    assert mask[1].tolist() == [False, False, True, True, True, True, True]
    assert ids[1, 2] == TOK.bos_token_id
    with pytest.raises(ValueError, match="prompts"):
        encode_prompts(TOK, [])


def test_prompt_and_answer_format():
    assert TASK.prompt_for(7, 42) == "07+42=" and TASK.answer_for(7, 42) == "049"
    assert TASK.answer_for(99, 99) == "198"
    assert TASK.prompt_width == 6 and TASK.answer_width == 3


def test_split_is_deterministic_and_disjoint():
    again = AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0)
    assert TASK.held_out_problems(50) == again.held_out_problems(50)
    assert TASK.num_held_out == 1000 and TASK.num_train == 9000
    held = {p.prompt for p in TASK.held_out_problems()}
    drawn = TASK.sample_problems(3000, torch.Generator().manual_seed(1))
    assert not held & {p.prompt for p in drawn}
    assert all(TASK.is_held_out(p) for p in list(held)[:20])
    assert AdditionTask(seed=1).held_out_problems(20) != TASK.held_out_problems(20)


def test_reward_verifier_cases():
    r = TASK.reward
    assert r("07+42=", "049</s>") == 1.0
    assert r("99+99=", "198</s>") == 1.0
    assert r("07+42=", "049") == 0.0  # truncated: no EOS
    assert r("07+42=", "49</s>") == 0.0  # missing leading zero
    assert r("07+42=", "048</s>") == 0.0
    assert r("07+42=", "0490</s>") == 0.0
    # special tokens are never stripped before scoring: a completion holding them is wrong
    for bad in ("049<pad></s>", "<pad>049</s>", "04<unk>9</s>", "<s>049</s>", "049</s></s>"):
        assert r("07+42=", bad) == 0.0, bad
    with pytest.raises(ValueError, match="prompt"):
        r("7+42=", "049</s>")
    with pytest.raises(ValueError, match="completion"):
        r("07+42=", None)


def test_format_reward_is_separate_from_correctness():
    assert TASK.format_reward("07+42=", "048</s>") == 1.0
    assert TASK.format_reward("07+42=", "049</s>") == 1.0
    assert TASK.format_reward("07+42=", "49</s>") == 0.0
    assert TASK.format_reward("07+42=", "04<pad></s>") == 0.0
    assert TASK.format_reward("07+42=", "049") == 0.0


@given(st.integers(0, 999), st.integers(0, 2**31 - 1))
def test_corrupt_answer_changes_exactly_one_digit(value, seed):
    answer = f"{value:03d}"
    noisy = corrupt_answer(answer, torch.Generator().manual_seed(seed))
    assert len(noisy) == 3 and noisy.isdigit()
    assert sum(a != b for a, b in zip(answer, noisy)) == 1


def test_carry_slip_forgets_only_the_units_carry():
    slip = lambda prompt: TASK.carry_slip(Problem(prompt, ""))
    assert slip("07+45=") == "042"  # true 052
    assert slip("07+42=") == "049"  # no units carry: unchanged
    assert slip("99+99=") == "188"  # true 198
    assert slip("55+50=") == "105"  # a tens carry alone is kept
    with pytest.raises(ValueError, match="prompt"):
        slip("7+5=")


def test_task_bad_arguments():
    with pytest.raises(ValueError, match="num_digits"):
        AdditionTask(num_digits=4)
    for bad in (True, 2.0, 0):  # a bool is not a digit count, even though True == 1
        with pytest.raises(ValueError, match="num_digits"):
            AdditionTask(num_digits=bad)
    with pytest.raises(ValueError, match="held_out_fraction"):
        AdditionTask(held_out_fraction=1.0)
    with pytest.raises(ValueError, match="split"):
        TASK.sample_problems(2, torch.Generator(), split="test")
    with pytest.raises(ValueError, match="answer"):
        corrupt_answer("", torch.Generator())
    assert isinstance(TASK.held_out_problems(1)[0], Problem)


def test_task_alphabet_budget_and_corrupt():
    from rlbook.lm.tokenizer import DEFAULT_ALPHABET

    assert TASK.alphabet == DEFAULT_ALPHABET
    assert TASK.max_completion_tokens == len(TOK("049</s>", add_special_tokens=False).input_ids) == 4
    for seed in range(20):  # the method is corrupt_answer with the same generator calls
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        assert TASK.corrupt("049", g1) == corrupt_answer("049", g2)


def test_format_reward_checks_the_prompt_like_reward():
    for bad in ("27+4=", "x", 27):
        with pytest.raises(ValueError, match="prompt"):
            TASK.format_reward(bad, "71</s>")


def test_forbidden_ids_are_every_special_id_but_eos():
    from types import SimpleNamespace

    tok = SimpleNamespace(all_special_ids=[0, 1, 2, 3, 7], eos_token_id=1, pad_token_id=0, bos_token_id=None,
                          unk_token_id=None)
    assert forbidden_token_ids(tok) == [0, 2, 3, 7]  # 7: a special id beyond pad, bos and unk
