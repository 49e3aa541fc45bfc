"""Xid decisions derived from NVIDIA's catalogue (healthcheck/checks/xid_catalogue.csv, NVIDIA's
NVSentinel mapping of Xid-Catalog.xlsx, 2025-09-30).  Lines: real ones from
tests/fixtures/kernel-log/ (sources in SOURCE.md / SOURCES-hopper-blackwell.md there); for codes
no real line shows (54, 78, 142, 159, 48 with the SRAM threshold wording, an undecodable 145),
the real Xid 48 line of xid-hopper-lines.tsv with its code or text changed, marked below."""

import csv
from pathlib import Path

import pytest

from healthcheck.checks import xid as X
from healthcheck.logmodel import XidEvent
from healthcheck.model import Action, Severity
from healthcheck.read.kernlog import aggregate, parse_lines

KLOG = Path(__file__).resolve().parents[1] / "fixtures" / "kernel-log"
DATA = Path(X.__file__).with_name(X.CATALOGUE_FILE)
INFO, WARN, FAIL = Severity.INFO, Severity.WARN, Severity.FAIL


def real(name: str, code: int, contains: str = "") -> str:
    for row in (KLOG / name).read_text(encoding="utf-8").splitlines():
        cols = row.split("\t")
        if cols[0] == str(code) and contains in cols[-1]:
            return cols[-1]
    raise AssertionError(f"no real Xid {code} line with {contains!r} in {name}")


REAL_48 = real("xid-hopper-lines.tsv", 48)
REAL_31 = real("xid-unknown-platform-lines.tsv", 31)


def verdict(line: str):
    [event] = parse_lines([line])
    return X.xid_verdict(event)


def events(lines):
    return aggregate(parse_lines(lines)).events


def with_code(code: int) -> str:  # the real 48 line, its code changed (no real line shows it)
    return REAL_48.replace("): 48,", f"): {code},")


def test_xid_catalogue_every_bucket_in_the_data_file_has_a_decision():
    rows = list(csv.reader(DATA.open(encoding="utf-8")))
    assert len(rows) >= 162 and {int(r[0]) for r in rows} >= set(range(1, 163))
    buckets = {X.BUCKET_ALIASES.get(r[2].strip(), r[2].strip()) for r in rows}
    missing = buckets - set(X.BUCKET_DECISION)
    assert not missing, f"buckets in {DATA.name} with no decision in BUCKET_DECISION: {missing}"
    for row in rows:
        assert X.decision(int(row[0])) is not None, row


def test_xid_catalogue_a_bucket_with_no_decision_is_caught(tmp_path):
    bad = tmp_path / "c.csv"
    bad.write_text("1,A,SOMETHING_NEW,FATAL\n")
    table = X.catalogue.__wrapped__(str(bad))
    assert table[1][1] not in X.BUCKET_DECISION
    bad.write_text("1,A,FATAL\n")
    with pytest.raises(X.CatalogueError, match="line 1"):
        X.catalogue.__wrapped__(str(bad))


def test_xid_catalogue_is_the_verbatim_nvsentinel_file_with_its_source_beside_it():
    source = DATA.with_name("xid_catalogue.SOURCE.md").read_text()
    assert "6f8b0fcfa8e502bdda78fabf96facef729a9285b" in source and "2025-09-30" in source
    assert "Apache" in DATA.with_name("xid_catalogue.LICENSE").read_text()


@pytest.mark.parametrize("code,expected", [
    (159, (FAIL, Action.RESET)),   # CHECK_UVM: UVM is in use on a GPU node
    (54, (FAIL, Action.DRAIN)),    # CHECK_MECHANICALS: a person must look
    (78, (FAIL, Action.DRAIN)),    # UPDATE_SWFW
    (142, (FAIL, Action.DRAIN)),   # CONTACT_SUPPORT (NVSentinel: UNEXPECTED_ERR_REPORT_ISSUE)
    (160, (FAIL, Action.REBOOT)),  # RESTART_BM
    (64, (FAIL, Action.RMA)),      # our override: remap failure is an RMA criterion
    (163, (WARN, Action.NONE)),    # not in the catalogue
])
def test_xid_corrected_codes_follow_the_catalogue(code, expected):
    v = verdict(with_code(code))
    assert (v.severity, v.action) == expected, v.meaning


def test_xid_48_resets_and_with_the_sram_threshold_exceeded_goes_to_rma():
    v = verdict(REAL_48)  # real: DBE in the framebuffer
    assert (v.severity, v.action) == (FAIL, Action.RESET)
    # the driver's wording for the flag was seen in no real line; the catalogue's own phrase
    sram = REAL_48.split(" An uncorrectable")[0] + (" An uncorrectable SRAM error has been "
                                                    "detected; the SRAM error threshold has been "
                                                    "exceeded.")
    v = verdict(sram)
    assert (v.severity, v.action) == (FAIL, Action.RMA) and "field diagnostics" in v.meaning


def test_xid_nvlink5_line_that_cannot_be_decoded_resets():
    decoded = real("xid-blackwell-nvlink5-lines.tsv", 145)
    assert verdict(decoded).severity in (WARN, FAIL)
    garbled = "NVRM: Xid (PCI:0018:01:00): 145, pid=1, name=x, RLW link state unreadable"
    v = verdict(garbled)
    assert (v.severity, v.action) == (FAIL, Action.RESET) and "could not be decoded" in v.meaning


def test_xid_13_once_is_the_applications_but_repeated_on_one_gpc_tpc_warns():
    incident = [r.split("\t")[-1] for r in (KLOG / "xid-unknown-platform-lines.tsv")
                .read_text().splitlines() if r.startswith("13\t0000:38:00")]
    assert len(incident) == 6  # one real incident: GPC 8/TPC 5 and GPC 9/TPC 1, with companions
    [event] = events(incident)
    assert X.xid_verdict(event).severity is INFO
    warp = next(l for l in incident if "Warp Exception on (GPC 8, TPC 5" in l)
    [event] = events(incident + [warp])  # the same TPC faults again
    v = X.xid_verdict(event)
    assert (v.severity, v.action) == (WARN, Action.NONE)
    assert "GPC 8, TPC 5 (2 times)" in v.meaning and "diagnostic" in v.meaning


def test_xid_31_once_is_the_applications_but_repeated_on_one_gpu_warns():
    [once] = events([REAL_31])
    assert X.xid_verdict(once).severity is INFO
    [twice] = events([REAL_31, REAL_31])
    v = X.xid_verdict(twice)
    assert (v.severity, v.action) == (WARN, Action.NONE) and "diagnostic" in v.meaning


def test_xid_catalogue_is_not_read_when_no_xid_is_judged():
    X.catalogue.cache_clear()
    X.xid_verdict(XidEvent(pci="0000:01:00", xid=None, message="fallen off the bus"))
    assert X.catalogue.cache_info().currsize == 0
    X.xid_verdict(XidEvent(pci="0000:01:00", xid=8, message="x"))
    assert X.catalogue.cache_info().currsize == 1
