// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// TransferAgent within one process: byte-exact block copies, random descriptor lists
// against a reference copy in TypeScript, rejected bad inputs, and VRAM where a GPU is.

import assert from "node:assert/strict";
import fc from "fast-check";
import {
  DescriptorRangeError,
  loadNativeLibrary,
  NativeLibraryError,
  NotificationQueueFullError,
  ReleasedHandleError,
  SizeMismatchError,
  TransferAgent,
  TransferArgumentError,
  TransferBusyError,
  TransferFailedError,
  UnknownAgentError,
  VramUnavailableError,
  type XferOp,
} from "./mod.ts";
import { native } from "./ffi.ts";

// Fails the whole file with "run `deno task build:native`" when the library is missing.
loadNativeLibrary();

const vram = TransferAgent.vramStatus();
if (!vram.available) console.log(`native: VRAM tests skipped: ${vram.reason}`);

/** Deterministic bytes for a seed (xorshift). */
function pattern(len: number, seed: number): Uint8Array {
  const out = new Uint8Array(len);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 255;
  }
  return out;
}

/** A prefill/decode pair that know each other; decode's memory is the remote side. */
function pair(bytes: number, options: { inlineMaxBytes?: number } = {}) {
  const prefill = new TransferAgent("prefill-0", options);
  const decode = new TransferAgent("decode-0");
  const src = prefill.allocate("DRAM", bytes);
  const dst = decode.allocate("DRAM", bytes);
  prefill.registerMemory(src);
  decode.registerMemory(dst);
  prefill.addRemoteAgent(decode.getAgentMetadata());
  return {
    prefill,
    decode,
    src,
    dst,
    [Symbol.dispose]() {
      prefill.close();
      decode.close();
    },
  };
}

Deno.test("TransferAgent writes and reads scattered blocks byte-exact within one process", () => {
  const BLOCK = 1024;
  using p = pair(16 * BLOCK);
  const data = pattern(16 * BLOCK, 1);
  p.prefill.writeMemory(p.src, 0, data);
  const local = p.prefill.prepXferDlist(
    "",
    p.prefill.getXferDescs({ region: p.src, blockBytes: BLOCK }),
  );
  const remoteDescs = p.decode.getXferDescs({ region: p.dst, blockBytes: BLOCK });
  const remote = p.prefill.prepXferDlist("decode-0", JSON.parse(JSON.stringify(remoteDescs)));
  const write = p.prefill.makePreppedXfer("WRITE", local, [0, 3, 5], remote, [12, 1, 7], "w1");
  assert.equal(p.prefill.transfer(write), "DONE"); // small: inline
  assert.equal(p.prefill.checkXferState(write), "DONE");
  const got = p.decode.readMemory(p.dst, 0, 16 * BLOCK);
  for (const [s, d] of [[0, 12], [3, 1], [5, 7]] as const) {
    assert.deepEqual(
      got.subarray(d * BLOCK, (d + 1) * BLOCK),
      data.subarray(s * BLOCK, (s + 1) * BLOCK),
    );
  }
  assert.deepEqual(got.subarray(0, BLOCK), new Uint8Array(BLOCK));
  assert.deepEqual(p.decode.getNewNotifs(), new Map([["prefill-0", ["w1"]]]));
  assert.equal(p.decode.getNewNotifs().size, 0);

  // READ brings decode's block 12 back into prefill's block 15.
  const read = p.prefill.makePreppedXfer("READ", local, [15], remote, [12]);
  p.prefill.transfer(read);
  assert.deepEqual(
    p.prefill.readMemory(p.src, 15 * BLOCK, BLOCK),
    data.subarray(0, BLOCK),
  );
  assert.equal(p.decode.getNewNotifs().size, 0); // no notif asked for
});

Deno.test("a large batch runs off the JS thread and reports PROC, then DONE", async () => {
  const BLOCK = 64 * 1024;
  using p = pair(64 * BLOCK);
  const data = pattern(64 * BLOCK, 2);
  p.prefill.writeMemory(p.src, 0, data);
  const local = p.prefill.prepXferDlist(
    "",
    p.prefill.getXferDescs({ region: p.src, blockBytes: BLOCK }),
  );
  const remote = p.prefill.prepXferDlist(
    "decode-0",
    p.decode.getXferDescs({ region: p.dst, blockBytes: BLOCK }),
  );
  const idx = Array.from({ length: 64 }, (_, i) => i);
  const reversed = idx.map((i) => 63 - i);
  const xfer = p.prefill.makePreppedXfer("WRITE", local, idx, remote, reversed, "big");
  assert.equal(xfer.bytes, 64 * BLOCK);
  assert.equal(p.prefill.transfer(xfer), "PROC");
  await p.prefill.waitXfer(xfer);
  assert.equal(p.prefill.checkXferState(xfer), "DONE");
  const got = p.decode.readMemory(p.dst, 0, 64 * BLOCK);
  for (const i of idx) {
    const d = 63 - i;
    if (
      !bytesEqual(
        got.subarray(d * BLOCK, (d + 1) * BLOCK),
        data.subarray(i * BLOCK, (i + 1) * BLOCK),
      )
    ) {
      assert.fail(`block ${i} -> ${d} differs`);
    }
  }
  assert.deepEqual(p.decode.getNewNotifs().get("prefill-0"), ["big"]);
  // A finished transfer can be posted again. Its state is in progress from the moment
  // transfer() returns (never "not posted"), and while it is, posting it again is
  // refused. (The copy may already be done by the next statement, so each check accepts
  // the finished outcome too; the native tests pin the busy case down.)
  assert.equal(p.prefill.transfer(xfer), "PROC");
  assert.match(p.prefill.checkXferState(xfer), /^(PROC|DONE)$/);
  try {
    p.prefill.transfer(xfer); // only possible if the first run already finished
  } catch (e) {
    assert.ok(e instanceof TransferBusyError, String(e));
  }
  await p.prefill.waitXfer(xfer);
  assert.equal(p.prefill.checkXferState(xfer), "DONE");
  p.prefill.releaseXferHandle(xfer);
  assert.throws(() => p.prefill.transfer(xfer), ReleasedHandleError);
  assert.equal(p.decode.getNewNotifs().get("prefill-0")?.[0], "big");
});

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

Deno.test("random descriptor lists copy exactly like a reference copy in TypeScript", async () => {
  const SRC = 8192;
  const DST = 12288;
  const inline = pair(SRC); // small transfers inline on the JS thread
  const threaded = pair(SRC, { inlineMaxBytes: 0 }); // every transfer on a native thread
  const pairArb = fc.integer({ min: 1, max: 700 }).chain((length) =>
    fc.record({
      length: fc.constant(length),
      srcOffset: fc.integer({ min: 0, max: SRC - length }),
      dstOffset: fc.integer({ min: 0, max: DST - length }),
    })
  );
  try {
    await fc.assert(
      fc.asyncProperty(
        fc.array(pairArb, { minLength: 0, maxLength: 24 }),
        fc.constantFrom<XferOp>("WRITE", "READ"),
        fc.boolean(),
        fc.integer(),
        fc.integer({ min: 0, max: 1000 }),
        async (pairs, op, offThread, seed, rot) => {
          const p = offThread ? threaded : inline;
          const a = p.prefill.allocate("DRAM", SRC);
          const b = p.decode.allocate("DRAM", DST);
          p.prefill.registerMemory(a);
          p.decode.registerMemory(b);
          p.prefill.addRemoteAgent(p.decode.getAgentMetadata());
          const refA = pattern(SRC, seed);
          const refB = pattern(DST, seed + 1);
          p.prefill.writeMemory(a, 0, refA);
          p.decode.writeMemory(b, 0, refB);
          // The lists hold the descriptors in different orders; indices pair them up.
          const n = pairs.length;
          const lOrder = pairs.map((_, i) => i);
          const rOrder = pairs.map((_, i) => (i + rot) % Math.max(1, n));
          const lDescs = p.prefill.getXferDescs(
            lOrder.map((i) => ({
              region: a,
              offset: pairs[i]!.srcOffset,
              length: pairs[i]!.length,
            })),
          );
          const rDescs = p.decode.getXferDescs(
            rOrder.map((i) => ({
              region: b,
              offset: pairs[i]!.dstOffset,
              length: pairs[i]!.length,
            })),
          );
          const local = p.prefill.prepXferDlist("", lDescs);
          const remote = p.prefill.prepXferDlist("decode-0", rDescs);
          const remoteIdx = lOrder.map((i) => rOrder.indexOf(i));
          const xfer = p.prefill.makePreppedXfer(op, local, lOrder, remote, remoteIdx);
          p.prefill.transfer(xfer);
          await p.prefill.waitXfer(xfer);
          // Reference: the same copies, in order, on plain arrays.
          for (const q of pairs) {
            if (op === "WRITE") {
              refB.set(refA.subarray(q.srcOffset, q.srcOffset + q.length), q.dstOffset);
            } else {
              refA.set(refB.subarray(q.dstOffset, q.dstOffset + q.length), q.srcOffset);
            }
          }
          assert.ok(bytesEqual(p.prefill.readMemory(a, 0, SRC), refA), "local region differs");
          assert.ok(bytesEqual(p.decode.readMemory(b, 0, DST), refB), "remote region differs");
          p.prefill.releaseXferHandle(xfer);
          p.prefill.releaseDlistHandle(local);
          p.prefill.releaseDlistHandle(remote);
          p.prefill.releaseMemory(a);
          p.decode.releaseMemory(b);
        },
      ),
      { numRuns: 60 },
    );
  } finally {
    inline[Symbol.dispose]();
    threaded[Symbol.dispose]();
  }
});

Deno.test("bad arguments, indices and sizes are rejected with errors", () => {
  using p = pair(8 * 256);
  const { prefill, decode, src, dst } = p;
  assert.throws(() => prefill.allocate("HBM" as "DRAM", 10), TransferArgumentError);
  assert.throws(() => prefill.allocate("DRAM", 0), TransferArgumentError);
  assert.throws(() => prefill.allocate("DRAM", -5), TransferArgumentError);
  assert.throws(() => prefill.allocate("DRAM", 1.5), TransferArgumentError);
  assert.throws(() => new TransferAgent(""), TransferArgumentError);
  assert.throws(
    () => prefill.getXferDescs([{ region: src, offset: 2000, length: 100 }]),
    DescriptorRangeError,
  );
  assert.throws(
    () => prefill.getXferDescs([{ region: src, offset: 0, length: 0 }]),
    TransferArgumentError,
  );
  assert.throws(() => prefill.readMemory(src, 2040, 16), DescriptorRangeError);
  assert.throws(() => prefill.writeMemory(src, 2047, new Uint8Array(2)), DescriptorRangeError);
  assert.throws(() => prefill.readMemory(dst, 0, 1), TransferArgumentError); // decode's region

  const blocks = prefill.getXferDescs({ region: src, blockBytes: 256 });
  assert.equal(blocks.descs.length, 8);
  const local = prefill.prepXferDlist("", blocks);
  const remote = prefill.prepXferDlist(
    "decode-0",
    decode.getXferDescs({ region: dst, blockBytes: 256 }),
  );
  assert.throws(() => prefill.prepXferDlist("nobody", blocks), UnknownAgentError);
  assert.throws(
    () =>
      prefill.prepXferDlist("decode-0", {
        mem_type: "DRAM",
        descs: [{ region: "999", offset: 0, length: 1 }],
      }),
    TransferArgumentError,
  );
  assert.throws(
    () => prefill.prepXferDlist("", { mem_type: "VRAM", descs: blocks.descs }),
    TransferArgumentError,
  );
  for (const bad of [8, -1, 1.5, Number.NaN, 2 ** 32]) {
    assert.throws(
      () => prefill.makePreppedXfer("WRITE", local, [bad], remote, [0]),
      DescriptorRangeError,
      `local index ${bad}`,
    );
    assert.throws(
      () => prefill.makePreppedXfer("WRITE", local, [0], remote, [bad]),
      DescriptorRangeError,
      `remote index ${bad}`,
    );
  }
  assert.throws(
    () => prefill.makePreppedXfer("WRITE", local, [0, 1], remote, [0]),
    TransferArgumentError,
  );
  assert.throws(
    () => prefill.makePreppedXfer("MOVE" as XferOp, local, [0], remote, [0]),
    TransferArgumentError,
  );
  assert.throws(
    () => prefill.makePreppedXfer("WRITE", remote, [0], local, [0]),
    TransferArgumentError,
  );
  const half = prefill.prepXferDlist(
    "",
    prefill.getXferDescs([{ region: src, offset: 0, length: 128 }]),
  );
  assert.throws(
    () => prefill.makePreppedXfer("WRITE", half, [0], remote, [0]),
    SizeMismatchError,
  );
  assert.throws(
    () => prefill.makePreppedXfer("WRITE", local, [0], remote, [0], "x".repeat(5000)),
    TransferArgumentError,
  );
  const never = prefill.makePreppedXfer("WRITE", local, [0], remote, [0]);
  assert.throws(() => prefill.checkXferState(never), TransferArgumentError);
  assert.throws(() => decode.transfer(never), TransferArgumentError); // not decode's
  assert.throws(() => prefill.addRemoteAgent("{not json"), TransferArgumentError);
  assert.throws(() => prefill.addRemoteAgent('{"version":2}'), TransferArgumentError);
  assert.throws(() => prefill.addRemoteAgent(prefill.getAgentMetadata()), TransferArgumentError);
  assert.throws(() => prefill.sendNotif("nobody", "hi"), UnknownAgentError);
});

Deno.test("released memory, lists, transfers, peers and agents are refused", () => {
  using p = pair(4 * 256);
  const { prefill, decode, src, dst } = p;
  const descs = prefill.getXferDescs({ region: src, blockBytes: 256 });
  const local = prefill.prepXferDlist("", descs);
  const remote = prefill.prepXferDlist(
    "decode-0",
    decode.getXferDescs({ region: dst, blockBytes: 256 }),
  );
  const xfer = prefill.makePreppedXfer("WRITE", local, [0], remote, [1]);
  prefill.releaseXferHandle(xfer);
  assert.throws(() => prefill.transfer(xfer), ReleasedHandleError);
  assert.throws(() => prefill.releaseXferHandle(xfer), ReleasedHandleError);

  const other = prefill.prepXferDlist("", descs);
  prefill.releaseDlistHandle(other);
  assert.throws(
    () => prefill.makePreppedXfer("WRITE", other, [0], remote, [0]),
    ReleasedHandleError,
  );

  prefill.removeRemoteAgent("decode-0");
  assert.throws(
    () => prefill.makePreppedXfer("WRITE", local, [0], remote, [0]),
    ReleasedHandleError,
  );
  assert.throws(() => prefill.removeRemoteAgent("decode-0"), UnknownAgentError);

  prefill.releaseMemory(src);
  assert.ok(src.released);
  assert.throws(() => prefill.writeMemory(src, 0, new Uint8Array(1)), ReleasedHandleError);
  assert.throws(() => prefill.prepXferDlist("", descs), ReleasedHandleError);
  assert.throws(
    () => prefill.makePreppedXfer("WRITE", local, [0], local, [1]),
    ReleasedHandleError,
  );
  assert.throws(() => prefill.releaseMemory(src), ReleasedHandleError);

  decode.close();
  assert.throws(() => decode.getNewNotifs(), ReleasedHandleError);
  assert.throws(() => decode.allocate("DRAM", 16), ReleasedHandleError);
});

Deno.test("forged metadata cannot reach outside a region or open foreign segments", () => {
  using p = pair(1024);
  const { prefill, decode } = p;
  const meta = JSON.parse(new TextDecoder().decode(decode.getAgentMetadata()));
  // Same process: claims the region is 1 GiB; the native side knows it is 1 KiB.
  meta.regions[0].bytes = 2 ** 30;
  prefill.addRemoteAgent(JSON.stringify(meta));
  assert.throws(
    () =>
      prefill.prepXferDlist("decode-0", {
        mem_type: "DRAM",
        descs: [{ region: meta.regions[0].key, offset: 4096, length: 64 }],
      }),
    DescriptorRangeError,
  );
  // Another process: only this library's segments can be named, and must exist.
  const foreign = { ...meta, name: "decode-9", process: "0" };
  foreign.notif_queue = { shm: "/etc-passwd", native_id: 1 };
  assert.throws(() => prefill.addRemoteAgent(JSON.stringify(foreign)), TransferArgumentError);
  foreign.notif_queue = { shm: "/dynamo-0-0-00000000", native_id: 1 };
  assert.throws(() => prefill.addRemoteAgent(JSON.stringify(foreign)), TransferFailedError);
});

Deno.test("notifications without a transfer arrive in order; a full queue is an error", () => {
  const small = new TransferAgent("decode-1", { notifQueueSlots: 2 });
  const sender = new TransferAgent("prefill-1");
  try {
    assert.equal(small.getNewNotifs().size, 0);
    sender.addRemoteAgent(small.getAgentMetadata());
    sender.sendNotif("decode-1", "a");
    sender.sendNotif("decode-1", "b");
    assert.throws(() => sender.sendNotif("decode-1", "c"), NotificationQueueFullError);
    assert.deepEqual(small.getNewNotifs(), new Map([["prefill-1", ["a", "b"]]]));
    sender.sendNotif("decode-1", "c");
    assert.deepEqual(small.getNewNotifs(), new Map([["prefill-1", ["c"]]]));
  } finally {
    small.close();
    sender.close();
  }
});

Deno.test("loadNativeLibrary explains how to build a missing library", () => {
  assert.throws(
    () => loadNativeLibrary("/nonexistent/libdynamo_native.so"),
    (e: unknown) => e instanceof NativeLibraryError && /deno task build:native/.test(e.message),
  );
});

Deno.test({
  name: "VRAM regions round-trip bytes and take batched writes from DRAM and VRAM",
  ignore: !vram.available,
  fn: async () => {
    const BLOCK = 64 * 1024;
    const gpuA = new TransferAgent("gpu-prefill");
    const gpuB = new TransferAgent("gpu-decode");
    try {
      const a = gpuA.allocate("VRAM", 16 * BLOCK);
      const host = gpuA.allocate("DRAM", 16 * BLOCK);
      const b = gpuB.allocate("VRAM", 16 * BLOCK);
      gpuA.registerMemory([a, host]);
      gpuB.registerMemory(b);
      assert.deepEqual(gpuA.readMemory(a, 0, 16), new Uint8Array(16)); // zeroed
      const data = pattern(16 * BLOCK, 7);
      gpuA.writeMemory(host, 0, data);
      gpuA.copyMemory(host, 0, a, 0, 16 * BLOCK);
      assert.ok(bytesEqual(gpuA.readMemory(a, 0, 16 * BLOCK), data));

      gpuA.addRemoteAgent(gpuB.getAgentMetadata());
      const local = gpuA.prepXferDlist("", gpuA.getXferDescs({ region: a, blockBytes: BLOCK }));
      const remote = gpuA.prepXferDlist(
        "gpu-decode",
        gpuB.getXferDescs({ region: b, blockBytes: BLOCK }),
      );
      const xfer = gpuA.makePreppedXfer("WRITE", local, [0, 5, 9], remote, [15, 2, 4], "vram");
      assert.equal(gpuA.transfer(xfer), "PROC");
      await gpuA.waitXfer(xfer);
      for (const [s, d] of [[0, 15], [5, 2], [9, 4]] as const) {
        assert.ok(bytesEqual(
          gpuB.readMemory(b, d * BLOCK, BLOCK),
          data.subarray(s * BLOCK, (s + 1) * BLOCK),
        ));
      }
      assert.deepEqual(gpuB.getNewNotifs().get("gpu-prefill"), ["vram"]);
    } finally {
      gpuA.close();
      gpuB.close();
    }
  },
});

Deno.test({
  name: "VRAM allocation fails with a clear error where no GPU is",
  ignore: vram.available,
  fn: () => {
    using agent = new TransferAgent("no-gpu");
    assert.throws(
      () => agent.allocate("VRAM", 1024),
      (e: unknown) => e instanceof VramUnavailableError && /VRAM unavailable/.test(e.message),
    );
  },
});

Deno.test("malformed notification records pushed straight onto a queue are read without a crash", () => {
  const decode = new TransferAgent("decode-raw");
  const sender = new TransferAgent("prefill-raw");
  try {
    const meta = JSON.parse(new TextDecoder().decode(decode.getAgentMetadata()));
    const ring: number = meta.notif_queue.native_id;
    const n = native();
    for (
      const rec of [
        [], // no name length at all
        [0xff], // half a name length
        [0xff, 0xff, 0x61], // a name length past the record
        [2, 0, 0xff, 0xfe, 0x68, 0x69], // a name that is not UTF-8
      ]
    ) {
      const bytes = new Uint8Array(rec);
      assert.equal(n.dyn_ring_push(ring, bytes), 0);
    }
    sender.addRemoteAgent(decode.getAgentMetadata());
    sender.sendNotif("decode-raw", "after");
    const got = decode.getNewNotifs();
    assert.deepEqual(got.get("prefill-raw"), ["after"]);
    assert.equal([...got.values()].flat().length, 5);
  } finally {
    sender.close();
    decode.close();
  }
});
