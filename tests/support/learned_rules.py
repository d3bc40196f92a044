"""A labelled set for rule learning (issue 37, point 1): invoices on side A and the bank's payments
on side B under a hidden rule, with decoys that the amount and date alone would take.

The hidden rule: side B's amount is side A's less a fixed fee (FEE minor units), booked 1 or 2
days later, and the bank's description carries the invoice number that is side A's external_id
(with the payer's name and a bank reference around it). The decoys: for every third invoice, a
payment of another invoice of the same amount band (its amount within the fee, its date within
the lag), so a rule of amount and date alone pairs the wrong records.

Rows are plain mappings (the API's record fields), so the same set is ingested over HTTP by the
integration tests and turned into frames by the unit tests and the bench.
"""
from __future__ import annotations

import random
from datetime import date, timedelta
from typing import Any

FEE = 30
MAX_LAG = 2
PAYERS = ("Acme Corp", "Globex", "Initech", "Umbrella", "Hooli", "Stark Ind", "Wayne Ent", "Wonka")


def invoice_number(n: int) -> str:
    return f"INV-{10_000 + n:05d}"


def labelled_pairs(count: int, seed: int = 37, start: date = date(2026, 9, 1),
                   decoy_every: int = 3) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """`count` (invoice, payment) pairs under the hidden rule, and decoys: pairs (None, payment)
    hold a payment of an invoice that is not in the set, looking like invoice n's (same day band,
    amount within the fee). Side A: stream `invoices`; side B: stream `bank`."""
    rng = random.Random(seed)
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for n in range(count):
        payer = rng.choice(PAYERS)
        amount = rng.randrange(10_000, 500_000)
        day = start + timedelta(days=rng.randrange(0, 60))
        lag = rng.randint(1, MAX_LAG)
        invoice = {"data_stream_key": "invoices", "external_id": invoice_number(n), "amount": amount,
                   "date": day.isoformat(), "direction": "credit", "currency": "USD",
                   "description": f"Invoice {invoice_number(n)} {payer}"}
        payment = {"data_stream_key": "bank", "external_id": f"BNK-{seed}-{n}", "amount": amount - FEE,
                   "date": (day + timedelta(days=lag)).isoformat(), "direction": "credit", "currency": "USD",
                   "description": f"ACH CREDIT {payer.upper()} {invoice_number(n)} REF {rng.randrange(10**5, 10**6)}"}
        pairs.append((invoice, payment))
        if decoy_every and n % decoy_every == 0:
            other = 50_000 + n
            decoy = {"data_stream_key": "bank", "external_id": f"BNK-{seed}-d{n}",
                     "amount": amount - rng.randint(0, FEE), "date": (day + timedelta(days=rng.randint(0, 1))).isoformat(),
                     "direction": "credit", "currency": "USD",
                     "description": f"ACH CREDIT {rng.choice(PAYERS).upper()} {invoice_number(other)} "
                                    f"REF {rng.randrange(10**5, 10**6)}"}
            pairs.append((None, decoy))  # type: ignore[arg-type]
    return pairs
