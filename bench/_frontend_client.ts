// The load generator of `bench:frontend`: one streaming chat completion over `fetch`
// (keep-alive pool), read to `data: [DONE]`, with the time to the first content chunk.

import type { BareArgs } from "./_frontend_bare.ts";

/** One streamed request, as the client saw it (ms from just before `fetch`). */
export interface StreamTiming {
  /** Time to the first chunk whose delta carries content. */
  ttft: number;
  /** Time to the end of the body. */
  total: number;
  /** `data:` events before `[DONE]`. */
  chunks: number;
}

/** What the first content chunk and the others looked like (for checking both servers). */
export interface StreamShape {
  chunks: Array<Record<string, unknown>>;
}

const decoder = new TextDecoder();

/** Request body of the bench: a short user message, streamed. */
export function chatBody(model: string): string {
  return JSON.stringify({
    model,
    stream: true,
    messages: [{ role: "user", content: "Hello there!" }],
  });
}

/**
 * Sends one streaming chat completion and reads the SSE body to its end.
 * @throws Error on a non-200 answer, a stream without `[DONE]`, or after `timeoutMs`
 */
export async function streamOnce(
  url: string,
  body: string,
  timeoutMs = 10_000,
): Promise<StreamTiming> {
  const t0 = performance.now();
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (res.status !== 200 || !res.body) {
    throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  }
  let ttft = Number.NaN;
  let chunks = 0;
  let sawDone = false;
  let pending = "";
  for await (const bytes of res.body) {
    pending += decoder.decode(bytes, { stream: true });
    let end: number;
    while ((end = pending.indexOf("\n\n")) >= 0) {
      const event = pending.slice(0, end);
      pending = pending.slice(end + 2);
      if (!event.startsWith("data: ")) continue;
      if (event === "data: [DONE]") {
        sawDone = true;
        continue;
      }
      chunks++;
      // Both servers put content in the first chunk; parse only until one is seen.
      if (Number.isNaN(ttft)) {
        const c = JSON.parse(event.slice(6)) as {
          choices?: Array<{ delta?: { content?: string } }>;
        };
        if (c.choices?.[0]?.delta?.content) ttft = performance.now() - t0;
      }
    }
  }
  if (!sawDone) throw new Error(`the stream from ${url} ended without [DONE]`);
  return { ttft, total: performance.now() - t0, chunks };
}

/** One request, with every chunk parsed: to compare the two servers' answers. */
export async function streamShape(url: string, body: string): Promise<StreamShape> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`HTTP ${res.status} from ${url}: ${text}`);
  const events = text.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
  if (events.at(-1) !== "[DONE]") throw new Error(`no [DONE] from ${url}: ${text}`);
  return { chunks: events.slice(0, -1).map((e) => JSON.parse(e) as Record<string, unknown>) };
}

/** The key structure of a chunk (field names, nested), to check both servers agree. */
export function shapeOf(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(shapeOf);
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(
      Object.entries(v).sort(([a], [b]) => a.localeCompare(b)).map(([k, x]) => [k, shapeOf(x)]),
    );
  }
  return typeof v;
}

/** What the bare server must answer to match the dynamo server's stream. */
export function bareArgsFrom(shape: StreamShape, model: string): BareArgs {
  type Choice = { delta?: { content?: string }; finish_reason?: string | null };
  const choices = shape.chunks.map((c) => (c.choices as Choice[] | undefined)?.[0]);
  const last = choices.at(-1);
  if (!last?.finish_reason || last.delta?.content !== undefined) {
    throw new Error("expected the dynamo stream to end with an empty delta and a finish_reason");
  }
  return {
    model,
    contents: choices.slice(0, -1).map((c) => c?.delta?.content ?? ""),
    finishReason: last.finish_reason,
  };
}
