"""What an audit proved, in words: the verdict in one sentence, and per run what each check
judged, over how many records, and what it found. Pure text from `report.to_json`'s data, so
`audit.html` (report.py) and the terminal (cli.py) say the same, and an `audit.json` can be
told again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spark_audit import faults
from spark_audit.embedded_runs import EMBEDDED_WORKLOAD

Read = dict[str, int]

# What a clean check proves, for the headline.
PROVEN = {
    "lost": "nothing acknowledged was lost",
    "unexpected": "nothing appeared that no one sent",
    "stored_duplicates": "nothing was stored twice",
    "consumer_duplicates": "nothing was delivered twice without the redelivered flag",
    "divergence": "no two replicas diverged",
    "leaders": "no two leaders shared a term",
    "bridges": "nothing was stranded between groups",
    "order": "no delivery came out of the order stored",
    "conservation": "every message stored left its store or still waits there",
    "files": "no file was corrupt",
}

# What a check's findings are, counted: (one, many).
FOUND = {
    "lost": ("acknowledged message lost", "acknowledged messages lost"),
    "unexpected": ("value received or stored that no one sent", "values received or stored that no one sent"),
    "stored_duplicates": ("message stored twice", "messages stored twice"),
    "consumer_duplicates": ("message received twice without the redelivered flag",
                            "messages received twice without the redelivered flag"),
    "divergence": ("entry, body or snapshot on which a member differs",
                   "entries, bodies or snapshots on which a member differs"),
    "leaders": ("term with two leaders", "terms with two leaders"),
    "bridges": ("message stranded between groups or past max_hops",
                "messages stranded between groups or past max_hops"),
    "order": ("delivery out of the order stored", "deliveries out of the order stored"),
    "conservation": ("message that entered a queue and neither left nor waits there",
                     "messages that entered a queue and neither left nor wait there"),
    "files": ("corrupt file", "corrupt files"),
}


def count(n: int, one: str, many: str | None = None) -> str:
    """`1 run`, `2 runs`, `1,234 members`."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def _clean_lines() -> dict[str, Callable[[Read], str]]:
    return {
        "lost": lambda r: (f"every one of the {count(r.get('acked_sends', 0), 'acknowledged send')} was received, "
                           "still waits at the end, or was dead-lettered or expired"),
        "unexpected": lambda r: (f"each of the {count(r.get('receives', 0), 'receive')}, and each message stored "
                                 "from a client, is of a value a client sent, whose send did not fail"),
        "stored_duplicates": lambda r: (f"no producer's duplicate-detection id reached its end twice among the "
                                        f"{count(r.get('messages', 0), 'message')} stored, in one group or in two"),
        "consumer_duplicates": lambda r: (f"no value among the {count(r.get('receives', 0), 'receive')} was received "
                                          "twice without the redelivered flag"),
        "divergence": lambda r: (f"each group's members ({count(r.get('members', 0), 'member')} in all) agree on every "
                                 "committed Raft entry, body record and snapshot "
                                 f"({count(r.get('entries', 0), 'Raft entry', 'Raft entries')}, "
                                 f"{count(r.get('body_records', 0), 'body record')} read)"),
        "leaders": lambda r: ("no term had two leaders, nor a new leader's no-op at two indexes "
                              f"({count(r.get('terms', 0), 'term')} logged by the members)"),
        "bridges": lambda r: ("no message was left in a store-and-forward queue, arrived over more hops than max_hops, "
                              "or was taken by a bridge and never stored by the next group "
                              f"({count(r.get('forwarded_in', 0), 'message')} arrived from another group, "
                              f"{r.get('forwarded_first_in', 0):,} of them forwarded first)"),
        "order": lambda r: (f"per consumer, producer and queue, the first deliveries among the "
                            f"{count(r.get('receives', 0), 'receive')} came in the order the queue stored them"),
        "conservation": lambda r: (f"each of the {count(r.get('stored', 0), 'arrival')} in a store left it "
                                   f"({r.get('consumed', 0):,} acknowledged; or dead-lettered, expired, forwarded) "
                                   "or still waits there"),
        "files": lambda r: (f"the Raft journals and snapshots of {count(r.get('members', 0), 'member')} and "
                            f"{count(r.get('segments', 0), 'body-journal segment')} were read without corruption"
                            + (f"; {count(r.get('torn_tails', 0) + r.get('torn_segments', 0), 'torn tail')} "
                               "(what a crash leaves) counted, never read as data"
                               if r.get("torn_tails", 0) + r.get("torn_segments", 0) else "")),
    }


CLEAN = _clean_lines()
# What each check's findings were found among: (read key, what it counts).
AMONG = {
    "lost": ("acked_sends", "acknowledged send"), "unexpected": ("receives", "receive"),
    "stored_duplicates": ("messages", "message stored"), "consumer_duplicates": ("receives", "receive"),
    "divergence": ("entries", "Raft entry"), "leaders": ("terms", "term"), "bridges": ("messages", "message stored"),
    "order": ("receives", "receive"), "conservation": ("stored", "arrival in a store"),
    "files": ("segments", "body-journal segment"),
}
NAMED = 3  # findings a bad check's sentence names
PLURAL = {"Raft entry": "Raft entries", "message stored": "messages stored",
          "arrival in a store": "arrivals in a store"}


def found(check: str, n: int) -> str:
    one, many = FOUND[check]
    return f"{n:,} {one if n == 1 else many}"


def check_line(check: str, n: int | None, read: Read, workload: str,
               sample: list[dict[str, Any]] | None = None) -> tuple[str, str]:
    """(status, sentence) for one check of one run: `ok`, `bad` or `na`; a bad one names the
    first of its `sample` of findings."""
    if n is None:
        if workload == EMBEDDED_WORKLOAD:
            return "na", "not judged: embedded brokers keep no client history, only what they stored"
        return "na", (f"not judged: the {workload} workload's sends and receives are not the values of one queue "
                      "(its chaos checker judges them)")
    if n == 0:
        return "ok", CLEAN[check](read)
    key, what = AMONG[check]
    text = f"{found(check, n)} (among {count(read.get(key, 0), what, PLURAL.get(what))})"
    named = [named_finding(f) for f in (sample or [])[:NAMED]]
    if named:
        text += ": " + ", ".join(named) + (", ..." if n > len(named) else "")
    return "bad", text


def named_finding(finding: dict[str, Any]) -> str:
    """`g1/n3 4`, `g1-p0-30`: where a finding is, and its item."""
    where = "/".join(str(part) for part in (finding.get("group"), finding.get("node")) if part)
    return " ".join(part for part in (where, str(finding.get("item") or "")) if part)


def run_summary(run: dict[str, Any]) -> str:
    r: Read = run["read"]
    read = (f"{run['workload']} workload, {count(r.get('groups', 0), 'group')}, "
            f"{count(r.get('members', 0), 'member')}: "
            f"{count(r.get('entries', 0), 'Raft entry', 'Raft entries')} and "
            f"{count(r.get('body_records', 0), 'body record')} read, "
            f"{count(r.get('operations', 0), 'client operation')}.")
    struck = " " + faults.sentence(faults.from_json(run.get("faults"))) if "faults" in run else ""
    if run["clean"]:
        return f"Clean. {read}{struck}"
    bad = [found(check, n) for check, n in run["counts"].items() if n]
    return f"Findings: {', '.join(bad)}. {read}{struck}"


def verdict(data: dict[str, Any]) -> str:
    """The audit in one sentence (two when checks did not apply to every run)."""
    runs = data["runs"]
    checks = data["checks"]
    records = f"{count(len(runs), 'run')}, {count(data['records'], 'journal record')} read"
    if data["clean"]:
        judged = [c for c in checks if any(run["counts"][c] is not None for run in runs)]
        text = f"Clean: {records}; {_join([PROVEN[c] for c in judged])}."
        partly = [c for c in judged if any(run["counts"][c] is None for run in runs)]
        if partly:
            some = sum(1 for run in runs if run["counts"][partly[0]] is not None)
            text += (f" ({_join([c.replace('_', ' ') for c in partly])} judged in {some} of {count(len(runs), 'run')}: "
                     f"{_why_not(runs, partly, 'the others')}.)")
        unjudged = [c for c in checks if c not in judged]
        if unjudged:
            text += (f" ({_join([c.replace('_', ' ') for c in unjudged])} not judged: "
                     f"{_why_not(runs, unjudged, 'the runs')}.)")
        return text
    bad_runs = sum(1 for run in runs if not run["clean"])
    totals = {c: sum(run["counts"][c] or 0 for run in runs) for c in checks}
    quiet = [c.replace("_", " ") for c in checks if not totals[c] and any(run["counts"][c] is not None for run in runs)]
    text = (f"Findings in {bad_runs} of {count(len(runs), 'run')} ({count(data['records'], 'journal record')} read): "
            f"{_join([found(c, n) for c, n in totals.items() if n])}.")
    if quiet:
        text += f" The other checks ({', '.join(quiet)}) found nothing."
    return text


def _why_not(runs: list[dict[str, Any]], checks: list[str], which: str) -> str:
    """Why `checks` were not judged in some of `runs`: their workloads have chaos checkers of
    their own, or they are embedded brokers', which keep no client history."""
    workloads = {run["workload"] for run in runs if any(run["counts"][c] is None for c in checks)}
    reasons = []
    if workloads - {EMBEDDED_WORKLOAD}:
        reasons.append(f"{which}' workloads are judged by the chaos checkers")
    if EMBEDDED_WORKLOAD in workloads:
        reasons.append("embedded brokers keep no client history")
    return "; ".join(reasons)


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
