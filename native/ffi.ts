/**
 * The FFI binding of the native library: its symbol table, where it is found, loading it
 * once per process, and turning its return codes into typed errors.
 */

import {
  DescriptorRangeError,
  NativeLibraryError,
  NotificationQueueFullError,
  ReleasedHandleError,
  SizeMismatchError,
  TransferArgumentError,
  TransferBusyError,
  type TransferError,
  TransferFailedError,
  VramUnavailableError,
} from "./errors.ts";

const ABI_VERSION = 2;

const SYMBOLS = {
  dyn_abi_version: { parameters: [], result: "u32" },
  dyn_last_error: { parameters: ["buffer", "usize"], result: "usize" },
  dyn_process_token: { parameters: [], result: "u64" },
  dyn_vram_probe: { parameters: [], result: "i32" },
  dyn_cuda_kernel_info: { parameters: ["i32", "buffer", "usize"], result: "usize" },
  dyn_cuda_kernel_ptx: { parameters: ["buffer", "usize"], result: "usize" },
  dyn_region_alloc_dram: { parameters: ["u64", "buffer", "usize"], result: "i32" },
  dyn_region_open_dram: { parameters: ["buffer", "usize", "u64"], result: "i32" },
  dyn_region_alloc_vram: { parameters: ["u64", "i32", "buffer"], result: "i32" },
  dyn_region_open_vram: { parameters: ["buffer", "u64", "i32"], result: "i32" },
  dyn_region_free: { parameters: ["i32"], result: "i32" },
  dyn_region_write: { parameters: ["i32", "u64", "buffer", "usize"], result: "i32" },
  dyn_region_read: { parameters: ["i32", "u64", "buffer", "usize"], result: "i32" },
  dyn_region_copy: { parameters: ["i32", "u64", "i32", "u64", "u64"], result: "i32" },
  dyn_dlist_create: { parameters: ["buffer", "u32"], result: "i32" },
  dyn_dlist_free: { parameters: ["i32"], result: "i32" },
  dyn_xfer_create: {
    parameters: ["i32", "i32", "buffer", "u32", "i32", "buffer", "u32", "i32", "buffer", "usize"],
    result: "i32",
  },
  // Long copies run off the JS thread (armed first, on it, so the state is "PROC" at
  // once); small host-memory ones run inline (no thread hop).
  dyn_xfer_arm: { parameters: ["i32"], result: "i32" },
  dyn_xfer_run: { parameters: ["i32"], result: "i32", nonblocking: true },
  dyn_xfer_post: { parameters: ["i32"], result: "i32" },
  dyn_xfer_state: { parameters: ["i32"], result: "i32" },
  dyn_xfer_error: { parameters: ["i32", "buffer", "usize"], result: "usize" },
  dyn_xfer_free: { parameters: ["i32"], result: "i32" },
  dyn_ring_create: { parameters: ["u32", "u32", "buffer", "usize"], result: "i32" },
  dyn_ring_open: { parameters: ["buffer", "usize"], result: "i32" },
  dyn_ring_capacity: { parameters: ["i32"], result: "i32" },
  dyn_ring_push: { parameters: ["i32", "buffer", "usize"], result: "i32" },
  dyn_ring_drain: { parameters: ["i32", "buffer", "usize"], result: "i32" },
  dyn_ring_free: { parameters: ["i32"], result: "i32" },
} as const;

export type Native = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

/**
 * Where the native library is expected: `native/target/release/` beside this module,
 * as `deno task build:native` leaves it.
 *
 * @returns the absolute file path of the shared library for this OS
 */
export function nativeLibraryPath(): string {
  const file = Deno.build.os === "darwin"
    ? "libdynamo_native.dylib"
    : Deno.build.os === "windows"
    ? "dynamo_native.dll"
    : "libdynamo_native.so";
  const url = new URL(`./target/release/${file}`, import.meta.url);
  return url.protocol === "file:" ? decodeURIComponent(url.pathname) : url.href;
}

let loaded: Native | undefined;

/**
 * Loads the native library (once: the first library loaded serves every agent; later
 * calls without a path return at once). Agents call this themselves; call it early to
 * fail fast.
 *
 * @param path library file to load instead of {@linkcode nativeLibraryPath}
 * @throws {NativeLibraryError} the library is missing (run `deno task build:native`),
 *   cannot be loaded, or was built from other sources than this module
 * @example
 * ```ts
 * import { loadNativeLibrary } from "./mod.ts";
 * loadNativeLibrary();
 * ```
 */
export function loadNativeLibrary(path?: string): void {
  if (loaded && path === undefined) return;
  const file = path ?? nativeLibraryPath();
  let lib: Deno.DynamicLibrary<typeof SYMBOLS>;
  try {
    Deno.statSync(file);
  } catch (e) {
    throw new NativeLibraryError(
      `the native transfer library is not built (no ${file}): run \`deno task build:native\``,
      file,
      { cause: e },
    );
  }
  try {
    lib = Deno.dlopen(file, SYMBOLS);
  } catch (e) {
    throw new NativeLibraryError(
      `cannot load the native transfer library ${file} (${
        e instanceof Error ? e.message : String(e)
      }): rebuild it with \`deno task build:native\``,
      file,
      { cause: e },
    );
  }
  const abi = lib.symbols.dyn_abi_version();
  if (abi !== ABI_VERSION) {
    lib.close();
    throw new NativeLibraryError(
      `the native library ${file} has ABI ${abi}, this module needs ${ABI_VERSION}: ` +
        "rebuild it with `deno task build:native`",
      file,
    );
  }
  // The first library loaded serves every agent of the process.
  if (loaded) lib.close();
  else loaded = lib.symbols;
}

export function native(): Native {
  if (!loaded) loadNativeLibrary();
  return loaded!;
}

export const enc = new TextEncoder();
export const dec = new TextDecoder();

export function lastError(n: Native): string {
  const buf = new Uint8Array(1024);
  const len = Number(n.dyn_last_error(buf, BigInt(buf.length)));
  return dec.decode(buf.subarray(0, Math.min(len, buf.length)));
}

export function errorFor(code: number, message: string): TransferError {
  switch (code) {
    case -1:
      return new TransferArgumentError(message);
    case -2:
      return new DescriptorRangeError(message);
    case -3:
      return new ReleasedHandleError(message);
    case -4:
      return new SizeMismatchError(message);
    case -6:
      return new VramUnavailableError(message);
    case -8:
      return new NotificationQueueFullError(message);
    case -9:
      return new TransferBusyError(message);
    default:
      return new TransferFailedError(message, code);
  }
}

/** Returns `rc` when it is not an error code; throws the matching error otherwise. */
export function check(n: Native, rc: number, what: string): number {
  if (rc >= 0) return rc;
  throw errorFor(rc, `${what}: ${lastError(n)}`);
}

export function cString(buf: Uint8Array): string {
  const end = buf.indexOf(0);
  return dec.decode(buf.subarray(0, end < 0 ? buf.length : end));
}

export const hex = (b: Uint8Array) =>
  Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

export function unhex(s: string): Uint8Array {
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** Calls a native function that copies a string into a buffer and returns its length. */
export function nativeString(read: (buf: Uint8Array, cap: bigint) => number | bigint): string {
  let buf = new Uint8Array(4096);
  let len = Number(read(buf, BigInt(buf.length)));
  if (len > buf.length) {
    buf = new Uint8Array(len);
    len = Number(read(buf, BigInt(buf.length)));
  }
  return dec.decode(buf.subarray(0, Math.min(len, buf.length)));
}
