"""The hostile corpus's verdicts (a helper of tests/conftest.py's `hostile` fixture)."""

#: What a corpus case may turn out to be besides "ok" (issue 30's tally).
VERDICTS = ("hang", "silently wrong", "data lost", "traceback", "unclear")
#: Seconds a case may take before it counts as a hang.
CASE_LIMIT_S = 20.0


def judge(code: int, err: str, seconds: float, *, expected: int, fragments=(), never=(),
          lost: bool = False) -> str:
    """The verdict of one corpus case: "ok" or one of `VERDICTS`."""
    if seconds > CASE_LIMIT_S:
        return "hang"
    if "Traceback" in err and "Traceback" in never:
        return "traceback"
    if lost:
        return "data lost"
    if code == 0 and expected != 0:
        return "silently wrong"
    flat = " ".join(err.split())  # the CLI wraps its lines at 160 characters

    def said(text: str) -> bool:
        return text in err or " ".join(text.split()) in flat

    if code != expected or not all(map(said, fragments)) or any(w in err for w in never):
        return "unclear"
    return "ok"
