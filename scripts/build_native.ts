// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task build:native`: builds native/ (Rust) and generates its TypeScript bindings,
// native/_bindings.ts, with deno_bindgen's CLI from the `#[deno_bindgen]` exports.
// `--check` regenerates into memory and fails when the committed file differs.
//
// Network is used once per machine: `cargo fetch` for the crate's dependencies and `cargo
// install` of the pinned CLI, into a per-user cache outside the clone
// (`$DYNAMO_CACHE_DIR`, else `$XDG_CACHE_HOME/dynamo-deno`, else `~/.cache/dynamo-deno`), so a
// fresh clone on the same machine reuses it; every build after that is offline.

import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const NATIVE = join(ROOT, "native");
const MANIFEST = join(NATIVE, "Cargo.toml");
const BINDINGS = join(NATIVE, "_bindings.ts");
const CLI_VERSION = "0.1.0";
const CACHE = Deno.env.get("DYNAMO_CACHE_DIR") ||
  join(
    Deno.env.get("XDG_CACHE_HOME") || join(Deno.env.get("HOME") ?? ROOT, ".cache"),
    "dynamo-deno",
  );
const CLI_ROOT = join(CACHE, `deno_bindgen_cli-${CLI_VERSION}`);
/** The pinned deno_bindgen CLI, where `deno task build:native` installs it. */
export const CLI = join(CLI_ROOT, "bin", "deno_bindgen");
/** What the generated file's default library path becomes (the CLI writes this machine's). */
const LIBRARY_DEFAULT = "native/target/release/libdynamo_native.so";

/** A step that failed: the command and what it printed. */
class BuildError extends Error {
  override name = "BuildError";
}

async function run(
  cmd: string,
  args: string[],
  options: { cwd?: string; env?: Record<string, string>; quiet?: boolean } = {},
): Promise<{ ok: boolean; stdout: string; stderr: string }> {
  const out = await new Deno.Command(cmd, {
    args,
    cwd: options.cwd ?? ROOT,
    env: options.env,
    stdout: "piped",
    stderr: options.quiet ? "piped" : "inherit",
  }).output();
  const dec = new TextDecoder();
  return {
    ok: out.success,
    stdout: dec.decode(out.stdout),
    stderr: options.quiet ? dec.decode(out.stderr) : "",
  };
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
  }
}

/** The crate's dependencies in cargo's cache: offline when they are there, else fetched. */
async function fetchCrates(): Promise<void> {
  const offline = await run("cargo", [
    "fetch",
    "--offline",
    "--locked",
    "--manifest-path",
    MANIFEST,
  ], {
    quiet: true,
  });
  if (offline.ok) return;
  const online = await run("cargo", ["fetch", "--locked", "--manifest-path", MANIFEST]);
  if (!online.ok) {
    throw new BuildError(
      "cannot fetch native/'s crates (deno_bindgen and its dependencies) from crates.io; " +
        `offline, cargo said: ${offline.stderr.trim()}`,
    );
  }
}

/** deno_bindgen's CLI, installed once per machine at the pinned version. */
async function ensureCli(): Promise<void> {
  if (await exists(CLI)) return;
  const r = await run("cargo", [
    "install",
    "deno_bindgen_cli",
    "--version",
    `=${CLI_VERSION}`,
    "--locked",
    "--root",
    CLI_ROOT,
  ]);
  if (!r.ok || !(await exists(CLI))) {
    throw new BuildError(`cannot install deno_bindgen_cli ${CLI_VERSION} (cargo install failed)`);
  }
}

/** Formats TypeScript source as `deno fmt` would in this repository. */
async function format(source: string): Promise<string> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["fmt", "--ext", "ts", "-"],
    cwd: ROOT,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(source));
  await writer.close();
  const out = await child.output();
  if (!out.success) {
    throw new BuildError(
      `deno fmt failed on the bindings: ${new TextDecoder().decode(out.stderr)}`,
    );
  }
  return new TextDecoder().decode(out.stdout);
}

/**
 * The generated file as committed: the CLI's output with this machine's library path
 * replaced by the repository-relative one (ffi.ts always passes the path), formatted.
 */
export async function normalize(generated: string): Promise<string> {
  const replaced = generated.replace(
    /(export function load\(path: string = )"[^"]*"/,
    `$1${JSON.stringify(LIBRARY_DEFAULT)}`,
  );
  if (replaced === generated) {
    throw new BuildError(
      "deno_bindgen's output has no `load(path = ...)`: was --lazy-init dropped?",
    );
  }
  return await format(replaced);
}

/**
 * The bindings reduced to what they bind: one line per symbol entry and per exported
 * function, sorted (the linker decides the order the CLI lists them in).
 */
export function canonical(source: string): string[] {
  const symbols = [...source.matchAll(/^ {4}(dyn_\w+): \{[^}]*\}/gm)].map((m) =>
    m[0].replace(/\s+/g, " ").trim()
  );
  const functions = [...source.matchAll(/^export function (dyn_\w+)[\s\S]*?^\}$/gm)].map((m) =>
    m[0].replace(/\s+/g, " ").trim()
  );
  return [...symbols.sort(), ...functions.sort()];
}

async function main(args: string[]): Promise<number> {
  const checkOnly = args.includes("--check");
  await fetchCrates();
  await ensureCli();
  const tmp = await Deno.makeTempFile({ prefix: "dynamo-bindings-", suffix: ".ts" });
  try {
    // The CLI runs `cargo build --lib --release` in native/ (the build itself), loads the
    // library and asks it for its symbols.
    const r = await run(CLI, ["--release", "--lazy-init", "--out", tmp], {
      cwd: NATIVE,
      env: { CARGO_NET_OFFLINE: "true" },
    });
    if (!r.ok) throw new BuildError(`deno_bindgen failed:\n${r.stdout}`);
    const fresh = await normalize(await Deno.readTextFile(tmp));
    const committed = await Deno.readTextFile(BINDINGS).catch(() => "");
    const same = JSON.stringify(canonical(fresh)) === JSON.stringify(canonical(committed));
    if (checkOnly) {
      if (!same) {
        console.error(
          "native/_bindings.ts is not what deno_bindgen generates from native/src: " +
            "run `deno task build:native` and commit it",
        );
        return 1;
      }
      console.log("native/_bindings.ts is current");
      return 0;
    }
    if (!same) {
      await Deno.writeTextFile(BINDINGS, fresh);
      console.log("wrote native/_bindings.ts");
    }
    return 0;
  } finally {
    await Deno.remove(tmp).catch(() => {});
  }
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (e) {
    if (!(e instanceof BuildError)) throw e;
    console.error(`build:native: ${e.message}`);
    Deno.exit(1);
  }
}
