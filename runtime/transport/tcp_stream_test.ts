import assert from "node:assert/strict";
import fc from "fast-check";
import { FrameType } from "./mod.ts";
import { CallHomePool, dialTcp, TcpFrameConn, TcpResponseServer } from "./tcp_stream.ts";
import { MuxStream } from "./mux.ts";
import { DynamoError, ProtocolError } from "../errors.ts";

Deno.test("TCP frames of any size arrive intact and in order through the call-home listener", async () => {
  const server = TcpResponseServer.listen();
  try {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.uint8Array({ maxLength: 200_000 }), { maxLength: 20 }),
        async (payloads) => {
          const pending = server.expect(crypto.randomUUID());
          const worker = await dialTcp(pending.connectionInfo);
          const caller = await pending.connection;
          const sending = (async () => {
            for (const p of payloads) await worker.send({ type: FrameType.Data, payload: p });
            await worker.end();
          })();
          const got: Uint8Array[] = [];
          for (let f = await caller.receive(); f !== null; f = await caller.receive()) {
            got.push(f.payload);
          }
          await sending;
          caller.close();
          assert.deepEqual(got, payloads);
        },
      ),
      { numRuns: 30 },
    );
  } finally {
    server.close();
  }
});

Deno.test("a dial with an unknown stream id is refused by the listener", async () => {
  const server = TcpResponseServer.listen();
  try {
    const pending = server.expect("known");
    pending.cancel();
    const worker = await dialTcp(pending.connectionInfo);
    assert.equal(await worker.receive(), null, "the listener hangs up");
    worker.close();
  } finally {
    server.close();
  }
});

Deno.test("sending after close is an error, and a garbage frame length is a ProtocolError", async () => {
  const server = TcpResponseServer.listen();
  try {
    const pending = server.expect("s");
    const worker = await dialTcp(pending.connectionInfo);
    const caller = await pending.connection;
    await worker.send({ type: FrameType.Data, payload: new Uint8Array([1]) });
    assert.deepEqual((await caller.receive())?.payload, new Uint8Array([1]));
    worker.close();
    assert.throws(
      () => worker.send({ type: FrameType.Data, payload: new Uint8Array() }),
      DynamoError,
    );
    caller.close();
  } finally {
    server.close();
  }
  // A raw peer writing a bogus length.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const accepted = listener.accept();
  const bad = await Deno.connect({ hostname: "127.0.0.1", port });
  const conn = new TcpFrameConn(await accepted);
  await bad.write(new Uint8Array([0xff, 0xff, 0xff, 0xff, 3]));
  await assert.rejects(conn.receive(), ProtocolError);
  bad.close();
  listener.close();
});

Deno.test("dialling a closed port fails instead of hanging", async () => {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  const started = Date.now();
  await assert.rejects(dialTcp({ tcp: { address: `127.0.0.1:${port}`, stream_id: "x" } }, 1000));
  assert.ok(Date.now() - started < 1000, "refused at once, not after the deadline");
});

Deno.test("a worker's call-home streams share one pooled connection to their caller", async () => {
  const server = TcpResponseServer.listen();
  const pool = new CallHomePool(2000);
  try {
    const pendings = Array.from({ length: 5 }, () => server.expect(crypto.randomUUID()));
    const workers = await Promise.all(pendings.map((p) => pool.dial(p.connectionInfo)));
    const callers = await Promise.all(pendings.map((p) => p.connection));
    assert.ok(workers.every((w) => w instanceof MuxStream));
    assert.equal(new Set(workers.map((w) => (w as MuxStream).connection)).size, 1);
    await Promise.all(workers.map(async (w, i) => {
      for (let n = 0; n < 3; n++) {
        await w.send({ type: FrameType.Data, payload: new Uint8Array([i, n]) });
      }
      await w.send({ type: FrameType.Sentinel, payload: new Uint8Array(0) });
      await w.end();
    }));
    for (const [i, c] of callers.entries()) {
      const got: number[][] = [];
      for (let f = await c.receive(); f?.type === FrameType.Data; f = await c.receive()) {
        got.push([...f.payload]);
      }
      assert.deepEqual(got, [[i, 0], [i, 1], [i, 2]]);
      c.close();
    }
    // A stream the caller gave up on is reset: the worker sees its stream closed.
    const gone = server.expect(crypto.randomUUID());
    gone.cancel();
    const orphan = await pool.dial(gone.connectionInfo);
    assert.equal(await orphan.receive(), null);
    assert.ok(orphan.closed);
  } finally {
    pool.close();
    server.close();
  }
});
