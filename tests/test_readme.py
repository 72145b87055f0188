"""The README's Python examples run as shown and print what their comments say."""

import pathlib
import re

from tests.support.docexamples import check_examples

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_examples_print_what_they_say():
    assert check_examples(README) >= 2


def test_readme_test_command_is_what_ci_runs():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Set up and test"):]
    demo, test = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1).strip().splitlines()
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert test in ci
    makefile = (README.parent / "Makefile").read_text()
    for command in (demo, test):
        make, target = command.split()
        assert make == "make" and re.search(rf"^{target}:", makefile, flags=re.M), command
