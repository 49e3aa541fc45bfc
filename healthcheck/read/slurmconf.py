"""slurm.conf and gres.conf as slurmd reads their lines: comments, continuations and `Include`.

    lines, files = read_conf("/etc/slurm/gres.conf", "/etc/slurm")   # raises ConfReadError
    for line in lines: line.path, line.number, line.text              # Include lines replaced

What Slurm does (src/common/parse_config.c, `s_p_parse_file`, `_get_next_line`,
`_parse_include_directive`; the same code reads slurm.conf and gres.conf):
- `#` starts a comment unless an odd number of backslashes precede it; a line ending in an
  odd number of backslashes continues on the next; `\\#` then reads as `#`;
- a line that *begins* with the word `include` (any case) followed by blanks names a file,
  read in its place; `%c` in the name is slurm.conf's ClusterName (lower case) as set above
  the line (gres.conf has none: slurmd refuses `%c` there);
- a relative name is taken from slurm.conf's directory (`get_extra_conf_path`, Slurm 23.02 and
  later); 22.05 took it from the directory of the file holding the Include line.  The two
  agree for files beside slurm.conf; where they do not we refuse rather than guess;
- no globs: 24.05 and later refuse a name with `*` ("Slurm does not support glob parsing"),
  22.05 looks for a file of that literal name for 60 s and fails.  We refuse it too;
- a missing or unreadable included file makes the whole file fail (slurmd does not start).
Slurm has no loop detection (an include loop recurses until it runs out of file
descriptors); we refuse a loop and a nesting deeper than MAX_INCLUDE_DEPTH, naming the file.
"""

from __future__ import annotations

import os
import re
from typing import List, NamedTuple, Optional, Sequence, Tuple

MAX_CONF_BYTES = 1 << 20  # all the files of one configuration together: a few KiB in practice
MAX_INCLUDE_DEPTH = 8  # files nested under the top one; real sites use one level


class GresConfError(ValueError):
    """gres.conf (or slurm.conf's Gres=) says something we cannot read; names the part."""


MAX_EXPANSION = 4096  # files or hosts one hostlist may name


class ConfReadError(GresConfError):
    """A configuration file (or one it includes) that slurmd would not read; names the file
    and line."""


class ConfLine(NamedTuple):
    path: str  # the file the line is in
    number: int  # its first physical line (1-based)
    text: str  # comments and continuations taken out


FileIdentity = Tuple[str, Optional[Tuple[int, int, int, int]]]  # (path, (dev, inode, mtime_ns, size))


def _strip_comment(line: str) -> str:
    """Cut at the first `#` preceded by an even number of backslashes (`_strip_comments`)."""
    backslashes = 0
    for i, ch in enumerate(line):
        if ch == "#" and backslashes % 2 == 0:
            return line[:i]
        backslashes = backslashes + 1 if ch == "\\" else 0
    return line


def _continues(line: str) -> Tuple[str, bool]:
    """The line without its continuation backslash, and whether it continues
    (`_strip_continuation`: an odd run of backslashes at the end, blanks after it allowed)."""
    body = line.rstrip()
    run = len(body) - len(body.rstrip("\\"))
    if run % 2 == 1:
        return body[:-1], True
    return line, False


def logical_lines(text: str, path: str) -> List[ConfLine]:
    """The file's lines as Slurm parses them (pure); empty lines dropped."""
    out: List[ConfLine] = []
    pending: List[str] = []
    first = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            first = number
            if "\\" not in raw:  # the usual line: no escape, no continuation
                body = raw.split("#", 1)[0]
                if body.strip():
                    out.append(ConfLine(path, number, body))
                continue
        body, more = _continues(_strip_comment(raw))
        pending.append(body)
        if more:
            continue
        joined = _strip_escapes("".join(pending))
        pending = []
        if joined.strip():
            out.append(ConfLine(path, first, joined))
    if pending and "".join(pending).strip():
        out.append(ConfLine(path, first, _strip_escapes("".join(pending))))
    return out


def _strip_escapes(line: str) -> str:
    """Each backslash dropped and the character after it kept as it is (`_strip_escapes`)."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\":
            i += 1
        if i < len(line):
            out.append(line[i])
        i += 1
    return "".join(out)


def include_name(text: str) -> Optional[str]:
    """The file an Include line names, or None: the line must begin with `include` and a blank
    (`Include=x` or an indented include is no directive: slurmd reads it as an unknown key)."""
    if text[:7].lower() != "include" or not text[7:8].isspace():
        return None
    words = text[7:].split()
    return words[0] if words else ""


def _cluster_name(lines: Sequence[ConfLine]) -> Optional[str]:
    """slurm.conf's ClusterName as set so far (the last one wins, as in Slurm's table)."""
    name = None
    for line in lines:
        for word in line.text.split():
            key, eq, value = word.partition("=")
            if eq and key.lower() == "clustername":
                name = value
    return name


def _identity(st: os.stat_result) -> Tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def read_conf(path: str, conf_dir: str, cluster_names: bool = False) -> Tuple[List[ConfLine], List[FileIdentity]]:
    """The lines of `path` with every Include read in its place, and the identity of each file
    read (for a cache).  conf_dir: slurm.conf's directory, where relative names are found.
    cluster_names: `%c` may be used (slurm.conf; gres.conf has no ClusterName).

    Raises:
        ConfReadError: a file that cannot be read, a glob, a loop, nesting past
            MAX_INCLUDE_DEPTH, `%c` without ClusterName, or more than MAX_CONF_BYTES in all.
    """
    lines: List[ConfLine] = []
    files: List[FileIdentity] = []
    _read_into(path, conf_dir, cluster_names, (), lines, files)
    return lines, files


def _read_into(path: str, conf_dir: str, cluster_names: bool, stack: Tuple[str, ...],
               lines: List[ConfLine], files: List[FileIdentity]) -> None:
    where = f"{stack[-1]}: Include {path}" if stack else path
    real = os.path.realpath(path)
    if real in (os.path.realpath(p) for p in stack):
        raise ConfReadError(f"{where}: include loop ({' -> '.join(stack + (path,))}); slurmd "
                            f"recurses until it runs out of file descriptors")
    if len(stack) > MAX_INCLUDE_DEPTH:
        raise ConfReadError(f"{where}: Include nested more than {MAX_INCLUDE_DEPTH} deep "
                            f"({' -> '.join(stack + (path,))})")
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            budget = MAX_CONF_BYTES - sum(identity[3] for _, identity in files if identity)
            raw = handle.read(budget + 1)
    except OSError as exc:
        raise ConfReadError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > budget:
        raise ConfReadError(f"{where}: more than {MAX_CONF_BYTES} bytes of configuration in all")
    files.append((path, _identity(st)))
    for line in logical_lines(raw.decode("utf-8", "replace"), path):
        name = include_name(line.text)
        if name is None:
            lines.append(line)
            continue
        at = f"{path} line {line.number}"
        if not name:
            raise ConfReadError(f"{at}: Include names no file")
        if "%c" in name:
            cluster = _cluster_name(lines) if cluster_names else None
            if cluster is None:
                raise ConfReadError(f"{at}: Include {name}: %c needs a ClusterName above it"
                                    + ("" if cluster_names else " (gres.conf has none)"))
            name = name.replace("%c", cluster.lower())
        if "*" in name:
            raise ConfReadError(f"{at}: Include {name}: Slurm does not expand globs in Include "
                                f"(it refuses the file); name each file")
        target = _resolve(name, conf_dir, path, at)
        _read_into(target, conf_dir, cluster_names, stack + (path,), lines, files)


def _resolve(name: str, conf_dir: str, including: str, at: str) -> str:
    """Where slurmd finds an included file: as written if absolute, else in slurm.conf's
    directory (23.02 and later) -- which must be where 22.05 looks too (the including file's
    directory), or we cannot know which slurmd we serve."""
    if os.path.isabs(name):
        return name
    newer = os.path.join(conf_dir, name)
    older = os.path.join(os.path.dirname(including), name)
    if os.path.normpath(newer) != os.path.normpath(older):
        raise ConfReadError(f"{at}: Include {name}: Slurm 23.02 and later read {newer}, 22.05 "
                            f"reads {older}; write an absolute path")
    return newer


def unchanged(files: Sequence[Sequence[object]]) -> bool:
    """Whether every (path, identity) recorded by read_conf still names the same file (an
    identity of None: a file that was absent and must still be)."""
    for path, identity in files:
        try:
            now: Optional[List[int]] = list(_identity(os.stat(str(path))))
        except FileNotFoundError:
            now = None
        except OSError:
            return False
        if now != (list(identity) if isinstance(identity, (list, tuple)) else identity):
            return False
    return True


# --- hostlists ---------------------------------------------------------------------------

def _split_top(text: str) -> List[str]:
    """Split on commas outside brackets ("a[0-2,4],b" -> ["a[0-2,4]", "b"])."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise GresConfError(f"unbalanced ']' in {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise GresConfError(f"unbalanced '[' in {text!r}")
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]


_BRACKET_RE = re.compile(r"^(?P<pre>[^\[\]]*)\[(?P<ranges>[^\[\]]+)\](?P<post>[^\[\]]*)$")


def expand_hostlist(text: str) -> List[str]:
    """Slurm's hostlist expansion, in written order: "/dev/nvidia[0-2,4]" -> 4 names.

    Raises:
        GresConfError: malformed brackets or ranges, or more than MAX_EXPANSION names.
    """
    names: List[str] = []
    for item in _split_top(text):
        m = _BRACKET_RE.match(item)
        if not m:
            if "[" in item or "]" in item:
                raise GresConfError(f"cannot read the hostlist {item!r}")
            names.append(item)
            continue
        for part in m["ranges"].split(","):
            low, _, high = part.strip().partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise GresConfError(f"bad range {part!r} in {item!r}")
            width = len(low)
            first, last = int(low), int(high) if high else int(low)
            if last < first or last - first >= MAX_EXPANSION:
                raise GresConfError(f"bad range {part!r} in {item!r}")
            names.extend(f"{m['pre']}{n:0{width}d}{m['post']}" for n in range(first, last + 1))
        if len(names) > MAX_EXPANSION:
            raise GresConfError(f"{text!r} names more than {MAX_EXPANSION} entries")
    return names


# --- slurm.conf's NodeName lines ---------------------------------------------------------

SHARING = ("mps", "shard")  # the gres plugins that let several jobs use one GPU


def _words(text: str) -> dict:
    return {k.lower(): v for k, _, v in (w.partition("=") for w in text.split() if "=" in w)}


def node_gres(lines: Sequence[ConfLine], node: str) -> Optional[List[str]]:
    """The Gres= items of slurm.conf's NodeName line for `node` (pure): [] when that line has
    none (slurmd then has no GPUs), None when no line names the node.  A `NodeName=DEFAULT`
    line's Gres= holds for the NodeName lines after it that give none (Slurm's defaults)."""
    default: Optional[str] = None
    for line in lines:
        words = _words(line.text)
        if "nodename" not in words:
            continue
        if words["nodename"].upper() == "DEFAULT":
            default = words.get("gres", default)
            continue
        try:
            if node not in expand_hostlist(words["nodename"]):
                continue
        except GresConfError:
            continue
        gres = words.get("gres", default)
        return [] if gres is None or gres.lower() in ("", "(null)") else [g for g in gres.split(",") if g]
    return None


def gpu_counts(items: Optional[Sequence[str]]) -> Optional[List[Tuple[Optional[str], int]]]:
    """The gpu entries of a Gres= list as (type or None, count), in order (pure)."""
    if items is None:
        return None
    found: List[Tuple[Optional[str], int]] = []
    for item in items:
        parts = item.split("(")[0].split(":")
        if parts[0].lower() != "gpu":
            continue
        count = parts[-1]
        kind = parts[1] if len(parts) == 3 else None
        if not count.isdigit():
            count, kind = "1", parts[1] if len(parts) == 2 else kind
        found.append((kind, int(count)))
    return found


def shared_gres(items: Optional[Sequence[str]]) -> Tuple[str, ...]:
    """The sharing gres (mps, shard) in a Gres= list."""
    return tuple(sorted({i.split(":")[0] for i in items or () if i.split(":")[0] in SHARING}))
