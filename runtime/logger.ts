// A small leveled logger. Library code takes one of these instead of calling `console`.

import { InvalidArgumentError } from "./errors.ts";

/** Log levels, lowest first. */
export type LogLevel = "debug" | "info" | "warn" | "error";

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Where library code writes what it has to say. */
export interface Logger {
  /** Writes a debug line. */
  debug(msg: string, fields?: Record<string, unknown>): void;
  /** Writes an info line. */
  info(msg: string, fields?: Record<string, unknown>): void;
  /** Writes a warning. */
  warn(msg: string, fields?: Record<string, unknown>): void;
  /** Writes an error line. */
  error(msg: string, fields?: Record<string, unknown>): void;
  /** A logger that adds `fields` to every line. */
  child(fields: Record<string, unknown>): Logger;
}

/** Options of {@linkcode createLogger}. */
export interface CreateLoggerOptions {
  /** Lowest level written (default "info"). */
  level?: LogLevel;
  /** One JSON object per line instead of text (default false). */
  json?: boolean;
  /** Sink for finished lines (default: standard error). */
  write?: (line: string) => void;
  /** Fields added to every line. */
  fields?: Record<string, unknown>;
}

const encoder = new TextEncoder();

/**
 * Creates a logger writing text or JSON lines.
 *
 * @example
 * ```ts
 * const log = createLogger({ level: "debug" });
 * log.info("worker ready", { instance: "694d" });
 * ```
 */
export function createLogger(options: CreateLoggerOptions = {}): Logger {
  const min = LEVELS[options.level ?? "info"];
  const json = options.json ?? false;
  const write = options.write ??
    ((line: string) => Deno.stderr.writeSync(encoder.encode(line + "\n")));
  const base = options.fields ?? {};
  const emit = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (LEVELS[level] < min) return;
    const all = { ...base, ...fields };
    if (json) {
      write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...all }));
      return;
    }
    const extra = Object.entries(all).map(([k, v]) =>
      `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`
    );
    write(
      `${new Date().toISOString()} ${level.toUpperCase().padEnd(5)} ${msg}${
        extra.length ? " " + extra.join(" ") : ""
      }`,
    );
  };
  return {
    debug: (m, f) => emit("debug", m, f),
    info: (m, f) => emit("info", m, f),
    warn: (m, f) => emit("warn", m, f),
    error: (m, f) => emit("error", m, f),
    child: (fields) => createLogger({ ...options, fields: { ...base, ...fields } }),
  };
}

/** A logger that drops everything (the default for library objects built without one). */
export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
  child() {
    return silentLogger;
  },
};

/** What `DYN_LOG` and `DYN_LOGGING_JSONL` ask for. */
export interface LogSettings {
  /** Lowest level written; "off" writes nothing. */
  level: LogLevel | "off";
  /** One JSON object per line. */
  json: boolean;
}

const FILTER_LEVELS: Record<string, LogLevel | "off"> = {
  trace: "debug",
  debug: "debug",
  info: "info",
  warn: "warn",
  error: "error",
  off: "off",
};
const VERBOSITY: Record<LogLevel | "off", number> = {
  debug: 0,
  info: 1,
  warn: 2,
  error: 3,
  off: 4,
};

/**
 * Reads the log settings from the environment as the reference system does: `DYN_LOG` in
 * its filter syntax, comma-separated directives, each a level (`trace`, `debug`, `info`,
 * `warn`, `error`, `off`, any case) or `target=level`. A bare level is the default; a
 * `target=level` directive for one of the reference's own crates (a target starting with
 * `dynamo`) applies to this whole runtime (the most verbose of them and the default wins);
 * directives for other targets (the reference's Rust libraries, e.g. `h2=warn`) are accepted
 * and have nothing to act on here. `trace` logs as `debug`. JSON lines with
 * `DYN_LOGGING_JSONL` (or `DYN_LOG_JSON`) set to `1` or `true`.
 *
 * @param env the environment (default: the process's)
 * @returns the level (default info) and whether lines are JSON
 * @throws {InvalidArgumentError} a directive that is not a level or `target=level`
 * @example
 * ```ts
 * logSettingsFromEnv({ DYN_LOG: "warn,dynamo_runtime=debug,h2=error" });
 * // { level: "debug", json: false }
 * ```
 */
export function logSettingsFromEnv(
  env: Record<string, string | undefined> = Deno.env.toObject(),
): LogSettings {
  let level: LogLevel | "off" = "info";
  let own: LogLevel | "off" | undefined;
  const spec = env.DYN_LOG?.trim() ?? "";
  for (const raw of spec.split(",")) {
    const directive = raw.trim();
    if (directive === "") continue;
    const eq = directive.indexOf("=");
    const target = eq < 0 ? undefined : directive.slice(0, eq).trim();
    const name = (eq < 0 ? directive : directive.slice(eq + 1)).trim().toLowerCase();
    const parsed = FILTER_LEVELS[name];
    if (parsed === undefined || target === "") {
      throw new InvalidArgumentError(
        `DYN_LOG: ${JSON.stringify(directive)} is not a level (trace, debug, info, warn, ` +
          `error, off) or target=level, in ${JSON.stringify(spec)}`,
      );
    }
    if (target === undefined) level = parsed;
    else if (target.startsWith("dynamo")) {
      own = own === undefined || VERBOSITY[parsed] < VERBOSITY[own] ? parsed : own;
    }
  }
  if (own !== undefined && VERBOSITY[own] < VERBOSITY[level]) level = own;
  const flag = (v: string | undefined) => v === "1" || v?.toLowerCase() === "true";
  return { level, json: flag(env.DYN_LOGGING_JSONL) || flag(env.DYN_LOG_JSON) };
}

/**
 * The logger `DYN_LOG` and `DYN_LOGGING_JSONL` ask for (see {@linkcode logSettingsFromEnv}).
 *
 * @throws {InvalidArgumentError} a malformed `DYN_LOG`
 */
export function loggerFromSettings(settings: LogSettings): Logger {
  return settings.level === "off"
    ? silentLogger
    : createLogger({ level: settings.level, json: settings.json });
}
