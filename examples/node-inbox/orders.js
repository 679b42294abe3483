// A Node.js app on mensageria, with nothing but node-pg: it enqueues in
// its business transactions by plain SQL, and applies what
// `mensageria receive` landed in its inbox queue in its own transactions.
// No Go, no mensageria library.
//
//   npm ci --ignore-scripts          # in this directory (scripts/polyglot.sh does it)
//   node orders.js enqueue  --url postgres://app@127.0.0.1:5432/app --outbox-schema mensageria --app-schema shop --count 100
//   node orders.js apply    --url postgres://billing@127.0.0.1:5432/billing --inbox-schema mensageria \
//                           --app-schema billing --consumer faturamento.pedidos
//   node orders.js refusals --url ... --outbox-schema mensageria
//
// The sending side runs `mensageria relay` (which owns the type in the
// ownership catalog), the receiving side `mensageria receive`.
// tests/polyglot runs this program, with both daemons killed mid-way,
// and counts what arrived.
//
// The parts between "README:begin" and "README:end" are the README's
// Node snippets, word for word (the root package's
// TestReadmeCodeIsCompiledCode).
'use strict';

const { Client } = require('pg');

const TYPE = 'pedido.criado';

function options(argv) {
  const opt = {};
  for (let i = 0; i + 1 < argv.length; i += 2) {
    if (!argv[i].startsWith('--')) usage();
    opt[argv[i].slice(2)] = argv[i + 1];
  }
  return opt;
}

function need(opt, name) {
  if (!opt[name]) {
    console.error(`missing --${name}`);
    process.exit(2);
  }
  return opt[name];
}

// ident allows the lower-case identifiers mensageria's schemas are.
function ident(s) {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(s)) {
    console.error(`not a lower-case SQL identifier: ${s}`);
    process.exit(2);
  }
  return s;
}

function usage() {
  console.error('usage: node orders.js enqueue|apply|refusals --url URL [--outbox-schema S] [--inbox-schema S] [--app-schema S] [--consumer C] [--count N] [--first N] [--rollback-every K] [--until N] [--fail-every M]');
  process.exit(2);
}

// enqueue writes --count orders, each with its message, in one business
// transaction each; every --rollback-every'th transaction fails instead
// (its message's type has no owner: MS001) and rolls back, its order with
// it. The app's own orders table is the record of what was committed.
async function enqueue(db, opt) {
  const outbox = `${ident(need(opt, 'outbox-schema'))}.outbox`;
  const app = ident(need(opt, 'app-schema'));
  const count = Number(opt.count || 100);
  const first = Number(opt.first || 1);
  const rollbackEvery = Number(opt['rollback-every'] || 0);
  await db.query(`CREATE TABLE IF NOT EXISTS ${app}.orders (id bigint PRIMARY KEY, total_cents bigint NOT NULL)`);
  let committed = 0;
  let rolledBack = 0;
  for (let i = first; i < first + count; i++) {
    const refused = rollbackEvery > 0 && i % rollbackEvery === 0;
    try {
      await placeOrder(db, app, outbox, refused ? 'pedido.nobody.owns' : TYPE, i, 1000 + (i % 977), `node-${i}`);
      committed++;
    } catch (e) {
      if (!refused || e.code !== 'MS001') throw e;
      rolledBack++;
    }
  }
  console.log(`enqueued committed=${committed} rolled_back=${rolledBack}`);
}

// README:begin node-enqueue
// One business transaction: the order and its message, or neither. Pass
// JSON as text made with JSON.stringify and cast it ($3::json): node-pg
// turns a JavaScript array parameter into a PostgreSQL array literal, not
// JSON. Errors carry the SQLSTATE as e.code (MS001..MS004: the outbox
// refused the message).
async function placeOrder(db, app, outbox, type, id, total, requestId) {
  await db.query('BEGIN');
  try {
    await db.query(`INSERT INTO ${app}.orders (id, total_cents) VALUES ($1, $2)`, [id, total]);
    await db.query(
      `INSERT INTO ${outbox} (type, key, payload, headers) VALUES ($1, $2, $3::json, $4::json)`,
      [type, `pedido-${id}`, JSON.stringify({ id, total_cents: total }), JSON.stringify({ 'X-Request-Id': requestId })],
    );
    await db.query('COMMIT');
  } catch (e) {
    await db.query('ROLLBACK').catch(() => {}); // whatever failed, nothing stays (a lost connection rolls back too)
    throw e;
  }
}
// README:end node-enqueue

// apply takes what the receive daemon stored, in the app's own
// transactions (applyRound), round after round. It waits for the daemon's
// NOTIFY between rounds, and polls every second too. With --until N it
// stops once the invoices table holds N rows.
async function apply(db, opt) {
  const inbox = ident(need(opt, 'inbox-schema'));
  const app = ident(need(opt, 'app-schema'));
  const consumer = need(opt, 'consumer');
  const until = Number(opt.until || 0);
  const failEvery = Number(opt['fail-every'] || 0);
  // No unique key on order_key: a row applied twice would show as two
  // invoices, which is what the black-box test counts.
  await db.query(`CREATE TABLE IF NOT EXISTS ${app}.invoices (order_key text NOT NULL, message_id uuid NOT NULL, total_cents bigint NOT NULL)`);
  let wake = null;
  db.on('notification', (n) => {
    if (n.payload === consumer && wake) wake();
  });
  await db.query(`LISTEN ${inbox}_inbox`);
  const invoice = async (conn, row) => {
    if (failEvery > 0 && Number(row.id) % failEvery === 0 && row.attempts === 0) {
      throw new Error(`the first attempt of every ${failEvery}th row fails`);
    }
    await conn.query(`INSERT INTO ${app}.invoices (order_key, message_id, total_cents) VALUES ($1, $2, $3)`,
      [row.key, row.message_id, row.payload.total_cents]);
  };
  let applied = 0;
  let failed = 0;
  for (;;) {
    let done;
    try {
      done = await applyRound(db, inbox, consumer, invoice);
    } catch (e) {
      if (e.code !== 'MS010') throw e;
      console.error(`round rolled back: ${e.message}`);
      continue; // the next claim no longer finds that row
    }
    applied += done.applied;
    failed += done.failed;
    if (done.applied + done.failed > 0) continue;
    if (until > 0) {
      const { rows: [{ n }] } = await db.query(`SELECT count(*)::int AS n FROM ${app}.invoices`);
      if (n >= until) break;
    }
    await new Promise((resolve) => {
      const t = setTimeout(resolve, 1000);
      wake = () => { clearTimeout(t); wake = null; resolve(); };
    });
  }
  console.log(`applied ${applied} failed ${failed}`);
}

// README:begin node-apply
// One round: claim up to 100 rows (row locks, SKIP LOCKED), apply each
// under a savepoint with its business write, mark it applied, commit. A
// row whose write fails is rolled back alone and recorded as failed (due
// again later; parked as dead after the consumer's attempts). json
// columns come back parsed: row.payload is an object.
async function applyRound(db, inbox, consumer, business) {
  let applied = 0;
  let failed = 0;
  await db.query('BEGIN');
  try {
    const { rows } = await db.query(
      `SELECT id, key, message_id, payload, attempts FROM ${inbox}.inbox_claim($1, 100)`, [consumer]);
    for (const row of rows) {
      await db.query('SAVEPOINT row');
      try {
        await business(db, row);
        await db.query(`SELECT ${inbox}.inbox_applied($1)`, [row.id]);
        await db.query('RELEASE SAVEPOINT row');
        applied++;
      } catch (e) {
        await db.query('ROLLBACK TO SAVEPOINT row');
        if (e.code === 'MS010') throw e; // another transaction applied or parked the row: roll the round back
        await db.query(`SELECT ${inbox}.inbox_failed($1, $2, interval '1 second')`, [row.id, String(e)]);
        failed++;
      }
    }
    await db.query('COMMIT');
  } catch (e) {
    await db.query('ROLLBACK').catch(() => {}); // nothing of the round stays, the locks go
    throw e;
  }
  return { applied, failed };
}
// README:end node-apply

// refusals shows what the database answers to enqueues that break its
// rules, one SQLSTATE each: branch on err.code, never on the message.
async function refusals(db, opt) {
  const outbox = `${ident(need(opt, 'outbox-schema'))}.outbox`;
  const cases = [
    ['unowned', 'nobody.owns.this', 'k', {}],
    ['empty-key', TYPE, '', {}],
    ['long-key', TYPE, 'é'.repeat(501), {}], // 501 characters, 1,002 bytes
    ['empty-type', '', 'k', {}],
    ['number-header', TYPE, 'k', { attempt: 1 }],
  ];
  const meaning = {
    MS001: 'no app owns the type: run its relay, or `mensageria owners register`',
    MS002: 'the key must be 1 to 1000 bytes',
    MS003: 'the type must be 1 to 200 bytes',
    MS004: 'headers must be a JSON object of strings',
  };
  for (const [name, type, key, headers] of cases) {
    try {
      await db.query(`INSERT INTO ${outbox} (type, key, payload, headers) VALUES ($1, $2, '{}', $3::json)`, [type, key, JSON.stringify(headers)]);
      console.log(`${name} accepted`);
    } catch (e) {
      console.log(`${name} ${e.code} ${meaning[e.code] || 'unexpected'}`);
    }
  }
}

async function main() {
  const [cmd, ...rest] = process.argv.slice(2);
  const run = { enqueue, apply, refusals }[cmd];
  if (!run) usage();
  const opt = options(rest);
  const db = new Client({ connectionString: need(opt, 'url') });
  await db.connect();
  try {
    await run(db, opt);
  } finally {
    await db.end();
  }
}

main().catch((e) => {
  console.error(e.code ? `${e.code} ${e.message}` : e);
  process.exit(1);
});
