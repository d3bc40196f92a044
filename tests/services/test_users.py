"""Users' use cases on the fakes: invitations through the provider, role and status changes (the
provider disables and enables sign-in), who sends a request, and who a write may name."""
from __future__ import annotations

from datetime import timedelta

import pytest

from chalicelib.domain.api_keys import KeyAccess
from chalicelib.domain.errors import Conflict, Unauthorized, ValidationFailed
from chalicelib.domain.users import Principal, Role, UserStatus
from chalicelib.services import users
from chalicelib.services.api_keys import create_key
from tests.services.conftest import ENV
from tests.support.people import add_user

MINUTE = timedelta(minutes=1)
MACHINE = Principal(environment=ENV, role=Role.ADMIN, actor="api_key:1")


def test_an_invitation_goes_through_the_provider_once(ports):
    ada = users.invite(ports, ENV, email=" Ada@Example.com ", name=" Ada ", role=Role.PREPARER)
    assert (ada.email, ada.name, ada.role, ada.status) == ("ada@example.com", "Ada", Role.PREPARER, UserStatus.INVITED)
    assert ports.identity.invitations == ["ada@example.com"] and ports.identity.users["ada@example.com"] == ada.idp_user_id
    with pytest.raises(Conflict, match=f"already user {ada.id}"):
        users.invite(ports, ENV, email="ADA@example.com", name=None, role=Role.VIEWER)
    assert ports.identity.invitations == ["ada@example.com"]  # no second invitation
    with pytest.raises(ValidationFailed, match="email"):
        users.invite(ports, ENV, email="ada", name=None, role=Role.VIEWER)


def test_an_invitation_of_another_environments_user_is_refused(ports):
    users.invite(ports, ENV, email="ada@example.com", name=None, role=Role.ADMIN)
    with pytest.raises(Conflict, match="user of another environment"):
        users.invite(ports, "globex", email="ada@example.com", name=None, role=Role.ADMIN)


def test_deactivating_disables_sign_in_and_reactivating_enables_it(ports):
    ada = users.invite(ports, ENV, email="ada@example.com", name="Ada", role=Role.PREPARER)
    gone = users.deactivate(ports, ENV, ada.id, acting=MACHINE)
    assert gone.status is UserStatus.DEACTIVATED and ada.idp_user_id in ports.identity.disabled
    assert users.deactivate(ports, ENV, ada.id, acting=MACHINE) == gone  # again: the provider is told again
    back = users.update(ports, ENV, ada.id, acting=MACHINE, status=UserStatus.ACTIVE)
    assert back.status is UserStatus.INVITED  # never signed in: invited again, not active
    assert ada.idp_user_id not in ports.identity.disabled


def test_a_role_and_a_name_change_and_a_name_is_cleared_only_when_given(ports):
    ada = users.invite(ports, ENV, email="ada@example.com", name="Ada", role=Role.PREPARER)
    promoted = users.update(ports, ENV, ada.id, acting=MACHINE, role=Role.APPROVER)
    assert (promoted.role, promoted.name) == (Role.APPROVER, "Ada")
    cleared = users.update(ports, ENV, ada.id, acting=MACHINE, name=None, fields={"name"})
    assert (cleared.role, cleared.name) == (Role.APPROVER, None)
    with pytest.raises(ValidationFailed, match="status"):
        users.update(ports, ENV, ada.id, acting=MACHINE, status=UserStatus.INVITED)


def test_an_admin_does_not_lock_themselves_out(ports):
    admin = add_user(ports.users, ENV, "root", Role.ADMIN)
    me = Principal(environment=ENV, role=Role.ADMIN, actor=f"user:{admin.id}", user=admin)
    for change in ({"status": UserStatus.DEACTIVATED}, {"role": Role.VIEWER}):
        with pytest.raises(Conflict, match="another admin"):
            users.update(ports, ENV, admin.id, acting=me, **change)
    assert ports.users.get(ENV, admin.id) == admin


def test_a_token_names_its_user_and_a_first_request_activates_them(ports, clock):
    ada = users.invite(ports, ENV, email="ada@example.com", name="Ada", role=Role.APPROVER)
    principal = users.principal_of_token(ports, ports.identity.sign_in("ada@example.com"), MINUTE)
    assert (principal.environment, principal.role, principal.actor, principal.user_id) == (
        ENV, Role.APPROVER, f"user:{ada.id}", ada.id)
    stored = ports.users.get(ENV, ada.id)
    assert stored.status is UserStatus.ACTIVE and stored.last_sign_in_at is not None


def test_a_token_of_no_user_or_of_a_deactivated_one_is_refused(ports):
    with pytest.raises(Unauthorized, match="not a user"):
        users.principal_of_token(ports, ports.identity.token_for("sub-nobody"), MINUTE)
    ada = users.invite(ports, ENV, email="ada@example.com", name=None, role=Role.ADMIN)
    token = ports.identity.sign_in("ada@example.com")
    users.deactivate(ports, ENV, ada.id, acting=MACHINE)
    with pytest.raises(Unauthorized, match="deactivated"):
        users.principal_of_token(ports, token, MINUTE)  # a token issued before still verifies: we refuse it
    with pytest.raises(Unauthorized, match="expired"):
        users.principal_of_token(ports, ports.identity.token_for(ada.idp_user_id, expires_in=-120), MINUTE)


def test_a_keys_access_is_its_role(ports):
    full, _ = create_key(ports.api_keys, ENV)
    read_only, _ = create_key(ports.api_keys, ENV, access=KeyAccess.READ_ONLY)
    assert users.principal_of_key(full) == Principal(ENV, Role.ADMIN, f"api_key:{full.id}")
    assert users.principal_of_key(read_only).role is Role.VIEWER


def test_only_active_users_may_be_named(ports):
    ada = add_user(ports.users, ENV, "ada")
    invited = add_user(ports.users, ENV, "new", status=UserStatus.INVITED)
    gone = add_user(ports.users, ENV, "gone", status=UserStatus.DEACTIVATED)
    elsewhere = add_user(ports.users, "globex", "eve")
    assert set(users.active_users(ports, ENV, [ada.id], "mentions")) == {ada.id}
    with pytest.raises(ValidationFailed) as refused:
        users.active_users(ports, ENV, [ada.id, invited.id, gone.id, 99], "mentions")
    assert [e.field for e in refused.value.errors] == ["mentions[1]", "mentions[2]", "mentions[3]"]
    assert users.active_user(ports, ENV, "idp_user_id", idp_user_id="ada") == ada
    with pytest.raises(ValidationFailed, match="'eve' is not an active user"):
        users.active_user(ports, ENV, "idp_user_id", idp_user_id=elsewhere.idp_user_id)
