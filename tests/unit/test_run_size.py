"""A run's open-records limit is sized from the memory of the function that matches them."""
import pytest
from pydantic import ValidationError

from chalicelib.domain.runs import (
    CHUNK_RECORDS,
    FANOUT_RECORDS,
    MATCH_MEMORY_MB,
    MAX_RUN_CHUNKS,
    PARTITION_RECORDS,
    RUN_RECORDS,
    records_a_match_holds,
)
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


def test_a_run_of_the_largest_size_fits_one_executions_history_in_chunks():
    # The default: the largest run, in chunks filled only half, within what one execution holds
    assert RUN_RECORDS / (CHUNK_RECORDS // 2) <= MAX_RUN_CHUNKS
    # Smaller chunks are taken for smaller runs only, and the refusal names both settings
    assert Settings(run_chunk_records=250, max_run_records=500_000).run_chunk_records == 250
    with pytest.raises(ValidationError, match="RECON_RUN_CHUNK_RECORDS=250 .* RECON_MAX_RUN_RECORDS="):
        Settings(run_chunk_records=250)


def test_a_fanned_out_runs_partitions_are_sized_from_the_match_function_and_matched_by_one_as_large():
    # The threshold to fan out is what one match function holds; a partition aims at half of it (a hash
    # spreads unevenly, a range plan copies side B near a cut), and the function matching it is as large
    settings = Settings()
    assert settings.max_run_records == RUN_RECORDS and settings.run_partition_records == PARTITION_RECORDS
    assert PARTITION_RECORDS == RUN_RECORDS // 2
    assert FUNCTIONS["reconciliation_run_partition"].memory_mb == FUNCTIONS["reconciliation_run_match"].memory_mb
    # 10M records a side fan out by default, in partitions the Map runs 64 at a time on AWS
    assert settings.max_fanout_run_records == 20_000_000 and settings.run_map_concurrency == 64


def test_the_fan_out_settings_follow_a_smaller_function_and_refuse_what_contradicts_it():
    smaller = Settings(max_run_records=200_000)
    assert (smaller.run_partition_records, smaller.max_fanout_run_records) == (100_000, FANOUT_RECORDS)
    assert Settings(max_run_records=30_000_000, run_chunk_records=20_000).max_fanout_run_records == 30_000_000
    with pytest.raises(ValidationError, match="RECON_RUN_PARTITION_RECORDS=300 is more than RECON_MAX_RUN_RECORDS=200"):
        Settings(max_run_records=200, run_partition_records=300)
    with pytest.raises(ValidationError, match="RECON_MAX_FANOUT_RUN_RECORDS=100 is less than RECON_MAX_RUN_RECORDS=200"):
        Settings(max_run_records=200, max_fanout_run_records=100)
