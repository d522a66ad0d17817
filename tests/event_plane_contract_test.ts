// One contract suite for the event plane, run against every backend in BACKENDS. Each
// case starts fresh runtimes ("processes") on the backend.

import assert from "node:assert/strict";
import { type EventMessage, type EventSubscription, InvalidArgumentError } from "../mod.ts";
import { type Backend, BACKENDS, within } from "./_helpers/backends.ts";

type Case = (b: Backend) => Promise<void>;

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

/** Takes the next `n` events of `sub` (as "subject=payload"), with a deadline. */
async function take(sub: EventSubscription, n: number, what: string): Promise<string[]> {
  const out: string[] = [];
  if (n === 0) return out;
  const it = sub[Symbol.asyncIterator]();
  await within(
    (async () => {
      while (out.length < n) {
        const r = await it.next();
        if (r.done) throw new Error(`subscription ended after ${out.length} of ${n} events`);
        const m: EventMessage = r.value;
        out.push(`${m.subject}=${dec(m.payload)}`);
      }
    })(),
    5000,
    what,
  );
  return out;
}

/** Consumes `sub` to its end, with a deadline; returns how many events came first. */
async function drain(sub: AsyncIterable<EventMessage>, what: string): Promise<number> {
  let n = 0;
  await within(
    (async () => {
      for await (const _ of sub) n++;
    })(),
    5000,
    what,
  );
  return n;
}

const cases: Record<string, Case> = {
  async "a subscriber in another runtime receives events in publish order"(b) {
    const [a, c] = [await b.runtime(), await b.runtime()];
    const sub = c.events.subscribe("t.events.kv");
    await sub.ready;
    for (let i = 0; i < 50; i++) await a.events.publish("t.events.kv", enc(String(i)));
    const got = await take(sub, 50, "50 events in order");
    assert.deepEqual(got, Array.from({ length: 50 }, (_, i) => `t.events.kv=${i}`));
    await sub.unsubscribe();
  },

  async "'*' matches one token and '>' the rest, as on NATS"(b) {
    const [a, c] = [await b.runtime(), await b.runtime()];
    const star = c.events.subscribe("t.*.x");
    const rest = c.events.subscribe("t.>");
    await Promise.all([star.ready, rest.ready]);
    for (const s of ["t.a.x", "t.a.b.x", "t.a", "u.a.x", "t.b.x"]) {
      await a.events.publish(s, enc("1"));
    }
    assert.deepEqual(await take(star, 2, "the '*' matches"), ["t.a.x=1", "t.b.x=1"]);
    assert.deepEqual(await take(rest, 4, "the '>' matches"), [
      "t.a.x=1",
      "t.a.b.x=1",
      "t.a=1",
      "t.b.x=1",
    ]);
  },

  async "every subscriber gets its own copy"(b) {
    const [a, c, d] = [await b.runtime(), await b.runtime(), await b.runtime()];
    const subs = [c.events.subscribe("t.x"), d.events.subscribe("t.x"), d.events.subscribe("t.x")];
    await Promise.all(subs.map((s) => s.ready));
    await a.events.publish("t.x", enc("hi"));
    for (const s of subs) assert.deepEqual(await take(s, 1, "a copy"), ["t.x=hi"]);
  },

  async "component events travel on {slug(namespace_component)}.events.{name}"(b) {
    const [a, c] = [await b.runtime(), await b.runtime()];
    const pub = a.namespace("My-NS").component("Backend");
    const comp = c.namespace("My-NS").component("Backend");
    assert.equal(pub.eventSubject("kv_events"), "my-ns_backend.events.kv_events");
    const byName = comp.subscribeEvents("kv_events");
    const raw = c.events.subscribe("my-ns_backend.events.>");
    await Promise.all([byName.ready, raw.ready]);
    await pub.publishEvent("kv_events", enc("e1"));
    await pub.publishEvent("load_metrics", enc("m1"));
    assert.deepEqual(await take(byName, 1, "the kv event"), ["my-ns_backend.events.kv_events=e1"]);
    assert.deepEqual(await take(raw, 2, "both events"), [
      "my-ns_backend.events.kv_events=e1",
      "my-ns_backend.events.load_metrics=m1",
    ]);
  },

  async "unsubscribe() ends the consumer's loop and stops delivery"(b) {
    const [a, c] = [await b.runtime(), await b.runtime()];
    const sub = c.events.subscribe("t.x");
    await sub.ready;
    const loop = drain(sub, "the loop to end after unsubscribe");
    await a.events.publish("t.x", enc("1"));
    await new Promise((r) => setTimeout(r, 50));
    await sub.unsubscribe();
    assert.ok((await loop) <= 1);
    await sub.unsubscribe(); // idempotent
  },

  async "an aborted signal ends the subscription"(b) {
    const rt = await b.runtime();
    const ac = new AbortController();
    const sub = rt.events.subscribe("t.x", { signal: ac.signal });
    const loop = drain(sub, "the loop to end after abort");
    ac.abort();
    assert.equal(await loop, 0);
    const already = rt.events.subscribe("t.x", { signal: ac.signal });
    assert.equal(await drain(already, "a subscription with an aborted signal to end"), 0);
  },

  async "breaking out of the loop unsubscribes"(b) {
    const [a, c] = [await b.runtime(), await b.runtime()];
    const sub = c.events.subscribe("t.x");
    await sub.ready;
    await a.events.publish("t.x", enc("1"));
    await a.events.publish("t.x", enc("2"));
    await within(
      (async () => {
        for await (const _ of sub) break;
      })(),
      5000,
      "the first event",
    );
    // The subscription ended: a second loop over it ends at once.
    assert.equal(await drain(sub, "a loop over an ended subscription to end"), 0);
  },

  async "runtime shutdown ends its subscriptions"(b) {
    const rt = await b.runtime();
    const sub = rt.namespace("t").component("c").subscribeEvents("kv_events");
    await sub.ready;
    const loop = drain(sub, "the loop to end at shutdown");
    await rt.shutdown();
    assert.equal(await loop, 0);
  },

  async "malformed subjects are rejected with InvalidArgumentError"(b) {
    const rt = await b.runtime();
    await assert.rejects(rt.events.publish("a.*", enc("x")), InvalidArgumentError);
    await assert.rejects(rt.events.publish("a..b", enc("x")), InvalidArgumentError);
    await assert.rejects(rt.events.publish("", enc("x")), InvalidArgumentError);
    assert.throws(() => rt.events.subscribe("a.>.b"), InvalidArgumentError);
    assert.throws(() => rt.events.subscribe("a b"), InvalidArgumentError);
    await assert.rejects(
      rt.namespace("t").component("c").publishEvent("x.>", enc("x")),
      InvalidArgumentError,
    );
  },
};

for (const backend of BACKENDS) {
  Deno.test({
    name: `event plane contract on ${backend.name}`,
    ignore: !backend.available,
    async fn(t) {
      for (const [name, run] of Object.entries(cases)) {
        await t.step(name, async () => {
          const b = await backend.open();
          try {
            await run(b);
          } finally {
            await b.close();
          }
        });
      }
    },
  });
}
