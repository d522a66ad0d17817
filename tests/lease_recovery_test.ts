// Losing the lease (expiry, revocation behind our back, etcd restart) is detected and the
// worker's instance comes back without anyone restarting it.

import assert from "node:assert/strict";
import { Etcd3 } from "etcd3";
import { DistributedRuntime, EmbeddedCluster } from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";

const words = async function* (req: { text: string }) {
  for (const w of req.text.split(" ")) yield w;
};

Deno.test("an expired lease on the embedded backend is detected and the instance re-registers", async () => {
  const cluster = new EmbeddedCluster();
  const worker = await DistributedRuntime.connect({ embedded: cluster });
  const caller = await DistributedRuntime.connect({ embedded: cluster });
  try {
    const endpoint = worker.namespace("ns").component("c").endpoint("e");
    endpoint.serveEndpoint(words).catch(() => {});
    const client = await caller.namespace("ns").component("c").endpoint("e").client();
    await client.waitForInstances({ timeoutMs: 2000 });
    const firstLease = worker.leaseId;
    cluster.store.expireLease(firstLease);
    await eventually(() => worker.leaseId !== firstLease, 3000, "the worker takes a new lease");
    await eventually(() => client.instanceIds().length === 1, 3000, "the instance re-registers");
    assert.deepEqual(
      client.instanceIds(),
      [worker.instanceId],
      "the instance id survives the new lease",
    );
    assert.notEqual(worker.leaseId, firstLease);
    const got = [];
    for await (const w of await client.generate({ text: "still here" })) got.push(w);
    assert.deepEqual(got, ["still", "here"]);
  } finally {
    await worker.shutdown();
    await caller.shutdown();
  }
});

Deno.test({
  name: "etcd: a lease revoked behind the worker's back, and an etcd restart, are survived",
  ignore: !haveServers(),
  async fn(t) {
    const servers = await startServers();
    const connect = () =>
      DistributedRuntime.connect({
        ...servers.runtimeOptions,
        leaseTtlSeconds: 2,
      });
    const worker = await connect();
    const caller = await connect();
    const admin = new Etcd3({ hosts: servers.etcd.url });
    try {
      worker.namespace("ns").component("c").endpoint("e").serveEndpoint(words).catch(() => {});
      const client = await caller.namespace("ns").component("c").endpoint("e").client();
      await client.waitForInstances({ timeoutMs: 5000 });

      await t.step(
        "a revoked lease is detected and the instance re-registers under a new one",
        async () => {
          const before = worker.leaseId;
          // Revoke by id through the raw lease client: what an operator, or an expiry, does.
          await admin.leaseClient.leaseRevoke({ ID: BigInt("0x" + before).toString() });
          await eventually(
            () => !client.instanceIds().includes(worker.instanceId),
            3000,
            "the instance key vanishes with the lease",
          );
          await eventually(
            () => client.instanceIds().includes(worker.instanceId),
            10_000,
            "the instance re-registers",
          );
          assert.notEqual(worker.leaseId, before);
          const got = [];
          for await (const w of await client.generate({ text: "after revoke" })) got.push(w);
          assert.deepEqual(got, ["after", "revoke"]);
        },
      );

      await t.step("after an etcd restart, clients still route and see new instances", async () => {
        await servers.etcd.kill();
        await new Promise((r) => setTimeout(r, 500));
        await servers.etcd.restart();
        const got = [];
        for await (const w of await client.generate({ text: "etcd restarted" })) got.push(w);
        assert.deepEqual(got, ["etcd", "restarted"]);
        const late = await connect();
        try {
          late.namespace("ns").component("c").endpoint("e").serveEndpoint(words).catch(() => {});
          await eventually(
            () => client.instanceIds().includes(late.instanceId),
            10_000,
            "the watch sees an instance added after the restart",
          );
          await eventually(
            async () => (await admin.getAll().prefix("v1/instances/ns/c/e/").keys()).length === 2,
            10_000,
            "both instances are in etcd",
          );
        } finally {
          await late.shutdown();
        }
      });

      await t.step(
        "etcd down for longer than the lease: the lease is lost, and re-registered when etcd is back",
        async () => {
          const before = worker.leaseId;
          await servers.etcd.kill();
          await new Promise((r) => setTimeout(r, 5000)); // > 2 x TTL: the keep-alive gives up
          await servers.etcd.restart();
          await eventually(
            () => worker.leaseId !== before,
            15_000,
            "the worker grants a new lease",
          );
          await eventually(
            async () =>
              (await admin.getAll().prefix("v1/instances/ns/c/e/").keys()).some((k) =>
                k.endsWith(worker.instanceId)
              ),
            10_000,
            "the instance key is back in etcd",
          );
          await new Promise((r) => setTimeout(r, 3000)); // the old lease expires; the key must stay
          const keys = await admin.getAll().prefix("v1/instances/ns/c/e/").keys();
          assert.ok(
            keys.some((k) => k.endsWith(worker.instanceId)),
            `instance key survived the old lease's expiry: ${keys}`,
          );
          const got = [];
          for await (const w of await client.generate({ text: "back again" })) got.push(w);
          assert.deepEqual(got, ["back", "again"]);
        },
      );
    } finally {
      admin.close();
      await worker.shutdown();
      await caller.shutdown();
      await servers.stop();
    }
  },
});
