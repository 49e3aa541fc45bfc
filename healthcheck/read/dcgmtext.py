"""The text table `dcgmi diag` prints without -j (DCGM 2.x, 3.x and 4.x), read into the same
results as the JSON (read/dcgm.py calls it when the output holds a table and no JSON).

The layout is DCGM's own (dcgmi/Diag.cpp, NVIDIA/DCGM v2.4.5 through v4.2.3): every row is
`| <name, 25 wide> | <info, 46 wide> |`; the table opens with a border, a
`| Diagnostic | Result |` header and a `+===+` line, has one `-----  Category  ---` line per
category (Metadata, Deployment, Hardware, Integration, Stress) and closes with the border again.

    2.x / 3.x: | Memory                    | Pass - All                                     |
               | SM Stress                 | Pass - GPUs: 1, 2                              |
               |                           | Fail - GPU: 0                                  |
               | Warning                   | <message, 45 characters a row>                 |
               | Denylist                  | Pass                                           |  (level 1: no GPU)
    4.x:       | memory                    | Fail                                           |
               |                           | GPU0: Fail                                     |
               | Warning: GPU0             | <message>                                      |

DCGM wraps a message every 45 characters (DATA_INFO_TAG_LEN), in mid-word, so the rows of one
message are joined without a separator; a value longer than its column is cut and ends in
"...".  A table that never reaches its closing border (dcgmi killed or crashed while printing,
or a pasted fragment) is truncated: its rows are kept for the report but not judged.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from ..deepmodel import DcgmResult
from .dcgm4 import internal_only

CELL = 45  # DATA_INFO_TAG_LEN: the characters of a message per row
BORDER = re.compile(r"^\+-{27}\+-{48}\+$")
HEADER_END = re.compile(r"^\+={27}\+={48}\+$")
CATEGORY = re.compile(r"^[+|]-----  ([A-Za-z][A-Za-z ]*?)  -+\+-{48}[+|]$")
STATUS = {"pass": "pass", "fail": "fail", "warn": "warn", "skip": "skip", "": "skip"}
# "Pass - All", "Fail - GPU: 0", "Skip - GPUs: 0, 1, 2" (2.x/3.x, HelperDisplayGpuResults)
GROUP = re.compile(r"^(Pass|Fail|Warn|Skip) - (?:(All)|GPUs?: ([0-9, ]*?)(\.\.\.)?)\s*$")
# "GPU0: Pass", "CPU1: Fail", "Switch3: " (4.x, HelperDisplayEntityResults; "" is not run)
ENTITY = re.compile(r"^([A-Za-z]+)([0-9]+):(?: (Pass|Fail|Warn|Skip))?$")
MESSAGE = re.compile(r"^(Warning|Info|Error)(?:: ([A-Za-z]+)([0-9]+))?$")
METADATA = "Metadata"
# a message directly under a category heading is the category's own result (3.x prints nvvs's
# errors there: "| Error | GPU 3 has uncorrectable memory errors and row remappings are pending |")
KIND_STATUS = {"Error": "fail", "Warning": "warn", "Info": "pass"}
NAMED_GPU = re.compile(r"\bGPU ([0-9]+)\b")


class _Test:
    """One test's rows: its summary status, per-entity statuses, and the messages under it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.status: Optional[str] = None  # the test's own row (level 1, "X - All", 4.x global)
        self.all = False  # "X - All"
        self.gpus: Dict[int, str] = {}
        self.others: Dict[str, str] = {}  # 4.x entities that are not GPUs: "CPU0" -> status
        self.cut: Optional[str] = None  # a GPU list cut short: the status of the GPUs not shown
        self.messages: List[Tuple[Optional[str], str, str]] = []  # (entity, kind, text)
        self.from_message = False  # a category's own Error/Warning/Info row, no test of its own


class _Row:
    def __init__(self, name: str, info: str, chunk: str) -> None:
        self.name, self.info, self.chunk = name, info, chunk


def _row(line: str) -> Optional[_Row]:
    """A data row, or None.  `chunk` keeps a wrapped message's trailing blanks (45 wide)."""
    if not line.startswith("| ") or line[27:30] != " | ":
        return None
    cell = line[30:]
    full = len(line) == 78 and line.endswith(" |")
    chunk = cell[:CELL] if full else cell.rstrip(" |")
    return _Row(line[2:27].strip(), cell.rstrip(" |").strip(), chunk)


def has_table(text: str) -> bool:
    """Whether the output holds a line of a diag table (border, header end or category)."""
    return any(BORDER.match(line) or HEADER_END.match(line) or CATEGORY.match(line)
               for line in (raw.rstrip() for raw in text.splitlines()))


def parse_diag_text(text: str) -> Tuple[Tuple[DcgmResult, ...], Optional[str]]:
    """(results, None) for a whole table; (results seen, why) for one that is cut short;
    ((), why) for text that is no diag table or holds a result we cannot read."""
    tests: List[_Test] = []
    opened = closed = header = False
    category = ""
    last: Optional[str] = None  # the last table line read, for the message naming the cut
    message: Optional[List[str]] = None  # the rows of the message being joined
    per_entity = False  # 4.x's layout: DCGM Version 4 or later, or a "Warning: GPU0" row
    full_chunk = False  # its last row was 45 wide: the next blank-named row continues it
    fresh = False  # a category heading and no test under it yet
    for raw in text.splitlines():
        line = raw.rstrip()
        if closed:
            break
        if not opened:
            if not (BORDER.match(line) or CATEGORY.match(line) or HEADER_END.match(line) or _row(line)):
                continue  # text before the table: the command line, "Successfully ran ..."
            opened = True
        if BORDER.match(line):
            closed, message = header, None  # the border after the header is the footer
            continue
        if HEADER_END.match(line):
            header = True
            continue
        heading = CATEGORY.match(line)
        if heading:
            category, message, fresh = heading.group(1).strip(), None, True
            last = f"the {category} heading"
            continue
        row = _row(line)
        if row is None:
            return _cut(tests, f"a line that is no table row ({line[:60]!r}) after {last or 'the start'}")
        if not header and row.name == "Diagnostic" and row.info == "Result":
            continue
        if category == METADATA:
            # DCGM and driver versions, device ids: not results.  4.x lists results per entity
            major = re.match(r"([0-9]{1,4})\.", row.info)
            if row.name == "DCGM Version" and major and int(major.group(1)) >= 4:
                per_entity = True
            continue
        kind = MESSAGE.match(row.name)
        if kind:
            if fresh and category:
                own = _Test(category)
                own.status, own.from_message, fresh = KIND_STATUS[kind.group(1)], True, False
                tests.append(own)
                last = f"the {category} {kind.group(1)} row"
            if not tests:
                return (), f"dcgmi diag text: a {row.name} row before any test"
            entity = f"{kind.group(2)}{kind.group(3)}" if kind.group(2) else None
            per_entity = per_entity or entity is not None
            message = [row.chunk]
            tests[-1].messages.append((entity, kind.group(1), ""))
            full_chunk = _full(row.chunk)
            _set_message(tests[-1], message)
            continue
        if row.name == "":
            if not tests:
                return (), "dcgmi diag text: a continuation row before any test"
            test = tests[-1]
            listed = ENTITY.match(row.info)
            group = GROUP.match(row.info)
            # a row after a message 45 wide may continue it: an entity row is one only in 4.x's
            # layout (never printed by 2.x/3.x), a "Pass - GPUs" row only before any message
            if (listed and (per_entity or test.gpus or test.others)) or (
                    (listed or group) and not (message is not None and full_chunk)):
                message = None
                if listed:
                    _entity(test, listed)
                else:
                    _group(test, group)  # type: ignore[arg-type]
            elif row.info.startswith("Code: (") and not (message is not None and full_chunk):
                message = None  # the EUD's return code under "Warn - All" (3.x)
                test.messages.append((None, "Code", row.info))
            elif message is not None:
                message.append(row.chunk)
                full_chunk = _full(row.chunk)
                _set_message(test, message)
            else:
                return (), f"dcgmi diag text: test {test.name!r}: row {row.info!r} not understood"
            last = f"test {test.name!r}"
            continue
        message, fresh = None, False
        test = _Test(row.name)
        group = GROUP.match(row.info)
        if group:
            _group(test, group)
        elif row.info.lower() in STATUS:
            test.status = STATUS[row.info.lower()]
        else:
            return (), f"dcgmi diag text: test {row.name!r}: result {row.info!r} not understood"
        tests.append(test)
        last = f"test {row.name!r}"
    if not opened:
        return (), "dcgmi diag output holds neither JSON nor a diagnostic table"
    if not closed:
        return _cut(tests, f"the table ends after {last or 'its header'} without its closing border"
                    if header else "the table has no header (a fragment)")
    results = _results(tests)
    if not results:
        return (), "dcgmi diag text reported no test results"
    return results, None


def _set_message(test: _Test, pieces: List[str]) -> None:
    entity, kind, _ = test.messages[-1]
    test.messages[-1] = (entity, kind, " ".join("".join(pieces).split()))


def _entity(test: _Test, match: "re.Match[str]") -> None:
    status = STATUS[(match.group(3) or "").lower()]
    if match.group(1) == "GPU":
        test.gpus[int(match.group(2))] = status
    else:
        test.others[match.group(1) + match.group(2)] = status


def _group(test: _Test, match: "re.Match[str]") -> None:
    status = STATUS[match.group(1).lower()]
    if match.group(2):
        test.status, test.all = status, True
        return
    ids = [i.strip() for i in (match.group(3) or "").split(",")]
    if match.group(4):  # "...": the last number may be cut too ("1" of "12")
        ids, test.cut = ids[:-1], status
    for i in ids:
        if i.isdigit():
            test.gpus[int(i)] = status


def _words(test: _Test, entity: Optional[str]) -> str:
    """DCGM's warnings for the entity (or the test's, with no entity), else its info."""
    for kinds in (("Warning", "Error", "Code"), ("Info",)):
        words = [t for e, k, t in test.messages if k in kinds and (e is None or e == entity) and t]
        if words:
            return "; ".join(words)
    return ""


def _graded(test: _Test, entity: Optional[str], status: str) -> str:
    """A fail whose every warning is DCGM's own internal error ("There was an internal error
    during the test: ...", DCGM_FR_INTERNAL) is "internal": the test did not run."""
    texts = [t for e, k, t in test.messages if k in ("Warning", "Error") and (e is None or e == entity) and t]
    return "internal" if status == "fail" and internal_only(texts) else status


def _named_gpu(text: str) -> Optional[int]:
    """The one GPU a 2.x/3.x message names ("GPU 0 Thermal violations ... for GPU 0"), or None
    where it names none or several: such a message is the test's, not a GPU's."""
    named = {int(n) for n in NAMED_GPU.findall(text)}
    return named.pop() if len(named) == 1 else None


def _attach(test: _Test) -> None:
    """Give each message without an entity to the one GPU it names, and make a warning on a
    GPU DCGM listed as passing (or did not list) that GPU's warn.  Under "Fail - All" (or
    "Warn - All") the messages stay the whole test's: its verdict is every GPU's."""
    if test.all and test.status != "pass":
        return
    for k, (entity, kind, text) in enumerate(test.messages):
        gpu = _named_gpu(text) if entity is None and kind in ("Warning", "Error", "Info") else None
        if gpu is None or test.from_message:
            continue
        test.messages[k] = (f"GPU{gpu}", kind, text)
        if kind == "Warning" and test.gpus.get(gpu, "pass") == "pass":
            test.gpus[gpu] = "warn"


def _results(tests: List[_Test]) -> Tuple[DcgmResult, ...]:
    out: List[DcgmResult] = []
    for test in tests:
        _attach(test)
        if test.from_message:
            words = _words(test, None)
            out.append(DcgmResult(_named_gpu(words), test.name, test.status or "fail", words))
            continue
        for gpu, status in sorted(test.gpus.items()):
            # 4.x prints an entity's warn as "Fail" (HelperDisplayDiagResult without
            # DDR_DISPLAY_WARN); the test's own row says Warn then, and nothing failed
            if status == "fail" and test.status == "warn":
                status = "warn"
            out.append(DcgmResult(gpu, test.name, _graded(test, f"GPU{gpu}", status), _words(test, f"GPU{gpu}")))
        for label, status in sorted(test.others.items()):
            out.append(DcgmResult(None, f"{test.name} ({label})", _graded(test, label, status), _words(test, label)))
        if test.cut is not None:
            out.append(DcgmResult(None, test.name, test.cut, "more GPUs than dcgmi's column shows"
                                  + (f": {_words(test, None)}" if _words(test, None) else "")))
        named = list(test.gpus.values()) + list(test.others.values())
        # the test's own row: the result where no entity is listed, or a fail/warn that no
        # listed entity carries (a global error in 4.x)
        if test.status is not None and (not named or (test.status in ("fail", "warn") and all(
                s in ("pass", "skip") for s in named))):
            words = _words(test, None)
            if test.all:
                words = "all GPUs" + (f": {words}" if words else "")
            out.append(DcgmResult(None, test.name, _graded(test, None, test.status), words))
    return tuple(out)


def _cut(tests: List[_Test], why: str) -> Tuple[Tuple[DcgmResult, ...], Optional[str]]:
    """A table cut short: what it showed, and why it is not judged (naming any fail or warn
    it showed, so the admin reads DCGM's verdict in the unknown finding)."""
    results = _results(tests)
    bad = [f"{r.test} {r.status} ({_whom(r)})" + (f": {r.text[:160]}" if r.text else "")
           for r in results if r.status not in ("pass", "skip")]
    seen = f"; it showed {', '.join(bad)}" if bad else f"; {len(results)} results shown, none failed"
    return results, f"dcgmi diag text output cut short: {why}{seen}"


def _whom(result: DcgmResult) -> str:
    if result.gpu is not None:
        return f"GPU {result.gpu}"
    return "all GPUs" if result.text.startswith("all GPUs") else "node"


def _full(chunk: str) -> bool:
    """A message row 45 characters wide, the next row may continue it.  A row padded with
    blanks ended its message (a message whose 45th character is a blank reads so too; the
    next blank-named row still joins it unless it is an entity, GPU-list or Code row)."""
    return len(chunk) == CELL and not chunk.endswith(" ")
