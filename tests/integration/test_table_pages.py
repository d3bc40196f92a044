"""Reading a partition a page at a time (typed values as botocore's parser gives them), and counting it."""
import time

from chalicelib.adapters.dynamodb import keys

PARTITION = "E#acme#DS#bank#OPEN"


def put(services, n, **fields):
    services.table.put({"pk": f"E#acme#REC#{n:012d}", "sk": "REC", "gsi5pk": PARTITION, "gsi5sk": f"{n:012d}",
                        "id": n, **fields})


def test_pages_hold_the_typed_values_botocores_parser_gives(services):
    put(services, 1, amount=-125, date="2026-11-02", matched_in={3, 4}, tags={"x", "y"}, flag=True,
        nested={"a": [1, "b", None]}, note="é ünïcode")
    put(services, 2, amount=10 ** 17, description=None)

    pages = list(services.table.query_pages(keys.GSI5, PARTITION))

    parsed = services.aws.dynamodb.query(TableName=services.table.name, IndexName="gsi5",
                                         KeyConditionExpression="gsi5pk = :p",
                                         ExpressionAttributeValues={":p": {"S": PARTITION}})["Items"]
    assert [item for page in pages for item in page] == parsed
    assert parsed[0]["amount"] == {"N": "-125"} and parsed[0]["matched_in"]["NS"]


def test_a_count_says_whether_it_finished_before_its_deadline(services):
    for n in range(3):  # about 350 KB each: three items take two pages of at most 1 MB
        put(services, n, description="x" * 350_000)

    assert services.table.count(keys.GSI5, PARTITION) == (3, True)
    counted, finished = services.table.count(keys.GSI5, PARTITION, deadline=time.monotonic() - 1)
    assert counted < 3 and not finished
