"""Policy construction, atomic checkpoints (round trip, torn writes), loading local checkpoints, SFT."""

import os

import pytest
import torch
from transformers import GPT2Config

from rlbook.lm import checkpoint as ckpt
from rlbook.lm.model import build_policy, count_parameters, load_policy, policy_config
from rlbook.lm.sft import SFTConfig, sft_batch, train_sft
from rlbook.lm.task import AdditionTask
from rlbook.lm.tokenizer import build_char_tokenizer

TOK = build_char_tokenizer()
TASK = AdditionTask()
TINY = policy_config(TOK, n_layer=1, n_embd=32, n_head=2)
X = torch.tensor([[1, 4, 11, 14, 8, 6, 15, 4, 8]])


def logits_of(model):
    """The model's logits on X, on the model's own device (the models compared share one: ``device``)."""
    with torch.no_grad():
        return model(input_ids=X.to(model.device)).logits


def test_policy_config_has_no_dropout_and_sizes():
    cfg = policy_config(TOK, size="small")
    assert (cfg.n_layer, cfg.n_embd) == (2, 128) and cfg.vocab_size == len(TOK)
    assert cfg.resid_pdrop == cfg.embd_pdrop == cfg.attn_pdrop == 0.0
    assert policy_config(TOK, size="full").n_layer == 4
    model = build_policy(cfg, device="cpu")
    assert not model.training and 3e5 < count_parameters(model) < 6e5


def test_build_policy_is_seeded_and_refuses_dropout():
    torch.testing.assert_close(logits_of(build_policy(TINY, seed=1)), logits_of(build_policy(TINY, seed=1)))
    assert not torch.equal(logits_of(build_policy(TINY, seed=1)), logits_of(build_policy(TINY, seed=2)))
    with pytest.raises(ValueError, match="resid_pdrop"):
        build_policy(GPT2Config(vocab_size=16, n_layer=1, n_embd=32, n_head=2))
    with pytest.raises(ValueError, match="config"):
        build_policy({"n_layer": 1})


def test_checkpoint_round_trip_and_load_policy_from_path(tmp_path, device):
    model = build_policy(TINY, seed=3, device=device)
    path = ckpt.save_checkpoint(model, TOK, tmp_path / "ck", metadata={"step": 7})
    again, tok, meta = ckpt.load_checkpoint(path, device=device)
    assert again.device == model.device
    torch.testing.assert_close(logits_of(again), logits_of(model))
    assert meta == {"step": 7} and tok("07+42=").input_ids == TOK("07+42=").input_ids
    plain = load_policy(str(path), device=device)  # any local causal-LM folder, no download
    torch.testing.assert_close(logits_of(plain), logits_of(model))
    assert not plain.training
    with pytest.raises(ValueError, match="config_or_path"):
        load_policy(tmp_path / "missing")


def test_torn_write_leaves_the_old_checkpoint_intact(tmp_path, monkeypatch, device):
    old = build_policy(TINY, seed=4, device=device)
    path = ckpt.save_checkpoint(old, TOK, tmp_path / "ck", metadata={"version": 1})
    new = build_policy(TINY, seed=5, device=device)
    real_save = type(new).save_pretrained

    def crash_midway(self, folder, *args, **kwargs):
        real_save(self, folder, *args, **kwargs)  # half the checkpoint is on disk ...
        raise OSError("disk full")  # ... then the save dies

    monkeypatch.setattr(type(new), "save_pretrained", crash_midway)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save_checkpoint(new, TOK, path, metadata={"version": 2})
    monkeypatch.undo()
    model, _, meta = ckpt.load_checkpoint(path, device=device)
    assert meta == {"version": 1}
    torch.testing.assert_close(logits_of(model), logits_of(old))
    assert os.listdir(tmp_path) == ["ck"]  # no temporary folder left behind
    ckpt.save_checkpoint(new, TOK, path, metadata={"version": 2})  # a clean save replaces it
    model, _, meta = ckpt.load_checkpoint(path, device=device)
    assert meta == {"version": 2} and sorted(os.listdir(tmp_path)) == ["ck"]
    torch.testing.assert_close(logits_of(model), logits_of(new))


def test_checkpoint_bad_input(tmp_path):
    model = build_policy(TINY)
    with pytest.raises(ValueError, match="metadata"):
        ckpt.save_checkpoint(model, TOK, tmp_path / "ck", metadata={"x": object()})
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="path"):
        ckpt.save_checkpoint(model, TOK, tmp_path / "file")
    with pytest.raises(ValueError, match="path"):
        ckpt.load_checkpoint(tmp_path / "nothing")


def test_sft_batch_noise_rate_and_targets():
    g = torch.Generator().manual_seed(0)
    prompt_ids, prompt_mask, target_ids, target_mask, noisy = sft_batch(TOK, TASK, 400, 0.5, g)
    assert prompt_ids.shape == (400, 7) and target_ids.shape == (400, 4) and target_mask.all()
    assert (target_ids[:, -1] == TOK.eos_token_id).all()
    assert 0.4 < noisy.float().mean() < 0.6
    problems = TASK.sample_problems(300, torch.Generator().manual_seed(0))
    _, _, target_ids, _, noisy = sft_batch(TOK, TASK, 300, 0.0, torch.Generator().manual_seed(0), carry_noise=0.999)
    labels = TOK.batch_decode(target_ids[:, :3].tolist())
    slipped = [label == TASK.carry_slip(p) for label, p in zip(labels, problems)]
    assert sum(slipped) >= 298  # same draws; (almost) every units carry forgotten
    assert all(label in (TASK.carry_slip(p), p.answer) for label, p in zip(labels, problems))
    assert noisy.tolist() == [label != p.answer for label, p in zip(labels, problems)]


def test_train_sft_lowers_the_loss_and_validates_config():
    model = build_policy(TINY, seed=0)
    hist = train_sft(model, TOK, TASK, SFTConfig(num_steps=40, batch_size=32, lr=3e-3, warmup_steps=5), progress=False)
    assert len(hist["loss"]) == 40 and hist["loss"][-5:].mean() < hist["loss"][:5].mean() - 0.5
    with pytest.raises(ValueError, match="label_noise"):
        SFTConfig(label_noise=1.0)
    with pytest.raises(ValueError, match="num_steps"):
        SFTConfig(num_steps=0)


def test_load_or_train_sft_reuses_only_a_matching_checkpoint(tmp_path, monkeypatch):
    from rlbook.lm import sft as sft_module

    config = SFTConfig(num_steps=2, batch_size=8, device="cpu", seed=3)
    path = tmp_path / "runs" / "sft"
    trained, history, loaded = sft_module.load_or_train_sft(TOK, TASK, config, checkpoint=path, progress=False)
    assert not loaded and len(history["loss"]) == 2 and path.is_dir()
    # the same call again loads, and gives the same weights as training would
    again, history2, loaded2 = sft_module.load_or_train_sft(TOK, TASK, config, checkpoint=path, progress=False)
    assert loaded2 and history2 is None
    for a, b in zip(trained.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)
    calls = []
    real_train = sft_module.train_sft
    monkeypatch.setattr(sft_module, "train_sft", lambda *a, **k: calls.append(1) or real_train(*a, **k))
    # any setting that changes the weights retrains (and overwrites the checkpoint)
    for changed in (SFTConfig(num_steps=2, batch_size=8, device="cpu", seed=4),
                    SFTConfig(num_steps=2, batch_size=8, device="cpu", seed=3, lr=1e-3)):
        _, _, loaded3 = sft_module.load_or_train_sft(TOK, TASK, changed, checkpoint=path, progress=False)
        assert not loaded3
    _, _, loaded4 = sft_module.load_or_train_sft(TOK, TASK, config, checkpoint=path, progress=False, model_seed=1)
    assert not loaded4 and len(calls) == 3
    # a folder that is not a checkpoint is not trusted; no checkpoint means no file written
    junk = tmp_path / "junk"
    junk.mkdir()
    _, _, loaded5 = sft_module.load_or_train_sft(TOK, TASK, config, checkpoint=junk, progress=False)
    assert not loaded5 and len(calls) == 4
    _, _, loaded6 = sft_module.load_or_train_sft(TOK, TASK, config, checkpoint=None, progress=False)
    assert not loaded6 and len(calls) == 5
    _, history7, loaded7 = sft_module.load_or_train_sft(TOK, TASK, config, checkpoint=path, progress=False, retrain=True)
    assert not loaded7 and history7 is not None and len(calls) == 6


def test_load_or_train_sft_trains_with_num_threads_and_restores_the_setting(tmp_path, monkeypatch):
    from rlbook.lm import sft as sft_module

    config = SFTConfig(num_steps=1, batch_size=4, device="cpu", seed=0)
    seen = []
    real_train = sft_module.train_sft
    monkeypatch.setattr(sft_module, "train_sft", lambda *a, **k: seen.append(torch.get_num_threads()) or real_train(*a, **k))
    before = torch.get_num_threads()
    path = tmp_path / "sft"
    sft_module.load_or_train_sft(TOK, TASK, config, checkpoint=path, progress=False, num_threads=2)
    assert seen == [2] and torch.get_num_threads() == before
    # the thread count is part of the fingerprint: the same call loads whatever the caller's setting
    _, _, loaded = sft_module.load_or_train_sft(TOK, TASK, config, checkpoint=path, progress=False, num_threads=2)
    assert loaded and seen == [2]
    if before != 2:  # a different count changes float sums, so it retrains
        _, _, loaded = sft_module.load_or_train_sft(TOK, TASK, config, checkpoint=path, progress=False)
        assert not loaded
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="num_threads"):
            sft_module.load_or_train_sft(TOK, TASK, config, checkpoint=None, progress=False, num_threads=bad)


def test_runs_dir_is_the_checkout_root_or_the_env_var(monkeypatch, tmp_path):
    import rlbook as rl

    monkeypatch.delenv("RLBOOK_RUNS_DIR", raising=False)
    root = os.path.dirname(os.path.dirname(os.path.abspath(rl.__file__)))
    assert str(rl.runs_dir()) == os.path.join(root, "runs")
    monkeypatch.setenv("RLBOOK_RUNS_DIR", str(tmp_path / "elsewhere"))
    assert rl.runs_dir() == (tmp_path / "elsewhere").resolve()


def test_train_sft_trains_in_eval_mode_and_checks_warmup():
    # dropout off during supervised training (the policy is put in eval mode; gradients still flow)
    model = build_policy(TINY, seed=0)
    model.train()
    train_sft(model, TOK, TASK, SFTConfig(num_steps=1, batch_size=8, device="cpu"), progress=False)
    assert not model.training
    with pytest.raises(ValueError, match="warmup_steps"):
        SFTConfig(warmup_steps=-1)
