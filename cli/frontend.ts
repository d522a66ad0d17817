// `dynamo frontend`: the OpenAI HTTP service over the models registered on the network.

import { announceBackends } from "../runtime/backends.ts";
import { DistributedRuntime, type KvRouterSettings, type RouterMode } from "../mod.ts";
import {
  applyRequestPlaneFlag,
  type Command,
  ExitCode,
  type Io,
  loggerFromEnv,
  parseCommandArgs,
  REQUEST_PLANE_FLAG,
  REQUEST_PLANE_HELP,
  UsageError,
} from "./_common.ts";
import { serveFrontend, untilSignal } from "./_http.ts";
import {
  envBoolean,
  REFERENCE_FLAG_ENV,
  referenceOnlyRouterMode,
  rejectReferenceOnlyFlags,
} from "./_reference_flags.ts";
import type { GuardOptions } from "../llm/http/guard.ts";
import type { ReferenceWorkersOptions } from "../llm/model/registry.ts";
import { REASONING_PARSER_NAMES } from "../llm/parsers/reasoning.ts";
import { TOOL_CALL_PARSER_NAMES } from "../llm/parsers/tool_calls.ts";

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
                      kv: weight of uncached prefill blocks against decode load (gives
                      the reference's weighted cost; default: none)
  --router-temperature T
                      kv: 0 (default) takes the cheapest worker; above 0 samples
  --kv-queued-prefill-weight Q
                      kv: weight of prompts already queued for prefill on a worker
                      (weighted cost; 1 when only the other weight is given); below 1
                      keeps more requests on their cached prefix. Without either
                      weight, the kv cost is the predicted time to first token,
                      learned from the TTFTs the router sees (no weight to tune)
  --router-load-bound F
                      kv: a worker past F times the mean requests in flight (plus 2)
                      takes none while another is under (default 1.5)
  --active-decode-blocks-threshold F
                      kv: skip workers whose KV cache is fuller than F (0..1) while
                      others are not (default off)
  --active-prefill-tokens-threshold N
                      kv: skip workers with more than N prompt tokens queued for
                      prefill while others are not (default off)
  --router-replica-sync
                      kv: share the router's load book with other frontends' routers
                      over the event plane, and book theirs
  --router-decision-log PATH
                      kv: append one JSON line per routing decision to PATH: the worker
                      chosen, and every worker weighed with its cached blocks, load and cost
  --max-inflight N    generation requests handled at once, streams until their last byte
                      (default 1024; env DYN_HTTP_MAX_INFLIGHT); past it: 429 + Retry-After
  --max-queued N      requests that may wait for a slot (default 0; env DYN_HTTP_MAX_QUEUED)
  --queue-timeout-ms MS
                      longest wait in that queue (default 1000; env DYN_HTTP_QUEUE_TIMEOUT_MS)
  --api-key KEY       require \`Authorization: Bearer KEY\` on every route but /health, /live
                      and /metrics (prefer env DYN_HTTP_API_KEY: flags show in ps)
  --cors-allow-origin LIST
                      origins browsers may call the API from, comma-separated, or * (default:
                      none, no CORS headers; env DYN_HTTP_CORS_ALLOW_ORIGIN)
  --dyn-tool-call-parser NAME
                      read tool calls out of chat answers, for models whose card names
                      none (without one, requests with \`tools\` get a 400); one of:
                      ${TOOL_CALL_PARSER_NAMES.join(", ")}
  --dyn-reasoning-parser NAME
                      split reasoning into \`reasoning_content\` (${
    REASONING_PARSER_NAMES.join(", ")
  })
                      for models whose card names none
  --reference-workers accepted for compatibility; nothing to turn on: the models of reference
                      (ai-dynamo 1.6.1) workers registered in the same discovery (their v1/mdc
                      records; TCP request plane) are always served. Their answers call home
                      to DYN_TCP_RESPONSE_STREAM_HOST (default 127.0.0.1)
  --reference-migration-limit N
                      migrations per request for reference workers' models (their cards
                      carry 0; default 0), as the reference frontend's --migration-limit
${REQUEST_PLANE_HELP}
  -h, --help          show this help`;

/** The flags `frontend` and `run` share, for {@linkcode parseCommandArgs}. */
export const HTTP_FLAGS = {
  "http-port": { type: "string" },
  "http-host": { type: "string" },
  "router-mode": { type: "string" },
  "kv-overlap-score-weight": { type: "string" },
  "router-temperature": { type: "string" },
  "kv-queued-prefill-weight": { type: "string" },
  "router-load-bound": { type: "string" },
  "active-decode-blocks-threshold": { type: "string" },
  "active-prefill-tokens-threshold": { type: "string" },
  "router-replica-sync": { type: "boolean" },
  "no-router-replica-sync": { type: "boolean" },
  "router-decision-log": { type: "string" },
  "kv-events": { type: "boolean" },
  "no-kv-events": { type: "boolean" },
  "router-kv-events": { type: "boolean" },
  "no-router-kv-events": { type: "boolean" },
  namespace: { type: "string" },
  "max-inflight": { type: "string" },
  "max-queued": { type: "string" },
  "queue-timeout-ms": { type: "string" },
  "api-key": { type: "string" },
  "cors-allow-origin": { type: "string" },
  "dyn-tool-call-parser": { type: "string" },
  "dyn-reasoning-parser": { type: "string" },
} as const;

/** The environment variables behind the admission flags (a flag wins over its variable). */
const GUARD_ENV = {
  "max-inflight": "DYN_HTTP_MAX_INFLIGHT",
  "max-queued": "DYN_HTTP_MAX_QUEUED",
  "queue-timeout-ms": "DYN_HTTP_QUEUE_TIMEOUT_MS",
  "api-key": "DYN_HTTP_API_KEY",
} as const;

/**
 * Parses the flags `frontend` and `run` share.
 *
 * @param env reads an environment variable (the admission flags fall back to DYN_HTTP_*)
 * @throws {UsageError} a value out of range
 */
export function parseHttpFlags(
  command: string,
  values: {
    [K in keyof typeof HTTP_FLAGS]?: typeof HTTP_FLAGS[K]["type"] extends "boolean" ? boolean
      : string;
  },
  defaults: { host: string },
  env: (name: string) => string | undefined = (name) => Deno.env.get(name),
): {
  port: number;
  hostname: string;
  routerMode: RouterMode;
  kvRouter: KvRouterSettings;
  /** Where to append the KV router's decisions (`--router-decision-log`; kv mode). */
  routerDecisionLog?: string;
  /** Serve only the models registered in this namespace (default: every namespace). */
  namespace?: string;
  guard: Omit<GuardOptions, "metrics">;
  corsAllowOrigins: string[];
  toolCallParser?: string;
  reasoningParser?: string;
} {
  // A flag, else the reference's environment variable for it; `what` names the source.
  const given = (flag: keyof typeof REFERENCE_FLAG_ENV & keyof typeof values) => {
    const v = values[flag];
    if (typeof v === "string") return { value: v, what: `--${flag}`, fromEnv: false };
    const name = REFERENCE_FLAG_ENV[flag];
    const e = env(name);
    return e === undefined || e.trim() === ""
      ? undefined
      : { value: e.trim(), what: name, fromEnv: true };
  };
  const portGiven = given("http-port");
  const port = Number(portGiven?.value ?? 8000);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new UsageError(
      `${portGiven?.what} must be 0..65535, got ${JSON.stringify(portGiven?.value)}`,
      command,
    );
  }
  const modeGiven = given("router-mode");
  const routerMode = modeGiven?.value ?? "round-robin";
  if (routerMode !== "round-robin" && routerMode !== "random" && routerMode !== "kv") {
    throw new UsageError(
      referenceOnlyRouterMode(routerMode, modeGiven!.what) ??
        `${modeGiven!.what} must be round-robin, random or kv, got ${JSON.stringify(routerMode)}`,
      command,
    );
  }
  const kvRouter: KvRouterSettings = {};
  for (
    const [flag, key] of [
      ["kv-overlap-score-weight", "overlapScoreWeight"],
      ["router-temperature", "temperature"],
      ["kv-queued-prefill-weight", "queuedPrefillWeight"],
      ["router-load-bound", "loadBound"],
      ["active-decode-blocks-threshold", "activeDecodeBlocksThreshold"],
      ["active-prefill-tokens-threshold", "activePrefillTokensThreshold"],
    ] as const
  ) {
    const source = flag in REFERENCE_FLAG_ENV
      ? given(flag as keyof typeof REFERENCE_FLAG_ENV & keyof typeof values)
      : values[flag] === undefined
      ? undefined
      : { value: values[flag]!, what: `--${flag}`, fromEnv: false };
    if (source === undefined) continue;
    const { value: raw, what } = source;
    const n = Number(raw);
    if (raw.trim() === "" || !(n >= 0) || !Number.isFinite(n)) {
      throw new UsageError(
        `${what} must be a finite number >= 0, got ${JSON.stringify(raw)}`,
        command,
      );
    }
    if (routerMode !== "kv") {
      // The reference's variables may be set for a whole deployment: unused here, not wrong.
      if (source.fromEnv) continue;
      throw new UsageError(`${what} applies to --router-mode kv only`, command);
    }
    if (key === "loadBound" && n < 1) {
      throw new UsageError(`${what} must be >= 1, got ${JSON.stringify(raw)}`, command);
    }
    if (key === "activeDecodeBlocksThreshold" && n > 1) {
      throw new UsageError(
        `${what} must be a fraction in [0, 1], got ${JSON.stringify(raw)}`,
        command,
      );
    }
    kvRouter[key] = n;
  }
  const bool = (
    on: readonly (keyof typeof values)[],
    off: readonly (keyof typeof values)[],
    name: string,
  ): { value: boolean; what: string; fromEnv: boolean } | undefined => {
    const onFlag = on.find((f) => values[f] === true);
    const offFlag = off.find((f) => values[f] === true);
    if (onFlag && offFlag) {
      throw new UsageError(`--${onFlag} and --${offFlag} contradict each other`, command);
    }
    if (onFlag) return { value: true, what: `--${onFlag}`, fromEnv: false };
    if (offFlag) return { value: false, what: `--${offFlag}`, fromEnv: false };
    const fromEnv = envBoolean(command, name, env(name));
    return fromEnv === undefined ? undefined : { value: fromEnv, what: name, fromEnv: true };
  };
  const sync = bool(
    ["router-replica-sync"],
    ["no-router-replica-sync"],
    REFERENCE_FLAG_ENV["router-replica-sync"],
  );
  if (sync?.value) {
    if (routerMode === "kv") kvRouter.replicaSync = true;
    else if (!sync.fromEnv) {
      throw new UsageError(`${sync.what} applies to --router-mode kv only`, command);
    }
  }
  const events = bool(
    ["kv-events", "router-kv-events"],
    ["no-kv-events", "no-router-kv-events"],
    REFERENCE_FLAG_ENV["kv-events"],
  );
  if (events?.value === false) {
    if (routerMode === "kv") kvRouter.useKvEvents = false;
    else if (!events.fromEnv) {
      throw new UsageError(`${events.what} applies to --router-mode kv only`, command);
    }
  }
  const decisionLog = values["router-decision-log"];
  if (decisionLog !== undefined) {
    if (decisionLog.trim() === "") {
      throw new UsageError("--router-decision-log takes a file path", command);
    }
    if (routerMode !== "kv") {
      throw new UsageError("--router-decision-log applies to --router-mode kv only", command);
    }
  }
  const namespaceGiven = given("namespace");
  if (namespaceGiven !== undefined && !/^[A-Za-z0-9_-]+$/.test(namespaceGiven.value)) {
    throw new UsageError(
      `${namespaceGiven.what} must be letters, digits, '_' or '-', got ${
        JSON.stringify(namespaceGiven.value)
      }`,
      command,
    );
  }
  const cors = values["cors-allow-origin"] ?? env("DYN_HTTP_CORS_ALLOW_ORIGIN") ?? "";
  const corsAllowOrigins = cors.split(",").map((s) => s.trim()).filter(Boolean);
  for (const o of corsAllowOrigins) {
    if (o !== "*" && !/^https?:\/\/[^/\s]+$/.test(o)) {
      throw new UsageError(
        `--cors-allow-origin takes * or origins like https://app.example, got ${JSON.stringify(o)}`,
        command,
      );
    }
  }
  const parser = (
    flag: "dyn-tool-call-parser" | "dyn-reasoning-parser",
    known: readonly string[],
  ) => {
    const name = values[flag];
    if (name !== undefined && !known.includes(name)) {
      throw new UsageError(
        `--${flag} must be one of ${known.join(", ")}, got ${JSON.stringify(name)}`,
        command,
      );
    }
    return name;
  };
  return {
    toolCallParser: parser("dyn-tool-call-parser", TOOL_CALL_PARSER_NAMES),
    reasoningParser: parser("dyn-reasoning-parser", REASONING_PARSER_NAMES),
    port,
    hostname: given("http-host")?.value ?? defaults.host,
    routerMode,
    ...(namespaceGiven ? { namespace: namespaceGiven.value } : {}),
    kvRouter,
    ...(decisionLog === undefined ? {} : { routerDecisionLog: decisionLog }),
    guard: parseGuardFlags(command, values, env),
    corsAllowOrigins,
  };
}

function parseGuardFlags(
  command: string,
  values: { [K in keyof typeof GUARD_ENV]?: string },
  env: (name: string) => string | undefined,
): Omit<GuardOptions, "metrics"> {
  const raw = (flag: keyof typeof GUARD_ENV) => {
    const v = values[flag];
    return v === undefined
      ? { value: env(GUARD_ENV[flag]), what: GUARD_ENV[flag] }
      : { value: v, what: `--${flag}` };
  };
  const whole = (flag: "max-inflight" | "max-queued" | "queue-timeout-ms", min: number) => {
    const { value, what } = raw(flag);
    if (value === undefined) return undefined;
    const n = Number(value);
    if (value.trim() === "" || !Number.isSafeInteger(n) || n < min) {
      throw new UsageError(
        `${what} must be a whole number >= ${min}, got ${JSON.stringify(value)}`,
        command,
      );
    }
    return n;
  };
  const guard: Omit<GuardOptions, "metrics"> = {
    maxInflight: whole("max-inflight", 1),
    maxQueued: whole("max-queued", 0),
    queueTimeoutMs: whole("queue-timeout-ms", 0),
  };
  const key = raw("api-key");
  if (key.value !== undefined) {
    // Said without the value: it is a secret.
    if (!/^[\x21-\x7e]+$/.test(key.value)) {
      throw new UsageError(
        `${key.what} must be 1 or more visible ASCII characters without spaces`,
        command,
      );
    }
    guard.apiKey = key.value;
  }
  return guard;
}

/**
 * How reference workers' models are served (always: `--reference-workers` is a no-op kept for
 * compatibility): the migration limit, and the call-home host from the reference's env.
 */
function parseReferenceFlags(
  values: { "reference-workers"?: boolean; "reference-migration-limit"?: string },
): ReferenceWorkersOptions {
  const raw = values["reference-migration-limit"];
  const limit = raw === undefined ? 0 : Number(raw);
  if (raw?.trim() === "" || !Number.isSafeInteger(limit) || limit < 0) {
    throw new UsageError(
      `--reference-migration-limit must be a whole number >= 0, got ${JSON.stringify(raw)}`,
      "frontend",
    );
  }
  const host = Deno.env.get("DYN_TCP_RESPONSE_STREAM_HOST");
  return { migrationLimit: limit, ...(host ? { callHomeHostname: host } : {}) };
}

async function run(args: string[], io: Io): Promise<number> {
  const flags = {
    ...HTTP_FLAGS,
    ...REQUEST_PLANE_FLAG,
    "reference-workers": { type: "boolean" },
    "reference-migration-limit": { type: "string" },
    help: { type: "boolean", short: "h" },
  } as const;
  rejectReferenceOnlyFlags("frontend", args, flags);
  const { values, positionals } = parseCommandArgs("frontend", args, flags);
  if (values.help) {
    io.out(usage);
    return ExitCode.Ok;
  }
  if (positionals.length > 0) {
    throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`, "frontend");
  }
  const http = parseHttpFlags("frontend", values, { host: "0.0.0.0" });
  const referenceWorkers = parseReferenceFlags(values);
  applyRequestPlaneFlag("frontend", values["request-plane"]);
  const logger = loggerFromEnv("frontend");
  const signals = untilSignal();
  const runtime = await DistributedRuntime.fromEnv({
    logger,
    tracingServiceName: "dynamo-frontend",
  });
  announceBackends(runtime, logger, "frontend");
  try {
    const frontend = await serveFrontend(runtime, { ...http, logger, referenceWorkers }, io);
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
