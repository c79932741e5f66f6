// What the Node scenarios share: the environment they are given, the
// simulator's journal, and a step runner.
//
// Environment (set by tests/tests/clients.rs, or by hand: clients/README.md):
//   CHATGATE_TEST_BASE_URL     the gateway, http://HOST:PORT/v1
//   CHATGATE_TEST_KEY          a valid key
//   CHATGATE_TEST_LIMITED_KEY  a second key with requests_per_minute = 60,
//                              used by nothing else (the 429 step drains it)
//   CHATGATE_TEST_BROKE_KEY    a third key whose budget is zero (the OpenAI
//                              SDK's no-retry step; the AI SDK leaves it alone)
//   CHATGATE_TEST_SIM_URL      the simulator, http://HOST:PORT (its journal)
//   OPENAI_BASE_URL, OPENAI_API_KEY
//                              the same gateway and key, for the SDKs' own
//                              environment lookup (the OpenAI SDK reads them)

import assert from 'node:assert/strict';

function required(name) {
  const v = process.env[name];
  assert.ok(v, `${name} is not set (see clients/README.md)`);
  return v;
}

export const BASE_URL = required('CHATGATE_TEST_BASE_URL');
export const KEY = required('CHATGATE_TEST_KEY');
export const LIMITED_KEY = required('CHATGATE_TEST_LIMITED_KEY');
export const BROKE_KEY = required('CHATGATE_TEST_BROKE_KEY');
export const SIM_URL = required('CHATGATE_TEST_SIM_URL').replace(/\/+$/, '');
export const MODEL = 'reasoning-model-k3';
/** A 1x1 PNG, base64. */
export const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=';
/** A key of the right shape that does not exist. */
export const BAD_KEY = 'sk-cg-' + '0'.repeat(43);

/** The simulator's journal: one entry per chat request it received. */
export async function journal() {
  const r = await fetch(`${SIM_URL}/_sim/journal`);
  assert.equal(r.status, 200);
  return r.json();
}

/** The bodies the provider received after journal entry `since`. */
export async function sentBodies(since) {
  return (await journal()).slice(since).map(e => JSON.parse(e.body));
}

/** Asserts that `promise` rejects, and returns the error. */
export async function rejection(promise, what) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail(`expected ${what}`);
}

/** Prints each shape of body the provider received (for the record). */
export async function reportJournal() {
  const seen = new Set();
  for (const e of await journal()) {
    let body;
    try {
      body = JSON.parse(e.body);
    } catch {
      continue;
    }
    const roles = (body.messages ?? []).map(m => m?.role);
    const line = `provider received: keys=${JSON.stringify(Object.keys(body).sort())} roles=${JSON.stringify(roles)}`;
    if (!seen.has(line)) {
      seen.add(line);
      console.log(line);
    }
  }
}

/** Runs the steps in order; any failure exits with status 1. */
export async function run(title, steps) {
  console.log(title);
  try {
    for (const step of steps) {
      const t = performance.now();
      await step();
      console.log(`ok ${step.name} (${((performance.now() - t) / 1000).toFixed(2)}s)`);
    }
    await reportJournal();
  } catch (e) {
    console.error(e);
    process.exit(1);
  }
}
