// What the subcommands share: output sinks, the usage error (exit code 2), argument
// parsing through node:util, and endpoint paths.

import { parseArgs, type ParseArgsConfig } from "node:util";
import { type Logger, loggerFromSettings, logSettingsFromEnv } from "../runtime/logger.ts";
import { InvalidArgumentError } from "../runtime/errors.ts";

/** Where a subcommand writes; tests pass their own. */
export interface Io {
  /** Writes one line to standard output. */
  out(line: string): void;
  /** Writes one line to standard error. */
  err(line: string): void;
}

const encoder = new TextEncoder();

/** Standard output and standard error of this process. */
export const processIo: Io = {
  out: (line) => writeAll(Deno.stdout, line + "\n"),
  err: (line) => writeAll(Deno.stderr, line + "\n"),
};

function writeAll(file: { writeSync(p: Uint8Array): number }, text: string): void {
  let bytes = encoder.encode(text);
  while (bytes.length > 0) bytes = bytes.subarray(file.writeSync(bytes));
}

/** Exit codes of the `dynamo` command. */
export const ExitCode = { Ok: 0, Failure: 1, Usage: 2, Interrupted: 130 } as const;

/** A bad command line: reported on standard error with exit code 2. */
export class UsageError extends Error {
  /** The subcommand whose usage to point at, if any. */
  readonly command: string | undefined;
  constructor(message: string, command?: string) {
    super(message);
    this.name = "UsageError";
    this.command = command;
  }
}

/** One `dynamo` subcommand. */
export interface Command {
  readonly name: string;
  /** One line for the command list. */
  readonly summary: string;
  /** Full help text. */
  readonly usage: string;
  /**
   * Runs with the arguments after the subcommand's name.
   * @returns the exit code
   * @throws {UsageError} bad arguments
   */
  run(args: string[], io: Io): Promise<number>;
}

/**
 * `node:util` parseArgs in strict mode, with its errors turned into {@linkcode UsageError}.
 */
export function parseCommandArgs<T extends ParseArgsConfig["options"]>(
  command: string | undefined,
  args: string[],
  options: T,
): ReturnType<typeof parseArgs<{ args: string[]; options: T; allowPositionals: true }>> {
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (err: unknown) {
    if (err instanceof TypeError) {
      // node's advice on "--" is noise here; keep the first sentence.
      throw new UsageError(err.message.split(". To specify")[0]!.replaceAll("\n", " "), command);
    }
    throw err;
  }
}

/** The `--request-plane` flag of the commands that build a runtime, for parseCommandArgs. */
export const REQUEST_PLANE_FLAG = { "request-plane": { type: "string" } } as const;

/** Help line of {@linkcode REQUEST_PLANE_FLAG}. */
export const REQUEST_PLANE_HELP =
  `  --request-plane P   with etcd + NATS: tcp (default; persistent connections to workers)
                      or nats (env DYN_REQUEST_PLANE; processes started here inherit it)`;

/**
 * Applies `--request-plane` as `DYN_REQUEST_PLANE`, which the runtime (and any process this
 * one starts) reads.
 * @throws {UsageError} a value other than tcp or nats
 */
export function applyRequestPlaneFlag(command: string, value: string | undefined): void {
  if (value === undefined) return;
  if (value !== "tcp" && value !== "nats") {
    throw new UsageError(
      `--request-plane must be tcp or nats, got ${JSON.stringify(value)}`,
      command,
    );
  }
  Deno.env.set("DYN_REQUEST_PLANE", value);
}

const NAME = /^[A-Za-z0-9_-]+$/;

/**
 * Splits `namespace/component/endpoint` (or a leading part of it) into its names.
 * @param min fewest parts accepted
 * @throws {UsageError} empty or invalid parts, or too few or too many
 */
export function parsePath(command: string, path: string, min: number): string[] {
  const parts = path.split("/");
  if (parts.length < min || parts.length > 3 || !parts.every((p) => NAME.test(p))) {
    const want = min === 3 ? "NAMESPACE/COMPONENT/ENDPOINT" : "NAMESPACE[/COMPONENT[/ENDPOINT]]";
    throw new UsageError(
      `expected ${want} (names of letters, digits, "_" or "-"), got ${JSON.stringify(path)}`,
      command,
    );
  }
  return parts;
}

/**
 * Parses a whole number of milliseconds.
 * @throws {UsageError} not a whole number >= 0
 */
export function parseMs(command: string, flag: string, value: string): number {
  const n = Number(value);
  if (value.trim() === "" || !Number.isInteger(n) || n < 0) {
    throw new UsageError(
      `--${flag} must be a whole number of ms >= 0, got ${JSON.stringify(value)}`,
      command,
    );
  }
  return n;
}

/**
 * The logger the environment asks for: DYN_LOG (the reference's filter syntax, default
 * info), DYN_LOGGING_JSONL or DYN_LOG_JSON (see `logSettingsFromEnv`).
 * @throws {UsageError} a malformed DYN_LOG
 */
export function loggerFromEnv(command: string): Logger {
  try {
    return loggerFromSettings(logSettingsFromEnv());
  } catch (err) {
    if (err instanceof InvalidArgumentError) throw new UsageError(err.message, command);
    throw err;
  }
}
