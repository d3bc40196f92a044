// The local stack's DynamoDB: dynalite (npm) with its command line as it is, one fix, two changes of
// speed and one operation it lacks (TransactWriteItems: dynamodb_transactions.js).
//
// The fix.
// dynalite 4.0.0 reads a Query's or a Scan's items through a stream over a level iterator, and its
// stream's destroy closes the iterator by calling `iterator.return()`, which abstract-level's
// iterators do not have (they have `close()`). So no iterator is ever closed: each one pins the
// LevelDB version it was opened on, whose obsolete files compaction can then never delete. A
// million-record import grew the store to 61 GB (552 live files of 2 MB among 42,000) and dynalite
// to 6 GB of memory, its writes 15 times slower by the end (bench/RESULTS.md, issue 30). With
// `return()` the stream's destroy, which runs when a read ends or stops early, closes it.
'use strict';

const { AbstractIterator, AbstractKeyIterator, AbstractValueIterator } = require('abstract-level');

for (const Iterator of [AbstractIterator, AbstractKeyIterator, AbstractValueIterator]) {
  if (typeof Iterator.prototype.return !== 'function') {
    Iterator.prototype.return = function () {
      return this.close();
    };
  }
}

// Speed 1: LevelDB's write buffer. At its default 4 MB, every 4 MB written becomes a level-0 file
// that compaction merges down again; a run's claims (a read of the old item, index entries moved)
// then cost dynalite 1.3-1.45 ms of CPU each on a store of 300,000 records, 0.97 with 64 MB
// (bench/RESULTS.md, issue 30). A larger block cache alone changed nothing (the files are in the
// page cache). The memory it takes: the buffer, twice while one is written out.
// RECON_DYNALITE_WRITE_BUFFER_MB sets another size (a test of compaction sets LevelDB's own).
const WRITE_BUFFER_BYTES = Number(process.env.RECON_DYNALITE_WRITE_BUFFER_MB || 64) * 1024 * 1024;
const level = require('level');
const { Level } = level;
level.Level = class extends Level {
  constructor(location, options) {
    super(location, { writeBufferSize: WRITE_BUFFER_BYTES, ...options });
  }
};

// Speed 2: table descriptions kept decoded. dynalite reads and JSON-decodes the table's description
// for every item it writes (a BatchWriteItem of 25 reads it 26 times): a tenth of its busy time in
// a profile of bulk ingestion; kept, a fill of 1M items costs it 18 % less CPU. A description is
// kept once read ACTIVE and dropped whenever the table's entry is written or deleted (create,
// update, delete: before and after the write, and a read that began before a write is not kept),
// so a request never sees one older than the store's.
const dynaliteDb = require('dynalite/db');
const createStore = dynaliteDb.create;

function keepTableDescriptions(store) {
  const kept = new Map();
  const writes = new Map();
  const written = (name) => {
    writes.set(name, (writes.get(name) || 0) + 1);
    kept.delete(name);
  };
  const { put, del } = store.tableDb;
  store.tableDb.put = (name, value, callback) => {
    written(name);
    put(name, value, (err) => { written(name); if (callback) callback(err); });
  };
  store.tableDb.del = (name, callback) => {
    written(name);
    del(name, (err) => { written(name); if (callback) callback(err); });
  };
  const getTable = store.getTable;
  store.getTable = (name, checkStatus, callback) => {
    if (typeof checkStatus == 'function') {
      callback = checkStatus;
      checkStatus = false;
    }
    const table = kept.get(name);
    if (table) return process.nextTick(callback, null, table);
    const writesBefore = writes.get(name) || 0;
    getTable(name, checkStatus, (err, found) => {
      if (!err && found.TableStatus === 'ACTIVE' && (writes.get(name) || 0) === writesBefore) kept.set(name, found);
      callback(err, found);
    });
  };
  const recreate = store.recreate;
  store.recreate = function () {
    recreate.call(this);
    keepTableDescriptions(this);
  };
  return store;
}

let store = null;
dynaliteDb.create = (options) => (store = keepTableDescriptions(createStore(options)));

// The operation it lacks: a TransactWriteItems request is answered here, any other by dynalite.
const http = require('http');
const transactions = require('./dynamodb_transactions.js');
const createServer = http.createServer;
http.createServer = function (...args) {
  const handler = args.pop();
  return createServer.call(http, ...args, (req, res) => (
    transactions.isTransactWrite(req) ? transactions.handle(store, req, res) : handler(req, res)));
};

require('dynalite/cli.js');
