// `dynamo frontend`: the OpenAI HTTP service over the models registered on the network.

import { DistributedRuntime, type KvRouterSettings, type RouterMode } from "../mod.ts";
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
  `Usage: dynamo frontend [--http-port 8000] [--http-host 0.0.0.0] [--router-mode round-robin|random|kv]

Serves the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models, /health,
/live, /metrics) for every model workers register with registerLlm. Uses etcd + NATS
when ETCD_ENDPOINTS / NATS_SERVER are set (the embedded default sees only this
process). SIGINT/SIGTERM: stop accepting, drain in-flight streams, exit.

Options:
  --http-port N       port (default 8000; 0 picks a free one)
  --http-host HOST    interface (default 0.0.0.0)
  --router-mode MODE  round-robin (default), random, or kv (KV-cache aware: to the worker
                      holding the longest prefix of the prompt, weighed against its load)
  --kv-overlap-score-weight W
                      kv: weight of uncached prefill blocks against decode load (default 1)
  --router-temperature T
                      kv: 0 (default) takes the cheapest worker; above 0 samples
  -h, --help          show this help`;

/** Parses the flags `frontend` and `run` share. */
export function parseHttpFlags(
  command: string,
  values: {
    "http-port"?: string;
    "http-host"?: string;
    "router-mode"?: string;
    "kv-overlap-score-weight"?: string;
    "router-temperature"?: string;
  },
  defaults: { host: string },
): { port: number; hostname: string; routerMode: RouterMode; kvRouter: KvRouterSettings } {
  const port = Number(values["http-port"] ?? 8000);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new UsageError(
      `--http-port must be 0..65535, got ${JSON.stringify(values["http-port"])}`,
      command,
    );
  }
  const routerMode = values["router-mode"] ?? "round-robin";
  if (routerMode !== "round-robin" && routerMode !== "random" && routerMode !== "kv") {
    throw new UsageError(
      `--router-mode must be round-robin, random or kv, got ${JSON.stringify(routerMode)}`,
      command,
    );
  }
  const kvRouter: KvRouterSettings = {};
  for (
    const [flag, key] of [
      ["kv-overlap-score-weight", "overlapScoreWeight"],
      ["router-temperature", "temperature"],
    ] as const
  ) {
    const raw = values[flag];
    if (raw === undefined) continue;
    const n = Number(raw);
    if (raw.trim() === "" || !(n >= 0) || !Number.isFinite(n)) {
      throw new UsageError(
        `--${flag} must be a finite number >= 0, got ${JSON.stringify(raw)}`,
        command,
      );
    }
    if (routerMode !== "kv") {
      throw new UsageError(`--${flag} applies to --router-mode kv only`, command);
    }
    kvRouter[key] = n;
  }
  return { port, hostname: values["http-host"] ?? defaults.host, routerMode, kvRouter };
}

async function run(args: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommandArgs("frontend", args, {
    "http-port": { type: "string" },
    "http-host": { type: "string" },
    "router-mode": { type: "string" },
    "kv-overlap-score-weight": { type: "string" },
    "router-temperature": { type: "string" },
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
