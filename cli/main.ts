// The `dynamo` command: parses the global flags and hands the rest to a subcommand.
// cli/ is the only place that reads flags and the environment.

import denoJson from "../deno.json" with { type: "json" };
import { DynamoError, RemoteError } from "../mod.ts";
import {
  type Command,
  ExitCode,
  type Io,
  parseCommandArgs,
  processIo,
  UsageError,
} from "./_common.ts";
import { benchCommand } from "./bench.ts";
import { callCommand } from "./call.ts";
import { instancesCommand } from "./instances.ts";
import { frontendCommand } from "./frontend.ts";
import { hubCommand } from "./hub.ts";
import { runCommand } from "./run.ts";
import { serveCommand } from "./serve.ts";
import { deployCommand } from "./deploy.ts";

/** The version of this build of `dynamo`. */
export const VERSION: string = denoJson.version;

const commands: readonly Command[] = [
  runCommand,
  frontendCommand,
  instancesCommand,
  callCommand,
  benchCommand,
  hubCommand,
  serveCommand,
  deployCommand,
];

function usage(): string {
  const width = Math.max(...commands.map((c) => c.name.length), "help".length);
  return [
    "dynamo: a distributed LLM-inference runtime for Deno",
    "",
    "Usage: dynamo <command> [options]",
    "",
    "Commands:",
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    `  ${"help".padEnd(width)}  show this help, or a command's ('dynamo help call')`,
    "",
    "Options:",
    "  -h, --help     show this help",
    "  -V, --version  print the version",
    "",
    "Environment: ETCD_ENDPOINTS and NATS_SERVER select real etcd + NATS; else DYN_HUB=host:port",
    "(and DYN_HUB_TOKEN) joins a `dynamo hub`; else the embedded in-process default.",
    "Also DYN_LEASE_TTL, DYN_TCP_RPC_HOST, DYN_LOG, DYN_LOG_JSON.",
    "Tracing: OTEL_EXPORTER_OTLP_ENDPOINT (OTLP/HTTP collector) and OTEL_SERVICE_NAME.",
  ].join("\n");
}

function findCommand(name: string): Command {
  const command = commands.find((c) => c.name === name);
  if (!command) {
    throw new UsageError(
      `unknown command ${JSON.stringify(name)} (commands: ${
        [...commands.map((c) => c.name), "help"].join(", ")
      })`,
    );
  }
  return command;
}

/**
 * Runs the `dynamo` command line.
 *
 * @param args the arguments after the program name
 * @returns the exit code: 0 ok, 1 the command failed, 2 bad command line, 130 interrupted
 *
 * @example
 * ```ts
 * Deno.exit(await main(["instances", "--json"]));
 * ```
 */
export async function main(args: string[], io: Io = processIo): Promise<number> {
  // Global flags come before the subcommand; everything after it belongs to the subcommand.
  const at = args.findIndex((a) => !a.startsWith("-"));
  const globalArgs = at === -1 ? args : args.slice(0, at);
  const rest = at === -1 ? [] : args.slice(at + 1);
  const name = at === -1 ? undefined : args[at];
  let command: Command | undefined;
  try {
    const { values } = parseCommandArgs(undefined, globalArgs, {
      help: { type: "boolean", short: "h" },
      version: { type: "boolean", short: "V" },
    });
    if (values.version) {
      io.out(`dynamo ${VERSION} (deno ${Deno.version.deno})`);
      return ExitCode.Ok;
    }
    if (values.help) {
      io.out(usage());
      return ExitCode.Ok;
    }
    if (name === undefined) {
      io.err(usage());
      return ExitCode.Usage;
    }
    if (name === "help") {
      if (rest.length > 1) {
        throw new UsageError(`help takes at most one command, got ${rest.join(" ")}`);
      }
      io.out(rest[0] === undefined ? usage() : findCommand(rest[0]).usage);
      return ExitCode.Ok;
    }
    command = findCommand(name);
    return await command.run(rest, io);
  } catch (err: unknown) {
    return report(err, command?.name, io);
  }
}

/** Prints a failure the way a user can act on it and picks the exit code. */
function report(err: unknown, commandName: string | undefined, io: Io): number {
  const who = commandName === undefined ? "dynamo" : `dynamo ${commandName}`;
  if (err instanceof UsageError) {
    io.err(`${who}: ${err.message}`);
    const helpFor = err.command ?? commandName;
    io.err(`Run 'dynamo ${helpFor === undefined ? "--help" : `help ${helpFor}`}' for usage.`);
    return ExitCode.Usage;
  }
  if (err instanceof RemoteError) {
    io.err(`${who}: the handler failed with ${err.remoteName}: ${err.message}`);
  } else if (err instanceof DynamoError || isFileError(err)) {
    // A file that is missing or unreadable: its message names the file; a stack adds nothing.
    io.err(`${who}: ${err.name}: ${err.message}`);
  } else if (err instanceof Error) {
    io.err(`${who}: ${err.name}: ${err.message}`);
    if (err.stack) io.err(err.stack);
  } else {
    io.err(`${who}: ${String(err)}`);
  }
  return ExitCode.Failure;
}

function isFileError(err: unknown): err is Error {
  return err instanceof Deno.errors.NotFound || err instanceof Deno.errors.PermissionDenied ||
    err instanceof Deno.errors.IsADirectory || err instanceof Deno.errors.NotADirectory;
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
