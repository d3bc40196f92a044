"""The audit trail on the local stack (dynalite over HTTP): concurrent calls append one entry each to
one unforked chain, and the chain verifies intact."""
from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor


def test_concurrent_changes_over_http_each_record_one_entry_in_an_unforked_chain(stack):
    prefix = f"aud{uuid.uuid4().hex[:8]}"
    keys = [f"{prefix}-{n}" for n in range(16)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(lambda key: stack.request("POST", "/data_streams", {"key": key, "name": key})
                                 .status_code, keys))

    assert statuses == [201] * len(keys)
    for key in keys:
        [entry] = stack.request("GET", "/audit_events", params={"resource_type": "data_stream",
                                                                "resource_id": key}).json()["data"]
        assert entry["action"] == "data_stream.created" and entry["actor"].startswith("api_key:")
    report = stack.request("GET", "/audit_events/verify").json()
    assert (report["intact"], report["complete"], report["first_break"]) == (True, True, None)
    assert report["checked"] == report["head_seq"] >= len(keys)
