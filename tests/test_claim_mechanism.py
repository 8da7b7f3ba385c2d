"""The claim mechanism cannot pass the wrong way: each escape an outside check demonstrated is a failing case here.

The escapes (each passed silently before the mechanism was hardened):
1. a comparative sentence with a word the old list missed ("faster", "higher", "ahead", "moves", "lowered");
2. a generic quote ("no difference detected at this scale") backing an unrelated sentence elsewhere in the chapter;
3. a "none" verdict backing "The critic did not pay" while the critic ran 1.9 points *ahead*;
4. "did not grow" checked against a bound the grown value fits under (checked here on the growth);
5. a tolerance taken from a confidence interval's half-width ("about five tokens" ± 2.94 accepting 2.1) or chosen
   wide ("About half" ± 0.2 accepting 0.31);
6. a claim quoting words that appear only far above it.
"""

from __future__ import annotations

import nbformat
import numpy as np
import pytest

import rlbook as rl
from test_book_text import _misplaced_quotes, _unbacked_comparisons

GRPO = np.array([0.90, 0.88, 0.93, 0.91, 0.89, 0.92, 0.90, 0.87, 0.94, 0.91])
PPO_AHEAD = GRPO + np.array([0.04, -0.02, 0.05, 0.03, -0.01, 0.04, 0.02, -0.03, 0.05, 0.02])  # +0.019 [-0.002, +0.040]


def _notebook(*cells):
    return [nbformat.v4.new_markdown_cell(c[3:]) if c.startswith("md:") else nbformat.v4.new_code_cell(c) for c in cells]


def test_escape_1_comparative_words_the_old_list_missed_are_caught():
    cells = _notebook("md:CISPO learns faster than GRPO and ends higher. DAPO's dynamic sampling lowered "
                      "pass@1 below GRPO. MaxRL is ahead of RLOO on every seed. Only the token-level loss moves pass@1.",
                      "x = 1")
    problems = _unbacked_comparisons(99, cells)
    for words in ("CISPO learns faster", "dynamic sampling lowered", "MaxRL is ahead", "token-level loss moves"):
        assert any(words in p for p in problems), (words, problems)


def test_escape_2_a_generic_quote_elsewhere_backs_nothing():
    cells = _notebook("md:Clip-higher: no difference detected at this scale.",
                      'rl.claim_comparison("no difference detected at this scale", c, "none")',
                      "md:GSPO is worse than DPPO here; no difference detected at this scale for clip-higher.",
                      "y = 2")
    problems = _unbacked_comparisons(99, cells)
    assert len(problems) == 1 and "GSPO is worse than DPPO" in problems[0]


def test_escape_3_none_cannot_back_words_that_say_alike_and_needs_its_own_wording():
    c = rl.compare(PPO_AHEAD, GRPO, names=("critic", "group"))
    assert c.ci_low < 0 < c.ci_high and c.mean_diff > 0.015  # the critic leans ahead, undetected
    rl.claim_comparison("The critic: no difference detected", c, "none")  # what "none" can honestly say
    with pytest.raises(AssertionError, match="within"):  # what "did not pay" would need, and does not get
        rl.claim_comparison("The critic did not pay", c, "equivalent", margin=0.01)
    cells = _notebook("md:The critic did not pay.", 'rl.claim_comparison("The critic did not pay", c, "none")')
    problems = _unbacked_comparisons(99, cells)
    assert any("'none' verdict backs a sentence" in p for p in problems)
    assert any("alike with no 'equivalent' verdict" in p for p in problems)
    fixed = _notebook("md:The critic did not pay: within ±0.05 of the group baseline.",
                      'rl.claim_comparison("The critic did not pay", c, "equivalent", margin=0.05)')
    assert _unbacked_comparisons(99, fixed) == []
    rl.claim_comparison("The critic did not pay", c, "equivalent", margin=0.05)


def test_escape_4_did_not_grow_is_checked_on_the_growth():
    before, after = 10.59, 19.5  # wrong answers grew by 84 %
    rl.claim("stayed within (at most 20 tokens)", after, high=20.0)  # the old check: passes, and says nothing
    with pytest.raises(AssertionError):
        rl.claim("did not grow (by at most one token)", after - before, high=1.0)


@pytest.mark.parametrize("quote, value, expected, kwargs", [
    ("lengthened right answers by about five tokens", 2.1, 5.0, {"abs": (7.804 - 1.926) / 2}),
    ("About half the completions", 0.31, 0.5, {"abs": 0.2}),
])
def test_escape_5_a_tolerance_wider_than_the_words_is_refused(quote, value, expected, kwargs):
    with pytest.raises(ValueError, match="wider than its words allow"):
        rl.claim(quote, value, expected, **kwargs)
    with pytest.raises(AssertionError):  # and the words' own tolerance refuses the far-off value
        rl.claim(quote, value, expected)


def test_escape_6_a_claim_quotes_the_markdown_right_above_it():
    cells = _notebook("md:The return reached about 350.", "x = 1", "md:Another paragraph.",
                      'rl.claim("about 350", r, 350)')
    assert len(_misplaced_quotes(cells)) == 1
    assert _misplaced_quotes(_notebook("md:The return reached about 350.", 'rl.claim("about 350", r, 350)')) == []


@pytest.mark.parametrize("quote, expected, tolerance", [
    ("0.42", 0.42, 0.005), ("about 0.42", 0.42, 0.01), ("about 350", 350, 10), ("about five tokens", 5, 1),
    ("exactly 12 seeds", 12, 0.5), ("about a third", 1 / 3, 1 / 24), ("about half", 0.5, 1 / 12),
    ("42 % of them", 0.42, 0.005), ("by 2.5 points", 0.025, 0.0005), ("about two points", 0.02, 0.01), ("10,240 completions", 10240, 5), ("roughly 1.5", 1.5, 0.1),
    ("two thirds of the mass", 2 / 3, 1 / 24), ("a sixth of bf16's", 1 / 6, 1 / 84),
])
def test_stated_tolerance_reads_the_digits(quote, expected, tolerance):
    assert rl.stated_tolerance(quote, expected) == pytest.approx(tolerance)


def test_stated_tolerance_is_none_for_a_number_the_words_do_not_write():
    assert rl.stated_tolerance("the fewest of the four", 0.067) is None
    with pytest.raises(ValueError, match="does not write"):
        rl.claim("the fewest of the four", 0.067, 0.067)
    rl.claim("the fewest of the four", 0.067, 0.067, abs=0.01)  # a verbal claim: the tolerance is the author's


def test_rates_are_guarded_at_their_ends_by_default():
    with pytest.raises(ValueError, match="end of its range"):
        rl.claim("a pass@1 above 0.9", 1.0, low=0.9)
    with pytest.raises(ValueError, match="end of its range"):
        rl.claim("no answer was cut off (a share of 0)", 0.0, high=0.01)
    rl.claim("no answer was cut off (a share of 0)", 0.0, high=0.01, bounds=False)  # the sentence is about the end
    rl.claim("a return above 400", 500.0, low=400)  # not a rate: no guard
    with pytest.raises(ValueError, match="bounds"):
        rl.claim("a pass@1 above 0.9", 0.95, low=0.9, bounds=(0.0,))


def test_equivalence_needs_the_whole_interval_inside_the_margin():
    tight = rl.compare(GRPO + 0.001 * np.sin(np.arange(10)), GRPO)
    rl.claim_comparison("the same within ±0.01", tight, "equivalent", margin=0.01)
    with pytest.raises(ValueError, match="margin"):
        rl.claim_comparison("the same", tight, "equivalent")
    with pytest.raises(ValueError, match="margin"):
        rl.claim_comparison("the same", tight, "equivalent", margin=-0.1)
    with pytest.raises(ValueError, match="margin"):
        rl.claim_comparison("no difference detected", tight, "none", margin=0.01)


def test_adjust_p_values_holm_and_bh_against_hand_computed_values():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06
    np.testing.assert_allclose(rl.adjust_p_values(p, "holm"), [0.03, 0.06, 0.06, 0.02])
    # BH: sorted p_(i)·m/i = 0.02, 0.02, 0.04, 0.04, then the running min from the top
    np.testing.assert_allclose(rl.adjust_p_values(p, "bh"), [0.02, 0.04, 0.04, 0.02])
    assert np.all(rl.adjust_p_values(p, "holm") >= rl.adjust_p_values(p, "bh"))  # FWER control is the stricter
    with pytest.raises(ValueError, match="method"):
        rl.adjust_p_values(p, "bonferroni-ish")
    with pytest.raises(ValueError, match="p_values"):
        rl.adjust_p_values([0.1, float("nan")])
    with pytest.raises(ValueError, match="p_values"):
        rl.adjust_p_values([])


def test_holm_matches_an_independent_step_down_loop():
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = rng.uniform(0, 0.2, size=rng.integers(1, 12))
        m, order = p.size, np.argsort(p)
        expected, running = np.empty(m), 0.0
        for rank, idx in enumerate(order):
            running = max(running, min(1.0, (m - rank) * p[idx]))
            expected[idx] = running
        np.testing.assert_allclose(rl.adjust_p_values(p, "holm"), expected)
