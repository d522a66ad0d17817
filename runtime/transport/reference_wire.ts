// The reference system's (ai-dynamo 1.6.1) request-plane framing, as captured from its own
// processes (tests/golden/reference_1.6.1/wire.json): the TCP request message a frontend sends a
// worker, and the "two-part" message that carries a control header and a body, both in the request
// and on the response stream the worker calls home with. Codecs only: the groundwork for speaking
// to reference workers and frontends; every length is checked before it is trusted.

import { InvalidArgumentError } from "../errors.ts";

/** Longest header or body of a two-part message accepted (64 MiB). */
export const MAX_TWO_PART_PART = 64 << 20;

/** A malformed reference frame: what was wrong, at which byte. */
export class ReferenceWireError extends InvalidArgumentError {
  /** Byte offset in the input where the problem was found. */
  readonly offset: number;
  /** Creates the error. */
  constructor(message: string, offset: number) {
    super(`${message} (at byte ${offset})`);
    this.name = "ReferenceWireError";
    this.offset = offset;
  }
}

/** A two-part message: a control header and a body (either may be empty). */
export interface TwoPartMessage {
  /** The header bytes (JSON on the reference's wire). */
  header: Uint8Array;
  /** The body bytes (msgpack or JSON, as the header's codec says). */
  body: Uint8Array;
}

/** One request on the reference's TCP request plane. */
export interface ReferenceTcpRequest {
  /** `<instance id hex>/namespace/component/endpoint`. */
  endpointPath: string;
  /** Request headers (request-id, x-endpoint-path, timestamps): a JSON object of strings. */
  headers: Record<string, string>;
  /** The request: a two-part message (control header, body). */
  payload: Uint8Array;
}

/** Bytes before a two-part message's header: two u64 lengths and a u64 checksum. */
export const TWO_PART_PREFIX = 24;

/**
 * Whether a request plane's message is a reference two-part message (a u64 header length, so
 * four zero bytes first) rather than our envelope (a u32 header length, never zero).
 *
 * @param payload a request as the plane delivered it
 * @returns true for the reference's framing
 */
export function isTwoPartMessage(payload: unknown): payload is Uint8Array {
  return payload instanceof Uint8Array && payload.length >= TWO_PART_PREFIX &&
    payload[0] === 0 && payload[1] === 0 && payload[2] === 0 && payload[3] === 0;
}

/**
 * Encodes a two-part message: header length (u64 BE), body length (u64 BE), a checksum (u64,
 * 0: the reference sends none), the header, the body.
 *
 * @param msg header and body
 * @returns the framed bytes
 * @throws {InvalidArgumentError} a part longer than {@linkcode MAX_TWO_PART_PART}
 */
export function encodeTwoPart(msg: TwoPartMessage): Uint8Array {
  for (const [name, part] of [["header", msg.header], ["body", msg.body]] as const) {
    if (part.length > MAX_TWO_PART_PART) {
      throw new InvalidArgumentError(`two-part ${name} of ${part.length} bytes is too long`);
    }
  }
  const out = new Uint8Array(TWO_PART_PREFIX + msg.header.length + msg.body.length);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(msg.header.length));
  view.setBigUint64(8, BigInt(msg.body.length));
  out.set(msg.header, TWO_PART_PREFIX);
  out.set(msg.body, TWO_PART_PREFIX + msg.header.length);
  return out;
}

/**
 * The whole length of the two-part message starting at `buf[start]`, from its 24-byte prefix
 * (checked: lengths within {@linkcode MAX_TWO_PART_PART}, checksum 0).
 *
 * @param buf bytes received
 * @param start where the message starts
 * @param end how far `buf` is filled
 * @param consumed bytes of the stream before `buf[start]` (for the error's offset)
 * @returns prefix, header and body bytes; -1 while the prefix is not all in
 * @throws {ReferenceWireError} a length past the limit, or a checksum that is not 0
 */
export function twoPartFrameLength(
  buf: Uint8Array,
  start: number,
  end: number,
  consumed: number,
): number {
  if (end - start < TWO_PART_PREFIX) return -1;
  const view = new DataView(buf.buffer, buf.byteOffset + start, TWO_PART_PREFIX);
  // u64 BE lengths, read as two u32 halves (no BigInt per message): a high half that is not
  // zero is past any limit.
  const headerHigh = view.getUint32(0);
  const headerLen = view.getUint32(4);
  const bodyHigh = view.getUint32(8);
  const bodyLen = view.getUint32(12);
  if (
    headerHigh !== 0 || bodyHigh !== 0 || headerLen > MAX_TWO_PART_PART ||
    bodyLen > MAX_TWO_PART_PART
  ) {
    throw new ReferenceWireError(
      `two-part lengths ${view.getBigUint64(0)}/${view.getBigUint64(8)} exceed ` +
        `${MAX_TWO_PART_PART}`,
      consumed,
    );
  }
  if (view.getUint32(16) !== 0 || view.getUint32(20) !== 0) {
    throw new ReferenceWireError("two-part checksum is not 0", consumed + 16);
  }
  return TWO_PART_PREFIX + headerLen + bodyLen;
}

/**
 * Decodes two-part messages from a byte stream as it arrives: `push` bytes, take whole messages.
 */
export class TwoPartDecoder {
  #buf: Uint8Array = new Uint8Array(0);
  #consumed = 0;
  #failure: ReferenceWireError | undefined;

  /**
   * Adds bytes and returns the messages they complete.
   *
   * @param bytes the next bytes of the stream
   * @returns every message now whole, in order (those before a malformed one, when one is found)
   * @throws {ReferenceWireError} a part longer than the limit, or a checksum the reference never
   *   sends, when no whole message came before it
   */
  push(bytes: Uint8Array): TwoPartMessage[] {
    if (this.#failure) throw this.#failure;
    this.#buf = concat(this.#buf, bytes);
    const out: TwoPartMessage[] = [];
    try {
      this.#take(out);
    } catch (err) {
      if (!(err instanceof ReferenceWireError)) throw err;
      this.#failure = err;
      // Messages whole before the bad one are still delivered; the error comes on the next push.
      if (out.length === 0) throw err;
    }
    return out;
  }

  /**
   * The error found after the last messages `push` returned, if any: the stream is spoiled past
   * them, and the next `push` throws it.
   */
  get failure(): ReferenceWireError | undefined {
    return this.#failure;
  }

  #take(out: TwoPartMessage[]): void {
    for (;;) {
      const buf = this.#buf;
      const length = twoPartFrameLength(buf, 0, buf.length, this.#consumed);
      if (length < 0 || buf.length < length) break;
      const headerEnd = TWO_PART_PREFIX + new DataView(buf.buffer, buf.byteOffset).getUint32(4);
      out.push({
        header: buf.slice(TWO_PART_PREFIX, headerEnd),
        body: buf.slice(headerEnd, length),
      });
      this.#buf = buf.subarray(length);
      this.#consumed += length;
    }
  }

  /** Bytes received but not yet part of a whole message. */
  get pending(): number {
    return this.#buf.length;
  }
}

/**
 * Encodes one TCP request: endpoint path (u16 BE length + UTF-8), headers (u16 BE length + JSON),
 * payload (u32 BE length + bytes).
 *
 * @param req path, headers, payload
 * @returns the framed bytes
 * @throws {InvalidArgumentError} a path or headers longer than 65535 bytes
 */
export function encodeTcpRequest(req: ReferenceTcpRequest): Uint8Array {
  const enc = new TextEncoder();
  const path = enc.encode(req.endpointPath);
  const headers = enc.encode(JSON.stringify(req.headers));
  if (path.length > 0xffff || headers.length > 0xffff) {
    throw new InvalidArgumentError("endpoint path or headers longer than 65535 bytes");
  }
  const out = new Uint8Array(2 + path.length + 2 + headers.length + 4 + req.payload.length);
  const view = new DataView(out.buffer);
  let at = 0;
  view.setUint16(at, path.length);
  out.set(path, at += 2);
  view.setUint16(at += path.length, headers.length);
  out.set(headers, at += 2);
  view.setUint32(at += headers.length, req.payload.length);
  out.set(req.payload, at + 4);
  return out;
}

/** Decodes TCP requests from a connection's byte stream as it arrives. */
export class TcpRequestDecoder {
  #buf: Uint8Array = new Uint8Array(0);
  #consumed = 0;
  readonly #maxPayload: number;

  /**
   * Creates a decoder.
   * @param maxPayload longest payload accepted (default {@linkcode MAX_TWO_PART_PART})
   */
  constructor(maxPayload = MAX_TWO_PART_PART) {
    this.#maxPayload = maxPayload;
  }

  /**
   * Adds bytes and returns the requests they complete.
   *
   * @param bytes the next bytes of the connection
   * @returns every request now whole, in order
   * @throws {ReferenceWireError} a payload over the limit, a path that is not UTF-8, headers that
   *   are not a JSON object of strings
   */
  push(bytes: Uint8Array): ReferenceTcpRequest[] {
    this.#buf = concat(this.#buf, bytes);
    const out: ReferenceTcpRequest[] = [];
    const dec = new TextDecoder("utf-8", { fatal: true });
    for (;;) {
      const buf = this.#buf;
      const view = new DataView(buf.buffer, buf.byteOffset, buf.length);
      if (buf.length < 2) break;
      const pathLen = view.getUint16(0);
      if (buf.length < 2 + pathLen + 2) break;
      const headersLen = view.getUint16(2 + pathLen);
      const payloadAt = 2 + pathLen + 2 + headersLen + 4;
      if (buf.length < payloadAt) break;
      const payloadLen = view.getUint32(payloadAt - 4);
      if (payloadLen > this.#maxPayload) {
        throw new ReferenceWireError(
          `request payload of ${payloadLen} bytes exceeds ${this.#maxPayload}`,
          this.#consumed + payloadAt - 4,
        );
      }
      if (buf.length < payloadAt + payloadLen) break;
      let endpointPath: string;
      let headers: Record<string, string>;
      try {
        endpointPath = dec.decode(buf.subarray(2, 2 + pathLen));
        headers = stringRecord(JSON.parse(dec.decode(buf.subarray(4 + pathLen, payloadAt - 4))));
      } catch (err) {
        throw new ReferenceWireError(
          `bad request path or headers: ${(err as Error).message}`,
          this.#consumed,
        );
      }
      out.push({ endpointPath, headers, payload: buf.slice(payloadAt, payloadAt + payloadLen) });
      this.#buf = buf.subarray(payloadAt + payloadLen);
      this.#consumed += payloadAt + payloadLen;
    }
    return out;
  }
}

function stringRecord(value: unknown): Record<string, string> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError("headers are not a JSON object");
  }
  for (const [k, v] of Object.entries(value)) {
    if (typeof v !== "string") throw new TypeError(`header ${k} is not a string`);
  }
  return value as Record<string, string>;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}
