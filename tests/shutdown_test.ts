// Graceful shutdown (issue: reliability): SIGTERM to the frontend drains the HTTP streams
// in flight and refuses new work; SIGTERM to a worker lets its stream in flight finish (or
// migrate), takes its instance out of discovery at once and exits 0.

import assert from "node:assert/strict";
import OpenAI from "openai";
import { builtinTestModel, DistributedRuntime, type DistributedRuntimeOptions } from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";
import { MODEL, startDynamoRun } from "./_helpers/dynamo_run.ts";
import { frontendUrl, spawnFrontend } from "./_helpers/frontend.ts";
import { type ChildHandle, spawnDeno } from "./_helpers/process.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";

const WORKER = new URL("./_helpers/llm_worker.ts", import.meta.url).pathname;
const PROMPT = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen";

/** Reads a completion stream; `onFirst` runs after its first chunk. */
async function read(
  stream: AsyncIterable<OpenAI.Completions.Completion>,
  onFirst: () => void,
): Promise<{ text: string; finish: string | null }> {
  let text = "";
  let finish: string | null = null;
  let first = true;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
    if (first) {
      first = false;
      onFirst();
    }
  }
  return { text, finish };
}

async function exitWithin(child: ChildHandle, ms: number): Promise<Deno.CommandStatus> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"late">((r) => (timer = setTimeout(() => r("late"), ms)));
  const status = await Promise.race([child.status, late]);
  clearTimeout(timer);
  if (status === "late") {
    child.kill("SIGKILL");
    throw new Error(`the process did not exit within ${ms} ms`);
  }
  return status;
}

Deno.test("SIGTERM to the frontend drains the stream in flight, refuses new work, exits 0", async () => {
  const run = await startDynamoRun(["--delay-ms", "60"]);
  try {
    const base = run.url;
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
    const reference = await client.completions.create({ model: MODEL, prompt: PROMPT });
    const want = reference.choices[0]!.text;
    assert.ok(want.length > 0);

    const stream = await client.completions.create({ model: MODEL, prompt: PROMPT, stream: true });
    let signalled = 0;
    let stopped: Promise<Deno.CommandStatus> | undefined;
    const got = await read(stream, () => {
      stopped = run.stop(); // SIGTERM now (SIGKILL after 10 s: the exit code says which)
      signalled = performance.now();
    });
    // The whole answer arrived after the signal (the echo takes ~60 ms per token).
    assert.equal(got.text, want);
    assert.equal(got.finish, "stop");
    assert.ok(performance.now() - signalled > 200, "the stream went on after SIGTERM");

    const status = await stopped!;
    assert.equal(status.code, 0);
    // Nothing listens any more: a new request fails to connect.
    await assert.rejects(fetch(`${base}/v1/models`));
  } finally {
    await run.stop();
  }
});

Deno.test({
  name: "SIGTERM to a worker: its stream in flight completes, its instance leaves at once, exit 0",
  ignore: !haveServers(),
  async fn() {
    const servers = await startServers();
    // A long lease: the instance must leave because the worker revokes it, not by expiry.
    const env = { ...servers.env, DYN_LOG: "warn", DYN_LEASE_TTL: "30" };
    const modelPath = await builtinTestModel();
    const children: ChildHandle[] = [];
    const runtime = await DistributedRuntime.connect(
      servers.runtimeOptions as DistributedRuntimeOptions,
    );
    try {
      const front = spawnFrontend(env);
      children.push(front);
      const base = await frontendUrl(front);
      const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
      const workers = [0, 1].map(() => {
        const w = spawnDeno(WORKER, env, [modelPath, "--delay-ms", "60", "--migration-limit", "3"]);
        children.push(w);
        return w;
      });
      const ids = await Promise.all(
        workers.map(async (w) =>
          (await w.waitFor<{ ready: string }>((l) => "ready" in l, 30_000, "a worker")).ready
        ),
      );
      await eventually(
        async () => (await client.models.list()).data.some((m) => m.id === MODEL),
        10_000,
        "the model appears",
      );
      const reference = await client.completions.create({ model: MODEL, prompt: PROMPT });
      const want = reference.choices[0]!.text;

      const instances = async () =>
        (await runtime.discovery.list("v1/instances/e2e/backend/generate/"))
          .map((kv) => kv.key.split("/").at(-1)!);
      assert.deepEqual((await instances()).sort(), [...ids].sort());
      // Each worker's lease, read from etcd's JSON gateway: the stopped one must be revoked.
      const etcd = servers.env.ETCD_ENDPOINTS!.split(",")[0]!;
      const etcdCall = async (path: string, body: unknown) =>
        await (await fetch(`${etcd}${path}`, { method: "POST", body: JSON.stringify(body) }))
          .json();
      const leases = await Promise.all(ids.map(async (id) => {
        const r = await etcdCall("/v3/kv/range", {
          key: btoa(`v1/instances/e2e/backend/generate/${id}`),
        }) as { kvs?: { lease?: string }[] };
        const lease = r.kvs?.[0]?.lease;
        assert.ok(lease, `instance ${id} is on a lease`);
        return lease;
      }));
      const ttlOf = async (lease: string) =>
        Number((await etcdCall("/v3/lease/timetolive", { ID: lease }) as { TTL: string }).TTL);

      const requestsOf = (w: ChildHandle) =>
        w.lines.filter((l) => typeof l === "object" && l !== null && "request" in l).length;
      const before = workers.map(requestsOf);
      const stream = await client.completions.create({
        model: MODEL,
        prompt: PROMPT,
        stream: true,
      });
      let victim: ChildHandle | undefined;
      let victimId = "";
      const got = await read(stream, () => {
        // The worker serving this stream is the one with a new request line.
        const idx = workers.findIndex((w, i) => requestsOf(w) > before[i]!);
        victim = workers[idx]!;
        victimId = ids[idx]!;
        victim.kill("SIGTERM");
      });
      assert.equal(got.text, want, "the stream completes with exactly the expected text");
      assert.equal(got.finish, "stop");
      assert.ok(victim, "a worker served the stream");
      await eventually(
        async () => !(await instances()).includes(victimId),
        2_000,
        "the stopped worker's instance leaves discovery well before its 30 s lease",
      );
      const status = await exitWithin(victim!, 20_000);
      assert.equal(status.code, 0);
      const victimLease = leases[ids.indexOf(victimId)]!;
      assert.equal(await ttlOf(victimLease), -1, "the stopped worker revoked its lease");
      const survivorLease = leases[1 - ids.indexOf(victimId)]!;
      assert.ok((await ttlOf(survivorLease)) > 0, "the other worker's lease is alive");
      // New work goes to the survivor.
      const after = await client.completions.create({ model: MODEL, prompt: PROMPT });
      assert.equal(after.choices[0]!.text, want);
    } finally {
      for (const c of children) c.kill("SIGKILL");
      await Promise.all(children.map((c) => c.status));
      await runtime.shutdown();
      await servers.stop();
    }
  },
});
