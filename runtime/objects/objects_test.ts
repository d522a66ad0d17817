import assert from "node:assert/strict";
import { connect } from "nats";
import { MemoryObjectStore, NatsObjectStore, type ObjectStore } from "./mod.ts";
import { haveServers, startNats } from "../../tests/_helpers/servers.ts";

async function contract(store: ObjectStore) {
  const big = crypto.getRandomValues(new Uint8Array(65536)).map((b, i) => b ^ i);
  const data = new Uint8Array(3 * 1024 * 1024);
  for (let off = 0; off < data.length; off += big.length) {
    data.set(big.subarray(0, data.length - off), off);
  }
  assert.equal(await store.has("sha256/abc:tokenizer.json"), false);
  assert.equal(await store.get("sha256/abc:tokenizer.json"), undefined);
  await store.put("sha256/abc:tokenizer.json", data);
  assert.equal(await store.has("sha256/abc:tokenizer.json"), true);
  assert.deepEqual(await store.get("sha256/abc:tokenizer.json"), data);
}

Deno.test("MemoryObjectStore stores and returns copies of blobs", async () => {
  await contract(new MemoryObjectStore());
});

Deno.test({
  name: "NatsObjectStore stores a 3 MiB blob under a name with odd characters in JetStream",
  ignore: !haveServers(),
  async fn() {
    const nats = await startNats();
    const nc = await connect({ servers: nats.url });
    try {
      await contract(new NatsObjectStore(nc, "test_objects"));
    } finally {
      await nc.close();
      await nats.stop();
    }
  },
});
