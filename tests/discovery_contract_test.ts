// One contract for the Discovery interface, run on MemoryDiscovery, HubDiscovery and
// EtcdDiscovery.

import assert from "node:assert/strict";
import {
  type Discovery,
  EtcdDiscovery,
  InvalidArgumentError,
  MemoryDiscovery,
  MemoryStore,
  type WatchEvent,
} from "../mod.ts";
import { haveServers, startEtcd } from "./_helpers/servers.ts";
import { HubDiscovery, HubServer } from "../runtime/hub/mod.ts";
import { eventually } from "./_helpers/backends.ts";

type Open = () => Promise<{ a: Discovery; b: Discovery; close: () => Promise<void> }>;

const backends: { name: string; available: boolean; open: Open }[] = [
  {
    name: "memory",
    available: true,
    open: () => {
      const store = new MemoryStore();
      const a = new MemoryDiscovery(store);
      const b = new MemoryDiscovery(store);
      return Promise.resolve({
        a,
        b,
        close: async () => void (await Promise.all([a.close(), b.close()])),
      });
    },
  },
  {
    name: "hub",
    available: true,
    open: async () => {
      const hub = await HubServer.start();
      const a = await HubDiscovery.connect(hub.address);
      const b = await HubDiscovery.connect(hub.address);
      return {
        a,
        b,
        close: async () => (await Promise.all([a.close(), b.close()]), await hub.close()),
      };
    },
  },
  {
    name: "etcd",
    available: haveServers(),
    open: async () => {
      const etcd = await startEtcd();
      const a = new EtcdDiscovery({ endpoints: [etcd.url] });
      const b = new EtcdDiscovery({ endpoints: [etcd.url] });
      return {
        a,
        b,
        close: async () => (await Promise.all([a.close(), b.close()]), await etcd.stop()),
      };
    },
  },
];

/** Collects watch events in the background. */
function record(d: Discovery, prefix: string) {
  const events: WatchEvent[] = [];
  const abort = new AbortController();
  const done = (async () => {
    for await (const ev of d.watch(prefix, { signal: abort.signal })) events.push(ev);
  })();
  return { events, stop: async () => (abort.abort(), await done) };
}

for (const backend of backends) {
  Deno.test({
    name: `discovery contract on ${backend.name}`,
    ignore: !backend.available,
    async fn(t) {
      const { a, b, close } = await backend.open();
      try {
        await t.step("put, get, list by prefix (sorted) and delete", async () => {
          await a.put("p1/b", "2");
          await a.put("p1/a", "1");
          await a.put("p2/x", "3");
          assert.equal(await b.get("p1/a"), "1");
          assert.equal(await b.get("p1/none"), undefined);
          assert.deepEqual(await b.list("p1/"), [{ key: "p1/a", value: "1" }, {
            key: "p1/b",
            value: "2",
          }]);
          await b.delete("p1/a");
          assert.deepEqual((await a.list("p1/")).map((kv) => kv.key), ["p1/b"]);
        });

        await t.step("watch gives the snapshot, then synced, then live changes", async () => {
          await a.put("w/1", "one");
          const w = record(b, "w/");
          await eventually(
            () => w.events.some((e) => e.type === "synced"),
            5000,
            "the watch syncs",
          );
          await a.put("w/2", "two");
          await a.delete("w/1");
          await a.put("other/3", "ignored");
          await eventually(() => w.events.length >= 4, 5000, "four events arrive");
          await w.stop();
          assert.deepEqual(w.events, [
            { type: "put", key: "w/1", value: "one" },
            { type: "synced" },
            { type: "put", key: "w/2", value: "two" },
            { type: "delete", key: "w/1" },
          ]);
        });

        await t.step("revoking a lease deletes its keys and watchers see it", async () => {
          const lease = await a.grantLease(5);
          assert.match(lease.id, /^[0-9a-f]+$/);
          await a.put("l/k", "v", { lease });
          const w = record(b, "l/");
          await eventually(
            () => w.events.some((e) => e.type === "synced"),
            5000,
            "the watch syncs",
          );
          await lease.revoke();
          await eventually(
            () => w.events.some((e) => e.type === "delete" && e.key === "l/k"),
            5000,
            "the delete is seen",
          );
          await w.stop();
          assert.equal(await b.get("l/k"), undefined);
          assert.equal(lease.lost.aborted, false, "a revoke is not a loss");
        });

        await t.step("a bad lease TTL is rejected", async () => {
          await assert.rejects(async () => await a.grantLease(0), InvalidArgumentError);
        });
      } finally {
        await close();
      }
    },
  });
}

Deno.test("MemoryDiscovery: a view closed without revoking lets its leases expire after their TTL", async () => {
  const store = new MemoryStore();
  const dead = new MemoryDiscovery(store);
  const alive = new MemoryDiscovery(store);
  const lease = await dead.grantLease(1);
  await dead.put("k", "v", { lease });
  await dead.close();
  assert.equal(await alive.get("k"), "v", "the key outlives the process for the TTL");
  await eventually(
    async () => (await alive.get("k")) === undefined,
    3000,
    "the key expires with the lease",
  );
  assert.equal(lease.lost.aborted, true);
  await alive.close();
});

Deno.test("EtcdDiscovery rejects endpoints that are not URLs", () => {
  assert.throws(() => new EtcdDiscovery({ endpoints: [] }), InvalidArgumentError);
  assert.throws(() => new EtcdDiscovery({ endpoints: ["localhost:2379/x"] }), InvalidArgumentError);
});
