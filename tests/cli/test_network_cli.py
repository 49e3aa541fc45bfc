"""The network checks through the real CLI on fake GPUs: a node without /sys/class/infiniband is
judged exactly as before, and a prolog/epilog pair on a made 8-HCA tree diffs the counters
through the baseline file in state_dir."""

from __future__ import annotations

from tests.lib.netfixtures import make_ib_tree, set_port

NETWORK = ["ib.port_state", "ib.rate", "ib.link_layer", "ib.errors", "gpudirect.rdma"]
JOB = {"SLURM_JOB_ID": "4242", "SLURMD_NODENAME": "node07", "SLURM_JOB_GPUS": "0,1"}


def _findings(result):
    return [(f["check"], f["severity"], f["gpu"], f["value"]) for f in result.json["findings"]]


def test_ib_port_state_a_node_without_class_infiniband_gives_exactly_the_findings_it_gave_before(node):
    assert not (node.sysfs / "class" / "infiniband").exists()
    for scenario in ("gpus = 8\n", "gpus = 8\ngpu.3.ecc.volatile.uncorrected = 2\ngpu.5.temperature_c = 99\n"):
        node.write_config("[network]\ngpudirect = true\nexpected_ports = 4\n")
        now = node.run("--node", "--json", scenario=scenario)
        node.write_config("[checks]\ndisabled = " + str(NETWORK).replace("'", '"') + "\n")
        without = node.run("--node", "--json")
        assert _findings(now) == _findings(without) and now.rc == without.rc
        assert now.json["network"] is None
        assert not [f for f in now.json["findings"] if f["check"] in NETWORK]


def test_ib_errors_link_downed_during_the_job_drains_in_the_epilog_naming_the_port(node, tmp_path):
    root = make_ib_tree(tmp_path / "ib-sys", hcas=8, ports=1)
    node.write_config(f'sysfs_root = "{root}"\n[network]\nexpected_ports = 8\n')
    node.gres_conf.write_text("AutoDetect=off\nName=gpu File=/dev/nvidia[0-7]\n")
    prolog = node.run("--prolog", "--json", env=JOB)
    assert prolog.rc == 0 and prolog.json["verdict"] == "pass", prolog.stderr
    assert len(prolog.json["network"]["ports"]) == 8
    set_port(root, "mlx5_0:1", link_downed=3)
    epilog = node.run("--epilog", "--json", env=JOB)
    [f] = [f for f in epilog.json["findings"] if f["check"] == "ib.errors"]
    assert (f["severity"], f["value"], f["threshold"], f["port"], f["port_pci_bus_id"]) == (
        "fail", 3, 0, "mlx5_0:1", "0000:1a:00.0")
    assert "serves GPU 0, 1" in f["message"]
    assert epilog.json["action"]["reason"] == "gpu-healthcheck: pci=0000:1a:00.0 ib.errors=3@mlx5_0:1 epilog job=4242"


def test_ib_port_state_list_checks_lists_the_network_checks(node):
    listed = node.run("--list-checks", "--json")
    ids = [c["check"] for c in listed.json["checks"]]
    assert [i for i in ids if i in NETWORK] == NETWORK
