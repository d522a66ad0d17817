// `dynamo frontend`: the OpenAI HTTP service over the models registered on the network.

import { DistributedRuntime, type RouterMode } from "../mod.ts";
import {
  type Command,
  ExitCode,
  type Io,
  loggerFromEnv,
  parseCommandArgs,
  UsageError,
} from "./_common.ts";
import { serveFrontend, untilSignal } from "./_http.ts";

const usage =
  `Usage: dynamo frontend [--http-port 8000] [--http-host 0.0.0.0] [--router-mode round-robin|random]

Serves the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models, /health,
/live, /metrics) for every model workers register with registerLlm. Uses etcd + NATS
when ETCD_ENDPOINTS / NATS_SERVER are set (the embedded default sees only this
process). SIGINT/SIGTERM: stop accepting, drain in-flight streams, exit.

Options:
  --http-port N       port (default 8000; 0 picks a free one)
  --http-host HOST    interface (default 0.0.0.0)
  --router-mode MODE  round-robin (default) or random
  -h, --help          show this help`;

/** Parses the flags `frontend` and `run` share. */
export function parseHttpFlags(
  command: string,
  values: { "http-port"?: string; "http-host"?: string; "router-mode"?: string },
  defaults: { host: string },
): { port: number; hostname: string; routerMode: RouterMode } {
  const port = Number(values["http-port"] ?? 8000);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new UsageError(
      `--http-port must be 0..65535, got ${JSON.stringify(values["http-port"])}`,
      command,
    );
  }
  const routerMode = values["router-mode"] ?? "round-robin";
  if (routerMode !== "round-robin" && routerMode !== "random") {
    throw new UsageError(
      `--router-mode must be round-robin or random, got ${JSON.stringify(routerMode)}`,
      command,
    );
  }
  return { port, hostname: values["http-host"] ?? defaults.host, routerMode };
}

async function run(args: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommandArgs("frontend", args, {
    "http-port": { type: "string" },
    "http-host": { type: "string" },
    "router-mode": { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help) {
    io.out(usage);
    return ExitCode.Ok;
  }
  if (positionals.length > 0) {
    throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`, "frontend");
  }
  const http = parseHttpFlags("frontend", values, { host: "0.0.0.0" });
  const logger = loggerFromEnv("frontend");
  const signals = untilSignal();
  const runtime = await DistributedRuntime.fromEnv({ logger });
  try {
    const frontend = await serveFrontend(runtime, { ...http, logger }, io);
    await signals.signalled;
    logger.info("shutting down: draining in-flight requests");
    await frontend.shutdown();
    return ExitCode.Ok;
  } finally {
    signals.dispose();
    await runtime.shutdown();
  }
}

/** The `frontend` subcommand. */
export const frontendCommand: Command = {
  name: "frontend",
  summary: "serve the OpenAI HTTP API for the models on the network",
  usage,
  run,
};
