"""The "Where next" page: generated from ``rlbook.frameworks``, every cell filled, every name sourced.

The page (``book/where_next.md``) is what ``tools/build_where_next.py`` writes from the one mapping
``rlbook.frameworks.FRAMEWORK_NAMES``; each concept row names a setting (or "—") in all five
frameworks, each name with the file it was read in; the rows cover the book's GRPO-family fields;
and the TRL column names only ``trl.GRPOConfig`` fields that ``rlbook.bridge.to_trl_config`` sets.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

import rlbook as rl
from rlbook import bridge, frameworks

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
PAGE = BOOK / "where_next.md"

# the concepts the page must cover, as GRPOConfig fields (the brief of the appendix: group size, clip band,
# KL, aggregation, advantage estimators, dynamic sampling, overlong filter and penalty, μ, GSPO/CISPO,
# the sampler correction, entropy bonus, reference reset, budget, temperature, GAE)
STATED_FIELDS = {"group_size", "clip_eps_low", "clip_eps_high", "kl_coef", "loss_aggregation", "advantage_estimator",
                 "dynamic_sampling", "overlong_filter", "overlong_cache_length", "num_inner_epochs", "per_token_loss",
                 "is_correction", "entropy_coef", "ref_reset_every", "max_new_tokens", "temperature", "gae_lambda"}


def _tool():
    spec = importlib.util.spec_from_file_location("build_where_next", ROOT / "tools" / "build_where_next.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table_rows(text: str) -> list[list[str]]:
    """The cells of the concept table's body rows (a "|" escaped as "\\|" stays inside its cell)."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines and lines[0].startswith("| concept |"), "the concept table is missing"
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines[1:]]


def _trl_field_names(cell: str) -> list[str]:
    """The ``trl.GRPOConfig`` field names a TRL cell sets: backticked identifiers before any ":" (values
    follow it), cut at "="; dotted names and classes (``trl.rewards...``, ``RLOOTrainer``) are not fields."""
    names = []
    for token in re.findall(r"`([^`]+)`", cell.split(":")[0]):
        name = token.split("=")[0]
        if re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            names.append(name)
    return names


def test_the_page_is_what_the_generator_writes():
    assert PAGE.read_text(encoding="utf-8") == frameworks.where_next_markdown(), (
        "book/where_next.md is out of date: run python tools/build_where_next.py")
    assert _tool().main(["--check"]) == 0


def test_the_page_is_the_last_entry_of_the_table_of_contents():
    files = re.findall(r"^\s*-\s*file:\s*(\S+)", (BOOK / "_toc.yml").read_text(), re.MULTILINE)
    assert files[-1] == "where_next" and files.count("where_next") == 1


def test_every_concept_row_fills_all_five_framework_columns():
    assert frameworks.FRAMEWORKS == ("TRL", "verl", "OpenRLHF", "prime-rl", "SkyRL")
    for concept, row in frameworks.FRAMEWORK_NAMES.items():
        for fw in frameworks.FRAMEWORKS:
            name, source = row[fw]  # KeyError: a framework left out of the row
            assert isinstance(name, str) and name.strip(), (concept, fw)
    rows = _table_rows(PAGE.read_text(encoding="utf-8"))
    assert [r[0] for r in rows] == list(frameworks.FRAMEWORK_NAMES)
    for cells in rows:
        assert len(cells) == 2 + len(frameworks.FRAMEWORKS), cells  # concept, the book, five frameworks
        assert all(cells), cells


def test_every_name_has_a_source_and_a_dash_has_none():
    page = PAGE.read_text(encoding="utf-8")
    sources = page.split("## Sources", 1)[1]
    for concept, row in frameworks.FRAMEWORK_NAMES.items():
        for fw in frameworks.FRAMEWORKS:
            name, source = row[fw]
            if name == frameworks.NONE:
                assert source == "", f"{concept} / {fw}: '—' with a source {source!r}"
                continue
            assert "`" in name, f"{concept} / {fw}: {name!r} names no setting"
            # a file path inside the repository (or TRL's package): folders and a file name with an extension
            assert re.fullmatch(r"[\w.-]+(/[\w.-]+)+\.(py|yaml|md)", source), f"{concept} / {fw}: source {source!r}"
            section = sources.split(f"**{fw}**", 1)[1].split("\n**", 1)[0]
            assert f"`{source}`" in section, f"{concept} / {fw}: {source} is not listed under {fw}'s sources"
    for fw in frameworks.FRAMEWORKS:
        assert fw in frameworks.FRAMEWORK_SOURCES


def test_the_concepts_cover_the_stated_fields():
    config_fields = {f.name for f in dataclasses.fields(rl.GRPOConfig)}
    covered = set()
    for concept, row in frameworks.FRAMEWORK_NAMES.items():
        assert set(row["fields"]) <= config_fields, (concept, set(row["fields"]) - config_fields)
        covered |= set(row["fields"])
        for name in re.findall(r"`([\w.]+)`", row["book"]):  # fields, their named values, rl. functions
            assert name in config_fields or hasattr(rl, name.removeprefix("rl.")), (concept, name)
    assert set(frameworks.REQUIRED_FIELDS) >= STATED_FIELDS
    assert covered >= STATED_FIELDS, f"no concept row for {sorted(STATED_FIELDS - covered)}"
    for concept in frameworks.NOTES:
        assert concept in frameworks.FRAMEWORK_NAMES, f"a note for an unknown concept: {concept}"


def test_the_trl_column_names_fields_the_bridge_sets():
    mapped = set(bridge.TRL_FIELDS) | set(bridge.TRL_IS_FIELDS)
    named = {name for row in frameworks.FRAMEWORK_NAMES.values() for name in _trl_field_names(row["TRL"][0])}
    assert named, "no TRL field names found in the table"
    assert named <= mapped, f"the page names TRL fields that to_trl_config does not set: {sorted(named - mapped)}"
    assert _trl_field_names("`loss_type`: `grpo`, `dapo`") == ["loss_type"]  # the parser: values are not names
    assert _trl_field_names("`scale_rewards=\"none\"`, `RLOOTrainer`, `trl.rewards.x`") == ["scale_rewards"]


def test_the_trl_column_names_exist_in_trl():
    trl = pytest.importorskip("trl", reason="checking names against TRL needs the `trl` extra")
    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    for concept, row in frameworks.FRAMEWORK_NAMES.items():
        for name in _trl_field_names(row["TRL"][0]):
            assert name in fields, f"{concept}: trl.GRPOConfig has no field {name!r} (TRL {trl.__version__})"
    assert hasattr(trl, "RLOOTrainer") and not hasattr(trl, "PPOTrainer")  # the page says so
    from trl.rewards import get_soft_overlong_punishment  # noqa: F401


def test_the_chapter_links_resolve():
    page = PAGE.read_text(encoding="utf-8")
    links = re.findall(r"\{doc\}`[^<`]*<(\w+)>`", page)
    assert links
    for doc in links:
        assert (ROOT / "notebooks" / f"{doc}.ipynb").is_file(), doc
