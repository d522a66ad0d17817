import assert from "node:assert/strict";
import FakeTimers from "@sinonjs/fake-timers";
import { EmbeddedPrefillQueue, PrefillQueueClosedError } from "./queue.ts";

Deno.test("EmbeddedPrefillQueue delivers in enqueue order", async () => {
  const q = new EmbeddedPrefillQueue<number>();
  for (const n of [1, 2, 3]) await q.enqueue(n);
  assert.equal(await q.size(), 3);
  const got = [];
  for (let i = 0; i < 3; i++) {
    const item = (await q.dequeue({ timeoutMs: 0 }))!;
    got.push(item.data);
    assert.equal(item.deliveries, 1);
    assert.equal(await item.ack(), true);
  }
  assert.deepEqual(got, [1, 2, 3]);
  assert.equal(await q.dequeue({ timeoutMs: 0 }), undefined);
  await q.close();
});

Deno.test("EmbeddedPrefillQueue hands an item to a consumer already waiting", async () => {
  const q = new EmbeddedPrefillQueue<string>();
  const waiting = q.dequeue();
  await q.enqueue("x");
  const item = await waiting;
  assert.equal(item?.data, "x");
  await item?.ack();
  await q.close();
});

Deno.test("EmbeddedPrefillQueue redelivers an un-acked item at the head after the deadline", async () => {
  const clock = FakeTimers.withGlobal(globalThis).install({
    toFake: ["setTimeout", "clearTimeout"],
  });
  try {
    const q = new EmbeddedPrefillQueue<string>({ ackWaitMs: 1000 });
    await q.enqueue("a");
    await q.enqueue("b");
    const first = (await q.dequeue({ timeoutMs: 0 }))!;
    assert.equal(first.data, "a");
    clock.tick(999);
    assert.equal(await q.size(), 1, "not yet redelivered");
    clock.tick(1);
    assert.equal(await q.size(), 2);
    const again = (await q.dequeue({ timeoutMs: 0 }))!;
    assert.equal(again.data, "a");
    assert.equal(again.id, first.id);
    assert.equal(again.deliveries, 2);
    assert.equal(await first.ack(), false, "a superseded delivery cannot ack");
    assert.equal(await again.ack(), true);
    clock.tick(5000);
    const next = (await q.dequeue({ timeoutMs: 0 }))!;
    assert.equal(next.data, "b", "an acked item is never redelivered");
    await next.ack();
    await q.close();
  } finally {
    clock.uninstall();
  }
});

Deno.test("EmbeddedPrefillQueue.dequeue returns undefined after timeoutMs and honours abort", async () => {
  const clock = FakeTimers.withGlobal(globalThis).install({
    toFake: ["setTimeout", "clearTimeout"],
  });
  try {
    const q = new EmbeddedPrefillQueue<string>();
    const p = q.dequeue({ timeoutMs: 50 });
    clock.tick(50);
    assert.equal(await p, undefined);
    const ac = new AbortController();
    const p2 = q.dequeue({ signal: ac.signal });
    ac.abort(new Error("stop"));
    await assert.rejects(p2, /stop/);
    await q.enqueue("later");
    assert.equal(
      (await q.dequeue({ timeoutMs: 0 }))?.data,
      "later",
      "no lost item to a gone waiter",
    );
    await q.close();
  } finally {
    clock.uninstall();
  }
});

Deno.test("EmbeddedPrefillQueue.close fails waiting and later calls", async () => {
  const q = new EmbeddedPrefillQueue<string>();
  const waiting = q.dequeue();
  await q.close();
  await assert.rejects(waiting, PrefillQueueClosedError);
  await assert.rejects(q.enqueue("x"), PrefillQueueClosedError);
  await assert.rejects(q.dequeue(), PrefillQueueClosedError);
});

Deno.test("EmbeddedPrefillQueue rejects a bad ackWaitMs", () => {
  assert.throws(
    () => new EmbeddedPrefillQueue({ ackWaitMs: 0 }),
    /ackWaitMs must be a number > 0, got 0/,
  );
});
