// Serving requests that arrive in the reference's (ai-dynamo 1.6.1) framing: the one door for a
// request (its control header, call-home address and body), then the response stream the worker
// dials back to the caller with (handshake, prologue, annotated items, final item, sentinel), and
// the caller's "stop" / "kill" on that connection. Used by `serveReferenceEndpoint` and by every
// endpoint our `serveEndpoint` serves on the TCP plane, whose listener hands such requests here.

import { msgpackDecode, msgpackEncode } from "./_msgpack.ts";
import { Context } from "../context.ts";
import { ProtocolError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { Handler } from "../serve_request.ts";
import {
  encodeTwoPart,
  type ReferenceTcpRequest,
  TwoPartDecoder,
} from "../transport/reference_wire.ts";
import type { ReferenceRequestHandler } from "../transport/tcp.ts";
import { TwoPartReader, writeAll } from "./_io.ts";

const ENCODER = new TextEncoder();
const DECODER = new TextDecoder();
const HEADER_LIMIT = 64 * 1024;
/** Longest wait for the caller's next control message (a day: the stream's own life). */
const CONTROL_WAIT_MS = 24 * 3600_000;

/** Options of {@linkcode referenceRequestServer}. */
export interface ReferenceRequestServerOptions {
  /** The endpoint path requests must name (`<instance id hex>/ns/component/endpoint`). */
  path: string;
  /** Runs each request: its decoded body in, the items to stream out. */
  handler: Handler<never, unknown>;
  /** Checks (and may narrow) a decoded request body; throws to refuse it (default: any). */
  validate?: (request: unknown) => unknown;
  /** Maps each item before it is sent (default: as it is). */
  mapOutput?: (item: unknown) => unknown;
  /**
   * Not an LLM engine (e.g. a worker's KV-state query): each item goes out as the annotated
   * item's data itself (not wrapped as an engine output), and msgpack integers beyond 32 bits
   * are bigint both ways (default false).
   */
  raw?: boolean;
  /** Deadline to dial the caller back (ms, default 5,000). */
  callHomeTimeoutMs?: number;
  /** Where failures are reported. */
  logger: Logger;
  /** Hears of each request's context when it starts, and of its end. */
  onContext?: (ctx: Context, ended: Promise<void>) => void;
}

/** What {@linkcode referenceRequestServer} returns. */
export interface ReferenceRequestServer {
  /** Give it to `TcpRequestPlane.serveReference` for the path. */
  readonly handle: ReferenceRequestHandler;
  /** Requests being served now. */
  readonly live: ReadonlySet<Context>;
  /** Refuses new requests from now on (those in flight go on). */
  close(): void;
}

interface Started {
  id: string;
  address: string;
  subject: string;
  codec: "msgpack" | "json";
  request: unknown;
}

/**
 * The handler of one endpoint's reference-framed requests.
 *
 * @param options path, engine, checks, call-home deadline, logger
 * @returns the handler, the live requests, and a way to stop taking new ones
 */
export function referenceRequestServer(
  options: ReferenceRequestServerOptions,
): ReferenceRequestServer {
  const { path, logger: log } = options;
  const live = new Set<Context>();
  const callHomeMs = options.callHomeTimeoutMs ?? 5_000;
  const mapOutput = options.mapOutput ?? ((item: unknown) => item);
  const raw = options.raw ?? false;
  let closed = false;

  /** The one door for a request: framing, control header, body; throws what to ack with. */
  const accept = (req: ReferenceTcpRequest): Started => {
    if (closed) throw new ProtocolError("the worker is shutting down");
    if (req.endpointPath !== path) {
      throw new ProtocolError(`no endpoint ${req.endpointPath} here (this is ${path})`);
    }
    const parts = new TwoPartDecoder().push(req.payload);
    if (parts.length !== 1) throw new ProtocolError("request payload is not one two-part message");
    const { header, body } = parts[0]!;
    if (header.length > HEADER_LIMIT) throw new ProtocolError("request control header too long");
    const control = parseJson(header, "control header") as Record<string, unknown> | null;
    const info = control?.connection_info as { transport?: unknown; info?: unknown } | undefined;
    if (info?.transport !== "tcp_server" || typeof info.info !== "string") {
      throw new ProtocolError("request has no tcp_server connection info");
    }
    const where = parseJson(ENCODER.encode(info.info), "connection info") as
      | Record<string, unknown>
      | null;
    if (typeof where?.address !== "string" || typeof where.subject !== "string") {
      throw new ProtocolError("connection info lacks address or subject");
    }
    if (!/^[^:/\s]+:\d{1,5}$/.test(where.address)) {
      throw new ProtocolError(
        `call-home address ${JSON.stringify(where.address)} is not host:port`,
      );
    }
    const codec = control!.payload_codec === "msgpack" ? "msgpack" : "json";
    let request: unknown;
    try {
      request = codec === "msgpack" ? msgpackDecode(body, raw) : JSON.parse(DECODER.decode(body));
    } catch (err) {
      throw new ProtocolError(`request body is not ${codec}: ${(err as Error).message}`);
    }
    if (options.validate) request = options.validate(request);
    const id = typeof control!.id === "string" ? control!.id : crypto.randomUUID();
    return { id, address: where.address, subject: where.subject, codec, request };
  };

  /** Dials the caller, streams the engine's outputs, honours stop/kill. */
  const respond = async (s: Started, ctx: Context) => {
    const cut = s.address.lastIndexOf(":");
    const conn = await Deno.connect({
      hostname: s.address.slice(0, cut),
      port: Number(s.address.slice(cut + 1)),
      signal: AbortSignal.timeout(callHomeMs),
    });
    conn.setNoDelay(true);
    const encode = (v: unknown) =>
      s.codec === "msgpack" ? msgpackEncode(v, raw) : ENCODER.encode(JSON.stringify(v));
    const frame = (header: unknown, body?: unknown) =>
      encodeTwoPart({
        header: header === undefined ? new Uint8Array(0) : ENCODER.encode(JSON.stringify(header)),
        body: body === undefined ? new Uint8Array(0) : encode(body),
      });
    // The caller's control messages: "stop" ends generation, "kill" drops it; EOF kills.
    const controls = (async () => {
      const reader = new TwoPartReader(conn);
      for (;;) {
        const msg = await reader.next(CONTROL_WAIT_MS, "control message").catch(() => undefined);
        if (!msg) {
          ctx.kill();
          return;
        }
        let what: unknown;
        try {
          what = msg.header.length ? JSON.parse(DECODER.decode(msg.header)) : undefined;
        } catch {
          what = undefined;
        }
        if (what === "stop") ctx.stopGenerating();
        else if (what === "kill") ctx.kill();
      }
    })();
    try {
      await writeAll(conn, frame({ subject: s.subject, stream_type: "response" }));
      await writeAll(conn, frame({ error: null }));
      try {
        const handler = options.handler as Handler<unknown, unknown>;
        for await (const out of await handler(s.request, ctx)) {
          if (ctx.isKilled()) break;
          await writeAll(
            conn,
            frame(undefined, {
              data: raw ? mapOutput(out) : { data: mapOutput(out) },
              complete_final: false,
            }),
          );
        }
      } catch (err) {
        if (!ctx.isKilled()) {
          const message = err instanceof Error ? err.message : String(err);
          await writeAll(
            conn,
            frame(undefined, {
              data: { data: null, event: "error", comment: [message] },
              complete_final: false,
            }),
          );
        }
      }
      if (!ctx.isKilled()) {
        await writeAll(conn, frame(undefined, { complete_final: true }));
        await writeAll(conn, frame("sentinel"));
      }
    } finally {
      try {
        conn.close();
      } catch { /* already closed */ }
      await controls;
    }
  };

  const handle: ReferenceRequestHandler = (request) => {
    const started = accept(request);
    const ctx = new Context(started.id);
    live.add(ctx);
    const ended = respond(started, ctx).catch((err) => {
      // The caller hanging up mid-stream (the reference frontend does once it has max_tokens
      // tokens, or its client left) is not a failure of ours: a write then meets a closed pipe.
      const hungUp = ctx.isKilled() || err instanceof Deno.errors.BrokenPipe ||
        err instanceof Deno.errors.ConnectionReset;
      (hungUp ? log.debug : log.warn).call(
        log,
        hungUp ? "reference caller hung up" : "reference request failed",
        { request: started.id, error: (err as Error).message },
      );
    }).finally(() => live.delete(ctx));
    options.onContext?.(ctx, ended);
  };

  return {
    handle,
    live,
    close() {
      closed = true;
    },
  };
}

function parseJson(bytes: Uint8Array, what: string): unknown {
  try {
    return JSON.parse(DECODER.decode(bytes));
  } catch (err) {
    throw new ProtocolError(`${what} is not JSON: ${(err as Error).message}`);
  }
}
