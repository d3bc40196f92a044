// TransactWriteItems for the local stack's DynamoDB (dynalite 4.0.0 has no transactions).
//
// Why: a run's persist claims every matched record with a conditional write. Sent one UpdateItem a
// record, a claim costs dynalite 2.6-2.8 times an item of a BatchWriteItem and the service as much
// again (bench/RESULTS.md, issue 30); DynamoDB's TransactWriteItems carries up to 100 conditional
// writes in one request, all or none, and the service sends its claims that way.
//
// What it does, as DynamoDB documents the operation: 1 to 100 actions (ConditionCheck, Put, Delete,
// Update), each validated as dynalite validates the single-item request of the same shape; no two on
// one item; every item locked (dynalite's own per-item locks, taken in one go), every condition
// checked against the item as stored, and either all the writes made or none: a failed condition
// cancels the whole request with TransactionCanceledException and one CancellationReason per action
// ("None" for those that passed, "ConditionalCheckFailed" with the item when
// ReturnValuesOnConditionCheckFailure is ALL_OLD). The writes are dynalite's own actions run under
// the locks already held. Not done: ClientRequestToken's idempotency window, ConsumedCapacity,
// ItemCollectionMetrics; readers take no lock, so a GetItem may see a transaction half written;
// an update growing an item over 400 KB is refused only as it is written, leaving the writes before
// it made (dynalite's single writes are not atomic either).
'use strict';

const crypto = require('crypto');
const crc32 = require('buffer-crc32');
const db = require('dynalite/db');
const validations = require('dynalite/validations');

const TARGET = 'DynamoDB_20120810.TransactWriteItems';
const MAX_ACTIONS = 100;
const MAX_REQUEST_BYTES = 16 * 1024 * 1024; // as dynalite's own requests
const KINDS = {
  ConditionCheck: { validation: 'deleteItem', action: null },
  Put: { validation: 'putItem', action: 'putItem' },
  Delete: { validation: 'deleteItem', action: 'deleteItem' },
  Update: { validation: 'updateItem', action: 'updateItem' },
};
const actions = {
  putItem: require('dynalite/actions/putItem'),
  deleteItem: require('dynalite/actions/deleteItem'),
  updateItem: require('dynalite/actions/updateItem'),
};
const rules = {
  putItem: require('dynalite/validations/putItem'),
  deleteItem: require('dynalite/validations/deleteItem'),
  updateItem: require('dynalite/validations/updateItem'),
};

function isTransactWrite(req) {
  return req.method === 'POST' && req.headers['x-amz-target'] === TARGET;
}

function send(res, status, body) {
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('x-amzn-RequestId', crypto.randomBytes(39).toString('base64').toUpperCase().replace(/\+|\//g, '0'));
  res.setHeader('x-amz-crc32', crc32.unsigned(text));
  res.setHeader('Content-Type', 'application/x-amz-json-1.0');
  res.setHeader('Content-Length', Buffer.byteLength(text, 'utf8'));
  res.end(text);
}

function validationError(message) {
  return { status: 400, body: { __type: 'com.amazon.coral.validate#ValidationException', message } };
}

function fail(res, err) {
  if (err && err.statusCode) return send(res, err.statusCode, err.body);
  if (err && err.status) return send(res, err.status, err.body);
  send(res, 500, { __type: 'com.amazonaws.dynamodb.v20120810#InternalServerError', message: String(err) });
}

// One action of the request as the single-item request dynalite validates and runs.
function parseAction(entry, position, store) {
  const kinds = Object.keys(entry || {}).filter((name) => KINDS[name]);
  if (kinds.length !== 1) {
    throw validationError(`TransactItems[${position}] must name exactly one of ConditionCheck, Put, Delete, Update`);
  }
  const kind = KINDS[kinds[0]];
  const data = { ...entry[kinds[0]] };
  const returnOld = data.ReturnValuesOnConditionCheckFailure === 'ALL_OLD';
  delete data.ReturnValuesOnConditionCheckFailure;
  if (kinds[0] === 'ConditionCheck' && !data.ConditionExpression) {
    throw validationError('The parameter \'ConditionExpression\' is required but was not present in the request');
  }
  const rule = rules[kind.validation];
  const checked = validations.checkTypes(data, rule.types);
  const key = parseKey(kinds[0], checked);
  const kept = key === null ? undefined : keptParses.get(key);
  validations.checkValidations(checked, rule.types, kept ? (d) => reuse(d, kept, store) : rule.custom, store);
  if (key !== null && !kept) remember(key, checked);
  return { kind: kinds[0], action: kind.action, data: checked, returnOld };
}

// Expressions parsed once. dynalite parses every expression with a PEG parser: a third of its time
// in a transaction of claims, which all send the same expressions with other values. A parse
// depends on the expressions, the names and the values' types, and refers to each value by
// reference; so a parse is kept with each value replaced by a marker, and an action with the same
// expressions, names and value types gets a copy with its own values in their place (and its
// values and key validated as dynalite validates them). Not kept: an expression whose checks read a
// value itself (BETWEEN's bounds, attribute_type's name), and a parse that holds a value other
// than by reference.
const PARSED_KEPT = 1000;
const keptParses = new Map();
const VALUE = Symbol('value');

function parseKey(kind, data) {
  const expressions = [data.UpdateExpression, data.ConditionExpression];
  if (!expressions.some(Boolean) || expressions.some((e) => e && /between|attribute_type/i.test(e))) return null;
  if (data.AttributeUpdates || data.Expected) return null;
  const values = data.ExpressionAttributeValues || {};
  const types = Object.keys(values).sort().map((name) => [name, Object.keys(values[name] || {})]);
  return JSON.stringify([kind, expressions, data.ExpressionAttributeNames || null,
    data.ExpressionAttributeValues === undefined ? null : types]);
}

function withValues(node, values) {
  if (Array.isArray(node)) return node.map((child) => withValues(child, values));
  if (node === null || typeof node !== 'object') return node;
  if (node[VALUE] !== undefined) return values[node[VALUE]];
  const copy = Object.create(Object.getPrototypeOf(node));
  for (const name of Object.keys(node)) copy[name] = withValues(node[name], values);
  return copy;
}

function marked(node, markers, found) {
  if (Array.isArray(node)) return node.map((child) => marked(child, markers, found));
  if (node === null || typeof node !== 'object') return node;
  if (markers.has(node)) {
    found.add(markers.get(node));
    return { [VALUE]: markers.get(node) };
  }
  const copy = Object.create(Object.getPrototypeOf(node));
  for (const name of Object.keys(node)) copy[name] = marked(node[name], markers, found);
  return copy;
}

function remember(key, data) {
  const values = data.ExpressionAttributeValues || {};
  const markers = new Map(Object.keys(values).map((name) => [values[name], name]));
  const found = new Set();
  const kept = { updates: marked(data._updates, markers, found), condition: marked(data._condition, markers, found) };
  if (found.size !== markers.size) return; // a value held other than by reference
  if (keptParses.size >= PARSED_KEPT) keptParses.delete(keptParses.keys().next().value);
  keptParses.set(key, kept);
}

// dynalite's own checks of an action whose expressions were parsed before (its `custom`, but the
// parse): a Put's item size, the key's, the item's and the values' attribute values.
function reuse(data, kept, store) {
  if (data.Item && db.itemSize(data.Item) > store.options.maxItemSize) return 'Item size has exceeded the maximum allowed size';
  const values = data.ExpressionAttributeValues || {};
  for (const value of [...Object.values(data.Key || {}), ...Object.values(data.Item || {}), ...Object.values(values)]) {
    const invalid = validations.validateAttributeValue(value);
    if (invalid) return invalid;
  }
  if (kept.updates !== undefined) data._updates = withValues(kept.updates, values);
  if (kept.condition !== undefined) data._condition = withValues(kept.condition, values);
}

function tablesOf(store, names, callback) {
  const tables = {};
  let left = names.length;
  let failed = false;
  names.forEach((name) => store.getTable(name, (err, table) => {
    if (failed) return;
    if (err) { failed = true; return callback(err); }
    tables[name] = table;
    if (--left === 0) callback(null, tables);
  }));
}

// Takes every key's lock, table by table in name order (one call per table takes its keys together).
function lockAll(store, keysByTable, callback) {
  const names = Object.keys(keysByTable).sort();
  const releases = [];
  const next = (index) => {
    if (index === names.length) {
      return callback((done) => (...args) => {
        releases.reverse().forEach((release) => release(() => {})());
        done(...args);
      });
    }
    store.getItemDb(names[index]).lock(keysByTable[names[index]], (release) => {
      releases.push(release);
      next(index + 1);
    });
  };
  next(0);
}

// The store as dynalite's actions see it while this request holds the items' locks.
function underHeldLocks(store) {
  const held = Object.create(store);
  held.getItemDb = (name) => {
    const itemDb = store.getItemDb(name);
    const view = Object.create(itemDb);
    view.lock = (key, exec) => exec((done) => done);
    return view;
  };
  return held;
}

function run(store, request, callback) {
  const entries = request && request.TransactItems;
  if (!Array.isArray(entries) || entries.length < 1 || entries.length > MAX_ACTIONS) {
    return callback(validationError('1 validation error detected: Value at \'transactItems\' failed to satisfy ' +
      `constraint: Member must have length less than or equal to ${MAX_ACTIONS} and greater than or equal to 1`));
  }
  let parsed;
  try {
    parsed = entries.map((entry, position) => parseAction(entry, position, store));
  }
  catch (err) {
    return callback(err);
  }
  tablesOf(store, [...new Set(parsed.map((p) => p.data.TableName))], (err, tables) => {
    if (err) return callback(err);
    try {
      lockAndWrite(store, parsed, tables, callback);
    }
    catch (err) {
      callback(err);
    }
  });
}

// Every item locked, every condition checked, then all written or none.
function lockAndWrite(store, parsed, tables, callback) {
  const keysByTable = {};
  const seen = new Set();
  for (const p of parsed) {
    const table = tables[p.data.TableName];
    const invalid = p.kind === 'Put' ? db.validateItem(p.data.Item, table) : db.validateKey(p.data.Key, table);
    if (invalid != null) return callback(invalid);
    // Before anything is written: what dynalite's UpdateItem would only check once it runs.
    const invalidUpdate = p.kind === 'Update' ? db.validateUpdates(p.data.AttributeUpdates, p.data._updates, table) : null;
    if (invalidUpdate != null) return callback(invalidUpdate);
    p.key = db.createKey(p.kind === 'Put' ? p.data.Item : p.data.Key, table);
    const name = `${p.data.TableName}\u0000${p.key}`;
    if (seen.has(name)) {
      return callback(validationError('Transaction request cannot include multiple operations on one item'));
    }
    seen.add(name);
    (keysByTable[p.data.TableName] = keysByTable[p.data.TableName] || []).push(p.key);
  }
  lockAll(store, keysByTable, (releaser) => {
    const done = once(releaser(callback));
    try {
      readAll(store, parsed, (err, olds) => checkAndWrite(store, parsed, err, olds, done));
    }
    catch (err) {
      done(err);
    }
  });
}

// Under the locks: every condition checked, then all written, or none and why.
function checkAndWrite(store, parsed, err, olds, done) {
  if (err) return done(err);
  try {
    const reasons = parsed.map((p, i) => {
      if (db.checkConditional(p.data, olds[i]) == null) return { Code: 'None' };
      const reason = { Code: 'ConditionalCheckFailed', Message: 'The conditional request failed' };
      if (p.returnOld && olds[i]) reason.Item = olds[i];
      return reason;
    });
    if (reasons.some((reason) => reason.Code !== 'None')) {
      return done({
        status: 400,
        body: {
          __type: 'com.amazonaws.dynamodb.v20120810#TransactionCanceledException',
          Message: 'Transaction cancelled, please refer cancellation reasons for specific reasons ' +
            `[${reasons.map((reason) => reason.Code).join(', ')}]`,
          CancellationReasons: reasons,
        },
      });
    }
    writeAll(underHeldLocks(store), parsed, (err) => done(err, {}));
  }
  catch (err) {
    done(err);
  }
}

// A callback that runs once however often it is called (the locks are given back once).
function once(callback) {
  let called = false;
  return (...args) => {
    if (called) return;
    called = true;
    callback(...args);
  };
}

function readAll(store, parsed, callback) {
  const olds = new Array(parsed.length);
  let left = parsed.length;
  let failed = false;
  parsed.forEach((p, i) => store.getItemDb(p.data.TableName).get(p.key, (err, item) => {
    if (failed) return;
    if (err && err.name !== 'NotFoundError') { failed = true; return callback(err); }
    olds[i] = item;
    if (--left === 0) callback(null, olds);
  }));
}

// In the request's order, one after another: each re-reads its item and re-checks its condition under
// the locks held, so each passes as it did above.
function writeAll(store, parsed, callback) {
  const next = (index) => {
    if (index === parsed.length) return callback(null);
    const p = parsed[index];
    if (!p.action) return next(index + 1);
    actions[p.action](store, p.data, (err) => (err ? callback(err) : next(index + 1)));
  };
  next(0);
}

function handle(store, req, res) {
  const parts = [];
  let size = 0;
  req.on('data', (part) => {
    size += part.length;
    if (size <= MAX_REQUEST_BYTES) parts.push(part);
  });
  req.on('end', () => {
    if (size > MAX_REQUEST_BYTES) { res.statusCode = 413; return res.end(); }
    if (!req.headers.authorization) {
      return send(res, 400, { __type: 'com.amazon.coral.service#MissingAuthenticationTokenException',
        message: 'Request is missing Authentication Token' });
    }
    let request;
    try {
      request = JSON.parse(Buffer.concat(parts).toString());
    }
    catch {
      return send(res, 400, { __type: 'com.amazon.coral.service#SerializationException' });
    }
    try {
      run(store, request, (err, answer) => (err ? fail(res, err) : send(res, 200, answer)));
    }
    catch (err) {
      fail(res, err);
    }
  });
}

module.exports = { isTransactWrite, handle };
