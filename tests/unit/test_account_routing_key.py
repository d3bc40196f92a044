"""Which written forms of one account route to the same bank_feed stream (account_routing_key)."""
import pytest

from chalicelib.domain.data_streams import account_routing_key


@pytest.mark.parametrize("one, other", [
    ("50880050/0194774600888", "50880050/0194774600888"),  # MT940 :25: bank code/account, both sides alike
    ("50880050/0194774600888", "0194774600888"),           # with and without the bank code
    ("DEUTDEFF/0194774600888", "194774600888"),            # a BIC first; a plain number's leading zeros
    ("DE89 3704 0044 0532 0130 00", "de89370400440532013000"),  # spaces and case
    ("NL91ABNA0417164300EUR", "NL91 ABNA 0417 1643 00"),   # an IBAN followed by its currency
    ("000-123-456", " 123456 "),                           # dashes and surrounding blanks
])
def test_forms_of_one_account_have_one_routing_key(one, other):
    assert account_routing_key(one) == account_routing_key(other)


@pytest.mark.parametrize("one, other", [
    ("123456", "1234567"),
    ("DE89370400440532013000", "DE89370400440532013001"),
    ("ACCT-1A", "ACCT-1B"),
])
def test_different_accounts_have_different_routing_keys(one, other):
    assert account_routing_key(one) != account_routing_key(other)
