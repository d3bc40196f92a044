"""The story the end-to-end tests follow: orders -> charges -> payouts -> bank, three links, each
run, with a charge whose payout never came (it passes link 1 and stops in link 2)."""
from __future__ import annotations

import uuid
from datetime import date

from tests.support.web_app import ingest, post, start_run, wait_run

RECORD_DATE = date.today().isoformat()  # recent: nothing ages into an exception


def item(stream: str, n: int, amount: int, **metadata) -> dict:
    return {"data_stream_key": stream, "external_id": f"{stream}-{n}", "amount": amount, "date": RECORD_DATE,
            "direction": "credit", "currency": "USD", "metadata": metadata}


def order_to_cash(stack, key_prefix: str = "") -> dict:
    """The story made, its links run: its id, suffix, reconciliations, streams and record ids."""
    suffix = uuid.uuid4().hex[:6]
    keys = {name: f"{key_prefix}{name}-{suffix}" for name in ("orders", "charges", "payouts", "bank")}
    streams = {name: post(stack, "/data_streams", {"key": key, "name": f"{name.title()} {suffix}"})
               for name, key in keys.items()}
    recons = [post(stack, "/reconciliations", {"name": f"{a.title()} to {b} {suffix}", "run_type": "batch",
                                                "side_a_stream_keys": [keys[a]], "side_b_stream_keys": [keys[b]]})
              for a, b in (("orders", "charges"), ("charges", "payouts"), ("payouts", "bank"))]
    rules = [{"conditions": [{"field": "metadata.order", "operator": "equals"}]},
             {"cardinality": "many_to_one", "group_by": {"side_a": ["metadata.payout"]},
              "conditions": [{"field": "metadata.payout", "operator": "equals"},
                             {"field": "amount", "operator": "equals"}]},
             {"conditions": [{"field": "amount", "operator": "equals"}]}]
    for recon, rule in zip(recons, rules, strict=True):
        post(stack, f"/reconciliations/{recon['id']}/rules", {"name": "By reference", "priority": 1, **rule})
    orders = ingest(stack, [item(keys["orders"], n, 1000 * n, order=f"o{n}") for n in (1, 2, 3, 4)])
    # Charge 4 is paid out in p2, which never arrives: it passes the first link and stops in the second.
    charges = ingest(stack, [item(keys["charges"], n, 1000 * n, order=f"o{n}", payout="p1" if n < 4 else "p2")
                             for n in (1, 2, 3, 4)])
    [payout] = ingest(stack, [item(keys["payouts"], 1, 6000, payout="p1")])
    [deposit] = ingest(stack, [item(keys["bank"], 1, 6000)])
    made = post(stack, "/reconciliation_stories", {"name": f"Order to cash {suffix}", "links": [
        {"reconciliation_id": recons[0]["id"], "position": 1},
        {"reconciliation_id": recons[1]["id"], "position": 2, "shared_data_stream_id": streams["charges"]["id"]},
        {"reconciliation_id": recons[2]["id"], "position": 3, "shared_data_stream_id": streams["payouts"]["id"]}]})
    for recon in recons:
        run = wait_run(stack, recon["id"], start_run(stack, recon["id"])["id"])
        assert run["status"] == "completed", run
    return {"id": made["id"], "suffix": suffix, "recons": recons, "streams": streams, "orders": orders,
            "charges": charges, "payout": payout, "deposit": deposit}
