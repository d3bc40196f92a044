"""Messages people read say what they mean: counts agree with their nouns."""
from chalicelib.domain.reconciliation_exceptions import describe


def test_an_exception_description_agrees_each_count_with_its_noun():
    # Given one unmatched credit and eleven debits; When described; Then singular and plural agree
    kept = {"record_count": 12, "credit_count": 1, "credit_sum": 500, "debit_count": 11, "debit_sum": 100}
    assert describe(kept, "USD", 2) == "12 unmatched records totalling 4.00 USD (1 credit, 11 debits)"
    one = {"record_count": 1, "credit_count": 0, "credit_sum": 0, "debit_count": 1, "debit_sum": 700}
    assert describe(one, "USD", 2) == "1 unmatched record totalling -7.00 USD (0 credits, 1 debit)"
