// Disaggregated serving end to end: a frontend, a decode worker and a prefill worker as
// three processes, on the hub (queue hosted by the decode worker) and on etcd + NATS (a
// JetStream work queue). Long prompts are prefilled remotely (blocks written into the
// decode worker's shared memory and checked byte for byte), short ones locally; killing
// the prefill worker falls back to local prefill without failing a request.

import assert from "node:assert/strict";
import OpenAI from "openai";
import { builtinTestModel, Tokenizer } from "../mod.ts";
import { HubServer } from "../runtime/hub/mod.ts";
import { spawnFrontend } from "./_helpers/frontend.ts";
import { type ChildHandle, spawnDeno } from "./_helpers/process.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";

const DECODE = new URL("../examples/disagg/decode_worker.ts", import.meta.url).pathname;
const PREFILL = new URL("../examples/disagg/prefill_worker.ts", import.meta.url).pathname;
const ROOT = new URL("..", import.meta.url).pathname;
const MODEL = "Qwen3-0.6B";
const SHORT = "alpha beta gamma";
// Well above the default max_local_prefill_length of 1000 tokens.
const LONG = Array.from({ length: 600 }, (_, i) => `word${i % 50} beta`).join(" ");

interface PrefillLine {
  prefill: {
    requestId: string;
    mode: "local" | "remote";
    fellBack: boolean;
    verifiedBlocks: number;
    promptTokens: number;
  };
}
interface PrefilledLine {
  prefilled: { requestId: string; blocks: number; skipped: boolean };
}

async function frontendUrl(child: ChildHandle): Promise<string> {
  const line = await child.waitFor<{ text: string }>(
    (l) => typeof l.text === "string" && l.text.includes("listening on"),
    30_000,
    "the frontend to listen",
  );
  return /listening on (\S+)/.exec(line.text)![1]!;
}

async function stop(child: ChildHandle): Promise<void> {
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await child.status;
  clearTimeout(timer);
}

function linesOf<T>(child: ChildHandle, key: string): T[] {
  return child.lines.filter((l): l is T => typeof l === "object" && l !== null && key in l);
}

async function removeSegmentsOf(pid: number): Promise<void> {
  for await (const e of Deno.readDir("/dev/shm")) {
    if (e.name.startsWith(`dynamo-${pid}-`)) {
      await Deno.remove(`/dev/shm/${e.name}`).catch(() => {});
    }
  }
}

async function scenario(
  t: Deno.TestContext,
  env: Record<string, string>,
  queue: "hosted" | "jetstream",
): Promise<void> {
  const modelPath = await builtinTestModel();
  const tokenizer = Tokenizer.fromBytes(
    await Deno.readFile(`${modelPath}/tokenizer.json`),
    await Deno.readFile(`${modelPath}/tokenizer_config.json`),
  );
  const echoOf = (prompt: string, n: number) =>
    tokenizer.decode(tokenizer.encode(prompt).slice(0, n));
  const children: ChildHandle[] = [];
  try {
    const front = spawnFrontend(env);
    children.push(front);
    const decode = spawnDeno(DECODE, env, [
      modelPath,
      "--remote-timeout-ms",
      "3000",
      "--queue",
      queue,
    ]);
    children.push(decode);
    await decode.waitFor((l) => "ready" in l, 30_000, "the decode worker to register");
    const prefill = spawnDeno(PREFILL, env, ["--delay-ms", "300", "--queue", queue]);
    children.push(prefill);
    const { ready: prefillId } = await prefill.waitFor<{ ready: string }>(
      (l) => "ready" in l,
      30_000,
      "the prefill worker to start",
    );
    await decode.waitFor(
      (l) => Array.isArray(l.prefill_workers) && l.prefill_workers.includes(prefillId),
      10_000,
      "the decode worker to see the prefill worker",
    );
    const base = await frontendUrl(front);
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
    const reportFor = (id: number) => linesOf<PrefillLine>(decode, "prefill")[id]!.prefill;

    await t.step(
      "a long completion prompt is prefilled remotely and every block verified",
      async () => {
        assert.ok(tokenizer.encode(LONG).length > 1000, "the long prompt is over 1000 tokens");
        const r = await client.completions.create({ model: MODEL, prompt: LONG, max_tokens: 3 });
        assert.equal(r.choices[0]!.text, echoOf(LONG, 3));
        const rep = reportFor(0);
        assert.equal(rep.mode, "remote");
        assert.equal(rep.fellBack, false);
        assert.equal(rep.verifiedBlocks, Math.ceil(rep.promptTokens / 16));
        // The worker reports after its ack, which may come after the response.
        const { prefilled } = await prefill.waitFor<PrefilledLine>(
          (l) => "prefilled" in l,
          10_000,
          "the prefill worker to report the request",
        );
        assert.deepEqual(prefilled, {
          requestId: rep.requestId,
          blocks: rep.verifiedBlocks,
          skipped: false,
        });
      },
    );

    await t.step("a short prompt is prefilled locally", async () => {
      const r = await client.completions.create({ model: MODEL, prompt: SHORT, max_tokens: 2 });
      assert.equal(r.choices[0]!.text, echoOf(SHORT, 2));
      const rep = reportFor(1);
      assert.equal(rep.mode, "local");
      assert.equal(rep.fellBack, false);
      assert.equal(linesOf(prefill, "prefilled").length, 1, "the prefill worker saw nothing new");
    });

    await t.step("a long chat request goes remote too", async () => {
      const r = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: "user", content: LONG }],
        max_tokens: 4,
      });
      assert.ok((r.choices[0]!.message.content ?? "").length > 0);
      const rep = reportFor(2);
      assert.equal(rep.mode, "remote");
      assert.ok(rep.verifiedBlocks > 60);
      await prefill.waitFor(
        (l) => (l.prefilled as { requestId?: string } | undefined)?.requestId === rep.requestId,
        10_000,
        "the prefill worker to report the chat request",
      );
      assert.equal(linesOf(prefill, "prefilled").length, 2);
    });

    await t.step(
      "killing the prefill worker mid-flight fails no request; later ones prefill locally",
      async () => {
        const inFlight = Array.from(
          { length: 3 },
          () => client.completions.create({ model: MODEL, prompt: LONG, max_tokens: 3 }),
        );
        // Kill while the worker holds one of them (it spends 300 ms per prefill).
        const before = new Set(
          linesOf<{ prefilling: string }>(prefill, "prefilling").map((l) => l.prefilling),
        );
        const { prefilling: held } = await prefill.waitFor<{ prefilling: string }>(
          (l) => typeof l.prefilling === "string" && !before.has(l.prefilling),
          10_000,
          "the prefill worker to take one of the new requests",
        );
        prefill.kill("SIGKILL");
        await prefill.status;
        await removeSegmentsOf(prefill.child.pid);
        const results = await Promise.all(inFlight);
        for (const r of results) assert.equal(r.choices[0]!.text, echoOf(LONG, 3));
        const reps = linesOf<PrefillLine>(decode, "prefill").slice(3).map((l) => l.prefill);
        assert.equal(reps.length, 3);
        const heldRep = reps.find((r) => r.requestId === held);
        assert.ok(heldRep, `a decode report for the request the worker held (${held})`);
        assert.deepEqual([heldRep.mode, heldRep.fellBack], ["local", true]);
        await decode.waitFor(
          (l) => Array.isArray(l.prefill_workers) && l.prefill_workers.length === 0,
          10_000,
          "the decode worker to see the prefill worker gone",
        );
        const after = await client.completions.create({
          model: MODEL,
          prompt: LONG,
          max_tokens: 3,
        });
        assert.equal(after.choices[0]!.text, echoOf(LONG, 3));
        const last = reportFor(6);
        assert.equal(last.mode, "local");
        assert.equal(last.fellBack, false, "no prefill worker: local at once, no wait");
      },
    );
  } finally {
    for (const c of children.reverse()) await stop(c);
  }
}

Deno.test("disaggregated serving on the hub (queue hosted by decode): long prompts remote, short local, losing the prefill worker fails nothing", async (t) => {
  const hub = await HubServer.start();
  try {
    await scenario(
      t,
      { ...hub.env(), ETCD_ENDPOINTS: "", NATS_SERVER: "", DYN_LOG: "warn" },
      "hosted",
    );
  } finally {
    await hub.close();
  }
});

Deno.test({
  name:
    "disaggregated serving on etcd + NATS (JetStream work queue): long prompts remote, short local, losing the prefill worker fails nothing",
  ignore: !haveServers(),
  async fn(t) {
    const servers = await startServers();
    try {
      await scenario(t, { ...servers.env, DYN_LOG: "warn", DYN_LEASE_TTL: "3" }, "jetstream");
    } finally {
      await servers.stop();
    }
  },
});

/** A child whose stdout and stderr lines are collected as text. */
function spawnText(args: string[], env: Record<string, string>) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ...args],
    cwd: ROOT,
    env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    let rest = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      const parts = (rest + chunk).split("\n");
      rest = parts.pop()!;
      lines.push(...parts);
    }
    if (rest) lines.push(rest);
  };
  const drained = Promise.all([drain(child.stdout), drain(child.stderr)]);
  return {
    lines,
    async waitFor(re: RegExp, ms: number): Promise<RegExpMatchArray> {
      const deadline = Date.now() + ms;
      for (;;) {
        for (const l of lines) {
          const m = l.match(re);
          if (m) return m;
        }
        if (Date.now() > deadline) {
          throw new Error(
            `no line matching ${re} within ${ms} ms:\n${lines.slice(-20).join("\n")}`,
          );
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async stop(): Promise<void> {
      try {
        child.kill("SIGINT");
      } catch { /* exited */ }
      const timer = setTimeout(() => {
        try {
          child.kill("SIGKILL");
        } catch { /* exited */ }
      }, 15_000);
      await child.status;
      clearTimeout(timer);
      await drained;
    },
  };
}

Deno.test("dynamo serve runs the disagg graph: a long prompt prefilled by PrefillWorker, a short one locally", async () => {
  const env = { ETCD_ENDPOINTS: "", NATS_SERVER: "", DYN_HUB: "", DYN_LOG: "info" };
  const serve = spawnText(["cli/main.ts", "serve", "examples/disagg/graph.ts:DecodeWorker"], env);
  let front: ReturnType<typeof spawnText> | undefined;
  try {
    const hub = await serve.waitFor(/clients join with DYN_HUB=(\S+) DYN_HUB_TOKEN=(\S+)/, 30_000);
    await serve.waitFor(/^\[serve\] ready: 2 services/, 60_000);
    front = spawnText(
      ["cli/main.ts", "frontend", "--http-port", "0", "--http-host", "127.0.0.1"],
      { ...env, DYN_HUB: hub[1]!, DYN_HUB_TOKEN: hub[2]!, DYN_LOG: "warn" },
    );
    const base = (await front.waitFor(/listening on (\S+)/, 30_000))[1]!;
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
    const long = await client.completions.create({ model: MODEL, prompt: LONG, max_tokens: 3 });
    assert.equal(long.choices[0]!.text, "word0 beta");
    const rid = /^cmpl-(.+)$/.exec(long.id)?.[1] ?? long.id;
    await serve.waitFor(
      new RegExp(`wrote KV blocks requestId=${rid} blocks=\\d+ skipped=false`),
      10_000,
    );
    await serve.waitFor(
      new RegExp(`prefilled requestId=${rid} mode=remote fellBack=false`),
      10_000,
    );
    const short = await client.completions.create({ model: MODEL, prompt: SHORT, max_tokens: 3 });
    assert.equal(short.choices[0]!.text, SHORT);
    const sid = /^cmpl-(.+)$/.exec(short.id)?.[1] ?? short.id;
    await serve.waitFor(new RegExp(`prefilled requestId=${sid} mode=local`), 10_000);
  } finally {
    await front?.stop();
    await serve.stop();
  }
});
