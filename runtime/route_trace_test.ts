// The routing trace: what a client reports, and the JSON lines DYN_ROUTE_TRACE=1 writes.

import assert from "node:assert/strict";
import { eventually } from "../tests/_helpers/backends.ts";
import { DistributedRuntime, EmbeddedCluster } from "./distributed_runtime.ts";
import { jsonLinesRouteTrace, type RouteTraceEvent } from "./route_trace.ts";

const words = async function* (req: { text: string }) {
  for (const w of req.text.split(" ")) yield w;
};

/** A traced caller and two serving workers on one embedded cluster. */
async function tracedPair() {
  const embedded = new EmbeddedCluster();
  const events: RouteTraceEvent[] = [];
  const caller = await DistributedRuntime.connect({ embedded, routeTrace: (e) => events.push(e) });
  const workers = [
    await DistributedRuntime.connect({ embedded }),
    await DistributedRuntime.connect({ embedded }),
  ];
  for (const w of workers) {
    w.namespace("ns").component("backend").endpoint("generate").serveEndpoint(words)
      .catch(() => {});
  }
  const client = await caller.namespace("ns").component("backend").endpoint("generate").client();
  await client.waitForInstances({ count: 2, timeoutMs: 5000 });
  const close = async () => {
    await caller.shutdown();
    for (const w of workers) await w.shutdown();
  };
  return { events, workers, client, close, ids: workers.map((w) => w.instanceId) };
}

Deno.test("a client traces each routing decision and each instance it drops or skips", async () => {
  const { events, workers, client, close, ids: [a, b] } = await tracedPair();
  try {
    for await (const _ of await client.direct({ text: "x y" }, a!));
    client.reportInstanceDown(b!);
    await workers[0]!.shutdown();
    await eventually(
      () => events.some((e) => e.event === "gone"),
      2000,
      "the client to see the stopped instance go",
    );
    const path = "ns/backend/generate";
    assert.deepEqual(
      events.filter((e) => e.event !== "up"),
      [
        { event: "route", endpoint: path, instance: a },
        { event: "down", endpoint: path, instance: b },
        { event: "gone", endpoint: path, instance: a },
      ],
    );
    assert.deepEqual(
      events.filter((e) => e.event === "up").map((e) => e.instance).sort(),
      [a, b].sort(),
    );
  } finally {
    await close();
  }
});

Deno.test("jsonLinesRouteTrace numbers and stamps each event on one JSON line", () => {
  const lines: string[] = [];
  let t = 1000;
  const trace = jsonLinesRouteTrace({ write: (l) => lines.push(l), now: () => t++ });
  trace({ event: "route", endpoint: "ns/c/e", instance: "1a" });
  trace({ event: "gone", endpoint: "ns/c/e", instance: "1a" });
  assert.deepEqual(lines.map((l) => JSON.parse(l)), [
    { route_trace: "route", seq: 1, t: 1000, endpoint: "ns/c/e", instance: "1a" },
    { route_trace: "gone", seq: 2, t: 1001, endpoint: "ns/c/e", instance: "1a" },
  ]);
});

Deno.test("an instance reported down is skipped, unless every instance is", async () => {
  const { events, client, close, ids: [a, b] } = await tracedPair();
  try {
    const routed = async () => {
      const before = events.length;
      for await (const _ of await client.generate({ text: "x" }));
      return events.slice(before).filter((e) => e.event === "route").map((e) => e.instance);
    };
    client.reportInstanceDown(b!);
    assert.deepEqual(client.availableInstanceIds(), [a]);
    for (let i = 0; i < 4; i++) assert.deepEqual(await routed(), [a]);
    // Both down: more likely this side's trouble than two dead workers; try them.
    client.reportInstanceDown(a!);
    assert.deepEqual(client.availableInstanceIds().sort(), [a, b].sort());
    assert.equal((await routed()).length, 1);
  } finally {
    await close();
  }
});
