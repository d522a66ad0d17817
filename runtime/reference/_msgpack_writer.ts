// A msgpack encoder for the values the reference wire sends (plain objects, arrays, strings,
// numbers, booleans, null, bigints, byte arrays), writing the same bytes as @msgpack/msgpack's
// Encoder with its default options. A request's `token_ids` are most of its bytes: the library
// spends method calls, bounds checks and DataView writes on every token; this writes them in one
// loop into a buffer sized once (a 20,000-token request: 185 us there, 105 here; BENCHMARKS.md).
//
// Anything else the library would encode (a Date, through its timestamp extension; typed arrays
// other than Uint8Array; strings with a lone surrogate, which its own UTF-8 writer and
// TextEncoder write differently) is left to it: `encodeFast` returns undefined and the caller
// falls back.

const utf8 = new TextEncoder();

/** Thrown inside the writer for a value it leaves to the library. */
const UNSUPPORTED = Symbol("unsupported");

class Writer {
  bytes = new Uint8Array(4096);
  view = new DataView(this.bytes.buffer);
  pos = 0;
  readonly bigints: boolean;

  constructor(bigints: boolean) {
    this.bigints = bigints;
  }

  ensure(n: number): void {
    const need = this.pos + n;
    if (need <= this.bytes.length) return;
    const next = new Uint8Array(Math.max(need * 2, this.bytes.length * 2));
    next.set(this.bytes.subarray(0, this.pos));
    this.bytes = next;
    this.view = new DataView(next.buffer);
  }

  value(v: unknown, depth: number): void {
    if (depth > 100) throw new Error(`Too deep objects in depth ${depth}`);
    if (v === null || v === undefined) {
      this.ensure(1);
      this.bytes[this.pos++] = 0xc0;
    } else if (typeof v === "number") {
      this.ensure(9);
      this.number(v);
    } else if (typeof v === "string") {
      this.string(v);
    } else if (typeof v === "boolean") {
      this.ensure(1);
      this.bytes[this.pos++] = v ? 0xc3 : 0xc2;
    } else if (typeof v === "bigint" && this.bigints) {
      this.ensure(9);
      this.bytes[this.pos] = v >= 0n ? 0xcf : 0xd3;
      if (v >= 0n) this.view.setBigUint64(this.pos + 1, v);
      else this.view.setBigInt64(this.pos + 1, v);
      this.pos += 9;
    } else if (Array.isArray(v)) {
      this.array(v, depth);
    } else if (v instanceof Uint8Array) {
      this.binary(v);
    } else if (
      typeof v === "object" && !(v instanceof Date) && !ArrayBuffer.isView(v) &&
      !(v instanceof ArrayBuffer)
    ) {
      this.map(v as Record<string, unknown>, depth);
    } else {
      throw UNSUPPORTED;
    }
  }

  /** One number; the caller ensured 9 bytes. */
  number(v: number): void {
    const b = this.bytes;
    let p = this.pos;
    if (Number.isSafeInteger(v)) {
      if (v >= 0) {
        if (v < 0x80) b[p++] = v;
        else if (v < 0x100) {
          b[p++] = 0xcc;
          b[p++] = v;
        } else if (v < 0x10000) {
          b[p++] = 0xcd;
          b[p++] = v >>> 8;
          b[p++] = v & 0xff;
        } else if (v < 0x100000000) {
          b[p++] = 0xce;
          this.view.setUint32(p, v);
          p += 4;
        } else if (!this.bigints) {
          b[p++] = 0xcf;
          this.view.setUint32(p, Math.floor(v / 0x100000000));
          this.view.setUint32(p + 4, v >>> 0);
          p += 8;
        } else {
          b[p++] = 0xcb;
          this.view.setFloat64(p, v);
          p += 8;
        }
      } else if (v >= -0x20) {
        b[p++] = 0xe0 | (v + 0x20);
      } else if (v >= -0x80) {
        b[p++] = 0xd0;
        this.view.setInt8(p++, v);
      } else if (v >= -0x8000) {
        b[p++] = 0xd1;
        this.view.setInt16(p, v);
        p += 2;
      } else if (v >= -0x80000000) {
        b[p++] = 0xd2;
        this.view.setInt32(p, v);
        p += 4;
      } else if (!this.bigints) {
        b[p++] = 0xd3;
        this.view.setBigInt64(p, BigInt(v));
        p += 8;
      } else {
        b[p++] = 0xcb;
        this.view.setFloat64(p, v);
        p += 8;
      }
    } else {
      b[p++] = 0xcb;
      this.view.setFloat64(p, v);
      p += 8;
    }
    this.pos = p;
  }

  string(s: string): void {
    // A lone surrogate: the library's own UTF-8 writer and TextEncoder differ on it.
    if (!s.isWellFormed()) throw UNSUPPORTED;
    // At most 3 bytes per UTF-16 unit, 5 of header.
    this.ensure(5 + s.length * 3);
    const start = this.pos;
    // Write the text after the largest header, then move it if the header is shorter.
    const { written } = utf8.encodeInto(s, this.bytes.subarray(start + 5));
    const header = written < 32 ? 1 : written < 0x100 ? 2 : written < 0x10000 ? 3 : 5;
    if (header !== 5) this.bytes.copyWithin(start + header, start + 5, start + 5 + written);
    const b = this.bytes;
    if (header === 1) b[start] = 0xa0 + written;
    else if (header === 2) {
      b[start] = 0xd9;
      b[start + 1] = written;
    } else if (header === 3) {
      b[start] = 0xda;
      b[start + 1] = written >>> 8;
      b[start + 2] = written & 0xff;
    } else {
      b[start] = 0xdb;
      this.view.setUint32(start + 1, written);
    }
    this.pos = start + header + written;
  }

  length(n: number, fix: number, x16: number, x32: number): void {
    this.ensure(5);
    const b = this.bytes;
    if (n < 16) b[this.pos++] = fix + n;
    else if (n < 0x10000) {
      b[this.pos++] = x16;
      b[this.pos++] = n >>> 8;
      b[this.pos++] = n & 0xff;
    } else {
      b[this.pos++] = x32;
      this.view.setUint32(this.pos, n);
      this.pos += 4;
    }
  }

  array(a: readonly unknown[], depth: number): void {
    this.length(a.length, 0x90, 0xdc, 0xdd);
    // Numbers (token ids) in one run with the room for all of them made once.
    let i = 0;
    if (typeof a[0] === "number") {
      this.ensure(9 * a.length);
      const b = this.bytes;
      let p = this.pos;
      for (; i < a.length; i++) {
        const x = a[i];
        if (typeof x !== "number") break;
        // Token ids: non-negative integers under 2^31 (vocabularies of 150,000 put half of a
        // prompt's ids past 0xffff), written here; any other number by number().
        if (x >= 0 && (x | 0) === x) {
          if (x < 0x80) b[p++] = x;
          else if (x < 0x100) {
            b[p++] = 0xcc;
            b[p++] = x;
          } else if (x < 0x10000) {
            b[p++] = 0xcd;
            b[p++] = x >>> 8;
            b[p++] = x & 0xff;
          } else {
            b[p++] = 0xce;
            b[p++] = x >>> 24;
            b[p++] = (x >>> 16) & 0xff;
            b[p++] = (x >>> 8) & 0xff;
            b[p++] = x & 0xff;
          }
        } else {
          this.pos = p;
          this.number(x);
          p = this.pos;
        }
      }
      this.pos = p;
    }
    for (; i < a.length; i++) this.value(a[i], depth + 1);
  }

  binary(v: Uint8Array): void {
    const n = v.byteLength;
    this.ensure(5 + n);
    const b = this.bytes;
    if (n < 0x100) {
      b[this.pos++] = 0xc4;
      b[this.pos++] = n;
    } else if (n < 0x10000) {
      b[this.pos++] = 0xc5;
      b[this.pos++] = n >>> 8;
      b[this.pos++] = n & 0xff;
    } else {
      b[this.pos++] = 0xc6;
      this.view.setUint32(this.pos, n);
      this.pos += 4;
    }
    b.set(v, this.pos);
    this.pos += n;
  }

  map(o: Record<string, unknown>, depth: number): void {
    const keys = Object.keys(o);
    this.length(keys.length, 0x80, 0xde, 0xdf);
    for (const k of keys) {
      this.string(k);
      this.value(o[k], depth + 1);
    }
  }
}

const writers = [new Writer(false), new Writer(true)] as const;

/**
 * `value` as msgpack, byte for byte as @msgpack/msgpack's default Encoder writes it, or
 * undefined for a value this writer leaves to the library (a Date, a typed array other than
 * Uint8Array, a bigint without `bigints`).
 *
 * @param value the value
 * @param bigints bigints as 64-bit integers (the library's `useBigInt64`)
 * @returns a copy of the bytes, or undefined
 */
export function encodeFast(value: unknown, bigints: boolean): Uint8Array | undefined {
  const w = writers[bigints ? 1 : 0];
  w.pos = 0;
  try {
    w.value(value, 0);
  } catch (err) {
    if (err === UNSUPPORTED) return undefined;
    throw err;
  }
  const out = w.bytes.slice(0, w.pos);
  // A buffer grown for one huge value is not kept.
  if (w.bytes.length > 1 << 20) {
    w.bytes = new Uint8Array(4096);
    w.view = new DataView(w.bytes.buffer);
  }
  return out;
}
