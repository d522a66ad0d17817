// The reference frontend's (ai-dynamo 1.6.1, `python -m dynamo.frontend`) flags and
// environment variables, as `dynamo frontend` and `dynamo run` accept them: the ones we
// implement with the same meaning, and a clear error for the ones we do not.

import { UsageError } from "./_common.ts";

/**
 * The environment variable behind each HTTP/router flag, named as the reference names it
 * (a flag wins over its variable).
 */
export const REFERENCE_FLAG_ENV = {
  "http-port": "DYN_HTTP_PORT",
  "http-host": "DYN_HTTP_HOST",
  "router-mode": "DYN_ROUTER_MODE",
  "router-temperature": "DYN_ROUTER_TEMPERATURE",
  "active-decode-blocks-threshold": "DYN_ACTIVE_DECODE_BLOCKS_THRESHOLD",
  "active-prefill-tokens-threshold": "DYN_ACTIVE_PREFILL_TOKENS_THRESHOLD",
  "router-replica-sync": "DYN_ROUTER_REPLICA_SYNC",
  "kv-events": "DYN_ROUTER_USE_KV_EVENTS",
  namespace: "DYN_NAMESPACE",
} as const;

/** Router modes of the reference that this frontend does not implement. */
const REFERENCE_ONLY_ROUTER_MODES = [
  "power-of-two",
  "direct",
  "least-loaded",
  "device-aware-weighted",
];

/**
 * Flags of the reference frontend (ai-dynamo 1.6.1) this frontend does not implement; given
 * one, the command says so instead of node's "Unknown option".
 */
const REFERENCE_ONLY_FLAGS = new Set([
  "interactive",
  "kv-cache-block-size",
  "serve-indexer",
  "tls-cert-path",
  "tls-key-path",
  "tls-client-ca-cert-path",
  "tcp-tls-cert-path",
  "tcp-tls-key-path",
  "tcp-tls-ca-cert-path",
  "tcp-tls-client-cert-path",
  "tcp-tls-client-key-path",
  "tcp-tls-client-ca-cert-path",
  "nats-tls-ca-cert-path",
  "nats-tls-insecure",
  "nats-tls-client-cert-path",
  "nats-tls-client-key-path",
  "enforce-disagg",
  "router-min-initial-workers",
  "router-session-affinity-ttl-secs",
  "router-session-affinity-mode",
  "active-prefill-tokens-threshold-frac",
  "load-aware",
  "router-kv-overlap-score-credit",
  "router-kv-overlap-score-credit-decay",
  "router-prefill-load-scale",
  "router-decode-active-request-weight",
  "router-host-cache-hit-weight",
  "router-disk-cache-hit-weight",
  "router-track-active-blocks",
  "track-active-blocks",
  "router-track-output-blocks",
  "track-output-blocks",
  "router-assume-kv-reuse",
  "assume-kv-reuse",
  "router-track-prefill-tokens",
  "router-tracking-hash",
  "router-tracking-key-file",
  "router-tracking-key-id",
  "router-prefill-load-model",
  "router-ttl-secs",
  "router-approximate-cache-policy",
  "router-queue-threshold",
  "router-policy-config",
  "router-conditional-disagg",
  "router-conditional-disagg-config",
  "router-prefill-policy",
  "router-decode-policy",
  "router-event-threads",
  "router-queue-policy",
  "use-remote-indexer",
  "enable-session-prefix-index",
  "shared-cache-multiplier",
  "shared-cache-type",
  "router-predicted-ttl-secs",
  "namespace-prefix",
  "migration-max-seq-len",
  "metrics-prefix",
  "kserve-grpc-server",
  "grpc-metrics-port",
  "dump-config-to",
  "frontend-route-extension",
  "discovery-backend",
  "response-plane",
  "event-plane",
  "enable-anthropic-api",
  "strip-anthropic-preamble",
  "enable-streaming-tool-dispatch",
  "enable-streaming-reasoning-dispatch",
  "reasoning-field-name",
  "exclude-tools-when-tool-choice-none",
  "dyn-chat-processor",
  "dyn-debug-perf",
  "dyn-preprocess-workers",
  "tokenizer",
  "tokenizer-fallback",
  "trust-remote-code",
]);

/**
 * Fails with a clear message when `args` hold a flag of the reference frontend that this
 * command does not implement (before the strict parser's generic "Unknown option").
 *
 * @param command the subcommand, for the error
 * @param args the command's arguments
 * @param known flags the command itself takes (never reported)
 * @throws {UsageError} the first such flag
 */
export function rejectReferenceOnlyFlags(
  command: string,
  args: readonly string[],
  known: Readonly<Record<string, unknown>>,
): void {
  for (const arg of args) {
    if (arg === "--") return;
    if (!arg.startsWith("--")) continue;
    const name = arg.slice(2).split("=", 1)[0]!;
    if (name in known) continue;
    const plain = name.startsWith("no-") ? name.slice(3) : name;
    if (REFERENCE_ONLY_FLAGS.has(plain)) {
      throw new UsageError(
        `--${name} is a flag of the reference frontend (ai-dynamo 1.6.1) that dynamo for Deno ` +
          `does not implement; see 'dynamo help ${command}' for the flags it takes`,
        command,
      );
    }
  }
}

/** The error for a router mode only the reference has, or undefined for any other. */
export function referenceOnlyRouterMode(mode: string, what: string): string | undefined {
  return REFERENCE_ONLY_ROUTER_MODES.includes(mode)
    ? `${what} ${mode} is a router mode of the reference frontend that dynamo for Deno does ` +
      "not implement; use round-robin, random or kv"
    : undefined;
}

/**
 * A boolean environment variable as the reference reads one: true/1/yes/on or
 * false/0/no/off (any case); unset or empty is undefined.
 *
 * @throws {UsageError} any other value
 */
export function envBoolean(
  command: string,
  name: string,
  value: string | undefined,
): boolean | undefined {
  if (value === undefined || value.trim() === "") return undefined;
  const v = value.trim().toLowerCase();
  if (["true", "1", "yes", "on"].includes(v)) return true;
  if (["false", "0", "no", "off"].includes(v)) return false;
  throw new UsageError(`${name} must be true or false, got ${JSON.stringify(value)}`, command);
}
