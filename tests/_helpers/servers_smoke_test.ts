import assert from "node:assert/strict";
import { freePort, haveServers, reservePort, startServers } from "./servers.ts";

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

Deno.test("a port handed out is not handed out again by any test process until its mark is stale", () => {
  const port = freePort(); // marked by this draw where ports are drawn below the kernel's range
  reservePort(port); // marked here otherwise
  assert.equal(reservePort(port), false, "a second draw of the same port was allowed");
  // A mark from a run long gone is taken over, and then holds again.
  const later = Date.now() + 16 * 60_000;
  assert.equal(reservePort(port, later), true);
  assert.equal(reservePort(port, later + 1_000), false);
});
