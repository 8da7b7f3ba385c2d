import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook.history import History, rolling_mean


@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=40), st.integers(1, 10))
def test_rolling_mean_matches_naive(values, window):
    got = rolling_mean(values, window)
    want = [np.mean(values[max(0, i - window + 1): i + 1]) for i in range(len(values))]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-6)


def test_steps_to_threshold_needs_full_window():
    h = History()
    for i, ret in enumerate([500.0] * 3 + [10.0] * 2 + [500.0] * 20):
        h.add_episode(ret, int(ret), (i + 1) * 100)
    # the first 3 episodes alone would average 500, but a window needs 20 episodes
    assert h.steps_to_threshold(475, window=20) == 2400  # episodes 5..24: (19·500 + 10)/20 = 475.5
    assert h.steps_to_threshold(490, window=20) == 2500  # needs a window free of the 10s
    assert h.steps_to_threshold(475, window=3) == 300
    assert h.steps_to_threshold(1000, window=3) is None
    with pytest.raises(ValueError, match="window"):
        h.steps_to_threshold(475, window=0)


def test_history_log_and_lookup():
    h = History()
    h.log(loss=torch.tensor(1.5), kl=0.1)
    h.log(loss=0.5, kl=0.2)
    np.testing.assert_allclose(h["loss"], [1.5, 0.5])
    assert h.num_updates == 2 and "kl" in h and h.summary()["kl"] == 0.2
    with pytest.raises(KeyError, match="nope"):
        h["nope"]


def test_size_switch(monkeypatch):
    monkeypatch.delenv("RLBOOK_SIZE", raising=False)
    assert rl.get_size() == "small" and rl.by_size(1, 2) == 1
    monkeypatch.setenv("RLBOOK_SIZE", "full")
    assert rl.get_size() == "full" and rl.by_size(1, 2) == 2
    monkeypatch.setenv("RLBOOK_SIZE", "huge")
    with pytest.raises(ValueError, match="RLBOOK_SIZE"):
        rl.get_size()
    assert rl.get_device("cpu").type == "cpu"


def test_device_switch_precedence(monkeypatch):
    """Explicit argument > $RLBOOK_DEVICE > CUDA when available > CPU."""
    monkeypatch.delenv("RLBOOK_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rl.get_device() == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert rl.get_device() == torch.device("cuda")  # auto-detection when the variable is unset ...
    for unset in ("", "  "):
        monkeypatch.setenv("RLBOOK_DEVICE", unset)
        assert rl.get_device() == torch.device("cuda")  # ... or empty
    monkeypatch.setenv("RLBOOK_DEVICE", " CPU ")
    assert rl.get_device() == torch.device("cpu")  # the variable beats auto-detection
    assert rl.get_device("meta") == torch.device("meta")  # and the explicit argument beats the variable
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("RLBOOK_DEVICE", "cuda")
    assert rl.get_device() == torch.device("cuda")
    monkeypatch.setenv("RLBOOK_DEVICE", "cuda:1")
    assert rl.get_device() == torch.device("cuda", 1)


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:x", "cuda:-1", "mps", "cpu:0", "tpu"])
def test_device_switch_rejects_bad_values(monkeypatch, bad):
    monkeypatch.setenv("RLBOOK_DEVICE", bad)
    with pytest.raises(ValueError, match=r"RLBOOK_DEVICE.*'cpu', 'cuda', 'cuda:N'"):
        rl.get_device()
    assert rl.get_device("cpu") == torch.device("cpu")  # an explicit device never reads the variable


def test_device_switch_cuda_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for value in ("cuda", "cuda:0"):
        monkeypatch.setenv("RLBOOK_DEVICE", value)
        with pytest.raises(ValueError, match="RLBOOK_DEVICE.*CUDA.*is_available"):
            rl.get_device()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("RLBOOK_DEVICE", "cuda:1")
    with pytest.raises(ValueError, match="GPU 1.*has 1"):
        rl.get_device()


def test_same_device_normalises_the_cuda_index(monkeypatch):
    assert rl.same_device("cpu", torch.device("cpu")) and not rl.same_device("cpu", "cuda:0")
    assert not rl.same_device("meta", "cpu")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # no CUDA needed to compare names
    assert rl.same_device("cuda", "cuda:0") and rl.same_device(torch.device("cuda:0"), "cuda")
    assert not rl.same_device("cuda", "cuda:1") and rl.same_device("cuda:1", "cuda:1")


def test_seed_everything_reproducible_and_validated():
    g = rl.seed_everything(3)
    a = torch.rand(3), np.random.rand(), torch.rand(2, generator=g)
    g = rl.seed_everything(3)
    b = torch.rand(3), np.random.rand(), torch.rand(2, generator=g)
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and torch.equal(a[2], b[2])
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="seed"):
            rl.seed_everything(bad)


def test_report_headline(capsys):
    assert rl.report_headline("X: 1 step") is None  # printed once: no returned string for a cell to echo
    assert capsys.readouterr().out == f"{rl.HEADLINE_MARK} X: 1 step\n"
    with pytest.raises(ValueError, match="text"):
        rl.report_headline("two\nlines")


def test_check_helpers_name_the_argument():
    from rlbook import _checks

    with pytest.raises(ValueError, match="`gamma` must be in \\[0.0, 1.0\\]"):
        _checks.check_in_range("gamma", -0.1, 0.0, 1.0)
    with pytest.raises(ValueError, match="`terminated` must have the same shape as `rewards`"):
        _checks.check_same_shape(rewards=torch.zeros(2, 3), terminated=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="`x` contains NaN"):
        _checks.as_float_tensor("x", [1.0, float("nan")])
    with pytest.raises(ValueError, match="`p` must sum to 1"):
        _checks.check_probabilities("p", torch.tensor([0.5, 0.2]))


def test_benchmark_results_load_the_saved_file_and_name_a_missing_one(tmp_path, monkeypatch):
    import json

    from rlbook import config

    (tmp_path / "demo.json").write_text(json.dumps({"family": {"GRPO": {"pass@1": [0.8, 0.01]}}}), encoding="utf-8")
    monkeypatch.setattr(config, "BENCHMARK_RESULTS", tmp_path)
    assert rl.benchmark_results("demo")["family"]["GRPO"]["pass@1"] == [0.8, 0.01]
    with pytest.raises(ValueError, match=r"`name`.*\['demo'\].*'missing'"):
        rl.benchmark_results("missing")


def test_the_shipped_grpo_variants_result_has_every_row_the_chapters_print():
    """Every configuration the chapters name, ten or more paired seeds, one value per seed for every
    metric, and a summary that agrees with the per-seed values (mean inside its own interval)."""
    import importlib.util
    import math
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "grpo_variants.py"
    spec = importlib.util.spec_from_file_location("grpo_variants", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    saved = rl.benchmark_results("grpo_variants")
    seeds = saved["seeds"]
    assert len(seeds) >= 10 and len(set(seeds)) == len(seeds), "ten or more distinct paired seeds"
    assert set(saved["per_seed"]) == set(bench.CONFIGS) == set(saved["summary"]) == set(saved["configs"])
    for name in bench.ABLATION + bench.FAMILY + bench.CONFOUNDS:
        assert name in saved["per_seed"], name
    for name, row in saved["per_seed"].items():
        assert set(row) == set(bench.METRICS), name
        for metric, values in row.items():
            assert len(values) == len(seeds), (name, metric)
            assert all(v is None or math.isfinite(v) for v in values), (name, metric)
        mean, low, high = saved["summary"][name]["pass@1"]
        assert low <= mean <= high and abs(mean - sum(row["pass@1"]) / len(seeds)) < 1e-12, name
        assert len(saved["curves"][name]) == len(seeds), name
    for metric, values in saved["before"].items():
        assert len(values) == len(seeds), metric