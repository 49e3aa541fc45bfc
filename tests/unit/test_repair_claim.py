"""The repair budget's claim (decide.repair): two steps, each written and re-read, ranked by no
node's clock; a claim that expires; the site's part of a node's Comment kept beside ours."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from healthcheck.config import Config
from healthcheck.decide import repair as rd
from healthcheck.decide.budget import fit_to_budget
from healthcheck.decide.verdict import NodeState, may_resume, our_comment, refused_reason, their_comment, with_our_comment
from healthcheck.text import iso_utc

OURS = "gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=SN2 ecc.volatile_uncorrected=1 epilog job=7"
NOW = 1_800_000_000.0


def node(name="gpu-a", state="IDLE+DRAIN", reason=OURS, comment=None, when="2027-01-15T08:00:00"):
    return NodeState(name=name, state=state, reason=reason, reason_time=when, comment=comment)


def claim(state=rd.RESETTING, until=NOW + 60, asking=False):
    return rd.mark_text(state, [2], iso_utc(NOW - 5), iso_utc(until) if until else None, asking)


def test_our_claim_goes_beside_the_sites_comment_and_only_ours_is_removed():
    ticket = "ticket 4711"
    claimed = with_our_comment(ticket, claim())
    assert claimed.startswith("ticket 4711 | gpu-healthcheck: repair resetting gpus=2 ")
    assert their_comment(claimed) == ticket and our_comment(claimed) == claim()
    mark = rd.parse_mark(claimed)
    assert mark is not None and mark["state"] == rd.RESETTING and mark["gpus"] == "2"
    assert with_our_comment(claimed, "") == ticket  # released: the ticket stays
    assert with_our_comment(with_our_comment(claimed, claim(rd.VALIDATING)), "") == ticket
    assert with_our_comment(None, claim()) == claim() and with_our_comment(None, "") == ""
    assert with_our_comment("ticket 4711", "") == "ticket 4711"  # nothing of ours: unchanged
    assert with_our_comment("(null)", claim()) == claim()  # scontrol's word for no Comment
    assert rd.parse_mark(ticket) is None and our_comment(ticket) is None
    # a refused drain's note and the reboot hold are read from our part too
    refused = with_our_comment(ticket, "gpu-healthcheck: drain refused 2027-01-15T08:00:00Z: " + OURS)
    assert refused_reason(refused) == OURS
    rebooting = with_our_comment(ticket, rd.mark_text(rd.REBOOTING, range(8), iso_utc(NOW)))
    assert may_resume(node(comment=rebooting), [], []) is not None


def test_a_claim_past_its_expiry_holds_no_budget_and_its_own_node_clears_it():
    live, dead = node("gpu-a", comment=claim()), node("gpu-a", comment=claim(until=NOW - 1))
    other = node("gpu-b")
    assert rd.active_claim(live, NOW) is not None and rd.active_claim(dead, NOW) is None
    assert rd.busy_repairing([live, other], "gpu-b", NOW) == ["gpu-a"]
    assert rd.busy_repairing([dead, other], "gpu-b", NOW) == []
    assert rd.cluster_state(dead, [dead, other], 1, NOW) == "drained"  # not "resetting" for ever
    # the node's own run: a live claim is another run of ours (wait), a dead one is cleared,
    # and a claim written without an expiry (an older version's) cannot be told from a killed one
    assert rd.stale_own_claim(rd.parse_mark(live.comment) or {}, NOW) is False
    assert rd.stale_own_claim(rd.parse_mark(dead.comment) or {}, NOW) is True
    assert rd.stale_own_claim(rd.parse_mark(claim(until=None)) or {}, NOW) is True
    assert rd.stale_own_claim(rd.parse_mark(claim(asking=True)) or {}, NOW + 3600) is True
    # a reboot's claim has no expiry: slurmctld's reboot state ends it
    reboot = rd.parse_mark(rd.mark_text(rd.REBOOTING, range(8), iso_utc(NOW)))
    assert reboot is not None and rd.stale_own_claim(reboot, NOW + 86400) is None
    assert not rd.claim_expired(reboot, NOW + 86400)


def test_nvidia_smi_deadlines_fit_the_runs_budget():
    fitted = fit_to_budget(Config(), 50.0)  # HealthCheckProgram's default act_budget_s
    # persistence off, the reset and persistence on fit in what is left of 60 s with the rest
    assert 3 * fitted.nvidia_smi_timeout_s <= 0.6 * 50.0
    assert fit_to_budget(Config(), 20.0).nvidia_smi_timeout_s == 4.0


def test_after_the_claim_a_changed_node_backs_the_repair_off():
    before = node()
    assert rd.changed_since(before, before._replace(comment=claim())) is None
    assert "no longer drained" in (rd.changed_since(before, node(state="IDLE")) or "")
    assert "a job runs" in (rd.changed_since(before, node(state="MIXED+DRAIN")) or "")
    assert "reason changed" in (rd.changed_since(before, node(reason="memtest by admin")) or "")
    assert "reason changed" in (rd.changed_since(before, node(when="2027-01-15T08:00:09")) or "")
    assert "gone" in (rd.changed_since(before, None) or "")


NAMES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]


def run_claims(schedule, count, budget, late):
    """Every node runs the claim protocol (act.repair.Repairer._claim) against one shared
    Comment table, one step at a time in the order `schedule` picks: ask, re-read, hold,
    re-read.  A node in `late` had its ask stamped before every other node's (the old order
    would rank it first).  Returns the nodes that went on to reset."""
    comments = {name: None for name in NAMES[:count]}
    step = dict.fromkeys(comments, 0)
    proceeded, stepped_back = [], []

    def cluster():
        return [node(n, comment=c) for n, c in comments.items()]

    def advance(name):
        at = iso_utc(NOW - 30 if name in late else NOW)
        s = step[name]
        if s == 0:
            comments[name] = rd.mark_text(rd.RESETTING, [2], at, iso_utc(NOW + 60), asking=True)
        elif s == 1:
            if name in rd.repairs_beyond_budget(cluster(), budget, NOW):
                comments[name], step[name] = None, 9
                stepped_back.append(name)
                return
        elif s == 2:
            comments[name] = rd.mark_text(rd.RESETTING, [2], at, iso_utc(NOW + 60))
        elif s == 3:
            if rd.held_past_budget(cluster(), budget, NOW):
                comments[name], step[name] = None, 9
                stepped_back.append(name)
                return
            proceeded.append(name)  # it resets, and holds its claim to the end of this test
        step[name] += 1

    for pick in schedule:
        name = NAMES[pick % count]
        if step[name] < 4:
            advance(name)
    for name in comments:  # the rest runs to its end, in name order
        while step[name] < 4:
            advance(name)
    return proceeded


@settings(max_examples=400, deadline=None)
@given(schedule=st.lists(st.integers(0, 3), max_size=24), count=st.integers(2, 4),
       budget=st.integers(1, 2), late=st.sets(st.sampled_from(NAMES)))
def test_no_interleaving_of_claims_lets_more_nodes_reset_than_the_budget(schedule, count, budget, late):
    assert len(run_claims(schedule, count, budget, late)) <= budget


def test_claims_one_after_another_or_all_at_once_still_let_one_node_reset():
    assert run_claims([], 2, 1, set()) == ["gpu-a"]  # one after another
    # in lock step (both ask, both re-read...): the order by name lets gpu-a go, gpu-b waits
    assert run_claims([0, 1, 0, 1, 0, 1, 0, 1], 2, 1, {"gpu-b"}) == ["gpu-a"]
    assert run_claims([1, 1, 1, 1], 2, 1, set()) == ["gpu-b"]  # gpu-b first: gpu-a sees its hold
