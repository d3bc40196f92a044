"""The audit chain, pure: hashing, summaries kept small and secret-free, and the walk that finds
the first break of an edited, shortened or reordered chain."""
import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.audit import (
    GENESIS_HASH,
    MAX_ITEMS,
    MAX_STRING,
    MAX_SUMMARY_BYTES,
    REDACTED,
    AuditEntry,
    AuditQuery,
    BreakReason,
    ChainWalk,
    agent_actor,
    api_key_actor,
    bounded_summary,
    canonical_json,
    new_entry,
    system_actor,
    verify,
)

T0 = datetime(2026, 11, 24, 9, 30, 0, 123456, tzinfo=UTC)


def chain(length: int, environment: str = "acme") -> list[AuditEntry]:
    entries: list[AuditEntry] = []
    for seq in range(1, length + 1):
        entries.append(new_entry(environment, seq, T0 + timedelta(seconds=seq),
                                 entries[-1].hash if entries else GENESIS_HASH,
                                 actor=api_key_actor(seq % 3 + 1), action="reconciliation_exception.updated",
                                 resource_type="reconciliation_exception", resource_id=seq * 10,
                                 summary={"before": {"status": "open"}, "after": {"status": "resolved"}, "n": seq}))
    return entries


def test_an_entry_hashes_the_previous_hash_followed_by_the_sorted_compact_json_of_every_other_field():
    [first] = chain(1)
    canonical = json.dumps({
        "action": "reconciliation_exception.updated", "actor": "api_key:2", "at": "2026-11-24T09:30:01.123Z",
        "environment": "acme", "prev_hash": GENESIS_HASH, "resource_id": "10",
        "resource_type": "reconciliation_exception", "seq": 1,
        "summary": {"after": {"status": "resolved"}, "before": {"status": "open"}, "n": 1}},
        sort_keys=True, separators=(",", ":"))
    assert first.canonical() == canonical
    assert first.hash == hashlib.sha256((GENESIS_HASH + canonical).encode()).hexdigest()
    assert first.prev_hash == "0" * 64 and first.at == T0.replace(microsecond=123000) + timedelta(seconds=1)


def test_each_entry_carries_the_hash_of_the_one_before():
    entries = chain(4)
    assert [e.prev_hash for e in entries[1:]] == [e.hash for e in entries[:-1]]
    assert [e.seq for e in entries] == [1, 2, 3, 4]


def test_an_intact_chain_verifies_with_the_count_checked():
    report = verify(chain(5), head_seq=5)
    assert (report.intact, report.checked, report.first_break, report.last_seq) == (True, 5, None, 5)


def test_an_empty_chain_is_intact():
    assert (verify([]).intact, verify([]).checked) == (True, 0)


def test_an_edited_summary_breaks_the_chain_at_that_entry_as_a_hash_mismatch():
    entries = chain(5)
    entries[2] = replace(entries[2], summary={"before": {"status": "open"}, "after": {"status": "dismissed"}, "n": 3})
    report = verify(entries)
    assert not report.intact
    assert (report.first_break.seq, report.first_break.reason, report.checked) == (3, BreakReason.HASH_MISMATCH, 2)


def test_an_edit_whose_hash_was_recomputed_breaks_the_link_of_the_next_entry():
    entries = chain(5)
    forged = replace(entries[2], actor="api_key:99")
    entries[2] = replace(forged, hash=forged.computed_hash())
    report = verify(entries)
    assert (report.first_break.seq, report.first_break.reason) == (4, BreakReason.PREV_HASH_MISMATCH)


def test_a_removed_entry_is_reported_missing_at_its_seq():
    entries = chain(5)
    del entries[1]
    report = verify(entries)
    assert (report.first_break.seq, report.first_break.reason, report.first_break.found_seq) == (
        2, BreakReason.MISSING_ENTRY, 3)


def test_removing_the_last_entries_is_found_against_the_head():
    report = verify(chain(5)[:3], head_seq=5)
    assert (report.first_break.seq, report.first_break.reason, report.checked) == (4, BreakReason.MISSING_ENTRY, 3)


def test_a_tail_rewritten_with_recomputed_hashes_is_found_against_the_heads_hash():
    entries = chain(5)
    forged = entries[:3]
    for original in entries[3:]:
        forged.append(new_entry("acme", original.seq, original.at, forged[-1].hash, actor="api_key:999",
                                action=original.action, resource_type=original.resource_type,
                                resource_id=original.resource_id, summary=original.summary))

    assert verify(forged, head_seq=5).intact  # the links alone cannot tell
    report = verify(forged, head_seq=5, head_hash=entries[-1].hash)

    assert (report.first_break.seq, report.first_break.reason, report.checked) == (5, BreakReason.HEAD_MISMATCH, 4)


def test_a_chain_without_a_head_breaks_at_its_newest_entry():
    walk = ChainWalk()
    walk.feed(chain(3))
    walk.missing_head(3)
    assert (walk.first_break.seq, walk.first_break.reason, walk.first_break.found_seq, walk.checked) == (
        3, BreakReason.HEAD_MISSING, 3, 3)
    assert walk.first_break.message.startswith("the chain's head is missing while entries exist")


def test_a_missing_head_does_not_hide_an_earlier_break():
    entries = chain(4)
    entries[1] = replace(entries[1], action="x.y")
    walk = ChainWalk()
    walk.feed(entries)
    walk.missing_head(4)
    assert (walk.first_break.seq, walk.first_break.reason) == (2, BreakReason.HASH_MISMATCH)


def test_reordered_entries_break_the_chain_where_the_order_changes():
    entries = chain(5)
    entries[1], entries[3] = entries[3], entries[1]
    report = verify(entries)
    assert (report.first_break.seq, report.first_break.found_seq) == (2, 4)


def test_renumbered_entries_after_a_removal_break_the_link():
    entries = chain(5)
    renumbered = entries[:1] + [replace(e, seq=e.seq - 1) for e in entries[2:]]
    report = verify(renumbered)
    assert (report.first_break.seq, report.first_break.reason) == (2, BreakReason.PREV_HASH_MISMATCH)


def test_a_walk_fed_page_by_page_continues_from_where_it_stopped():
    entries = chain(7)
    walk = ChainWalk()
    assert walk.feed(entries[:3]) and walk.feed(entries[3:])
    resumed = ChainWalk(start_seq=4, prev_hash=entries[2].hash)
    resumed.feed(entries[3:])
    assert (walk.checked, resumed.checked, resumed.intact) == (7, 4, True)


def test_a_walk_stops_at_the_first_break_and_takes_no_more():
    entries = chain(6)
    entries[1] = replace(entries[1], action="x.y")
    walk = ChainWalk()
    assert walk.feed(entries[:3]) is False
    assert walk.feed(entries[3:]) is False
    assert (walk.first_break.seq, walk.checked) == (2, 1)


FIELDS = ["environment", "seq", "at", "actor", "action", "resource_type", "resource_id", "summary", "prev_hash",
          "hash"]


def mutated(entry: AuditEntry, field: str, draw) -> AuditEntry:
    current = getattr(entry, field)
    if field == "seq":
        value = draw(st.integers(min_value=-5, max_value=50).filter(lambda v: v != current))
    elif field == "at":
        value = current + timedelta(milliseconds=draw(st.integers(min_value=1, max_value=10**9)))
    elif field == "summary":
        value = {**current, draw(st.text(min_size=1, max_size=5)): draw(st.integers())}
        if value == current:
            value = {**current, "n": current.get("n", 0) + 1}
    elif field == "resource_id":
        value = draw(st.one_of(st.none(), st.text(max_size=8)).filter(lambda v: v != current))
    else:
        value = draw(st.text(max_size=70).filter(lambda v: v != current))
    return replace(entry, **{field: value})


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(min_value=1, max_value=8))
def test_any_single_field_change_of_any_entry_is_found_at_that_entry(data, length):
    entries = chain(length)
    index = data.draw(st.integers(min_value=0, max_value=length - 1))
    field = data.draw(st.sampled_from(FIELDS))
    entries[index] = mutated(entries[index], field, data.draw)
    report = verify(entries, head_seq=length)
    assert not report.intact
    assert report.first_break.seq == index + 1, (field, report.first_break)
    assert report.checked == index


def test_summaries_are_cut_to_size_and_depth():
    summary = bounded_summary({"note": "x" * 1000, "ids": list(range(100)),
                               "deep": {"a": {"b": {"c": {"d": 1}}}}, "when": T0})
    assert len(summary["note"]) == MAX_STRING
    assert summary["ids"][:MAX_ITEMS] == list(range(MAX_ITEMS)) and summary["ids"][-1] == "80 more"
    assert summary["deep"] == {"a": {"b": "..."}}
    assert summary["when"] == "2026-11-24T09:30:00.123Z"
    huge = bounded_summary({f"k{i}": "y" * MAX_STRING for i in range(MAX_ITEMS)})
    assert huge["truncated"] is True and len(canonical_json(huge)) <= MAX_SUMMARY_BYTES


def test_the_ids_an_entry_is_found_by_survive_any_cut():
    """A request's or an event's id finds its entry again (the sweeper's check that it was written)."""
    many = {f"k{i}": "y" * MAX_STRING for i in range(2 * MAX_ITEMS)}
    cut = bounded_summary({**many, "request_id": "req-1", "event_id": "evt_1"})
    assert cut["truncated"] is True and (cut["request_id"], cut["event_id"]) == ("req-1", "evt_1")
    small = bounded_summary({**{f"k{i}": i for i in range(2 * MAX_ITEMS)}, "request_id": "req-2"})
    assert small["request_id"] == "req-2"  # past the first MAX_ITEMS keys, yet kept


def test_secrets_never_land_in_a_summary():
    summary = bounded_summary({"secret": "whsec_abc", "signing_secret": "s", "api_key": "k-1", "token": "t",
                               "after": {"url": "https://x.test", "webhook_secret": "whsec_new"},
                               "note": "whsec_hidden", "header": "Bearer abc", "password": None})
    text = canonical_json(summary)
    assert "whsec_" not in text and "k-1" not in text and "abc" not in text
    assert summary["secret"] == REDACTED and summary["after"] == {"url": "https://x.test", "webhook_secret": REDACTED}
    assert summary["password"] is None  # nothing to hide


def test_non_finite_numbers_and_odd_values_become_text_so_the_canonical_json_is_always_valid():
    summary = bounded_summary({"nan": float("nan"), "inf": float("inf"), "set": {3, 1}, "obj": object})
    assert summary["nan"] == "nan" and summary["inf"] == "inf" and summary["set"] == [1, 3]
    assert canonical_json(summary)


def test_actors_name_an_api_key_an_agent_or_the_system_with_its_job():
    assert api_key_actor(7) == "api_key:7"
    assert agent_actor("5f0c") == "agent:5f0c"
    assert system_actor("reconciliation_run", 12) == "system:reconciliation_run:12"
    assert system_actor("sweeper") == "system:sweeper"


def test_a_query_admits_entries_by_resource_actor_and_time():
    entry = chain(2)[1]
    assert AuditQuery(resource_type="reconciliation_exception", resource_id="20").admits(entry)
    assert not AuditQuery(resource_type="reconciliation_exception", resource_id="10").admits(entry)
    assert AuditQuery(actor=entry.actor, at_from=entry.at, at_to=entry.at).admits(entry)
    assert not AuditQuery(at_from=entry.at + timedelta(milliseconds=1)).admits(entry)


def test_many_long_changes_are_cut_shorter_to_fit_the_summary_and_secrets_inside_values_are_redacted():
    from chalicelib.domain.audit import bounded_summary, field_changes

    def changed(count: int) -> dict:
        before = {f"field_{n}": "a" * 500 for n in range(count)} | {"settings": {"login": {"password": "hunter2"}}}
        after = {f"field_{n}": "b" * 500 for n in range(count)} | {"settings": {"login": {"password": "hunter3"}}}
        return field_changes(before, after)

    some, many = changed(8), changed(16)

    assert some["after"]["field_0"] == "b" * 24 + "… (500 characters)"
    assert many["after"]["field_0"] == "… (500 characters)"
    assert "hunter" not in str([some, many])
    assert changed(0)["after"]["settings"] == '{"login":{"password":"[redacted]"}}'
    for changes in (some, many):  # the summary keeps them whole, never cut to its keys
        assert bounded_summary({"fields": sorted(changes["after"]), **changes})["after"] == changes["after"]
