// Warming the benches' own client before they time anything. A replay's client is a Deno
// process too: its first requests run its code (the prompt's token ids built and encoded, fetch,
// the SSE parser, JSON.parse of each chunk) before V8 has compiled it. Whichever frontend a bench
// runs first pays for that: `bench:versus` ran ours first, and our first pass of a trace had
// TTFT medians up to twice the later passes' (BENCHMARKS.md). `warmReplayClient` replays
// synthetic requests against a stub server in this process, so every frontend meets a warm
// client: the stub streams a few completion chunks and a usage chunk, as a frontend does.

import { replayTrace } from "./replay.ts";
import type { TraceRequest } from "./trace.ts";

/** Options of {@linkcode warmReplayClient}. */
export interface ClientWarmupOptions {
  /** Synthetic requests (default 60). */
  requests?: number;
  /** Longest prompt in tokens (default 32,768); the requests' prompts spread up to it. */
  maxPromptTokens?: number;
}

/** What a client warm-up did. */
export interface ClientWarmup {
  requests: number;
  failed: number;
  ms: number;
}

/**
 * Replays synthetic streaming completions (bursts of 10, prompts from 64 tokens up to
 * `maxPromptTokens`) against a stub SSE server on loopback, then stops the server.
 *
 * @param options how many requests, how long the longest prompt
 * @returns requests sent, how many failed (the stub answers every valid one), time taken
 */
export async function warmReplayClient(options: ClientWarmupOptions = {}): Promise<ClientWarmup> {
  const count = options.requests ?? 60;
  const maxTokens = options.maxPromptTokens ?? 32_768;
  const started = performance.now();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    stubCompletions,
  );
  try {
    const blockTokens = 64;
    const requests: TraceRequest[] = Array.from({ length: count }, (_, i) => {
      // Lengths spread over the range, so the long-prompt paths are taken too.
      const tokens = Math.max(blockTokens, Math.round(maxTokens * ((i * 7) % count) / count));
      const blocks = Math.ceil(tokens / blockTokens);
      return {
        // Bursts of ten, 20 ms apart: a trace's opening, as the frontends will see it.
        timestamp: Math.floor(i / 10) * 20,
        inputLength: tokens,
        outputLength: STUB_TOKENS,
        hashIds: Array.from({ length: blocks }, (_, j) => i * 100_000 + j),
        blockTokens,
      };
    });
    const addr = server.addr as Deno.NetAddr;
    const { results } = await replayTrace(requests, {
      baseUrl: `http://127.0.0.1:${addr.port}`,
      model: "client-warm-up",
      speedup: 1,
      requestTimeoutMs: 30_000,
    });
    return {
      requests: results.length,
      failed: results.filter((r) => !r.ok).length,
      ms: performance.now() - started,
    };
  } finally {
    await server.shutdown();
  }
}

/** Tokens each warm-up request asks for. */
const STUB_TOKENS = 4;
/** Every warm-up request's answer: a text chunk per token asked, usage, [DONE]. */
const STUB_ANSWER = [
  ...Array.from({ length: STUB_TOKENS }, (_, i) => ({ choices: [{ index: 0, text: ` t${i}` }] })),
  {
    choices: [],
    usage: {
      prompt_tokens: 0,
      completion_tokens: STUB_TOKENS,
      prompt_tokens_details: { cached_tokens: 0 },
    },
  },
].map((c) => `data: ${JSON.stringify({ object: "text_completion", ...c })}\n\n`).join("") +
  "data: [DONE]\n\n";

/** Reads the request whole (the client's upload is part of what is warmed), then answers. */
async function stubCompletions(request: Request): Promise<Response> {
  await request.arrayBuffer();
  if (new URL(request.url).pathname !== "/v1/completions") {
    return new Response("not found", { status: 404 });
  }
  return new Response(STUB_ANSWER, { headers: { "content-type": "text/event-stream" } });
}
