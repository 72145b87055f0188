"""The README's Python examples run as shown and print what their comments say."""

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_examples_print_what_they_say():
    blocks = python_blocks()
    assert blocks
    for block in blocks:
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            exec(compile(block, "README.md", "exec"), {})
        expected = [line.split("# ", 1)[1].strip() for line in block.splitlines()
                    if line.lstrip().startswith("print(") and "# " in line]
        assert output.getvalue().splitlines() == expected


def test_readme_test_command_is_what_ci_runs():
    text = README.read_text(encoding="utf-8")
    setup = re.search(r"```sh\n(.*?)```", text, flags=re.S).group(1).strip().splitlines()
    ci = (README.parent / ".ci" / "run").read_text().strip().splitlines()
    assert setup == ci[-2:]
