// The state variant without an engine: a StatePrefillWorker writes blobs of any size into a
// StateInbox's slots through the transfer agent; blobs that do not fit, expired requests and
// engine failures are skipped (the decode side is told at once); slots outside the decode
// worker's memory are refused at the door; abandoned slots come back when their late write
// is announced; a frame that claims more than its slot is refused.

import assert from "node:assert/strict";
import { TransferAgent } from "../../native/mod.ts";
import { PrefillSkippedError } from "./prefill_notifs.ts";
import {
  checkStatePrefillRequest,
  InvalidPrefillRequestError,
  statePrefillRequestProblem,
} from "./prefill_request.ts";
import type { RemoteStatePrefillRequest } from "./protocol.ts";
import { EmbeddedPrefillQueue } from "./queue.ts";
import { StateFrameError, StateInbox, type StateSlot } from "./state_inbox.ts";
import { type StatePrefillResult, StatePrefillWorker } from "./state_prefill_worker.ts";

const CHUNK = 256;

function blobOf(length: number, seed: number): Uint8Array {
  return Uint8Array.from({ length }, (_, i) => (i * 31 + seed) & 0xff);
}

function requestFor(
  inbox: StateInbox,
  slot: StateSlot,
  id: string,
  extra: Partial<RemoteStatePrefillRequest> = {},
): RemoteStatePrefillRequest {
  return {
    request_id: id,
    token_ids: [1, 2, 3, id.length],
    engine_agent: inbox.agent.name,
    first_chunk: slot.firstChunk,
    chunk_count: slot.chunkCount,
    expires_at: Date.now() + 60_000,
    ...extra,
  };
}

function setup(name: string, produce: (r: RemoteStatePrefillRequest) => Promise<Uint8Array>) {
  const decodeAgent = new TransferAgent(`${name}-decode`);
  const prefillAgent = new TransferAgent(`${name}-prefill`);
  const inbox = new StateInbox(decodeAgent, { slots: 3, slotBytes: 2000, chunkBytes: CHUNK });
  const worker = new StatePrefillWorker(prefillAgent, {
    chunkBytes: CHUNK,
    maxChunks: inbox.chunksPerSlot,
    produce,
    resolveDecode: () => Promise.resolve(inbox.memoryInfo()),
  });
  return {
    inbox,
    worker,
    [Symbol.dispose]() {
      worker.close();
      inbox.close();
      prefillAgent.close();
      decodeAgent.close();
    },
  };
}

Deno.test("StatePrefillWorker writes blobs of any size into a StateInbox slot", async () => {
  using s = setup("st-sizes", (r) => Promise.resolve(blobOf(r.token_ids.length * 100, 7)));
  const { inbox, worker } = s;
  // 2000 bytes and the 4-byte frame round up to 8 chunks of 256.
  assert.equal(inbox.chunksPerSlot, 8);
  assert.equal(inbox.slotBytes, 8 * CHUNK - 4);
  for (const tokens of [0, 1, 2, 3, 19, 20]) {
    const slot = inbox.takeSlot()!;
    const req = { ...requestFor(inbox, slot, `r${tokens}`), token_ids: Array(tokens).fill(5) };
    if (tokens === 0) {
      // An empty prompt never passes the door.
      await assert.rejects(worker.handle(req), InvalidPrefillRequestError);
      inbox.releaseSlot(slot);
      continue;
    }
    const res = await worker.handle(req);
    await inbox.waitWritten(req.request_id, { timeoutMs: 5000 });
    const expected = blobOf(tokens * 100, 7);
    assert.deepEqual(res, {
      requestId: req.request_id,
      bytes: expected.length,
      chunks: Math.ceil((expected.length + 4) / CHUNK),
      skipped: false,
    });
    assert.deepEqual(inbox.read(slot), expected);
    inbox.releaseSlot(slot);
  }
  assert.equal(inbox.freeSlots, 3);
  // A slot taken again starts with an empty frame: an old blob is never read as new.
  const again = Array.from({ length: 3 }, () => inbox.takeSlot()!);
  for (const slot of again) assert.equal(inbox.read(slot).length, 0);
});

Deno.test("a blob too large, an engine failure or an expired request is skipped and told", async () => {
  let fail = false;
  using s = setup("st-skip", () => {
    if (fail) return Promise.reject(new Error("prompt too long"));
    return Promise.resolve(blobOf(5000, 1));
  });
  const { inbox, worker } = s;
  const cases: Array<[string, Partial<RemoteStatePrefillRequest>, RegExp | undefined]> = [
    ["big", {}, /state of 5000 bytes needs 20 chunks; the slot has 8/],
    ["fails", {}, /the engine cannot prefill it: prompt too long/],
    ["expired", { expires_at: Date.now() - 1 }, undefined],
  ];
  for (const [id, extra, reason] of cases) {
    fail = id === "fails";
    const slot = inbox.takeSlot()!;
    const res: StatePrefillResult = await worker.handle(requestFor(inbox, slot, id, extra));
    assert.equal(res.skipped, true);
    assert.equal(res.bytes, 0);
    if (reason) assert.match(res.reason ?? "", reason);
    else assert.equal(res.reason, undefined);
    await assert.rejects(inbox.waitWritten(id, { timeoutMs: 5000 }), PrefillSkippedError);
    inbox.releaseSlot(slot);
  }
});

Deno.test("a slot outside the decode worker's memory is refused at the door", async () => {
  using s = setup("st-range", () => Promise.resolve(blobOf(10, 0)));
  const { inbox, worker } = s;
  const slot = inbox.takeSlot()!;
  const outside = requestFor(inbox, slot, "x", { first_chunk: 3 * 8 - 1, chunk_count: 2 });
  await assert.rejects(worker.handle(outside), /lie outside decode st-range-decode's 24 chunks/);
  for (
    const bad of [
      { ...outside, chunk_count: 0 },
      { ...outside, first_chunk: -1 },
      { ...outside, token_ids: [1.5] },
      { ...outside, expires_at: Infinity },
      { ...outside, request_id: "" },
      [],
      null,
    ]
  ) {
    assert.ok(statePrefillRequestProblem(bad) !== undefined, JSON.stringify(bad));
    assert.throws(() => checkStatePrefillRequest(bad), InvalidPrefillRequestError);
  }
  inbox.releaseSlot(slot);
});

Deno.test("StatePrefillWorker.run serves the queue; an abandoned slot returns after its late write", async () => {
  using s = setup("st-run", () => Promise.resolve(blobOf(600, 3)));
  const { inbox, worker } = s;
  const queue = new EmbeddedPrefillQueue<RemoteStatePrefillRequest>();
  const results: StatePrefillResult[] = [];
  const stop = new AbortController();
  const running = worker.run(queue, {
    signal: stop.signal,
    pollMs: 20,
    onResult: (r) => results.push(r),
  });
  try {
    // Given up on before the worker ran: the slot stays out until its write is announced.
    const slot = inbox.takeSlot()!;
    inbox.abandon(slot, "late");
    assert.equal(inbox.freeSlots, 2);
    await queue.enqueue({ request_id: "junk" } as unknown as RemoteStatePrefillRequest);
    await queue.enqueue(requestFor(inbox, slot, "late"));
    const deadline = Date.now() + 5000;
    while (inbox.freeSlots < 3) {
      assert.ok(Date.now() < deadline, "the abandoned slot to come back");
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.deepEqual(results.map((r) => [r.requestId, r.bytes]), [["late", 600]]);
  } finally {
    stop.abort();
    await running;
    await queue.close();
  }
});

Deno.test("a frame claiming more than its slot is refused with StateFrameError", () => {
  using decode = new TransferAgent("st-frame-decode");
  using rogue = new TransferAgent("st-frame-rogue");
  const inbox = new StateInbox(decode, { slots: 1, slotBytes: 100, chunkBytes: 64 });
  try {
    const slot = inbox.takeSlot()!;
    const src = rogue.allocate("DRAM", 64);
    rogue.registerMemory(src);
    rogue.writeMemory(src, 0, new Uint8Array([0xff, 0xff, 0, 0]));
    rogue.addRemoteAgent(decode.getAgentMetadata());
    const local = rogue.prepXferDlist("", rogue.getXferDescs({ region: src, blockBytes: 64 }));
    const remote = rogue.prepXferDlist(decode.name, inbox.memoryInfo().descs);
    rogue.transfer(rogue.makePreppedXfer("WRITE", local, [0], remote, [slot.firstChunk]));
    assert.throws(() => inbox.read(slot), StateFrameError);
    assert.throws(() => inbox.read(slot), /claims a blob of 65535 bytes; it holds at most 124/);
    inbox.releaseSlot(slot);
    assert.throws(() => inbox.releaseSlot(slot), /not taken/);
  } finally {
    inbox.close();
  }
});
