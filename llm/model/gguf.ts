// Reads the header and metadata of GGUF (v2/v3) model files, without touching the tensors.

import { DynamoError } from "../../runtime/errors.ts";

/** A GGUF file that cannot be read: truncated, corrupt, or of an unsupported kind. */
export class GgufError extends DynamoError {
  /** The file (or "<bytes>" for an in-memory buffer). */
  readonly path: string;
  /** Byte offset where reading failed, when known. */
  readonly offset: number | undefined;
  /** Creates the error for a file and, when known, the byte offset where reading failed. */
  constructor(path: string, message: string, offset?: number, options?: ErrorOptions) {
    super(
      `${path}: ${message}${offset === undefined ? "" : ` (at byte ${offset})`}`,
      options,
    );
    this.path = path;
    this.offset = offset;
  }
}

/** Metadata value types of the GGUF format. */
export const GgufType = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;
/** One of the values of {@linkcode GgufType}. */
export type GgufType = typeof GgufType[keyof typeof GgufType];

/** Header and metadata of a GGUF file. */
export interface GgufMetadata {
  /** Format version (2 or 3). */
  version: number;
  /** Number of tensors the file declares (their infos and data are not read). */
  tensorCount: number;
  /**
   * Metadata key-values. Integers are numbers (64-bit ones beyond 2^53 are bigints),
   * strings are strings, arrays are arrays.
   */
  metadata: Record<string, unknown>;
  /** Bytes of header + metadata (where the tensor infos start). */
  metadataBytes: number;
}

/** Limits that keep a corrupt file from causing huge allocations. */
export interface ReadGgufOptions {
  /** Largest header + metadata region accepted (default 512 MiB). */
  maxMetadataBytes?: number;
  /** Largest single string (default 64 MiB). */
  maxStringBytes?: number;
  /** Largest array length (default 16 Mi elements). */
  maxArrayLength?: number;
}

const MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
const CHUNK = 1 << 20;
const DEFAULTS: Required<ReadGgufOptions> = {
  maxMetadataBytes: 512 * 1024 * 1024,
  maxStringBytes: 64 * 1024 * 1024,
  maxArrayLength: 16 * 1024 * 1024,
};
/** Smallest encoding of one element, per type (a string is at least its u64 length). */
const MIN_SIZE: Record<number, number> = {
  0: 1,
  1: 1,
  2: 2,
  3: 2,
  4: 4,
  5: 4,
  6: 4,
  7: 1,
  8: 8,
  9: 12,
  10: 8,
  11: 8,
  12: 8,
};

type Fill = (offset: number, length: number) => Promise<Uint8Array>;

/** A cursor over a byte source that reads more on demand, within the source's size. */
class Cursor {
  #buf = new Uint8Array(0);
  #view = new DataView(this.#buf.buffer);
  #pos = 0;
  #base = 0;
  readonly #decoder = new TextDecoder("utf-8", { fatal: false });

  constructor(
    readonly name: string,
    readonly size: number,
    readonly fill: Fill,
    readonly limits: Required<ReadGgufOptions>,
  ) {}

  get offset(): number {
    return this.#base + this.#pos;
  }

  get remaining(): number {
    return this.size - this.offset;
  }

  /** True when `n` bytes are buffered (the fast path: no await). */
  has(n: number): boolean {
    return this.#buf.length - this.#pos >= n;
  }

  /** Buffers at least `n` bytes or throws: the file ends too soon or the region is too big. */
  async need(n: number): Promise<void> {
    if (this.has(n)) return;
    if (n > this.remaining) {
      throw new GgufError(
        this.name,
        `truncated or corrupt: needs ${n} more bytes, the file has ${this.remaining} left`,
        this.offset,
      );
    }
    if (this.offset + n > this.limits.maxMetadataBytes) {
      throw new GgufError(
        this.name,
        `metadata region is larger than ${this.limits.maxMetadataBytes} bytes (corrupt file?)`,
        this.offset,
      );
    }
    const keep = this.#buf.subarray(this.#pos);
    const want = Math.min(Math.max(n - keep.length, CHUNK), this.remaining - keep.length);
    const more = await this.fill(this.offset + keep.length, want);
    if (more.length < n - keep.length) {
      throw new GgufError(this.name, "truncated: the file ended while reading", this.offset);
    }
    const next = new Uint8Array(keep.length + more.length);
    next.set(keep, 0);
    next.set(more, keep.length);
    this.#base = this.offset;
    this.#pos = 0;
    this.#buf = next;
    this.#view = new DataView(next.buffer, next.byteOffset, next.byteLength);
  }

  async u32(): Promise<number> {
    if (!this.has(4)) await this.need(4);
    const v = this.#view.getUint32(this.#pos, true);
    this.#pos += 4;
    return v;
  }

  async u64(): Promise<number | bigint> {
    if (!this.has(8)) await this.need(8);
    const v = this.#view.getBigUint64(this.#pos, true);
    this.#pos += 8;
    return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  }

  /** A u64 that must be a count or a length: a number no larger than `max`. */
  async count(what: string, max: number): Promise<number> {
    const at = this.offset;
    const v = await this.u64();
    if (typeof v === "bigint" || v > max) {
      throw new GgufError(this.name, `corrupt ${what}: ${v} (at most ${max} possible here)`, at);
    }
    return v;
  }

  /** A string read from the buffer without awaiting, or undefined when not all buffered. */
  bufferedString(): string | undefined {
    if (!this.has(8)) return undefined;
    const len = this.#view.getBigUint64(this.#pos, true);
    if (len > BigInt(this.#buf.length - this.#pos - 8)) return undefined;
    const start = this.#pos + 8;
    const end = start + Number(len);
    this.#pos = end;
    return this.#decoder.decode(this.#buf.subarray(start, end));
  }

  async string(): Promise<string> {
    const len = await this.count(
      "string length",
      Math.min(this.remaining, this.limits.maxStringBytes),
    );
    if (!this.has(len)) await this.need(len);
    const s = this.#decoder.decode(this.#buf.subarray(this.#pos, this.#pos + len));
    this.#pos += len;
    return s;
  }

  /** One scalar of a fixed-size type, from the buffer (the caller made sure it is there). */
  scalar(type: number): unknown {
    const v = this.#view;
    const p = this.#pos;
    switch (type) {
      case GgufType.UINT8:
        this.#pos += 1;
        return v.getUint8(p);
      case GgufType.INT8:
        this.#pos += 1;
        return v.getInt8(p);
      case GgufType.UINT16:
        this.#pos += 2;
        return v.getUint16(p, true);
      case GgufType.INT16:
        this.#pos += 2;
        return v.getInt16(p, true);
      case GgufType.UINT32:
        this.#pos += 4;
        return v.getUint32(p, true);
      case GgufType.INT32:
        this.#pos += 4;
        return v.getInt32(p, true);
      case GgufType.FLOAT32:
        this.#pos += 4;
        return v.getFloat32(p, true);
      case GgufType.BOOL:
        this.#pos += 1;
        return v.getUint8(p) !== 0;
      case GgufType.UINT64: {
        this.#pos += 8;
        const x = v.getBigUint64(p, true);
        return x <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(x) : x;
      }
      case GgufType.INT64: {
        this.#pos += 8;
        const x = v.getBigInt64(p, true);
        return x <= BigInt(Number.MAX_SAFE_INTEGER) && x >= BigInt(Number.MIN_SAFE_INTEGER)
          ? Number(x)
          : x;
      }
      case GgufType.FLOAT64:
        this.#pos += 8;
        return v.getFloat64(p, true);
      default:
        throw new GgufError(this.name, `unknown value type ${type}`, p + this.#base);
    }
  }

  async value(type: number, depth = 0): Promise<unknown> {
    if (type === GgufType.STRING) return await this.string();
    if (type === GgufType.ARRAY) {
      if (depth > 4) throw new GgufError(this.name, "arrays nested too deeply", this.offset);
      const at = this.offset;
      const itemType = await this.u32();
      const min = MIN_SIZE[itemType];
      if (min === undefined) {
        throw new GgufError(this.name, `unknown array item type ${itemType}`, at);
      }
      const n = await this.count(
        "array length",
        Math.min(Math.floor(this.remaining / min), this.limits.maxArrayLength),
      );
      const out = new Array<unknown>(n);
      if (itemType === GgufType.STRING || itemType === GgufType.ARRAY) {
        for (let i = 0; i < n; i++) {
          // Vocabularies hold 100k+ strings: read buffered ones without a promise each.
          const fast = itemType === GgufType.STRING ? this.bufferedString() : undefined;
          out[i] = fast ?? await this.value(itemType, depth + 1);
        }
      } else {
        if (!this.has(n * min)) await this.need(n * min);
        for (let i = 0; i < n; i++) out[i] = this.scalar(itemType);
      }
      return out;
    }
    const size = MIN_SIZE[type];
    if (size === undefined) {
      throw new GgufError(this.name, `unknown value type ${type}`, this.offset - 4);
    }
    if (!this.has(size)) await this.need(size);
    return this.scalar(type);
  }
}

async function parse(cursor: Cursor): Promise<GgufMetadata> {
  const magic = await cursor.u32();
  if (magic !== MAGIC) {
    throw new GgufError(cursor.name, "not a GGUF file (no GGUF magic at the start)", 0);
  }
  const version = await cursor.u32();
  if (version === 1) {
    throw new GgufError(cursor.name, "GGUF version 1 is not supported (only v2 and v3)", 4);
  }
  if (version !== 2 && version !== 3) {
    const swapped = ((version & 0xff) << 24 | (version & 0xff00) << 8 |
      (version >>> 8) & 0xff00 | version >>> 24) >>> 0;
    throw new GgufError(
      cursor.name,
      swapped === 2 || swapped === 3
        ? "big-endian GGUF files are not supported"
        : `unsupported GGUF version ${version} (only v2 and v3)`,
      4,
    );
  }
  const tensorCount = await cursor.count("tensor count", Number.MAX_SAFE_INTEGER);
  // A key-value takes at least 8 (key length) + 4 (type) + 1 (value) bytes.
  const kvCount = await cursor.count("metadata count", Math.floor(cursor.remaining / 13));
  const metadata: Record<string, unknown> = {};
  for (let i = 0; i < kvCount; i++) {
    const key = await cursor.string();
    const type = await cursor.u32();
    const value = await cursor.value(type);
    Object.defineProperty(metadata, key, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return { version, tensorCount, metadata, metadataBytes: cursor.offset };
}

/**
 * Reads the header and metadata of a GGUF file, loading only that region from disk.
 *
 * @param path the .gguf file
 * @param options limits against corrupt files
 * @returns version, tensor count and metadata key-values
 * @throws {GgufError} not GGUF, unsupported version, truncated or corrupt
 *
 * @example
 * ```ts
 * const { metadata } = await readGgufMetadata("/models/qwen3-0.6b-q8_0.gguf");
 * console.log(metadata["general.architecture"]);
 * ```
 */
export async function readGgufMetadata(
  path: string,
  options: ReadGgufOptions = {},
): Promise<GgufMetadata> {
  const file = await Deno.open(path, { read: true });
  try {
    const { size } = await file.stat();
    const fill: Fill = async (offset, length) => {
      await file.seek(offset, Deno.SeekMode.Start);
      const out = new Uint8Array(length);
      let got = 0;
      while (got < length) {
        const n = await file.read(out.subarray(got));
        if (n === null) break;
        got += n;
      }
      return out.subarray(0, got);
    };
    return await parse(new Cursor(path, size, fill, { ...DEFAULTS, ...options }));
  } finally {
    file.close();
  }
}

/**
 * Parses GGUF header and metadata from bytes already in memory (the start of a file is
 * enough).
 *
 * @throws {GgufError} not GGUF, unsupported version, truncated or corrupt
 */
export function parseGgufMetadata(
  bytes: Uint8Array,
  options: ReadGgufOptions = {},
): Promise<GgufMetadata> {
  const fill: Fill = (offset, length) =>
    Promise.resolve(bytes.subarray(offset, Math.min(bytes.length, offset + length)));
  return parse(new Cursor("<bytes>", bytes.length, fill, { ...DEFAULTS, ...options }));
}

/** True when the file starts with the GGUF magic. */
export async function isGgufFile(path: string): Promise<boolean> {
  const file = await Deno.open(path, { read: true });
  try {
    const head = new Uint8Array(4);
    let got = 0;
    while (got < 4) {
      const n = await file.read(head.subarray(got));
      if (n === null) break;
      got += n;
    }
    return got === 4 && new DataView(head.buffer).getUint32(0, true) === MAGIC;
  } finally {
    file.close();
  }
}
