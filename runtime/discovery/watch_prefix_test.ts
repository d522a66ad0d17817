// watchPrefix on MemoryDiscovery: the listing at "synced", puts and deletes, resync after
// a failed watch, and malformed records (logged once, skipped, never stopping the watch).

import { recordingLogger as recordWarnings } from "../../tests/_helpers/recording_logger.ts";
import assert from "node:assert/strict";
import fc from "fast-check";
import { z } from "zod";
import type { Logger } from "../logger.ts";
import type { Discovery, KeyValue, Lease, PutOptions, WatchEvent, WatchOptions } from "./mod.ts";
import { MemoryDiscovery } from "./memory.ts";
import { type PrefixEvent, watchPrefix } from "./watch_prefix.ts";

const PREFIX = "v1/things/";

/** `{n, tag}` under a one-segment key; a "boom" tag makes the schema throw. */
const schema = z.object({
  key: z.string().regex(/^[^/]+$/),
  value: z.object({ n: z.number().int().min(0).max(1000), tag: z.string().max(16) }),
}).transform(({ key, value }) => {
  if (value.tag === "boom") throw new Error("the schema itself failed");
  return { id: key, n: value.n, tag: value.tag };
});
type Thing = z.output<typeof schema>;

/** A discovery whose watches can be made to fail, as a dropped etcd watch does. */
class FlakyDiscovery implements Discovery {
  readonly kind = "flaky";
  readonly inner = new MemoryDiscovery();
  watchesStarted = 0;
  readonly #breakers = new Set<() => void>();

  grantLease(ttlSeconds: number): Promise<Lease> {
    return this.inner.grantLease(ttlSeconds);
  }
  put(key: string, value: string, options?: PutOptions): Promise<void> {
    return this.inner.put(key, value, options);
  }
  get(key: string): Promise<string | undefined> {
    return this.inner.get(key);
  }
  delete(key: string): Promise<void> {
    return this.inner.delete(key);
  }
  list(prefix: string): Promise<KeyValue[]> {
    return this.inner.list(prefix);
  }
  async *watch(prefix: string, options: WatchOptions = {}): AsyncIterable<WatchEvent> {
    this.watchesStarted++;
    const broken = new AbortController();
    const signal = options.signal
      ? AbortSignal.any([options.signal, broken.signal])
      : broken.signal;
    const breaker = () => broken.abort();
    this.#breakers.add(breaker);
    try {
      for await (const ev of this.inner.watch(prefix, { signal })) {
        if (broken.signal.aborted) break;
        yield ev;
      }
      if (broken.signal.aborted) throw new Error("watch broke");
    } finally {
      this.#breakers.delete(breaker);
    }
  }
  close(): Promise<void> {
    return this.inner.close();
  }
  /** Fails every open watch. */
  breakWatches(): void {
    for (const b of [...this.#breakers]) b();
  }
}

/** A logger that keeps its warnings, and picks out the malformed-record ones. */
function recordingLogger() {
  const recorded = recordWarnings();
  const malformed = () => recorded.warnings.filter((w) => /malformed/.test(w.msg));
  return { ...recorded, malformed };
}

/** Runs watchPrefix in the background and folds its events into a map, as a consumer would. */
function follow(discovery: Discovery, logger: Logger) {
  const abort = new AbortController();
  const state = new Map<string, Thing>();
  const events: PrefixEvent<Thing>[] = [];
  let syncs = 0;
  const done = (async () => {
    const iter = watchPrefix(discovery, PREFIX, {
      schema,
      signal: abort.signal,
      logger,
      what: "thing",
      initialBackoffMs: 1,
      maxBackoffMs: 5,
    });
    for await (const ev of iter) {
      events.push(ev);
      if (ev.type === "synced") {
        state.clear();
        for (const [k, v] of ev.records) state.set(k, v);
        syncs++;
      } else if (ev.type === "put") state.set(ev.key, ev.value);
      else state.delete(ev.key);
    }
  })();
  return {
    state,
    events,
    syncs: () => syncs,
    stop: async () => (abort.abort(), await done),
    done,
  };
}

/** Polls until `check` holds, or fails saying what was expected. */
async function until(check: () => boolean, what: string, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** Lets the watcher drain what discovery queued (memory discovery delivers at once). */
async function settle(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise((r) => setTimeout(r, 0));
}

const thing = (n: number, tag = "t") => JSON.stringify({ n, tag });
/** The consumer's state as sorted `[key suffix, n]` pairs. */
const stateOf = (m: Map<string, Thing>) =>
  [...m].map(([k, v]) => [k.slice(PREFIX.length), v.n] as [string, number]).sort(byKey);
const byKey = (a: [string, number], b: [string, number]) => (a[0] < b[0] ? -1 : 1);

Deno.test("watchPrefix hands over the listing at synced, then puts and deletes", async () => {
  const d = new MemoryDiscovery();
  const { logger } = recordingLogger();
  await d.put(`${PREFIX}a`, thing(1));
  await d.put(`${PREFIX}b`, thing(2));
  await d.put("v1/other/c", thing(3));
  const f = follow(d, logger);
  try {
    await until(() => f.syncs() === 1, "the first listing is synced");
    assert.deepEqual(f.events[0], {
      type: "synced",
      records: new Map([
        [`${PREFIX}a`, { id: "a", n: 1, tag: "t" }],
        [`${PREFIX}b`, { id: "b", n: 2, tag: "t" }],
      ]),
    });
    await d.put(`${PREFIX}a`, thing(10));
    await d.delete(`${PREFIX}b`);
    await d.delete(`${PREFIX}nothing`);
    await settle();
    assert.deepEqual(f.events.slice(1), [
      {
        type: "put",
        key: `${PREFIX}a`,
        value: { id: "a", n: 10, tag: "t" },
        previous: { id: "a", n: 1, tag: "t" },
      },
      { type: "delete", key: `${PREFIX}b`, previous: { id: "b", n: 2, tag: "t" } },
    ]);
  } finally {
    await f.stop();
    await d.close();
  }
});

Deno.test("watchPrefix resyncs after the watch fails, swapping the new listing in whole", async () => {
  const d = new FlakyDiscovery();
  const { logger, warnings } = recordingLogger();
  await d.put(`${PREFIX}a`, thing(1));
  await d.put(`${PREFIX}b`, thing(2));
  const f = follow(d, logger);
  try {
    await until(() => f.syncs() === 1, "the first listing is synced");
    d.breakWatches();
    // Changed while the watch was down: b gone, c new, a changed.
    await d.inner.delete(`${PREFIX}b`);
    await d.inner.put(`${PREFIX}c`, thing(3));
    await d.inner.put(`${PREFIX}a`, thing(4));
    await until(() => f.syncs() === 2, "the restarted watch is synced");
    assert.ok(d.watchesStarted >= 2, "the watch was restarted");
    assert.ok(warnings.some((w) => /failed; retrying/.test(w.msg)), "the failure was logged");
    // No event between the two listings: the consumer never saw a half state.
    const second = f.events.findIndex((e, i) => i > 0 && e.type === "synced");
    assert.equal(second, 1, "the second listing comes as one event");
    assert.deepEqual(stateOf(f.state), [["a", 4], ["c", 3]]);
    await d.put(`${PREFIX}d`, thing(5));
    await until(() => f.state.has(`${PREFIX}d`), "a later put is applied");
  } finally {
    await f.stop();
    await d.close();
  }
});

Deno.test("watchPrefix logs a malformed record once, skips it, and goes on applying updates", async () => {
  const d = new FlakyDiscovery();
  const { logger, malformed } = recordingLogger();
  await d.put(`${PREFIX}good`, thing(1));
  await d.put(`${PREFIX}bad`, "{not json");
  const f = follow(d, logger);
  try {
    await until(() => f.syncs() === 1, "the first listing is synced");
    assert.deepEqual(stateOf(f.state), [["good", 1]]);
    assert.equal(malformed().length, 1);
    assert.equal(malformed()[0]!.fields.key, `${PREFIX}bad`);
    assert.match(String(malformed()[0]!.fields.reason), /not JSON/);

    await d.put(`${PREFIX}bad`, "{not json"); // the same value again: not logged again
    d.breakWatches(); // nor when a restarted watch lists it
    await until(() => f.syncs() === 2, "the restarted watch is synced");
    assert.equal(malformed().length, 1, "one report per key and value");

    await d.put(`${PREFIX}good`, thing(2));
    await d.put(`${PREFIX}new`, thing(3));
    await d.put(`${PREFIX}bad`, JSON.stringify({ n: "many", tag: 1 })); // another bad value
    await d.put(`${PREFIX}boom`, thing(1, "boom")); // a schema that throws
    await settle();
    assert.deepEqual(stateOf(f.state), [["good", 2], ["new", 3]]);
    assert.equal(malformed().length, 3);
    assert.match(String(malformed()[1]!.fields.reason), /n: /);
    assert.match(String(malformed()[2]!.fields.reason), /schema failed/);

    // Fixing restores the record; deleting a bad one changes nothing the consumer holds.
    await d.put(`${PREFIX}bad`, thing(7));
    await d.delete(`${PREFIX}boom`);
    await settle();
    assert.deepEqual(stateOf(f.state), [["bad", 7], ["good", 2], ["new", 3]]);
    assert.equal(d.watchesStarted, 2, "no record ever restarted the watch");
  } finally {
    await f.stop();
    await d.close();
  }
});

Deno.test("watchPrefix treats a malformed record that replaces a good one as a delete", async () => {
  const d = new MemoryDiscovery();
  const { logger, malformed } = recordingLogger();
  const f = follow(d, logger);
  try {
    await until(() => f.syncs() === 1, "the first listing is synced");
    await d.put(`${PREFIX}a`, thing(1));
    await d.put(`${PREFIX}a`, "[]");
    await settle();
    assert.deepEqual(f.events.slice(1).map((e) => e.type), ["put", "delete"]);
    assert.deepEqual(stateOf(f.state), []);
    assert.equal(malformed().length, 1);
    await d.delete(`${PREFIX}a`);
    await d.put(`${PREFIX}a`, "[]"); // deleted in between: a new bad record, reported again
    await settle();
    assert.equal(malformed().length, 2);
    await d.put(`${PREFIX}a`, thing(2));
    await settle();
    assert.deepEqual(stateOf(f.state), [["a", 2]]);
  } finally {
    await f.stop();
    await d.close();
  }
});

Deno.test("watchPrefix ends without an error when its signal aborts, even while backing off", async () => {
  const d = new FlakyDiscovery();
  const abort = new AbortController();
  const iter = watchPrefix(d, PREFIX, { schema, signal: abort.signal, initialBackoffMs: 60_000 });
  const run = (async () => {
    for await (const ev of iter) if (ev.type === "synced") d.breakWatches();
  })();
  await until(() => d.watchesStarted === 1, "the watch started");
  await settle();
  abort.abort();
  await run; // does not wait out the minute of backoff
  await assert.rejects(watchPrefix(d, PREFIX, { schema, signal: abort.signal }).next(), {
    name: "AbortError",
  });
});

// Independent of the zod schema: what a valid record is.
function isValid(raw: string): boolean {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return false;
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const o = v as Record<string, unknown>;
  const n = Object.hasOwn(o, "n") ? o.n : undefined;
  const tag = Object.hasOwn(o, "tag") ? o.tag : undefined;
  return typeof n === "number" && Number.isInteger(n) && n >= 0 && n <= 1000 &&
    typeof tag === "string" && tag.length <= 16 && tag !== "boom";
}

const validValue = fc.record({
  n: fc.integer({ min: 0, max: 1000 }),
  tag: fc.string({ maxLength: 16 }).filter((t) => t !== "boom"),
}).map((v) => JSON.stringify(v));

const adversarialValue = fc.oneof(
  fc.string(), // mostly not JSON
  fc.jsonValue().map((v) => JSON.stringify(v)), // JSON of any shape
  fc.constantFrom(
    JSON.stringify({ n: 1, tag: "x".repeat(200_000) }), // a huge string
    JSON.stringify({ n: "1", tag: "t" }), // wrong types
    JSON.stringify({ n: 1.5, tag: "t" }),
    JSON.stringify({ n: 1e300, tag: "t" }),
    JSON.stringify({ n: 1, tag: "boom" }), // the schema throws
    '{"__proto__": {"n": 1, "tag": "t"}}', // prototype keys
    '{"constructor": {"prototype": {"n": 1}}, "tag": "t"}',
    '{"n": 1, "tag": {"toString": "x"}}',
    JSON.stringify({ n: 1, tag: [[[[[[[[[[["deep"]]]]]]]]]]] }), // nested junk
    "null",
    "",
    "\u0000",
    "[".repeat(10_000),
  ),
);

type Op =
  | { op: "put"; key: string; value: string }
  | { op: "delete"; key: string }
  | { op: "break" };

const keyArb = fc.constantFrom("a", "b", "c", "__proto__", "constructor");
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({ op: fc.constant("put" as const), key: keyArb, value: validValue }),
  },
  {
    weight: 4,
    arbitrary: fc.record({ op: fc.constant("put" as const), key: keyArb, value: adversarialValue }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant("delete" as const), key: keyArb }) },
  { weight: 1, arbitrary: fc.constant({ op: "break" as const }) },
);

Deno.test("watchPrefix state equals the valid records alone, whatever else is written", async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(opArb, { maxLength: 30 }), async (ops) => {
      const d = new FlakyDiscovery();
      const { logger, malformed } = recordingLogger();
      const f = follow(d, logger);
      const expected = new Map<string, number>();
      let badPuts = 0;
      try {
        await until(() => f.syncs() === 1, "the first listing is synced");
        for (const [i, o] of ops.entries()) {
          if (o.op === "break") {
            d.breakWatches();
            continue;
          }
          const key = `${PREFIX}${o.key}`;
          if (o.op === "delete") {
            await d.delete(key);
            expected.delete(o.key);
          } else {
            await d.put(key, o.value);
            if (isValid(o.value)) expected.set(o.key, (JSON.parse(o.value) as { n: number }).n);
            else (expected.delete(o.key), badPuts++);
          }
          if (i % 3 === 0) await settle(); // some ops land together, some one by one
        }
        const want = JSON.stringify([...expected].sort(byKey));
        await until(
          () => JSON.stringify(stateOf(f.state)) === want,
          `the state is ${want} (have ${JSON.stringify(stateOf(f.state))})`,
        );
        assert.ok(malformed().length <= badPuts, "at most one report per bad put");
      } finally {
        await f.stop();
        await d.close();
      }
      await f.done; // never threw past the boundary
    }),
    { numRuns: 60 },
  );
});
