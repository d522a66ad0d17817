// What a new user meets in the first hour: a frontend started without backend settings says
// that it runs on a private, in-process default (and /health reports it) instead of silently
// never meeting its workers.

import assert from "node:assert/strict";
import { frontendUrl, spawnFrontend, stopChild } from "./_helpers/frontend.ts";

Deno.test("a frontend without backend settings warns that it runs on the in-process default", async () => {
  const stderr: string[] = [];
  const child = spawnFrontend(
    { ETCD_ENDPOINTS: "", NATS_SERVER: "", DYN_HUB: "", NO_COLOR: "1" },
    { onStderrLine: (line) => stderr.push(line) },
  );
  try {
    const url = await frontendUrl(child);
    const health = await (await fetch(`${url}/health`)).json();
    assert.equal(health.backends?.process_local, true, JSON.stringify(health));
    assert.equal(health.backends?.discovery, "memory");
    const text = stderr.join("\n");
    assert.match(text, /backends discovery=memory request_plane=local/);
    assert.match(text, /in-process default: only this process can see/);
    assert.match(text, /ETCD_ENDPOINTS and NATS_SERVER/);
  } finally {
    await stopChild(child);
  }
});
