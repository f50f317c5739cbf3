"""The "did you mean" hint every unknown-name error carries."""

from __future__ import annotations

from gnnbridge.core.errors import did_you_mean


def test_a_swap_of_two_letters_beats_a_name_that_shares_as_many():
    # difflib rates 'gat' and 'hgt' alike for 'gta'; one swap is fewer edits than two.
    assert did_you_mean("gta", ["gat", "gcn", "gin", "hgt", "rgcn", "sage"]) == " (did you mean 'gat'?)"
    assert did_you_mean("sgae", ["hgt", "sage"]) == " (did you mean 'sage'?)"


def test_case_is_ignored_and_nothing_close_is_no_hint():
    assert did_you_mean("IMDB-BINARY", ["imdb-binary", "mutag"]) == " (did you mean 'imdb-binary'?)"
    assert did_you_mean("xyz", ["sage", "gat"]) == ""
