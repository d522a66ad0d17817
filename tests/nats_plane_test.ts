// The NATS request plane's acknowledgements, on a real nats-server: each request's answer is
// matched to it on the plane's one reply subscription, "no responders" fails fast, silence
// times out, and late answers or a closed plane leave nothing hanging.

import assert from "node:assert/strict";
import { haveServers, startNats } from "./_helpers/servers.ts";
import { NatsRequestPlane } from "../runtime/transport/nats.ts";
import { DynamoError, NoInstancesError, TimeoutError } from "../runtime/errors.ts";

const skip = !haveServers();

/** A nats-server and two planes on it, the caller's and the worker's, all stopped after `fn`. */
async function withPlanes(
  fn: (caller: NatsRequestPlane, worker: NatsRequestPlane) => Promise<void>,
): Promise<void> {
  const nats = await startNats();
  const caller = await NatsRequestPlane.connect({ servers: nats.url, name: "caller" });
  const worker = await NatsRequestPlane.connect({ servers: nats.url, name: "worker" });
  try {
    await fn(caller, worker);
  } finally {
    await caller.close();
    await worker.close();
    await nats.stop();
  }
}

Deno.test({
  name: "NATS plane: acknowledgements reach their own requests; no responders and silence fail",
  ignore: skip,
  fn: () =>
    withPlanes(async (caller, worker) => {
      // 300 requests at once over two subjects: every one acknowledged, each payload seen once.
      const seen = new Map<string, number>();
      const count = (p: unknown) => {
        const key = new TextDecoder().decode(p as Uint8Array);
        seen.set(key, (seen.get(key) ?? 0) + 1);
      };
      await worker.serve("plane.a", count);
      await worker.serve("plane.b", count);
      const sends = Array.from(
        { length: 300 },
        (_, i) =>
          caller.request(`plane.${i % 2 ? "a" : "b"}`, new TextEncoder().encode(`r${i}`), {
            timeoutMs: 5000,
          }),
      );
      await Promise.all(sends);
      assert.equal(seen.size, 300);
      for (const n of seen.values()) assert.equal(n, 1);

      // Nobody subscribed: the server's 503 fails the request at once, not at its deadline.
      const t0 = performance.now();
      await assert.rejects(
        caller.request("plane.nobody", new Uint8Array(1), { timeoutMs: 5000 }),
        NoInstancesError,
      );
      assert.ok(performance.now() - t0 < 2000, "no responders is not a timeout");

      // A subscriber that never acknowledges: the deadline (on the shared coarse timer).
      const silent = worker.nc.subscribe("plane.silent", { callback: () => {} });
      await worker.nc.flush();
      const t1 = performance.now();
      await assert.rejects(
        caller.request("plane.silent", new Uint8Array(1), { timeoutMs: 150 }),
        TimeoutError,
      );
      const waited = performance.now() - t1;
      assert.ok(waited >= 140 && waited < 2000, `timed out after ${waited} ms`);

      // A late acknowledgement (after the deadline) is dropped; the next request still works.
      const late = worker.nc.subscribe("plane.late", {
        callback: (_err, msg) => setTimeout(() => msg.respond(new Uint8Array(0)), 300),
      });
      await worker.nc.flush();
      await assert.rejects(
        caller.request("plane.late", new Uint8Array(1), { timeoutMs: 100 }),
        TimeoutError,
      );
      await new Promise((r) => setTimeout(r, 350));
      await caller.request("plane.a", new TextEncoder().encode("after"), { timeoutMs: 5000 });
      assert.equal(seen.get("after"), 1);
      silent.unsubscribe();
      late.unsubscribe();

      // A request waiting when the plane closes fails instead of hanging to its deadline.
      const hung = worker.nc.subscribe("plane.hung", { callback: () => {} });
      await worker.nc.flush();
      const pending = caller.request("plane.hung", new Uint8Array(1), { timeoutMs: 60_000 });
      await new Promise((r) => setTimeout(r, 50));
      const t2 = performance.now();
      await caller.close();
      await assert.rejects(pending, DynamoError);
      assert.ok(performance.now() - t2 < 5000, "a closed plane ends its waits");
      hung.unsubscribe();
    }),
});

Deno.test({
  name: "NATS plane: a subject is served once serve resolves, for a caller on another connection",
  ignore: skip,
  // A worker registers its instance as soon as serve resolves, and callers on their own
  // connections send at once: the server must have the subscription by then, or the request
  // gets "no responders" (NoInstancesError).
  fn: () =>
    withPlanes(async (caller, worker) => {
      let served = 0;
      for (let i = 0; i < 200; i++) {
        const subject = `plane.fresh.${i}`;
        const sub = await worker.serve(subject, () => served++);
        await caller.request(subject, new Uint8Array([i & 0xff]), { timeoutMs: 5000 });
        await sub.unsubscribe();
      }
      assert.equal(served, 200);
    }),
});
