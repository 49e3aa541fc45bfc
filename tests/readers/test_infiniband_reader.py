"""The RDMA port reader (read/infiniband.py) against real captured sysfs trees
(tests/fixtures/sysfs-infiniband, node_exporter's and procfs's) and made ones
(tests/lib/netfixtures.py), judged by the network checks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from healthcheck.checks import CATALOGUE, CheckContext, run_checks
from healthcheck.config import Config, parse_config
from healthcheck.model import GpuSnapshot, Mode, NodeSnapshot, Severity
from healthcheck.read.infiniband import parse_counter, parse_rate, parse_state, pci_path, same_switch
from healthcheck.read.node import read_network
from tests.lib.netfixtures import make_ib_tree, set_port

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs-infiniband"
REAL = ("node_exporter", "procfs")
NETWORK = ("ib.port_state", "ib.rate", "ib.link_layer", "ib.errors", "gpudirect.rdma")


def judge(root: Path, config: str = "", mode: Mode = Mode.NODE, gpus=()):
    cfg = parse_config(f'sysfs_root = "{root}"\n' + config, known_checks=CATALOGUE)
    node = NodeSnapshot(host="node07", gpus=gpus, selected=tuple(g.index for g in gpus),
                        network=read_network(cfg, gpus))
    findings, crashes = run_checks(node, CheckContext(cfg, mode))
    assert crashes == []
    return node, [f for f in findings if f.check in NETWORK]


def copy(capture: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(CAPTURES / capture / "sys", tmp_path / "sys"))


@pytest.mark.parametrize("capture", REAL)
def test_ib_port_state_every_real_capture_judges_healthy(capture):
    node, findings = judge(CAPTURES / capture / "sys")
    assert node.network is not None and len(node.network.ports) >= 3
    assert all(p.state == 4 and p.rate_gbps for p in node.network.ports)
    assert [f for f in findings if f.severity is not Severity.INFO] == []
    names = [p.name for p in node.network.ports]
    assert "mlx4_0:1" in names and "mlx4_0:2" in names
    for mode in (Mode.PROLOG, Mode.EPILOG):
        assert judge(CAPTURES / capture / "sys", mode=mode)[1] == []


def test_ib_errors_real_iwarp_capture_without_pma_has_no_counters_and_no_finding():
    node, findings = judge(CAPTURES / "node_exporter" / "sys")
    [iwarp] = [p for p in node.network.ports if p.hca == "i40iw0"]
    assert (iwarp.link_downed, iwarp.symbol_error, iwarp.unreadable, iwarp.rate_gbps) == (None, None, (), 10.0)
    assert findings == []


@pytest.mark.parametrize("capture", REAL)
def test_ib_port_state_real_capture_with_port_2_polling_fails(capture, tmp_path):
    root = copy(capture, tmp_path)
    (root / "class/infiniband/mlx4_0/ports/2/state").write_text("1: DOWN\n")
    (root / "class/infiniband/mlx4_0/ports/2/phys_state").write_text("2: Polling\n")
    _, findings = judge(root, '[network]\nexpected_ports = ["mlx4_0:1", "mlx4_0:2"]\n', Mode.PROLOG)
    [f] = findings
    assert (f.check, f.severity, f.port, f.drains) == ("ib.port_state", Severity.FAIL, "mlx4_0:2", True)
    assert "DOWN/Polling" in f.message


@pytest.mark.parametrize("capture", REAL)
def test_ib_rate_degraded_variant_of_a_real_capture_warns_naming_port_and_both_rates(capture, tmp_path):
    root = copy(capture, tmp_path)
    (root / "class/infiniband/mlx4_0/ports/2/rate").write_text("10 Gb/sec (1X QDR)\n")
    _, findings = judge(root)
    [f] = findings
    assert (f.check, f.severity, f.port) == ("ib.rate", Severity.WARN, "mlx4_0:2")
    assert "10 Gb/sec (1X QDR)" in f.message and "40 Gb/sec (4X QDR)" in f.message


def test_ib_port_state_made_hgx_tree_links_each_port_to_the_gpus_on_its_switch(tmp_path):
    root = make_ib_tree(tmp_path / "sys", hcas=8, ports=2)
    gpus = tuple(GpuSnapshot(index=i, uuid=f"GPU-{i}", pci_bus_id=f"00000000:{0x18 + i * 0x10:02X}:00.0")
                 for i in range(8))
    node, findings = judge(root, "[network]\nexpected_ports = 16\n", Mode.PROLOG, gpus)
    assert findings == [] and len(node.network.ports) == 16 and node.network.peermem == "nvidia_peermem"
    by_name = {p.name: p for p in node.network.ports}
    assert by_name["mlx5_0:1"].gpus == ("0000:18:00.0", "0000:28:00.0")
    assert by_name["mlx5_5:2"].gpus == ("0000:58:00.0", "0000:68:00.0")
    assert by_name["mlx5_0:1"].pci == "0000:1a:00.0"
    shutil.rmtree(root / "module" / "nvidia_peermem")
    [f] = judge(root, "", Mode.PROLOG, gpus)[1]
    assert f.check == "gpudirect.rdma" and f.severity is Severity.WARN


def test_ib_link_layer_made_roce_tree_reads_the_netdev_operstate(tmp_path):
    root = make_ib_tree(tmp_path / "sys", hcas=2, ports=2, link_layer="Ethernet", rate="200 Gb/sec (4X HDR)")
    node, findings = judge(root, "[network]\nexpected_ports = 4\n")
    assert findings == [] and {p.netdev for p in node.network.ports} == {"ens0np0", "ens0np1", "ens1np0", "ens1np1"}
    set_port(root, "mlx5_1:2", operstate="down")
    [f] = judge(root, '[network]\nexpected_ports = ["mlx5_1:2"]\n')[1]
    assert (f.check, f.port, f.severity, f.drains) == ("ib.link_layer", "mlx5_1:2", Severity.FAIL, True)
    assert "ens1np1:down" in f.message


def test_ib_errors_an_unreadable_file_is_unknown_never_a_drain(tmp_path):
    root = make_ib_tree(tmp_path / "sys", hcas=1, gpus=0)
    state = root / "class/infiniband/mlx5_0/ports/1/state"
    state.unlink()
    state.mkdir()  # reading it fails (EISDIR), as an EIO from a wedged HCA would, even as root
    node, findings = judge(root, '[network]\nexpected_ports = ["mlx5_0:1"]\n', Mode.PROLOG)
    [f] = findings
    assert f.severity is Severity.UNKNOWN and not f.drains
    assert node.network.ports[0].unreadable[0].startswith(str(state))


def test_ib_port_state_a_node_without_class_infiniband_reads_nothing(tmp_path):
    (tmp_path / "sys").mkdir()
    assert read_network(Config(sysfs_root=str(tmp_path / "sys")), ()) is None
    (tmp_path / "sys/class/infiniband").mkdir(parents=True)
    assert read_network(Config(sysfs_root=str(tmp_path / "sys")), ()).ports == ()


def test_ib_rate_pci_path_and_switch_rules():
    hca = pci_path("/sys/devices/pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:02.0/0000:1a:00.0")
    gpu = pci_path("/sys/devices/pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:00.0/0000:18:00.0")
    other = pci_path("/sys/devices/pci0000:00/0000:00:02.0/0000:30:00.0/0000:31:00.0/0000:38:00.0")
    assert hca[-1] == "0000:1a:00.0" and same_switch(hca, gpu) and not same_switch(hca, other)
    assert not same_switch(("0000:00:01.0", "0000:18:00.0"), ("0000:00:01.0", "0000:1a:00.0"))


@given(st.text(max_size=40))
def test_ib_port_state_parsers_never_raise_on_any_text(text):
    number, name = parse_state(text)
    assert number is None or number >= 0
    rate = parse_rate(text)
    assert rate is None or rate >= 0
    counter = parse_counter(text)
    assert counter is None or counter >= 0
    pci_path(text)


@given(st.integers(0, 10**6), st.sampled_from(["4X EDR", "1X SDR", "4X NDR", "2X HDR", "4X"]))
def test_ib_rate_parses_what_the_kernel_prints(gbps, width):
    assert parse_rate(f"{gbps} Gb/sec ({width})") == float(gbps)
    assert parse_state(f"{gbps % 8}: ACTIVE") == (gbps % 8, "ACTIVE")
    assert parse_counter(str(gbps)) == gbps
    assert parse_counter("N/A (no PMA)") is None


def test_ib_port_parsers_refuse_digits_that_int_cannot_read():
    # hypothesis found it: "²".isdigit() is True, int("²") raises
    assert parse_counter("²") is None and parse_counter("١٢") is None
    assert parse_state("²: ACTIVE") == (None, None)
