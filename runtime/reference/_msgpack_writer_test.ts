import assert from "node:assert/strict";
import { Encoder } from "@msgpack/msgpack";
import { encodeFast } from "./_msgpack_writer.ts";
import { msgpackDecode, msgpackEncode } from "./_msgpack.ts";
import { mulberry32 } from "../../cli/_bench/synthetic.ts";

const library = [new Encoder(), new Encoder({ useBigInt64: true })] as const;

// Every width boundary of msgpack's integer, string, array, map and binary forms.
const NUMBERS = [
  0,
  -0,
  1,
  127,
  128,
  255,
  256,
  65535,
  65536,
  4294967295,
  4294967296,
  Number.MAX_SAFE_INTEGER,
  -1,
  -32,
  -33,
  -128,
  -129,
  -32768,
  -32769,
  -2147483648,
  -2147483649,
  Number.MIN_SAFE_INTEGER,
  0.5,
  -1.25,
  1e300,
  Number.NaN,
  Infinity,
  -Infinity,
  2 ** 53,
];

function randomValue(r: () => number, depth: number, bigints: boolean): unknown {
  const pick = Math.floor(r() * (depth > 3 ? 6 : 9));
  switch (pick) {
    case 0:
      return NUMBERS[Math.floor(r() * NUMBERS.length)];
    case 1:
      return Math.floor((r() - 0.5) * 2 ** (Math.floor(r() * 40)));
    case 2: {
      const n = [0, 1, 31, 32, 255, 256, 70_000][Math.floor(r() * 7)]!;
      const chars = ["a", "é", "€", "😀", "z", "\n", '"'];
      let s = "";
      while (s.length < n) s += chars[Math.floor(r() * chars.length)];
      return s;
    }
    case 3:
      return r() < 0.5;
    case 4:
      return r() < 0.5 ? null : undefined;
    case 5:
      return bigints && r() < 0.5
        ? BigInt(Math.floor((r() - 0.5) * 2 ** 40)) * 1_000_000n
        : new Uint8Array([0, 255, 256, 70_000][Math.floor(r() * 4)]!).fill(7);
    case 6: // token ids: a long run of numbers, sometimes with something else at the end
    {
      const n = [0, 15, 16, 65535, 65536][Math.floor(r() * 5)]!;
      const a: unknown[] = Array.from({ length: n }, (_, i) => (i * 7919) % 200_000);
      if (r() < 0.3) a.push("end", -5, 1.5);
      return a;
    }
    case 7: {
      const n = [0, 3, 15, 16, 17][Math.floor(r() * 5)]!;
      return Array.from({ length: n }, () => randomValue(r, depth + 1, bigints));
    }
    default: {
      const n = [0, 2, 15, 16, 20][Math.floor(r() * 5)]!;
      const o: Record<string, unknown> = {};
      for (let i = 0; i < n; i++) {
        o[`k${i}_${"x".repeat(i * 3)}`] = randomValue(r, depth + 1, bigints);
      }
      return o;
    }
  }
}

Deno.test("encodeFast writes what @msgpack/msgpack writes, on 400 random values of every form", () => {
  for (let seed = 1; seed <= 400; seed++) {
    const bigints = seed % 2 === 0;
    const value = randomValue(mulberry32(seed), 0, bigints);
    const ours = encodeFast(value, bigints);
    assert.ok(ours !== undefined, `seed ${seed}: left to the library`);
    assert.deepEqual(ours, library[bigints ? 1 : 0].encode(value), `seed ${seed}`);
  }
});

Deno.test("encodeFast: every integer and float boundary, alone and in an array", () => {
  for (const bigints of [false, true]) {
    for (const n of NUMBERS) {
      assert.deepEqual(encodeFast(n, bigints), library[bigints ? 1 : 0].encode(n), `${n}`);
    }
    assert.deepEqual(encodeFast(NUMBERS, bigints), library[bigints ? 1 : 0].encode(NUMBERS));
  }
});

Deno.test("encodeFast leaves to the library what it does not write, and msgpackEncode falls back", () => {
  const date = new Date(1_700_000_000_000);
  for (const v of [date, { at: date }, new Uint16Array([1, 2]), "\ud800 lone", 5n]) {
    assert.equal(encodeFast(v, false), undefined);
  }
  // A bigint without useBigInt64 is the library's error, as before.
  assert.throws(() => msgpackEncode(5n));
  assert.deepEqual(msgpackDecode(msgpackEncode({ at: date })), { at: date });
  assert.deepEqual(msgpackEncode("\ud800 lone"), library[0].encode("\ud800 lone"));
});

Deno.test("a request of 20,000 token ids round-trips, and a grown buffer is not kept", () => {
  const request = {
    token_ids: Array.from({ length: 20_000 }, (_, i) => (i * 104_729) % 151_000),
    stop_conditions: { max_tokens: 16 },
    sampling_options: { temperature: 0.7 },
    eos_token_ids: [2],
  };
  const bytes = msgpackEncode(request);
  assert.deepEqual(bytes, library[0].encode(request));
  assert.deepEqual(msgpackDecode(bytes), request);
  const big = { blob: new Uint8Array(3 << 20) };
  assert.deepEqual(encodeFast(big, false), library[0].encode(big));
  assert.deepEqual(encodeFast([1, 2], false), library[0].encode([1, 2]));
});
