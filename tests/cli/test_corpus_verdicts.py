"""The hostile corpus's verdicts: how a case's outcome is classified for the tally."""

import pytest
from verdicts import CASE_LIMIT_S, judge

NEVER = ("Traceback", "unexpected")


@pytest.mark.parametrize(("outcome", "verdict"), [
    ((2, "error: x.yaml:3: federation.lr: must be > 0", 1.0), "ok"),
    ((2, "error: x.yaml:3: federation.lr: must be > 0", CASE_LIMIT_S + 0.1), "hang"),
    ((1, "Traceback (most recent call last):\n...", 1.0), "traceback"),
    ((0, "", 1.0), "silently wrong"),
    ((1, "error: x.yaml:3: federation.lr: must be > 0", 1.0), "unclear"),  # wrong exit code
    ((2, "error: something else", 1.0), "unclear"),                         # fragment missing
    ((2, "error: unexpected KeyError: federation.lr", 1.0), "unclear"),     # a forbidden word
])
def test_each_outcome_gets_its_verdict(outcome, verdict):
    code, err, seconds = outcome

    assert judge(code, err, seconds, expected=2, fragments=["federation.lr"],
                 never=NEVER) == verdict


def test_lost_data_is_its_own_verdict_even_with_the_right_message():
    assert judge(1, "error: the S3 endpoint does not answer", 6.0, expected=1,
                 fragments=["does not answer"], never=NEVER, lost=True) == "data lost"
