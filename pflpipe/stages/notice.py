"""Lines a stage prints for `pflpipe run` to show on the stage's line.

`pflpipe run` reads every task's output (`pflpipe.pipelines.tasklog`); a line starting with
`NOTE` says what the stage did beyond running: the threads it used, the round it resumed from,
a reused partition, a warning. Run outside the CLI, they are plain output lines.
"""

#: The prefix of a note; `pflpipe.pipelines.tasklog` matches it.
NOTE = "pflpipe note: "


def note(text: str) -> None:
    """Print a note for the stage's line in `pflpipe run`."""
    print(NOTE + text, flush=True)
