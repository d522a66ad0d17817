// The generated bindings: native/_bindings.ts is what deno_bindgen makes of native/src
// (where its CLI is installed, as `deno task build:native` leaves it), the comparison
// notices a changed signature, and the buffer conversion guards what the macro cannot.

import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { canonical, CLI } from "../scripts/build_native.ts";
import { bytesOf, native } from "./ffi.ts";
import { loadNativeLibrary, TransferAgent, TransferArgumentError } from "./mod.ts";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const cliInstalled = await Deno.stat(CLI).then(() => true, () => false);
if (!cliInstalled) {
  // deno-lint-ignore no-console -- says why a test is skipped
  console.log(`native: bindings check skipped: no ${CLI} (run \`deno task build:native\`)`);
}

Deno.test({
  name: "native/_bindings.ts is what deno_bindgen generates from native/src",
  ignore: !cliInstalled,
  fn: async () => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "scripts/build_native.ts", "--check"],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(300_000),
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    assert.ok(out.success, `build_native.ts --check failed:\n${text}`);
    assert.match(text, /native\/_bindings\.ts is current/);
  },
});

Deno.test("the bindings comparison ignores symbol order and catches a changed signature", async () => {
  const committed = await Deno.readTextFile(join(ROOT, "native", "_bindings.ts"));
  const entries = canonical(committed);
  assert.ok(entries.length >= 2 * 29, `expected 29 symbols and functions, got ${entries.length}`);
  assert.ok(entries.some((e) => e.startsWith("dyn_xfer_run:") && e.includes("nonblocking: true")));
  // The same symbols listed in reverse order compare equal.
  const blocks = committed.split(/\n(?=export function )/);
  const reversed = [blocks[0]!, ...blocks.slice(1).reverse()].join("\n");
  assert.deepEqual(canonical(reversed), entries);
  // A parameter that changed type does not.
  const changed = committed.replace(
    /(dyn_region_copy: \{\s*parameters: \[\s*)"i32"/,
    '$1"u32"',
  );
  assert.notEqual(changed, committed);
  assert.notDeepEqual(canonical(changed), entries);
});

Deno.test("buffers cross as bytes: empty ones keep a pointer, 4 GiB ones are refused", () => {
  loadNativeLibrary();
  const empty = bytesOf(new Uint8Array(0));
  assert.equal(empty.byteLength, 0);
  assert.notEqual(Deno.UnsafePointer.of(empty), null);
  const words = new Uint32Array([1, 2]);
  assert.deepEqual([...bytesOf(words)], [1, 0, 0, 0, 2, 0, 0, 0]);
  const huge = { buffer: new ArrayBuffer(0), byteOffset: 0, byteLength: 2 ** 32 };
  assert.throws(() => bytesOf(huge as ArrayBufferView), TransferArgumentError);
  // Through the library: an empty write and a transfer without notification succeed.
  const agent = new TransferAgent("bindings-test");
  try {
    const region = agent.allocate("DRAM", 4096);
    agent.registerMemory(region);
    agent.writeMemory(region, 0, new Uint8Array(0));
    agent.writeMemory(region, 0, new Uint8Array([9, 8, 7]));
    const descs = agent.getXferDescs({ region, blockBytes: 1024 });
    const list = agent.prepXferDlist("", descs);
    const xfer = agent.makePreppedXfer("WRITE", list, [0], list, [1]);
    assert.equal(agent.transfer(xfer), "DONE");
    assert.deepEqual([...agent.readMemory(region, 1024, 3)], [9, 8, 7]);
    // The generated function takes the buffer alone; its length goes along.
    const buf = new Uint8Array(64);
    assert.equal(native().dyn_last_error(buf) >= 0, true);
  } finally {
    agent.close();
  }
});
