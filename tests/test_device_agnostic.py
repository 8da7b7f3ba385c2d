"""CPU-only guards that the library keeps each computation on one device (the book on a CUDA GPU).

Two tools, both runnable on a CPU-only torch build:

1. ``FakeTensorMode`` (``torch._subclasses.fake_tensor``) holds tensors that say ``device="cuda"``
   without CUDA, and raises ``FakeTensorDeviceMismatchError`` when one meets a CPU tensor. What it
   reaches on the CPU-only torch 2.13 build (measured while writing these tests):

   * reached: tensors created inside the mode on ``"cuda"``; elementwise ops, reductions, views;
     library functions without input checks, e.g. :func:`rlbook.mismatch_kls` and
     :func:`rlbook.entropy_from_logits`; and the mixed-device error itself.
   * not reached, and why:
     - ``module.to("cuda")`` or ``fake_tensor.to("cuda")`` inside the mode, and
       ``rl.lm.build_policy(..., device="cuda")``: ``RuntimeError: PyTorch is not linked with support
       for cuda devices`` (the copy asks for a CUDA device guard). Parameters *created* as fake CUDA
       tensors (``torch.empty(shape, device="cuda")`` in the mode, swapped into the module) work.
     - the GPT-2 forward with such parameters (transformers' SDPA and eager attention, and the book's
       own path): ``.contiguous()`` on a transposed fake CUDA tensor and indexing with ``None``
       (``x[:, None]``) raise the same "not linked with support for cuda devices" error.
     - anything with ``requires_grad`` on a fake CUDA leaf: the autograd engine asks for a CUDA
       device guard and the process *aborts* (``terminate called after throwing an instance of
       'c10::Error'``), so no backward, no ``rl.train_grpo`` step and no REINFORCE/PPO update can run.
     - every library function that validates its inputs (``rl.clipped_surrogate_loss``,
       ``rl.token_mean``, ``rl.group_relative_advantages``, ``rl.kl_k3``, ``rl.sampler_log_probs``,
       ``rl.log_ratio_stats``, ``rl.importance_correction``, ``rl.lm.token_log_probs``), log-prob
       scoring and sampling: a check such as ``bool(torch.isfinite(x).all())`` or ``bool(finished.all())``
       needs a value, and fake tensors have none (``DataDependentOutputException:
       aten._local_scalar_dense.default``). ``torch.multinomial`` with a generator is never reached.

2. For what fake mode cannot reach (sampling, log-prob scoring, the reward model's scores), a
   recorder stands in for ``torch`` inside those modules and checks that every tensor factory
   (``torch.tensor``, ``zeros``, ``ones``, ``full``, ``arange``, ``empty``, ``eye``) is given the
   device of the data it meets; run on the CPU, a factory that relied on the default device would
   be silent there and wrong on a GPU.

The end-to-end check is ``pytest --device cuda`` on a machine with a GPU (conftest.py).
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

try:  # its own class in recent torch (2.13); a plain RuntimeError before (2.11)
    from torch._subclasses.fake_tensor import FakeTensorDeviceMismatchError
except ImportError:
    FakeTensorDeviceMismatchError = RuntimeError

import rlbook as rl
from rlbook.lm import gpt2_fast, logprobs, reward_model, sampling

TOK = rl.lm.build_char_tokenizer()
MIXED = "same device|two different devices"  # torch 2.13's message; torch 2.11 with CUDA says the latter
FACTORIES = ("tensor", "zeros", "ones", "full", "arange", "empty", "eye")


@pytest.fixture
def fake():
    return FakeTensorMode(allow_non_fake_inputs=False)


def test_fake_mode_catches_a_mixed_device_op(fake):
    """The guard is not vacuous: a fake CUDA tensor times a CPU tensor raises, on one device it does not."""
    with fake:
        on_gpu = torch.ones(3, device="cuda")
        also_on_gpu = torch.ones(3, device="cuda")
        on_cpu = torch.ones(3)
        assert (on_gpu * also_on_gpu).device.type == "cuda"
        with pytest.raises(FakeTensorDeviceMismatchError, match=MIXED):
            on_gpu * on_cpu
        with pytest.raises(FakeTensorDeviceMismatchError, match=MIXED):
            torch.cat([on_gpu, on_cpu])


def test_fake_mode_library_functions_stay_on_cuda_and_refuse_a_cpu_argument(fake):
    with fake:
        trainer, sampler = torch.zeros(4, 6, device="cuda"), torch.zeros(4, 6, device="cuda")
        logits = torch.zeros(4, 6, 10, device="cuda")
        for out in (*rl.mismatch_kls(trainer, sampler), rl.entropy_from_logits(logits)):
            assert out.device.type == "cuda"
        with pytest.raises(FakeTensorDeviceMismatchError):
            rl.mismatch_kls(trainer, torch.zeros(4, 6))  # one argument left on the CPU


class FactoryRecorder:
    """Stands in for the ``torch`` module: records the ``device=`` of each tensor factory call."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        real = getattr(torch, name)
        if name not in FACTORIES:
            return real

        def factory(*args, **kwargs):
            self.calls.append((name, kwargs.get("device")))
            return real(*args, **kwargs)

        return factory

    def without_device(self, device):
        """The calls that named no device, or another one than ``device``."""
        return [(n, d) for n, d in self.calls if d is None or not rl.same_device(d, device)]


def test_factory_recorder_flags_a_factory_without_device():
    recorder = FactoryRecorder()
    recorder.zeros(2, device="cpu")
    recorder.arange(3)  # the default device: the bug the recorder exists to find
    assert recorder.without_device("cpu") == [("arange", None)]
    assert recorder.sum(torch.ones(2)) == 2 and recorder.calls[-1] == ("arange", None)  # others pass through


@pytest.fixture
def recorder(monkeypatch):
    rec = FactoryRecorder()
    for module in (sampling, logprobs, gpt2_fast, reward_model):
        monkeypatch.setattr(module, "torch", rec)
    return rec


def _tiny(device):
    return rl.lm.build_policy(rl.lm.policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=0, device=device)


@pytest.mark.parametrize("padded", [False, True])
def test_sampling_and_scoring_create_every_tensor_on_the_models_device(recorder, device, padded):
    policy = _tiny(device)
    prompts = ["12+34=", "5+6="] if padded else ["12+34=", "56+78="]
    ids, mask = rl.lm.encode_prompts(TOK, prompts)  # on the CPU, as chapters make them
    out = sampling.sample_completions(policy, ids, mask, num_samples=3, max_new_tokens=4,
                                      eos_token_id=TOK.eos_token_id, pad_token_id=TOK.pad_token_id,
                                      forbidden_ids=rl.lm.forbidden_token_ids(TOK),
                                      generator=torch.Generator().manual_seed(0))
    assert out.completion_ids.device == policy.device
    scored = logprobs.completion_log_probs(policy, ids, out.completion_ids.cpu(), mask, completion_mask=out.completion_mask,
                                           forbidden_ids=rl.lm.forbidden_token_ids(TOK))
    assert scored.device == policy.device  # CPU ids met the model: moved once, at the boundary
    assert {name for name, _ in recorder.calls} >= {"tensor", "full", "zeros"}  # the recorder saw the sampler
    assert recorder.without_device(policy.device) == []


def test_reward_model_scores_cpu_ids_on_its_own_device(recorder, device):
    rm = rl.lm.build_reward_model(_tiny(device), init_std=0.5, seed=1)
    batch = rl.lm.encode_preference_pairs(TOK, ["27+45="], ["072"], ["071"])  # CPU tensors
    with torch.no_grad():
        scores = reward_model.sequence_rewards(rm, batch["input_ids"], batch["attention_mask"])
    assert scores.shape == (2,) and scores.device == rm.lm_head.weight.device
    assert recorder.calls and recorder.without_device(scores.device) == []


def test_reinforce_estimators_return_on_the_batchs_device(device):
    """A policy on the run's device, episodes on the CPU (as rl.EpisodeBatcher collects them: chapter 3):
    the estimators move the batch once and answer on the batch's device."""
    torch.manual_seed(0)
    policy = rl.CategoricalMLPPolicy(hidden_sizes=(8,)).to(device)
    gen = torch.Generator().manual_seed(0)
    batch = rl.EpisodeBatcher(3, seed=0, max_steps=12).collect(lambda o: policy.act(o, gen))
    assert batch.obs.device.type == "cpu"
    weights = rl.reinforce_weights(batch, "rewards_to_go", 1.0)
    grads = rl.episode_gradients(policy, batch, weights)
    assert grads.device == batch.obs.device and grads.shape[0] == 3
    value_fn = rl.fit_value_function(batch, epochs=2, hidden_sizes=(8,))
    for kind in ("optimal", "value"):
        b = rl.baseline_values(kind, weights, batch, policy=policy, value_fn=value_fn.to(device))
        assert b.device == weights.device
    assert rl.gradient_variance(policy, batch, "rewards_to_go", "value", value_fn=value_fn)["variance"] >= 0
