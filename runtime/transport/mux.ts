// Many response streams (and, on the TCP request plane, the requests that open them) on one
// persistent TCP connection. Frames follow the layout of the reference's response mux: a
// 24-byte header (u32 BE payload length, u8 kind, u8 flags = 0, u16 reserved = 0, 16-byte
// stream id) and the payload. A connection opens with one "two-part" handshake message (u64
// BE header length, u64 body length, u64 checksum = 0, then a JSON header) naming its role.

import { DynamoError, ProtocolError } from "../errors.ts";
import { type Frame, type FrameConn, FrameType } from "./types.ts";

/** Frame kinds on a multiplexed connection; 1-7 keep the reference's numbers and meaning. */
export const MuxKind = {
  /** worker -> caller: the request was accepted by its handler (or failed first): `{error?}`. */
  Prologue: 1,
  /** worker -> caller: one item, JSON. */
  Data: 2,
  /** worker -> caller: the stream is complete (our sentinel). */
  End: 3,
  /** caller -> worker: stop generating. */
  Stop: 4,
  /** caller -> worker: stop at once. */
  Kill: 5,
  /** receiver -> sender: u32 BE bytes of Data payload consumed (flow-control credit). */
  WindowUpdate: 6,
  /** either side: this stream is abandoned (payload: an optional UTF-8 reason). */
  Reset: 7,
  /** caller -> worker: a request (payload: endpoint path, headers and body, see `encodeMuxRequest`). */
  Request: 32,
  /** worker -> caller: the request was handed to its endpoint's handler. */
  Accepted: 33,
  /** worker -> caller: no such endpoint here (payload: a UTF-8 reason). */
  Refused: 34,
  /** worker -> caller: the handler failed mid-stream, `{message, name}`. */
  Error: 35,
  /** worker -> caller: nothing to send yet, but alive. */
  Heartbeat: 36,
  /** worker -> caller, on a call-home connection: the stream with this id starts here. */
  Open: 37,
} as const;

/** Bytes of a frame header. */
export const MUX_HEADER_BYTES = 24;
/** Largest frame payload accepted (a guard against garbage lengths). */
export const MUX_MAX_PAYLOAD = 256 * 1024 * 1024;
/** Bytes of Data payload a stream's sender may have unacknowledged (reference default). */
export const MUX_STREAM_WINDOW = 256 * 1024;
/** The receiver returns credit once this much was consumed. */
const CREDIT_UPDATE = MUX_STREAM_WINDOW / 4;
/** Queued output over which every sender on the connection waits. */
const HIGH_WATER = 1024 * 1024;
const READ_CHUNK = 64 * 1024;
/** The least room a read is given (else the read buffer is compacted or replaced). */
const MIN_READ = 16 * 1024;
const MAX_HANDSHAKE = 4096;
/** Counted against the window per Data frame besides its payload, so empty items are bounded. */
const FRAME_COST = 16;

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const EMPTY = new Uint8Array(0);

/** The handshake a connection opens with: what the dialling side wants it for. */
export interface MuxHandshake {
  /** "request_mux": requests and their streams (caller dials worker); "response_mux": call-home streams. */
  kind: "request_mux" | "response_mux";
  /** Protocol version, 1. */
  version: number;
}

/**
 * A stream id as the map key and its 16 wire bytes: a UUID (with or without dashes), or
 * undefined for anything else.
 */
export function muxStreamId(id: string): { key: string; bytes: Uint8Array } | undefined {
  const dashed = id.length === 36;
  if (!dashed && id.length !== 32) return undefined;
  // By hand rather than a regular expression and parseInt: this runs on every request.
  const bytes = new Uint8Array(16);
  let upper = false;
  let at = 0;
  for (let i = 0; i < 16; i++) {
    if (dashed && (at === 8 || at === 13 || at === 18 || at === 23)) {
      if (id.charCodeAt(at) !== 45) return undefined; // "-"
      at++;
    }
    const c1 = id.charCodeAt(at);
    const c2 = id.charCodeAt(at + 1);
    const hi = hexValue(c1);
    const lo = hexValue(c2);
    if (hi < 0 || lo < 0) return undefined;
    if (c1 < 97 && c1 > 57 || c2 < 97 && c2 > 57) upper = true; // A-F
    at += 2;
    bytes[i] = hi << 4 | lo;
  }
  // The key is the digits in lower case: one string operation, not one per byte.
  const digits = dashed ? id.replaceAll("-", "") : id;
  return { key: upper ? digits.toLowerCase() : digits, bytes };
}

/**
 * The map key (32 lower-case hex digits) of a UUID stream id, as `muxStreamId(id)?.key`
 * without its wire bytes; undefined for anything else.
 */
export function muxStreamKey(id: string): string | undefined {
  const dashed = id.length === 36;
  if (!dashed && id.length !== 32) return undefined;
  let plain = true; // already lower-case, no dashes to drop
  for (let at = 0; at < id.length; at++) {
    const c = id.charCodeAt(at);
    if (dashed && (at === 8 || at === 13 || at === 18 || at === 23)) {
      if (c !== 45) return undefined; // "-"
      continue;
    }
    if ((c >= 48 && c <= 57) || (c >= 97 && c <= 102)) continue; // 0-9, a-f
    if (c >= 65 && c <= 70) plain = false; // A-F
    else return undefined;
  }
  const key = dashed ? id.replaceAll("-", "") : id;
  return plain ? key : key.toLowerCase();
}

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48; // 0-9
  c |= 32; // lower case
  if (c >= 97 && c <= 102) return c - 87; // a-f
  return -1;
}

function readU32(buf: Uint8Array, at: number): number {
  return (buf[at]! << 24 | buf[at + 1]! << 16 | buf[at + 2]! << 8 | buf[at + 3]!) >>> 0;
}

/**
 * Whether `id` (a UUID, dashed or not, any case) names the stream whose key is `key`: the
 * same test as `muxStreamId(id)?.key === key`, without building either.
 */
export function sameStreamId(id: string, key: string): boolean {
  const dashed = id.length === 36;
  if ((!dashed && id.length !== 32) || key.length !== 32) return false;
  let at = 0;
  for (let k = 0; k < 32; k++) {
    if (dashed && (at === 8 || at === 13 || at === 18 || at === 23)) {
      if (id.charCodeAt(at) !== 45) return false; // "-"
      at++;
    }
    let c = id.charCodeAt(at++);
    if (c >= 65 && c <= 70) c |= 32; // A-F as a-f
    if (c !== key.charCodeAt(k)) return false;
  }
  return true;
}

const HEX_CODES = Array.from("0123456789abcdef", (c) => c.charCodeAt(0));
const keyCodes = new Array<number>(32);

/** The map key (32 lower-case hex digits) of the 16 stream id bytes at `off`: one string. */
function keyOf(buf: Uint8Array, off: number): string {
  for (let i = 0; i < 16; i++) {
    const b = buf[off + i]!;
    keyCodes[2 * i] = HEX_CODES[b >> 4]!;
    keyCodes[2 * i + 1] = HEX_CODES[b & 15]!;
  }
  return String.fromCharCode.apply(null, keyCodes);
}

/** Encodes the handshake message (two-part layout: header JSON, empty body). */
export function encodeMuxHandshake(h: MuxHandshake): Uint8Array {
  const json = encoder.encode(JSON.stringify(h));
  const out = new Uint8Array(24 + json.length);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(json.length));
  view.setBigUint64(8, 0n);
  view.setBigUint64(16, 0n);
  out.set(json, 24);
  return out;
}

/** Reads exactly `n` bytes (or fewer at end of stream). */
async function readExactly(conn: Deno.Conn, n: number, into?: Uint8Array): Promise<Uint8Array> {
  const buf = into ?? new Uint8Array(n);
  let got = 0;
  while (got < n) {
    const r = await conn.read(buf.subarray(got, n));
    if (r === null) break;
    got += r;
  }
  return buf.subarray(0, got);
}

/**
 * The accepting side's door: reads a connection's first 24 bytes and, when they start a
 * handshake (a u64 length, so four zero bytes first), the handshake itself.
 * @returns the handshake, or the bytes read when the connection speaks the per-stream
 * call-home protocol instead (its first u32 is a nonzero frame length)
 * @throws {ProtocolError} a malformed handshake or a connection closed early
 */
export async function readMuxHandshake(
  conn: Deno.Conn,
): Promise<{ handshake: MuxHandshake } | { legacy: Uint8Array }> {
  // The first word alone decides: a per-stream handshake frame may be shorter than 24 bytes.
  const head = new Uint8Array(24);
  const word = await readExactly(conn, 4, head);
  if (word.length === 4 && (head[0]! | head[1]! | head[2]! | head[3]!) !== 0) {
    return { legacy: head.slice(0, 4) };
  }
  if ((await readExactly(conn, 20, head.subarray(4))).length < 20) {
    throw new ProtocolError("connection closed during its handshake");
  }
  const view = new DataView(head.buffer, head.byteOffset, 24);
  const headerLen = view.getBigUint64(0);
  const bodyLen = view.getBigUint64(8);
  if (headerLen === 0n || headerLen > BigInt(MAX_HANDSHAKE) || bodyLen !== 0n) {
    throw new ProtocolError(`bad handshake lengths ${headerLen}/${bodyLen}`);
  }
  const json = await readExactly(conn, Number(headerLen));
  if (json.length !== Number(headerLen)) {
    throw new ProtocolError("connection closed during its handshake");
  }
  let h: unknown;
  try {
    h = JSON.parse(decoder.decode(json));
  } catch {
    throw new ProtocolError("handshake is not JSON");
  }
  const { kind, version } = (h ?? {}) as Partial<MuxHandshake>;
  if ((kind !== "request_mux" && kind !== "response_mux") || version !== 1) {
    throw new ProtocolError(`unsupported handshake ${JSON.stringify(h)}`);
  }
  return { handshake: { kind, version } };
}

/** What a connection's owner does with a frame for a stream it does not know. */
export type UnknownStreamHandler = (
  conn: MuxConnection,
  kind: number,
  key: string,
  id: Uint8Array,
  payload: Uint8Array,
) => void;

/** Options of {@linkcode MuxConnection}. */
export interface MuxConnectionOptions {
  /** Frames for streams not (or no longer) open here: requests, call-home opens. */
  onUnknown?: UnknownStreamHandler;
  /** Called once when the connection is closed (either side, or broken). */
  onClose?: (conn: MuxConnection) => void;
}

/**
 * Writes `text` as UTF-8 into `out` at `at` (room for 3 bytes per UTF-16 unit is there);
 * short ASCII by hand, cheaper than a call into the encoder.
 * @returns the bytes written
 */
function writeUtf8(out: Uint8Array, at: number, text: string): number {
  const n = text.length;
  if (n <= 512) {
    let i = 0;
    for (; i < n; i++) {
      const c = text.charCodeAt(i);
      if (c >= 0x80) break;
      out[at + i] = c;
    }
    if (i === n) return n;
  }
  return encoder.encodeInto(text, out.subarray(at)).written;
}

/**
 * One multiplexed TCP connection: writes coalesced into one buffer per flush, one read
 * loop that hands frames to their streams.
 */
export class MuxConnection {
  readonly #conn: Deno.Conn;
  readonly #streams = new Map<string, MuxStream>();
  readonly #onUnknown: UnknownStreamHandler | undefined;
  readonly #onClose: ((conn: MuxConnection) => void) | undefined;
  #out = new Uint8Array(READ_CHUNK);
  #outView = new DataView(this.#out.buffer);
  #outLen = 0;
  #spare = new Uint8Array(READ_CHUNK);
  #inFlight = 0;
  #writing = false;
  #scheduled = false;
  #closed = false;
  #drainWaiters: Array<() => void> = [];
  // The last stream a frame went to: consecutive frames of one stream skip the map.
  #lastId = new Uint8Array(16);
  #last: MuxStream | undefined;
  readonly #flushNow = () => {
    this.#scheduled = false;
    void this.#flush();
  };

  /**
   * Takes over `conn` (its handshake already exchanged) and starts reading.
   * @param initial bytes already read past the handshake
   */
  constructor(conn: Deno.Conn, options: MuxConnectionOptions = {}, initial?: Uint8Array) {
    this.#conn = conn;
    this.#onUnknown = options.onUnknown;
    this.#onClose = options.onClose;
    (conn as Deno.TcpConn).setNoDelay?.(true);
    void this.#readLoop(initial ?? EMPTY);
  }

  /** True once the connection is closed. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Streams open on this connection. */
  get streamCount(): number {
    return this.#streams.size;
  }

  /** Opens a stream with this id here (the other side learns of it from its first frame). */
  openStream(key: string, id: Uint8Array): MuxStream {
    if (this.#closed) throw new DynamoError("multiplexed connection is closed");
    const s = new MuxStream(this, key, id);
    this.#streams.set(key, s);
    return s;
  }

  /** @internal */
  forget(stream: MuxStream): void {
    if (this.#streams.get(stream.key) === stream) this.#streams.delete(stream.key);
    if (this.#last === stream) this.#last = undefined;
  }

  /**
   * Queues one frame (written with the others of this tick). Returns a promise while the
   * queued output is over its high-water mark.
   */
  sendFrame(kind: number, id: Uint8Array, payload: Uint8Array): Promise<void> | void {
    if (this.#closed) throw new DynamoError("multiplexed connection is closed");
    const need = this.#outLen + MUX_HEADER_BYTES + payload.length;
    if (need > this.#out.length) this.#grow(need);
    const out = this.#out;
    const at = this.#outLen;
    this.#outView.setUint32(at, payload.length);
    out[at + 4] = kind;
    out[at + 5] = 0;
    out[at + 6] = 0;
    out[at + 7] = 0;
    out.set(id, at + 8);
    if (payload.length > 0) out.set(payload, at + MUX_HEADER_BYTES);
    this.#outLen = need;
    return this.#queued();
  }

  /**
   * Queues one request frame, encoded straight into the output buffer (no arrays per
   * request): the reference's TCP request message (u16 BE path length, the path, u16 BE
   * headers length, `headers`, u32 BE payload length) whose payload is our request envelope
   * (u32 BE header length, `header` JSON, `body` JSON; see `encodeRequest`).
   */
  sendRequestFrame(
    kind: number,
    id: Uint8Array,
    path: Uint8Array,
    headers: Uint8Array,
    header: string,
    body: string,
  ): Promise<void> | void {
    if (this.#closed) throw new DynamoError("multiplexed connection is closed");
    const fixed = 2 + path.length + 2 + headers.length + 4 + 4;
    const max = this.#outLen + MUX_HEADER_BYTES + fixed + 3 * (header.length + body.length);
    if (max > this.#out.length) this.#grow(max);
    const out = this.#out;
    const view = this.#outView;
    const at = this.#outLen;
    let p = at + MUX_HEADER_BYTES;
    view.setUint16(p, path.length);
    out.set(path, p + 2);
    p += 2 + path.length;
    view.setUint16(p, headers.length);
    out.set(headers, p + 2);
    p += 2 + headers.length;
    const payloadAt = p;
    const h = writeUtf8(out, payloadAt + 8, header);
    const b = writeUtf8(out, payloadAt + 8 + h, body);
    view.setUint32(payloadAt, 4 + h + b);
    view.setUint32(payloadAt + 4, h);
    const len = payloadAt + 8 + h + b - (at + MUX_HEADER_BYTES);
    if (len > MUX_MAX_PAYLOAD) throw new ProtocolError(`frame of ${len} bytes`);
    view.setUint32(at, len);
    out[at + 4] = kind;
    out[at + 5] = 0;
    out[at + 6] = 0;
    out[at + 7] = 0;
    out.set(id, at + 8);
    this.#outLen = at + MUX_HEADER_BYTES + len;
    return this.#queued();
  }

  /**
   * Queues one frame whose payload is `text` as UTF-8, encoded straight into the output
   * buffer (no payload array per frame).
   * @returns the payload's length in bytes, and a promise while the queued output is over
   * its high-water mark
   */
  sendTextFrame(
    kind: number,
    id: Uint8Array,
    text: string,
  ): { bytes: number; wait: Promise<void> | void } {
    if (this.#closed) throw new DynamoError("multiplexed connection is closed");
    const max = this.#outLen + MUX_HEADER_BYTES + text.length * 3;
    if (max > this.#out.length) this.#grow(max);
    const out = this.#out;
    const at = this.#outLen;
    const p = at + MUX_HEADER_BYTES;
    const len = writeUtf8(out, p, text);
    if (len > MUX_MAX_PAYLOAD) throw new ProtocolError(`frame of ${len} bytes`);
    this.#outView.setUint32(at, len);
    out[at + 4] = kind;
    out[at + 5] = 0;
    out[at + 6] = 0;
    out[at + 7] = 0;
    out.set(id, at + 8);
    this.#outLen = p + len;
    return { bytes: len, wait: this.#queued() };
  }

  #queued(): Promise<void> | void {
    if (!this.#writing && !this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(this.#flushNow);
    }
    if (this.#outLen + this.#inFlight >= HIGH_WATER) {
      return new Promise<void>((resolve) => this.#drainWaiters.push(resolve));
    }
  }

  #grow(need: number): void {
    const next = new Uint8Array(Math.max(need, this.#out.length * 2));
    next.set(this.#out.subarray(0, this.#outLen));
    this.#out = next;
    this.#outView = new DataView(next.buffer);
  }

  async #flush(): Promise<void> {
    if (this.#writing) return;
    this.#writing = true;
    try {
      while (this.#outLen > 0 && !this.#closed) {
        const buf = this.#out.subarray(0, this.#outLen);
        this.#inFlight = this.#outLen;
        // Double buffering: frames queued while this one is written go to the other buffer.
        this.#out = this.#spare.length >= READ_CHUNK ? this.#spare : new Uint8Array(READ_CHUNK);
        this.#outView = new DataView(this.#out.buffer);
        this.#outLen = 0;
        let off = 0;
        while (off < buf.length) off += await this.#conn.write(buf.subarray(off));
        this.#spare = buf.buffer.byteLength <= 4 * 1024 * 1024
          ? new Uint8Array(buf.buffer)
          : new Uint8Array(READ_CHUNK);
        this.#inFlight = 0;
        if (this.#outLen < HIGH_WATER) {
          for (const w of this.#drainWaiters.splice(0)) w();
        }
      }
    } catch {
      this.close();
    } finally {
      this.#writing = false;
    }
  }

  async #readLoop(initial: Uint8Array): Promise<void> {
    let buf = new Uint8Array(Math.max(READ_CHUNK, initial.length * 2));
    buf.set(initial);
    let start = 0;
    let end = initial.length;
    // Payloads are handed over as views of `buf` (no copy per frame), so once one was, the
    // bytes before `end` are never overwritten: reads go on after them, then to a new buffer.
    let lent = false;
    try {
      for (;;) {
        // Hand over every complete frame in the buffer.
        while (end - start >= MUX_HEADER_BYTES) {
          const len = readU32(buf, start);
          if (len > MUX_MAX_PAYLOAD) throw new ProtocolError(`frame of ${len} bytes`);
          if (end - start < MUX_HEADER_BYTES + len) break;
          if ((buf[start + 5]! | buf[start + 6]! | buf[start + 7]!) !== 0) {
            throw new ProtocolError("frame with unknown flags");
          }
          const kind = buf[start + 4]!;
          const p = start + MUX_HEADER_BYTES;
          if (len > 0) lent = true;
          this.#dispatch(kind, buf, start + 8, len === 0 ? EMPTY : buf.subarray(p, p + len));
          if (this.#closed) return;
          start = p + len;
        }
        if (start === end && !lent) start = end = 0;
        // Room for the whole frame under way (its header says how long), and for a good read.
        let want = MUX_HEADER_BYTES;
        if (end - start >= 4) {
          want += readU32(buf, start);
          if (want > MUX_HEADER_BYTES + MUX_MAX_PAYLOAD) throw new ProtocolError("frame too long");
        }
        if (start + want > buf.length || buf.length - end < MIN_READ) {
          const size = Math.max(lent ? READ_CHUNK : buf.length, want + MIN_READ);
          if (lent || size > buf.length) {
            const next = new Uint8Array(size);
            next.set(buf.subarray(start, end));
            buf = next;
            lent = false;
          } else {
            buf.copyWithin(0, start, end);
          }
          end -= start;
          start = 0;
        }
        const n = await this.#conn.read(buf.subarray(end));
        if (n === null) break;
        end += n;
      }
    } catch {
      // a broken connection or a protocol error: every stream on it ends
    }
    this.close();
  }

  #dispatch(kind: number, buf: Uint8Array, idAt: number, payload: Uint8Array): void {
    let s = this.#last;
    if (s !== undefined) {
      const id = this.#lastId;
      for (let i = 0; i < 16; i++) {
        if (buf[idAt + i] !== id[i]) {
          s = undefined;
          break;
        }
      }
    }
    if (s === undefined) {
      const key = keyOf(buf, idAt);
      s = this.#streams.get(key);
      if (s === undefined) {
        this.#onUnknown?.(this, kind, key, buf.slice(idAt, idAt + 16), payload);
        return;
      }
      this.#last = s;
      this.#lastId.set(buf.subarray(idAt, idAt + 16));
    }
    s.deliver(kind, payload);
  }

  /** Closes the connection; every stream on it sees the other side gone. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch {
      // already closed
    }
    for (const s of [...this.#streams.values()]) s.remoteGone();
    this.#streams.clear();
    for (const w of this.#drainWaiters.splice(0)) w();
    this.#onClose?.(this);
  }
}

function controlKind(payload: Uint8Array): number {
  // A Control frame's payload is the JSON string "stop" or "kill".
  return decoder.decode(payload).includes("kill") ? MuxKind.Kill : MuxKind.Stop;
}

const STOP_FRAME: Frame = Object.freeze({
  type: FrameType.Control,
  payload: encoder.encode('"stop"'),
});
const KILL_FRAME: Frame = Object.freeze({
  type: FrameType.Control,
  payload: encoder.encode('"kill"'),
});

/** One stream on a {@linkcode MuxConnection}, as a {@linkcode FrameConn}. */
export class MuxStream implements FrameConn {
  /** The stream id as a map key (32 hex digits). */
  readonly key: string;
  readonly #mux: MuxConnection;
  readonly #id: Uint8Array;
  /** Frames not yet read (made on the first frame that waits: most streams never need one). */
  #queue: Frame[] | undefined;
  #head = 0;
  #waiter: ((f: Frame | null) => void) | undefined;
  #closed = false;
  /** The other side ended the stream (end, error, reset, refusal) or the connection broke. */
  #remoteDone = false;
  #remoteReset = false;
  /** This side sent its last frame (end, error or reset). */
  #sentLast = false;
  #credit = MUX_STREAM_WINDOW;
  #consumed = 0;
  #creditWaiters: Array<() => void> | undefined;
  /** Told of the worker's answer to a request (TCP request plane). */
  onAnswer: ((kind: number, payload: Uint8Array) => void) | undefined;

  /** @internal use {@linkcode MuxConnection.openStream} */
  constructor(mux: MuxConnection, key: string, id: Uint8Array) {
    this.#mux = mux;
    this.key = key;
    this.#id = id;
  }

  /** The connection this stream is on. */
  get connection(): MuxConnection {
    return this.#mux;
  }

  /** The stream id's wire bytes. */
  get id(): Uint8Array {
    return this.#id;
  }

  get closed(): boolean {
    return this.#closed || this.#remoteReset;
  }

  /** Sends a request frame encoded in place (see `MuxConnection.sendRequestFrame`). */
  sendRequest(path: Uint8Array, headers: Uint8Array, header: string, body: string): void {
    void this.#mux.sendRequestFrame(MuxKind.Request, this.#id, path, headers, header, body);
  }

  /** Sends a frame of this stream's own kind (a request, an acceptance, an open). */
  sendRaw(kind: number, payload: Uint8Array = EMPTY): void {
    if (kind === MuxKind.Refused) this.#sentLast = true;
    void this.#mux.sendFrame(kind, this.#id, payload);
  }

  send(frame: Frame): Promise<void> | void {
    if (this.closed) throw new DynamoError("response stream connection is closed");
    let kind: number;
    switch (frame.type) {
      case FrameType.Data: {
        const p = this.#mux.sendFrame(MuxKind.Data, this.#id, frame.payload);
        this.#credit -= frame.payload.length + FRAME_COST;
        if (this.#credit <= 0) return this.#waitForCredit(p);
        return p;
      }
      case FrameType.Prologue:
        kind = MuxKind.Prologue;
        break;
      case FrameType.Sentinel:
        kind = MuxKind.End;
        this.#sentLast = true;
        break;
      case FrameType.Error:
        kind = MuxKind.Error;
        this.#sentLast = true;
        break;
      case FrameType.Heartbeat:
        kind = MuxKind.Heartbeat;
        break;
      case FrameType.Control:
        kind = controlKind(frame.payload);
        return this.#mux.sendFrame(kind, this.#id, EMPTY);
      default:
        throw new ProtocolError(`frame type ${frame.type} cannot travel on a multiplexed stream`);
    }
    return this.#mux.sendFrame(kind, this.#id, frame.payload);
  }

  /**
   * Sends a Data frame whose payload is `json` (already JSON text), encoded straight into the
   * connection's output buffer.
   */
  sendDataText(json: string): Promise<void> | void {
    if (this.closed) throw new DynamoError("response stream connection is closed");
    const { bytes, wait } = this.#mux.sendTextFrame(MuxKind.Data, this.#id, json);
    this.#credit -= bytes + FRAME_COST;
    if (this.#credit <= 0) return this.#waitForCredit(wait);
    return wait;
  }

  async #waitForCredit(p: Promise<void> | void): Promise<void> {
    if (p) await p;
    while (this.#credit <= 0 && !this.closed) {
      await new Promise<void>((resolve) => (this.#creditWaiters ??= []).push(resolve));
    }
  }

  /** @internal a frame from the other side */
  deliver(kind: number, payload: Uint8Array): void {
    let frame: Frame;
    switch (kind) {
      case MuxKind.Data:
        frame = { type: FrameType.Data, payload };
        break;
      case MuxKind.Prologue:
        frame = { type: FrameType.Prologue, payload };
        break;
      case MuxKind.End:
        this.#remoteDone = true;
        frame = { type: FrameType.Sentinel, payload };
        break;
      case MuxKind.Error:
        this.#remoteDone = true;
        frame = { type: FrameType.Error, payload };
        break;
      case MuxKind.Heartbeat:
        frame = { type: FrameType.Heartbeat, payload };
        break;
      case MuxKind.Stop:
        frame = STOP_FRAME;
        break;
      case MuxKind.Kill:
        frame = KILL_FRAME;
        break;
      case MuxKind.WindowUpdate:
        if (payload.length === 4) {
          this.#credit += readU32(payload, 0);
          if (this.#credit > 0) this.#wakeCreditWaiters();
        }
        return;
      case MuxKind.Reset:
        this.#remoteReset = true;
        this.remoteGone();
        return;
      case MuxKind.Accepted:
      case MuxKind.Refused:
        if (kind === MuxKind.Refused) this.#remoteDone = true;
        this.onAnswer?.(kind, payload);
        return;
      default:
        return; // unknown kinds are ignored (a newer peer)
    }
    if (this.#closed) return;
    const w = this.#waiter;
    const queue = this.#queue;
    if (w !== undefined && (queue === undefined || this.#head === queue.length)) {
      this.#waiter = undefined;
      this.#taken(frame);
      w(frame);
    } else {
      (this.#queue ??= []).push(frame);
    }
  }

  /** @internal the other side is gone: readers see the end, senders stop. */
  remoteGone(): void {
    this.#remoteDone = true;
    this.#remoteReset = true;
    this.#mux.forget(this);
    const w = this.#waiter;
    this.#waiter = undefined;
    w?.(null);
    this.#wakeCreditWaiters();
    this.onAnswer?.(MuxKind.Reset, EMPTY);
  }

  /** Counts a Data frame handed to the reader, and returns credit in batches. */
  #taken(frame: Frame): void {
    if (frame.type !== FrameType.Data) return;
    this.#consumed += frame.payload.length + FRAME_COST;
    if (this.#consumed >= CREDIT_UPDATE && !this.#remoteDone && !this.#mux.closed) {
      const p = new Uint8Array(4);
      new DataView(p.buffer).setUint32(0, this.#consumed);
      this.#consumed = 0;
      void this.#mux.sendFrame(MuxKind.WindowUpdate, this.#id, p);
    }
  }

  /** The next frame if one is queued, null once the stream is over and drained, else undefined. */
  poll(): Frame | null | undefined {
    const queue = this.#queue;
    if (queue !== undefined && this.#head < queue.length) {
      const f = queue[this.#head++]!;
      if (this.#head === queue.length) {
        queue.length = 0;
        this.#head = 0;
      }
      this.#taken(f);
      return f;
    }
    if (this.#closed || this.#remoteReset) return null;
    return undefined;
  }

  receive(): Promise<Frame | null> {
    const f = this.poll();
    if (f !== undefined) return Promise.resolve(f);
    return new Promise((resolve) => (this.#waiter = resolve));
  }

  end(): Promise<void> {
    this.close();
    return Promise.resolve();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#mux.forget(this);
    // The other side still holds the stream unless one side has finished it.
    if (!this.#sentLast && !this.#remoteDone && !this.#mux.closed) {
      this.#sentLast = true;
      try {
        void this.#mux.sendFrame(MuxKind.Reset, this.#id, EMPTY);
      } catch {
        // the connection closed meanwhile
      }
    }
    this.#queue = undefined;
    this.#head = 0;
    const w = this.#waiter;
    this.#waiter = undefined;
    w?.(null);
    this.#wakeCreditWaiters();
  }

  #wakeCreditWaiters(): void {
    const waiters = this.#creditWaiters;
    if (waiters === undefined || waiters.length === 0) return;
    this.#creditWaiters = undefined;
    for (const c of waiters) c();
  }
}
