// The test helpers' process stop: a child that ignores SIGTERM is killed after the grace
// period; one that has exited already is no error.

import assert from "node:assert/strict";
import { terminate } from "./process.ts";

Deno.test("terminate: SIGKILL after the grace period for a child that ignores SIGTERM", async () => {
  const child = new Deno.Command("sh", {
    args: ["-c", 'trap "" TERM; echo ready; sleep 30'],
    stdout: "piped",
  }).spawn();
  // Wait until the trap is set, or SIGTERM could end the shell before it.
  const reader = child.stdout.getReader();
  await reader.read();
  reader.releaseLock();
  const t0 = performance.now();
  const status = await terminate(child, 300);
  assert.equal(status.signal, "SIGKILL");
  assert.ok(performance.now() - t0 >= 250, "killed only after the grace period");
  await child.stdout.cancel();
});

Deno.test("terminate: a child that has exited already gives its status", async () => {
  const child = new Deno.Command("sh", { args: ["-c", "exit 3"] }).spawn();
  await child.status;
  const status = await terminate(child, 100);
  assert.equal(status.code, 3);
});
