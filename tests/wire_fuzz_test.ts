// Bad input on the wire (issue: reliability): random payloads published to a worker's NATS
// subject, and random bytes and frames sent over the TCP call-home connection to a caller
// waiting for its response stream. Nothing may crash: the worker keeps serving, the caller
// gets a clean error for the poisoned request and its next request works.

import assert from "node:assert/strict";
import fc from "fast-check";
import { connect as natsConnect } from "nats";
import { DistributedRuntime, type DistributedRuntimeOptions, DynamoError } from "../mod.ts";
import { openStream } from "../runtime/stream.ts";
import { decodeRequest, FrameType, type RequestHeader } from "../runtime/transport/mod.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";

const RUNS = Number(Deno.env.get("DYN_FUZZ_RUNS") ?? 100);

const words = async function* (req: { text: string }) {
  for (const w of req.text.split(" ")) yield w;
};

/** A length-prefixed frame (u32 BE length of type + payload, then u8 type) as the wire has it. */
function frameBytes(type: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + payload.length);
  new DataView(out.buffer).setUint32(0, 1 + payload.length);
  out[4] = type;
  out.set(payload, 5);
  return out;
}

Deno.test({
  name: "random NATS payloads to a worker and random call-home bytes to a caller crash nothing",
  ignore: !haveServers(),
  async fn(t) {
    const servers = await startServers();
    const options: DistributedRuntimeOptions = { ...servers.runtimeOptions, requestPlane: "nats" };
    const worker = await DistributedRuntime.connect(options);
    const caller = await DistributedRuntime.connect(options);
    const nc = await natsConnect({ servers: servers.nats.url });
    try {
      const endpoint = worker.namespace("fuzz").component("backend").endpoint("generate");
      void endpoint.serveEndpoint(words);
      const client = await caller.namespace("fuzz").component("backend").endpoint("generate")
        .client();
      await client.waitForInstances({ timeoutMs: 10_000 });
      const ask = async () => {
        const items: string[] = [];
        for await (const w of await client.generate<string>({ text: "still serving" })) {
          items.push(w);
        }
        assert.deepEqual(items, ["still", "serving"]);
      };
      await ask();

      await t.step("random payloads on the worker's subject", async () => {
        const subject = endpoint.subject;
        await fc.assert(
          fc.asyncProperty(
            fc.oneof(
              fc.uint8Array({ maxLength: 512 }),
              fc.json().map((j) => new TextEncoder().encode(j)),
              // A well-formed header with a random body, and a header pointing nowhere.
              fc.jsonValue().map((body) =>
                new TextEncoder().encode(JSON.stringify({
                  header: {
                    id: crypto.randomUUID(),
                    request_type: "single_in",
                    response_type: "many_out",
                    connection_info: { tcp: { address: "127.0.0.1:1", stream_id: "x" } },
                  },
                  body,
                }))
              ),
            ),
            async (bytes) => {
              nc.publish(subject, bytes);
              await nc.flush();
            },
          ),
          { numRuns: RUNS },
        );
        await ask();
      });

      await t.step("random bytes and frames on a caller's call-home connection", async () => {
        // A fake worker: it takes the caller's request off NATS, dials the caller's
        // listener as a worker would, and sends garbage instead of a response stream.
        const sub = nc.subscribe("fuzz.fake");
        const pending: Uint8Array[] = [];
        const served = (async () => {
          for await (const msg of sub) {
            msg.respond(new Uint8Array(0));
            const garbage = pending.shift() ?? new Uint8Array(0);
            const { header } = decodeRequest(msg.data) as { header: RequestHeader };
            const { address, stream_id } =
              (header.connection_info as { tcp: { address: string; stream_id: string } }).tcp;
            const at = address.lastIndexOf(":");
            const conn = await Deno.connect({
              hostname: address.slice(0, at),
              port: Number(address.slice(at + 1)),
            });
            try {
              // Half the time a valid handshake first, so the garbage reaches the stream reader.
              if (garbage.length % 2 === 0) {
                await conn.write(
                  frameBytes(FrameType.Handshake, new TextEncoder().encode(stream_id)),
                );
              }
              await conn.write(garbage);
            } catch {
              // the caller hung up first: also fine
            } finally {
              conn.close();
            }
          }
        })();
        await fc.assert(
          fc.asyncProperty(
            fc.oneof(
              fc.uint8Array({ maxLength: 256 }),
              fc.tuple(fc.integer({ min: 0, max: 255 }), fc.uint8Array({ maxLength: 64 })).map((
                [type, payload],
              ) => frameBytes(type, payload)),
              // A frame that claims to be huge, then stops.
              fc.constant(Uint8Array.of(0x7f, 0xff, 0xff, 0xff, FrameType.Data, 1, 2, 3)),
            ),
            async (garbage) => {
              pending.push(garbage);
              try {
                const stream = await openStream(caller.plane, "fuzz.fake", "fake", { text: "x" }, {
                  connectTimeoutMs: 1000,
                });
                for await (const _ of stream) { /* garbage must end the stream with an error */ }
                assert.fail("a stream of garbage ended as if complete");
              } catch (err) {
                assert.ok(
                  err instanceof DynamoError,
                  `a clean error, got ${err instanceof Error ? err.stack : String(err)}`,
                );
              }
            },
          ),
          { numRuns: Math.min(RUNS, 15) },
        );
        sub.unsubscribe();
        await served;
        await ask();
      });
    } finally {
      await nc.close();
      await caller.shutdown();
      await worker.shutdown();
      await servers.stop();
    }
  },
});
