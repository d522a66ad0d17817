// Synthetic traces for `dynamo bench --synthetic`: many tenants, each with its own long system
// prompt shared by all of its users; multi-turn conversations whose prompt grows every turn
// (system prompt, then every earlier question and answer, then the new question); conversations
// starting in bursts. And a no-sharing trace, where no two prompts share a block.
//
// Requests come out in the trace form `dynamo bench` replays (hash ids per block of
// `blockTokens` tokens): equal ids at equal positions are equal token blocks, so the prefix a
// request shares with earlier ones is exactly what a perfect cache would hold.

import { InvalidArgumentError } from "../../runtime/errors.ts";
import type { TraceRequest } from "./trace.ts";

/** Parameters of a synthetic trace; every length is a mean, drawn per tenant, user or turn. */
export interface SyntheticTraceOptions {
  /** Seed of every draw (same options, same trace). */
  seed: number;
  /** Tenants, each with its own system prompt (0 shares nothing at all: the no-sharing trace). */
  tenants: number;
  /** System prompt tokens (each tenant's drawn from 0.5x to 1.5x). */
  systemTokens: number;
  /** Conversations per tenant. */
  usersPerTenant: number;
  /** Turns per conversation (each conversation's drawn from 1 to 2x - 1). */
  turns: number;
  /** New user tokens per turn. */
  userTokens: number;
  /** Answer tokens per turn (the next turn's prompt carries them). */
  outputTokens: number;
  /** Seconds a user thinks between an answer and the next question (exponential). */
  thinkS: number;
  /** Conversations starting per second, on average. */
  sessionsPerS: number;
  /**
   * 0: conversations start as a Poisson process; b > 0: the rate alternates between (1 + b) and
   * 1 / (1 + b) times its mean in spells of about 10 s (bursts and lulls).
   */
  burstiness: number;
  /** Tokens per hash id (default 16: one KV block of the mocker). */
  blockTokens?: number;
}

/** The shape the router issue describes: 8 tenants, 2k-token system prompts, 4 turns, bursts. */
export const MULTI_TENANT: Omit<SyntheticTraceOptions, "seed"> = {
  tenants: 8,
  systemTokens: 2000,
  usersPerTenant: 16,
  turns: 4,
  userTokens: 200,
  outputTokens: 150,
  thinkS: 8,
  sessionsPerS: 2,
  burstiness: 2,
};

/** Single-turn requests with nothing in common: routing by cache must not hurt here. */
export const NO_SHARING: Omit<SyntheticTraceOptions, "seed"> = {
  tenants: 0,
  systemTokens: 0,
  usersPerTenant: 1000,
  turns: 1,
  userTokens: 1500,
  outputTokens: 150,
  thinkS: 0,
  sessionsPerS: 8,
  burstiness: 2,
};

/** Named parameter sets for `--synthetic NAME[,key=value...]`. */
export const SYNTHETIC_PRESETS: Record<string, Omit<SyntheticTraceOptions, "seed">> = {
  "multi-tenant": MULTI_TENANT,
  // Fewer, longer-lived tenants with long prompts; many short questions.
  "long-system": {
    ...MULTI_TENANT,
    tenants: 4,
    systemTokens: 4000,
    usersPerTenant: 24,
    turns: 3,
    userTokens: 100,
  },
  // Many tenants with short system prompts; long conversations carry most of the sharing.
  "many-tenants": {
    ...MULTI_TENANT,
    tenants: 32,
    systemTokens: 800,
    usersPerTenant: 4,
    turns: 6,
  },
  "no-sharing": NO_SHARING,
};

/**
 * Splits a list of traces, `mooncake,multi-tenant,seed=3,long-system`, into its traces: a
 * `key=value` part belongs to the trace named before it (`multi-tenant,seed=3`).
 *
 * @param list traces and their parameters, comma-separated
 * @returns one spec per trace, as {@linkcode parseSyntheticSpec} takes it (names as they are)
 * @throws {InvalidArgumentError} a parameter before any trace's name
 */
export function splitTraceList(list: string): string[] {
  const out: string[] = [];
  for (const part of list.split(",").map((p) => p.trim()).filter((p) => p !== "")) {
    if (!part.includes("=")) {
      out.push(part);
    } else if (out.length === 0) {
      throw new InvalidArgumentError(`trace parameter ${JSON.stringify(part)} before a trace name`);
    } else {
      out[out.length - 1] += `,${part}`;
    }
  }
  return out;
}

/**
 * Parses `NAME[,key=value...]` or `key=value,...` (over `multi-tenant`) into options.
 *
 * @param spec e.g. `multi-tenant,seed=3,sessionsPerS=4`
 * @returns the options
 * @throws {InvalidArgumentError} an unknown preset or key, or a value that is not a number >= 0
 */
export function parseSyntheticSpec(spec: string): SyntheticTraceOptions {
  const parts = spec.split(",").map((p) => p.trim()).filter((p) => p !== "");
  let base = MULTI_TENANT;
  if (parts[0] !== undefined && !parts[0].includes("=")) {
    const preset = SYNTHETIC_PRESETS[parts[0]];
    if (!preset) {
      throw new InvalidArgumentError(
        `unknown synthetic trace ${JSON.stringify(parts[0])} (known: ${
          Object.keys(SYNTHETIC_PRESETS).join(", ")
        })`,
      );
    }
    base = preset;
    parts.shift();
  }
  const options: Record<string, number> = { seed: 1, ...base };
  for (const part of parts) {
    const [key, value] = part.split("=", 2) as [string, string | undefined];
    if (!(key in options) && key !== "blockTokens") {
      throw new InvalidArgumentError(
        `unknown synthetic trace parameter ${JSON.stringify(key)} (known: ${
          [...Object.keys(options), "blockTokens"].join(", ")
        })`,
      );
    }
    const n = Number(value);
    if (value === undefined || value.trim() === "" || !Number.isFinite(n) || n < 0) {
      throw new InvalidArgumentError(`${key} must be a number >= 0, got ${JSON.stringify(value)}`);
    }
    options[key] = n;
  }
  return options as unknown as SyntheticTraceOptions;
}

/**
 * Generates a trace, requests sorted by arrival.
 *
 * @param options the trace's shape and seed
 * @returns the requests, timestamps in ms from 0
 * @throws {InvalidArgumentError} a count that is not a whole number, or nothing to generate
 */
export function synthesizeTrace(options: SyntheticTraceOptions): TraceRequest[] {
  const block = options.blockTokens ?? 16;
  for (const key of ["tenants", "usersPerTenant", "turns", "blockTokens"] as const) {
    const v = key === "blockTokens" ? block : options[key];
    if (!Number.isInteger(v) || v < (key === "tenants" ? 0 : 1)) {
      throw new InvalidArgumentError(`${key} must be a whole number, got ${v}`);
    }
  }
  if (!(options.sessionsPerS > 0)) {
    throw new InvalidArgumentError(`sessionsPerS must be above 0, got ${options.sessionsPerS}`);
  }
  const rnd = mulberry32(options.seed);
  const around = (mean: number) => Math.max(1, Math.round(mean * (0.5 + rnd())));
  const exp = (mean: number) => mean <= 0 ? 0 : -Math.log(1 - rnd()) * mean;
  const sharing = options.tenants > 0;
  const tenants = Math.max(1, options.tenants);
  const systems = Array.from(
    { length: tenants },
    () => options.systemTokens > 0 ? around(options.systemTokens) : 0,
  );
  const starts = sessionStarts(tenants * options.usersPerTenant, options, rnd);
  // Conversations in a random order of tenants, so tenants interleave in time.
  const order = Array.from({ length: starts.length }, (_, i) => i % tenants);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const ids = new Map<string, number>();
  const id = (key: string) => {
    let v = ids.get(key);
    if (v === undefined) ids.set(key, v = ids.size + 1);
    return v;
  };
  const out: TraceRequest[] = [];
  starts.forEach((start, c) => {
    const tenant = order[c]!;
    const system = systems[tenant]!;
    // 1 to 2 * turns - 1, uniformly: `turns` on average.
    const turns = 1 + Math.floor(rnd() * (2 * options.turns - 1));
    let at = start;
    let history = system; // tokens before this turn's question
    for (let t = 0; t < turns; t++) {
      const question = around(options.userTokens);
      const answer = around(options.outputTokens);
      const length = history + question;
      const hashIds: number[] = [];
      for (let b = 0; b * block < length; b++) {
        const end = (b + 1) * block;
        // The system prompt's whole blocks are the tenant's; later whole blocks the
        // conversation's (the same every turn: a conversation only grows); a partial last
        // block is this prompt's own.
        const key = !sharing
          ? `r${out.length}:${b}`
          : end > length
          ? `c${c}:${b}:${length}`
          : end <= system
          ? `t${tenant}:${b}`
          : `c${c}:${b}`;
        hashIds.push(id(key));
      }
      out.push({
        timestamp: Math.round(at),
        inputLength: length,
        outputLength: answer,
        hashIds,
        blockTokens: block,
      });
      history = length + answer;
      // The answer takes a while to arrive (about 20 ms a token), then the user thinks.
      at += answer * 20 + exp(options.thinkS * 1000);
    }
  });
  return out.sort((a, b) => a.timestamp - b.timestamp);
}

/** Start times in ms of `n` conversations: Poisson, or bursts and lulls. */
function sessionStarts(
  n: number,
  options: SyntheticTraceOptions,
  rnd: () => number,
): number[] {
  const hi = 1 + options.burstiness;
  const out: number[] = [];
  let t = 0;
  let burst = rnd() < 0.5;
  let spellEnds = -Math.log(1 - rnd()) * 10_000;
  while (out.length < n) {
    const rate = options.sessionsPerS * (burst ? hi : 1 / hi) / 1000; // per ms
    t += -Math.log(1 - rnd()) / rate;
    while (t > spellEnds) {
      burst = !burst;
      spellEnds += -Math.log(1 - rnd()) * 10_000;
    }
    out.push(t);
  }
  return out;
}

/** A small seeded generator (mulberry32): numbers in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
