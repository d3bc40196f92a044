"""Users in DynamoDB (see keys.py, "Users"): the user by (environment, id), listed through gsi1;
the provider's subject (read by every person's request, before its environment is known) and the
email, each an item of its own, written before the user in an order a retry finishes."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.clock import iso, optional_iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.users import Role, User, UserStatus, signed_in

STRANDED_LINK_LEASE = timedelta(minutes=5)  # far longer than an invitation's request lives


class UserRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def next_id(self, environment: str) -> int:
        return self._table.add_to_counter(keys.counter(environment, "user"), 1)

    def add(self, user: User) -> User:
        """Store a new user and return it as stored. Without a transaction (the local stack's DynamoDB
        has none), in an order a retry finishes: the subject's link first (it names the user's id: a
        retry, or a concurrent invitation of the same person, adopts that id and ends at the same
        user, whose id then differs from `user.id`), then the email's guard, then the user. Conflict
        when the subject is a user of another environment, or the email another user's of this one;
        a refused add leaves nothing. A link whose user was never stored (its add died, or was
        refused after adopting it) is taken over once older than STRANDED_LINK_LEASE."""
        link = keys.user_subject(user.idp_user_id)
        claimed = {**link, "entity": "user_subject", "environment": user.environment, "user_id": user.id,
                   "claimed_at": iso(utc_now())}
        try:
            self._table.put_new(claimed)
        except ConditionFailed:
            held = self._table.get(link)
            if held is None:  # released meanwhile by a refused add: try again
                return self.add(user)
            if held["environment"] == user.environment:
                return self._finish(replace(user, id=int(held["user_id"])), claimed_link=False)
            if not self._stranded(held):
                raise Conflict(f"{user.email} cannot be invited to this environment") from None
            try:
                self._table.put(claimed, condition="#env = :env AND user_id = :id",
                                names={"#env": "environment"},
                                values={":env": held["environment"], ":id": held["user_id"]})
            except ConditionFailed:  # another add took it over first
                return self.add(user)
        return self._finish(user, claimed_link=True)

    def _stranded(self, link: dict[str, Any]) -> bool:
        """A link whose user does not exist, claimed long enough ago that its add is not still going
        (a link written before claimed_at was is old)."""
        if self._table.get(keys.user(link["environment"], int(link["user_id"]))) is not None:
            return False
        claimed_at = parse_optional_iso(link.get("claimed_at"))
        return claimed_at is None or utc_now() - claimed_at > STRANDED_LINK_LEASE

    def _finish(self, user: User, claimed_link: bool) -> User:
        guard = keys.user_email_guard(user.environment, user.email)
        try:
            self._table.put({**guard, "entity": "user_email", "user_id": user.id},
                            condition="attribute_not_exists(pk) OR user_id = :id", values={":id": user.id})
        except ConditionFailed:
            holder = self._table.get(guard)
            if holder is not None and self._table.get(keys.user(user.environment, int(holder["user_id"]))):
                if claimed_link:  # leave nothing of the refused add
                    self._table.delete(keys.user_subject(user.idp_user_id), condition="user_id = :id",
                                       values={":id": user.id})
                raise Conflict(f"{user.email} is already a user of this environment") from None
            # The guard of an invitation that never finished (the provider gave this email another id since).
            self._table.put({**guard, "entity": "user_email", "user_id": user.id},
                            condition="attribute_not_exists(pk) OR user_id = :held",
                            values={":held": holder["user_id"] if holder else user.id})
        try:
            self._table.put_new(self._item(user))
        except ConditionFailed:
            pass  # a retry, or the same invitation at the same time: the user is stored
        return self.get(user.environment, user.id)

    def get(self, environment: str, user_id: int) -> User:
        item = self._table.get(keys.user(environment, user_id))
        if item is None:
            raise NotFound(f"user {user_id} not found")
        return self._user(item)

    def get_many(self, environment: str, user_ids: Iterable[int]) -> dict[int, User]:
        wanted = sorted(set(user_ids))
        items = self._table.get_many(keys.user(environment, user_id) for user_id in wanted)
        return {user.id: user for user in map(self._user, items)}

    def find_by_subject(self, subject: str) -> User | None:
        link = self._table.get(keys.user_subject(subject))
        if link is None:
            return None
        item = self._table.get(keys.user(link["environment"], int(link["user_id"])))
        return self._user(item) if item else None

    def find_by_email(self, environment: str, email: str) -> User | None:
        guard = self._table.get(keys.user_email_guard(environment, email))
        if guard is None:
            return None
        item = self._table.get(keys.user(environment, int(guard["user_id"])))
        return self._user(item) if item else None

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[User], str | None]:
        """Newest first."""
        page = self._table.query_page(keys.GSI1, keys.users_index_pk(environment), limit=limit, cursor=cursor)
        return [self._user(i) for i in page.items], page.cursor

    def save(self, updated: User, previous: User) -> User:
        """Write a change of role, name or status made from `previous`: Conflict when another
        change came first."""
        try:
            self._table.update(
                keys.user(previous.environment, previous.id), "SET #role = :role, #name = :name, #status = :status",
                condition="attribute_exists(pk) AND #role = :seen_role AND #status = :seen_status",
                names={"#role": "role", "#name": "name", "#status": "status"},
                values={":role": updated.role.value, ":name": updated.name, ":status": updated.status.value,
                        ":seen_role": previous.role.value, ":seen_status": previous.status.value},
                keep_nulls=True)
        except ConditionFailed:
            self.get(previous.environment, previous.id)  # NotFound when it is gone
            raise Conflict(f"user {previous.id} was changed meanwhile; try again") from None
        return self.get(updated.environment, updated.id)

    def record_sign_in(self, user: User, resolution: timedelta) -> User:
        """A request of the user: the first makes an invited user active; last_sign_in_at is written
        at most once per `resolution`, so signing in costs no write per request."""
        now = utc_now()
        fresh = user.last_sign_in_at is not None and now - user.last_sign_in_at < resolution
        if fresh and user.status is not UserStatus.INVITED:
            return user
        after = signed_in(user, now)
        try:
            self._table.update(
                keys.user(user.environment, user.id), "SET last_sign_in_at = :now, #status = :status",
                condition="attribute_exists(pk) AND #status <> :deactivated AND (#status = :invited OR "
                          "attribute_not_exists(last_sign_in_at) OR last_sign_in_at < :cutoff)",
                names={"#status": "status"},
                values={":now": iso(now), ":status": after.status.value, ":cutoff": iso(now - resolution),
                        ":invited": UserStatus.INVITED.value, ":deactivated": UserStatus.DEACTIVATED.value})
        except ConditionFailed:
            return user  # another request recorded it first (or the user was deactivated meanwhile)
        return after

    def relink(self, user: User, subject: str) -> User:
        """In an order a retry finishes: the new subject's link, then the user, then the old link."""
        if subject == user.idp_user_id:
            return user
        try:
            self._table.put({**keys.user_subject(subject), "entity": "user_subject", "environment": user.environment,
                             "user_id": user.id},
                            condition="attribute_not_exists(pk) OR (#env = :env AND user_id = :id)",
                            names={"#env": "environment"}, values={":env": user.environment, ":id": user.id})
        except ConditionFailed:
            raise Conflict(f"the identity provider's user {subject} is another user") from None
        try:
            self._table.update(keys.user(user.environment, user.id), "SET idp_user_id = :new",
                               condition="attribute_exists(pk) AND idp_user_id IN (:old, :new)",
                               values={":old": user.idp_user_id, ":new": subject})
        except ConditionFailed:
            raise Conflict(f"user {user.id} was changed meanwhile; try again") from None
        try:
            self._table.delete(keys.user_subject(user.idp_user_id), condition="#env = :env AND user_id = :id",
                               names={"#env": "environment"}, values={":env": user.environment, ":id": user.id})
        except ConditionFailed:
            pass  # gone already (a retry)
        return self.get(user.environment, user.id)

    def _item(self, user: User) -> dict[str, Any]:
        return {**keys.user(user.environment, user.id), **keys.user_index(user.environment, user.id), "entity": "user",
                "id": user.id, "environment": user.environment, "idp_user_id": user.idp_user_id,
                "email": user.email, "name": user.name, "role": user.role.value, "status": user.status.value,
                "created_at": iso(user.created_at), "last_sign_in_at": optional_iso(user.last_sign_in_at)}

    @staticmethod
    def _user(item: dict[str, Any]) -> User:
        return User(id=int(item["id"]), environment=item["environment"], idp_user_id=item["idp_user_id"],
                    email=item["email"], name=item.get("name"), role=Role(item["role"]),
                    status=UserStatus(item["status"]), created_at=parse_iso(item["created_at"]),
                    last_sign_in_at=parse_optional_iso(item.get("last_sign_in_at")))
