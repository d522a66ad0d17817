// Replays a trace against an OpenAI frontend: each request is sent at its (sped-up)
// arrival time as a streaming completion whose prompt is token ids, and timed.

import { EventSourceParserStream } from "eventsource-parser/stream";
import { promptTokens, type TraceRequest } from "./trace.ts";

/** What one replayed request measured. */
export interface RequestResult {
  ok: boolean;
  /** Why it failed (status line or error), when it did. */
  error?: string;
  /** ms from sending to the first content chunk. */
  ttftMs?: number;
  /** ms between consecutive content chunks. */
  itlMs: number[];
  promptTokens: number;
  outputTokens: number;
  /** From usage.prompt_tokens_details.cached_tokens, when the engine reports it. */
  cachedTokens?: number;
  /** ms from sending to the end of the stream. */
  latencyMs: number;
  /** ms from the start of the replay to sending (set by replays, for throughput over time). */
  startMs?: number;
}

/** Options of {@linkcode replayTrace}. */
export interface ReplayOptions {
  baseUrl: string;
  model: string;
  /** Divides the trace's arrival times. */
  speedup: number;
  /** Deadline of one request in ms. */
  requestTimeoutMs: number;
  /** Called about once a second with progress. */
  onProgress?: (p: { sent: number; done: number; failed: number; total: number }) => void;
  signal?: AbortSignal;
}

/** Sends one request and reads its stream to the end. */
export async function sendOne(
  req: TraceRequest,
  options: Pick<ReplayOptions, "baseUrl" | "model" | "requestTimeoutMs" | "signal">,
): Promise<RequestResult> {
  const prompt = promptTokens(req);
  const result: RequestResult = {
    ok: false,
    itlMs: [],
    promptTokens: prompt.length,
    outputTokens: 0,
    latencyMs: 0,
  };
  const timeout = AbortSignal.timeout(options.requestTimeoutMs);
  const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
  const started = performance.now();
  try {
    const res = await fetch(`${options.baseUrl}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: options.model,
        prompt,
        max_tokens: req.outputLength,
        ignore_eos: true,
        stream: true,
        stream_options: { include_usage: true },
      }),
      signal,
    });
    if (!res.ok || !res.body) {
      result.error = `HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`;
      return result;
    }
    let last = 0;
    let sawDone = false;
    const events = res.body
      .pipeThrough(new TextDecoderStream())
      .pipeThrough(new EventSourceParserStream());
    for await (const event of events) {
      const data = event.data;
      if (data === "[DONE]") {
        sawDone = true;
        continue;
      }
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(`stream error: ${chunk.error.message}`);
      if (chunk.usage) {
        result.outputTokens = chunk.usage.completion_tokens;
        result.cachedTokens = chunk.usage.prompt_tokens_details?.cached_tokens;
      }
      if ((chunk.choices?.length ?? 0) > 0) {
        const now = performance.now();
        if (result.ttftMs === undefined) result.ttftMs = now - started;
        else result.itlMs.push(now - last);
        last = now;
      }
    }
    if (!sawDone) throw new Error("stream ended without [DONE]");
    result.ok = true;
  } catch (err) {
    result.error = timeout.aborted
      ? `no answer within ${options.requestTimeoutMs} ms`
      : err instanceof Error
      ? err.message
      : String(err);
  } finally {
    result.latencyMs = performance.now() - started;
  }
  return result;
}

/**
 * Replays `requests` open-loop: each is sent at `timestamp / speedup` ms after the start,
 * whatever the ones before it are doing.
 */
export async function replayTrace(
  requests: readonly TraceRequest[],
  options: ReplayOptions,
): Promise<{ results: RequestResult[]; seconds: number }> {
  const results: RequestResult[] = new Array(requests.length);
  const t0 = requests[0]?.timestamp ?? 0;
  const started = performance.now();
  let sent = 0;
  let done = 0;
  let failed = 0;
  const progress = () => options.onProgress?.({ sent, done, failed, total: requests.length });
  const ticker = setInterval(progress, 1000);
  const running: Promise<void>[] = [];
  try {
    for (let i = 0; i < requests.length; i++) {
      options.signal?.throwIfAborted();
      const req = requests[i]!;
      const due = (req.timestamp - t0) / options.speedup;
      const wait = due - (performance.now() - started);
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      sent++;
      const startMs = performance.now() - started;
      running.push(
        sendOne(req, options).then((r) => {
          r.startMs = startMs;
          results[i] = r;
          done++;
          if (!r.ok) failed++;
        }),
      );
    }
    await Promise.all(running);
  } finally {
    clearInterval(ticker);
  }
  progress();
  return { results, seconds: (performance.now() - started) / 1000 };
}
