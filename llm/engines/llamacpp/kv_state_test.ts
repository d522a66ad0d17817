// The exported-state format without a model: a round trip, every refusal with its reason,
// and the KV stream re-addressing on synthetic llama.cpp state files.

import assert from "node:assert/strict";
import { LlamaCppStateError } from "./errors.ts";
import {
  decodeKvState,
  encodeKvState,
  type KvStateHeader,
  modelIdentity,
  readdressStreams,
} from "./kv_state.ts";

const GGSQ = 0x67677371;
const MODEL = { sha256: "ab".repeat(32), bytes: 1234 };
const LIMITS = { maxTokens: 100, maxStateBytes: 1 << 20 };

/** A llama.cpp-shaped sequence state: header, tokens, streams, one stream's cells. */
function stateFile(tokens: number[], streams: number, at: number, payload: number[]): Uint8Array {
  const words = [GGSQ, 3, tokens.length, ...tokens, streams];
  for (let s = 0; s < streams; s++) {
    if (s === at) words.push(...payload);
    else words.push(0);
  }
  const out = new Uint8Array(words.length * 4);
  const v = new DataView(out.buffer);
  words.forEach((w, i) => v.setUint32(i * 4, w, true));
  return out;
}

function words(bytes: Uint8Array): number[] {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Array.from({ length: bytes.length / 4 }, (_, i) => v.getUint32(i * 4, true));
}

async function refused(blob: Uint8Array, reason: RegExp): Promise<void> {
  const err = await decodeKvState(blob, LIMITS).then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof LlamaCppStateError, `refused: ${reason}`);
  assert.match(err.reason, reason);
}

Deno.test("an exported state round-trips; a damaged one is refused with its reason", async () => {
  const tokens = [5, 6, 7];
  const state = stateFile(tokens, 2, 1, [2, 9, 9, 9]);
  const header = { model: MODEL, tokens, cached_tokens: 0, streams: 2 };
  const blob = await encodeKvState(header, state);
  const back = await decodeKvState(blob, LIMITS);
  assert.deepEqual(back.state, state);
  assert.deepEqual(
    { ...back.header, state_sha256: undefined },
    { ...header, state_bytes: state.length, state_sha256: undefined } as unknown as KvStateHeader,
  );

  const flip = blob.slice();
  flip[blob.length - 1]! ^= 1;
  await refused(flip, /checksum does not match/);
  await refused(blob.subarray(0, blob.length - 4), /header says \d+ bytes of state, \d+ came/);
  await refused(new Uint8Array(blob.length), /bad magic/);
  await assert.rejects(
    decodeKvState(blob, { ...LIMITS, maxStateBytes: 10 }),
    /more than the 10 a state of this engine takes/,
  );
  const lying = (h: unknown, s = state) => {
    const json = new TextEncoder().encode(JSON.stringify(h));
    const out = new Uint8Array(12 + json.length + s.length);
    out.set(blob.subarray(0, 8));
    new DataView(out.buffer).setUint32(8, json.length, true);
    out.set(json, 12);
    out.set(s, 12 + json.length);
    return out;
  };
  const good = back.header as unknown as Record<string, unknown>;
  await refused(lying({ ...good, tokens: [] }), /tokens must hold 1 to 100/);
  await refused(lying({ ...good, tokens: [1.5, 2, 3] }), /integers in/);
  await refused(lying({ ...good, cached_tokens: 4 }), /cached_tokens/);
  await refused(lying({ ...good, streams: 0 }), /streams/);
  await refused(lying({ ...good, model: { sha256: "x", bytes: 1 } }), /header\.model/);
  await refused(lying([1, 2]), /not an object/);
  const other = await encodeKvState({ ...header, tokens: [5, 6, 8] }, state);
  await refused(other, /the state's token 2 differs from its header's/);
  const fewer = await encodeKvState({ ...header, tokens: [5, 6] }, state);
  await refused(fewer, /the state holds 3 tokens, its header 2/);
  const notLlama = await encodeKvState(header, new Uint8Array(state.length));
  await refused(notLlama, /not a llama.cpp sequence state/);
  const huge = blob.slice();
  new DataView(huge.buffer).setUint32(8, 0x7fffffff, true);
  await refused(huge, /header of 2147483647 bytes does not fit/);
});

Deno.test("readdressStreams moves the one non-empty stream first and resizes the count", () => {
  const tokens = [1, 2];
  const payload = [2, 11, 12, 13, 14];
  // Saved by a context of 3 sequences from its stream 1, for contexts of 1, 2 and 5.
  const saved = stateFile(tokens, 3, 1, payload);
  for (const to of [1, 2, 5]) {
    const out = readdressStreams(saved, tokens.length, 3, to);
    assert.deepEqual(words(out), words(stateFile(tokens, to, 0, payload)), `to ${to}`);
  }
  // From one stream to several and back.
  const one = stateFile(tokens, 1, 0, payload);
  assert.deepEqual(
    words(readdressStreams(readdressStreams(one, 2, 1, 4), 2, 4, 1)),
    words(one),
  );
  assert.throws(
    () => readdressStreams(stateFile(tokens, 3, 1, [0]), 2, 3, 2),
    /no stream holds cells/,
  );
  const twoStreams = stateFile(tokens, 3, 1, payload);
  new DataView(twoStreams.buffer).setUint32(twoStreams.length - 4, 1, true);
  assert.throws(
    () => readdressStreams(twoStreams, 2, 3, 2),
    /more than one stream holds cells/,
  );
  assert.throws(() => readdressStreams(saved, 2, 4, 2), /it has 3 streams, not 4/);
});

Deno.test("modelIdentity hashes the whole file", async () => {
  const path = await Deno.makeTempFile();
  try {
    await Deno.writeTextFile(path, "abc");
    assert.deepEqual(await modelIdentity(path), {
      sha256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
      bytes: 3,
    });
  } finally {
    await Deno.remove(path);
  }
});
