// Disaggregated serving end to end: a frontend, a decode worker and a prefill worker as
// three processes, on the hub (queue hosted by the decode worker, the mocker generating)
// and on etcd + a NATS that wants a password (a JetStream work queue on the runtime's own
// connection, the echo engine generating). Long prompts are prefilled remotely (blocks
// written into the decode worker's shared memory and checked byte for byte), short ones
// locally; a repeated prompt hits the decode worker's prefix cache and only the rest is
// prefilled; killing the prefill worker falls back to local prefill without failing a
// request.

import assert from "node:assert/strict";
import OpenAI from "openai";
import { builtinTestModel, Tokenizer } from "../mod.ts";
import type { PrefillReport } from "../llm/disagg/mod.ts";
import { HubServer } from "../runtime/hub/mod.ts";
import { frontendUrl, spawnFrontend, stopChild } from "./_helpers/frontend.ts";
import { type ChildHandle, spawnDeno } from "./_helpers/process.ts";
import { haveServers, startEtcd, startNats } from "./_helpers/servers.ts";

const DECODE = new URL("../examples/disagg/decode_worker.ts", import.meta.url).pathname;
const PREFILL = new URL("../examples/disagg/prefill_worker.ts", import.meta.url).pathname;
const ROOT = new URL("..", import.meta.url).pathname;
const MODEL = "Qwen3-0.6B";
const SHORT = "alpha beta gamma";
const BLOCK_SIZE = 16;
/** About 1800 tokens, well above the default max_local_prefill_length of 1000. */
function longPrompt(word: string): string {
  return Array.from({ length: 600 }, (_, i) => `${word}${i % 50} beta`).join(" ");
}
const LONG = longPrompt("word");

interface PrefillLine {
  prefill: PrefillReport;
}
interface PrefilledLine {
  prefilled: { requestId: string; blocks: number; skipped: boolean };
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

/** Every block of the prompt was checked, whichever way it got there. */
function assertAllVerified(rep: PrefillReport): void {
  const blocks = Math.ceil(rep.promptTokens / BLOCK_SIZE);
  assert.equal(rep.verifiedBlocks, blocks, `request ${rep.requestId}: every block verified`);
  assert.equal(
    rep.prefixHitBlocks + rep.remoteBlocks + rep.localBlocks,
    blocks,
    `request ${rep.requestId}: each block cached, written remotely or filled locally`,
  );
}

async function scenario(
  t: Deno.TestContext,
  env: Record<string, string>,
  queue: "hosted" | "jetstream",
  engine: "mocker" | "echo",
): Promise<void> {
  const modelPath = await builtinTestModel();
  const tokenizer = Tokenizer.fromBytes(
    await Deno.readFile(`${modelPath}/tokenizer.json`),
    await Deno.readFile(`${modelPath}/tokenizer_config.json`),
  );
  // The echo engine answers with the prompt's first tokens; the mocker with tokens of its
  // own, as many as asked for.
  const assertAnswer = (
    r: OpenAI.Completions.Completion,
    prompt: string,
    n: number,
  ) => {
    if (engine === "echo") {
      assert.equal(r.choices[0]!.text, tokenizer.decode(tokenizer.encode(prompt).slice(0, n)));
    } else {
      assert.equal(r.usage?.completion_tokens, n);
      assert.equal(r.choices[0]!.finish_reason, "length");
    }
  };
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
      "--engine",
      engine,
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
    const reports = () => linesOf<PrefillLine>(decode, "prefill").map((l) => l.prefill);
    const prefilled = () => linesOf<PrefilledLine>(prefill, "prefilled").map((l) => l.prefilled);
    /** The decode report of the one request `send` makes. */
    const reportOf = async (send: () => Promise<unknown>): Promise<PrefillReport> => {
      const before = reports().length;
      await send();
      const now = reports();
      assert.equal(now.length, before + 1, "one decode report per request");
      assertAllVerified(now.at(-1)!);
      return now.at(-1)!;
    };
    /** Waits for the prefill worker's report (it comes after its ack). */
    const writtenFor = async (requestId: string) =>
      (await prefill.waitFor<PrefilledLine>(
        (l) => (l.prefilled as { requestId?: string } | undefined)?.requestId === requestId,
        10_000,
        `the prefill worker to report ${requestId}`,
      )).prefilled;

    await t.step(
      "a long completion prompt is prefilled remotely and every block verified",
      async () => {
        assert.ok(tokenizer.encode(LONG).length > 1000, "the long prompt is over 1000 tokens");
        const rep = await reportOf(async () => {
          const r = await client.completions.create({ model: MODEL, prompt: LONG, max_tokens: 3 });
          assertAnswer(r, LONG, 3);
        });
        assert.deepEqual([rep.mode, rep.fellBack, rep.prefixHitBlocks], ["remote", false, 0]);
        assert.equal(rep.remoteBlocks, Math.ceil(rep.promptTokens / BLOCK_SIZE));
        assert.deepEqual(await writtenFor(rep.requestId), {
          requestId: rep.requestId,
          blocks: rep.remoteBlocks,
          skipped: false,
        });
      },
    );

    await t.step("a short prompt is prefilled locally", async () => {
      const rep = await reportOf(async () => {
        const r = await client.completions.create({ model: MODEL, prompt: SHORT, max_tokens: 2 });
        assertAnswer(r, SHORT, 2);
      });
      assert.deepEqual([rep.mode, rep.fellBack], ["local", false]);
      assert.equal(prefilled().length, 1, "the prefill worker saw nothing new");
    });

    await t.step(
      "the long prompt again hits the prefix cache; the short rest is prefilled locally",
      async () => {
        let cached: number | undefined;
        const rep = await reportOf(async () => {
          const r = await client.completions.create({ model: MODEL, prompt: LONG, max_tokens: 3 });
          assertAnswer(r, LONG, 3);
          cached = r.usage?.prompt_tokens_details?.cached_tokens;
        });
        assert.equal(rep.prefixHitBlocks, Math.floor(rep.promptTokens / BLOCK_SIZE));
        assert.equal(rep.prefixHitLength, rep.prefixHitBlocks * BLOCK_SIZE);
        assert.equal(cached, rep.prefixHitLength, "the response reports the cached tokens");
        assert.deepEqual([rep.mode, rep.fellBack, rep.remoteBlocks], ["local", false, 0]);
        assert.equal(prefilled().length, 1, "the prefill worker saw nothing new");
      },
    );

    await t.step(
      "a long prompt sharing the cached prefix sends only its uncached blocks to the prefill worker",
      async () => {
        const extended = `${LONG} ${longPrompt("item")}`;
        const rep = await reportOf(async () => {
          const r = await client.completions.create({
            model: MODEL,
            prompt: extended,
            max_tokens: 3,
          });
          assertAnswer(r, extended, 3);
        });
        const longBlocks = Math.floor(tokenizer.encode(LONG).length / BLOCK_SIZE);
        // The token at the seam may merge differently: at most the last block misses.
        assert.ok(
          rep.prefixHitBlocks >= longBlocks - 1,
          `prefix hit ${rep.prefixHitBlocks} of the ${longBlocks} cached blocks`,
        );
        assert.ok(rep.promptTokens - rep.prefixHitLength > 1000, "the rest is long");
        assert.equal(rep.mode, "remote");
        assert.equal(
          rep.remoteBlocks,
          Math.ceil(rep.promptTokens / BLOCK_SIZE) - rep.prefixHitBlocks,
        );
        assert.equal((await writtenFor(rep.requestId)).blocks, rep.remoteBlocks);
      },
    );

    await t.step("a long chat request goes remote too", async () => {
      const rep = await reportOf(async () => {
        const r = await client.chat.completions.create({
          model: MODEL,
          messages: [{ role: "user", content: LONG }],
          max_tokens: 4,
        });
        assert.ok((r.choices[0]!.message.content ?? "").length > 0);
      });
      // The chat template comes first: nothing of the completion prompts is a prefix.
      assert.deepEqual([rep.mode, rep.prefixHitBlocks], ["remote", 0]);
      assert.ok(rep.verifiedBlocks > 60);
      await writtenFor(rep.requestId);
      assert.equal(prefilled().length, 3);
    });

    await t.step(
      "killing the prefill worker mid-flight fails no request; later ones prefill locally",
      async () => {
        // Prompts nobody sent yet, so none is cached and all three go remote.
        const prompts = ["node", "cell", "part"].map(longPrompt);
        const before = reports().length;
        const inFlight = prompts.map((prompt) =>
          client.completions.create({ model: MODEL, prompt, max_tokens: 3 })
        );
        // Kill while the worker holds one of them (it spends 300 ms per prefill).
        const seen = new Set(
          linesOf<{ prefilling: string }>(prefill, "prefilling").map((l) => l.prefilling),
        );
        const { prefilling: held } = await prefill.waitFor<{ prefilling: string }>(
          (l) => typeof l.prefilling === "string" && !seen.has(l.prefilling),
          10_000,
          "the prefill worker to take one of the new requests",
        );
        prefill.kill("SIGKILL");
        await prefill.status;
        await removeSegmentsOf(prefill.child.pid);
        const results = await Promise.all(inFlight);
        for (const [i, r] of results.entries()) assertAnswer(r, prompts[i]!, 3);
        const reps = reports().slice(before);
        assert.equal(reps.length, 3);
        for (const rep of reps) assertAllVerified(rep);
        const heldRep = reps.find((r) => r.requestId === held);
        assert.ok(heldRep, `a decode report for the request the worker held (${held})`);
        assert.deepEqual([heldRep.mode, heldRep.fellBack], ["local", true]);
        await decode.waitFor(
          (l) => Array.isArray(l.prefill_workers) && l.prefill_workers.length === 0,
          10_000,
          "the decode worker to see the prefill worker gone",
        );
        const fresh = longPrompt("file");
        const last = await reportOf(async () => {
          const r = await client.completions.create({ model: MODEL, prompt: fresh, max_tokens: 3 });
          assertAnswer(r, fresh, 3);
        });
        assert.deepEqual([last.mode, last.prefixHitBlocks], ["local", 0]);
        assert.equal(last.fellBack, false, "no prefill worker: local at once, no wait");
      },
    );
  } finally {
    for (const c of children.reverse()) await stopChild(c);
  }
}

Deno.test("disaggregated serving on the hub (queue hosted by decode, mocker engine): long prompts remote, short local, prefix hits, losing the prefill worker fails nothing", async (t) => {
  const hub = await HubServer.start();
  try {
    await scenario(
      t,
      { ...hub.env(), ETCD_ENDPOINTS: "", NATS_SERVER: "", DYN_LOG: "warn" },
      "hosted",
      "mocker",
    );
  } finally {
    await hub.close();
  }
});

Deno.test({
  name:
    "disaggregated serving on etcd + a password-protected NATS (JetStream work queue on the runtime's connection, echo engine): long prompts remote, short local, prefix hits, losing the prefill worker fails nothing",
  ignore: !haveServers(),
  async fn(t) {
    const user = { user: "dynamo", pass: "disagg-s3cret" };
    const [etcd, nats] = await Promise.all([startEtcd(), startNats({ user })]);
    try {
      await scenario(
        t,
        {
          ETCD_ENDPOINTS: etcd.url,
          NATS_SERVER: nats.url,
          NATS_USER: user.user,
          NATS_PASSWORD: user.pass,
          DYN_LOG: "warn",
          DYN_LEASE_TTL: "3",
        },
        "jetstream",
        "echo",
      );
    } finally {
      await Promise.all([etcd.stop(), nats.stop()]);
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

Deno.test("dynamo serve runs the disagg graph: a long prompt prefilled by PrefillWorker, a short one locally, the long one again from the prefix cache", async () => {
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
    const idOf = (r: { id: string }) => /^cmpl-(.+)$/.exec(r.id)?.[1] ?? r.id;
    // The graph's DecodeWorker generates with the mocker: its own tokens, as many as asked.
    const long = await client.completions.create({ model: MODEL, prompt: LONG, max_tokens: 3 });
    assert.equal(long.usage?.completion_tokens, 3);
    const rid = idOf(long);
    const written = await serve.waitFor(
      new RegExp(`wrote KV blocks requestId=${rid} blocks=(\\d+) skipped=false`),
      10_000,
    );
    const remote = await serve.waitFor(
      new RegExp(
        `prefilled requestId=${rid} mode=remote fellBack=false prefixHitBlocks=0 ` +
          `prefixHitLength=0 remoteBlocks=(\\d+) localBlocks=0 verifiedBlocks=(\\d+)`,
      ),
      10_000,
    );
    assert.equal(remote[1], written[1], "the prefill worker wrote every block");
    assert.equal(remote[2], written[1], "every block was verified");
    const short = await client.completions.create({ model: MODEL, prompt: SHORT, max_tokens: 3 });
    assert.equal(short.usage?.completion_tokens, 3);
    await serve.waitFor(new RegExp(`prefilled requestId=${idOf(short)} mode=local`), 10_000);
    const again = await client.completions.create({ model: MODEL, prompt: LONG, max_tokens: 3 });
    assert.deepEqual(again.choices[0]!.text, long.choices[0]!.text, "the mocker is deterministic");
    const hit = await serve.waitFor(
      new RegExp(
        `prefilled requestId=${idOf(again)} mode=local fellBack=false prefixHitBlocks=(\\d+)`,
      ),
      10_000,
    );
    const hitBlocks = Number(hit[1]);
    assert.ok(
      hitBlocks > 0 && hitBlocks >= Number(remote[2]) - 1,
      `every full block hits (${hitBlocks} of ${remote[2]})`,
    );
    assert.equal(again.usage?.prompt_tokens_details?.cached_tokens, hitBlocks * 16);
  } finally {
    await front?.stop();
    await serve.stop();
  }
});
