"""Sentences that the comparative-sentence check of ``test_book_text.py`` flags but that compare no methods over seeds.

Each entry is (chapter, words of the sentence, why it needs no paired comparison): an exact computation
(enumeration, a closed form, one deterministic MDP), a definition, a paper's own finding that the sentence
cites, or one run over time. A sentence that compares trained methods is never exempt: it is backed by an
``rl.claim_comparison`` in the code cell after it. ``test_exemptions_still_match_a_sentence`` fails for an entry
whose sentence was rewritten. Keep each chapter's entries in its own block.
"""

NOT_A_METHOD_COMPARISON = [
    (3, '("better than usual" / "worse than usual")', "the sign of an advantage, not a comparison of methods"),
    (4, "would win outright, as it is unbiased and least noisy", "exact: bias and variance by enumeration (§4.5)"),
    (4, "tolerate variance better than bias", "a reason for a convention, not a measured comparison"),
    (4, "how much better an action was than the policy's average", "the definition of the advantage"),
    (4, "a worse critic makes bias expensive", "a critic's error, not a method"),
    (7, "The PPO paper found a simpler device that does better", "the paper's own finding, cited"),
    (7, "The critic has not got worse", "one run's value loss over time, not a comparison of methods"),
    (9, "an answer is good if it beats its siblings", "the definition of the group baseline"),
    (9, "As the model gets better", "one run over time, not a comparison of methods"),
    (11, "**Goals.**", "the chapter's goals list names what the reader will compare"),
    (13, '"Is DPO superior to PPO for LLM alignment?"', "the title and finding of the cited paper (Xu et al. 2024)"),
]
