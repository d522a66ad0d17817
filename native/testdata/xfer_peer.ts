// The other process of native/cross_process_test.ts: a "prefill-0" agent that writes its
// blocks into the parent's shared memory, then offers its own memory for the parent to
// read; or (mode "notify") an agent that sends numbered notifications to the parent.
// Talks JSON lines: parent -> stdin, stdout -> parent.

import { type MemType, TransferAgent } from "../mod.ts";

interface Notify {
  mode: "notify";
  name: string;
  metadata: string;
  count: number;
}

interface Start {
  mode?: undefined;
  metadata: string;
  descs: import("../mod.ts").XferDescList;
  blockBytes: number;
  blocks: number;
  memType: MemType;
  localIdx: number[];
  remoteIdx: number[];
  notif: string;
}

/** Byte `i` of block `b` of the peer's memory (the parent checks against the same). */
export function peerByte(b: number, i: number): number {
  return (b * 31 + i * 7 + 1) & 255;
}

async function* lines(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let buf = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    buf += chunk;
    for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
      yield buf.slice(0, nl);
      buf = buf.slice(nl + 1);
    }
  }
}

function send(msg: unknown): void {
  Deno.stdout.writeSync(new TextEncoder().encode(JSON.stringify(msg) + "\n"));
}

if (import.meta.main) {
  const input = lines(Deno.stdin.readable);
  const first = JSON.parse((await input.next()).value as string) as Start | Notify;
  if (first.mode === "notify") {
    // Many processes push into one queue at once: every message must arrive, in order.
    const agent = new TransferAgent(first.name);
    const peer = agent.addRemoteAgent(first.metadata);
    for (let i = 0; i < first.count; i++) agent.sendNotif(peer, `${first.name}:${i}`);
    agent.close(); // before the reply: the parent may end this process once it has it
    send({ sent: first.count });
    Deno.exit(0);
  }
  const start = first;
  const agent = new TransferAgent("prefill-0");
  const mem = agent.allocate(start.memType, start.blocks * start.blockBytes);
  agent.registerMemory(mem);
  const block = new Uint8Array(start.blockBytes);
  for (let b = 0; b < start.blocks; b++) {
    for (let i = 0; i < block.length; i++) block[i] = peerByte(b, i);
    agent.writeMemory(mem, b * start.blockBytes, block);
  }
  const localDescs = agent.getXferDescs({ region: mem, blockBytes: start.blockBytes });
  const peer = agent.addRemoteAgent(start.metadata);
  const local = agent.prepXferDlist("", localDescs);
  const remote = agent.prepXferDlist(peer, start.descs);
  const xfer = agent.makePreppedXfer(
    "WRITE",
    local,
    start.localIdx,
    remote,
    start.remoteIdx,
    start.notif,
  );
  const state = agent.transfer(xfer);
  await agent.waitXfer(xfer);
  send({
    state,
    final: agent.checkXferState(xfer),
    metadata: new TextDecoder().decode(agent.getAgentMetadata()),
    descs: localDescs,
  });

  // Wait until the parent has read our blocks, then report what it notified us.
  await input.next();
  let notifs = agent.getNewNotifs();
  const deadline = Date.now() + 10_000;
  while (notifs.size === 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 5));
    notifs = agent.getNewNotifs();
  }
  agent.close(); // before the reply: the parent may end this process once it has it
  send({ notifs: Object.fromEntries(notifs) });
  Deno.exit(0); // stdin may still hold a pending read
}
