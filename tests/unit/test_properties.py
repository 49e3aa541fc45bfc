"""Property tests for the parsers of outside text that the other test files do not cover yet.

- scontrol output (`healthcheck.act.scontrol`): any text; the real `scontrol -o show nodes` line
  format with fuzzed NodeName, State and Reason (spaces, '=', '[' included), which must come
  back exactly;
- our reasons read back from Slurm: drain_reason -> parse_reason keeps gpu, check and job;
- adversarial inputs for regex backtracking in every parser: they must return (a hang trips
  the alarm below, there being no pytest-timeout here); no time is asserted.

Regression tests for bugs the fuzzers found are at the end, each naming its input.  The XML
replay's properties are in tests/readers/test_properties.py, the fuzz harness's run in
tests/cli/test_properties.py.
"""

from __future__ import annotations

import re
import signal

import pytest
from hypothesis import assume, example, given, settings, strategies as st

from healthcheck.act import scontrol
from healthcheck.config import ConfigError, parse_config
from healthcheck.decide import verdict
from healthcheck.model import Action, Finding, GpuSnapshot, Mode, Severity
from healthcheck.read import kernlog, slurmenv
from tests.fuzz._common import HEAD, TERMINATOR

HANG_S = 20  # far above any honest parse of 64 KiB; only a hang (backtracking) gets here


@pytest.fixture
def no_hang():
    """Fail, rather than block CI, if the test body runs for HANG_S seconds."""
    def hung(signum, frame):
        raise AssertionError(f"still running after {HANG_S} s: a hang (regex backtracking?)")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


_name = st.text(st.characters(codec="utf-8", exclude_categories=("Z", "C")), min_size=1, max_size=30)
_state = st.lists(st.sampled_from(["IDLE", "MIXED", "ALLOCATED", "DOWN", "DRAIN", "DRAINING",
                                   "DRAINED", "FAIL", "COMPLETING", "NOT_RESPONDING"]),
                  min_size=1, max_size=3).map("+".join).map(lambda s: s + "*" if "DOWN" in s else s)
_reason_word = st.one_of(
    st.text(st.characters(codec="ascii", min_codepoint=33, max_codepoint=126), min_size=1, max_size=12),
    st.sampled_from(["=", "a=b", "[", "]", "[x", "x]", "@", "gpu-healthcheck:", "State=IDLE",
                     "NodeName=evil", "Reason=", "(null)", "[root@", "ticket#42", "Comment"]))
_reason = st.lists(_reason_word, min_size=1, max_size=12).flatmap(
    lambda words: st.lists(st.sampled_from([" ", "  ", "\t"]), min_size=len(words) - 1,
                           max_size=len(words) - 1).map(
        lambda gaps: words[0] + "".join(g + w for g, w in zip(gaps, words[1:]))))


def _line(name: str, state: str, reason: str, stamp: bool, tail: str) -> str:
    line = f"NodeName={name} " + HEAD.format(state=state) + f" Reason={reason}"
    return line + (" [root@2026-11-29T19:01:02]" if stamp else "") + tail


@settings(max_examples=300, deadline=None)
@given(_name, _state, _reason, st.booleans(),
       st.sampled_from(["", " Comment=x=y [a@b]", " Extra=(null)", "   "]))
@example("gpu-a", "IDLE+DRAIN", "gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=1 ecc.volatile_uncorrected=3"
         " epilog job=12", True, "")
@example("n1", "DOWN*", "bad DIMM, see ticket=123 [opened by ops]", True, " Comment=x")
def test_scontrol_line_gives_back_name_state_and_reason(name, state, reason, stamp, tail):
    assume(not TERMINATOR.search(" " + reason) and reason.strip() not in ("(null)", "none"))
    line = _line(name, state, reason, stamp, tail)
    node = scontrol.parse_node_line(line)
    assert (node.name, node.state, node.reason) == (name, state, reason.strip())
    assert scontrol.reason_time(line) == ("2026-11-29T19:01:02" if stamp else None)
    # and within a whole `show nodes` output, among other nodes
    other = "NodeName=other " + HEAD.format(state="IDLE")
    assert scontrol.parse_show_nodes(f"{other}\n{line}\n\n{other}\n")[1] == node


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400) | st.lists(st.sampled_from(
    ["NodeName=", "a", " ", "State=", "Reason=", "[", "@", "]", "\n", "=", "\t", "Comment=", "(null)"]),
    max_size=60).map("".join))
def test_any_scontrol_text_parses_within_bounds(text):
    lines = text.splitlines()
    nodes = scontrol.parse_show_nodes(text)
    assert len(nodes) <= len(lines)
    for node in nodes:
        assert node.name and not re.search(r"\s", node.name)
        assert node.reason is None or (node.reason == node.reason.strip() and node.reason != "(null)")
    when = scontrol.reason_time(text)
    assert when is None or not re.search(r"\s", when)


# ------------------------------------------------------------------ our reasons, read back

_safe = st.text(st.sampled_from("0123456789ABCDEFabcdef:.-"), min_size=1, max_size=20)


@settings(max_examples=300, deadline=None)
@given(index=st.integers(0, 255), serial=st.none() | _safe, pci=st.none() | _safe,
       uuid=st.none() | _safe.map(lambda s: "GPU-" + s), check=st.sampled_from(
           ["ecc.volatile_uncorrected", "gpu.lost", "xid", "remap.failure", "cuda.probe",
            "retired_pages.pending", "persistence_mode", "slurm.job_gpus"]),
       value=st.none() | st.booleans() | st.integers() | st.text(max_size=50),
       job=st.none() | st.text(min_size=1, max_size=30), node_wide=st.booleans(),
       action=st.sampled_from([Action.DRAIN, Action.RESET, Action.REBOOT, Action.RMA]),
       mode=st.sampled_from(list(Mode)), more=st.integers(0, 3))
def test_drain_reason_parses_back_to_its_gpu_check_and_job(index, serial, pci, uuid, check, value, job,
                                                           node_wide, action, mode, more):
    gpu = None if node_wide else index
    findings = [Finding(check, Severity.FAIL, "m", gpu=gpu, value=value, action=action)]
    findings += [Finding("gpu.count", Severity.FAIL, "m", action=Action.DRAIN)] * more
    reason = verdict.drain_reason(findings, [GpuSnapshot(index=index, serial=serial, pci_bus_id=pci,
                                                         uuid=uuid)], mode, job)
    assert len(reason.encode()) <= verdict.MAX_REASON_BYTES
    fields = verdict.parse_reason(reason)
    assert fields["check"] == check
    assert fields["gpu"] == (None if node_wide else str(index))
    assert fields["context"] == mode.value
    assert fields["job"] == (verdict.sanitise(verdict._value_text(job)) if job else None)
    assert fields["rma"] == ("rma" if action is Action.RMA else None)
    assert fields["more"] == (str(more) if more else None)
    assert verdict.is_rma(reason) == (action is Action.RMA)


# ------------------------------------------------------------------ adversarial timing inputs

N = 64 * 1024
ADVERSARIAL = {
    "scontrol": [
        "NodeName=a Reason=" + " " * N + "x",
        "NodeName=a Reason=x" + " " * N + "[",
        "NodeName=a Reason=" + " \t" * (N // 2) + "Comment",
        "NodeName=a" + " Reason=" * (N // 8) + "x",
        "NodeName=a Reason=" + " [a@b" * (N // 5) + "x",
        "NodeName=a Reason=" + " [" * (N // 2),
        "NodeName=" * (N // 9),
        " State=" * (N // 7),
        "NodeName=a Reason=x" + " Comment" * (N // 8) + "x",
        ("NodeName=a Reason=" + " " * 200 + "x\n") * (N // 220),
    ],
    "kernlog": [
        "NVRM: Xid (PCI:" * (N // 15),
        "NVRM: Xid (PCI:0000:3b:00):" + " " * N + "x",
        "[" + " " * N + "NVRM",
        " " * N + "[1.1] NVRM",
        "1" * N + ",NVRM",
        "1," * (N // 2) + "NVRM",
        "2024-10-06T17:59:27" + " " * N + "NVRM",
        "Oct" + " " * N + "06 NVRM",
        "NVRM: GPU at PCI:" * (N // 17),
        "NVRM: Xid (PCI:0000:3b:00): " + "9" * N,
        "[Wed Jul 31 23:14:18 2024]" * (N // 26) + "NVRM",
    ],
    "reason": [
        "gpu-healthcheck: " + " " * N + "!",
        "gpu-healthcheck: " + "gpu1 " * (N // 5) + "!",
        "gpu-healthcheck: gpu1 " + "pci=x " * (N // 6) + "!",
        "gpu-healthcheck: " + "a." * (N // 2) + "=" + "x" * N + " " * N + "!",
        "gpu-healthcheck: x= " + " job=" * (N // 5),
        "gpu-healthcheck: x" + " (+1 more)" * (N // 10) + "!",
    ],
    "gpu_list": ["0-1023," * (N // 7), "0" * N, "GPU-" + "-" * N, "," * N, " " * N + "x", "0-0" * (N // 3)],
    "config": ["a = [" * (N // 5), "[[a]]\n" * (N // 6), 'a = "' + "\\u0041" * (N // 6) + '"',
               "x = " + "9" * N, "[" + "a." * (N // 2) + "b]",
               "a = " + "[" * N, "a = " + "{b = " * (N // 5)],
}


@pytest.mark.parametrize("kind,text", [(k, t) for k, ts in ADVERSARIAL.items() for t in ts],
                         ids=[f"{k}{i}" for k, ts in ADVERSARIAL.items() for i in range(len(ts))])
def test_adversarial_input_returns(kind, text, no_hang):
    if kind == "scontrol":
        for node in scontrol.parse_show_nodes(text):
            assert node.name
        scontrol.parse_node_line(text)
        scontrol.reason_time(text)
    elif kind == "kernlog":
        assert len(kernlog.parse_lines([text])) <= 1
        assert len(kernlog.parse_lines(text.split("\n"))) <= text.count("\n") + 1
    elif kind == "reason":
        verdict.parse_reason(text)
        assert len(verdict.sanitise(text)) <= verdict.MAX_REASON_BYTES
    elif kind == "gpu_list":
        with pytest.raises(slurmenv.GpuListError):
            slurmenv.parse_gpu_list(text)
    else:
        with pytest.raises(ConfigError):
            parse_config(text)


# ------------------------------------------------------------------ regressions found by fuzzing

def test_regression_scontrol_reason_of_blanks_is_linear(no_hang):
    """fuzz_scontrol timeout (corpus/scontrol/regress-reason-blanks): a Reason holding 32 KiB of
    blanks before its last word took seconds, 64 KiB over a minute (lazy .*? backtracking)."""
    line = "NodeName=a State=IDLE Reason=x" + " " * 32768 + " y [root@2026-11-29T19:01:02] Comment=c"
    node = scontrol.parse_node_line(line)
    assert (node.name, node.state, node.reason) == ("a", "IDLE", "x" + " " * 32769 + "y")
    assert scontrol.reason_time(line) == "2026-11-29T19:01:02"
    assert scontrol.parse_node_line("NodeName=a Reason=" + " " * N + "x").reason == "x"


def test_regression_config_integer_past_python_digit_limit_is_a_config_error():
    """fuzz_config crash (corpus/config/regress-4300-digits): tomllib let a plain ValueError out
    of int() for an integer of more than 4300 digits, past parse_config's handler."""
    with pytest.raises(ConfigError) as info:
        parse_config("expected_gpus = " + "8" * 32768 + "\n", "/etc/gpu-healthcheck/config.toml")
    assert str(info.value).startswith("/etc/gpu-healthcheck/config.toml: not valid TOML: ")


def test_regression_config_arrays_nested_deep_are_a_config_error():
    """fuzz_config crash (corpus/config/regress-nested-arrays): tomllib recurses once per
    nesting level and let a RecursionError out for a few hundred '['."""
    for depth in (500, 2048, N):
        with pytest.raises(ConfigError, match="not valid TOML"):
            parse_config("disabled = " + "[" * depth + "\n")
    assert parse_config("[checks]\ndisabled = []\n").checks.disabled == ()  # shallow is fine


def test_regression_sacct_nodelist_nodeset_cannot_read_is_a_note_in_bounded_time(no_hang):
    """fuzz_sacct (corpus/sacct/regress-nodeset-hang, regress-nodeset-errors): ClusterShell's
    NodeSet 1.9 never returned on "n110[-310-[-]2-20", let a plain ValueError or AssertionError
    out on other garbled lists, would fill the memory for "n[0-999999999]" and took seconds for
    names of two brackets whose product passes the cap (regress-nodeset-product); each is one
    line's note, and a NodeList never reaches the site's node groups ("n[1-2],@all")."""
    from healthcheck.read.sacct import COLUMNS, parse_sacct

    for garbled in ("n110[-310-[-]2-20", "r[001-:00", "n[0-999999999]", "a[0-99]b[0-99]c[0-99]", "n[1-2],@all",
                    "r00-0,-[0-20220]r0,-r[110-877]mrr[110-800]-r00-0"):
        text = ("|".join(COLUMNS) + "\n1|a|FAILED|1:0|2026-12-01T10:00:00|2026-12-01T10:00:01|2|"
                + garbled + "\n")
        jobs, notes = parse_sacct(text, "t")
        assert jobs == [] and len(notes) == 1 and repr(garbled) in notes[0], (garbled, notes)
