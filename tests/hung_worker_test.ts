// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// A worker that stops without dying (issue: reliability at the boundaries): SIGSTOP, as a GC or
// swap pause, a deadlocked engine or a partition would do. Its stream in flight must not hang:
// the worker's heartbeats stop, its lease expires and it leaves discovery, and the stream fails
// over to the other worker within the lease TTL plus 5 s, so the client gets one complete,
// exact answer. After SIGCONT the worker re-registers and serves again with nobody's help.
// Frontend and workers run as real processes on etcd and NATS with the default deadlines.

import assert from "node:assert/strict";
import { builtinTestModel } from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";
import { frontendUrl, spawnFrontend, stopChild } from "./_helpers/frontend.ts";
import { type ChildHandle, spawnDeno } from "./_helpers/process.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";

const WORKER = new URL("./_helpers/llm_worker.ts", import.meta.url).pathname;
const MODEL = "Qwen3-0.6B";
const LEASE_TTL_S = 3;
const PROMPT = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen";

Deno.test({
  name:
    "a SIGSTOPped worker's stream migrates within the lease TTL + 5 s; after SIGCONT it serves again",
  ignore: !haveServers(),
  async fn() {
    const servers = await startServers();
    const env = { ...servers.env, DYN_LOG: "warn", DYN_LEASE_TTL: String(LEASE_TTL_S) };
    const modelPath = await builtinTestModel();
    const children: ChildHandle[] = [];
    let stopped: ChildHandle | undefined;
    try {
      const front = spawnFrontend(env);
      children.push(front);
      const base = await frontendUrl(front);
      const workers: ChildHandle[] = [];
      for (let i = 0; i < 2; i++) {
        const w = spawnDeno(WORKER, env, [
          modelPath,
          "--delay-ms",
          "250",
          "--migration-limit",
          "3",
        ]);
        children.push(w);
        workers.push(w);
        await w.waitFor((l) => "ready" in l, 30_000, "a worker to register");
      }
      const complete = async (stream: boolean) => {
        const r = await fetch(`${base}/v1/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: MODEL, prompt: PROMPT, stream }),
          signal: AbortSignal.timeout(60_000),
        });
        assert.equal(r.status, 200);
        if (!stream) return (await r.json()).choices[0].text as string;
        let text = "";
        for (const line of (await r.text()).split("\n")) {
          if (!line.startsWith("data: {")) continue;
          text += JSON.parse(line.slice(6)).choices?.[0]?.text ?? "";
        }
        return text;
      };
      await eventually(
        async () => {
          try {
            return (await complete(false)).length > 0;
          } catch {
            return false;
          }
        },
        20_000,
        "the model to answer",
      );
      const expected = await complete(false);

      // A long stream; stop whichever worker took it once it has sent a few tokens.
      const seen = workers.map((w) => w.lines.length);
      const answer = complete(true);
      const owner = await eventually(
        () =>
          workers.findIndex((w, i) =>
            w.lines.slice(seen[i]).some((l) => "request" in (l as object))
          ) >= 0,
        10_000,
        "a worker to take the request",
      ).then(() =>
        workers.findIndex((w, i) => w.lines.slice(seen[i]).some((l) => "request" in (l as object)))
      );
      await new Promise((r) => setTimeout(r, 800));
      stopped = workers[owner]!;
      const stoppedAt = performance.now();
      stopped.kill("SIGSTOP");
      const text = await answer;
      const tookMs = performance.now() - stoppedAt;
      console.log(`stream on a SIGSTOPped worker completed ${tookMs.toFixed(0)} ms after the stop`);
      assert.equal(text, expected, "one complete, exact answer");
      assert.ok(
        tookMs < (LEASE_TTL_S + 5) * 1000,
        `the stream took ${tookMs.toFixed(0)} ms after the stop (limit: lease TTL + 5 s)`,
      );

      // Resumed, the worker finds its lease gone, registers again and takes requests.
      stopped.kill("SIGCONT");
      const before = stopped.lines.length;
      const resumed = stopped;
      stopped = undefined;
      await eventually(
        async () => {
          await complete(false);
          return resumed.lines.slice(before).some((l) => "request" in (l as object));
        },
        30_000,
        "the resumed worker to serve a request",
      );
    } finally {
      if (stopped) stopped.kill("SIGCONT");
      for (const c of children.slice(1)) c.kill("SIGKILL");
      await Promise.all(children.slice(1).map((c) => c.status));
      await stopChild(children[0]!);
      await servers.stop();
    }
  },
});
