"""The CLI's wrapped lines: none past the width unless one word is, and no word lost or split."""

from hypothesis import given
from hypothesis import strategies as st

from pflpipe.cli.text import WIDTH, paragraphs, wrap

words = st.lists(st.text(st.characters(codec="utf-8", exclude_categories=("Z", "C")),
                         min_size=1, max_size=40), min_size=1, max_size=80)


@given(words, st.integers(0, 12))
def test_wrap_keeps_every_word_and_stays_within_the_width(parts, indent):
    text = "  " + " ".join(parts)

    lines = wrap(text, indent)

    assert [w for line in lines for w in line.split()] == parts
    assert all(len(line) <= WIDTH or len(line.split()) == 1 for line in lines)
    assert all(line.startswith(" " * indent) for line in lines[1:])


def test_the_vote_sentence_wraps_at_160_characters():
    answer = ("Best performing on test: fedper and persfl are indistinguishable here (Δ +0.4 pp, "
              "95 % CI [−1.2, +1.8], p = 0.75, n = 10 clients; about 332 clients would settle "
              "it); by the thesis's seven criteria alone it would be fedper (wins 5 of 7 "
              "criteria: PUI, MPI, API, AA; tied at the best on PUD).\nsecond paragraph")
    lines = paragraphs(answer).splitlines()
    assert [len(line) for line in lines] == [160, 128, 16]  # "settle" ends at 160
    assert lines[1].startswith("it); by the thesis's seven criteria")
