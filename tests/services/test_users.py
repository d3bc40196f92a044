"""Users' use cases on the fakes: invitations through the provider, role and status changes (the
provider disables and enables sign-in), who sends a request, and who a write may name."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.api_keys import KeyAccess
from chalicelib.domain.errors import Conflict, Unauthorized, ValidationFailed
from chalicelib.domain.users import Principal, Role, UserStatus
from chalicelib.services import users
from chalicelib.services.api_keys import create_key, revoke_key
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


def test_an_invitation_of_another_environments_user_is_refused_before_the_provider_sends_anything(ports):
    users.invite(ports, ENV, email="ada@example.com", name=None, role=Role.ADMIN)
    with pytest.raises(Conflict) as refused:
        users.invite(ports, "globex", email="ada@example.com", name=None, role=Role.ADMIN)
    assert refused.value.message == "ada@example.com cannot be invited to this environment"
    assert ports.identity.invitations == ["ada@example.com"]  # not re-sent: their temporary password stands
    ports.identity.disable(ports.identity.users["ada@example.com"])
    with pytest.raises(Conflict, match="cannot be invited to this environment"):  # not "held disabled"
        users.invite(ports, "globex", email="ada@example.com", name=None, role=Role.ADMIN)


def test_a_retried_invitation_answers_the_same_user_and_sends_nothing(ports):
    ada = users.invite(ports, ENV, email="ada@example.com", name="Ada", role=Role.PREPARER)
    assert users.invite(ports, ENV, email="ADA@example.com", name="Ada", role=Role.PREPARER) == ada
    assert ports.identity.invitations == ["ada@example.com"]
    users.deactivate(ports, ENV, ada.id, acting=MACHINE)
    with pytest.raises(Conflict, match=f"already user {ada.id}"):  # deactivated: reactivate them instead
        users.invite(ports, ENV, email="ada@example.com", name="Ada", role=Role.PREPARER)


class _AnotherAdminInvitesMeanwhile:
    """The users' store, where another admin's invitation of the same person runs to its end just
    after this request looked the email up (and found nothing)."""

    def __init__(self, ports, role: Role) -> None:
        self._ports, self._role, self._inner = ports, role, ports.users

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def find_by_email(self, environment: str, email: str):
        found = self._inner.find_by_email(environment, email)
        users.invite(self._ports, environment, email=email, name=None, role=self._role)
        return found


def test_two_admins_inviting_the_same_person_at_once_one_is_told_it_came_first(ports):
    racing = replace(ports, users=_AnotherAdminInvitesMeanwhile(ports, Role.ADMIN))
    with pytest.raises(Conflict, match="already user 1 of this environment, as admin"):
        users.invite(racing, ENV, email="ada@example.com", name=None, role=Role.VIEWER)
    assert ports.users.get(ENV, 1).role is Role.ADMIN and ports.users.get_many(ENV, [2]) == {}
    same = replace(ports, users=_AnotherAdminInvitesMeanwhile(ports, Role.PREPARER))
    bo = users.invite(same, ENV, email="bo@example.com", name=None, role=Role.PREPARER)  # the same ask: 201 both
    assert (bo.role, ports.users.find_by_email(ENV, "bo@example.com")) == (Role.PREPARER, bo)


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


def test_a_reactivation_is_saved_before_the_provider_enables_them_and_a_retry_does_it(ports, monkeypatch):
    ada = users.invite(ports, ENV, email="ada@example.com", name="Ada", role=Role.PREPARER)
    users.deactivate(ports, ENV, ada.id, acting=MACHINE)
    enable = ports.identity.enable
    monkeypatch.setattr(ports.identity, "enable", lambda sub: (_ for _ in ()).throw(ConnectionError("down")))
    with pytest.raises(ConnectionError):
        users.update(ports, ENV, ada.id, acting=MACHINE, status=UserStatus.ACTIVE)
    assert ports.users.get(ENV, ada.id).status is UserStatus.INVITED and ada.idp_user_id in ports.identity.disabled
    monkeypatch.setattr(ports.identity, "enable", enable)
    users.update(ports, ENV, ada.id, acting=MACHINE, status=UserStatus.ACTIVE)  # the retry
    assert ada.idp_user_id not in ports.identity.disabled


def test_the_last_active_admin_is_neither_demoted_nor_deactivated(ports):
    root = add_user(ports.users, ENV, "root", Role.ADMIN)
    for change in ({"status": UserStatus.DEACTIVATED}, {"role": Role.APPROVER}):
        with pytest.raises(Conflict, match=f"user {root.id} is the environment's last active admin"):
            users.update(ports, ENV, root.id, acting=MACHINE, **change)
    assert ports.users.get(ENV, root.id) == root and root.idp_user_id not in ports.identity.disabled
    add_user(ports.users, ENV, "pending", Role.ADMIN, status=UserStatus.INVITED)  # no way in until they sign in
    with pytest.raises(Conflict, match="last active admin"):
        users.deactivate(ports, ENV, root.id, acting=MACHINE)
    grace = add_user(ports.users, ENV, "grace", Role.ADMIN)
    assert users.update(ports, ENV, root.id, acting=MACHINE, role=Role.VIEWER).role is Role.VIEWER
    with pytest.raises(Conflict, match=f"user {grace.id} is the environment's last active admin"):
        users.deactivate(ports, ENV, grace.id, acting=MACHINE)


class _AdminDemotedMeanwhile:
    """The users' store, where another request demotes `other` just after this one's save."""

    def __init__(self, inner, other) -> None:
        self._inner, self._other = inner, other

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def save(self, updated, previous):
        saved = self._inner.save(updated, previous)
        if self._other is not None:
            other, self._other = self._other, None
            self._inner.save(replace(other, role=Role.VIEWER), other)
        return saved


def test_two_admins_demoted_at_once_the_later_to_look_undoes_its_change(ports):
    ada = add_user(ports.users, ENV, "ada", Role.ADMIN)
    bo = add_user(ports.users, ENV, "bo", Role.ADMIN)
    racing = replace(ports, users=_AdminDemotedMeanwhile(ports.users, bo))
    with pytest.raises(Conflict, match="last active admin"):
        users.update(racing, ENV, ada.id, acting=MACHINE, role=Role.VIEWER)
    assert ports.users.get(ENV, ada.id) == ada and ports.users.get(ENV, bo.id).role is Role.VIEWER


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


def test_only_users_not_deactivated_may_be_named(ports):
    ada = add_user(ports.users, ENV, "ada")
    invited = add_user(ports.users, ENV, "new", status=UserStatus.INVITED)
    gone = add_user(ports.users, ENV, "gone", status=UserStatus.DEACTIVATED)
    elsewhere = add_user(ports.users, "globex", "eve")
    assert set(users.active_users(ports, ENV, [ada.id, invited.id], "mentions")) == {ada.id, invited.id}
    with pytest.raises(ValidationFailed) as refused:
        users.active_users(ports, ENV, [ada.id, invited.id, gone.id, 99], "mentions")
    assert [e.field for e in refused.value.errors] == ["mentions[2]", "mentions[3]"]
    assert users.active_user(ports, ENV, "idp_user_id", idp_user_id="ada") == ada
    with pytest.raises(ValidationFailed, match="'eve' is not an active user"):
        users.active_user(ports, ENV, "idp_user_id", idp_user_id=elsewhere.idp_user_id)


# API keys ----------------------------------------------------------------------------------

def test_a_key_is_not_revoked_by_its_own_request_nor_the_last_way_in(ports):
    full, _ = create_key(ports.api_keys, ENV)
    read_only, _ = create_key(ports.api_keys, ENV, access=KeyAccess.READ_ONLY)
    sent_with_full = users.principal_of_key(full)
    with pytest.raises(Conflict, match="the key this request is sent with"):
        revoke_key(ports, ENV, full.id, acting=sent_with_full)
    root = add_user(ports.users, ENV, "root", Role.ADMIN, status=UserStatus.INVITED)
    root_signed_in = Principal(ENV, Role.ADMIN, f"user:{root.id}", user=root)
    with pytest.raises(Conflict, match=f"API key {full.id} is the environment's last full key"):
        revoke_key(ports, ENV, full.id, acting=root_signed_in)  # an invited admin is no way in yet
    assert revoke_key(ports, ENV, read_only.id, acting=sent_with_full).revoked_at is not None
    spare, _ = create_key(ports.api_keys, ENV)
    assert revoke_key(ports, ENV, full.id, acting=users.principal_of_key(spare)).revoked_at is not None
    with pytest.raises(Conflict, match="last full key"):
        revoke_key(ports, ENV, spare.id, acting=root_signed_in)
    ports.users.record_sign_in(root, MINUTE)  # now an active admin: the key may go
    assert revoke_key(ports, ENV, spare.id, acting=root_signed_in).revoked_at is not None
    assert revoke_key(ports, ENV, spare.id, acting=root_signed_in).revoked_at is not None  # again: unchanged
