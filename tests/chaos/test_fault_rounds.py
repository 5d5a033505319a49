"""A run given several kinds of fault strikes each before it repeats any, as many as fit, and
says (run.json, the summary, report.html) exactly which struck and which did not, and why."""

from __future__ import annotations

from pathlib import Path

from chaos.cli import strike_lines
from chaos.generator import CLUSTER_ONLY, NEMESES, schedule, time_needed_for_all
from chaos.history import FAIL, INVOKE, NEMESIS, OK, History
from chaos.report import faults_struck
from chaos.run import RunOptions, run_directory, struck_facts

ONE_GROUP = [n for n in NEMESES if n not in CLUSTER_ONLY]


def test_no_kind_strikes_twice_before_every_kind_struck_once() -> None:
    for seed in range(200):
        faults = schedule(seed, list(NEMESES), 600)
        kinds = [fault.nemesis for fault in faults]
        for start in range(0, len(kinds), len(NEMESES)):  # each round every kind once
            round_ = kinds[start:start + len(NEMESES)]
            assert len(set(round_)) == len(round_), (seed, round_)
        assert set(kinds[:len(NEMESES)]) == set(NEMESES)


def test_thirty_seconds_of_every_kind_strike_at_least_four_distinct_ones() -> None:
    for seed in range(300):
        faults = schedule(seed, ONE_GROUP, 30)
        kinds = [fault.nemesis for fault in faults]
        assert len(kinds) >= 4 and len(set(kinds)) == len(kinds), (seed, kinds)
        for before, after in zip(faults, faults[1:], strict=False):  # each healed, then calm, before the next
            assert after.at_s - (before.at_s + before.heal_after_s) >= 3.0
        assert faults[-1].at_s + faults[-1].heal_after_s <= 30


def test_the_time_needed_for_all_schedules_every_kind() -> None:
    for seed in (0, 1, 7):
        needed = time_needed_for_all(seed, ONE_GROUP)
        assert {f.nemesis for f in schedule(seed, ONE_GROUP, needed)} == set(ONE_GROUP)
        assert {f.nemesis for f in schedule(seed, ONE_GROUP, 30)} != set(ONE_GROUP) and needed > 60
    assert schedule(5, ONE_GROUP, 40) == schedule(5, ONE_GROUP, 40)  # pure and seeded


def test_the_run_directory_names_what_is_scheduled_not_what_was_asked() -> None:
    options = RunOptions(nemeses=tuple(ONE_GROUP), time_limit_s=30, seed=1, out=Path("runs"))
    faults = schedule(1, ONE_GROUP, 30)
    name = run_directory(options, faults).name
    kinds = list(dict.fromkeys(f.nemesis for f in faults))
    assert name.endswith(f"-queue-{len(kinds)}-nemeses-s1") or name.endswith("-queue-" + "+".join(kinds) + "-s1")
    assert "power-loss" not in name or "power-loss" in kinds
    few = schedule(1, ["kill", "transfer"], 12)
    assert run_directory(options, few).name.endswith("-queue-" + "+".join(dict.fromkeys(f.nemesis for f in few))
                                                      + "-s1")


def test_the_facts_name_what_struck_and_why_the_rest_did_not() -> None:
    options = RunOptions(nemeses=tuple(ONE_GROUP), time_limit_s=20, seed=2, asked=tuple(NEMESES))
    faults = schedule(2, ONE_GROUP, 20)
    history = History()
    first, second = faults[0].nemesis, faults[1].nemesis
    for kind, outcome in ((first, OK), (second, FAIL)):  # the second could not be made
        value = {"target": "one", "group": "g1", "nodes": ["g1/n1"]}
        history.record(NEMESIS, INVOKE, kind, value)
        history.record(NEMESIS, outcome, kind, value, error="OSError: no" if outcome == FAIL else None)
        if outcome == OK:
            history.record(NEMESIS, OK, "heal", {"nodes": ["g1/n1"], "of": kind})
    history.record(NEMESIS, OK, "restart", {"nodes": ["g1/n2"]})  # the end-of-run restart: no fault
    facts = struck_facts(options, faults, history.ops)
    assert facts["faults_struck"] == {first: 1} == faults_struck(history.ops)
    assert facts["nemeses_not_struck"] == [n for n in NEMESES if n != first]
    why = facts["not_struck_why"]
    assert why["drain"].startswith("needs a cluster of groups")
    assert why[second] == "could not be made: OSError: no"
    needed = time_needed_for_all(2, ONE_GROUP)
    unscheduled = [n for n in ONE_GROUP if n not in {f.nemesis for f in faults}]
    assert unscheduled and all(why[n] == f"did not fit in 20 s: seed 2 needs --time-limit {needed}"
                               for n in unscheduled)
    lines = strike_lines(facts)
    assert lines[0].split(None, 2)[2] == f"{first} ×1"
    assert any(line.startswith("not struck") and "drain (needs a cluster" in line for line in lines)
    assert any(f"needs --time-limit {needed}" in line and ", ".join(unscheduled) in line for line in lines)


def test_the_live_line_uses_the_summarys_words() -> None:
    from chaos.cli import live_line
    from chaos.run import Progress

    line = live_line(Progress(12.5, {"ok": 10, "fail": 1, "info": 2, "receive": 11}, None, "running"), "queue")
    assert line == "running  12.5s  acknowledged 10  failed 1  indeterminate 2  deliveries 11"
