"""The export repository's checkpoint against moto's DynamoDB (adapters/dynamodb/exports.py): one
worker moves a checkpoint on (a second, from the same checkpoint, is Superseded), and each part
number is given once, ascending, from the highest part of an export begun without the counter."""
from __future__ import annotations

import pytest

from chalicelib.adapters.aws import AwsClients
from chalicelib.adapters.dynamodb.exports import ExportRepository
from chalicelib.adapters.dynamodb.table import DynamoTable
from chalicelib.domain.clock import utc_now
from chalicelib.domain.exports import Export, ExportFormat, ExportKind, ExportStatus, Part, Superseded
from chalicelib.local.provision import provision
from chalicelib.settings import Settings
from tests.conftest import REGION, TEST_PARAMETERS
from tests.contract.builders import ENV

pytestmark = pytest.mark.moto


@pytest.fixture
def repository(moto_aws) -> ExportRepository:
    settings = Settings(region=REGION, local_mode=True)
    aws = AwsClients(settings)
    provision(aws, TEST_PARAMETERS, REGION, log=lambda _: None)
    return ExportRepository(DynamoTable(aws.dynamodb, settings.table_name))


def started(repository: ExportRepository, export_id: int = 1) -> Export:
    repository.add(Export(environment=ENV, id=export_id, kind=ExportKind.RECORDS, format=ExportFormat.CSV,
                          filters={}, status=ExportStatus.PENDING, created_at=utc_now(),
                          file_key=f"exports/{ENV}/{export_id}.csv"))
    return repository.move(repository.get(ENV, export_id), ExportStatus.PROCESSING)


def test_two_workers_from_one_checkpoint_get_distinct_part_numbers_and_one_moves_it_on(repository):
    begun = repository.checkpoint(started(repository), "upload-1", (), None, 0)
    first, second = repository.claim_part_number(begun), repository.claim_part_number(begun)
    assert (first, second) == (1, 2)
    moved = repository.checkpoint(begun, "upload-1", (Part(first, "e1"),), "c1", 10)
    with pytest.raises(Superseded):
        repository.checkpoint(begun, "upload-1", (Part(second, "e2"),), "c1", 10)
    assert repository.get(ENV, 1).parts == (Part(first, "e1"),)
    assert repository.claim_part_number(moved) == 3  # never a number given before: ascending


def test_an_export_begun_without_the_counter_goes_on_after_its_highest_part(repository):
    begun = repository.checkpoint(started(repository), "upload-1", (), None, 0)
    moved = repository.checkpoint(begun, "upload-1", (Part(1, "e1"),), "c1", 10)
    moved = repository.checkpoint(moved, "upload-1", (Part(1, "e1"), Part(2, "e2")), "c2", 20)
    assert repository.claim_part_number(moved) == 3
