"""What the packages must carry besides the program, read from the one place each is written.

- deploy/package-docs.list: the docs and monitoring files, installed for both packages by
  deploy/install-docs.  `expected_files()` expands it over this tree.
- `--help`, the man page and README's install section: every installed path they name
  (`named_paths()`), and every page of the doc directory they name by its path there
  (`docs/repair.md`, README's links), which the installed package tree must hold.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

ROOT = Path(__file__).resolve().parents[2]
LIST = ROOT / "deploy" / "package-docs.list"
DESTS = {"doc/": "/usr/share/doc/gpu-healthcheck/",
         "monitoring/": "/usr/share/gpu-healthcheck/monitoring/"}
# Paths the docs name that no package of ours ships: the site's own Slurm prefix and
# plugstack.conf.d (the admin's copies), and what the tool writes at run time under /var (the
# state directory, which the .deb leaves to the tool's first run and the RPM ships empty,
# test_deploy.py checks it; the metrics textfile).
NOT_PACKAGED = ("/usr/local/", "/etc/slurm/", "/opt/", "/var/")
# The SPANK plugin's package (the .deb only) names its own files.
SPANK_DOC = "/usr/share/doc/gpu-healthcheck-spank/"


def entries() -> List[Tuple[str, str]]:
    """(installed directory, source pattern) for each line of the list."""
    out = []
    for raw in LIST.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        dest, pattern = line.split()
        prefix = next(p for p in DESTS if dest.startswith(p))
        out.append((DESTS[prefix] + dest[len(prefix):], pattern))
    return out


def expected_files() -> Dict[str, List[str]]:
    """pattern -> the installed paths it gives in this tree (empty: the tree lacks it)."""
    return {pattern: sorted(directory + f.name for f in ROOT.glob(pattern) if f.is_file())
            for directory, pattern in entries()}


def _help_text() -> str:
    from healthcheck.cli import build_parser
    return build_parser().format_help()


def _man_text() -> str:
    return (ROOT / "docs" / "gpu-healthcheck.8").read_text().replace("\\-", "-")


def _readme_install_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Installing on a cluster")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


RELATIVE = re.compile(r"(?<![\w./-])((?:docs|deploy)/[\w./*-]*)")
PATH = re.compile(r"(?<![\w.~/-])/(?:usr|etc|var|opt)/[\w.*/+-]*")


# A Markdown link to a file of the tree: README.md's links, which resolve in the installed
# doc directory as in a checkout (it has the same layout).
LINK = re.compile(r"\]\((?!https?:|#)([^)#\s]+)")


def named_paths() -> Dict[str, Set[str]]:
    """source ("--help", "man page", "README install") -> the installed paths of ours it names.

    Ours: a path with gpu-healthcheck or gpu_healthcheck in it, and README's links (under
    /usr/share/doc/gpu-healthcheck/).  A trailing `/` is a directory, a `*` a glob; punctuation
    after a path is not part of it."""
    readme = _readme_install_section()
    out: Dict[str, Set[str]] = {}
    for source, text in (("--help", _help_text()), ("man page", _man_text()),
                         ("README install", readme)):
        found = set()
        for match in PATH.findall(text):
            path = match.rstrip(".,;:)")
            if ("gpu-healthcheck" in path or "gpu_healthcheck" in path) \
                    and not path.startswith(NOT_PACKAGED) and not path.startswith(SPANK_DOC):
                found.add(path)
        if source != "README install":
            # docs/NAME.md, deploy/...: pages of the doc directory (the epilog says so), which
            # has the source tree's layout.
            found |= {DESTS["doc/"] + m.rstrip(".,;:)") for m in RELATIVE.findall(text)}
        out[source] = found
    out["README install"] |= {DESTS["doc/"] + link for link in LINK.findall(readme)}
    return out


def missing_from(paths: Set[str], files: Set[str]) -> List[str]:
    """The named paths a package whose files (not directories) are `files` does not hold: a
    file by its path, a directory (trailing `/`) with a file under it, a glob with a match."""
    missing = []
    for path in sorted(paths):
        if "*" in path:
            pattern = re.compile(re.escape(path).replace(r"\*", "[^/]*") + "$")
            ok = any(pattern.match(f) for f in files)
        elif path.endswith("/"):
            ok = any(f.startswith(path) for f in files)
        else:
            ok = path in files
        if not ok:
            missing.append(path)
    return missing
