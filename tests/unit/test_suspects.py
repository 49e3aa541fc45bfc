"""decide/suspects.py, pure: black holes, lemons (attribution, explaining-away, the per-user cap,
decay, dedupe, FDR), our own history's rules, and the statistics under them."""

from __future__ import annotations

import math
import random
from typing import List, Sequence, Tuple

from healthcheck.configsections import SuspectsConfig
from healthcheck.decide.suspects import (bh_cutoff, black_holes, find_suspects, history_events, history_suspects,
                                         lemons, poisson_sf, size_class)
from healthcheck.fleetmodel import FleetEvent, Job

CFG = SuspectsConfig()
DAY = 86400.0
T0 = 1_796_000_000.0
UNTIL = T0 + 14 * DAY


def _job(i: int, user: str, state: str, start: float, length: float, nodes: Sequence[str]) -> Job:
    return Job(str(i), user, state, "1:0" if state == "FAILED" else "0:0", start, start + length, tuple(nodes))


def _fleet(rng: random.Random, nodes: List[str], jobs: int, rate: float, users: int = 30,
           start: int = 0, bad: Tuple[str, ...] = (), bad_rate: float = 0.0,
           sizes: Sequence[int] = (1,)) -> List[Job]:
    """Jobs spread over 14 days, failing at `rate` for their own reasons; a job touching a node in
    `bad` fails at `bad_rate` instead."""
    out = []
    for i in range(start, start + jobs):
        size = rng.choice(sizes)
        where = rng.sample(nodes, size)
        p = bad_rate if set(where) & set(bad) else rate
        t = T0 + rng.uniform(0, 14 * DAY - 7200)
        out.append(_job(i, f"u{rng.randrange(users)}", "FAILED" if rng.random() < p else "COMPLETED",
                        t, rng.uniform(600, 7200), where))
    return out


# --- statistics ----------------------------------------------------------------------------

def test_poisson_sf_matches_the_exact_sum_at_whole_numbers() -> None:
    for mean in (0.3, 2.0, 7.5, 40.0):
        for k in (1, 2, 5, 12, 60):
            exact = 1 - sum(math.exp(-mean) * mean ** i / math.factorial(i) for i in range(k))
            assert math.isclose(poisson_sf(k, mean), exact, rel_tol=1e-7, abs_tol=1e-12), (k, mean)
    assert poisson_sf(0, 3.0) == 1.0 and poisson_sf(2, 0.0) == 0.0


def test_bh_cutoff_is_the_largest_p_under_its_rank_line() -> None:
    assert bh_cutoff([0.001, 0.008, 0.039, 0.041, 0.2], 0.05, 5) == 0.008  # 0.039 > 0.05*3/5
    assert bh_cutoff([0.5, 0.9], 0.05, 2) == -1.0
    assert bh_cutoff([0.01], 0.05, 1000) == -1.0  # one small p among a thousand tests is no discovery


def test_size_class_groups_jobs_by_powers_of_two() -> None:
    assert [size_class(n) for n in (1, 2, 3, 4, 5, 8, 9, 512)] == [1, 2, 3, 3, 4, 4, 5, 10]


# --- black holes ---------------------------------------------------------------------------

def _black_hole_jobs(node: str, users: Sequence[str], start: float, every_s: float = 180.0) -> List[Job]:
    return [_job(1000 + i, u, "FAILED", start + i * every_s, 2.0, [node]) for i, u in enumerate(users)]


def test_black_hole_named_after_a_few_fast_failures_of_several_users() -> None:
    jobs = _black_hole_jobs("gpu-07", ["alice", "bob", "carol", "alice", "dave", "bob"], T0)
    jobs += [_job(1, "erin", "COMPLETED", T0, 7200, ["gpu-01"])]
    found = black_holes(jobs, CFG)
    assert [(s.node, s.kind) for s in found] == [("gpu-07", "black_hole")]
    ev = found[0].evidence
    assert ev["failed_fast"] == 6 and ev["users"] == 4 and len(ev["incidents"]) == 1
    assert ev["jobs"][0] == "1000"


def test_black_hole_one_user_failing_pinned_jobs_is_no_suspect() -> None:
    jobs = _black_hole_jobs("gpu-03", ["mallory"] * 60, T0, every_s=30)
    assert black_holes(jobs, CFG) == []
    assert lemons(jobs + _fleet(random.Random(1), [f"gpu-{i:02d}" for i in range(20)], 2000, 0.3),
                  CFG, UNTIL) == []


def test_black_hole_partner_of_a_multi_node_job_is_explained_away() -> None:
    users = ["alice", "bob", "carol", "dave", "erin", "frank"]
    jobs = [_job(i, u, "FAILED", T0 + i * 120, 3, ["gpu-07", "gpu-08"] if i % 2 else ["gpu-07"])
            for i, u in enumerate(users * 2)]
    assert [s.node for s in black_holes(jobs, CFG)] == ["gpu-07"]


def test_black_hole_bursts_are_incidents_and_a_busy_node_is_not_one() -> None:
    two = (_black_hole_jobs("gpu-07", ["a", "b", "c", "d", "e"], T0)
           + _black_hole_jobs("gpu-07", ["a", "b", "c", "d", "e"], T0 + DAY))
    assert len(black_holes(two, CFG)[0].evidence["incidents"]) == 2
    # the same fast failures among many good jobs that started meanwhile: a share, not a hole
    busy = _black_hole_jobs("gpu-09", ["a", "b", "c", "d", "e"], T0)
    busy += [_job(2000 + i, "z", "COMPLETED", T0 + i * 60, 30, ["gpu-09"]) for i in range(15)]
    assert black_holes(busy, CFG) == []


# --- lemons --------------------------------------------------------------------------------

NODES = [f"gpu-{i:03d}" for i in range(60)]


def test_lemon_found_among_a_fleet_failing_at_its_base_rate() -> None:
    rng = random.Random(7)
    jobs = _fleet(rng, NODES, 6000, 0.3, bad=("gpu-013",), bad_rate=0.8)
    found = lemons(jobs, CFG, UNTIL)
    assert [s.node for s in found] == ["gpu-013"]
    ev = found[0].evidence
    assert ev["p_value"] < 1e-6 and ev["failures"] > ev["expected"] and ev["users_in_excess"] >= 2


def test_lemon_none_in_a_healthy_fleet_at_a_high_base_rate() -> None:
    for seed in range(5):  # the FDR bound holds whatever the draw
        assert lemons(_fleet(random.Random(seed), NODES, 6000, 0.43), CFG, UNTIL) == [], seed


def test_lemon_partners_in_multi_node_jobs_are_not_blamed() -> None:
    eight = NODES[:8]
    rng = random.Random(3)
    jobs = _fleet(rng, eight, 3000, 0.2, users=12, bad=("gpu-005",), bad_rate=0.7, sizes=(2, 4))
    assert [s.node for s in lemons(jobs, CFG, UNTIL)] == ["gpu-005"]


def _paired(seed: int) -> List[Job]:
    """Half the jobs on one node, half on a fixed pair (gpu-000+001, gpu-002+003, ...), as a
    scheduler that packs neighbours places them; gpu-005 is a lemon, gpu-004 its partner."""
    rng = random.Random(seed)
    out = []
    for i in range(20000):
        k = rng.randrange(30)
        where = [rng.choice(NODES)] if rng.random() < 0.5 else [NODES[2 * k], NODES[2 * k + 1]]
        p = 0.7 if "gpu-005" in where else 0.25
        out.append(_job(i, f"u{rng.randrange(40)}", "FAILED" if rng.random() < p else "COMPLETED",
                        T0 + rng.uniform(0, 14 * DAY - 7200), rng.uniform(600, 7200), where))
    return out


def test_lemon_its_fixed_partner_is_explained_away() -> None:
    """Counted on its own, gpu-004 fails far above the fleet (p ~ 1e-10, named when the recount
    without gpu-005's jobs is taken out); recounted without the jobs it shared with the lemon,
    it is an ordinary node."""
    for seed in range(2):
        assert [s.node for s in lemons(_paired(seed), CFG, UNTIL)] == ["gpu-005"], seed


def test_lemon_a_job_size_that_never_failed_is_a_rate_of_zero_not_a_crash() -> None:
    jobs = _fleet(random.Random(4), NODES, 600, 0.3)
    jobs += [_job(5000 + i, f"u{i}", "COMPLETED", T0 + i * 60.0, 600.0, NODES[i:i + 2]) for i in range(10)]
    assert lemons(jobs, CFG, UNTIL) == []


def test_lemon_one_user_pinning_failing_jobs_counts_once() -> None:
    rng = random.Random(11)
    jobs = _fleet(rng, NODES, 6000, 0.3)
    # two hundred failures, each in a burst of its own (90 minutes apart), all of one user
    spite = [_job(90000 + i, "mallory", "FAILED", T0 + i * 5400.0, 5.0, ["gpu-021"]) for i in range(200)]
    assert lemons(jobs + spite, CFG, UNTIL) == []
    # uncapped and from one user allowed, the same record would name the node
    assert [s.node for s in lemons(jobs + spite, CFG._replace(user_cap=1e6, lemon_users=1), UNTIL)] == ["gpu-021"]


def test_lemon_a_burst_of_one_user_is_one_incident() -> None:
    rng = random.Random(5)
    jobs = _fleet(rng, NODES, 6000, 0.3)
    burst = [_job(80000 + i, f"u{i % 2}", "FAILED", T0 + 10 * DAY + i * 30.0, 600.0, ["gpu-030"]) for i in range(200)]
    # two hundred failures of two users within two hours: two trials, however uncapped
    assert lemons(jobs + burst, CFG._replace(user_cap=1e6), UNTIL) == []
    # counted line by line, the same record names the node
    assert [s.node for s in lemons(jobs + burst, CFG._replace(user_cap=1e6, incident_gap_s=1.0), UNTIL)] == ["gpu-030"]


def test_lemon_old_evidence_fades() -> None:
    rng = random.Random(7)
    jobs = _fleet(rng, NODES, 6000, 0.3, bad=("gpu-013",), bad_rate=0.8)
    assert [s.node for s in lemons(jobs, CFG, UNTIL)] == ["gpu-013"]
    # the same record read 20 weeks later with a 1-week half-life: the lemon's excess is gone
    assert lemons(jobs, CFG._replace(half_life_s=7 * DAY), UNTIL + 140 * DAY) == []


def test_find_suspects_names_a_black_hole_once_and_not_its_partners_as_lemons() -> None:
    rng = random.Random(9)
    jobs = _fleet(rng, NODES, 6000, 0.3)
    hole = [_job(70000 + i, f"u{i % 7}", "FAILED", T0 + 5 * DAY + i * 200.0, 2.0,
                 ["gpu-044"] if i % 3 else ["gpu-044", "gpu-045"]) for i in range(80)]
    found = find_suspects(jobs + hole, [], CFG, UNTIL)
    assert [(s.node, s.kind) for s in found] == [("gpu-044", "black_hole")]


# --- our own history -----------------------------------------------------------------------

def _ev(day: float, node: str, serial: str, kind: str) -> FleetEvent:
    return FleetEvent(T0 + day * DAY, node, serial, kind)


def test_history_five_remediations_in_seven_days_name_the_node_four_do_not() -> None:
    four = [_ev(d, "gpu-01", "SN1", "reset") for d in (0, 1, 2, 3)]
    assert history_suspects(four, CFG) == []
    five = four + [_ev(6.5, "gpu-01", "SN1", "reboot")]
    kinds = {(s.kind, s.node, s.serial) for s in history_suspects(five, CFG)}
    assert ("remediations", "gpu-01", None) in kinds
    assert ("serial_remediations", "gpu-01", "SN1") in kinds
    spread = [_ev(d * 2, "gpu-01", "SN1", "reset") for d in range(5)]  # five in nine days
    assert history_suspects(spread, CFG) == []


def test_history_a_gpu_s_record_follows_its_serial_and_a_node_s_survives_a_swap() -> None:
    moved = [_ev(0, "gpu-01", "SN9", "reset"), _ev(1, "gpu-01", "SN9", "reset"),
             _ev(2, "gpu-02", "SN9", "reset"), _ev(3, "gpu-03", "SN9", "reset"), _ev(4, "gpu-03", "SN9", "reset")]
    got = [(s.kind, s.node, s.serial) for s in history_suspects(moved, CFG)]
    assert got == [("serial_remediations", "gpu-03", "SN9")]  # no node had five; the GPU did
    swapped = [_ev(d, "gpu-05", f"SN{d}", "reset") for d in range(5)]  # a new GPU each time
    got = [(s.kind, s.node, s.serial) for s in history_suspects(swapped, CFG)]
    assert got == [("remediations", "gpu-05", None)]  # the node, not any one GPU


def test_history_same_xid_after_two_reboots() -> None:
    evs = [_ev(0, "gpu-01", "SN1", "xid:79"), _ev(0.1, "gpu-01", "SN1", "reboot"),
           _ev(1, "gpu-01", "SN1", "xid:79"), _ev(1.1, "gpu-01", "SN1", "reboot")]
    assert [s.kind for s in history_suspects(evs, CFG)] == []
    evs.append(_ev(2, "gpu-01", "SN1", "xid:79"))
    got = [s for s in history_suspects(evs, CFG) if s.kind == "same_xid_after_reboots"]
    assert len(got) == 1 and got[0].evidence["xid"] == 79 and got[0].evidence["reboots"] == 2


def test_history_xid_13_twice_on_one_gpu_within_a_day() -> None:
    evs = [_ev(0, "gpu-01", "SN1", "xid:13"), _ev(0.5, "gpu-01", "SN1", "xid:13")]
    assert [(s.kind, s.serial) for s in history_suspects(evs, CFG)] == [("xid_repeat", "SN1")]
    apart = [_ev(0, "gpu-01", "SN1", "xid:13"), _ev(2, "gpu-01", "SN1", "xid:13")]
    assert history_suspects(apart, CFG) == []
    two_gpus = [_ev(0, "gpu-01", "SN1", "xid:31"), _ev(0.5, "gpu-01", "SN2", "xid:31")]
    assert history_suspects(two_gpus, CFG) == []


def test_history_events_read_from_history_lines() -> None:
    records = [
        {"schema": 1, "epoch": T0, "node": "gpu-01", "findings": [
            {"check": "xid", "severity": "fail", "gpu": 2, "serial": "SN2", "value": 79},
            {"check": "ecc.volatile_uncorrected", "severity": "fail", "gpu": 1, "serial": "SN1", "value": 3},
            {"check": "ecc.volatile_corrected", "severity": "warn", "gpu": 1, "serial": "SN1", "value": 9}],
         "events": [{"kind": "repair", "priority": 5, "message": "repair gpu-01: reset GPU(s) 1,2 (ok); proving"}]},
        {"schema": 1, "epoch": T0 + 60, "node": "gpu-01", "findings": [], "events": [
            {"kind": "repair", "priority": 5, "message": "repair gpu-01: asked Slurm to reboot it (scontrol reboot)"}]},
        {"schema": 1, "node": "gpu-01"},  # no time: not an event
        "not a record",
    ]
    got = sorted((e.kind, e.serial) for e in history_events(records))  # type: ignore[arg-type]
    assert got == [("dbe", "SN1"), ("reboot", None), ("reset", "SN1"), ("reset", "SN2"), ("xid:79", "SN2")]


def test_lemon_found_among_more_nodes_than_the_screen_s_threshold() -> None:
    """Above SCREEN_ABOVE nodes a plain pass screens the nodes first: the lemon still passes it,
    and the false discovery rate is still taken over every node."""
    from healthcheck.decide.suspects import SCREEN_ABOVE

    many = [f"n{i:04d}" for i in range(SCREEN_ABOVE + 100)]
    jobs = _fleet(random.Random(21), many, 60 * len(many), 0.3, users=200, bad=("n0077",), bad_rate=0.8)
    assert [s.node for s in lemons(jobs, CFG, UNTIL)] == ["n0077"]
    healthy = _fleet(random.Random(22), many, 60 * len(many), 0.3, users=200)
    assert lemons(healthy, CFG, UNTIL) == []
