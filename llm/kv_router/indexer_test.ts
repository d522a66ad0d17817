// KvIndexer units in one process: its event-id bookkeeping and its start-up (retries,
// deadline).

import assert from "node:assert/strict";
import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { DynamoError, TimeoutError } from "../../runtime/errors.ts";
import { createLogger } from "../../runtime/logger.ts";
import { computeBlockHashesSync } from "./hashing.ts";
import { KvIndexer } from "./indexer.ts";
import {
  encodeRouterEvent,
  KV_EVENTS,
  KV_RESYNC,
  type KvCacheEventData,
  type RouterEvent,
} from "./protocols.ts";
import { KvEventPublisher } from "./publisher.ts";
import { fakeReadiness } from "./_test_support.ts";

const toks = (n: number, salt = 0) => Array.from({ length: n }, (_, i) => i * 17 + salt);

function stored(worker: string, id: number, t: number[]): RouterEvent {
  const { local, sequence } = computeBlockHashesSync(t, 4);
  const data: KvCacheEventData = {
    stored: {
      parent_hash: null,
      blocks: local.map((tokens_hash, i) => ({ block_hash: sequence[i]!, tokens_hash })),
    },
  };
  return { worker_id: worker, event: { event_id: id, data } };
}

/** Polls `check` until it holds; fails saying what was expected after `ms`. */
async function waitFor(check: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

Deno.test("KvIndexer drops duplicate events, even a duplicate event 1", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const comp = rt.namespace("ns").component("c");
    const pub = new KvEventPublisher(comp, { workerId: "w", kvBlockSize: 4 });
    const ix = new KvIndexer(comp, 4);
    await Promise.all([pub.ready, ix.ready]);
    await pub.publish(stored("w", 0, toks(8)).event.data); // id 1
    await pub.publish(stored("w", 0, toks(12)).event.data); // id 2
    await waitFor(() => ix.tree.blockCount("w") === 3, "the worker's 3 blocks");
    ix.applyEvent(stored("w", 2, toks(16))); // a duplicate id: ignored
    assert.equal(ix.tree.blockCount("w"), 3);
    // Event 1 again (a redelivery): the worker's blocks stay; its state is asked for.
    ix.applyEvent(stored("w", 1, toks(8)));
    assert.equal(ix.tree.blockCount("w"), 3);
    await waitFor(() => ix.pendingResyncs.length === 0, "the worker's state dump");
    assert.equal(ix.tree.blockCount("w"), 3);
    assert.deepEqual((await ix.findMatchesForRequest(toks(12))).scores, new Map([["w", 3]]));
    // And events go on from where they were.
    await pub.publish(stored("w", 0, toks(16)).event.data); // id 3
    await waitFor(() => ix.tree.blockCount("w") === 4, "the worker's 4th block");
    assert.deepEqual(ix.pendingResyncs, []);
    await Promise.all([ix.close(), pub.close()]);
  } finally {
    await rt.shutdown();
  }
});

Deno.test("KvIndexer takes the state of a worker whose publisher started over", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const comp = rt.namespace("ns").component("c");
    const first = new KvEventPublisher(comp, { workerId: "w", kvBlockSize: 4 });
    const ix = new KvIndexer(comp, 4);
    await Promise.all([first.ready, ix.ready]);
    await first.publish(stored("w", 0, toks(8)).event.data);
    await first.publish(stored("w", 0, toks(12)).event.data);
    await waitFor(() => ix.tree.blockCount("w") === 3, "the worker's 3 blocks");
    await first.close();
    // The worker restarts under the same id: its events count from 1 again, its cache is new.
    const again = new KvEventPublisher(comp, { workerId: "w", kvBlockSize: 4 });
    await again.ready;
    await again.publish(stored("w", 0, toks(4, 5)).event.data);
    await waitFor(
      () => ix.pendingResyncs.length === 0 && ix.tree.blockCount("w") === 1,
      "the restarted worker's single block",
    );
    assert.deepEqual((await ix.findMatchesForRequest(toks(8))).scores, new Map());
    assert.deepEqual((await ix.findMatchesForRequest(toks(4, 5))).scores, new Map([["w", 1]]));
    await again.publish(stored("w", 0, toks(8, 5)).event.data); // id 2 of the new publisher
    await waitFor(() => ix.tree.blockCount("w") === 2, "the restarted worker's 2nd block");
    await Promise.all([ix.close(), again.close()]);
  } finally {
    await rt.shutdown();
  }
});

Deno.test("KvIndexer retries a start whose subscription failed, on the next lookup", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const comp = rt.namespace("ns").component("c");
    let fail = true;
    const events = fakeReadiness(
      comp,
      KV_EVENTS,
      () => fail ? Promise.reject(new Error("flush failed")) : Promise.resolve(),
    );
    const ix = new KvIndexer(comp, 4);
    await assert.rejects(
      () => ix.findMatchesForRequest(toks(8)),
      (err: unknown) =>
        err instanceof DynamoError &&
        /KvIndexer of ns\/c cannot start: the kv_events subscription of ns\/c failed: flush failed/
          .test(err.message),
    );
    fail = false;
    assert.deepEqual((await ix.findMatchesForRequest(toks(8))).scores, new Map());
    assert.equal(events.subscribed, 2); // subscribed again
    // Events come through the new subscription.
    await comp.publishEvent(KV_EVENTS, encodeRouterEvent(stored("w", 1, toks(8))));
    await waitFor(() => ix.tree.blockCount("w") === 2, "the event on the new subscription");
    await ix.close();
  } finally {
    await rt.shutdown();
  }
});

Deno.test("KvIndexer retries a start whose resync request could not be sent", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const comp = rt.namespace("ns").component("c");
    const real = comp.publishEvent.bind(comp);
    let fail = true;
    let resyncs = 0;
    comp.publishEvent = (name, payload) => {
      if (name !== KV_RESYNC) return real(name, payload);
      if (fail) return Promise.reject(new Error("not connected"));
      resyncs++;
      return real(name, payload);
    };
    const ix = new KvIndexer(comp, 4);
    await assert.rejects(
      () => ix.ready,
      /KvIndexer of ns\/c cannot ask the workers for their state \(kv_resync\): not connected/,
    );
    await assert.rejects(() => ix.findMatchesForRequest(toks(8)), /not connected/);
    fail = false;
    assert.deepEqual((await ix.findMatchesForRequest(toks(8))).scores, new Map());
    assert.equal(resyncs, 1);
    await ix.ready; // started: no more requests
    assert.equal(resyncs, 1);
    await ix.close();
  } finally {
    await rt.shutdown();
  }
});

Deno.test("KvIndexer lookups give up on a start that never ends, naming what they waited for", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const comp = rt.namespace("ns").component("c");
    const hang = Promise.withResolvers<void>();
    fakeReadiness(comp, KV_EVENTS, () => hang.promise);
    const ix = new KvIndexer(comp, 4, { readyTimeoutMs: 20 });
    for (let i = 0; i < 2; i++) {
      await assert.rejects(
        () => ix.findMatchesForRequest(toks(8)),
        (err: unknown) =>
          err instanceof TimeoutError &&
          /KvIndexer of ns\/c was not ready after 20 ms: still waiting for the kv_events subscription of ns\/c$/
            .test(err.message),
      );
    }
    hang.resolve(); // the same start goes on and finishes
    assert.deepEqual((await ix.findMatchesForRequest(toks(8))).scores, new Map());
    await ix.close();
    assert.throws(
      () => new KvIndexer(comp, 4, { readyTimeoutMs: 0 }),
      /readyTimeoutMs must be > 0/,
    );
  } finally {
    await rt.shutdown();
  }
});

Deno.test("KvIndexer drops a worker that never answers its resync requests", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const ix = new KvIndexer(rt.namespace("ns").component("c"), 4, {
      resyncTimeoutMs: 10,
      resyncAttempts: 2,
    });
    await ix.ready;
    ix.applyEvent(stored("ghost", 7, toks(8))); // met mid-stream: resync, buffered
    assert.deepEqual(ix.pendingResyncs, ["ghost"]);
    assert.equal(ix.tree.blockCount("ghost"), 0);
    const deadline = Date.now() + 5000;
    while (ix.pendingResyncs.length > 0) {
      if (Date.now() > deadline) throw new Error("timed out waiting for the resync to give up");
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.equal(ix.tree.blockCount("ghost"), 0); // the buffered event was not applied
    // Its next event starts a new resync rather than being applied blindly.
    ix.applyEvent(stored("ghost", 8, toks(8)));
    assert.deepEqual(ix.pendingResyncs, ["ghost"]);
    assert.equal(ix.tree.blockCount("ghost"), 0);
    await ix.close();
  } finally {
    await rt.shutdown();
  }
});

Deno.test("KvIndexer refuses invalid KV messages at the door and keeps following the others", async () => {
  const warnings: string[] = [];
  const rt = await DistributedRuntime.connect({
    logger: createLogger({ level: "warn", json: true, write: (line) => warnings.push(line) }),
  });
  try {
    const comp = rt.namespace("ns").component("c");
    const pub = new KvEventPublisher(comp, { workerId: "w", kvBlockSize: 4 });
    const refused: string[] = [];
    const ix = new KvIndexer(comp, 4, { onInvalidMessage: (e) => refused.push(e.reason) });
    await Promise.all([pub.ready, ix.ready]);
    await pub.publish(stored("w", 0, toks(8)).event.data); // id 1
    await waitFor(() => ix.tree.blockCount("w") === 2, "the worker's 2 blocks");
    // A forged event naming the same worker with a NaN id, and one whose count lies.
    const nan = encodeRouterEvent(stored("w", 9, toks(4)));
    new DataView(nan.buffer).setFloat64(5, NaN, true); // after tag, kind, u16 length, "w"
    await comp.publishEvent(KV_EVENTS, nan);
    const lying = encodeRouterEvent(stored("x", 1, toks(4)));
    new DataView(lying.buffer).setUint32(5 + 8 + 9, 2 ** 31, true); // the block count
    await comp.publishEvent(KV_EVENTS, lying);
    await comp.publishEvent(KV_EVENTS, new Uint8Array([1, 2, 3]));
    await comp.publishEvent(KV_EVENTS, nan); // the same worker again: counted, not warned
    await waitFor(() => ix.invalidMessages === 4, "4 refused messages");
    assert.equal(refused.length, 4);
    assert.match(refused[0]!, /event_id/);
    // Logged once per worker ("w", "x", and one unreadable before any worker id).
    const logged = warnings.map((l) => JSON.parse(l)).filter((l) => /invalid KV/.test(l.msg));
    assert.deepEqual(logged.map((l) => l.worker), ["w", "x", undefined]);
    assert.match(logged[0].reason, /event_id/);
    // The worker's state is untouched and its next event still applies in order.
    assert.equal(ix.tree.blockCount("w"), 2);
    assert.equal(ix.tree.blockCount("x"), 0);
    await pub.publish(stored("w", 0, toks(12)).event.data); // id 2
    await waitFor(() => ix.tree.blockCount("w") === 3, "the worker's 3rd block");
    assert.deepEqual(ix.pendingResyncs, []);
    await Promise.all([ix.close(), pub.close()]);
  } finally {
    await rt.shutdown();
  }
});

Deno.test("KvIndexer follows a worker's storage tiers, live and through a state dump", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const comp = rt.namespace("ns").component("c");
    const pub = new KvEventPublisher(comp, { workerId: "w", kvBlockSize: 4 });
    const live = new KvIndexer(comp, 4);
    await Promise.all([pub.ready, live.ready]);
    // Three blocks computed, offloaded to host memory, then dropped from the GPU but the first.
    const chain = stored("w", 0, toks(12)).event.data;
    const hashes = computeBlockHashesSync(toks(12), 4).sequence;
    await pub.publish(chain);
    await pub.publish(chain, "host_pinned");
    await pub.publishRemoved(hashes.slice(1));
    assert.equal(pub.blockCount, 3, "held in some tier");
    await assert.rejects(pub.publish(chain, "tape" as never), /unknown storage tier "tape"/);
    assert.equal(pub.lastEventId, 3, "a refused event takes no id");
    const check = async (ix: KvIndexer, what: string) => {
      await waitFor(
        () =>
          ix.index.blockCount("w", "host_pinned") === 3 && ix.index.blockCount("w", "device") === 1,
        `${what}: 1 block on the device, 3 in host memory`,
      );
      const m = await ix.findMatchesForRequest(toks(12));
      assert.deepEqual(m.scores, new Map([["w", 1]]), `${what}: the device's prefix`);
      assert.deepEqual(m.held, new Map([["w", 3]]), `${what}: the prefix held in any tier`);
    };
    await check(live, "live events");
    // An indexer started now learns the same from the worker's dump (its entries name tiers).
    const late = new KvIndexer(comp, 4);
    await late.ready;
    await check(late, "the dump");
    await Promise.all([live.close(), late.close(), pub.close()]);
  } finally {
    await rt.shutdown();
  }
});
