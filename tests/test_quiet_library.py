"""The library's loads, saves and TRL runs print nothing a reader cannot act on.

Stored notebook outputs are what the site shows: transformers 5 drew a "Loading weights" bar for
each load and a "Writing model shards" bar for each save, and TRL's trainer triggered a transformers
``FutureWarning`` (with the builder's absolute path) and an ``attention_mask`` notice. Each is
silenced at the library call; unrelated warnings must still show.
"""

from __future__ import annotations

import copy
import logging
import warnings

import pytest

import rlbook as rl

TOK = rl.lm.build_char_tokenizer()
NOISE = ("Loading weights", "Writing model shards", "is_gradient_checkpointing", "attention_mask")


def _tiny():
    return rl.lm.build_policy(rl.lm.policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=0, device="cpu")


def test_checkpoint_save_and_load_draw_no_progress_bar(tmp_path, capfd):
    from transformers.utils import logging as hf_logging

    rl.lm.save_checkpoint(_tiny(), TOK, tmp_path / "ck")
    rl.lm.load_checkpoint(tmp_path / "ck")
    rl.lm.load_policy(tmp_path / "ck")
    out, err = capfd.readouterr()
    assert not [n for n in NOISE if n in out + err], err[-500:]
    assert hf_logging.is_progress_bar_enabled()  # restored: a reader's own downloads keep their bars


def test_the_switch_is_what_silences_them(tmp_path, capfd):
    _tiny().save_pretrained(tmp_path / "raw")  # the same save outside the library's switch
    assert "Writing model shards" in capfd.readouterr().err


def test_a_trl_run_prints_no_warning_of_trls_internals(capfd):
    pytest.importorskip("trl", reason="needs the `trl` extra")
    pytest.importorskip("datasets", reason="needs the `trl` extra")
    from transformers.trainer_callback import PrinterCallback

    from rlbook import bridge

    recipe = rl.GRPOConfig(advantage_std="sample", kl_coef=0.04, num_steps=1, group_size=4, prompts_per_step=4, max_new_tokens=5, device="cpu")
    trainer = bridge.build_trl_trainer(copy.deepcopy(_tiny()), TOK, rl.lm.AdditionTask(), recipe, disable_tqdm=True)
    trainer.remove_callback(PrinterCallback)
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    log = logging.getLogger("transformers.modeling_utils")
    log.addHandler(handler)  # sees what passes the logger's filters, whatever stream transformers prints to
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            bridge._quiet_trl_internals()  # as build_trl_trainer did: catch_warnings reset the filters
            trainer.train()
            warnings.warn("an unrelated FutureWarning", FutureWarning)
        log.warning("an unrelated transformers notice")
    finally:
        log.removeHandler(handler)
    out, err = capfd.readouterr()
    shown = out + err + " ".join(str(w.message) for w in caught) + " ".join(records)
    assert not [n for n in NOISE if n in shown], shown[-800:]
    assert [str(w.message) for w in caught] == ["an unrelated FutureWarning"]
    assert records == ["an unrelated transformers notice"]
