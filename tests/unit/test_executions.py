"""Execution names: unique per job or run and attempt, never longer than Step Functions takes."""
from chalicelib.domain.executions import execution_name


def test_execution_names_stay_within_step_functions_limit_and_unique():
    assert execution_name("acme", "run", 7, "r1") == "acme-run-7-r1"
    long_a, long_b = execution_name("e" * 64, "run", 123456789012), execution_name("e" * 64, "run", 123456789013)
    assert len(long_a) == len(long_b) == 80 and long_a != long_b
