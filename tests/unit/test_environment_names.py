"""An environment's name is a prefix of its keys, S3 paths and secret names: only the plain name."""
import pytest

from chalicelib.domain.api_keys import check_environment_name
from chalicelib.domain.errors import ValidationFailed


@pytest.mark.parametrize("name", ["acme", "acme-eu_2", "a" * 64])
def test_a_plain_name_is_an_environment_name(name):
    check_environment_name(name)


@pytest.mark.parametrize("name", ["", "Acme", "acme/..", "acme\n", "acme ", "a" * 65])
def test_anything_else_is_refused(name):
    with pytest.raises(ValidationFailed):
        check_environment_name(name)
