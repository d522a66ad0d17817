// An etcd watch whose creation never completes (a stream call: the client library gives it no
// deadline) must not hold back the listing, and must fail within the call deadline so that the
// watch is restarted, instead of waiting forever (a frontend's first listing of an endpoint
// used to wait on it, and every request behind it).

import assert from "node:assert/strict";
import { Etcd3 } from "etcd3";
import { DynamoError, EtcdDiscovery } from "../mod.ts";
import { haveServers, startEtcd } from "./_helpers/servers.ts";

Deno.test({
  name:
    "an etcd watch gives its listing at once and fails within the call deadline when its creation hangs",
  ignore: !haveServers(),
  async fn() {
    const etcd = await startEtcd();
    const discovery = new EtcdDiscovery({ endpoints: [etcd.url], callTimeoutMs: 400 });
    const proto = Etcd3.prototype as unknown as { watch: (this: Etcd3) => unknown };
    const realWatch = proto.watch;
    try {
      await discovery.put("v1/test/a", "1");
      // Every watch created from here on hangs in its creation.
      proto.watch = function (this: Etcd3) {
        const builder = realWatch.call(this) as Record<string, unknown>;
        builder.create = () => new Promise(() => {});
        return builder;
      };
      const seen: string[] = [];
      const started = performance.now();
      let syncedAt = -1;
      const watching = (async () => {
        for await (const ev of discovery.watch("v1/test/")) {
          seen.push(ev.type === "synced" ? "synced" : `${ev.type}:${ev.key}`);
          if (ev.type === "synced") syncedAt = performance.now() - started;
        }
      })();
      let guard: ReturnType<typeof setTimeout> | undefined;
      const hung = new Promise<never>((_, reject) => {
        guard = setTimeout(() => reject(new Error("the watch still waits after 10 s")), 10_000);
      });
      await assert.rejects(
        Promise.race([watching, hung]).finally(() => clearTimeout(guard)),
        (err: unknown) =>
          err instanceof DynamoError && /not created within 400 ms/.test(String(err)),
      );
      const failedAt = performance.now() - started;
      assert.deepEqual(seen, ["put:v1/test/a", "synced"]);
      assert.ok(syncedAt >= 0 && syncedAt < 400, `listing after ${syncedAt} ms`);
      assert.ok(failedAt >= 350 && failedAt < 3000, `failed after ${failedAt} ms`);
    } finally {
      proto.watch = realWatch;
      await discovery.close();
      await etcd.stop();
    }
  },
});
