"""Users by (environment, id), their subjects and emails each naming one user, as
`adapters/dynamodb/users.py` keeps them."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from chalicelib.adapters.dynamodb.users import STRANDED_LINK_LEASE
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.users import User, UserStatus, signed_in
from tests.fakes._support import newest_first_page, padded, stored_time
from tests.fakes.counters import FakeCounters


class FakeUserRepository:
    def __init__(self, counters: FakeCounters) -> None:
        self._counters = counters
        self.users: dict[tuple[str, int], User] = {}
        self.subjects: dict[str, tuple[str, int]] = {}
        self.emails: dict[tuple[str, str], int] = {}
        self.claimed_at: dict[str, datetime] = {}  # when each subject's link was written

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "user")

    def add(self, user: User) -> User:
        held = self.subjects.get(user.idp_user_id)
        if held is not None and held[0] != user.environment:
            if held in self.users or utc_now() - self.claimed_at[user.idp_user_id] <= STRANDED_LINK_LEASE:
                raise Conflict(f"{user.email} cannot be invited to this environment")
            held = None  # a link whose add never stored its user: taken over
        if held is not None:
            user = replace(user, id=held[1])  # a retry: the first's id
        holder = self.emails.get((user.environment, user.email))
        if holder is not None and holder != user.id and (user.environment, holder) in self.users:
            raise Conflict(f"{user.email} is already a user of this environment")
        if held is None:
            self.subjects[user.idp_user_id] = (user.environment, user.id)
            self.claimed_at[user.idp_user_id] = utc_now()
        self.emails[(user.environment, user.email)] = user.id
        self.users.setdefault((user.environment, user.id), replace(
            user, created_at=stored_time(user.created_at), last_sign_in_at=stored_time(user.last_sign_in_at)))
        return self.users[(user.environment, user.id)]

    def get(self, environment: str, user_id: int) -> User:
        user = self.users.get((environment, user_id))
        if user is None:
            raise NotFound(f"user {user_id} not found")
        return user

    def get_many(self, environment: str, user_ids: Iterable[int]) -> dict[int, User]:
        return {i: self.users[(environment, i)] for i in set(user_ids) if (environment, i) in self.users}

    def find_by_subject(self, subject: str) -> User | None:
        where = self.subjects.get(subject)
        return self.users.get(where) if where else None

    def find_by_email(self, environment: str, email: str) -> User | None:
        user_id = self.emails.get((environment, email))
        return self.users.get((environment, user_id)) if user_id is not None else None

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[User], str | None]:
        mine = [(padded(u.id), u) for (env, _), u in self.users.items() if env == environment]
        return newest_first_page(f"users:{environment}", mine, limit, cursor)

    def save(self, updated: User, previous: User) -> User:
        stored = self.get(previous.environment, previous.id)
        if (stored.role, stored.status) != (previous.role, previous.status):
            raise Conflict(f"user {previous.id} was changed meanwhile; try again")
        self.users[(stored.environment, stored.id)] = replace(stored, role=updated.role, name=updated.name,
                                                              status=updated.status)
        return self.users[(stored.environment, stored.id)]

    def record_sign_in(self, user: User, resolution: timedelta) -> User:
        now = utc_now()
        fresh = user.last_sign_in_at is not None and now - user.last_sign_in_at < resolution
        if fresh and user.status is not UserStatus.INVITED:
            return user
        stored = self.users.get((user.environment, user.id))
        if stored is None or stored.status is UserStatus.DEACTIVATED:
            return user
        if stored.status is not UserStatus.INVITED and stored.last_sign_in_at is not None and \
                not iso(stored.last_sign_in_at) < iso(now - resolution):
            return user  # another request recorded it first
        after = signed_in(stored, now)
        self.users[(user.environment, user.id)] = replace(after, last_sign_in_at=stored_time(now))
        return after

    def relink(self, user: User, subject: str) -> User:
        held = self.subjects.get(subject)
        if held is not None and held != (user.environment, user.id):
            raise Conflict(f"the identity provider's user {subject} is another user")
        self.subjects[subject] = (user.environment, user.id)
        self.claimed_at.setdefault(subject, utc_now())
        self.subjects.pop(user.idp_user_id, None) if user.idp_user_id != subject else None
        stored = self.get(user.environment, user.id)
        self.users[(user.environment, user.id)] = replace(stored, idp_user_id=subject)
        return self.users[(user.environment, user.id)]
