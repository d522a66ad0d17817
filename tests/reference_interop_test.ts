// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Our caller speaks to the reference system: one ai-dynamo 1.6.1 mocker worker (started on
// loopback against real etcd and NATS) is found through its etcd instance record, answers a
// tokens request over its TCP request plane, streams the tokens back to our call-home server,
// and takes the reference's "stop" when a caller leaves a stream early. Skipped, with a message,
// only where scripts/setup_reference.sh cannot install the reference (PyPI unreachable).

import assert from "node:assert/strict";
import { EtcdDiscovery } from "../runtime/discovery/etcd.ts";
import {
  listReferenceInstances,
  listReferenceModels,
  ReferenceClient,
  referenceTokensRequest,
  ReferenceWorkerRefusedError,
  waitForReferenceInstances,
} from "../runtime/reference/mod.ts";
import { CallHomeServer } from "../runtime/reference/call_home.ts";
import { RequestConnection } from "../runtime/reference/request_connection.ts";
import { encodeTwoPart } from "../runtime/transport/reference_wire.ts";
import { encode } from "@msgpack/msgpack";
import { builtinTestModel, DistributedRuntime } from "../mod.ts";
import { Context } from "../runtime/context.ts";
import { haveServers, startEtcd, startNats } from "./_helpers/servers.ts";
import { referencePython } from "./_helpers/reference.ts";

const MODEL = "Qwen3-0.6B";
const ENDPOINT = { namespace: "dynamo", component: "backend", endpoint: "generate" };

if (!haveServers()) {
  console.warn("reference_interop_test skipped: etcd or nats-server not installed");
}
const python = haveServers() ? await referencePython("reference_interop_test") : undefined;

Deno.test({
  name: "a reference mocker found through etcd streams max_tokens tokens to our client",
  ignore: python === undefined,
  fn: async (t) => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const mocker = new Deno.Command(python!, {
      args: [
        "-m",
        "dynamo.mocker",
        "--model-path",
        await builtinTestModel(),
        "--model-name",
        MODEL,
      ],
      env: {
        ETCD_ENDPOINTS: etcd.url,
        NATS_SERVER: nats.url,
        DYN_TCP_RPC_HOST: "127.0.0.1",
        DYN_EVENT_PLANE_HOST: "127.0.0.1",
        DYN_TCP_RESPONSE_STREAM_HOST: "127.0.0.1",
        DYN_SYSTEM_HOST: "127.0.0.1",
        DYN_LOG: "warn",
      },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const stderr = new Response(mocker.stderr).text();
    const discovery = new EtcdDiscovery({ endpoints: [etcd.url] });
    const client = ReferenceClient.create({ ackTimeoutMs: 5_000, idleTimeoutMs: 15_000 });
    try {
      const [worker] = await waitForReferenceInstances(discovery, ENDPOINT, { timeoutMs: 40_000 })
        .catch(async (err) => {
          mocker.kill("SIGKILL");
          throw new Error(`${err.message}; mocker stderr: ${(await stderr).slice(-2000)}`);
        });
      assert.ok(worker);
      assert.equal(worker.hostname, "127.0.0.1");
      assert.equal(worker.codec, "msgpack");

      await t.step("its model card names the model and the endpoint that serves it", async () => {
        const deadline = Date.now() + 20_000;
        let models = await listReferenceModels(discovery);
        while (models.length === 0 && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 200));
          models = await listReferenceModels(discovery);
        }
        assert.equal(models.length, 1, "one model card within 20 s");
        const [model] = models;
        assert.equal(model!.name, MODEL);
        assert.equal(model!.instanceId, worker.instanceId);
        assert.equal(model!.endpoint, "generate");
        assert.equal(model!.modelInput, "Tokens");
      });

      await t.step("max_tokens tokens come back and the stream ends cleanly", async () => {
        const request = referenceTokensRequest({
          model: MODEL,
          tokenIds: [9707, 11, 1879, 0],
          maxTokens: 6,
          ignoreEos: true,
        });
        const outputs = [];
        for await (const out of client.generate(worker, request)) outputs.push(out);
        const tokens = outputs.flatMap((o) => o.token_ids);
        assert.equal(tokens.length, 6, `tokens: ${JSON.stringify(outputs)}`);
        assert.equal(outputs.at(-1)!.finish_reason, "length");
      });

      await t.step("concurrent requests to one worker each get their own stream", async () => {
        const runs = await Promise.all([3, 4, 5].map(async (maxTokens) => {
          const request = referenceTokensRequest({
            model: MODEL,
            tokenIds: [9707, maxTokens],
            maxTokens,
            ignoreEos: true,
          });
          let n = 0;
          for await (const out of client.generate(worker, request)) n += out.token_ids.length;
          return n;
        }));
        assert.deepEqual(runs, [3, 4, 5]);
      });

      await t.step(
        "a caller that leaves early stops the stream; the worker serves on",
        async () => {
          const long = referenceTokensRequest({
            model: MODEL,
            tokenIds: [9707, 1],
            maxTokens: 500,
            ignoreEos: true,
          });
          let seen = 0;
          for await (const out of client.generate(worker, long)) {
            seen += out.token_ids.length;
            if (seen >= 2) break;
          }
          const controller = new AbortController();
          const stream = client.generate(worker, long, { signal: controller.signal });
          await assert.rejects(async () => {
            for await (const _ of stream) controller.abort();
          }, (err: Error) => err.name === "CancelledError");
          const again = referenceTokensRequest({ model: MODEL, tokenIds: [9707], maxTokens: 2 });
          let n = 0;
          for await (const out of client.generate(worker, again)) n += out.token_ids.length;
          assert.equal(n, 2);
        },
      );

      await t.step(
        'on the wire: after "stop" the worker sends nothing more and hangs up',
        async () => {
          // Below the client, to see what the worker does with the control frame the client sends.
          const server = CallHomeServer.listen();
          const conn = await RequestConnection.connect(worker.hostname, worker.port, 5_000);
          try {
            const id = crypto.randomUUID();
            const subject = crypto.randomUUID();
            const home = server.expect(subject, 10_000);
            const control = {
              id,
              request_type: "single_in",
              response_type: "many_out",
              payload_codec: "msgpack",
              connection_info: {
                transport: "tcp_server",
                info: JSON.stringify({
                  address: server.address,
                  subject,
                  context: id,
                  stream_type: "response",
                }),
              },
            };
            const request = referenceTokensRequest({
              model: MODEL,
              tokenIds: [9707, 2],
              maxTokens: 400,
              ignoreEos: true,
            });
            await conn.send({
              endpointPath: worker.endpointPath,
              headers: { "request-id": id, "x-endpoint-path": worker.endpointPath },
              payload: encodeTwoPart({
                header: new TextEncoder().encode(JSON.stringify(control)),
                body: encode(request),
              }),
            }, 5_000);
            const { conn: response, reader } = await home;
            try {
              assert.deepEqual(
                JSON.parse(
                  new TextDecoder().decode((await reader.next(5_000, "prologue"))!.header),
                ),
                {
                  error: null,
                },
              );
              for (let i = 0; i < 2; i++) assert.ok(await reader.next(5_000, "an item"));
              await response.write(
                encodeTwoPart({
                  header: new TextEncoder().encode('"stop"'),
                  body: new Uint8Array(0),
                }),
              );
              // Items already on the wire may still arrive; then the worker closes, no sentinel.
              let after = 0;
              for (;;) {
                const frame = await reader.next(5_000, "the worker hanging up after stop");
                if (!frame) break;
                assert.equal(frame.header.length, 0, "no control frame (no sentinel) after stop");
                after++;
              }
              assert.ok(after < 50, `${after} items after stop`);
            } finally {
              response.close();
            }
          } finally {
            conn.close();
            await server.close();
          }
        },
      );

      await t.step(
        "our plain Client reaches the reference mocker through its instance record",
        async () => {
          const runtime = await DistributedRuntime.connect({
            discovery: "etcd",
            requestPlane: "tcp",
            etcdEndpoints: etcd.url,
            natsServer: nats.url,
          });
          try {
            const ours = await runtime.namespace("dynamo").component("backend").endpoint(
              "generate",
            ).client();
            await ours.waitForInstances({ timeoutMs: 10_000 });
            assert.deepEqual(ours.instanceIds(), [worker.instanceId]);
            const request = referenceTokensRequest({
              model: MODEL,
              tokenIds: [9707, 11],
              maxTokens: 5,
              ignoreEos: true,
            });
            const tokens: number[] = [];
            for await (const out of await ours.generate(request)) {
              tokens.push(...(out as { token_ids: number[] }).token_ids);
            }
            assert.equal(tokens.length, 5);
            // Stopping the request's context sends the reference's "stop": the stream ends.
            const context = new Context();
            const long = referenceTokensRequest({
              model: MODEL,
              tokenIds: [9707, 3],
              maxTokens: 400,
              ignoreEos: true,
            });
            let seen = 0;
            for await (const out of await ours.generate(long, { context })) {
              seen += (out as { token_ids: number[] }).token_ids.length;
              if (seen >= 2) context.stopGenerating();
            }
            assert.ok(seen >= 2 && seen < 400, `${seen} tokens after the stop`);
          } finally {
            await runtime.shutdown();
          }
        },
      );

      await t.step("a wrong endpoint path is refused by the worker", async () => {
        const wrong = { ...worker, endpointPath: `${worker.instanceId}/dynamo/backend/nope` };
        const request = referenceTokensRequest({ model: MODEL, tokenIds: [1], maxTokens: 1 });
        await assert.rejects(
          async () => {
            for await (const _ of client.generate(wrong, request)) { /* nothing comes */ }
          },
          (err: Error) =>
            err instanceof ReferenceWorkerRefusedError && /unknown endpoint/.test(err.reason),
        );
        // The refusal is an acknowledgement like any other: the connection serves on.
        let n = 0;
        for await (const out of client.generate(worker, { ...request, token_ids: [9707] })) {
          n += out.token_ids.length;
        }
        assert.equal(n, 1);
      });

      await t.step("a worker gone from its address is refused, not waited on", async () => {
        mocker.kill("SIGKILL");
        await mocker.status;
        const request = referenceTokensRequest({ model: MODEL, tokenIds: [1], maxTokens: 1 });
        await assert.rejects(async () => {
          for await (const _ of client.generate(worker, request)) { /* nothing comes */ }
        }, ReferenceWorkerRefusedError);
        // Its record outlives it until its lease expires; the listing still parses it.
        assert.ok((await listReferenceInstances(discovery, ENDPOINT)).length <= 1);
      });
    } finally {
      try {
        mocker.kill("SIGKILL");
      } catch { /* gone */ }
      await mocker.status;
      await stderr.catch(() => "");
      await client.close();
      await discovery.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});
