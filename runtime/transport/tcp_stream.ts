// Response streams over TCP: the worker dials the caller's listener ("call-home"). A
// worker keeps one pooled connection per caller and multiplexes its streams over it
// (./mux.ts, opened with a "response_mux" handshake); the listener also takes the older
// one-connection-per-stream protocol: a handshake frame naming the stream, then
// length-prefixed frames (u32 BE length of type + payload, u8 type, payload).

import { DynamoError, InvalidArgumentError, ProtocolError, TimeoutError } from "../errors.ts";
import {
  encodeMuxHandshake,
  MuxConnection,
  MuxKind,
  muxStreamId,
  muxStreamKey,
  readMuxHandshake,
} from "./mux.ts";
import {
  type ConnectionInfo,
  type Frame,
  type FrameConn,
  FrameType,
  type PendingStream,
} from "./types.ts";

/** Largest frame accepted (a guard against garbage lengths, not a limit on items users send). */
export const MAX_FRAME_BYTES = 256 * 1024 * 1024;
const HIGH_WATER = 1024 * 1024;
// Every stream has a read buffer: start small (most streams are short) and double the read
// size, up to MAX_READ_CHUNK, while reads keep filling it.
const READ_CHUNK = 4 * 1024;
const MAX_READ_CHUNK = 256 * 1024;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A {@linkcode FrameConn} over one TCP connection, with write coalescing and backpressure. */
export class TcpFrameConn implements FrameConn {
  readonly #conn: Deno.Conn;
  #buf = new Uint8Array(READ_CHUNK);
  #readSize = READ_CHUNK;
  #start = 0;
  #end = 0;
  #eof = false;
  #pending: Uint8Array[] = [];
  #pendingBytes = 0;
  #writing = false;
  #closed = false;
  #drainWaiters: Array<() => void> = [];
  #idleWaiters: Array<() => void> = [];

  /**
   * Takes over `conn`.
   * @param initial bytes already read from it
   */
  constructor(conn: Deno.Conn, initial?: Uint8Array) {
    this.#conn = conn;
    if (initial !== undefined && initial.length > 0) {
      this.#buf = new Uint8Array(Math.max(READ_CHUNK, initial.length));
      this.#buf.set(initial);
      this.#end = initial.length;
    }
    // Frames are coalesced here already; Nagle would only add latency.
    (conn as Deno.TcpConn).setNoDelay?.(true);
  }

  get closed(): boolean {
    return this.#closed;
  }

  send(frame: Frame): Promise<void> | void {
    if (this.#closed) throw new DynamoError("response stream connection is closed");
    const head = new Uint8Array(5);
    new DataView(head.buffer).setUint32(0, frame.payload.length + 1);
    head[4] = frame.type;
    this.#pending.push(head, frame.payload);
    this.#pendingBytes += 5 + frame.payload.length;
    if (!this.#writing) void this.#flush();
    if (this.#pendingBytes >= HIGH_WATER) {
      return new Promise<void>((resolve) => this.#drainWaiters.push(resolve));
    }
  }

  async #flush(): Promise<void> {
    this.#writing = true;
    try {
      while (this.#pending.length > 0 && !this.#closed) {
        const chunks = this.#pending;
        this.#pending = [];
        const buf = concat(chunks);
        let off = 0;
        while (off < buf.length) off += await this.#conn.write(buf.subarray(off));
        this.#pendingBytes -= buf.length;
        if (this.#pendingBytes < HIGH_WATER) this.#wakeDrain();
      }
    } catch {
      this.close();
    } finally {
      this.#writing = false;
      for (const w of this.#idleWaiters.splice(0)) w();
    }
  }

  #wakeDrain(): void {
    for (const w of this.#drainWaiters.splice(0)) w();
  }

  async receive(): Promise<Frame | null> {
    for (;;) {
      const avail = this.#end - this.#start;
      if (avail >= 5) {
        const view = new DataView(this.#buf.buffer, this.#buf.byteOffset + this.#start, 4);
        const len = view.getUint32(0);
        if (len < 1 || len > MAX_FRAME_BYTES) {
          this.close();
          throw new ProtocolError(`bad frame length ${len}`);
        }
        if (avail >= 4 + len) {
          const type = this.#buf[this.#start + 4]!;
          const payload = this.#buf.slice(this.#start + 5, this.#start + 4 + len);
          this.#start += 4 + len;
          return { type, payload };
        }
        this.#reserve(4 + len);
      }
      if (this.#eof || this.#closed) return null;
      this.#reserve(0);
      let n: number | null;
      const room = this.#buf.length - this.#end;
      try {
        n = await this.#conn.read(this.#buf.subarray(this.#end));
      } catch {
        n = null;
      }
      if (n === null) {
        this.#eof = true;
        continue;
      }
      this.#end += n;
      if (n === room && this.#readSize < MAX_READ_CHUNK) this.#readSize *= 2;
    }
  }

  /** Makes room for `need` bytes from #start, and some free space past #end to read into. */
  #reserve(need: number): void {
    const used = this.#end - this.#start;
    const want = Math.max(need, used + this.#readSize);
    if (this.#start + want <= this.#buf.length) return;
    if (want <= this.#buf.length) {
      this.#buf.copyWithin(0, this.#start, this.#end);
    } else {
      const next = new Uint8Array(Math.max(want, this.#buf.length * 2));
      next.set(this.#buf.subarray(this.#start, this.#end));
      this.#buf = next;
    }
    this.#start = 0;
    this.#end = used;
  }

  async end(): Promise<void> {
    while (this.#writing || (this.#pending.length > 0 && !this.#closed)) {
      if (!this.#writing) void this.#flush();
      await new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
    }
    this.close();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#pending = [];
    try {
      this.#conn.close();
    } catch {
      // already closed by the peer
    }
    this.#wakeDrain();
  }
}

function concat(chunks: Uint8Array[]): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  let size = 0;
  for (const c of chunks) size += c.length;
  const out = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** Options of {@linkcode TcpResponseServer.listen}. */
export interface TcpResponseServerOptions {
  /** Interface to bind (default "127.0.0.1"). */
  hostname?: string;
  /** Port (default 0: any free port). */
  port?: number;
  /** Host workers should dial (default: `hostname`, or 127.0.0.1 when bound to 0.0.0.0). */
  advertiseHost?: string;
  /** Deadline for a dialled worker's handshake in ms (default 5000). */
  handshakeTimeoutMs?: number;
}

/** The caller's listener for response streams. */
export class TcpResponseServer {
  readonly address: string;
  readonly #listener: Deno.TcpListener;
  /**
   * Pending streams by their multiplexed key (32 hex digits) where the stream id is a UUID,
   * else by the stream id itself (see {@linkcode pendingKey}).
   */
  readonly #pending = new Map<string, (conn: FrameConn) => void>();
  readonly #handshakeTimeoutMs: number;
  readonly #conns = new Set<TcpFrameConn>();
  readonly #muxes = new Set<MuxConnection>();

  private constructor(listener: Deno.TcpListener, advertise: string, handshakeTimeoutMs: number) {
    this.#listener = listener;
    this.#handshakeTimeoutMs = handshakeTimeoutMs;
    const port = (listener.addr as Deno.NetAddr).port;
    this.address = `${advertise.includes(":") ? `[${advertise}]` : advertise}:${port}`;
    void this.#acceptLoop();
  }

  /** Binds a listener and starts accepting. */
  static listen(options: TcpResponseServerOptions = {}): TcpResponseServer {
    const hostname = options.hostname ?? "127.0.0.1";
    const listener = Deno.listen({ hostname, port: options.port ?? 0, transport: "tcp" });
    const advertise = options.advertiseHost ??
      (hostname === "0.0.0.0" ? "127.0.0.1" : hostname === "::" ? "::1" : hostname);
    return new TcpResponseServer(listener, advertise, options.handshakeTimeoutMs ?? 5000);
  }

  async #acceptLoop(): Promise<void> {
    try {
      for await (const conn of this.#listener) void this.#accept(conn);
    } catch {
      // listener closed
    }
  }

  async #accept(raw: Deno.Conn): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<null>((
      resolve,
    ) => (timer = setTimeout(() => resolve(null), this.#handshakeTimeoutMs)));
    let first: Awaited<ReturnType<typeof readMuxHandshake>> | null;
    try {
      first = await Promise.race([readMuxHandshake(raw), timeout]);
      if (first === null) throw new ProtocolError("no handshake in time");
      if ("handshake" in first && first.handshake.kind !== "response_mux") {
        throw new ProtocolError(`a ${first.handshake.kind} connection on a response listener`);
      }
    } catch {
      clearTimeout(timer);
      try {
        raw.close();
      } catch {
        // already closed
      }
      return;
    }
    if ("handshake" in first) {
      clearTimeout(timer);
      const mux = new MuxConnection(raw, {
        onUnknown: (c, kind, key, id) => {
          if (kind !== MuxKind.Open) return; // a late frame of a stream already over
          const deliver = this.#pending.get(key);
          if (deliver === undefined) {
            void c.sendFrame(MuxKind.Reset, id, encoder.encode("unknown stream"));
            return;
          }
          this.#pending.delete(key);
          deliver(c.openStream(key, id));
        },
        onClose: (c) => this.#muxes.delete(c),
      });
      this.#muxes.add(mux);
      return;
    }
    const conn = new TcpFrameConn(raw, first.legacy);
    this.#conns.add(conn);
    try {
      const frame = await Promise.race([conn.receive(), timeout]);
      if (frame?.type !== FrameType.Handshake) {
        throw new ProtocolError("expected a handshake frame");
      }
      const streamId = decoder.decode(frame.payload);
      const pending = pendingKey(streamId);
      const deliver = this.#pending.get(pending);
      if (!deliver) throw new ProtocolError(`unknown stream ${streamId}`);
      this.#pending.delete(pending);
      this.#conns.delete(conn);
      deliver(conn);
    } catch {
      this.#conns.delete(conn);
      conn.close();
    } finally {
      clearTimeout(timer);
    }
  }

  /** Reserves a stream id; the worker that dials with it gets connected. */
  expect(streamId: string): PendingStream {
    let deliver!: (conn: FrameConn) => void;
    const connection = new Promise<FrameConn>((resolve) => (deliver = resolve));
    const key = pendingKey(streamId);
    this.#pending.set(key, deliver);
    return {
      connectionInfo: { tcp: { address: this.address, stream_id: streamId } },
      connection,
      cancel: () => {
        if (this.#pending.get(key) === deliver) this.#pending.delete(key);
      },
    };
  }

  /** Stops listening; connected streams are not affected. */
  close(): void {
    try {
      this.#listener.close();
    } catch {
      // already closed
    }
    for (const c of this.#conns) c.close();
    for (const m of [...this.#muxes]) m.close();
    this.#pending.clear();
  }
}

/**
 * A pending stream's key in a {@linkcode TcpResponseServer}: a UUID's 32 hex digits (what a
 * multiplexed connection names it by; any spelling of the same UUID matches), else the id.
 */
function pendingKey(streamId: string): string {
  return muxStreamKey(streamId) ?? streamId;
}

/**
 * Worker side: dials the caller named in `info` and sends the handshake.
 * @throws {TimeoutError} the caller did not accept within `timeoutMs`
 */
export async function dialTcp(info: ConnectionInfo, timeoutMs = 5000): Promise<FrameConn> {
  if (!("tcp" in info)) {
    throw new InvalidArgumentError(`not a TCP connection info: ${JSON.stringify(info)}`);
  }
  const { address, stream_id } = info.tcp;
  const conn = new TcpFrameConn(await connectWithin(address, timeoutMs));
  await conn.send({ type: FrameType.Handshake, payload: encoder.encode(stream_id) });
  return conn;
}

const RESPONSE_MUX_HANDSHAKE = encodeMuxHandshake({ kind: "response_mux", version: 1 });

/**
 * Worker side of call-home response streams: one pooled, multiplexed connection per caller
 * address; streams whose id is not a UUID fall back to a connection of their own.
 */
export class CallHomePool {
  readonly #timeoutMs: number;
  readonly #pool = new Map<string, Promise<MuxConnection>>();
  /** The pooled connections already open, for a stream opened without a wait. */
  readonly #ready = new Map<string, MuxConnection>();
  #closed = false;

  /** @param timeoutMs deadline for dialling a caller (default 5000) */
  constructor(timeoutMs = 5000) {
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Opens the stream `info` names on the pooled connection to its caller.
   * @throws {TimeoutError} the caller did not accept within the deadline
   */
  dial(info: ConnectionInfo): Promise<FrameConn> {
    if (!("tcp" in info)) {
      return Promise.reject(
        new InvalidArgumentError(`not a TCP connection info: ${JSON.stringify(info)}`),
      );
    }
    const ids = muxStreamId(info.tcp.stream_id);
    if (ids === undefined || this.#closed) return dialTcp(info, this.#timeoutMs);
    // The usual case: the connection to this caller is open already.
    const ready = this.#ready.get(info.tcp.address);
    if (ready !== undefined && !ready.closed) {
      const stream = ready.openStream(ids.key, ids.bytes);
      stream.sendRaw(MuxKind.Open);
      return Promise.resolve(stream);
    }
    return this.#dialPooled(info.tcp.address, ids);
  }

  async #dialPooled(
    address: string,
    ids: { key: string; bytes: Uint8Array },
  ): Promise<FrameConn> {
    // A pooled connection may have just closed (the caller restarted): then dial again, once.
    for (let attempt = 0;; attempt++) {
      let conn = this.#pool.get(address);
      if (conn === undefined) {
        conn = this.#connect(address);
        this.#pool.set(address, conn);
        conn.catch(() => {
          if (this.#pool.get(address) === conn) this.#pool.delete(address);
        });
      }
      const mux = await conn;
      if (mux.closed && attempt === 0) {
        if (this.#pool.get(address) === conn) this.#pool.delete(address);
        continue;
      }
      const stream = mux.openStream(ids.key, ids.bytes);
      stream.sendRaw(MuxKind.Open);
      return stream;
    }
  }

  async #connect(address: string): Promise<MuxConnection> {
    const raw = await connectWithin(address, this.#timeoutMs);
    let off = 0;
    while (off < RESPONSE_MUX_HANDSHAKE.length) {
      off += await raw.write(RESPONSE_MUX_HANDSHAKE.subarray(off));
    }
    const pooled = this.#pool.get(address);
    const mux = new MuxConnection(raw, {
      onClose: (c) => {
        if (this.#pool.get(address) === pooled) this.#pool.delete(address);
        if (this.#ready.get(address) === c) this.#ready.delete(address);
      },
    });
    if (this.#closed) mux.close();
    else this.#ready.set(address, mux);
    return mux;
  }

  /** Closes every pooled connection (their streams end). */
  close(): void {
    this.#closed = true;
    for (const p of this.#pool.values()) void p.then((m) => m.close(), () => {});
    this.#pool.clear();
    this.#ready.clear();
  }
}

async function connectWithin(address: string, timeoutMs: number): Promise<Deno.TcpConn> {
  const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(address);
  if (!m) throw new InvalidArgumentError(`bad response address "${address}"`);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const connecting = Deno.connect({ hostname: m[1]!, port: Number(m[2]), transport: "tcp" });
  return await Promise.race([
    connecting,
    new Promise<never>((_, reject) =>
      timer = setTimeout(
        () => reject(new TimeoutError(`dialling ${address} took over ${timeoutMs} ms`)),
        timeoutMs,
      )
    ),
  ]).finally(() => clearTimeout(timer)).catch((err) => {
    connecting.then((c) => c.close(), () => {});
    throw err;
  });
}
