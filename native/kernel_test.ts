// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// The batched copy kernel (cuda/copy_blocks.cu) without a GPU: its per-thread logic run on
// the CPU against memcpy, the PTX the library embeds (and ptxas assembling it), and the
// status and errors where no GPU is. With a GPU, a VRAM-to-VRAM batch through the kernel.

import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadNativeLibrary, TransferAgent, VramUnavailableError } from "./mod.ts";
import {
  BYTES,
  COPIES,
  expectedAfter,
  firstDiff,
  patternData,
  prepCopies,
} from "./testdata/copies.ts";

// Fails the whole file with "run `deno task build:native`" when the library is missing.
loadNativeLibrary();

const vram = TransferAgent.vramStatus();
const CUDA_DIR = fileURLToPath(new URL("./cuda/", import.meta.url));

/** nvcc as build.rs finds it: $NVCC, else on PATH, else /usr/local/cuda/bin/nvcc. */
function findNvcc(): string | undefined {
  const isFile = (p: string) => {
    try {
      return Deno.statSync(p).isFile;
    } catch {
      return false;
    }
  };
  const env = Deno.env.get("NVCC");
  if (env !== undefined) {
    if (env === "" || env === "none") return undefined;
    if (env.includes("/")) return isFile(env) ? env : undefined;
  }
  const name = env ?? "nvcc";
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (dir !== "" && isFile(join(dir, name))) return join(dir, name);
  }
  return env === undefined && isFile("/usr/local/cuda/bin/nvcc")
    ? "/usr/local/cuda/bin/nvcc"
    : undefined;
}

const nvcc = findNvcc();
if (!nvcc) {
  console.log(
    "native/kernel_test: nvcc not found: the kernel's CPU, ptxas and mock-CUDA tests skip",
  );
}

/** Runs a command; fails the test with its output unless it exits 0. */
async function run(cmd: string, args: string[]): Promise<string> {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, `${cmd} ${args.join(" ")} exited ${out.code}:\n${text}`);
  return text;
}

Deno.test({
  name: "the copy kernel's per-thread logic copies like memcpy in simulated launches (CPU)",
  ignore: !nvcc,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "dynamo-kernel-" });
    try {
      const exe = join(dir, "copy_blocks_test");
      // -fno-strict-aliasing: on the host the 16-byte words are plain loads through casts.
      await run(nvcc!, [
        "-O2",
        "-Xcompiler",
        "-fno-strict-aliasing",
        "-o",
        exe,
        join(CUDA_DIR, "copy_blocks_test.cpp"),
      ]);
      for (const seed of [1, 2, 3]) {
        const out = await run(exe, [String(seed)]);
        assert.match(out, new RegExp(`copy_blocks_test: ok \\(seed ${seed}\\)`));
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("the kernel status agrees with the PTX the library embeds", () => {
  const status = TransferAgent.cudaKernelStatus();
  const ptx = TransferAgent.cudaKernelPtx();
  assert.equal(status.ptxEmbedded, ptx.length > 0);
  assert.equal(status.ptxBytes, ptx.length);
  if (status.ptxEmbedded) {
    assert.match(ptx, /\.visible \.entry dyn_copy_blocks\(/);
    assert.match(status.ptxArch, /^compute_\d+$/);
    assert.match(ptx, new RegExp(`\\.target sm_${status.ptxArch.slice("compute_".length)}\\b`));
    assert.match(status.buildNote, /nvcc/);
  } else {
    assert.equal(status.ptxArch, "");
    assert.equal(status.loaded, false);
    assert.match(status.reason ?? "", /no PTX embedded/);
  }
  assert.equal(status.loaded, status.reason === undefined);
});

Deno.test({
  name: "a library built where nvcc is embeds the kernel's PTX",
  ignore: !nvcc,
  fn: () => {
    const status = TransferAgent.cudaKernelStatus();
    assert.ok(
      status.ptxEmbedded,
      `nvcc is at ${nvcc} but the library has no PTX (${status.buildNote}): ` +
        "rebuild it with `deno task build:native`",
    );
  },
});

Deno.test({
  name: "the embedded PTX assembles for Ampere and Hopper (ptxas)",
  ignore: !nvcc || TransferAgent.cudaKernelPtx() === "",
  fn: async () => {
    const ptxas = join(dirname(nvcc!), "ptxas");
    const dir = await Deno.makeTempDir({ prefix: "dynamo-ptx-" });
    try {
      const file = join(dir, "copy_blocks.ptx");
      await Deno.writeTextFile(file, TransferAgent.cudaKernelPtx());
      for (const arch of ["sm_80", "sm_90"]) {
        await run(ptxas, [`-arch=${arch}`, "-o", join(dir, `${arch}.cubin`), file]);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "the launch path copies through a mock CUDA library and falls back to copies (no GPU)",
  ignore: !nvcc || TransferAgent.cudaKernelPtx() === "",
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "dynamo-mock-cuda-" });
    try {
      const lib = join(dir, "libmockcuda.so");
      await run(nvcc!, [
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-Xcompiler",
        "-fno-strict-aliasing",
        "--cudart",
        "none",
        "-o",
        lib,
        fileURLToPath(new URL("./testdata/mock_cuda.cpp", import.meta.url)),
      ]);
      // One file under both names: dlopen gives the same object, so one set of counters.
      await Deno.symlink(lib, join(dir, "libcudart.so"));
      await Deno.symlink(lib, join(dir, "libcuda.so.1"));
      const script = fileURLToPath(new URL("./testdata/mock_cuda_run.ts", import.meta.url));
      const scenarios = [["kernel", ""], ["module-fails", "module"], ["launch-fails", "launch"]];
      for (const [scenario, fail] of scenarios as [string, string][]) {
        const out = await new Deno.Command(Deno.execPath(), {
          args: ["run", "-A", script, scenario, lib],
          env: { LD_LIBRARY_PATH: dir, MOCK_CUDA_FAIL: fail },
          stdout: "piped",
          stderr: "piped",
        }).output();
        const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
        assert.equal(out.code, 0, `mock scenario ${scenario} failed:\n${text}`);
        assert.match(text, new RegExp(`ok ${scenario}`));
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "without a GPU, VRAM fails with VramUnavailableError and the kernel says why it is not loaded",
  ignore: vram.available,
  fn: () => {
    const status = TransferAgent.cudaKernelStatus();
    assert.equal(status.loaded, false);
    const why = status.ptxEmbedded ? /VRAM unavailable/ : /no PTX embedded/;
    assert.match(status.reason ?? "", why);
    assert.equal(status.kernelBatches, 0);
    using agent = new TransferAgent("no-gpu-kernel");
    assert.throws(
      () => agent.allocate("VRAM", 4096),
      (e: unknown) => e instanceof VramUnavailableError && /VRAM unavailable/.test(e.message),
    );
    // Probing again (or another device) is still an answer, not a crash.
    assert.equal(TransferAgent.cudaKernelStatus({ device: 3 }).loaded, false);
  },
});

Deno.test({
  name: "a VRAM-to-VRAM batch of unaligned blocks runs as one kernel launch where it loads",
  ignore: !vram.available,
  fn: async () => {
    const a = new TransferAgent("kernel-src");
    const b = new TransferAgent("kernel-dst");
    try {
      const src = a.allocate("VRAM", BYTES);
      const host = a.allocate("DRAM", BYTES);
      const dst = b.allocate("VRAM", BYTES);
      a.registerMemory([src, host]);
      b.registerMemory(dst);
      const data = patternData();
      a.writeMemory(src, 0, data);
      const before = TransferAgent.cudaKernelStatus();
      const xfer = prepCopies(a, src, b, dst, COPIES);
      a.transfer(xfer);
      await a.waitXfer(xfer);
      const after = TransferAgent.cudaKernelStatus();
      const got = b.readMemory(dst, 0, BYTES);
      assert.equal(firstDiff(got, expectedAfter(COPIES, data)), -1, "first wrong byte");
      if (before.loaded) {
        assert.equal(after.kernelBatches, before.kernelBatches + 1);
      } else {
        assert.equal(after.copyBatches, before.copyBatches + 1);
        assert.ok(after.lastCopyReason, "a batch run as copies says why");
      }
      // With host memory on one side the batch runs as copies, and says so.
      const up = prepCopies(a, host, b, dst, COPIES);
      a.transfer(up);
      await a.waitXfer(up);
      const last = TransferAgent.cudaKernelStatus();
      assert.equal(last.copyBatches, after.copyBatches + 1);
      assert.equal(last.lastCopyReason, "host memory on one side");
    } finally {
      a.close();
      b.close();
    }
  },
});
