// Two processes moving KV blocks through shared memory: a child Deno process
// (testdata/xfer_peer.ts) writes blocks into this process's registered memory and
// notifies; then this process reads the child's blocks back and notifies it.

import assert from "node:assert/strict";
import { loadNativeLibrary, type MemType, TransferAgent, type XferDescList } from "./mod.ts";
import { peerByte } from "./testdata/xfer_peer.ts";

// Fails the whole file with "run `deno task build:native`" when the library is missing.
loadNativeLibrary();
const vram = TransferAgent.vramStatus();

const PEER = new URL("./testdata/xfer_peer.ts", import.meta.url);

/** Reads JSON lines from a child's stdout, each read under a deadline. */
class LineReader {
  #reader: ReadableStreamDefaultReader<string>;
  #buf = "";
  constructor(stream: ReadableStream<Uint8Array>) {
    this.#reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  }
  async next(what: string, ms = 20_000): Promise<Record<string, unknown>> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)),
        ms,
      );
    });
    try {
      for (;;) {
        const nl = this.#buf.indexOf("\n");
        if (nl >= 0) {
          const line = this.#buf.slice(0, nl);
          this.#buf = this.#buf.slice(nl + 1);
          return JSON.parse(line);
        }
        const { value, done } = await Promise.race([this.#reader.read(), timeout]);
        if (done) throw new Error(`the peer process exited before sending ${what}`);
        this.#buf += value;
      }
    } finally {
      clearTimeout(timer);
    }
  }
  async drain(): Promise<void> {
    while (!(await this.#reader.read()).done) { /* discard */ }
  }
}

async function waitForNotif(agent: TransferAgent, from: string): Promise<string[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const got = agent.getNewNotifs().get(from);
    if (got) return got;
    if (Date.now() > deadline) throw new Error(`no notification from ${from} within 10 s`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

async function writeAndRead(memType: MemType): Promise<void> {
  const BLOCK = 4096;
  const BLOCKS = 32;
  const PEER_BLOCKS = 16;
  using decode = new TransferAgent("decode-0");
  const kv = decode.allocate(memType, BLOCKS * BLOCK);
  decode.registerMemory(kv);
  const descs = decode.getXferDescs({ region: kv, blockBytes: BLOCK });
  const localIdx = [0, 1, 2, 3, 4, 5, 6, 7];
  const remoteIdx = [12, 3, 30, 17, 8, 25, 0, 21]; // scattered

  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", PEER.href],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const out = new LineReader(child.stdout);
  const stdin = child.stdin.getWriter();
  const say = (msg: unknown) => stdin.write(new TextEncoder().encode(JSON.stringify(msg) + "\n"));
  try {
    await say({
      metadata: new TextDecoder().decode(decode.getAgentMetadata()),
      descs,
      blockBytes: BLOCK,
      blocks: PEER_BLOCKS,
      memType,
      localIdx,
      remoteIdx,
      notif: "kv_transfer:req-1",
    });
    const written = await out.next("the peer's WRITE report");
    assert.equal(written.final, "DONE");

    // WRITE: the child's blocks landed at the scattered indices; the rest is untouched.
    assert.deepEqual(await waitForNotif(decode, "prefill-0"), ["kv_transfer:req-1"]);
    const mem = decode.readMemory(kv, 0, BLOCKS * BLOCK);
    for (let b = 0; b < BLOCKS; b++) {
      const pos = remoteIdx.indexOf(b);
      const block = mem.subarray(b * BLOCK, (b + 1) * BLOCK);
      for (let i = 0; i < BLOCK; i++) {
        const want = pos >= 0 ? peerByte(localIdx[pos]!, i) : 0;
        if (block[i] !== want) assert.fail(`block ${b} byte ${i}: ${block[i]} != ${want}`);
      }
    }

    // READ: pull the child's blocks 8..15 into our blocks 20..27; the child is notified.
    const peer = decode.addRemoteAgent(written.metadata as string);
    assert.equal(peer, "prefill-0");
    const local = decode.prepXferDlist("", descs);
    const remote = decode.prepXferDlist(peer, written.descs as XferDescList);
    const readIdx = [8, 9, 10, 11, 12, 13, 14, 15];
    const intoIdx = [20, 21, 22, 23, 24, 25, 26, 27];
    const xfer = decode.makePreppedXfer("READ", local, intoIdx, remote, readIdx, "read-done");
    decode.transfer(xfer);
    await decode.waitXfer(xfer);
    assert.equal(decode.checkXferState(xfer), "DONE");
    for (const [k, b] of intoIdx.entries()) {
      const block = decode.readMemory(kv, b * BLOCK, BLOCK);
      for (let i = 0; i < BLOCK; i++) {
        if (block[i] !== peerByte(readIdx[k]!, i)) assert.fail(`read block ${b} byte ${i}`);
      }
    }
    await say("check-notifs");
    const reply = await out.next("the peer's notifications");
    assert.deepEqual(reply.notifs, { "decode-0": ["read-done"] });
    await stdin.close();
    assert.equal((await child.status).code, 0);
  } finally {
    try {
      child.kill();
    } catch { /* already exited */ }
    await out.drain().catch(() => {});
    await stdin.close().catch(() => {});
    await child.status;
  }
}

Deno.test(
  "two processes write and read blocks through shared memory, byte-exact, with notifications",
  () => writeAndRead("DRAM"),
);

Deno.test({
  name: "two processes write and read VRAM blocks through CUDA IPC, byte-exact",
  ignore: !vram.available,
  fn: () => writeAndRead("VRAM"),
});

Deno.test("notifications pushed by several processes at once all arrive, in order per sender", async () => {
  const SENDERS = 3;
  const COUNT = 300; // 900 messages fit the 1024-slot queue without draining
  using decode = new TransferAgent("decode-0");
  const metadata = new TextDecoder().decode(decode.getAgentMetadata());
  const children = Array.from({ length: SENDERS }, () =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", PEER.href],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn());
  const readers = children.map((c) => new LineReader(c.stdout));
  try {
    await Promise.all(children.map(async (c, k) => {
      const w = c.stdin.getWriter();
      const msg = { mode: "notify", name: `prefill-${k}`, metadata, count: COUNT };
      await w.write(new TextEncoder().encode(JSON.stringify(msg) + "\n"));
      await w.close();
    }));
    const replies = await Promise.all(readers.map((r, k) => r.next(`sender ${k}'s report`)));
    assert.deepEqual(replies, Array(SENDERS).fill({ sent: COUNT }));
    const got = decode.getNewNotifs();
    for (let k = 0; k < SENDERS; k++) {
      const want = Array.from({ length: COUNT }, (_, i) => `prefill-${k}:${i}`);
      assert.deepEqual(got.get(`prefill-${k}`), want);
    }
    assert.equal(got.size, SENDERS);
  } finally {
    for (const c of children) {
      try {
        c.kill();
      } catch { /* already exited */ }
    }
    await Promise.all(readers.map((r) => r.drain().catch(() => {})));
    await Promise.all(children.map((c) => c.status));
  }
});
