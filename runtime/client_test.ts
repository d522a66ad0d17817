// Client units on the embedded cluster: what its discovery watch makes of malformed
// instance records.

import assert from "node:assert/strict";
import { eventually } from "../tests/_helpers/backends.ts";
import { DistributedRuntime, EmbeddedCluster } from "./distributed_runtime.ts";
import { instanceKey } from "./keys.ts";
import type { RouteTraceEvent } from "./route_trace.ts";

const words = async function* (req: { text: string }) {
  for (const w of req.text.split(" ")) yield w;
};

Deno.test("a client skips malformed instance records and drops an instance whose record turns malformed", async () => {
  const embedded = new EmbeddedCluster();
  const events: RouteTraceEvent[] = [];
  const caller = await DistributedRuntime.connect({ embedded, routeTrace: (e) => events.push(e) });
  const worker = await DistributedRuntime.connect({ embedded });
  try {
    worker.namespace("ns").component("backend").endpoint("generate").serveEndpoint(words)
      .catch(() => {});
    await caller.discovery.put(instanceKey("ns", "backend", "generate", "bad"), "{not json");
    const client = await caller.namespace("ns").component("backend").endpoint("generate").client();
    await client.waitForInstances({ timeoutMs: 5000 });
    assert.deepEqual(client.instanceIds(), [worker.instanceId], "the malformed record is skipped");
    const got = [];
    for await (const w of await client.generate({ text: "still here" })) got.push(w);
    assert.deepEqual(got, ["still", "here"]);

    const key = instanceKey("ns", "backend", "generate", worker.instanceId);
    const good = (await caller.discovery.get(key))!;
    await caller.discovery.put(key, JSON.stringify({ instance_id: worker.instanceId }));
    await eventually(() => client.instanceIds().length === 0, 2000, "the instance is dropped");
    assert.ok(events.some((e) => e.event === "gone" && e.instance === worker.instanceId));
    await caller.discovery.put(key, good);
    await client.waitForInstances({ timeoutMs: 2000 });
    assert.deepEqual(client.instanceIds(), [worker.instanceId], "a fixed record brings it back");
  } finally {
    await caller.shutdown();
    await worker.shutdown();
  }
});
