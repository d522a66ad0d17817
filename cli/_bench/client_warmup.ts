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
        outputLength: 4,
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

/** A completion stream for any valid request: a chunk per token asked (at most 16), usage, DONE. */
async function stubCompletions(request: Request): Promise<Response> {
  const body = await request.json().catch(() => undefined) as { max_tokens?: unknown } | undefined;
  if (new URL(request.url).pathname !== "/v1/completions" || body === undefined) {
    return new Response("not found", { status: 404 });
  }
  const n = typeof body.max_tokens === "number" ? Math.min(body.max_tokens, 16) : 4;
  const chunk = (c: unknown) => `data: ${JSON.stringify(c)}\n\n`;
  let text = "";
  for (let i = 0; i < n; i++) {
    text += chunk({ object: "text_completion", choices: [{ index: 0, text: ` t${i}` }] });
  }
  text += chunk({
    object: "text_completion",
    choices: [],
    usage: { prompt_tokens: 0, completion_tokens: n, prompt_tokens_details: { cached_tokens: 0 } },
  });
  text += "data: [DONE]\n\n";
  return new Response(text, { headers: { "content-type": "text/event-stream" } });
}
