// The local stack's DynamoDB: dynalite (npm) with its command line as it is, and one fix.
//
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

require('dynalite/cli.js');
