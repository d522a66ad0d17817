// The hub's wire protocol: one TCP connection per client, TcpFrameConn's framing
// (u32 BE length, u8 type, payload), every payload a message: u32 BE JSON length, JSON, bytes.

import { DynamoError, InvalidArgumentError } from "../errors.ts";
import type { Frame } from "../transport/types.ts";

/** Version of the protocol; the hub refuses a hello with another. */
export const HUB_PROTOCOL_VERSION = 1;

/** The one frame type hub connections use. */
export const HUB_FRAME = 1;

/** An error a hub answered with: `code` classifies it, `message` says what went wrong. */
export interface WireError {
  code: "invalid_argument" | "no_responders" | "not_found" | "unauthorized" | "error";
  message: string;
}

/**
 * One message. Client to hub: `op` (and `id` when it expects a reply). Hub to client:
 * `re` (the `id` it answers, with `error` on failure) or `ev` (something pushed).
 */
export interface HubMessage {
  op?: string;
  id?: number;
  re?: number;
  ev?: string;
  error?: WireError;
  [field: string]: unknown;
}

/** A message with its binary attachment (request payloads, blobs, events). */
export interface Decoded {
  msg: HubMessage;
  bytes: Uint8Array;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const EMPTY = new Uint8Array(0);

/** Encodes a message and its optional attachment as one frame. */
export function encodeMessage(msg: HubMessage, bytes: Uint8Array = EMPTY): Frame {
  const json = encoder.encode(JSON.stringify(msg));
  const payload = new Uint8Array(4 + json.length + bytes.length);
  new DataView(payload.buffer).setUint32(0, json.length);
  payload.set(json, 4);
  payload.set(bytes, 4 + json.length);
  return { type: HUB_FRAME, payload };
}

/** Decodes {@linkcode encodeMessage}'s frame; throws {@linkcode HubProtocolError} on garbage. */
export function decodeMessage(frame: Frame): Decoded {
  const p = frame.payload;
  if (frame.type !== HUB_FRAME || p.length < 4) {
    throw new HubProtocolError(`bad hub frame (type ${frame.type}, ${p.length} bytes)`);
  }
  const len = new DataView(p.buffer, p.byteOffset, p.byteLength).getUint32(0);
  if (4 + len > p.length) throw new HubProtocolError(`hub message length ${len} exceeds its frame`);
  let msg: unknown;
  try {
    msg = JSON.parse(decoder.decode(p.subarray(4, 4 + len)));
  } catch (err) {
    throw new HubProtocolError(`hub message is not JSON: ${(err as Error).message}`);
  }
  if (typeof msg !== "object" || msg === null || Array.isArray(msg)) {
    throw new HubProtocolError("hub message is not a JSON object");
  }
  return { msg: msg as HubMessage, bytes: p.subarray(4 + len) };
}

/** The hub cannot be reached, refused us, or the connection to it broke. */
export class HubConnectionError extends DynamoError {}

/** The hub refused the handshake: wrong or missing token. */
export class HubAuthError extends HubConnectionError {}

/** A hub peer broke the protocol. */
export class HubProtocolError extends HubConnectionError {}

/**
 * Splits a hub address `host:port` (or `[v6]:port`).
 * @throws {InvalidArgumentError} not host:port with a port in 1..65535
 */
export function parseHubAddress(address: string): { hostname: string; port: number } {
  const m = /^\[?([^\]]*?)\]?:(\d+)$/.exec(address.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || m[1] === "" || !(port >= 1 && port <= 65535)) {
    throw new InvalidArgumentError(`hub address must look like HOST:PORT, got "${address}"`);
  }
  return { hostname: m[1]!, port };
}

/** `host:port`, bracketing IPv6 hosts. */
export function formatHubAddress(hostname: string, port: number): string {
  return `${hostname.includes(":") ? `[${hostname}]` : hostname}:${port}`;
}

/** Compares two tokens without an early exit on the first differing byte. */
export function tokensEqual(a: string, b: string): boolean {
  const x = encoder.encode(a);
  const y = encoder.encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}
