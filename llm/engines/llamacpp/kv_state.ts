// The bytes of a prefilled llama.cpp sequence state as they travel between engines: a header
// (model identity, the tokens, a checksum) in front of llama.cpp's own sequence state file,
// and every check a decode engine makes before llama.cpp sees them. Also the one rewrite a
// state needs between contexts of different sequence counts (its KV stream addressing).

import { createHash } from "node:crypto";
import { LlamaCppStateError } from "./errors.ts";

/** The first bytes of an exported state (the format's version is its last two digits). */
export const STATE_MAGIC = new TextEncoder().encode("DYNKVS01");

/** llama.cpp's sequence state files start with 'ggsq' (LLAMA_STATE_SEQ_MAGIC). */
const LLAMA_STATE_SEQ_MAGIC = 0x67677371;

/** Header bytes per prompt token (a JSON number and its comma) and beyond them. */
export const HEADER_BYTES_PER_TOKEN = 12;

export const HEADER_BYTES_FIXED = 4096;

/** Most KV streams (sequences of the exporting context) a header may name. */
export const MAX_STREAMS = 4096;

/** What identifies a model file: its SHA-256 and size. */
export interface ModelIdentity {
  /** SHA-256 of the whole file, lower-case hex. */
  sha256: string;
  /** The file's size in bytes. */
  bytes: number;
}

/**
 * Hashes a model file (streamed, so a large GGUF is not read into memory at once).
 *
 * @param path the `.gguf` file
 * @returns its SHA-256 and size
 * @throws {Deno.errors.NotFound} no such file
 */
export async function modelIdentity(path: string): Promise<ModelIdentity> {
  const hash = createHash("sha256");
  let bytes = 0;
  using file = await Deno.open(path);
  const buf = new Uint8Array(1 << 20);
  for (;;) {
    const n = await file.read(buf);
    if (n === null) break;
    hash.update(buf.subarray(0, n));
    bytes += n;
  }
  return { sha256: hash.digest("hex"), bytes };
}

/** The header of an exported state (JSON inside the blob; snake_case: it crosses processes). */
export interface KvStateHeader {
  /** The model the KV was computed with. */
  model: ModelIdentity;
  /** The tokens whose KV the state holds: the prompt but its last token. */
  tokens: number[];
  /** Of those, how many the prefill engine kept from its own cache (not computed again). */
  cached_tokens: number;
  /** KV streams of the exporting context (llama.cpp keeps one per sequence). */
  streams: number;
  /** Bytes of the llama.cpp state after the header. */
  state_bytes: number;
  /** SHA-256 of those bytes, lower-case hex. */
  state_sha256: string;
}

/** An exported state that passed {@linkcode LlamaCppDisagg.checkState}. */
export interface CheckedKvState {
  /** Its header. */
  readonly header: KvStateHeader;
  /** llama.cpp's sequence state file, as the prefill engine saved it. */
  readonly state: Uint8Array;
}

/**
 * Frames a llama.cpp sequence state with its header: magic, the header's length (u32
 * little-endian), the header as JSON, the state.
 *
 * @param header the header, less the state's size and checksum (computed here)
 * @param state llama.cpp's sequence state file
 * @returns the blob
 */
export async function encodeKvState(
  header: Omit<KvStateHeader, "state_bytes" | "state_sha256">,
  state: Uint8Array,
): Promise<Uint8Array> {
  const full: KvStateHeader = {
    ...header,
    state_bytes: state.length,
    state_sha256: await sha256Hex(state),
  };
  const json = new TextEncoder().encode(JSON.stringify(full));
  const out = new Uint8Array(STATE_MAGIC.length + 4 + json.length + state.length);
  out.set(STATE_MAGIC, 0);
  new DataView(out.buffer).setUint32(STATE_MAGIC.length, json.length, true);
  out.set(json, STATE_MAGIC.length + 4);
  out.set(state, STATE_MAGIC.length + 4 + json.length);
  return out;
}

/** Bounds of {@linkcode decodeKvState}. */
export interface KvStateLimits {
  /** Most tokens a state may hold. */
  maxTokens: number;
  /** Most bytes the whole blob may take. */
  maxStateBytes: number;
}

/**
 * Parses and checks a blob from {@linkcode encodeKvState}: magic, bounded header, header
 * fields, the state's size and checksum, and that llama.cpp's own token list in the state
 * equals the header's.
 *
 * @param blob the bytes
 * @param limits the most tokens and bytes accepted
 * @returns header and state
 * @throws {LlamaCppStateError} anything is off (the reason says what)
 */
export async function decodeKvState(
  blob: Uint8Array,
  limits: KvStateLimits,
): Promise<CheckedKvState> {
  const bad = (why: string): never => {
    throw new LlamaCppStateError(why);
  };
  if (!(blob instanceof Uint8Array)) bad("not bytes");
  if (blob.length > limits.maxStateBytes) {
    bad(`${blob.length} bytes, more than the ${limits.maxStateBytes} a state of this engine takes`);
  }
  if (blob.length < STATE_MAGIC.length + 4 || STATE_MAGIC.some((b, i) => blob[i] !== b)) {
    bad("not an exported llama.cpp state (bad magic)");
  }
  const view = new DataView(blob.buffer, blob.byteOffset, blob.byteLength);
  const headerBytes = view.getUint32(STATE_MAGIC.length, true);
  const maxHeader = HEADER_BYTES_FIXED + HEADER_BYTES_PER_TOKEN * limits.maxTokens;
  const start = STATE_MAGIC.length + 4;
  if (headerBytes > maxHeader || start + headerBytes > blob.length) {
    bad(`header of ${headerBytes} bytes does not fit (at most ${maxHeader}, blob ${blob.length})`);
  }
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(
      blob.subarray(start, start + headerBytes),
    ));
  } catch (e) {
    bad(`unreadable header: ${e instanceof Error ? e.message : e}`);
  }
  const problem = headerProblem(header, limits.maxTokens);
  if (problem !== undefined) bad(problem);
  const h = header as KvStateHeader;
  const state = blob.subarray(start + headerBytes);
  if (state.length !== h.state_bytes) {
    bad(`the header says ${h.state_bytes} bytes of state, ${state.length} came`);
  }
  if (await sha256Hex(state) !== h.state_sha256) {
    bad("the state's checksum does not match its header (corrupted in transit?)");
  }
  const fileProblem = stateFileProblem(state, h.tokens);
  if (fileProblem !== undefined) bad(fileProblem);
  return { header: h, state };
}

function headerProblem(value: unknown, maxTokens: number): string | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return "header is not an object";
  }
  const h = value as Record<string, unknown>;
  const m = h.model as Record<string, unknown> | null;
  if (
    typeof m !== "object" || m === null || typeof m.sha256 !== "string" ||
    !/^[0-9a-f]{64}$/.test(m.sha256) || !isCount(m.bytes)
  ) {
    return "header.model must be {sha256 (hex), bytes}";
  }
  const tokens = h.tokens;
  if (!Array.isArray(tokens) || tokens.length < 1 || tokens.length > maxTokens) {
    return `header.tokens must hold 1 to ${maxTokens} token ids`;
  }
  if (!tokens.every((t) => isCount(t) && t < 2 ** 31)) {
    return "header.tokens must be integers in [0, 2^31)";
  }
  if (!isCount(h.cached_tokens) || h.cached_tokens > tokens.length) {
    return "header.cached_tokens must be an integer in [0, tokens]";
  }
  if (!isCount(h.streams) || h.streams < 1 || h.streams > MAX_STREAMS) {
    return `header.streams must be an integer in [1, ${MAX_STREAMS}]`;
  }
  if (!isCount(h.state_bytes)) return "header.state_bytes must be an integer >= 0";
  if (typeof h.state_sha256 !== "string" || !/^[0-9a-f]{64}$/.test(h.state_sha256)) {
    return "header.state_sha256 must be 64 hex digits";
  }
  return undefined;
}

// llama.cpp's sequence state file: u32 magic, u32 version, u32 token count, the tokens
// (i32), then the KV cache's own serialization, which starts with its u32 stream count.
function stateFileProblem(state: Uint8Array, tokens: readonly number[]): string | undefined {
  const need = 12 + 4 * tokens.length + 4;
  if (state.length < need) return `the state is ${state.length} bytes, shorter than its tokens`;
  const v = new DataView(state.buffer, state.byteOffset, state.byteLength);
  if (v.getUint32(0, true) !== LLAMA_STATE_SEQ_MAGIC) return "not a llama.cpp sequence state";
  if (v.getUint32(8, true) !== tokens.length) {
    return `the state holds ${v.getUint32(8, true)} tokens, its header ${tokens.length}`;
  }
  for (let i = 0; i < tokens.length; i++) {
    if (v.getInt32(12 + 4 * i, true) !== tokens[i]) {
      return `the state's token ${i} differs from its header's`;
    }
  }
  return undefined;
}

/**
 * Re-addresses a sequence state saved by a context of `from` KV streams for one of `to`:
 * llama.cpp writes the stream count, then one cell count per stream, the sequence's cells
 * after its own stream's count, and zero for every other stream; on load it puts the cells
 * into the destination sequence's stream whatever their position. So: the count becomes
 * `to`, the one non-empty stream goes first, the rest stay empty.
 *
 * @throws {LlamaCppStateError} the layout is not that one
 */
export function readdressStreams(
  state: Uint8Array,
  tokenCount: number,
  from: number,
  to: number,
): Uint8Array {
  const at = 12 + 4 * tokenCount;
  const v = new DataView(state.buffer, state.byteOffset, state.byteLength);
  const bad = (why: string): never => {
    throw new LlamaCppStateError(`cannot re-address its KV streams: ${why}`);
  };
  if (state.length < at + 4 + 4 * from) bad("too short");
  if (v.getUint32(at, true) !== from) bad(`it has ${v.getUint32(at, true)} streams, not ${from}`);
  let s = 0;
  while (s < from && v.getUint32(at + 4 + 4 * s, true) === 0) s++;
  if (s === from) bad("no stream holds cells");
  const payloadStart = at + 4 + 4 * s;
  const payloadEnd = state.length - 4 * (from - s - 1);
  if (payloadEnd <= payloadStart) bad("too short");
  for (let i = payloadEnd; i < state.length; i++) {
    if (state[i] !== 0) bad("more than one stream holds cells");
  }
  const out = new Uint8Array(at + 4 + (payloadEnd - payloadStart) + 4 * (to - 1));
  out.set(state.subarray(0, at), 0);
  new DataView(out.buffer).setUint32(at, to, true);
  out.set(state.subarray(payloadStart, payloadEnd), at + 4);
  return out;
}

/** Why `held` is not `prompt` less its last token, or undefined when it is. */
export function prefixProblem(
  held: readonly number[],
  prompt: readonly number[],
): string | undefined {
  if (held.length !== prompt.length - 1) {
    return `it holds ${held.length} tokens; the prompt's prefix is ${prompt.length - 1}`;
  }
  for (let i = 0; i < held.length; i++) {
    if (held[i] !== prompt[i]) return `its token ${i} differs from the prompt's`;
  }
  return undefined;
}

function isCount(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const digest = new Uint8Array(
    await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>),
  );
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}
