"""A run's open-records limit is sized from the memory of the function that matches them."""
from chalicelib.domain.runs import MATCH_MEMORY_MB, RUN_RECORDS, records_a_match_holds
from chalicelib.settings import Settings
from infra.functions import FUNCTIONS


def test_the_run_limit_is_what_the_match_function_holds_with_a_third_spare():
    # Given the match function's memory as deployed
    memory = FUNCTIONS["reconciliation_run_match"].memory_mb

    # Then the limit is computed from it, and is the setting's default
    assert MATCH_MEMORY_MB == memory
    assert RUN_RECORDS == records_a_match_holds(memory)
    assert Settings().max_run_records == RUN_RECORDS
    # 969 MB measured at 2M open records (bench/RESULTS.md): the limit's peak stays within two thirds
    assert 2_000_000 < RUN_RECORDS and (87 + RUN_RECORDS * 450 / 2 ** 20) < memory * 2 / 3
