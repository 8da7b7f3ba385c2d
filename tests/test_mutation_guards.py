"""Fast checks of single-line slips that the rest of the suite let through: a sign, a tie, a boundary,
an interval method, a temperature, and three steps of the grader.

Each test pins one quantity against an independent computation (a margin written out by hand, a
count of ties, scipy's bootstrap with the method the docstring names, a log-softmax at τ) or
against the documented rule, on inputs chosen so that the slip changes the answer:

* DPO's logged ``reward_margin`` / ``reward_accuracy`` are of chosen − rejected (Rafailov et al.
  2023, arXiv:2305.18290, eq. 5's implicit reward), on a batch whose margins have known signs;
* ``reward_model_accuracy`` counts a tie as wrong (its docstring), on exact ties;
* ``rl.compare`` reads a zero-width interval at 0 as "no difference detected";
* ``rl.bootstrap_ci`` is the BCa interval (Efron & Tibshirani 1993), not the percentile one, on a
  skewed sample where the two differ by many Monte-Carlo standard errors;
* ``rl.claim_comparison(..., ">")`` needs the whole interval above 0, not a positive mean;
* GRPO scores its log-probabilities at the temperature it samples at: one pass of one minibatch
  starts at ρ ≡ 1;
* the grader launches the kernel inside the sandbox's command, hides the hidden tests and their
  traceback from the feedback, and writes the grading seed into the instructor's cells only.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import re
import shutil
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats as sps

import rlbook as rl
from rlbook.stats import NO_DIFFERENCE

from test_dpo_train import CHOSEN, PROMPTS, REJECTED, TINY, TOK  # noqa: E402 (the DPO tests' tiny model and pairs)
from test_dpo_train import _model as _policy  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


# ============================== 1. DPO's logged margin: chosen − rejected ==============================


def test_dpo_step_logs_the_margin_of_chosen_minus_rejected():
    """π_ref's log-probs are set to the policy's minus known offsets, so DPO's implicit rewards are
    β·offset: pairs 1 and 2 favour the chosen response (margins 2β, 1.5β), pair 3 the rejected one
    (−β). The logged margin is their mean, β·2.5/3 > 0, and the accuracy 2/3; chosen and
    rejected swapped, they would be −β·2.5/3 and 1/3."""
    from rlbook.algos.dpo import DPOConfig, dpo_step
    from rlbook.lm.dpo import encode_preference_pairs, sequence_log_probs

    policy, beta = _policy(0), 0.3
    batch = encode_preference_pairs(TOK, PROMPTS, CHOSEN, REJECTED)
    with torch.no_grad():
        seq = sequence_log_probs(policy, **batch)
    offsets = torch.tensor([1.0, 2.0, -0.5, -1.0, 0.5, 0.5], dtype=torch.float64)  # chosen 3, then rejected 3
    ref = seq - offsets  # β·(log π − log π_ref) = β·offset
    metrics = dpo_step(policy, torch.optim.SGD(policy.parameters(), lr=0.0), batch, ref,
                       DPOConfig(loss_type="sigmoid", beta=beta))
    margins = beta * (offsets[:3] - offsets[3:])  # 2β, 1.5β, −β
    assert margins.tolist() == pytest.approx([0.6, 0.45, -0.3])
    assert metrics["reward_margin"] == pytest.approx(beta * 2.5 / 3, abs=1e-9)
    assert metrics["reward_accuracy"] == pytest.approx(2 / 3)


def test_train_dpo_history_logs_chosen_minus_rejected():
    """One pair, one step: the history's first row is measured before the update, so its margin is
    β·[(log π(y_c) − log π_ref(y_c)) − (log π(y_r) − log π_ref(y_r))] of the starting weights, by hand."""
    from rlbook.algos.dpo import DPOConfig, train_dpo
    from rlbook.lm.dpo import encode_preference_pairs, sequence_log_probs

    policy, ref_model, beta = _policy(0), _policy(1), 0.5
    batch = encode_preference_pairs(TOK, PROMPTS[:1], CHOSEN[:1], REJECTED[:1])
    with torch.no_grad():
        h = sequence_log_probs(policy, **batch) - sequence_log_probs(ref_model, **batch)
    margin = beta * float(h[0] - h[1])
    assert abs(margin) > 1e-3  # the two models differ: the margin's sign is the test
    hist = train_dpo(policy, ref_model, TOK, PROMPTS[:1], CHOSEN[:1], REJECTED[:1],
                     DPOConfig(beta=beta, num_steps=1, batch_size=2, lr=1e-3, device="cpu"), progress=False)
    assert hist["reward_margin"][0] == pytest.approx(margin, abs=1e-9)
    assert hist["reward_accuracy"][0] == float(margin > 0)


# ============================== 2. reward_model_accuracy: a tie is wrong ==============================


def test_reward_model_accuracy_counts_ties_as_wrong():
    """The docstring: "ties count as wrong". A reward model with a zero head gives every response
    the reward 0: every pair is a tie and the accuracy is 0 (1 if ties counted as right). Then
    three pairs scored by response length: one right, one wrong, one an exact tie (two
    responses of equal length): 1/3 (2/3 if ties counted as right)."""
    from rlbook.lm.dpo import encode_preference_pairs
    from rlbook.lm.reward_model import (
        build_reward_model,
        reward_model_accuracy,
        reward_model_step,
        sequence_rewards,
    )

    flat = build_reward_model(_policy(0), init_std=0.0)  # head weight and bias 0: r ≡ 0
    batch = encode_preference_pairs(TOK, PROMPTS, CHOSEN, REJECTED)
    with torch.no_grad():
        assert torch.equal(sequence_rewards(flat, batch["input_ids"], batch["attention_mask"]), torch.zeros(6).double())
    assert reward_model_accuracy(flat, TOK, PROMPTS, CHOSEN, REJECTED) == 0.0
    assert reward_model_accuracy(flat, TOK, PROMPTS, CHOSEN, REJECTED, batch_size=2) == 0.0
    # reward_model_step's logged accuracy ("share of pairs with r_c > r_r") reads ties the same way
    step = reward_model_step(flat, torch.optim.SGD(flat.parameters(), lr=0.0), batch)
    assert step["accuracy"] == 0.0 and step["margin"] == 0.0

    # a reward model that scores a response by its length (the position id of the last real token):
    # exact ties between responses of equal length, whatever their batch rows
    lengths = batch["attention_mask"].sum(-1).double()
    assert torch.equal(sequence_rewards(_LengthReward(), batch["input_ids"], batch["attention_mask"]), lengths - 1)
    assert (lengths[:3] - lengths[3:]).tolist() == [0, 1, -1]  # "49"/"48" tie, "21"/"2" right, "110"/"1100" wrong
    assert reward_model_accuracy(_LengthReward(), TOK, PROMPTS, CHOSEN, REJECTED) == pytest.approx(1 / 3)
    assert reward_model_accuracy(_LengthReward(), TOK, PROMPTS, CHOSEN, REJECTED, batch_size=1) == pytest.approx(1 / 3)


class _LengthReward(torch.nn.Module):
    """r(x, y) = (tokens of x ‖ y) − 1, read by rl.lm.sequence_rewards at the last real token."""

    def __init__(self):
        super().__init__()
        self.lm_head = torch.nn.Linear(1, 1)  # one output, as sequence_rewards requires

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return SimpleNamespace(logits=position_ids[..., None].double())


# ============================== 3. rl.compare: a zero-width interval at 0 ==============================


def test_a_zero_width_interval_at_zero_is_no_difference_detected():
    """Every paired difference exactly 0 (the two samples vary, so the comparison is allowed): the
    interval is [0, 0], which does not lie above or below zero: "no difference detected"."""
    a = [0.61, 0.72, 0.55, 0.80]
    c = rl.compare(a, list(a), names=("DAPO", "GRPO"))
    assert (c.mean_diff, c.ci_low, c.ci_high, c.sd_diff) == (0.0, 0.0, 0.0, 0.0)
    assert c.verdict == NO_DIFFERENCE and not c.detected and str(c).endswith(NO_DIFFERENCE)
    rl.claim_comparison("no difference detected", c, "none")
    for expect in (">", "<"):
        with pytest.raises(AssertionError):
            rl.claim_comparison("DAPO beats GRPO", c, expect)
    # a zero-width interval away from 0 is a difference, on either side
    assert rl.compare([1.0, 2.0, 3.0], [1.5, 2.5, 3.5]).verdict == "A < B"
    assert rl.compare([1.0, 2.0, 3.0], [0.5, 1.5, 2.5]).verdict == "A > B"


# ============================== 4. rl.bootstrap_ci is BCa ==============================


def test_bootstrap_ci_is_bca_not_percentile_on_a_skewed_sample():
    """A lognormal sample of 15 (right-skewed): the BCa interval of the mean sits higher than the
    percentile one. The Monte-Carlo spread of each end over 20 resampling seeds (9999 resamples
    each) is measured, and the two methods' ends differ by more than 6 of those standard deviations
    (measured: lower ends 0.79 vs 0.73 with sd ≈ 0.004, upper 1.77 vs 1.55 with sd ≈ 0.02). Ours
    equals scipy's BCa with the same resampling seed, and lies within 4 sd of BCa's mean ends."""
    x = np.random.default_rng(7).lognormal(0.0, 1.0, 15)

    def ends(method, seed):
        ci = sps.bootstrap((x,), np.mean, confidence_level=0.95, n_resamples=9999, method=method, vectorized=True,
                           rng=np.random.default_rng(seed)).confidence_interval
        return np.array([ci.low, ci.high])

    bca = np.array([ends("BCa", s) for s in range(1, 21)])
    percentile = np.array([ends("percentile", s) for s in range(1, 21)])
    sd = np.maximum(bca.std(0, ddof=1), percentile.std(0, ddof=1))
    assert (np.abs(bca.mean(0) - percentile.mean(0)) > 6 * sd).all(), (bca.mean(0), percentile.mean(0), sd)
    point, low, high = rl.bootstrap_ci(x, np.mean, confidence=0.95, n_resamples=9999, seed=0)
    assert point == pytest.approx(x.mean(), rel=1e-12)
    assert np.allclose([low, high], ends("BCa", 0), rtol=0, atol=1e-12)
    assert (np.abs(np.array([low, high]) - bca.mean(0)) < 4 * sd).all()
    assert (np.abs(np.array([low, high]) - percentile.mean(0)) > 4 * sd).all()


# ============================== 5. claim_comparison: the interval, not the mean ==============================


def test_claim_comparison_refuses_a_positive_mean_whose_interval_spans_zero():
    """Paired differences [0.5, −0.3, 0.4, −0.2, 0.3]: mean +0.14, Student's 95 % interval about
    [−0.32, +0.60]. "A > B" is not backed (the interval reaches below 0); mirrored, neither is "A < B"."""
    b = np.array([0.50, 0.60, 0.55, 0.70, 0.65])
    d = np.array([0.5, -0.3, 0.4, -0.2, 0.3])
    up = rl.compare(b + d, b)
    assert up.mean_diff > 0 and up.ci_low < 0 < up.ci_high and up.verdict == NO_DIFFERENCE
    with pytest.raises(AssertionError, match="A > B"):
        rl.claim_comparison("A beats B", up, ">")
    rl.claim_comparison("no difference detected", up, "none")
    down = rl.compare(b - d, b)
    assert down.mean_diff < 0 and down.ci_low < 0 < down.ci_high
    with pytest.raises(AssertionError, match="A < B"):
        rl.claim_comparison("A is worse than B", down, "<")


# ============================== 6. GRPO scores at the sampling temperature ==============================


def test_grpo_scores_log_probs_at_the_sampling_temperature():
    """τ = 0.7, one inner epoch of one minibatch: the loss's log π_θ is computed before any update,
    at the weights that sampled, so ρ = π_θ/π_old ≡ 1 (ratio_std at float32 rounding, measured
    7.5e-8) and nothing is clipped. Scored at τ = 1 instead, ρ = π_1/π_0.7 ≠ 1 (ratio_std 0.088)."""
    from rlbook.algos.grpo import GRPOConfig, train_grpo

    policy = rl.lm.build_policy(rl.lm.policy_config(TOK, **TINY), seed=0, device="cpu")
    config = GRPOConfig(group_size=4, prompts_per_step=4, num_steps=1, max_new_tokens=5, device="cpu", temperature=0.7,
                        num_inner_epochs=1, num_minibatches=1)
    hist = train_grpo(policy, TOK, rl.lm.AdditionTask(), config, progress=False)
    assert hist["kept_groups"][0] > 0  # an update happened
    assert hist["ratio_std"][0] < 1e-5, hist["ratio_std"]
    assert hist["clip_fraction"][0] == 0.0


def test_completion_log_probs_is_the_log_softmax_at_temperature():
    """rl.lm.completion_log_probs(τ) against log softmax(logits/τ) of one full forward pass, by hand."""
    from rlbook.lm.logprobs import completion_log_probs

    policy = _policy(0)
    prompt = torch.tensor([[TOK.bos_token_id] + TOK("07+42=", add_special_tokens=False).input_ids])
    completion = torch.tensor([TOK("49", add_special_tokens=False).input_ids + [TOK.eos_token_id]])
    with torch.no_grad():
        logits = policy(input_ids=torch.cat([prompt, completion], 1)).logits[0, prompt.shape[1] - 1:-1]
        for tau in (0.7, 1.0, 1.6):
            want = torch.log_softmax(logits / tau, -1).gather(-1, completion[0, :, None])[:, 0]
            got = completion_log_probs(policy, prompt, completion, temperature=tau)[0]
            torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)
        assert (completion_log_probs(policy, prompt, completion, temperature=0.7)
                - completion_log_probs(policy, prompt, completion, temperature=1.0)).abs().max() > 1e-3


# ============================== 7. the grader ==============================


def _grading():
    pytest.importorskip("nbgrader", reason="the grader's preprocessors need nbgrader (the `assignments` extra)")
    from rlbook.app import grading

    return grading


class _RecordingSandbox:
    """Stands in for Sandbox.command: records its arguments, returns a marked argv."""

    def __init__(self, grading):
        outer = self

        class Recording(grading.Sandbox):
            def command(self, argv, workdir, files, ipc_dir, env=None):
                outer.call = {"argv": list(argv), "workdir": workdir, "files": list(files), "ipc_dir": ipc_dir,
                              "env": dict(env)}
                return ["SANDBOX", "--", *argv]

            def hand_over(self, path):
                pass

        self.sandbox = Recording(total_memory_mb=0)  # no memory cgroup's prefix (tested in test_grading.py)


def _launch(grading, sandbox, kernel_cmd, cwd, env, monkeypatch):
    """Run SandboxedKernelManager._async_launch_kernel with the parent's launch replaced: returns the
    argv and keywords the parent would have started the kernel with, and the manager."""
    launched = {}

    async def parent_launch(self, cmd, **kw):
        launched.update(cmd=list(cmd), kw=kw)

    monkeypatch.setattr(grading.AsyncKernelManager, "_async_launch_kernel", parent_launch)
    km = grading.SandboxedKernelManager(sandbox=sandbox)
    monkeypatch.setattr(type(km), "kernel_spec", type("Spec", (), {"interrupt_mode": "signal"})())
    errors = []

    def run():  # in a thread of its own: an event loop left running in this one (Playwright's sync API) is not reused
        try:
            asyncio.run(km._async_launch_kernel(kernel_cmd, cwd=str(cwd), env=env))
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    try:
        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
    finally:
        shutil.rmtree(km._ipc_dir, ignore_errors=True)
    if errors:
        raise errors[0]
    return launched, km


KERNEL_CMD = ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/x/kernel.json"]


def test_the_kernel_is_launched_inside_the_sandbox_command(tmp_path, monkeypatch):
    """The argv handed to jupyter_client's launch is the sandbox's command around the kernel's argv,
    with none of the submission's files (a data file beside the notebook included), the kernel's own environment (plus jupyter's JPY_
    variables, nothing else of the grader's) and the private socket folder."""
    grading = _grading()
    if grading.AsyncKernelManager is object:
        pytest.skip("jupyter_client is not installed")
    (tmp_path / "data.csv").write_text("1,2\n")
    (tmp_path / "answer.ipynb").write_text("{}")
    rec = _RecordingSandbox(grading)
    env = {"JPY_PARENT_PID": "42", "SECRET_TOKEN": "grader-only"}
    launched, km = _launch(grading, rec.sandbox, KERNEL_CMD, tmp_path, env, monkeypatch)
    assert launched["cmd"] == ["SANDBOX", "--", *KERNEL_CMD]
    assert rec.call["argv"] == KERNEL_CMD and rec.call["workdir"] == "/submission"
    assert rec.call["files"] == []  # none of the submission's files: the kernel's folder holds no student file
    assert rec.call["ipc_dir"] == km._ipc_dir
    assert rec.call["env"] == {**grading._kernel_env(km._ipc_dir), "JPY_PARENT_PID": "42"}
    assert "SECRET_TOKEN" not in launched["kw"]["env"] and launched["kw"]["cwd"] == km._ipc_dir
    assert km.kernel_spec.interrupt_mode == "message"


def test_the_kernel_argv_is_the_bubblewrap_command(tmp_path, monkeypatch):
    """With the real Sandbox (bubblewrap needed to build its argv): prlimit, then bwrap, then the kernel."""
    grading = _grading()
    if grading.AsyncKernelManager is object:
        pytest.skip("jupyter_client is not installed")
    if grading.Sandbox.executable() is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap): Sandbox.command needs its path")
    monkeypatch.setattr(grading.os, "geteuid", lambda: 1000)  # unprivileged: no chown of the socket folder
    launched, _ = _launch(grading, grading.Sandbox(), KERNEL_CMD, tmp_path, {}, monkeypatch)
    cmd = launched["cmd"]
    if cmd[0] == "/bin/sh":  # first into the submission's memory cgroup, where the machine gives one
        assert cmd[3] == "rlbook-cgroup" and "cgroup.procs" in cmd[2]
        cmd = cmd[4:]
    assert cmd[0] == "prlimit" and grading.Sandbox.executable() in cmd
    bwrap = cmd.index(grading.Sandbox.executable())
    assert "--unshare-all" in cmd[bwrap:] and "--clearenv" in cmd[bwrap:]
    assert cmd[len(cmd) - len(KERNEL_CMD) - 1:] == ["--", *KERNEL_CMD]


def test_the_grader_is_wired_to_the_sandboxed_preprocessors(tmp_path):
    """Autograding runs Harden → SandboxedExecute → Judge, SandboxedExecute's kernels come from
    SandboxedKernelManager, and the feedback goes through HideHiddenTests."""
    grading = _grading()
    from rlbook.app.assignments import _api

    api = _api(tmp_path, timeout=60, seed=5)
    config = api.config
    steps = list(config.Autograde.autograde_preprocessors)
    assert steps[:3] == [grading.Harden, grading.SandboxedExecute, grading.Judge]
    assert grading.HideHiddenTests in list(config.GenerateFeedback.preprocessors)
    assert config.Harden.grading_seed == 5
    assert grading.SandboxedExecute().kernel_manager_class is grading.SandboxedKernelManager


HIDDEN_LINES = ["g = torch.Generator().manual_seed(GRADING_SEED)",
                "x_secret = torch.randn(7, generator=g)",
                "assert torch.allclose(kl(x_secret), reference_kl(x_secret)), 'hidden case'"]
VISIBLE = "assert kl(torch.zeros(3)).shape == (3,)"


def _test_cell(nbformat):
    source = "\n".join([VISIBLE, "### BEGIN HIDDEN TESTS", *HIDDEN_LINES, "### END HIDDEN TESTS", "print('done')"])
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test_kl", "locked": True, "points": 2, "solution": False}
    frames = [f"File /submission/answer.py:{k}, in helper_{k}()\n  {k} | y = helper_{k + 1}(y)" for k in range(30)]
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="visible ok\n"),
                    nbformat.v4.new_output("error", ename="AssertionError", evalue="hidden case",
                                           traceback=["-" * 75, "AssertionError  Traceback (most recent call last)",
                                                      *[f"---> {i + 3} {ln}" for i, ln in enumerate(HIDDEN_LINES)],
                                                      *frames])]
    return cell


def test_feedback_shows_neither_the_hidden_tests_nor_their_traceback():
    """HideHiddenTests (the feedback's first preprocessor) on a hand-built test cell whose hidden
    assertion failed: the hidden lines leave the source and every output, the visible test stays,
    and the error shows as its type and message only."""
    grading = _grading()
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("Part 1"), _test_cell(nbformat)])
    nb, _ = grading.HideHiddenTests().preprocess(nb, {})
    cell = nb.cells[1]
    text = cell.source + "\n" + "\n".join(
        "\n".join(o.get("traceback", [])) + o.get("text", "") + o.get("evalue", "") for o in cell.outputs)
    for line in HIDDEN_LINES:
        assert line not in text
    assert "GRADING_SEED" not in text and "x_secret" not in text
    assert VISIBLE in cell.source and "print('done')" in cell.source and "HIDDEN TESTS" not in cell.source.replace(
        "(hidden tests run here when the notebook is graded)", "")
    error = next(o for o in cell.outputs if o.output_type == "error")
    assert error.traceback == ["AssertionError: hidden case"]
    assert [o.text for o in cell.outputs if o.output_type == "stream"] == ["visible ok\n"]


def _nbgrader_cell(nbformat, source, grade_id, *, solution=False, grade=False, locked=True):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": grade, "grade_id": grade_id, "locked": locked, "solution": solution,
                                 "schema_version": 3, **({"points": 1} if grade else {})}
    return cell


def _seed_names(source: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "GRADING_SEED" for n in ast.walk(ast.parse(source)))


def test_harden_writes_the_grading_seed_into_instructor_cells_only(tmp_path):
    """Harden on a hand-built assignment: in the instructor's setup and test cells the name
    GRADING_SEED is replaced by the seed's digits (no such name is left to evaluate); a student's
    cell that mentions the name keeps it (it is never handed the seed), and the original sources,
    which Judge puts back for the feedback, keep the name, not the digits."""
    grading = _grading()
    import nbformat

    seed = 918273645
    setup = "import torch\nSTART = GRADING_SEED % 7"
    answer = "def kl(x):\n    return x * 0 + GRADING_SEED"
    test = "\n".join([VISIBLE, "### BEGIN HIDDEN TESTS", *HIDDEN_LINES, "### END HIDDEN TESTS"])
    source_nb = nbformat.v4.new_notebook(cells=[
        _nbgrader_cell(nbformat, setup, "setup"),
        _nbgrader_cell(nbformat, "def kl(x):\n    raise NotImplementedError", "answer", solution=True, locked=False),
        _nbgrader_cell(nbformat, test, "test_kl", grade=True)])
    (tmp_path / "source" / "a1").mkdir(parents=True)
    nbformat.write(source_nb, str(tmp_path / "source" / "a1" / "a1.ipynb"))
    submitted = copy.deepcopy(source_nb)
    submitted.cells[1].source = answer
    resources = {"nbgrader": {"assignment": "a1", "notebook": "a1", "student": "s1"}}
    nb, resources = grading.Harden(source_root=str(tmp_path / "source"), grading_seed=seed).preprocess(submitted, resources)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    for gid in ("setup", "test_kl"):
        body = by_id[gid].source
        assert not _seed_names(body) and re.search(rf"\b{seed}\b", body), (gid, body)
        assert "GRADING_SEED" in by_id[gid].metadata["rlbook_original"]
        assert str(seed) not in by_id[gid].metadata["rlbook_original"]
    assert f"manual_seed({seed})" in by_id["test_kl"].source and f"START = {seed} % 7" in by_id["setup"].source
    call = ast.parse(by_id["answer"].source).body[0].value  # _rlbook_guard.define(code, label)
    assert ast.unparse(call.func) == "_rlbook_guard.define"
    student = ast.literal_eval(call.args[0])  # run in the student's own namespace
    assert _seed_names(student) and str(seed) not in student
    assert ast.dump(ast.parse(student)) == ast.dump(ast.parse(answer))  # a definition: kept as written
    assert resources["rlbook"]["flags"] == []
    assert not any(str(seed) in c.source for c in nb.cells if c.metadata.get("rlbook_guard"))
