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

import * as bindings from "./_bindings.ts";

const ABI_VERSION = 3;

/**
 * The native library's functions, as deno_bindgen generates them (native/_bindings.ts,
 * from the `#[deno_bindgen]` exports of native/src/lib.rs): a buffer parameter is one
 * `Uint8Array` (its length goes along), and `dyn_xfer_run` returns a promise.
 */
export type Native = Omit<typeof bindings, "load">;

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

/** The ABI version a library file reports, read through a binding of that one symbol. */
function abiOf(file: string): number {
  let lib: Deno.DynamicLibrary<{ dyn_abi_version: { parameters: []; result: "u32" } }>;
  try {
    lib = Deno.dlopen(file, { dyn_abi_version: { parameters: [], result: "u32" } });
  } catch (e) {
    throw new NativeLibraryError(
      `cannot load the native transfer library ${file} (${
        e instanceof Error ? e.message : String(e)
      }): rebuild it with \`deno task build:native\``,
      file,
      { cause: e },
    );
  }
  try {
    return lib.symbols.dyn_abi_version();
  } finally {
    lib.close();
  }
}

/**
 * Loads the native library (once: the first library loaded serves every agent; later
 * calls without a path return at once, with a path they only check that file). Agents
 * call this themselves; call it early to fail fast.
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
  try {
    Deno.statSync(file);
  } catch (e) {
    throw new NativeLibraryError(
      `the native transfer library is not built (no ${file}): run \`deno task build:native\``,
      file,
      { cause: e },
    );
  }
  // The version first, through a binding of its own: a stale build may lack symbols
  // that the generated bindings name.
  const abi = abiOf(file);
  if (abi !== ABI_VERSION) {
    throw new NativeLibraryError(
      `the native library ${file} has ABI ${abi}, this module needs ${ABI_VERSION}: ` +
        "rebuild it with `deno task build:native`",
      file,
    );
  }
  // The first library loaded serves every agent of the process.
  if (loaded) return;
  try {
    bindings.load(file);
  } catch (e) {
    throw new NativeLibraryError(
      `cannot load the native transfer library ${file} (${
        e instanceof Error ? e.message : String(e)
      }): rebuild it with \`deno task build:native\``,
      file,
      { cause: e },
    );
  }
  loaded = bindings;
}

export function native(): Native {
  if (!loaded) loadNativeLibrary();
  return loaded!;
}

// Deno passes an empty array's pointer as null, and deno_bindgen's wrapper makes a slice
// of every (pointer, length) pair: an empty view into a real buffer keeps that non-null.
const EMPTY = new Uint8Array(new ArrayBuffer(8), 0, 0);

/**
 * The bytes of a typed array, as the bindings take them. deno_bindgen passes a buffer's
 * length as u32, so a buffer of 4 GiB or more is refused here rather than truncated.
 */
export function bytesOf(view: ArrayBufferView): Uint8Array {
  if (view.byteLength >= 2 ** 32) {
    throw new TransferArgumentError(
      `a buffer passed to the native library must be under 4 GiB, got ${view.byteLength} bytes`,
    );
  }
  if (view.byteLength === 0) return EMPTY;
  return view instanceof Uint8Array
    ? view
    : new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

export const enc = new TextEncoder();
export const dec = new TextDecoder();

export function lastError(n: Native): string {
  const buf = new Uint8Array(1024);
  const len = Number(n.dyn_last_error(buf));
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
export function nativeString(read: (buf: Uint8Array) => number | bigint): string {
  let buf = new Uint8Array(4096);
  let len = Number(read(buf));
  if (len > buf.length) {
    buf = new Uint8Array(len);
    len = Number(read(buf));
  }
  return dec.decode(buf.subarray(0, Math.min(len, buf.length)));
}
