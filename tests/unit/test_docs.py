"""The user docs hold together: a short README, links and paths that resolve inside the repo,
and no development history or references to files a clone does not have.

User docs: README.md, docs/*.md, every README.md under deploy/, the man page and its source,
the shipped config and slurm.conf/plugstack.conf examples, and `--help`.  Read as files (and
the argparse definition in-process); nothing is run.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Dict, List, Set

import pytest

from healthcheck.cli import build_parser
from tests.lib.fakenode import ROOT

README_MAX_LINES = 300
DOC_PAGES = ("checks", "configuration", "repair", "deep", "network", "observability", "failures",
             "trust", "performance", "architecture", "development")
MARKDOWN = sorted({ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "deploy").rglob("README.md")})
OTHER_USER_DOCS = [ROOT / "docs" / "make-manpage", ROOT / "docs" / "gpu-healthcheck.8",
                   ROOT / "deploy" / "slurm" / "config.toml", ROOT / "deploy" / "slurm" / "slurm.conf.example",
                   ROOT / "deploy" / "slurm" / "plugstack.conf.example"]
# What a user's clone does not have, and how development history reads.
FORBIDDEN = [
    (re.compile(r"CONTRACTS"), "a reference to CONTRACTS, which no clone has"),
    (re.compile(r"\.\./shared"), "a path outside the repository"),
    (re.compile(r"\bissue \d+", re.I), "development history (an issue number)"),
    (re.compile(r"\bitem \d+", re.I), "development history (an item number)"),
    (re.compile(r"\b(this|that|the last|the architecture) (round|stop)\b", re.I), "development history"),
    (re.compile(r"\bREADME[,:]? [\"“]"), "a README section by name: link the docs/ page"),
    (re.compile(r"\bREADME: [A-Z]"), "a README section by name: link the docs/ page"),
]
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A path in backticks that names a file of this repository (from its root), e.g.
# `tests/slurm/test_spank.py` or `deploy/slurm/README.md`.
REPO_PATH = re.compile(r"`((?:docs|deploy|tests|healthcheck|spank|prolog|epilog|vendor)/[^`\s]*)`")
NOT_IN_REPO = ("/build/", ".peer-venv", "__pycache__")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _without_code_blocks(text: str) -> str:
    """Fenced blocks are examples (shell output, JSON): their brackets are no links."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: markup and punctuation dropped, lower case, spaces to '-'."""
    text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip())
    text = text.lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    seen: Dict[str, int] = {}
    found: Set[str] = set()
    for line in _without_code_blocks(path.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = github_anchor(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_readme_is_at_most_300_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


@pytest.mark.parametrize("page", DOC_PAGES)
def test_readme_links_every_docs_page(page: str) -> None:
    path = ROOT / "docs" / f"{page}.md"
    assert path.is_file(), f"docs/{page}.md is missing"
    assert f"](docs/{page}.md" in (ROOT / "README.md").read_text(), f"README.md does not link docs/{page}.md"


@pytest.mark.parametrize("doc", MARKDOWN, ids=_rel)
def test_every_relative_link_resolves_to_a_file_and_heading(doc: Path) -> None:
    broken: List[str] = []
    for target in LINK.findall(_without_code_blocks(doc.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, file:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists() or ROOT.resolve() not in (dest, *dest.parents):
            broken.append(f"{target}: no such file in the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {_rel(dest)}")
    assert not broken, f"{_rel(doc)}: " + "; ".join(broken)


@pytest.mark.parametrize("doc", MARKDOWN + [p for p in OTHER_USER_DOCS if p.suffix != ".8"], ids=_rel)
def test_every_repository_path_a_doc_names_exists(doc: Path) -> None:
    missing = []
    for name in REPO_PATH.findall(doc.read_text()):
        name = name.split("::")[0].rstrip(".,;:)")
        if any(c in name for c in "<>*{}[]$…") or "..." in name or any(p in name for p in NOT_IN_REPO):
            continue
        if not (ROOT / name).exists():
            missing.append(name)
    assert not missing, f"{_rel(doc)} names files the repository does not have: {missing}"


def _user_texts() -> Dict[str, str]:
    texts = {_rel(p): p.read_text() for p in MARKDOWN + OTHER_USER_DOCS}
    texts["gpu-healthcheck --help"] = build_parser().format_help()
    return texts


USER_TEXTS = _user_texts()


@pytest.mark.parametrize("name", sorted(USER_TEXTS))
def test_user_docs_carry_no_history_and_no_outside_references(name: str) -> None:
    text = USER_TEXTS[name]
    found = [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r} ({why})"
             for pattern, why in FORBIDDEN for m in pattern.finditer(text)]
    assert not found, f"{name}: " + "; ".join(found)


def test_github_anchor_follows_githubs_rules() -> None:
    assert github_anchor("`gpu-healthcheck --node`") == "gpu-healthcheck---node"
    assert github_anchor("The SPANK plugin (plugstack.conf)") == "the-spank-plugin-plugstackconf"
    assert github_anchor("Network checks (InfiniBand, RoCE, GPUDirect RDMA)") == \
        "network-checks-infiniband-roce-gpudirect-rdma"


def test_failures_page_names_test_files_that_exist() -> None:
    """docs/failures.md's tests column names files under tests/ without the prefix."""
    text = (ROOT / "docs" / "failures.md").read_text()
    named = set(re.findall(r"(?<![\w/])((?:unit|cli|slurm|readers|packaging)/[\w/]+\.py)", text))
    assert len(named) > 20, named
    missing = sorted(n for n in named if not (ROOT / "tests" / n).is_file())
    assert not missing, f"docs/failures.md names test files that do not exist: {missing}"
