// deno-lint-ignore-file no-console -- a test that says why it is skipped
// The test helper that starts a reference frontend (ai-dynamo 1.6.1): when another process took
// the port it was given before it bound it, the frontend starts again on a fresh port, and the
// helper does not mistake the other process's answers on the taken port for the frontend's.
// (A CI run failed on such a taken port: "Failed to start HTTP server: port … already in use".)

import assert from "node:assert/strict";
import { freePort, haveServers, startEtcd, startNats } from "./_helpers/servers.ts";
import { listedModels, referencePython, startReferenceFrontend } from "./_helpers/reference.ts";

const python = haveServers() ? await referencePython("reference_frontend_port_test") : undefined;
if (!haveServers()) {
  console.warn("reference_frontend_port_test skipped: etcd or nats-server not installed");
}

Deno.test({
  name: "a reference frontend whose port another process holds starts again on a fresh port",
  ignore: python === undefined,
  async fn() {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    // Another process's server on the first port drawn: it accepts connections.
    const squatter = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const taken = (squatter.addr as Deno.NetAddr).port;
    const accepting = (async () => {
      for await (const conn of squatter) conn.close();
    })().catch(() => {});
    const drawn: number[] = [];
    const ports = [taken];
    try {
      const front = await startReferenceFrontend(
        python!,
        ["--router-mode", "round-robin"],
        { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url },
        {
          port: () => {
            const port = ports.shift() ?? freePort();
            drawn.push(port);
            return port;
          },
        },
      );
      try {
        assert.equal(drawn.length, 2, `ports drawn: ${drawn}`);
        assert.notEqual(front.port, taken);
        assert.equal(front.base, `http://127.0.0.1:${front.port}`);
        // It is the frontend that answers there.
        assert.deepEqual(await listedModels(front.base), []);
      } finally {
        await front.stop();
      }
    } finally {
      squatter.close();
      await accepting;
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});
