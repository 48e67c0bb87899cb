// The shell helpers issue 10 names, run by mongosh against a standalone node
// (python/tests/test_mongosh_shell_helpers.py). Every check throws on a
// mismatch, so mongosh exits non-zero and the test fails; the last line
// prints SHELL-HELPERS-OK.

function check(condition, what, detail) {
  if (!condition) {
    throw new Error('failed: ' + what + (detail === undefined ? '' : ' ' + JSON.stringify(detail)));
  }
}

// The error a helper throws, or null when it does not throw.
function errorOf(helper) {
  try {
    helper();
  } catch (error) {
    return error;
  }
  return null;
}

const d = db.getSiblingDB('mongosh_shell_helpers');
d.dropDatabase();

// Collections with a validator, and indexes with options.
d.createCollection('people', {
  validator: {$jsonSchema: {required: ['name'], properties: {name: {bsonType: 'string'}}}},
  validationAction: 'error',
});
const refused = errorOf(() => d.people.insertOne({age: 3}));
check(refused !== null && refused.code === 121, 'the validator refuses a document without name', String(refused));
d.people.insertMany(Array.from({length: 50}, (_, i) => ({_id: i, name: 'p' + i, email: 'E' + i + '@x', at: new Date()})));
check(d.people.createIndex({at: 1}, {expireAfterSeconds: 3600}) === 'at_1', 'TTL createIndex');
check(d.people.createIndex({name: 1}, {partialFilterExpression: {_id: {$gte: 10}}}) === 'name_1', 'partial createIndex');
check(d.people.createIndex({email: 1}, {unique: true, collation: {locale: 'en', strength: 2}}) === 'email_1',
      'collation createIndex');
const indexes = d.people.getIndexes();
const byName = Object.fromEntries(indexes.map(index => [index.name, index]));
check(Number(byName.at_1.expireAfterSeconds) === 3600, 'TTL option kept', byName.at_1);
check(byName.name_1.partialFilterExpression._id.$gte === 10, 'partial filter kept', byName.name_1);
check(byName.email_1.collation.locale === 'en' && byName.email_1.collation.strength === 2, 'collation kept',
      byName.email_1);
const duplicate = errorOf(() => d.people.insertOne({name: 'q', email: 'e1@X'}));
check(duplicate !== null && duplicate.code === 11000, 'the case-insensitive unique index refuses', String(duplicate));
const options = d.getCollectionInfos({name: 'people'})[0].options;
check(options.validator.$jsonSchema.required[0] === 'name', 'listCollections shows the validator', options);

// Sizes.
const stats = d.people.stats();
check(Number(stats.count) === 50 && Number(stats.nindexes) === 4, 'stats()', stats);
check(Number(d.people.dataSize()) === Number(stats.size) && Number(stats.size) > 0, 'dataSize()');
check(Number(d.people.storageSize()) > 0, 'storageSize()');
check(Number(d.people.totalSize()) >= Number(d.people.storageSize()), 'totalSize()');
const dbStats = d.stats();
check(Number(dbStats.objects) === 50 && Number(dbStats.collections) === 1, 'db.stats()', dbStats);

// validate and compact.
const validated = d.people.validate();
check(validated.valid === true && Number(validated.nrecords) === 50, 'validate()', validated);
const compacted = d.runCommand({compact: 'people'});
check(compacted.ok === 1 && Number(compacted.bytesFreed) >= 0, 'compact', compacted);
const missing = errorOf(() => d.runCommand({compact: 'nosuch'}));
check(missing !== null && missing.code === 26, 'compact of a missing collection', String(missing));
check(Number(db.serverStatus().slipstream.compact.count) >= 1, 'serverStatus counts compact');
check(d.people.countDocuments({}) === 50, 'documents after compact');

// Operations.
const ops = db.currentOp();
check(ops.inprog.some(op => op.command && op.command.aggregate === 1), 'currentOp() shows itself', ops);
check(db.killOp(2000000000).ok === 1, 'killOp()');

// Profiler.
d.setProfilingLevel(2);
d.people.findOne({_id: 7});
const status = d.getProfilingStatus();
check(Number(status.was) === 2, 'getProfilingStatus()', status);
const profiled = d.system.profile.find({op: 'query', ns: 'mongosh_shell_helpers.people'}).toArray();
check(profiled.length === 1 && profiled[0].command.filter._id === 7, 'system.profile.find()', profiled);
d.setProfilingLevel(0);
check(Number(d.getProfilingStatus().was) === 0, 'profiling off');

// Administration.
const commands = db.adminCommand({listCommands: 1}).commands;
check(commands.compact !== undefined && commands.find !== undefined, 'listCommands');
check(db.adminCommand({setParameter: 1, ttlMonitorSleepSecs: 30}).ok === 1, 'setParameter');
check(Number(db.adminCommand({getParameter: 1, ttlMonitorSleepSecs: 1}).ttlMonitorSleepSecs) === 30, 'getParameter');
db.adminCommand({setParameter: 1, ttlMonitorSleepSecs: 60});
const server = db.serverStatus();
check(server.ok === 1 && typeof server.host === 'string' && Number(server.connections.current) >= 1,
      'serverStatus()', server.connections);
const hello = db.hello();
check(hello.isWritablePrimary === true && hello.setName === undefined, 'hello()', hello);

// A standalone has no replica set.
const noSet = errorOf(() => rs.status());
check(noSet !== null && noSet.code === 76, 'rs.status() on a standalone answers 76', String(noSet));

d.dropDatabase();
print('SHELL-HELPERS-OK');
