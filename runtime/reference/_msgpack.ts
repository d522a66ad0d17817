// The reference wire's msgpack, through codec instances made once: `decode(bytes, options)` and
// `encode(value, options)` of @msgpack/msgpack build a new Decoder or Encoder (its 2 KiB buffer
// included) on every call, and these run once per streamed item.

import { Decoder, Encoder } from "@msgpack/msgpack";
import { encodeFast } from "./_msgpack_writer.ts";

const decoders = [new Decoder(), new Decoder({ useBigInt64: true })] as const;
const encoders = [new Encoder(), new Encoder({ useBigInt64: true })] as const;

/**
 * Decodes one msgpack value.
 *
 * @param bytes the encoded value
 * @param bigints 64-bit integers as bigint (else numbers)
 * @returns the value
 * @throws {RangeError} incomplete input
 * @throws {import("@msgpack/msgpack").DecodeError} malformed input
 */
export function msgpackDecode(bytes: Uint8Array, bigints = false): unknown {
  return decoders[bigints ? 1 : 0].decode(bytes);
}

/**
 * Encodes one value as msgpack (a copy: the encoder's buffer is reused), byte for byte as
 * @msgpack/msgpack does, through a faster writer for the values the wire carries.
 *
 * @param value the value
 * @param bigints bigint values as 64-bit integers
 * @returns the bytes
 */
export function msgpackEncode(value: unknown, bigints = false): Uint8Array {
  return encodeFast(value, bigints) ?? encoders[bigints ? 1 : 0].encode(value);
}
