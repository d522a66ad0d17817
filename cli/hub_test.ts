import assert from "node:assert/strict";
import { DistributedRuntime } from "../mod.ts";
import { UsageError } from "./_common.ts";
import { runHub } from "./hub.ts";
import { main } from "./main.ts";

function sink() {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, io: { out: (l: string) => out.push(l), err: (l: string) => err.push(l) } };
}

Deno.test("dynamo hub prints its address and the env line, serves runtimes, and stops", async () => {
  const { out, io } = sink();
  const stop = Promise.withResolvers<void>();
  const running = runHub(["--port", "0", "--token", "t0k"], io, stop.promise);
  const deadline = Date.now() + 5000;
  while (out.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  const address = /^hub listening on (127\.0\.0\.1:\d+)$/.exec(out[0] ?? "")?.[1];
  assert.ok(address, `first line: ${out[0]}`);
  assert.deepEqual(out.slice(1), [`export DYN_HUB=${address}`, "export DYN_HUB_TOKEN=t0k"]);
  const rt = await DistributedRuntime.fromEnv({
    env: { DYN_HUB: address, DYN_HUB_TOKEN: "t0k", DYN_LOG: "error" },
  });
  assert.equal(rt.discovery.kind, "hub");
  await rt.shutdown();
  stop.resolve();
  assert.equal(await running, 0);
});

Deno.test("dynamo hub rejects a bad port with a usage error", async () => {
  await assert.rejects(runHub(["--port", "70000"], sink().io, Promise.resolve()), UsageError);
  const { err, io } = sink();
  assert.equal(await main(["hub", "--port", "x"], io), 2);
  assert.match(err.join("\n"), /--port must be 0..65535/);
});
