"""Every key of the single table is built here, and nowhere else.

One table, keyed on `pk` / `sk`, with five global secondary indexes keyed on `gsiNpk` / `gsiNsk`.
Every item the code writes, one line per key it carries: its own (gsi `-`), then each index
entry (gsiN), with who writes and who reads each. Notation: `{E}` is `E#<env>` (env_prefix);
`<id>` is the item's own id, `<recon>`, `<job>`, `<match>`, `<exc>`, `<record>`, `<comment>` the
ids of others and `<priority>` a rule's priority, all zero-padded to ID_WIDTH digits so that
string order is numeric order; `<chunk>` has 6 digits; `<stream>` is a data stream's key and
`<status>` a record's. "written by" names this package's adapter modules (`definitions`:
property_definitions.py, `exceptions`: reconciliation_exceptions.py, `rules`: the rule repository
in reconciliations.py).

item           | gsi  | pk                    | sk              | written by              | read by: access pattern
---------------|------|-----------------------|-----------------|-------------------------|----------------------------
API key        | -    | KEY#<sha256>          | KEY             | api_keys: add; touch,   | find_by_hash: every
               |      |                       |                 | revoke                  | request, before its
               |      |                       |                 |                         | environment is known
               | gsi1 | KEYS                  | <id>            | add                     | list: the CLI's list, and
               |      |                       |                 |                         | its revoke (by id)
               |      |                       |                 |                         |
parked event   | -    | PARKED_EVENTS         | <env>#<event id>| event_ledger: park (the | parked: the sweeper
               |      |                       |                 | bus refused it),        | publishes them again
               |      |                       |                 | release                 | (services/events.py)
held event     | -    | HELD_EVENTS#<0..7>    | <env>#<event    | event_ledger: hold      | held: the sweeper
               |      |                       | id>#<token>     | (before the change it   | sends one past its lease
               |      |                       |                 | tells of is saved: that | if its item still
               |      |                       |                 | item gets the mark in   | carries its mark (services/
               |      |                       |                 | pending_events),        | events.py), else drops
               |      |                       |                 | release_hold            | it
               |      |                       |                 |                         |
held decision  | -    | HELD_DECISIONS        | <kind>#<env>#   | event_ledger:           | decisions: the kind's
               |      |                       | <id>            | hold_decision (before   | sweep announces one past
               |      |                       |                 | the sweeper ends a run, | its lease whose end was
               |      |                       |                 | import or               | made, then releases it
               |      |                       |                 | investigation),         |
               |      |                       |                 | release_decision        |
               |      |                       |                 |                         |
announcement   | -    | {E}#EVENT#<event id>  | ANNOUNCED       | event_ledger: reserve   | announcement: a retried
               |      |                       |                 | (pending), retake (its  | job announcing the same
               |      |                       |                 | worker died), complete  | decision again writes no
               |      |                       |                 | (done)                  | second audit entry
               |      |                       |                 |                         |
id counter     | -    | {E}#COUNTER           | <entity>        | counters: next_id,      | the ADD returns the new
               |      |                       |                 | next_ids (one ADD each) | value
               |      |                       |                 |                         |
API key        | -    | GLOBAL#COUNTER        | api_key         | api_keys.next_id        | the ADD returns the new
counter        |      |                       |                 |                         | value
               |      |                       |                 |                         |
data stream    | -    | {E}#DS#<stream>       | DS              | data_streams: add;      | get, get_many: by key
               |      |                       |                 | save,                   |
               |      |                       |                 | set_records_count,      |
               |      |                       |                 | mark_deleting, remove   |
               | gsi1 | {E}#DS                | <id>            | add                     | GET /data_streams, newest
               |      |                       |                 |                         | first; the streams merged
               |      |                       |                 |                         | for GET /records?
               |      |                       |                 |                         | status=unreconciled
               | gsi2 | RECOUNTS              | <env>#<stream>  | request_recount;        | recount_requests: the
               |      |                       |                 | clear_recount_request   | sweeper
               |      |                       |                 | drops it                |
               |      |                       |                 |                         |
stream usage   | -    | {E}#DS#<stream>       | USEDBY#RECON#   | reconciliations: add,   | users_of_stream (pk, sk
               |      |                       | <recon>         | save, remove; a         | prefix): a stream's delete,
               |      |                       |                 | stream's delete         | a record's status
               |      |                       |                 |                         |
bank account   | -    | {E}#BANKACCT#<account | BANKACCT        | data_streams: add, save | the conditional put: one
guard          |      | routing key>          |                 | (a new account), remove | bank_feed stream per
               |      |                       |                 | (reclaims a stale one)  | account
               |      |                       |                 |                         |
property key   | -    | {E}#DS#<stream>       | PDKEY#          | definitions: add        | the conditional put;
guard          |      |                       | <property key>  | (reclaims a stale one), | remove_all_of_stream (pk,
               |      |                       |                 | remove; a stream's      | sk prefix)
               |      |                       |                 | delete                  |
               |      |                       |                 |                         |
property       | -    | {E}#PD#<id>           | PD              | definitions: add, save, | get
definition     |      |                       |                 | remove; a stream's      |
               |      |                       |                 | delete                  |
               | gsi1 | {E}#PD                | <stream>#<id>   | add, save               | GET /property_definitions
               |      |                       |                 |                         | (a stream's: sk prefix); a
               |      |                       |                 |                         | stream's delete
               |      |                       |                 |                         |
record         | -    | {E}#REC#<id>          | REC             | records: put_many       | get, find_many,
               |      |                       |                 | (ingestion),            | held_records; by id: GET
               |      |                       |                 | mark_deleting, remove,  | /records?file_import_id= (a
               |      |                       |                 | remove_all_of_stream;   | job's id block),
               |      |                       |                 | matches: claims;        | ?external_id= (its guards),
               |      |                       |                 | exceptions: holds       | ?reconciliation_match_id=
               |      |                       |                 |                         | (the members)
               | gsi1 | {E}#DS#<stream>#REC#  | <id>            | put_many (n: the id     | every shard and the legacy
               |      | <n> (0..15)           |                 | modulo 16; before the   | unsharded partition, merged
               |      |                       |                 | shards: {E}#DS#<stream> | by id: GET /records?
               |      |                       |                 | #REC)                   | data_stream_key=, a stream's
               |      |                       |                 |                         | open records before
               |      |                       |                 |                         | adoption, a stream's delete,
               |      |                       |                 |                         | the story trace's id ranges
               | gsi4 | {E}#ST#<status>#<n>   | <id>            | the claims: set while   | GET /records?
               |      |                       |                 | matched somewhere       | status=partially_reconciled
               |      |                       |                 |                         | or reconciled: keys, then
               |      |                       |                 |                         | BatchGetItem
               | gsi5 | {E}#DS#<stream>#OPEN# | <id>            | put_many; the claims:   | a stream's open records
               |      | <0..15> (unsharded    |                 | set until reconciled    | (every shard, and the
               |      | before the shards)    |                 |                         | unsharded partition)
               |      |                       |                 |                         | once adopted: runs, dry
               |      |                       |                 |                         | runs, the exception
               |      |                       |                 |                         | refresh, investigations;
               |      |                       |                 |                         | GET /records?
               |      |                       |                 |                         | status=unreconciled
               |      |                       |                 |                         |
external id    | -    | {E}#EXT#<external id> | DS#<stream>     | records:                | the claim's conditional
guard          |      |                       |                 | claim_external_id       | put, then get; GET
               |      |                       |                 | (owner: the job),       | /records?external_id= (pk:
               |      |                       |                 | remove,                 | every stream's)
               |      |                       |                 | remove_all_of_stream    |
               |      |                       |                 |                         |
stream writer  | -    | {E}#DS#<stream>       | WRITER          | records:                | the conditional put: one
lease          |      |                       |                 | take_writer_lease,      | job at a time writes a
               |      |                       |                 | release_writer_lease    | stream's guards in batches
               |      |                       |                 |                         |
ingestion job  | -    | {E}#JOB#<id>          | JOB             | jobs: add; move,        | get, find: GET
               |      |                       |                 | save_chunk, the id      | /file_imports/{id},
               |      |                       |                 | block, restarts,        | /bulk_requests/{id},
               |      |                       |                 | cancel, aggregates      | /records?file_import_id=
               | gsi1 | {E}#DS#<stream>#JOBS  | <id>            | add: file imports only  | list_of_stream: GET
               |      |                       |                 |                         | /data_streams/{key}/
               |      |                       |                 |                         | file_imports
               | gsi2 | ACTIVE_JOBS           | <env>#<id>      | add; move drops it once | active: the sweeper; runs
               |      |                       |                 | finished                | and manual matches skip
               |      |                       |                 |                         | jobs still writing
               |      |                       |                 |                         |
job results    | -    | {E}#JOB#<job>         | RES#<chunk>     | jobs: save_chunk, every | results (sk prefix): a bulk
               |      |                       |                 | row (bulk) or the       | request's, a file's
               |      |                       |                 | problem rows (files)    | problems; result_chunks (sk
               |      |                       |                 |                         | BETWEEN): GET
               |      |                       |                 |                         | /file_imports/{id}/results
               |      |                       |                 |                         |
job-stream     | -    | {E}#JOB#<job>         | DS#<stream>     | jobs: link_to_streams,  | its conditional put: once
link           |      |                       |                 | a bulk request's, per   | per stream
               |      |                       |                 | stream it feeds         |
               | gsi1 | {E}#DS#<stream>#JOBS  | <job>           | link_to_streams         | list_of_stream: stands for
               |      |                       |                 |                         | its job
               |      |                       |                 |                         |
idempotency    | -    | {E}#IDEM#<key>        | IDEM            | jobs:                   | the claim's conditional
key            |      |                       |                 | claim_idempotency_key   | put, then get: the job the
               |      |                       |                 | (TTL: 48 h)             | key is bound to
               |      |                       |                 |                         |
run            | -    | {E}#RUN#<id>          | RUN             | runs: add; move,        | get, get_many: a run, a
               |      |                       |                 | save_plan, save_loaded, | reconciliation's current
               |      |                       |                 | save_chunk,             | and last run
               |      |                       |                 | count_restart, discard  |
               | gsi1 | {E}#RECON#<recon>#    | <id>            | add                     | GET
               |      | RUNS                  |                 |                         | /reconciliations/{id}/runs,
               |      |                       |                 |                         | newest first
               | gsi2 | ACTIVE_RUNS           | <env>#<id>      | add; move drops it once | active: the sweeper
               |      |                       |                 | finished                |
               |      |                       |                 |                         |
match          | -    | {E}#MATCH#<id>        | MATCH           | matches: begin,         | get, find, existing_ids (a
               |      |                       |                 | commit_many (the commit | retried persist)
               |      |                       |                 | marker); confirm,       |
               |      |                       |                 | mark_unmatching,        |
               |      |                       |                 | mark_unmatched, remove  |
               | gsi1 | {E}#RECON#<recon>#    | <id>            | begin, commit_many      | GET
               |      | MATCHES#<n>           |                 |                         | /reconciliation_matches,
               |      |                       |                 |                         | newest first (begun and
               |      |                       |                 |                         | unmatching left out); a
               |      |                       |                 |                         | reconciliation's delete
               | gsi2 | PENDING_MATCHES       | <env>#<id>      | begin; commit_many      | pending: the sweeper rolls
               |      |                       |                 | drops it                | back what a dead request
               |      |                       |                 |                         | began
               |      |                       |                 |                         |
match member   | -    | {E}#MATCH#<match>     | M#<record>      | matches: put_members_of | members (sk prefix): GET
               |      |                       |                 | (before the claims),    | /reconciliation_matches/
               |      |                       |                 | delete_members          | {id}, unmatch, the sweeper;
               |      |                       |                 |                         | member_page: GET /records?
               |      |                       |                 |                         | reconciliation_match_id=
               |      |                       |                 |                         |
reconciliation | -    | {E}#RECON#<id>        | RECON           | reconciliations: add,   | get, get_many; pending_work
               |      |                       |                 | save, mark_deleting,    |
               |      |                       |                 | remove, refresh marks;  |
               |      |                       |                 | runs: the run slot,     |
               |      |                       |                 | pending work            |
               | gsi1 | {E}#RECON             | <id>            | add; mark_deleting      | GET /reconciliations,
               |      |                       |                 | drops it                | newest first
               | gsi2 | RECONCILIATIONS       | <env>#<id>      | add; mark_deleting      | due_for_exception_refresh
               |      |                       |                 | drops it                | (the sweeper, from the
               |      |                       |                 |                         | index alone)
               |      |                       |                 |                         |
stream         | -    | {E}#RECON#<recon>     | ADOPTED#        | matches: adopt (a run's | is_adopted: open records
adoption       |      |                       | <stream>        | first read of the       | from gsi5 once adopted,
               |      |                       |                 | stream),                | from gsi1 before
               |      |                       |                 | forget_adoptions (edit, |
               |      |                       |                 | delete)                 |
               |      |                       |                 |                         |
rule priority  | -    | {E}#RECON#<recon>     | PRIO#<priority> | rules: add, save (claim | the claim's conditional
guard          |      |                       |                 | the new, release the    | put, then get; a
               |      |                       |                 | old), remove            | reconciliation's delete
               |      |                       |                 |                         | (pk, sk prefix)
               |      |                       |                 |                         |
active         | -    | {E}#RECON#<recon>     | EXCACTIVE#      | exceptions: open_new,   | find_active (the refresh):
exception      |      |                       | <stream>        | save (reopen, close)    | the open or investigating
guard          |      |                       |                 |                         | exception of a stream
               |      |                       |                 |                         |
exception      | -    | {E}#RECON#<recon>     | EXCREFRESH      | exceptions:             | the conditional put: one
refresh lease  |      |                       |                 | take_refresh_lease,     | refresh of a reconciliation
               |      |                       |                 | release_refresh_lease   | at a time
               |      |                       |                 |                         |
rule           | -    | {E}#RULE#<id>         | RULE            | rules: add, save,       | get
               |      |                       |                 | remove; a               |
               |      |                       |                 | reconciliation's delete |
               | gsi1 | {E}#RECON#<recon>#    | <priority>#<id> | add, save               | list_of, by priority: GET
               |      | RULES                 |                 |                         | /reconciliations/{id}/
               |      |                       |                 |                         | rules, a run's rules, a
               |      |                       |                 |                         | reconciliation's delete
               |      |                       |                 |                         |
exception      | -    | {E}#EXC#<id>          | EXC             | exceptions: open_new    | get, find_active
               |      |                       |                 | (after its guard);      |
               |      |                       |                 | save, set_totals,       |
               |      |                       |                 | rescale,                |
               |      |                       |                 | mark_custom_description |
               | gsi1 | {E}#EXCS              | <id>            | open_new                | list_page: GET
               |      |                       |                 |                         | /reconciliation_exceptions
               |      |                       |                 |                         | (five attributes of every
               |      |                       |                 |                         | entry, then the page)
               |      |                       |                 |                         |
exception      | -    | {E}#EXC#<exc>         | R#<record>      | exceptions:             | records (sk prefix): the
record         |      |                       |                 | add_records,            | refresh, aggregates,
               |      |                       |                 | remove_records (the     | investigations;
               |      |                       |                 | refresh), rescale       | record_page: GET
               |      |                       |                 |                         | /reconciliation_exceptions/
               |      |                       |                 |                         | {id}/records
               |      |                       |                 |                         |
exception      | -    | {E}#EXC#<exc>         | C#<comment>     | exceptions: add_comment | comments (sk prefix): GET
comment        |      |                       |                 |                         | /reconciliation_exceptions/
               |      |                       |                 |                         | {id}
               |      |                       |                 |                         |
story          | -    | {E}#STORY#<id>        | STORY           | stories: add, save,     | get, find, get_many: a
               |      |                       |                 | remove                  | story, its users' names
               | gsi1 | {E}#STORY             | <id>            | add                     | GET
               |      |                       |                 |                         | /reconciliation_stories,
               |      |                       |                 |                         | newest first
               |      |                       |                 |                         |
story usage of | -    | {E}#RECON#<recon>     | USEDBY#STORY#   | stories: hold, save,    | users_of_reconciliation
reconciliation |      |                       | <story>         | release, remove         | (pk, sk prefix): a
               |      |                       |                 |                         | reconciliation's delete
               |      |                       |                 |                         |
story usage of | -    | {E}#DS#<stream>       | USEDBY#STORY#   | stories: hold, save,    | users_of_stream (pk, sk
stream         |      |                       | <story>         | release, remove         | prefix): a stream's delete
               |      |                       |                 |                         |
investigation  | -    | {E}#INV#<id>          | INV             | investigations: add;    | get
               |      |                       |                 | move, mark_accepted     |
               | gsi1 | {E}#EXC#<exc>#INVS    | <id>            | add                     | of_exception, newest first:
               |      |                       |                 |                         | GET
               |      |                       |                 |                         | /reconciliation_exceptions/
               |      |                       |                 |                         | {id}
               | gsi2 | ACTIVE_INVESTIGATIONS | <env>#<id>      | add; move drops it once | active: the sweeper
               |      |                       |                 | finished                |
               |      |                       |                 |                         |
agent          | -    | {E}#AGENT#<uuid>      | AGENT           | agents: add; save (not  | get
               |      |                       |                 | last_run_at, nor a      |
               |      |                       |                 | browser agent's state), |
               |      |                       |                 | set_last_run,           |
               |      |                       |                 | set_browser_state,      |
               |      |                       |                 | remove                  |
               | gsi1 | {E}#AGENTS            | <created>#<uuid>| add                     | GET /agents, newest first
               | gsi2 | SCHEDULED_AGENTS      | <env>#<uuid>    | add, save: while        | scheduled: the schedules
               |      |                       |                 | scheduled               | put back (local start)
               |      |                       |                 |                         |
statement day  | -    | {E}#BALANCES#<stream> | <date>#<stmt id>| balances: put_many (an  | page: GET /data_streams/
(balances)     |      |                       |                 | import completing);     | {key}/balances, newest
               |      |                       |                 | remove_stream           | first; older_than (gap)
               |      |                       |                 |                         |
latest         | -    | {E}#LATEST_BALANCE#   | LATEST_BALANCE  | balances: put_many (a   | latest_of: BatchGetItem
statement day  |      | <stream>              |                 | conditional put: only a | of a page of bank_feed
(balances)     |      |                       |                 | newer day's sk, day_sk),| streams (GET /data_
               |      |                       |                 | remove_stream           | streams, one request per
               |      |                       |                 |                         | 100 streams) or of one
               |      |                       |                 |                         |
browser agent  | -    | BROWSER_AGENT#<uuid>  | BROWSER_AGENT   | agents: add, remove     | environment_of: the CLI
directory      |      |                       |                 | (browser agents only)   | names an agent by id
               |      |                       |                 |                         |
agent input    | -    | {E}#AGENT#<uuid>      | FILE#<file>     | agents: add_file,       | files (sk prefix): the
file           |      |                       |                 | set_file_size,          | agent's input_files, a
               |      |                       |                 | remove_file; remove     | run's read_input_file
               |      |                       |                 |                         |
agent run      | -    | {E}#AGENT#<uuid>      | RUNNING         | agent_runs:             | the conditional put: one
guard          |      |                       |                 | claim_running,          | run of an agent at a time
               |      |                       |                 | take_over_running,      |
               |      |                       |                 | release_running         |
               |      |                       |                 |                         |
agent trigger  | -    | {E}#AGENT#<uuid>      | TRIGGER#<token> | agent_runs:             | the conditional put: a
claim          |      |                       |                 | claim_trigger           | schedule's firing or a
               |      |                       |                 | (expires_at: a week)    | drop starts one run
               |      |                       |                 |                         |
file-drop      | -    | {E}#FILEDROPS         | HOLDER          | agents:                 | the conditional put: one
guard          |      |                       |                 | claim_file_drops,       | active file-drop agent
               |      |                       |                 | take_over, release      | per environment
               |      |                       |                 |                         |
agent run      | -    | {E}#AGENTRUN#<id>     | AGENTRUN        | agent_runs: add, save   | get: GET /agents/{id}/
               |      |                       |                 | (conditional on status) | runs/{run_id}, the worker
               | gsi2 | AGENT_RUNS_IN_FLIGHT  | <env>#<id>      | save: a browser run     | in_flight: the local
               |      |                       |                 | while running or        | stack's resumption
               |      |                       |                 | waiting for a code      |
               | gsi1 | {E}#AGENT#<uuid>#RUNS | <id>            | add                     | list_page: GET
               |      |                       |                 |                         | /agents/{id}/runs, newest
               |      |                       |                 |                         | first; an agent's delete
               |      |                       |                 |                         |
webhook        | -    | {E}#WHE#<id>          | WHE             | webhooks: add, save     | get: the routes, the
endpoint       |      |                       |                 | (version), rotate,      | delivery worker (a
               |      |                       |                 | mark_failing, disable,  | tombstone is not found)
               |      |                       |                 | mark_succeeded, remove  |
               |      |                       |                 | (a tombstone: deleted_at|
               |      |                       |                 | set, gsi1 removed)      |
               | gsi1 | {E}#WHES              | <id>            | add (remove takes it    | list_page: GET
               |      |                       |                 | out)                    | /webhook_endpoints; of_
               |      |                       |                 |                         | environment: the fan-out
               | gsi2 | WEBHOOKS_GONE         | <env>#<id>      | remove (the tombstone); | purge_deleted: the
               |      |                       |                 | purge_deleted deletes it| sweeper clears its
               |      |                       |                 | last                    | partition, a page a sweep
               |      |                       |                 |                         |
webhook        | -    | {E}#WHE#<endpoint>    | DLV#<id>        | webhooks: add_delivery  | get_delivery; deliveries
delivery       |      |                       |                 | (after its guard),      | (sk prefix, newest first):
               |      |                       |                 | claim, record_attempt,  | GET /webhook_endpoints/
               |      |                       |                 | fail_delivery, requeue  | {id}/deliveries
               | gsi2 | WEBHOOKS_DUE#<shard>  | <wake at>#<env> | while pending or        | due: the sweeper queues the
               |      | (0..7, crc32 of the   | #<endpoint>#<id>| delivering (sparse);    | attempts whose time came,
               |      | delivery's key)       |                 | remove_delivery (its    | reading every shard
               |      |                       |                 | endpoint is gone)       |
               |      |                       |                 |                         |
webhook event  | -    | {E}#WHE#<endpoint>    | EVT#<event id>  | webhooks: add_delivery  | the conditional put: one
guard          |      |                       |                 | (conditional put)       | delivery per endpoint and
               |      |                       |                 |                         | event, however often the
               |      |                       |                 |                         | event comes
               |      |                       |                 |                         |
audit entry    | -    | {E}#AUDIT             | SEQ#<seq>       | audit: append (a        | list_page: GET
               |      |                       |                 | conditional put: the    | /audit_events, newest
               |      |                       |                 | seq must be free);      | first; entries_between
               |      |                       |                 | never changed, never    | (sk BETWEEN): verify
               |      |                       |                 | deleted                 |
               | gsi3 | {E}#AUDIT#<type>#     | <seq>           | append: entries naming  | GET /audit_events?
               |      | <resource id>         |                 | a resource id           | resource_type=&
               |      |                       |                 |                         | resource_id= (keys, then
               |      |                       |                 |                         | BatchGetItem)
               |      |                       |                 |                         |
audit chain    | -    | {E}#AUDIT             | HEAD            | audit: append advances  | append: the next seq and
head           |      |                       |                 | it (conditional: only   | prev_hash; verify: where
               |      |                       |                 | forward)                | the chain ends
               |      |                       |                 |                         |
request in     | -    | REQUESTS_IN_FLIGHT#   | <env>#<request  | audit: begin_request    | requests_in_flight: the
flight         |      | <0..7>                | id>             | (before a state-        | sweeper writes the entry
               |      |                       |                 | changing request runs), | of one whose process
               |      |                       |                 | end_request (its entry  | died (outcome unknown)
               |      |                       |                 | is written)             |

- `<entity>` of an id counter: data_stream, property_definition, record, ingestion_job, run, match,
  reconciliation, reconciliation_rule, exception, exception_assignee, exception_comment,
  investigation, story, story_link, agent_run, webhook_endpoint, webhook_delivery. A job's records and a
  run's matches take a block of ids in one ADD.
- `<key>` of an idempotency key: a bulk request's Idempotency-Key, or `drop:<object key>:<etag>`
  for a dropped file (one import per object); `expires_at` lets TTL remove it after 48 hours.
- A record's attributes whose names vary are kept twice, once under a fixed name an index can
  project: `match_<recon>` and the number set `matched_in` (the claims, see `match_attribute`),
  `exception_<recon>` and the string set `exception_holds` (the holds, see `exception_attribute`).
- `<seq>` of an audit entry is its place in the environment's chain, 1-based and dense, zero-padded
  to ID_WIDTH; its `summary` is kept as canonical JSON text (the hash covers it as written).
- A reconciliation's "refresh marks" are `exceptions_refreshed_at` (projected into gsi2; removed
  when matching changes outside a run, so the sweeper finds it due) and
  `exceptions_refresh_requests`; "the run slot" is `current_run_id` / `last_run_id`, "pending work"
  `pending_jobs` and `whole_pool_requests`.

The indexes (names GSI1..GSI5 below; infra/template.yaml defines them, bench/RESULTS.md weighs them):

index       | what it holds (pk / sk)                  | sparse                  | projection
------------|------------------------------------------|-------------------------|-------------------------------------
gsi1 (GSI1) | the API's lists, and a stream's records: | no: every item of a     | ALL: most of its readers want whole
            | KEYS; {E}#DS; {E}#PD;                    | listed kind (but bulk   | items, and a run's first read of a
            | {E}#DS#<stream>#REC;                     | requests, which link    | stream reads them all
            | {E}#DS#<stream>#JOBS; {E}#RECON;         | instead; a              |
            | {E}#RECON#<recon>#RUNS, #MATCHES,        | reconciliation leaves   |
            | #RULES; {E}#EXCS; {E}#EXC#<exc>#INVS;    | it while deleting)      |
            | {E}#STORY; {E}#AGENTS;                   |                         |
            | {E}#AGENT#<uuid>#RUNS; {E}#WHES          |                         |
gsi2 (GSI2) | the sweeper's lists, of every            | yes: work in flight     | INCLUDE environment, id,
            | environment, one partition each:         | only; every             | exceptions_refreshed_at
            | ACTIVE_JOBS (runs and manual matches     | reconciliation but      | (SWEEP_INDEX_ATTRIBUTES in
            | read it too), ACTIVE_RUNS,               | those being deleted     | reconciliations.py): the sweep of
            | ACTIVE_INVESTIGATIONS, PENDING_MATCHES / |                         | every reconciliation reads the index
            | <env>#<id>; RECOUNTS / <env>#<stream>;   |                         | alone; the other lists are short,
            | RECONCILIATIONS / <env>#<id>;            |                         | their items read by BatchGetItem
            | SCHEDULED_AGENTS / <env>#<uuid>;         |                         |
            | AGENT_RUNS_IN_FLIGHT / <env>#<id>;       |                         |
            | WEBHOOKS_DUE#<0..7> / <wake at>#<env>#...|                         |
            | WEBHOOKS_GONE / <env>#<id>               |                         |
gsi3 (GSI3) | audit entries by resource:               | yes: audit entries      | KEYS_ONLY: a page of keys, then the
            | {E}#AUDIT#<type>#<resource id> / <seq>   | naming a resource id    | entries by BatchGetItem
gsi4 (GSI4) | matched records by status:               | yes: from a record's    | KEYS_ONLY: a page of keys, then the
            | {E}#ST#<status>#<0..15> / <id>,          | first match on          | records by BatchGetItem
            | partially_reconciled or reconciled       |                         |
gsi5 (GSI5) | a stream's open records:                 | yes: until reconciled   | INCLUDE the 14 attributes its
            | {E}#DS#<stream>#OPEN#<0..15> / <id>      | (matched in every       | readers read (OPEN_RECORD_ATTRIBUTES
            |                                          | reconciliation of its   | in records.py; a test holds the
            |                                          | stream)                 | template to it)

Every index entry is a write unit on each insert, so a record carries no key it can do without:
a new record sits in gsi1 and gsi5 only (the unreconciled records of an environment are its
streams' open partitions, so it takes no gsi4 entry), the records of an ingestion job are its
block of ids (the job names the first), and the guards of one external id share a partition
(one per stream), so listing by job or by external id needs no index of its own.

The environment is the first part of every key of environment data, so isolation is
structural: no query can reach another environment's partition. API keys are the one
exception: they are looked up by their hash before the environment is known, and each
names its environment. The sweeper's lists (gsi2) span environments: each entry's sort key
starts with its environment.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import date
from typing import Any


@dataclass(frozen=True)
class Index:
    """A key of the table: its own (`name` None) or a global secondary index's, named once here
    (infra/template.yaml declares the same; a test holds the two together)."""
    name: str | None
    partition_key: str
    sort_key: str

    def key(self, partition: str, sort: str) -> dict[str, str]:
        """The attributes that list an item in this index."""
        return {self.partition_key: partition, self.sort_key: sort}

    def assignment(self, placeholder: str) -> str:
        """`gsiNpk = :<p>_pk, gsiNsk = :<p>_sk`: an update expression's SET of an entry in this index,
        whose values `assigned_values` gives."""
        return f"{self.partition_key} = {placeholder}_pk, {self.sort_key} = {placeholder}_sk"

    def assigned_values(self, entry: dict[str, str], placeholder: str) -> dict[str, str]:
        """The values of `assignment(placeholder)` for an item's `entry` (its key in this index)."""
        return {f"{placeholder}_pk": entry[self.partition_key], f"{placeholder}_sk": entry[self.sort_key]}

    @property
    def attributes(self) -> str:
        """`gsiNpk, gsiNsk`: what an update expression REMOVEs to take an item out of this index."""
        return f"{self.partition_key}, {self.sort_key}"


# The table's own key, and its global secondary indexes (in the template's order).
BASE_TABLE = Index(None, "pk", "sk")
GSI1 = Index("gsi1", "gsi1pk", "gsi1sk")
GSI2 = Index("gsi2", "gsi2pk", "gsi2sk")
GSI3 = Index("gsi3", "gsi3pk", "gsi3sk")
GSI4 = Index("gsi4", "gsi4pk", "gsi4sk")
GSI5 = Index("gsi5", "gsi5pk", "gsi5sk")
GLOBAL_SECONDARY_INDEXES = (GSI1, GSI2, GSI3, GSI4, GSI5)

ID_WIDTH = 12
GLOBAL_COUNTER_PK = "GLOBAL#COUNTER"


def _id(value: int) -> str:
    return str(value).zfill(ID_WIDTH)


def record_sort_key(record_id: int) -> str:
    """A record's sort key in every index listing records (ids in string order)."""
    return _id(record_id)


def env_prefix(environment: str) -> str:
    return f"E#{environment}"


# Counters -------------------------------------------------------------------------------

def counter(environment: str, entity: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#COUNTER", "sk": entity}


def global_counter(entity: str) -> dict[str, str]:
    return {"pk": GLOBAL_COUNTER_PK, "sk": entity}


# API keys -------------------------------------------------------------------------------

API_KEYS_INDEX_PK = "KEYS"


def api_key(key_hash: str) -> dict[str, str]:
    return {"pk": f"KEY#{key_hash}", "sk": "KEY"}


def api_key_index(key_id: int) -> dict[str, str]:
    return GSI1.key(API_KEYS_INDEX_PK, _id(key_id))


# Data streams ---------------------------------------------------------------------------

def data_stream(environment: str, key: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#DS#{key}", "sk": "DS"}


def data_streams_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#DS"


def data_stream_index(environment: str, stream_id: int) -> dict[str, str]:
    return GSI1.key(data_streams_index_pk(environment), _id(stream_id))


# Property definitions -------------------------------------------------------------------

PROPERTY_GUARD_PREFIX = "PDKEY#"


def bank_account_guard(environment: str, routing_key: str) -> dict[str, str]:
    """The guard a bank_feed stream holds on its account (domain/data_streams.account_routing_key)."""
    return {"pk": f"{env_prefix(environment)}#BANKACCT#{routing_key}", "sk": "BANKACCT"}


def property_key_guard(environment: str, stream_key: str, property_key: str) -> dict[str, str]:
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": f"{PROPERTY_GUARD_PREFIX}{property_key}"}


def property_definition(environment: str, definition_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#PD#{_id(definition_id)}", "sk": "PD"}


def property_definitions_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#PD"


def property_definitions_of_stream_prefix(stream_key: str) -> str:
    return f"{stream_key}#"


def property_definition_index(environment: str, stream_key: str, definition_id: int) -> dict[str, str]:
    return GSI1.key(property_definitions_index_pk(environment),
                    f"{property_definitions_of_stream_prefix(stream_key)}{_id(definition_id)}")


# Records --------------------------------------------------------------------------------

def record(environment: str, record_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#REC#{_id(record_id)}", "sk": "REC"}


# A stream's records are spread over this many gsi1 partitions (`#<n>`, from the record id), so
# that no partition takes more than 1/16 of a stream's ingestion (DynamoDB gives a partition 1,000
# write units a second); ids modulo 16 spread a job's block of consecutive ids evenly.
RECORDS_OF_STREAM_SHARDS = 16


def records_of_stream_pk(environment: str, stream_key: str) -> str:
    """The listing of a stream's records as written before they were sharded: its readers still
    read it (`records_of_stream_shards`), so records ingested before then stay visible."""
    return f"{env_prefix(environment)}#DS#{stream_key}#REC"


def record_of_stream_shard(environment: str, stream_key: str, record_id: int) -> str:
    """The gsi1 partition a record of the stream is listed in."""
    return _shard_by_id(records_of_stream_pk(environment, stream_key), RECORDS_OF_STREAM_SHARDS, record_id)


def records_of_stream_shards(environment: str, stream_key: str) -> list[str]:
    """Every gsi1 partition listing a stream's records: the shards, then the unsharded listing of
    records written before the shards were (a reader merges them by id)."""
    listing = records_of_stream_pk(environment, stream_key)
    return [*_shards(listing, RECORDS_OF_STREAM_SHARDS), listing]


def stream_writer_lease(environment: str, stream_key: str) -> dict[str, str]:
    """The lease one ingestion job at a time holds to write a stream's external_id guards."""
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": "WRITER"}


def records_with_status_pk(environment: str, status: str) -> str:
    """The status's list, unsharded: where records claimed before issue 30 still sit, and the
    name its cursors carry."""
    return f"{env_prefix(environment)}#ST#{status}"


# A run claims a record a write into its status's list: spread over this many partitions (by the
# record id) so that none takes more than 1/16 of a run's claims (DynamoDB's 1,000 writes a second
# a partition would cap a run at some 1,000 matched records a second).
RECORD_STATUS_SHARDS = 16


def records_with_status_partitions(environment: str, status: str) -> list[str]:
    """Every partition of the status's list: its shards, and the unsharded one, which records
    claimed before the shards keep until they next change status."""
    listing = records_with_status_pk(environment, status)
    return _shards(listing, RECORD_STATUS_SHARDS) + [listing]


# A stream's open records are spread over OPEN_RECORD_SHARDS partitions of gsi5 by record id, so
# that no index partition takes more than 1/16 of a stream's ingestion (DynamoDB's 1,000 writes a
# second a partition would otherwise cap a stream near 1,000 records a second).
OPEN_RECORD_SHARDS = 16


def open_records_of_stream_pk(environment: str, stream_key: str) -> str:
    """The unsharded partition: records written before the shards still sit in it."""
    return f"{env_prefix(environment)}#DS#{stream_key}#OPEN"


def open_record_shard(environment: str, stream_key: str, record_id: int) -> str:
    return _shard_by_id(open_records_of_stream_pk(environment, stream_key), OPEN_RECORD_SHARDS, record_id)


def open_records_of_stream_partitions(environment: str, stream_key: str) -> list[str]:
    """Every gsi5 partition a stream's open records sit in: its shards, and the unsharded one, which
    keeps the records written before the shards (until a claim moves them) visible."""
    base = open_records_of_stream_pk(environment, stream_key)
    return _shards(base, OPEN_RECORD_SHARDS) + [base]


def open_record_index(environment: str, stream_key: str, record_id: int) -> dict[str, str]:
    """gsi5, sparse: a record sits in it while some reconciliation of its stream has not matched it."""
    return GSI5.key(open_record_shard(environment, stream_key, record_id), _id(record_id))


def matched_record_index(environment: str, status: str, record_id: int) -> dict[str, str]:
    """gsi4, sparse: a record sits in it, under its status, once some reconciliation matched it."""
    return GSI4.key(_shard_by_id(records_with_status_pk(environment, status), RECORD_STATUS_SHARDS, record_id),
                    _id(record_id))


def record_indexes(environment: str, record_id: int, stream_key: str, status: str) -> dict[str, str]:
    keys = GSI1.key(record_of_stream_shard(environment, stream_key, record_id), _id(record_id))
    if status != "unreconciled":
        keys.update(matched_record_index(environment, status, record_id))
    if status != "reconciled":
        keys.update(open_record_index(environment, stream_key, record_id))
    return keys


EXTERNAL_ID_GUARD_PREFIX = "DS#"


def external_id_guards_pk(environment: str, external_id: str) -> str:
    """One partition per external id: its guards in every stream, each naming its record."""
    return f"{env_prefix(environment)}#EXT#{external_id}"


def external_id_guard(environment: str, stream_key: str, external_id: str) -> dict[str, str]:
    return {"pk": external_id_guards_pk(environment, external_id), "sk": f"{EXTERNAL_ID_GUARD_PREFIX}{stream_key}"}


# Ingestion jobs -------------------------------------------------------------------------

def ingestion_job(environment: str, job_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#JOB#{_id(job_id)}", "sk": "JOB"}


RESULTS_PREFIX = "RES#"
# A sparse index of unfinished jobs of every environment, read by the stuck-job sweeper only;
# each entry names its environment. Set while pending or processing, removed when finished.
ACTIVE_JOBS_PK = "ACTIVE_JOBS"


def jobs_of_stream_pk(environment: str, stream_key: str) -> str:
    return f"{env_prefix(environment)}#DS#{stream_key}#JOBS"


def job_of_stream_index(environment: str, stream_key: str, job_id: int) -> dict[str, str]:
    return GSI1.key(jobs_of_stream_pk(environment, stream_key), _id(job_id))


# A sparse index of streams whose record count must be read again from the mirror (after a
# record delete, or a recount that did not finish), read by the sweeper; each names its environment.
RECOUNTS_PK = "RECOUNTS"


def recount_index(environment: str, stream_key: str) -> dict[str, str]:
    return GSI2.key(RECOUNTS_PK, f"{environment}#{stream_key}")


def active_job_index(environment: str, job_id: int) -> dict[str, str]:
    return GSI2.key(ACTIVE_JOBS_PK, f"{environment}#{_id(job_id)}")


def job_results(environment: str, job_id: int, chunk: int) -> dict[str, str]:
    return {"pk": ingestion_job(environment, job_id)["pk"], "sk": f"{RESULTS_PREFIX}{str(chunk).zfill(6)}"}


LAST_RESULTS_SK = f"{RESULTS_PREFIX}999999"


def job_stream_link(environment: str, job_id: int, stream_key: str) -> dict[str, str]:
    """A bulk request feeds any number of streams: one small item per stream lists it among the
    stream's imports (a file import's own item carries that index entry)."""
    return {"pk": ingestion_job(environment, job_id)["pk"], "sk": f"DS#{stream_key}",
            **job_of_stream_index(environment, stream_key, job_id)}


def idempotency_key(environment: str, key: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#IDEM#{key}", "sk": "IDEM"}


# Runs and matches ---------------------------------------------------------------------------

def run(environment: str, run_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#RUN#{_id(run_id)}", "sk": "RUN"}


def runs_of_reconciliation_pk(environment: str, reconciliation_id: int) -> str:
    return f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}#RUNS"


def run_index(environment: str, reconciliation_id: int, run_id: int) -> dict[str, str]:
    return GSI1.key(runs_of_reconciliation_pk(environment, reconciliation_id), _id(run_id))


# Events the bus refused, kept until the sweeper sends them.
PARKED_EVENTS_PK = "PARKED_EVENTS"
# On a match, exception or comment: the marks (event id and hold token) of the events its saving writes owe.
PENDING_EVENTS = "pending_events"


def parked_event(environment: str, event_id: str) -> dict[str, str]:
    return {"pk": PARKED_EVENTS_PK, "sk": f"{environment}#{event_id}"}


# Events held while the change they tell of is saved: every environment's, in HELD_EVENTS#0 ..
# #<HELD_EVENTS_SHARDS - 1> (by a hash of the hold's mark), as each person's change writes two.
HELD_EVENTS_PK = "HELD_EVENTS"
HELD_EVENTS_SHARDS = 8


def held_event(environment: str, mark: str) -> dict[str, str]:
    return {"pk": _shard_of(HELD_EVENTS_PK, HELD_EVENTS_SHARDS, mark), "sk": f"{environment}#{mark}"}


def held_events_shards() -> list[str]:
    return _shards(HELD_EVENTS_PK, HELD_EVENTS_SHARDS)


# Ends the sweeper decides on its own, held until announced; listed by kind (an sk prefix).
HELD_DECISIONS_PK = "HELD_DECISIONS"


def held_decision(kind: str, environment: str, entity_id: int) -> dict[str, str]:
    return {"pk": HELD_DECISIONS_PK, "sk": f"{kind}#{environment}#{_id(entity_id)}"}


def announced_event(environment: str, event_id: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#EVENT#{event_id}", "sk": "ANNOUNCED"}


# A sparse index of pending and running runs of every environment, read by the sweeper only.
ACTIVE_RUNS_PK = "ACTIVE_RUNS"


def active_run_index(environment: str, run_id: int) -> dict[str, str]:
    return GSI2.key(ACTIVE_RUNS_PK, f"{environment}#{_id(run_id)}")


# A sparse index of matches a person began and has not committed, read by the sweeper only.
PENDING_MATCHES_PK = "PENDING_MATCHES"


def pending_match_index(environment: str, match_id: int) -> dict[str, str]:
    return GSI2.key(PENDING_MATCHES_PK, f"{environment}#{_id(match_id)}")


def match(environment: str, match_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#MATCH#{_id(match_id)}", "sk": "MATCH"}


MATCH_MEMBER_PREFIX = "M#"
MATCH_MONEY_SK = "MONEY"  # the money of a match's records, kept by a trace (beside its members)


def match_member(environment: str, match_id: int, record_id: int) -> dict[str, str]:
    """One item per record of a match, in the match's partition: GET /records?reconciliation_match_id=."""
    return {"pk": match(environment, match_id)["pk"], "sk": f"{MATCH_MEMBER_PREFIX}{_id(record_id)}"}


def match_money(environment: str, match_id: int) -> dict[str, str]:
    return {"pk": match(environment, match_id)["pk"], "sk": MATCH_MONEY_SK}


def matches_of_reconciliation_pk(environment: str, reconciliation_id: int) -> str:
    return f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}#MATCHES"


def match_sort_key(match_id: int) -> str:
    """A match's sort key in its reconciliation's match index (ids in string order)."""
    return _id(match_id)


# A run writes its matches into its reconciliation's list: spread over this many partitions (by the
# match id), as the status lists are (RECORD_STATUS_SHARDS).
MATCHES_SHARDS = 16


def match_index(environment: str, reconciliation_id: int, match_id: int) -> dict[str, str]:
    listing = matches_of_reconciliation_pk(environment, reconciliation_id)
    return GSI1.key(_shard_by_id(listing, MATCHES_SHARDS, match_id), match_sort_key(match_id))


def matches_of_reconciliation_partitions(environment: str, reconciliation_id: int) -> list[str]:
    """Every partition of the reconciliation's match list: its shards, and the unsharded one, which
    matches written before the shards keep (they are never moved)."""
    listing = matches_of_reconciliation_pk(environment, reconciliation_id)
    return _shards(listing, MATCHES_SHARDS) + [listing]


def stream_adoption(environment: str, reconciliation_id: int, stream_key: str) -> dict[str, str]:
    """Marks that a reconciliation's runs read the stream from the open-records index: records
    fully reconciled before the stream joined it were opened again there."""
    return {"pk": f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}", "sk": f"ADOPTED#{stream_key}"}


MATCH_ATTRIBUTE_PREFIX = "match_"


def match_attribute(reconciliation_id: int) -> str:
    """The record attribute naming its match in one reconciliation (top level, so that a
    conditional write can test it without a map that may not exist yet)."""
    return f"{MATCH_ATTRIBUTE_PREFIX}{reconciliation_id}"


def match_ids_of(item: dict[str, Any]) -> dict[int, int]:
    """The match holding a record item in each reconciliation, from its `match_<recon>` attributes."""
    return {int(name[len(MATCH_ATTRIBUTE_PREFIX):]): value for name, value in item.items()
            if name.startswith(MATCH_ATTRIBUTE_PREFIX) and name[len(MATCH_ATTRIBUTE_PREFIX):].isdigit()}


# Reconciliations and their rules --------------------------------------------------------
#
# A usage item sits in its stream's partition, so a stream's delete finds its users in one query;
# a priority guard sits in its reconciliation's partition, so the reconciliation's delete finds them too.

STREAM_USAGE_PREFIX = "USEDBY#RECON#"
RULE_PRIORITY_GUARD_PREFIX = "PRIO#"


def reconciliation(environment: str, reconciliation_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}", "sk": "RECON"}


def reconciliations_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#RECON"


def reconciliation_index(environment: str, reconciliation_id: int) -> dict[str, str]:
    return GSI1.key(reconciliations_index_pk(environment), _id(reconciliation_id))


def stream_usage(environment: str, stream_key: str, reconciliation_id: int) -> dict[str, str]:
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": f"{STREAM_USAGE_PREFIX}{_id(reconciliation_id)}"}


STREAM_TALLY_PREFIX = "TALLY#"


def stream_tally(environment: str, reconciliation_id: int, stream_key: str) -> dict[str, str]:
    """In the reconciliation's partition, so a summary reads all its streams' tallies in one query."""
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": f"{STREAM_TALLY_PREFIX}{stream_key}"}


def reconciliation_rule(environment: str, rule_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#RULE#{_id(rule_id)}", "sk": "RULE"}


def rules_of_reconciliation_pk(environment: str, reconciliation_id: int) -> str:
    return f"{reconciliation(environment, reconciliation_id)['pk']}#RULES"


def reconciliation_rule_index(environment: str, reconciliation_id: int, priority: int, rule_id: int) -> dict[str, str]:
    return GSI1.key(rules_of_reconciliation_pk(environment, reconciliation_id), f"{_id(priority)}#{_id(rule_id)}")


def rule_priority_guard(environment: str, reconciliation_id: int, priority: int) -> dict[str, str]:
    return {"pk": reconciliation(environment, reconciliation_id)["pk"],
            "sk": f"{RULE_PRIORITY_GUARD_PREFIX}{_id(priority)}"}


# Exceptions -----------------------------------------------------------------------------------

def reconciliation_exception(environment: str, exception_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#EXC#{_id(exception_id)}", "sk": "EXC"}


def exceptions_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#EXCS"


def exception_index(environment: str, exception_id: int) -> dict[str, str]:
    return GSI1.key(exceptions_index_pk(environment), _id(exception_id))


def active_exception_guard(environment: str, reconciliation_id: int, stream_key: str) -> dict[str, str]:
    """Names the one open or investigating exception of a reconciliation and stream."""
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": f"EXCACTIVE#{stream_key}"}


def exception_refresh_lease(environment: str, reconciliation_id: int) -> dict[str, str]:
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": "EXCREFRESH"}


EXCEPTION_RECORD_PREFIX = "R#"
COMMENT_PREFIX = "C#"


def exception_record(environment: str, exception_id: int, record_id: int) -> dict[str, str]:
    return {"pk": reconciliation_exception(environment, exception_id)["pk"],
            "sk": f"{EXCEPTION_RECORD_PREFIX}{_id(record_id)}"}


def exception_comment(environment: str, exception_id: int, comment_id: int) -> dict[str, str]:
    return {"pk": reconciliation_exception(environment, exception_id)["pk"],
            "sk": f"{COMMENT_PREFIX}{_id(comment_id)}"}


def exception_attribute(reconciliation_id: int) -> str:
    """The record attribute naming the exception that holds it in one reconciliation."""
    return f"exception_{reconciliation_id}"


# The same holds again, in one attribute of a fixed name that an index can project (a string set
# of "<reconciliation id>:<exception id>"): `exception_<id>` serves the conditional writes.
EXCEPTION_HOLDS = "exception_holds"


def exception_hold(reconciliation_id: int, exception_id: int) -> str:
    return f"{reconciliation_id}:{exception_id}"


def holder_in(holds: set[str] | None, reconciliation_id: int) -> int | None:
    """The exception that holds a record in the reconciliation, read from its `exception_holds`."""
    return holders(holds).get(reconciliation_id)


def holders(holds: set[str] | None) -> dict[int, int]:
    """The exception holding a record in each reconciliation, read from its `exception_holds`."""
    pairs = (hold.split(":", 1) for hold in holds or ())
    return {int(reconciliation_id): int(exception_id) for reconciliation_id, exception_id in pairs}


# Every reconciliation of every environment, for the sweeper's exception refresh.
ALL_RECONCILIATIONS_PK = "RECONCILIATIONS"


def all_reconciliations_index(environment: str, reconciliation_id: int) -> dict[str, str]:
    return GSI2.key(ALL_RECONCILIATIONS_PK, f"{environment}#{_id(reconciliation_id)}")


def investigation(environment: str, investigation_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#INV#{_id(investigation_id)}", "sk": "INV"}


def investigations_of_exception_pk(environment: str, exception_id: int) -> str:
    return f"{env_prefix(environment)}#EXC#{_id(exception_id)}#INVS"


def investigation_index(environment: str, exception_id: int, investigation_id: int) -> dict[str, str]:
    return GSI1.key(investigations_of_exception_pk(environment, exception_id), _id(investigation_id))


# Pending and running investigations of every environment, for the sweeper.
ACTIVE_INVESTIGATIONS_PK = "ACTIVE_INVESTIGATIONS"


def active_investigation_index(environment: str, investigation_id: int) -> dict[str, str]:
    return GSI2.key(ACTIVE_INVESTIGATIONS_PK, f"{environment}#{_id(investigation_id)}")


# Reconciliation stories -----------------------------------------------------------------
#
# A story's usage items sit in the partitions of what they hold (a reconciliation's, a shared
# stream's), so a delete of either finds the stories that use it in one query.

STORY_USAGE_PREFIX = "USEDBY#STORY#"


def story(environment: str, story_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#STORY#{_id(story_id)}", "sk": "STORY"}


def stories_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#STORY"


def story_index(environment: str, story_id: int) -> dict[str, str]:
    return GSI1.key(stories_index_pk(environment), _id(story_id))


def story_usage_of_reconciliation(environment: str, reconciliation_id: int, story_id: int) -> dict[str, str]:
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": f"{STORY_USAGE_PREFIX}{_id(story_id)}"}


def story_usage_of_stream(environment: str, stream_key: str, story_id: int) -> dict[str, str]:
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": f"{STORY_USAGE_PREFIX}{_id(story_id)}"}


# A `deleting` mark whose delete found no story using the item: it is going, and no refused
# delete may take the mark back (a bare mark is `true`).
DELETE_CONFIRMED = "confirmed"


# Agents ------------------------------------------------------------------------------------
#
# Ids are UUIDs, so an environment's agents are listed by creation time (then id). The one active
# agent that handles file drops holds a guard item of its environment.

def _agent_pk(environment: str, agent_id: str) -> str:
    """The partition of an agent: the agent, its input files, its run guard and trigger claims."""
    return f"{env_prefix(environment)}#AGENT#{agent_id}"


def agent(environment: str, agent_id: str) -> dict[str, str]:
    return {"pk": _agent_pk(environment, agent_id), "sk": "AGENT"}


def agents_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#AGENTS"


def agent_index(environment: str, created_at: str, agent_id: str) -> dict[str, str]:
    return GSI1.key(agents_index_pk(environment), f"{created_at}#{agent_id}")


SCHEDULED_AGENTS_PK = "SCHEDULED_AGENTS"


def stream_balances_pk(environment: str, stream_key: str) -> str:
    return f"{env_prefix(environment)}#BALANCES#{stream_key}"


def stream_balance_sk(day: date, statement_id: str) -> str:
    """Newest first by date; statements of one day apart by their id."""
    return f"{day.isoformat()}#{statement_id}"


def stream_latest_balance(environment: str, stream_key: str) -> dict[str, str]:
    """A stream's newest statement day once more, at a key a BatchGetItem can name (latest_balance
    of a page of streams in one request, rather than a query per stream)."""
    return {"pk": f"{env_prefix(environment)}#LATEST_BALANCE#{stream_key}", "sk": "LATEST_BALANCE"}


AGENT_RUNS_IN_FLIGHT_PK = "AGENT_RUNS_IN_FLIGHT"


def agent_run_in_flight_index(environment: str, run_id: int) -> dict[str, str]:
    """A run running or waiting for a verification code, of every environment: what the local
    stack starts again at its start (its workflows died with the previous process)."""
    return GSI2.key(AGENT_RUNS_IN_FLIGHT_PK, f"{environment}#{_id(run_id)}")


def browser_agent_directory(agent_id: str) -> dict[str, str]:
    """A browser agent's environment by its id: the operator's command line names an agent by id."""
    return {"pk": f"BROWSER_AGENT#{agent_id}", "sk": "BROWSER_AGENT"}


def scheduled_agent_index(environment: str, agent_id: str) -> dict[str, str]:
    """An agent with a schedule, of every environment: what a Scheduler's schedules are put back from."""
    return GSI2.key(SCHEDULED_AGENTS_PK, f"{environment}#{agent_id}")


def file_drop_guard(environment: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#FILEDROPS", "sk": "HOLDER"}


def agent_file(environment: str, agent_id: str, file_id: str) -> dict[str, str]:
    """An input file of an agent, in the agent's partition (read with it, listed by sk prefix)."""
    return {"pk": _agent_pk(environment, agent_id), "sk": f"{AGENT_FILE_PREFIX}{file_id}"}


AGENT_FILE_PREFIX = "FILE#"


def agent_running(environment: str, agent_id: str) -> dict[str, str]:
    """The guard a running run of the agent holds: one run of an agent at a time."""
    return {"pk": _agent_pk(environment, agent_id), "sk": "RUNNING"}


# Agent runs have integer ids from the environment's counter; an agent's are listed newest first
# through gsi1.

def agent_run(environment: str, run_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#AGENTRUN#{_id(run_id)}", "sk": "AGENTRUN"}


def agent_runs_index_pk(environment: str, agent_id: str) -> str:
    return f"{_agent_pk(environment, agent_id)}#RUNS"


def agent_run_index(environment: str, agent_id: str, run_id: int) -> dict[str, str]:
    return GSI1.key(agent_runs_index_pk(environment, agent_id), _id(run_id))


def agent_trigger(environment: str, agent_id: str, token: str) -> dict[str, str]:
    """One event that started a run of the agent (a schedule's firing, a drop), claimed once."""
    return {"pk": _agent_pk(environment, agent_id), "sk": f"TRIGGER#{token}"}


# Audit trail -----------------------------------------------------------------------------------
# One partition per environment: the entries by seq (SEQ# sorts before HEAD, so an sk prefix reads
# the entries alone) and the chain's head; entries that name a resource are listed by it in gsi3.

AUDIT_ENTRY_PREFIX = "SEQ#"


def audit_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#AUDIT"


def audit_entry_sk(seq: int) -> str:
    return f"{AUDIT_ENTRY_PREFIX}{_id(seq)}"


def audit_entry(environment: str, seq: int) -> dict[str, str]:
    return {"pk": audit_pk(environment), "sk": audit_entry_sk(seq)}


def audit_head(environment: str) -> dict[str, str]:
    return {"pk": audit_pk(environment), "sk": "HEAD"}


def audit_resource_pk(environment: str, resource_type: str, resource_id: str) -> str:
    return f"{audit_pk(environment)}#{resource_type}#{resource_id}"


def audit_resource_index(environment: str, resource_type: str, resource_id: str, seq: int) -> dict[str, str]:
    return GSI3.key(audit_resource_pk(environment, resource_type, resource_id), _id(seq))


# State-changing requests begun and not yet in the trail, for the sweeper: every environment's, in
# REQUESTS_IN_FLIGHT#0 .. #<REQUESTS_IN_FLIGHT_SHARDS - 1> (by a hash of the request id), so no one
# partition takes every request's two writes.
REQUESTS_IN_FLIGHT_PK = "REQUESTS_IN_FLIGHT"
REQUESTS_IN_FLIGHT_SHARDS = 8


def request_in_flight(environment: str, request_id: str) -> dict[str, str]:
    return {"pk": _shard_of(REQUESTS_IN_FLIGHT_PK, REQUESTS_IN_FLIGHT_SHARDS, request_id),
            "sk": f"{environment}#{request_id}"}


def requests_in_flight_shards() -> list[str]:
    return _shards(REQUESTS_IN_FLIGHT_PK, REQUESTS_IN_FLIGHT_SHARDS)


# Webhooks ------------------------------------------------------------------------------------
#
# An endpoint's partition holds the endpoint, its deliveries (newest first by id) and one guard per
# event it was given, so a redelivered event finds its delivery and deleting the endpoint deletes
# one partition. Deliveries waiting for an attempt sit in gsi2 (sparse) under the time the sweeper
# should look at them: the due time itself for waits longer than SQS's 15-minute delay, a few
# minutes after it for those SQS carries (the net under a lost message).

#
# The due list is sharded (WEBHOOKS_DUE#0 .. #<WEBHOOKS_DUE_SHARDS - 1>, by a hash of the delivery's
# key) so that the deliveries of every environment do not all write one index partition; the
# sweeper reads every shard. A deleted endpoint's item stays as a tombstone (`deleted_at`, out of
# gsi1) in the WEBHOOKS_GONE list until the sweeper has cleared its partition, a page at a time.

WEBHOOK_DELIVERY_PREFIX = "DLV#"
WEBHOOK_EVENT_GUARD_PREFIX = "EVT#"
WEBHOOKS_DUE_PK = "WEBHOOKS_DUE"
WEBHOOKS_DUE_SHARDS = 8
WEBHOOKS_GONE_PK = "WEBHOOKS_GONE"


def webhook_endpoint(environment: str, endpoint_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#WHE#{_id(endpoint_id)}", "sk": "WHE"}


def webhook_endpoints_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#WHES"


def webhook_endpoint_index(environment: str, endpoint_id: int) -> dict[str, str]:
    return GSI1.key(webhook_endpoints_index_pk(environment), _id(endpoint_id))


def webhook_delivery(environment: str, endpoint_id: int, delivery_id: int) -> dict[str, str]:
    return {"pk": webhook_endpoint(environment, endpoint_id)["pk"],
            "sk": f"{WEBHOOK_DELIVERY_PREFIX}{_id(delivery_id)}"}


def webhook_event_guard(environment: str, endpoint_id: int, event_id: str) -> dict[str, str]:
    return {"pk": webhook_endpoint(environment, endpoint_id)["pk"], "sk": f"{WEBHOOK_EVENT_GUARD_PREFIX}{event_id}"}


def webhook_due_index(environment: str, endpoint_id: int, delivery_id: int, wake_at: str) -> dict[str, str]:
    """gsi2, sparse: `wake_at` is ISO 8601 UTC, so string order is time order within a shard."""
    return GSI2.key(webhook_due_shard(environment, endpoint_id, delivery_id),
                    f"{wake_at}#{environment}#{_id(endpoint_id)}#{_id(delivery_id)}")


def webhook_due_shard(environment: str, endpoint_id: int, delivery_id: int) -> str:
    """The due list's shard of a delivery: always the same one for it."""
    return _shard_of(WEBHOOKS_DUE_PK, WEBHOOKS_DUE_SHARDS, f"{environment}#{endpoint_id}#{delivery_id}")


def webhook_due_shards() -> list[str]:
    return _shards(WEBHOOKS_DUE_PK, WEBHOOKS_DUE_SHARDS)


# Sharded lists ----------------------------------------------------------------------------------

def _shard_by_id(partition: str, shards: int, item_id: int) -> str:
    """`<partition>#<id mod shards>`: ids come in runs of consecutive numbers (a job's id block, a
    run's matches), so each shard takes 1/shards of them, where a hash would leave one a little over."""
    return f"{partition}#{item_id % shards}"


def _shard_of(partition: str, shards: int, value: str) -> str:
    """`<partition>#<n>` for `value`: always the same n (crc32, stable across runs and processes)."""
    return f"{partition}#{zlib.crc32(value.encode()) % shards}"


def _shards(partition: str, shards: int) -> list[str]:
    return [f"{partition}#{shard}" for shard in range(shards)]


def webhook_endpoint_gone_index(environment: str, endpoint_id: int) -> dict[str, str]:
    """gsi2: a deleted endpoint whose partition the sweeper still has to clear."""
    return GSI2.key(WEBHOOKS_GONE_PK, f"{environment}#{_id(endpoint_id)}")
