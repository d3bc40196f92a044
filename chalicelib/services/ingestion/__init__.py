"""Ingestion: records come in as jobs, a bulk request or a file import, and a job's life reads as
a straight line of phases, one module each:

- bulk.py: a bulk request (POST /records/bulk) stored and queued; its SQS worker runs its chunks;
- chunk.py: one chunk's engine: validate, claim external_ids under writer leases, write records;
- lifecycle.py: the life of every job: start, conclude (completed, or ended early), settle;
- results.py: a job's per-item results, a page at a time;
- statements.py: a bank statement parsed into records routed by account, its balances kept.

Nothing is imported here, so that a module of the package loads only what it needs.
"""
