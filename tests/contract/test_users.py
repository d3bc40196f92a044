"""Users: one per email of an environment and one per subject anywhere (written in an order a retry finishes),
listed newest first, changed only from what was read, and sign-ins recorded at most once per
resolution."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.users import Role, User, UserStatus
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS
from tests.fakes.users import FakeUserRepository


def user(user_id: int, environment: str = ENV, **kw) -> User:
    return User(**{"id": user_id, "environment": environment, "idp_user_id": f"sub-{environment}-{user_id}",
                   "email": f"p{user_id}@{environment}.example", "name": f"Person {user_id}", "role": Role.PREPARER,
                   "status": UserStatus.INVITED, "created_at": T0, **kw})


def strand_link(users, subject: str, environment: str, user_id: int) -> None:
    """What an add that died after its first write leaves: the subject's link, claimed now, no user."""
    if isinstance(users, FakeUserRepository):
        users.subjects[subject], users.claimed_at[subject] = (environment, user_id), utc_now()
    else:
        users._table.put({**keys.user_subject(subject), "entity": "user_subject", "environment": environment,
                          "user_id": user_id, "claimed_at": iso(utc_now())})


class TestUserRepository:
    def test_add_then_get_find_and_get_many(self, users):
        stored = user(1, created_at=T0_MS)
        assert users.add(user(1)) == stored
        users.add(user(2, name=None))
        assert users.get(ENV, 1) == stored
        assert users.find_by_subject("sub-acme-1") == stored
        assert users.find_by_email(ENV, "p1@acme.example") == stored
        assert users.find_by_subject("sub-nobody") is None and users.find_by_email(ENV, "x@y.example") is None
        assert users.get(ENV, 2).name is None
        assert set(users.get_many(ENV, [1, 2, 3])) == {1, 2}
        assert users.get_many(OTHER_ENV, [1, 2]) == {}
        with pytest.raises(NotFound, match="user 3 not found"):
            users.get(ENV, 3)
        with pytest.raises(NotFound):
            users.get(OTHER_ENV, 1)

    def test_next_id_is_the_environments_own(self, users):
        assert [users.next_id(ENV), users.next_id(ENV), users.next_id(OTHER_ENV)] == [1, 2, 1]

    def test_an_email_is_one_user_of_an_environment_and_nothing_is_left_of_a_refused_add(self, users):
        users.add(user(1))
        with pytest.raises(Conflict, match="already a user of this environment"):
            users.add(user(2, email="p1@acme.example"))
        assert users.find_by_subject("sub-acme-2") is None
        with pytest.raises(NotFound):
            users.get(ENV, 2)
        users.add(user(2, environment=OTHER_ENV, email="p1@acme.example"))  # another environment may have it

    def test_the_same_subject_again_in_the_environment_ends_at_the_first_user(self, users):
        """A retried invitation (or two at once) of the same person: one user, the first's."""
        first = users.add(user(1))
        again = users.add(user(2, idp_user_id="sub-acme-1", email="p1@acme.example", role=Role.ADMIN))
        assert again == first and again.role is Role.PREPARER
        with pytest.raises(NotFound):
            users.get(ENV, 2)
        assert [u.id for u in users.list_page(ENV, 10, None)[0]] == [1]

    def test_relink_moves_the_user_to_a_new_subject_and_refuses_another_users(self, users):
        """The local stack's admin after a restart: the same person, a new id at the provider."""
        users.add(user(1))
        users.add(user(2))
        moved = users.relink(users.get(ENV, 1), "sub-new")
        assert moved.idp_user_id == "sub-new" and users.find_by_subject("sub-new") == moved
        assert users.find_by_subject("sub-acme-1") is None
        assert users.relink(users.get(ENV, 1), "sub-new") == moved  # again: nothing changes
        with pytest.raises(Conflict, match="is another user"):
            users.relink(users.get(ENV, 2), "sub-new")
        assert users.find_by_subject("sub-acme-2").id == 2

    def test_a_subject_is_a_user_of_one_environment(self, users):
        users.add(user(1))
        with pytest.raises(Conflict, match="cannot be invited to this environment"):
            users.add(user(1, environment=OTHER_ENV, idp_user_id="sub-acme-1"))
        assert users.find_by_email(OTHER_ENV, "p1@globex.example") is None
        assert users.find_by_subject("sub-acme-1").environment == ENV

    def test_a_link_whose_user_was_never_stored_is_taken_over_once_its_lease_is_over(self, users, clock):
        """An add that died after writing the subject's link (or was refused after adopting it) would
        otherwise keep the person out of every other environment for good."""
        strand_link(users, "sub-stranded", OTHER_ENV, 7)
        with pytest.raises(Conflict, match="cannot be invited to this environment"):  # its add may be going on
            users.add(user(1, idp_user_id="sub-stranded"))
        clock.advance(minutes=6)
        taken = users.add(user(1, idp_user_id="sub-stranded"))
        assert (taken.environment, taken.id) == (ENV, 1) and users.find_by_subject("sub-stranded") == taken
        with pytest.raises(Conflict, match="cannot be invited"):  # a stored user's link is never taken
            users.add(user(3, environment=OTHER_ENV, idp_user_id="sub-stranded"))
        assert users.find_by_subject("sub-stranded") == taken

    def test_list_is_newest_first_in_pages_of_the_environment(self, users):
        for n in (1, 2, 3):
            users.add(user(n))
        users.add(user(9, environment=OTHER_ENV))
        first, cursor = users.list_page(ENV, 2, None)
        assert [u.id for u in first] == [3, 2] and cursor
        rest, end = users.list_page(ENV, 2, cursor)
        assert [u.id for u in rest] == [1] and end is None
        with pytest.raises(BadRequest):
            users.list_page(OTHER_ENV, 2, cursor)

    def test_save_writes_role_name_and_status_from_what_was_read(self, users):
        users.add(user(1))
        read = users.get(ENV, 1)
        saved = users.save(replace(read, role=Role.ADMIN, name=None, status=UserStatus.DEACTIVATED), read)
        assert (saved.role, saved.name, saved.status) == (Role.ADMIN, None, UserStatus.DEACTIVATED)
        assert users.get(ENV, 1) == saved
        with pytest.raises(Conflict, match="changed meanwhile"):
            users.save(replace(read, role=Role.VIEWER), read)
        assert users.get(ENV, 1).role is Role.ADMIN

    def test_a_first_sign_in_activates_and_later_ones_are_written_once_per_resolution(self, users, clock):
        users.add(user(1))
        first = users.record_sign_in(users.get(ENV, 1), timedelta(minutes=5))
        stored = users.get(ENV, 1)
        assert first.status is stored.status is UserStatus.ACTIVE
        assert stored.last_sign_in_at == clock.now.replace(microsecond=123000)
        clock.advance(minutes=1)
        assert users.record_sign_in(stored, timedelta(minutes=5)) == stored
        assert users.get(ENV, 1).last_sign_in_at == stored.last_sign_in_at
        clock.advance(minutes=5)
        users.record_sign_in(stored, timedelta(minutes=5))
        assert users.get(ENV, 1).last_sign_in_at > stored.last_sign_in_at

    def test_a_deactivated_user_signs_in_no_more(self, users, clock):
        users.add(user(1, status=UserStatus.DEACTIVATED))
        users.record_sign_in(users.get(ENV, 1), timedelta(minutes=5))
        stored = users.get(ENV, 1)
        assert stored.status is UserStatus.DEACTIVATED and stored.last_sign_in_at is None
