"""docs/adding-an-algorithm.md quotes SCAFFOLD's files: every quoted code line must be in them.

(Its FedAvgM blocks are whole files, run by tests/algorithms/test_adding_fedavgm.py.)"""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _code_lines(block: str) -> list[str]:
    lines = []
    for line in block.splitlines():
        code = re.sub(r"\s+#.*$", "", line).strip()
        if code and not code.startswith(("#", '"""')):
            lines.append(code)
    return lines


def test_quoted_scaffold_code_is_in_the_source_files():
    # Prepare
    doc = (REPO / "docs" / "adding-an-algorithm.md").read_text()
    blocks = [block for block in re.findall(r"```python\n(.*?)```", doc, flags=re.S)
              if "fedavgm" not in block.splitlines()[0]]
    sources = "\n".join(
        re.sub(r"\s+#.*$", "", line).strip()
        for path in ("pflpipe/spec/algorithms/scaffold_params.py", "pflpipe/algorithms/scaffold.py")
        for line in (REPO / path).read_text().splitlines())

    # Assert
    assert len(blocks) == 2
    missing = [line for block in blocks for line in _code_lines(block)
               if line not in sources.splitlines()]
    assert missing == []
