// Stream liveness with a fake connection pair: a silent worker's stream fails with
// StreamStalledError once the caller has waited past its idle deadline, before and after the
// first item; a slow worker that sends heartbeats does not; serveRequest sends heartbeats while
// its handler is silent and stops them once the stream ends.

import assert from "node:assert/strict";
import type FakeTimers from "@sinonjs/fake-timers";
import { Context } from "./context.ts";
import { StreamStalledError } from "./errors.ts";
import {
  type BeatingStream,
  beatStream,
  livenessClock,
  livenessTicks,
  livenessTimerRunning,
  stopBeating,
  unwatchStream,
  type WaitingStream,
  watchStream,
} from "./liveness.ts";
import { serveRequest } from "./serve_request.ts";
import { openStream } from "./stream.ts";
import { onFakeClock as withFakeClock } from "../tests/_helpers/fake_clock.ts";
import {
  type ConnectionInfo,
  type Frame,
  type FrameConn,
  FrameType,
  jsonFrame,
  type PendingStream,
  type RequestHeader,
  type RequestPlane,
} from "./transport/mod.ts";

/** One end of an in-memory frame pipe (frames as bytes, as across processes). */
class PipeEnd implements FrameConn {
  readonly #inbox: Frame[] = [];
  #waiter: ((f: Frame | null) => void) | undefined;
  #closed = false;
  peer: PipeEnd | undefined;
  readonly sent: Frame[] = [];

  get closed(): boolean {
    return this.#closed;
  }
  deliver(frame: Frame | null): void {
    if (this.#waiter) {
      const w = this.#waiter;
      this.#waiter = undefined;
      w(frame);
    } else if (frame) this.#inbox.push(frame);
    else this.#closed = true;
  }
  send(frame: Frame): void {
    if (this.#closed) throw new Error("closed");
    this.sent.push(frame);
    this.peer?.deliver(frame);
  }
  receive(): Promise<Frame | null> {
    const f = this.#inbox.shift();
    if (f) return Promise.resolve(f);
    if (this.#closed) return Promise.resolve(null);
    return new Promise((r) => (this.#waiter = r));
  }
  end(): Promise<void> {
    this.close();
    return Promise.resolve();
  }
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.deliver(null);
    this.peer?.deliver(null);
  }
}

function pipe(): [PipeEnd, PipeEnd] {
  const a = new PipeEnd();
  const b = new PipeEnd();
  a.peer = b;
  b.peer = a;
  return [a, b];
}

/** A request plane that hands the caller one end of a pipe and the test the other. */
function fakePlane(workerEnd: (conn: PipeEnd) => void): RequestPlane {
  return {
    kind: "nats",
    serve: () => Promise.reject(new Error("unused")),
    request: () => Promise.resolve(),
    expectStream(streamId: string): PendingStream {
      const [caller, worker] = pipe();
      workerEnd(worker);
      const info: ConnectionInfo = { tcp: { address: "fake", stream_id: streamId } };
      return { connectionInfo: info, connection: Promise.resolve(caller), cancel() {} };
    },
    dial: () => Promise.reject(new Error("unused")),
    close: () => Promise.resolve(),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

Deno.test("a worker that goes silent after its first item fails the stream with StreamStalledError", async () => {
  const plane = fakePlane((worker) => {
    worker.send(jsonFrame(FrameType.Prologue, {}));
    worker.send(jsonFrame(FrameType.Data, "first"));
    // ... and then nothing: stopped, not dead (the connection stays open).
  });
  const stream = await openStream<string>(plane, "s", "i", {}, { idleTimeoutMs: 500 });
  const got: string[] = [];
  const started = performance.now();
  await assert.rejects(
    (async () => {
      for await (const item of stream) got.push(item);
    })(),
    (err: unknown) => err instanceof StreamStalledError && err.itemsReceived === 1,
  );
  assert.deepEqual(got, ["first"]);
  assert.ok(performance.now() - started >= 400, "not before the idle deadline");
});

Deno.test("a worker silent before its prologue fails openStream with StreamStalledError", async () => {
  const plane = fakePlane(() => {/* connected, then silent */});
  await assert.rejects(
    openStream(plane, "s", "i", {}, { idleTimeoutMs: 500 }),
    StreamStalledError,
  );
});

Deno.test("heartbeats keep a slow worker's stream alive past the idle deadline", async () => {
  let worker!: PipeEnd;
  const plane = fakePlane((w) => (worker = w));
  const beats = setInterval(
    () => worker.send({ type: FrameType.Heartbeat, payload: new Uint8Array() }),
    100,
  );
  try {
    const opening = openStream<string>(plane, "s", "i", {}, { idleTimeoutMs: 500 });
    await sleep(900); // only heartbeats before the prologue
    worker.send(jsonFrame(FrameType.Prologue, {}));
    const stream = await opening;
    const reading = (async () => {
      const got: string[] = [];
      for await (const item of stream) got.push(item);
      return got;
    })();
    await sleep(900); // only heartbeats between items
    worker.send(jsonFrame(FrameType.Data, "late"));
    worker.send({ type: FrameType.Sentinel, payload: new Uint8Array() });
    assert.deepEqual(await reading, ["late"]);
  } finally {
    clearInterval(beats);
  }
});

Deno.test("serveRequest sends heartbeats while its handler is silent, and none after the end", async () => {
  const [worker, caller] = pipe();
  const header: RequestHeader = {
    id: new Context().id,
    request_type: "single_in",
    response_type: "many_out",
    connection_info: { tcp: { address: "fake", stream_id: "x" } },
  };
  await serveRequest(worker, header, {}, async function* () {
    await sleep(700);
    yield "a";
    await sleep(700);
    yield "b";
  }, { heartbeatMs: 200 });
  const types = worker.sent.map((f) => f.type);
  const beats = types.filter((t) => t === FrameType.Heartbeat).length;
  assert.ok(beats >= 2, `heartbeats while silent: ${types}`);
  assert.equal(types.at(-1), FrameType.Sentinel);
  const sentAfter = worker.sent.length;
  await sleep(500);
  assert.equal(worker.sent.length, sentAfter, "nothing after the sentinel");
  caller.close();
});

/** Waits (real time) for the liveness timer of earlier tests to idle out, at most 2 s. */
async function livenessIdle(): Promise<void> {
  const deadline = performance.now() + 2_000;
  while (livenessTimerRunning()) {
    if (performance.now() > deadline) throw new Error("the liveness timer did not stop in 2 s");
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Runs `test` on a fake clock once the liveness timer of earlier tests has idled out. */
async function onFakeClock(test: (clock: FakeTimers.Clock) => void): Promise<void> {
  await livenessIdle();
  withFakeClock(["setInterval", "clearInterval"], test);
}

Deno.test("the liveness timer serves streams watched in turn without stopping, and stops at the first idle tick", () =>
  onFakeClock((clock) => {
    const before = clock.countTimers();
    for (let i = 0; i < 100; i++) {
      const w: WaitingStream = { waitingSince: livenessClock.tick, idleTicks: 4, stall() {} };
      watchStream(w);
      unwatchStream(w);
      const b: BeatingStream = { lastSent: 0, beatTicks: 4, beat() {} };
      beatStream(b);
      stopBeating(b);
    }
    assert.equal(clock.countTimers() - before, 1, "one timer for a hundred streams in turn");
    assert.ok(livenessTimerRunning());
    clock.tick(250);
    assert.equal(livenessTimerRunning(), false, "stopped at the first tick with nothing watched");
    assert.equal(clock.countTimers() - before, 0);
  }));

Deno.test("a stream watched while the timer idles out still stalls on time", () =>
  onFakeClock((clock) => {
    const w0: WaitingStream = { waitingSince: livenessClock.tick, idleTicks: 1, stall() {} };
    watchStream(w0);
    unwatchStream(w0);
    clock.tick(250); // idle tick: the timer stops
    let stalled = 0;
    const w: WaitingStream = {
      waitingSince: livenessClock.tick,
      idleTicks: livenessTicks(1000),
      stall: () => stalled++,
    };
    watchStream(w);
    clock.tick(750);
    assert.equal(stalled, 0, "not before the idle deadline");
    clock.tick(500);
    assert.equal(stalled, 1, "stalled within a tick of the deadline");
    unwatchStream(w);
    clock.tick(250);
    assert.equal(livenessTimerRunning(), false);
  }));
