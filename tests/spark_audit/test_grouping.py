"""The spark group's session fixtures stay in the group (tests/helpers/worker_groups.py): a test
that runs on any worker and asks for one would make it again there."""

from __future__ import annotations

import pytest

from tests.helpers.worker_groups import UngroupedSparkTest, check_grouped, worker_group


def test_the_tests_that_leave_the_group_are_the_ones_that_need_nothing_of_it() -> None:
    assert worker_group("tests/spark_audit/test_checks.py::test_lost") == "spark"
    assert worker_group("tests/spark_audit/test_replay.py::test_a_snapshot_is_the_starting_state") is None
    assert worker_group("tests/spark_audit/test_cli.py::test_the_jvm_output_goes_to_a_log_not_into_the_status_line") \
        is None
    check_grouped("tests/spark_audit/test_replay.py::test_x", ["tmp_path", "short_lived_jvms"])
    check_grouped("tests/spark_audit/test_checks.py::test_lost", ["audited", "spark"])


def test_an_ungrouped_test_that_asks_for_the_session_is_refused() -> None:
    with pytest.raises(UngroupedSparkTest, match="asks for group_run, spark outside the spark group"):
        check_grouped("tests/spark_audit/test_replay.py::test_x", ["tmp_path", "spark", "group_run"])
