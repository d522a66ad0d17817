import assert from "node:assert/strict";
import { haveServers, startServers } from "./servers.ts";

Deno.test({
  name: "startServers() brings up etcd and NATS on free loopback ports",
  ignore: !haveServers(),
  async fn() {
    const s = await startServers();
    try {
      assert.match(s.etcd.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.match(s.nats.url, /^nats:\/\/127\.0\.0\.1:\d+$/);
      const c = await Deno.connect({ hostname: "127.0.0.1", port: s.nats.port });
      c.close();
    } finally {
      await s.stop();
    }
  },
});
