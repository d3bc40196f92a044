"""Ingestion: records come in as jobs, a file import or a bulk request, and a job's life reads as
a straight line of phases, one module each:

- drops.py: where an S3 object goes: an upload starts its import, a drop makes its own import;
- files.py: a file import created, then its state machine's tasks: prepare, write chunks, finish;
- bulk.py: a bulk request (POST /records/bulk) stored and queued, then its SQS worker's chunks;
- chunk.py: one chunk's engine: validate, claim external_ids under writer leases, write records;
- lifecycle.py: the life of every job: start, cancel, conclude (completed or ended early), settle;
- sweeper.py: what no longer moves: restarted from its checkpoint, or failed; resumption's restart;
- results.py: a job's per-item results, a page at a time;
- statements.py: a bank statement parsed into records routed by account, its balances kept.

A file dropped in S3: drops.on_object_created -> files.prepare -> files.write_chunks (chunk.py,
a chunk at a time) -> files.finish -> lifecycle.conclude. A bulk request: bulk.submit_bulk ->
bulk.process_job (chunk.py) -> lifecycle.conclude.

Imports go one way, down: drops.py and sweeper.py start files.py's state machine; files.py and
bulk.py drive chunk.py and lifecycle.py; lifecycle.py reads chunk.py and results.py. Nothing is
imported here, so that loading one module loads only what it needs (drops.py alone reaches
agent_runs.py, for a file dropped for an agent).
"""
