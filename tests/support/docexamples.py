"""Run the Python examples of a Markdown page and check they print what the page says.

A ``print(...)  # expected`` line must print ``expected``; a ```` ```python ```` block followed directly by a
```` ```text ```` block must print exactly that text.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

BLOCK = re.compile(r"```python\n(.*?)```(?:\s*```text\n(.*?)```)?", flags=re.S)


def check_examples(page: pathlib.Path) -> int:
    """Run every Python block of ``page``; return how many ran."""
    blocks = BLOCK.findall(page.read_text(encoding="utf-8"))
    for code, shown in blocks:
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            exec(compile(code, str(page), "exec"), {})
        if shown:
            assert output.getvalue().rstrip("\n") == shown.rstrip("\n"), page
        else:
            expected = [line.split("# ", 1)[1].strip() for line in code.splitlines()
                        if line.lstrip().startswith("print(") and "# " in line]
            assert output.getvalue().splitlines() == expected, page
    return len(blocks)
