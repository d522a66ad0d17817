// `dynamo hub`: hosts the hub, the local default that spans processes without etcd or
// NATS. Other processes join with DYN_HUB=host:port (and DYN_HUB_TOKEN).

import { HubServer } from "../runtime/hub/mod.ts";
import {
  type Command,
  ExitCode,
  type Io,
  loggerFromEnv,
  parseCommandArgs,
  UsageError,
} from "./_common.ts";
import { untilSignal } from "./_http.ts";

const usage = `Usage: dynamo hub [--host 127.0.0.1] [--port 0] [--token TOKEN]

Serves discovery, the request plane, an object store and events to the processes of a
local deployment over TCP, with no etcd or NATS. Prints the address, then the line to
export in the shell of each worker, frontend or client:

  export DYN_HUB=127.0.0.1:PORT

A process that dies loses its registrations at once. Ctrl-C (SIGINT/SIGTERM) stops the
hub; connected processes then lose their leases and reconnect when it comes back on the
same port.

Options:
  --host HOST    interface to bind (default 127.0.0.1: this machine only)
  --port N       port (default 0: a free one)
  --token TOKEN  shared secret clients must send (default: DYN_HUB_TOKEN, else none)
  -h, --help     show this help`;

/**
 * Runs `dynamo hub` until `stop` settles (default: SIGINT or SIGTERM).
 * @returns the exit code
 * @throws {UsageError} bad arguments
 */
export async function runHub(args: string[], io: Io, stop?: Promise<unknown>): Promise<number> {
  const { values, positionals } = parseCommandArgs("hub", args, {
    host: { type: "string" },
    port: { type: "string" },
    token: { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help) {
    io.out(usage);
    return ExitCode.Ok;
  }
  if (positionals.length > 0) {
    throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`, "hub");
  }
  const port = Number(values.port ?? 0);
  if (values.port?.trim() === "" || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new UsageError(`--port must be 0..65535, got ${JSON.stringify(values.port)}`, "hub");
  }
  const token = values.token ?? (Deno.env.get("DYN_HUB_TOKEN") || undefined);
  if (token === "") throw new UsageError("--token must not be empty", "hub");
  const logger = loggerFromEnv("hub");
  const signals = stop === undefined ? untilSignal() : undefined;
  try {
    const hub = await HubServer.start({
      hostname: values.host ?? "127.0.0.1",
      port,
      token,
      logger,
    });
    io.out(`hub listening on ${hub.address}`);
    for (const [k, v] of Object.entries(hub.env())) io.out(`export ${k}=${shellQuote(v)}`);
    await (stop ?? signals!.signalled);
    logger.info("shutting down the hub", { clients: hub.connectionCount });
    await hub.close();
    return ExitCode.Ok;
  } finally {
    signals?.dispose();
  }
}

function shellQuote(s: string): string {
  return /^[A-Za-z0-9_.:@%+=,/-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`;
}

/** The `hub` subcommand. */
export const hubCommand: Command = {
  name: "hub",
  summary: "host the local hub other processes join with DYN_HUB (no etcd/NATS needed)",
  usage,
  run: (args, io) => runHub(args, io),
};
