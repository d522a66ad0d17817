// A plain `serveEndpoint` worker on the TCP plane answers both framings at the address and path of
// its one instance record: our client over the mux, and the reference's caller (ReferenceClient,
// the reference's request framing, acks and call-home stream) found through the same record.

import assert from "node:assert/strict";
import { DistributedRuntime } from "../distributed_runtime.ts";
import type { Context } from "../context.ts";
import { instanceKey } from "../keys.ts";
import { encodeTwoPart } from "../transport/reference_wire.ts";
import { ReferenceClient } from "./client.ts";
import { ReferenceWorkerRefusedError } from "./errors.ts";
import { parseReferenceInstance } from "./instances.ts";
import { RequestConnection } from "./request_connection.ts";
import { referenceTokensRequest } from "./request.ts";

interface Req {
  token_ids: number[];
}

Deno.test("one plain serveEndpoint worker: our client and the reference's caller on one record and port", async () => {
  const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "tcp" });
  const ended: { id: string; stopped: boolean; sent: number }[] = [];
  // Echoes each prompt token as one output, slowly enough to be stopped midway.
  const handler = async function* (req: Req, ctx: Context) {
    let sent = 0;
    try {
      for (const t of req.token_ids) {
        if (ctx.isStopped()) break;
        await new Promise((r) => setTimeout(r, 5));
        sent++;
        yield { token_ids: [t], text: `<${t}>`, finish_reason: null };
      }
    } finally {
      ended.push({ id: ctx.id, stopped: ctx.isStopped(), sent });
    }
  };
  const endpoint = runtime.namespace("dynamo").component("backend").endpoint("generate");
  const serving = endpoint.serveEndpoint(handler);
  const reference = ReferenceClient.create();
  try {
    const client = await endpoint.client();
    await client.waitForInstances({ timeoutMs: 5000 });
    // Ours, over the mux.
    const mine: number[] = [];
    for await (const out of await client.generate({ token_ids: [1, 2, 3] })) {
      mine.push(...(out as { token_ids: number[] }).token_ids);
    }
    assert.deepEqual(mine, [1, 2, 3]);

    // The reference's caller, from the same record: its framing on the same port.
    const key = instanceKey("dynamo", "backend", "generate", runtime.instanceId);
    const record = (await runtime.discovery.get(key))!;
    const instance = parseReferenceInstance(key, record);
    assert.equal(
      `${instance.hostname}:${instance.port}/${instance.endpointPath}`,
      JSON.parse(record).transport.tcp,
    );
    const request = referenceTokensRequest({ model: "m", tokenIds: [7, 8, 9], maxTokens: 3 });
    const theirs: number[] = [];
    const texts: (string | null)[] = [];
    for await (const out of reference.generate(instance, request)) {
      theirs.push(...out.token_ids);
      texts.push(out.text);
    }
    assert.deepEqual(theirs, [7, 8, 9]);
    assert.deepEqual(texts, ["<7>", "<8>", "<9>"]);

    // The reference caller leaving early ("stop") stops our handler.
    const long = referenceTokensRequest({
      model: "m",
      tokenIds: Array.from({ length: 400 }, (_, i) => i),
      maxTokens: 400,
    });
    let got = 0;
    for await (const _ of reference.generate(instance, long)) {
      if (++got === 3) break;
    }
    await eventually(() => ended.some((e) => e.stopped), "the handler saw the stop");
    const stopped = ended.find((e) => e.stopped)!;
    assert.ok(stopped.sent < 400, `stopped after ${stopped.sent} outputs`);

    // A reference request the door refuses is acked with why; the connection and port go on.
    const conn = await RequestConnection.connect(instance.hostname, instance.port, 2000);
    try {
      const badBody = encodeTwoPart({
        header: new TextEncoder().encode(JSON.stringify({
          id: "x",
          payload_codec: "json",
          connection_info: { transport: "tcp_server", info: "{}" },
        })),
        body: new Uint8Array(),
      });
      await assert.rejects(
        conn.send({ endpointPath: instance.endpointPath, headers: {}, payload: badBody }, 2000),
        (err: Error) =>
          err instanceof ReferenceWorkerRefusedError &&
          /connection info lacks address or subject/.test(err.message),
      );
    } finally {
      conn.close();
    }
    // The reference-framed requests count with the endpoint's own: one of ours, two of theirs
    // (one stopped); the refused one not at all.
    const metrics = await runtime.metrics.render();
    const total = /dynamo_component_requests_total\{[^}]*endpoint="generate"[^}]*\} (\d+)/.exec(
      metrics,
    );
    assert.equal(Number(total?.[1]), 3, metrics);
    const again: number[] = [];
    for await (const out of await client.generate({ token_ids: [4] })) {
      again.push(...(out as { token_ids: number[] }).token_ids);
    }
    assert.deepEqual(again, [4]);
  } finally {
    await reference.close();
    await runtime.shutdown();
    await serving;
  }
});

async function eventually(ok: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
