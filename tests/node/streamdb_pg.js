'use strict'
// node-postgres against a real StreamDB server: simple and parameterized queries, named prepared
// statements, and push queries (EMIT CHANGES) consumed row by row while another connection
// inserts. Prints one JSON object with what it saw; tests/test_e2e_node.py checks it.
// Usage: node streamdb_pg.js host port name-suffix
const { Client, Connection, Query } = require('pg')

const [host, port, suffix] = process.argv.slice(2)
const config = {
  host, port: Number(port), user: 'streamdb', database: 'streamdb',
  application_name: 'streamdb-node-test',
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

async function waitFor (what, condition, timeoutMs = 60000) {
  const deadline = Date.now() + timeoutMs
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

async function pushQueries (admin) {
  const { rows } = await admin.query('SHOW QUERIES')
  return rows.filter(q => q.kind === 'push query')
}

// A push query sends its snapshot in its first epoch: wait until it has, so that each insert
// below comes as a change of its own (the filters below leave the snapshots empty).
async function waitSubscribed (admin, before) {
  await waitFor('the push query to start', async () => {
    const queries = await pushQueries(admin)
    return queries.length > before && !queries.some(q => String(q.status).startsWith('starting'))
  })
}

// Runs `sql` as a push query on its own connection; each inserted row must arrive before the
// next insert is made, and the query is still running when it does.
async function pushRowByRow (admin, sql, values, inserts) {
  const client = new Client(config)
  await client.connect()
  const before = (await pushQueries(admin)).length
  const arrivals = []
  let running = true
  const query = client.query(new Query(sql, values))
  const finished = new Promise(resolve => {
    query.on('end', () => { running = false; resolve({ ended: 'end' }) })
    query.on('error', err => { running = false; resolve({ ended: 'error', code: err.code }) })
  })
  query.on('row', row => arrivals.push({ row, whileRunning: running }))
  await waitSubscribed(admin, before)
  const steps = []
  for (const [insertSql, insertValues, expectArrival] of inserts) {
    const before = arrivals.length
    await admin.query(insertSql, insertValues)
    if (expectArrival) {
      await waitFor('a pushed row', () => arrivals.length > before)
    } else {
      await sleep(1000) // a row the filter drops: nothing may arrive
    }
    steps.push(arrivals.length)
  }
  // A CancelRequest on a connection of its own, as Client#cancel sends (which is deprecated).
  const canceller = new Connection()
  canceller.on('connect', () => canceller.cancel(client.processID, client.secretKey))
  canceller.on('error', () => {}) // the server closes the cancel connection at once
  canceller.connect(config.port, config.host)
  const end = await finished
  const afterCancel = (await client.query('SELECT 1 AS ok')).rows
  await client.end()
  return { fields: query._result.fields.map(f => f.name), arrivals, steps, end, afterCancel }
}

async function main () {
  const out = {}
  const admin = new Client(config)
  await admin.connect()
  const stream = `nevents_${suffix}`
  const table = `nusers_${suffix}`

  const simple = await admin.query("SELECT 41 + 1 AS answer, 'hi' AS greeting, true AS yes")
  out.simple = simple.rows
  out.simpleTypes = simple.fields.map(f => [f.name, f.dataTypeID])

  await admin.query(`CREATE STREAM ${stream} (device TEXT KEY, reading DOUBLE PRECISION, seq INT)`)
  await admin.query(`CREATE TABLE ${table} (id BIGINT PRIMARY KEY, name TEXT, active BOOLEAN)`)
  const inserted = await admin.query(
    `INSERT INTO ${stream} (device, reading, seq) VALUES ($1, $2, $3), ($4, $5, $6), ($7, $8, $9)`,
    ['a', 1.5, 1, 'b', 2.5, 2, 'a', 0.25, 3])
  out.insertCount = inserted.rowCount
  await admin.query(`INSERT INTO ${table} VALUES (1, 'ann', true), (2, 'bob', false)`)
  const update = await admin.query(`UPDATE ${table} SET active = $1 WHERE id = $2`, [true, 2])
  out.updateCount = update.rowCount

  const param = await admin.query(
    `SELECT device, reading, seq FROM ${stream} WHERE reading > $1 ORDER BY seq`, [1.0])
  out.param = param.rows
  const byName = { name: `by_device_${suffix}`, text: `SELECT seq FROM ${stream} WHERE device = $1 ORDER BY seq` }
  out.named = [
    (await admin.query({ ...byName, values: ['a'] })).rows,
    (await admin.query({ ...byName, values: ['b'] })).rows,
  ]
  const users = await admin.query(`SELECT id, name, active FROM ${table} WHERE id >= $1 ORDER BY id`, [1])
  out.users = users.rows
  try {
    await admin.query(`SELECT nope FROM ${stream}`)
    out.error = null
  } catch (err) {
    out.error = err.code
  }

  const insertSql = `INSERT INTO ${stream} (device, reading, seq) VALUES ($1, $2, $3)`
  // Simple protocol (no parameters).
  out.push = await pushRowByRow(admin,
    `SELECT device, seq FROM ${stream} WHERE seq >= 10 EMIT CHANGES`, undefined, [
      [insertSql, ['c', 1, 10], true],
      [insertSql, ['c', 1, 5], false],
      [insertSql, ['d', 1, 11], true],
      [insertSql, ['e', 1, 12], true],
    ])
  // Extended protocol: the filter's bound is a parameter.
  out.pushWithParameter = await pushRowByRow(admin,
    `SELECT device, seq FROM ${stream} WHERE seq >= $1 EMIT CHANGES`, [100], [
      [insertSql, ['f', 1, 100], true],
      [insertSql, ['g', 1, 99], false],
      [insertSql, ['h', 1, 101], true],
    ])
  out.total = (await admin.query(`SELECT count(*)::int AS n FROM ${stream}`)).rows[0].n
  await admin.end()
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().catch(err => {
  console.error(err)
  process.exit(1)
})
