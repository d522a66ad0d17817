// A small leveled logger. Library code takes one of these instead of calling `console`.

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
