// KV-aware routing of real llama.cpp engines: the KV events a worker publishes describe exactly
// the KV its context holds, and with `--router-mode kv` requests sharing a long prefix go to the
// worker holding it (which serves the prefix from its cache: usage reports cached tokens), where
// round-robin sends some elsewhere.

import assert from "node:assert/strict";
import OpenAI from "openai";
import { runLlamaCppWorker } from "../llm/engines/llamacpp/mod.ts";
import { computeBlockHashesSync, computeLocalHashes } from "../llm/kv_router/hashing.ts";
import { decodeRouterEvent, KV_EVENTS } from "../llm/kv_router/protocols.ts";
import { RadixTree } from "../llm/kv_router/radix_tree.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../llm/protocols.ts";
import { DistributedRuntime } from "../runtime/distributed_runtime.ts";
import { eventually } from "./_helpers/backends.ts";
import { startDynamoRun } from "./_helpers/dynamo_run.ts";
import { tinyLlamaGguf } from "./_helpers/tiny_gguf.ts";

const BLOCK = 16;
// The tiny random-weight llama: what is checked here is where KV lives, not what it says.
const modelPath = await tinyLlamaGguf();

async function drain(out: AsyncIterable<LLMEngineOutput>): Promise<number> {
  let n = 0;
  for await (const item of out) n += item.token_ids.length;
  return n;
}

function request(tokens: number[], maxTokens: number): PreprocessedRequest {
  return {
    model: "m",
    token_ids: tokens,
    stop_conditions: { max_tokens: maxTokens, ignore_eos: true },
    sampling_options: { temperature: 0 },
    eos_token_ids: [],
  };
}

Deno.test({
  name: `a llama.cpp worker's published KV events match its context's contents`,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const runtime = await DistributedRuntime.connect({});
    try {
      const endpoint = runtime.namespace("kvtest").component("backend").endpoint("generate");
      const tree = new RadixTree();
      let removals = 0;
      const events = endpoint.component.subscribeEvents(KV_EVENTS);
      await events.ready;
      const applying = (async () => {
        for await (const msg of events) {
          const ev = decodeRouterEvent(msg.payload);
          if (typeof ev.event.data === "object" && "removed" in ev.event.data) removals++;
          assert.ok(tree.applyEvent(ev), "every published event applies");
        }
      })();
      const worker = await runLlamaCppWorker(endpoint, modelPath, {
        maxNumSeqs: 2,
        kvBlockSize: BLOCK,
        contextLength: 1024,
      });
      const engine = worker.engine;
      const workerId = worker.events!.workerId;
      const tokens = (from: number, n: number) =>
        Array.from({ length: n }, (_, i) => 1 + ((from + i * 7) % 200));
      const a = tokens(0, 100);
      const b = tokens(13, 90);
      const c = tokens(29, 120);
      // a; a extended (reuses a's sequence); b (the second sequence); c (evicts one of them).
      const prompts = [a, [...a, ...tokens(3, 40)], b, c];
      for (const prompt of prompts) {
        assert.ok(await drain(engine.generate(request(prompt, 5))) === 5);
        const held = engine.cachedSequences();
        const expected = new Set(held.flatMap((t) => computeBlockHashesSync(t, BLOCK).sequence));
        await eventually(
          () => tree.blockCount(workerId) === expected.size,
          5000,
          `the tree to hold the ${expected.size} blocks the context holds`,
        );
        assert.deepEqual(new Set(engine.heldBlocks()), expected);
        for (const t of held) {
          const scores = tree.findMatches(computeLocalHashes(t, BLOCK));
          assert.equal(scores.scores.get(workerId), Math.floor(t.length / BLOCK));
        }
      }
      assert.ok(removals > 0, "c took a sequence back: its old blocks were removed");
      events.unsubscribe();
      await applying;
    } finally {
      await runtime.shutdown();
    }
  },
});

/** One long shared prefix, then each request's own question. */
function chat(i: number) {
  const prefix = "You answer questions about a long shared document. ".repeat(12) +
    "The document lists rivers, mountains and cities of Europe in alphabetical order. ".repeat(6);
  return [{ role: "system" as const, content: prefix }, {
    role: "user" as const,
    content: `Question number ${i}: which river is it?`,
  }];
}

/** cached_tokens of each request: the first alone, then followers one at a time. */
async function cachedTokens(routerArgs: string[]): Promise<number[]> {
  const run = await startDynamoRun([
    "out=llamacpp",
    modelPath,
    "--num-workers",
    "2",
    "--max-num-seqs",
    "2",
    "--context-length",
    "1024",
    ...routerArgs,
  ]);
  try {
    const client = new OpenAI({ baseURL: `${run.url}/v1`, apiKey: "none", maxRetries: 0 });
    const name = (await client.models.list()).data[0]!.id;
    const cached: number[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await client.chat.completions.create({
        model: name,
        messages: chat(i),
        max_tokens: 2,
        temperature: 0,
      });
      cached.push(res.usage?.prompt_tokens_details?.cached_tokens ?? 0);
    }
    return cached;
  } finally {
    await run.stop();
  }
}

Deno.test({
  name: `router mode kv sends a shared prefix to the llama.cpp worker holding it`,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const kv = await cachedTokens(["--router-mode", "kv"]);
    assert.equal(kv[0], 0, "a cold cache serves nothing");
    for (const [i, c] of kv.slice(1).entries()) {
      assert.ok(c >= 64, `follower ${i + 1} found the prefix cached (cached_tokens ${c})`);
    }
    // The control: round-robin sends the first follower to the other, cold, worker.
    const rr = await cachedTokens(["--router-mode", "round-robin"]);
    assert.equal(rr[1], 0, `round-robin's first follower missed the cache (${rr})`);
  },
});
