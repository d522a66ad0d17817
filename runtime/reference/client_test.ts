// ReferenceClient against a fake reference worker in this process that speaks the captured wire
// (request framing, u32 acks, call-home two-part frames): the happy path, and each way a worker
// can fail a caller, classified.

import assert from "node:assert/strict";
import { decode, encode } from "@msgpack/msgpack";
import {
  CancelledError,
  ProtocolError,
  RemoteError,
  StreamIncompleteError,
  TimeoutError,
} from "../errors.ts";
import { encodeTwoPart, TcpRequestDecoder, TwoPartDecoder } from "../transport/reference_wire.ts";
import { ReferenceClient } from "./client.ts";
import { ReferenceWorkerRefusedError } from "./errors.ts";
import type { ReferenceInstance } from "./instances.ts";
import { referenceTokensRequest } from "./request.ts";

const te = new TextEncoder();
const PATH = "abc/dynamo/backend/generate";

/** One request as the fake worker saw it. */
interface Seen {
  endpointPath: string;
  headers: Record<string, string>;
  control: {
    id: string;
    payload_codec: string;
    connection_info: { transport: string; info: string };
  };
  info: { address: string; subject: string; context: string; stream_type: string };
  body: Record<string, unknown>;
}

type Behaviour = (req: Seen, ack: (error?: string) => Promise<void>) => Promise<void>;

/** A loopback listener that decodes reference requests and hands them to `behaviour`. */
function fakeWorker(behaviour: Behaviour) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  const tasks: Promise<void>[] = [];
  const serve = async (conn: Deno.Conn) => {
    const decoder = new TcpRequestDecoder();
    const buf = new Uint8Array(65536);
    const write = (bytes: Uint8Array) => conn.write(bytes).then(() => {});
    try {
      for (;;) {
        const n = await conn.read(buf);
        if (n === null) return;
        for (const req of decoder.push(buf.slice(0, n))) {
          const [msg] = new TwoPartDecoder().push(req.payload);
          const control = JSON.parse(new TextDecoder().decode(msg!.header));
          const seen: Seen = {
            endpointPath: req.endpointPath,
            headers: req.headers,
            control,
            info: JSON.parse(control.connection_info.info),
            body: decode(msg!.body) as Record<string, unknown>,
          };
          tasks.push(behaviour(seen, (error = "") => {
            const data = te.encode(error);
            const ack = new Uint8Array(4 + data.length);
            new DataView(ack.buffer).setUint32(0, data.length);
            ack.set(data, 4);
            return write(ack);
          }));
        }
      }
    } catch { /* closed by the test */ }
  };
  const accepting = (async () => {
    for await (const conn of listener) conns.push(conn), tasks.push(serve(conn));
  })().catch(() => {});
  const port = (listener.addr as Deno.NetAddr).port;
  const instance: ReferenceInstance = {
    instanceId: "abc",
    namespace: "dynamo",
    component: "backend",
    endpoint: "generate",
    hostname: "127.0.0.1",
    port,
    endpointPath: PATH,
    codec: "msgpack",
  };
  return {
    instance,
    /** Connections accepted so far. */
    get accepted() {
      return conns.length;
    },
    async close() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch { /* closed */ }
      }
      await accepting;
      await Promise.allSettled(tasks);
    },
  };
}

const frame = (header?: unknown, body?: unknown) =>
  encodeTwoPart({
    header: header === undefined ? new Uint8Array(0) : te.encode(JSON.stringify(header)),
    body: body === undefined ? new Uint8Array(0) : encode(body),
  });
const item = (tokens: number[], finish: string | null = null) =>
  frame(undefined, {
    data: { data: { token_ids: tokens, text: null, finish_reason: finish } },
    complete_final: false,
  });
const FINAL = frame(undefined, { complete_final: true });
const SENTINEL = frame("sentinel");

/** Dials the caller back as a reference worker does: handshake, then `frames`. */
async function callHome(seen: Seen, frames: Uint8Array[]): Promise<Deno.Conn> {
  const [hostname, port] = seen.info.address.split(":") as [string, string];
  const conn = await Deno.connect({ hostname, port: Number(port) });
  await conn.write(frame({ subject: seen.info.subject, stream_type: "response" }));
  for (const f of frames) await conn.write(f);
  return conn;
}

/** Reads what the caller sends on a response connection until it closes. */
async function readControl(conn: Deno.Conn): Promise<unknown[]> {
  const decoder = new TwoPartDecoder();
  const out: unknown[] = [];
  const buf = new Uint8Array(1024);
  try {
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) break;
      for (const m of decoder.push(buf.slice(0, n))) {
        out.push(JSON.parse(new TextDecoder().decode(m.header)));
      }
    }
  } catch { /* reset */ }
  conn.close();
  return out;
}

const REQUEST = referenceTokensRequest({ model: "m", tokenIds: [1, 2, 3], maxTokens: 3 });

async function collect(stream: AsyncIterable<{ token_ids: number[] }>): Promise<number[]> {
  const out: number[] = [];
  for await (const o of stream) out.push(...o.token_ids);
  return out;
}

async function withClient(
  behaviour: Behaviour,
  fn: (
    client: ReferenceClient,
    instance: ReferenceInstance,
    worker: ReturnType<typeof fakeWorker>,
  ) => Promise<void>,
  options: Parameters<typeof ReferenceClient.create>[0] = {},
) {
  const worker = fakeWorker(behaviour);
  const client = ReferenceClient.create(options);
  try {
    await fn(client, worker.instance, worker);
  } finally {
    await client.close();
    await worker.close();
  }
}

Deno.test("ReferenceClient frames the request as the reference does and streams the items", async () => {
  let seen: Seen | undefined;
  await withClient(async (req, ack) => {
    seen = req;
    await ack();
    const conn = await callHome(req, [
      frame({ error: null }),
      item([7]),
      item([8, 9], "length"),
      FINAL,
      SENTINEL,
    ]);
    assert.deepEqual(await readControl(conn), []);
  }, async (client, instance) => {
    assert.deepEqual(await collect(client.generate(instance, REQUEST)), [7, 8, 9]);
  });
  assert.equal(seen!.endpointPath, PATH);
  assert.equal(seen!.headers["x-endpoint-path"], PATH);
  assert.equal(seen!.headers["request-id"], seen!.control.id);
  assert.equal(seen!.control.payload_codec, "msgpack");
  assert.equal(seen!.control.connection_info.transport, "tcp_server");
  assert.equal(seen!.info.context, seen!.control.id);
  assert.equal(seen!.info.stream_type, "response");
  assert.deepEqual(seen!.body, REQUEST);
});

Deno.test("a response connection cut before the sentinel is StreamIncompleteError", async () => {
  await withClient(async (req, ack) => {
    await ack();
    (await callHome(req, [frame({ error: null }), item([7])])).close();
  }, async (client, instance) => {
    await assert.rejects(
      collect(client.generate(instance, REQUEST)),
      (err: Error) => err instanceof StreamIncompleteError && err.itemsReceived === 1,
    );
  });
});

Deno.test("a malformed frame or item is ProtocolError", async () => {
  const badChecksum = frame({ error: null });
  badChecksum[23] = 1;
  for (const frames of [[badChecksum], [frame({ error: null }), frame(undefined, { x: 1 })]]) {
    await withClient(async (req, ack) => {
      await ack();
      await readControl(await callHome(req, frames));
    }, async (client, instance) => {
      await assert.rejects(collect(client.generate(instance, REQUEST)), ProtocolError);
    });
  }
});

Deno.test("the worker's prologue error is RemoteError", async () => {
  await withClient(async (req, ack) => {
    await ack();
    await readControl(await callHome(req, [frame({ error: "engine exploded" })]));
  }, async (client, instance) => {
    await assert.rejects(
      collect(client.generate(instance, REQUEST)),
      (err: Error) => err instanceof RemoteError && /engine exploded/.test(err.message),
    );
  });
});

Deno.test("an error ack, no ack, or no worker is ReferenceWorkerRefusedError or TimeoutError", async () => {
  let calls = 0;
  await withClient(async (req, ack) => {
    calls++;
    if (calls === 1) return await ack("Server unavailable: unknown endpoint x");
    if (calls === 2) return; // never acks
    await ack();
    await readControl(await callHome(req, [frame({ error: null }), item([1]), FINAL, SENTINEL]));
  }, async (client, instance) => {
    await assert.rejects(
      collect(client.generate(instance, REQUEST)),
      (err: Error) =>
        err instanceof ReferenceWorkerRefusedError && /unknown endpoint/.test(err.message),
    );
    await assert.rejects(collect(client.generate(instance, REQUEST)), TimeoutError);
    // The connection whose ack was lost is dropped; the next request dials a fresh one.
    assert.deepEqual(await collect(client.generate(instance, REQUEST)), [1]);
  }, { ackTimeoutMs: 200 });
  const gone = fakeWorker(() => Promise.resolve());
  await gone.close();
  const client = ReferenceClient.create();
  try {
    await assert.rejects(
      collect(client.generate(gone.instance, REQUEST)),
      ReferenceWorkerRefusedError,
    );
  } finally {
    await client.close();
  }
});

Deno.test("the answer streams from the call home on, before a late acknowledgement", async () => {
  // The worker acks only once the caller has its first item: a caller that waited for the ack
  // before reading the answer would wait until its ack deadline.
  const firstItem = Promise.withResolvers<void>();
  await withClient(async (req, ack) => {
    const conn = await callHome(req, [frame({ error: null }), item([7])]);
    await firstItem.promise;
    await ack();
    for (const f of [item([8], "length"), FINAL, SENTINEL]) await conn.write(f);
    await readControl(conn);
  }, async (client, instance) => {
    const tokens: number[] = [];
    for await (const out of client.generate(instance, REQUEST)) {
      tokens.push(...out.token_ids);
      firstItem.resolve();
    }
    assert.deepEqual(tokens, [7, 8]);
  }, { ackTimeoutMs: 2_000 });
});

Deno.test("a worker that acks but never calls home is TimeoutError", async () => {
  await withClient((_req, ack) => ack(), async (client, instance) => {
    await assert.rejects(
      collect(client.generate(instance, REQUEST)),
      (err: Error) => err instanceof TimeoutError && /called home/.test(err.message),
    );
  }, { callHomeTimeoutMs: 200 });
});

Deno.test('a caller that leaves early or aborts sends the worker "stop"', async () => {
  const controls: unknown[][] = [];
  await withClient(async (req, ack) => {
    await ack();
    const conn = await callHome(req, [frame({ error: null }), item([1]), item([2])]);
    controls.push(await readControl(conn));
  }, async (client, instance) => {
    for await (const _ of client.generate(instance, REQUEST)) break;
    const controller = new AbortController();
    await assert.rejects(async () => {
      for await (const _ of client.generate(instance, REQUEST, { signal: controller.signal })) {
        controller.abort();
      }
    }, CancelledError);
  });
  assert.deepEqual(controls, [["stop"], ["stop"]]);
});

Deno.test("a caller that leaves after the last output closes the connection and sends no stop", async () => {
  const controls: unknown[][] = [];
  await withClient(async (req, ack) => {
    await ack();
    const conn = await callHome(req, [frame({ error: null }), item([1]), item([2], "length")]);
    controls.push(await readControl(conn)); // ends when the caller closes
  }, async (client, instance) => {
    const got: number[] = [];
    for await (const out of client.generate(instance, REQUEST)) {
      got.push(...out.token_ids);
      if (out.finish_reason) break; // before the final item and the sentinel
    }
    assert.deepEqual(got, [1, 2]);
  });
  assert.deepEqual(controls, [[]]);
});

Deno.test("a worker silent past the idle deadline: TimeoutError, and its connection ends", async () => {
  let ended: number | undefined;
  let started = 0;
  await withClient(async (req, ack) => {
    await ack();
    const conn = await callHome(req, [frame({ error: null }), item([1])]); // then nothing
    // A caller that never ends the connection would leave this test waiting: end it at 3 s.
    const giveUp = setTimeout(() => conn.close(), 3_000);
    await readControl(conn);
    clearTimeout(giveUp);
    ended = performance.now() - started;
  }, async (client, instance) => {
    started = performance.now();
    await assert.rejects(
      collect(client.generate(instance, REQUEST)),
      (err: Error) => err instanceof TimeoutError && /nothing within 200 ms/.test(err.message),
    );
  }, { idleTimeoutMs: 200 });
  assert.ok(
    ended !== undefined && ended < 2_000,
    `the worker saw its connection end (${ended} ms)`,
  );
});

Deno.test("requests to one worker share one request connection, concurrently and in turn", async () => {
  await withClient(async (req, ack) => {
    await ack();
    await readControl(await callHome(req, [frame({ error: null }), item([1]), FINAL, SENTINEL]));
  }, async (client, instance, worker) => {
    await Promise.all([1, 2, 3].map(() => collect(client.generate(instance, REQUEST))));
    assert.deepEqual(await collect(client.generate(instance, REQUEST)), [1]);
    assert.equal(worker.accepted, 1);
  });
});

Deno.test("an abort while the worker has not acked yet is CancelledError, at once", async () => {
  await withClient(() => Promise.resolve(), async (client, instance) => {
    const controller = new AbortController();
    const stream = collect(client.generate(instance, REQUEST, { signal: controller.signal }));
    setTimeout(() => controller.abort(), 50);
    await assert.rejects(stream, CancelledError);
  }, { ackTimeoutMs: 60_000 });
});
