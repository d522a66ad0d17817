// The caller's ItemReceiver hands over frames that have already arrived without a promise
// (`poll`), skipping heartbeats, with the same items, end and errors as `next`.

import assert from "node:assert/strict";
import { RemoteError } from "./errors.ts";
import { openStream } from "./stream.ts";
import { FrameType, jsonFrame, LocalRequestPlane, type RequestHeader } from "./transport/mod.ts";

type Polling<T> = AsyncIterator<T> & { poll(): IteratorResult<T> | undefined };

/** A local plane whose one subject answers with `frames` after the prologue, all at once. */
async function planeSending(frames: Parameters<typeof jsonFrame>[]): Promise<LocalRequestPlane> {
  const plane = new LocalRequestPlane();
  await plane.serve("s", async (payload) => {
    const { header } = payload as unknown as { header: RequestHeader };
    const conn = await plane.dial(header.connection_info);
    await conn.send(jsonFrame(FrameType.Prologue, {}));
    for (const f of frames) await conn.send(jsonFrame(...f));
  });
  return plane;
}

Deno.test("poll() takes the items already there, skips heartbeats, and ends at the sentinel", async () => {
  const plane = await planeSending([
    [FrameType.Data, "a"],
    [FrameType.Heartbeat, null],
    [FrameType.Data, "b"],
    [FrameType.Sentinel, null],
  ]);
  const stream = await openStream<string>(plane, "s", "i", {});
  const it = stream[Symbol.asyncIterator]() as Polling<string>;
  await new Promise((r) => setTimeout(r, 10)); // every frame has arrived
  assert.deepEqual(it.poll(), { value: "a", done: false });
  assert.deepEqual(it.poll(), { value: "b", done: false });
  assert.equal(it.poll()?.done, true);
  assert.equal(it.poll(), undefined, "over: nothing more");
  assert.equal((await it.next()).done, true);
  await plane.close();
});

Deno.test("poll() says undefined while nothing has arrived, and throws a worker's error as next() rejects", async () => {
  const plane = await planeSending([
    [FrameType.Data, "a"],
    [FrameType.Error, { name: "EngineError", message: "boom" }],
  ]);
  const stream = await openStream<string>(plane, "s", "i", {});
  const it = stream[Symbol.asyncIterator]() as Polling<string>;
  await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(it.poll(), { value: "a", done: false });
  assert.throws(
    () => it.poll(),
    (err: unknown) => err instanceof RemoteError && /boom/.test(String(err)),
  );
  assert.equal(it.poll(), undefined);

  const quiet = new LocalRequestPlane();
  await quiet.serve("s", async (payload) => {
    const { header } = payload as unknown as { header: RequestHeader };
    const conn = await quiet.dial(header.connection_info);
    await conn.send(jsonFrame(FrameType.Prologue, {}));
  });
  const waiting = (await openStream<string>(quiet, "s", "i", {}))
    [Symbol.asyncIterator]() as Polling<
      string
    >;
  assert.equal(waiting.poll(), undefined, "no frame yet");
  await waiting.return?.();
  await quiet.close();
  await plane.close();
});

Deno.test("return() after the worker finished sends no stop; before it finished, it does", async () => {
  for (const finished of [true, false]) {
    const plane = new LocalRequestPlane();
    let heard!: Promise<unknown>;
    await plane.serve("s", async (payload) => {
      const { header } = payload as unknown as { header: RequestHeader };
      const conn = await plane.dial(header.connection_info);
      await conn.send(jsonFrame(FrameType.Prologue, {}));
      await conn.send(jsonFrame(FrameType.Data, "a"));
      await conn.send(jsonFrame(FrameType.Data, "b"));
      if (finished) await conn.send(jsonFrame(FrameType.Sentinel, null));
      heard = conn.receive().then((f) => f === null ? "closed" : f.type);
    });
    const stream = await openStream<string>(plane, "s", "i", {});
    const it = stream[Symbol.asyncIterator]();
    await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(await it.next(), { value: "a", done: false });
    await it.return!();
    assert.equal(await heard, finished ? "closed" : FrameType.Control);
    assert.equal(stream.context.isStopped(), !finished);
    await plane.close();
  }
});
