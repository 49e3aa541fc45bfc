"""gpu-healthcheck(8): generated from the argparse definition, equal to `--help`, rendered by man.

docs/gpu-healthcheck.8 is committed (so `man -l docs/gpu-healthcheck.8` works in a checkout and
the packages ship it without running Python at build time); `make man` regenerates it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "gpu-healthcheck.8"
GENERATOR = ROOT / "docs" / "make-manpage"


def _flat(text: str) -> str:
    """Whitespace collapsed and typographic characters as ASCII: man and --help wrap differently."""
    for fancy, plain in (("\u2010", "-"), ("\u2212", "-"), ("\u2019", "'"), ("\u2018", "'"),
                         ("\u201c", '"'), ("\u201d", '"')):
        text = text.replace(fancy, plain)
    return re.sub(r"\s+", " ", text).strip()


def test_committed_page_is_what_the_parser_generates() -> None:
    proc = subprocess.run([sys.executable, str(GENERATOR)], capture_output=True, text=True,
                          timeout=60, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == PAGE.read_text(), \
        "docs/gpu-healthcheck.8 is out of date with the CLI: run `make man` and commit it"


@pytest.fixture(scope="module")
def rendered() -> str:
    if shutil.which("man") is None:
        pytest.skip("man not installed (Debian package man-db)")
    env = dict(os.environ, MANWIDTH="100", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    proc = subprocess.run(["man", "--warnings", "-l", "-P", "cat", str(PAGE)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", f"groff warnings:\n{proc.stderr}"
    return proc.stdout


def test_man_renders_every_option_and_its_help(rendered: str) -> None:
    text = _flat(rendered)
    assert text.startswith("GPU-HEALTHCHECK(8)")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "FILES",
                    "ENVIRONMENT", "SEE ALSO"):
        assert re.search(rf"(?m)^{section}$", rendered), section
    parser = build_parser()
    options = [a for a in parser._actions if a.option_strings]
    assert len(options) >= 10
    for action in options:
        for flag in action.option_strings:
            assert f" {flag}" in text, flag
        assert _flat(action.help or "") in text, action.help


def test_man_says_what_help_says(rendered: str, capsys) -> None:
    from healthcheck.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    text = _flat(rendered)
    # The description, and each exit-status line, word for word.
    assert _flat(build_parser().description or "") in text
    exit_lines = help_text.split("exit status:")[1].split("\n\n")[0].strip().splitlines()
    assert len(exit_lines) >= 3
    for line in exit_lines:
        assert _flat(line) in text, line
    # Every option --help lists is in the page.
    for flag in set(re.findall(r"(?<![\w-])--?[a-z][a-z-]*", help_text.split("exit status:")[0])):
        assert f" {flag}" in text, flag


def test_man_exit_status_covers_every_mode() -> None:
    """Each mode (the options of the one-of group: --node, --repair, ..., --version) has its
    exit status under EXIT STATUS, so a mode added later cannot leave it out silently."""
    section = PAGE.read_text().split(".SH EXIT STATUS", 1)[1].split(".SH ", 1)[0].replace("\\-", "-")
    group = next(g for g in build_parser()._mutually_exclusive_groups if g.required)
    # an old name (--fabric-sweep) exits as the mode it names
    modes = [a.option_strings[0] for a in group._group_actions if not (a.help or "").startswith("deprecated")]
    missing = [m for m in modes if not re.search(rf"(^|[\s,]){re.escape(m)}(?=[\s,])", section)]
    assert modes and not missing, f"EXIT STATUS says nothing of {missing}"
