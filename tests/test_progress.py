"""Training loops close their progress bars as finished, also when they stop early.

tqdm's notebook bar turns red (``bar_style="danger"``) when it is closed with ``n < total``, the sign
it gives for a crashed loop; a chapter's PPO run that reached 475 halfway through its budget was
saved as a red bar at 50 %. ``close_progress`` closes it full and green with a note.
"""

from __future__ import annotations

import io

import pytest
from tqdm import tqdm
from tqdm.notebook import tqdm as notebook_tqdm

from rlbook import PPOConfig, ReinforceConfig, TRPOConfig, train_ppo, train_reinforce, train_trpo
from rlbook.algos._progress import close_progress


def _notebook_bar(total):
    bar = notebook_tqdm(total=total, desc="PPO")
    bar.update(30)
    return bar, bar.container.children[1]


def test_an_early_stop_closes_the_notebook_bar_full_and_green_with_a_note():
    bar, widget = _notebook_bar(100)
    close_progress(bar, "stopped at 475")
    assert (widget.bar_style, widget.value, widget.max) == ("success", 30, 30)
    assert bar.desc == "PPO, stopped at 475"
    assert "30/30" in bar.container.children[2].value


def test_tqdm_alone_would_leave_a_red_partial_bar():
    bar, widget = _notebook_bar(100)  # the defect close_progress exists for
    bar.close()
    assert (widget.bar_style, widget.value, widget.max) == ("danger", 30, 100)


def test_an_overshoot_closes_at_the_steps_run_instead_of_an_unknown_total():
    bar = notebook_tqdm(total=100, desc="REINFORCE")
    bar.update(130)  # a last batch of whole episodes passes the budget
    close_progress(bar)
    assert (bar.container.children[1].max, bar.container.children[1].bar_style) == (130, "success")
    assert "130/130" in bar.container.children[2].value and bar.desc == "REINFORCE"


def test_console_bar_and_disabled_bar():
    out = io.StringIO()
    bar = tqdm(total=100, desc="TRPO", file=out)
    bar.update(17)
    close_progress(bar, "stopped at 475")
    assert "TRPO, stopped at 475: 100%" in out.getvalue() and "17/17" in out.getvalue()
    quiet = tqdm(total=100, disable=True)
    close_progress(quiet, "stopped at 475")  # no error, nothing to draw
    assert quiet.total == 100


@pytest.mark.parametrize("train, config", [
    (train_ppo, PPOConfig(total_env_steps=2048, num_envs=4, num_steps=32, num_epochs=1, minibatch_size=64,
                          stop_at_return=5)),
    (train_trpo, TRPOConfig(total_env_steps=2048, num_envs=4, num_steps=32, critic_epochs=1, stop_at_return=5)),
    (train_reinforce, ReinforceConfig(total_env_steps=5000, episodes_per_batch=20, stop_at_return=5)),
])
def test_trainers_say_where_they_stopped(train, config, capsys):
    hist = train(config)  # the bar is on by default; a random policy's rolling return (≈ 20) passes 5 at once
    err = capsys.readouterr().err
    assert hist.env_steps < config.total_env_steps
    assert "stopped at 5: 100%" in err


def test_grpo_says_where_its_completion_budget_stopped_it(capsys):
    from rlbook.algos.grpo import GRPOConfig, train_grpo
    from rlbook.lm.model import build_policy, policy_config
    from rlbook.lm.task import AdditionTask
    from rlbook.lm.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    policy = build_policy(policy_config(tok, n_layer=1, n_embd=32, n_head=2), seed=0, device="cpu")
    config = GRPOConfig(group_size=4, prompts_per_step=4, num_steps=5, max_new_tokens=5, device="cpu", max_completions=32)
    hist = train_grpo(policy, tok, AdditionTask(), config, progress=True)
    assert len(hist["reward"]) == 2  # 16 completions a step: the budget of 32 ends it after two of five steps
    assert "GRPO, stopped at 32 completions: 100%" in capsys.readouterr().err
