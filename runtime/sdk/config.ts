// Service configuration (seed 004): per-service maps from YAML, `--Service.key=value`
// flags and the DYNAMO_SERVICE_CONFIG environment variable, merged with CLI > YAML >
// decorator > constructor defaults, and read back through ServiceConfig.

import { parse as parseYaml } from "yaml";
import { ConfigError, ConfigKeyMissingError } from "./errors.ts";

/** The environment variable that carries the merged configuration to service processes. */
export const SERVICE_CONFIG_ENV = "DYNAMO_SERVICE_CONFIG";

/** The key under a service whose value overrides the `@service` decorator's settings. */
export const SERVICE_ARGS_KEY = "ServiceArgs";

/** Configuration of every service: service class name -> its keys. */
export type ServiceConfigData = Record<string, Record<string, unknown>>;

/** Options of {@linkcode ServiceConfig.asArgs}. */
export interface AsArgsOptions {
  /** Only keys starting with this prefix, which is stripped (seed 004's `prefix="lib_"`). */
  prefix?: string;
}

/** Configuration sources of {@linkcode ServiceConfig.fromLayers}. */
export interface ConfigLayers {
  /** From {@linkcode SERVICE_CONFIG_ENV} (lowest). */
  env?: ServiceConfigData;
  /** From the YAML file (`-f`). */
  yaml?: ServiceConfigData;
  /** From `--Service.key=value` flags (highest). */
  cli?: ServiceConfigData;
}

/** True for `{...}` objects (not arrays, not null, not class instances like Date). */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/**
 * Deep-merges configuration layers, later layers winning: plain objects merge key by key,
 * anything else (arrays, scalars, null) replaces. Inputs are not modified.
 *
 * @example
 * ```ts
 * mergeConfig({ A: { x: 1, y: 1 } }, { A: { y: 2 } }); // { A: { x: 1, y: 2 } }
 * ```
 */
export function mergeConfig<T extends Record<string, unknown>>(...layers: (T | undefined)[]): T {
  const out: Record<string, unknown> = {};
  for (const layer of layers) {
    if (layer === undefined) continue;
    for (const [k, v] of Object.entries(layer)) {
      const prev = out[k];
      out[k] = isPlainObject(v)
        ? mergeConfig(isPlainObject(prev) ? prev : {}, v)
        : structuredClone(v);
    }
  }
  return out as T;
}

/** Checks the shape `{Service: {key: value}}` and returns it typed. */
function checkShape(data: unknown, source: string): ServiceConfigData {
  if (data === null || data === undefined) return {};
  if (!isPlainObject(data)) {
    throw new ConfigError(
      `${source}: expected a mapping of service names to their settings, got ${
        Array.isArray(data) ? "a list" : typeof data
      }`,
    );
  }
  for (const [service, value] of Object.entries(data)) {
    if (value !== null && !isPlainObject(value)) {
      throw new ConfigError(
        `${source}: the settings of ${service} must be a mapping, got ${JSON.stringify(value)}`,
      );
    }
    if (value === null) (data as Record<string, unknown>)[service] = {};
  }
  return data as ServiceConfigData;
}

/**
 * Parses a YAML configuration file (top-level keys are service class names).
 * @param source the file name, for error messages
 * @throws {ConfigError} not YAML, or not a mapping of mappings
 */
export function parseConfigYaml(text: string, source = "config"): ServiceConfigData {
  let data: unknown;
  try {
    data = parseYaml(text);
  } catch (err: unknown) {
    throw new ConfigError(`${source} is not valid YAML: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return checkShape(data, source);
}

/**
 * Parses the JSON of {@linkcode SERVICE_CONFIG_ENV}.
 * @throws {ConfigError} not JSON, or not a mapping of mappings
 */
export function parseConfigJson(text: string, source = SERVICE_CONFIG_ENV): ServiceConfigData {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err: unknown) {
    throw new ConfigError(`${source} is not valid JSON: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return checkShape(data, source);
}

const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/**
 * Reads a flag value the way a user means it: `true`/`false`, `null`, numbers, JSON
 * objects, arrays and quoted strings; anything else stays a string.
 * @throws {ConfigError} a value that starts like JSON but does not parse
 */
export function parseFlagValue(raw: string, flag = "value"): unknown {
  const s = raw.trim();
  if (s === "true") return true;
  if (s === "false") return false;
  if (s === "null") return null;
  if (NUMBER.test(s)) return Number(s);
  if (s.startsWith("{") || s.startsWith("[") || s.startsWith('"')) {
    try {
      return JSON.parse(s);
    } catch (err: unknown) {
      throw new ConfigError(
        `--${flag}: ${JSON.stringify(raw)} looks like JSON but does not parse: ${
          (err as Error).message
        }`,
      );
    }
  }
  return raw;
}

/** Result of {@linkcode parseConfigFlags}. */
export interface ParsedConfigFlags {
  /** The overrides, nested by the dots of each flag. */
  config: ServiceConfigData;
  /** The arguments that were not `--Service.key` flags, in order. */
  rest: string[];
}

const OVERRIDE = /^--([A-Za-z_][A-Za-z0-9_-]*)\.([^=\s]+)(?:=([\s\S]*))?$/;

/**
 * Picks `--Service.key=value` flags (`--Service.a.b=v` nests; `--Service.flag` alone is
 * `true`; `--Service.key value` reads the next argument) out of a command line.
 *
 * @throws {ConfigError} an empty key segment or a value that starts like JSON but does not parse
 *
 * @example
 * ```ts
 * parseConfigFlags(["--Worker.temperature=0.9", "-f", "x.yaml"]);
 * // { config: { Worker: { temperature: 0.9 } }, rest: ["-f", "x.yaml"] }
 * ```
 */
export function parseConfigFlags(args: readonly string[]): ParsedConfigFlags {
  let config: ServiceConfigData = {};
  const rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "--") {
      rest.push(...args.slice(i));
      break;
    }
    const m = arg.match(OVERRIDE);
    if (!m) {
      rest.push(arg);
      continue;
    }
    const service = m[1]!;
    const path = m[2]!.split(".");
    if (path.some((p) => p === "")) {
      throw new ConfigError(`--${service}.${m[2]}: empty key segment`);
    }
    let raw = m[3];
    if (raw === undefined) {
      const next = args[i + 1];
      if (next !== undefined && !next.startsWith("--")) {
        raw = next;
        i++;
      }
    }
    const value = raw === undefined ? true : parseFlagValue(raw, `${service}.${m[2]}`);
    let layer: Record<string, unknown> = { [path[path.length - 1]!]: value };
    for (let j = path.length - 2; j >= 0; j--) layer = { [path[j]!]: layer };
    config = mergeConfig(config, { [service]: layer });
  }
  return { config, rest };
}

function kebab(key: string): string {
  return key.replaceAll("_", "-");
}

/**
 * The configuration of every service in this process (seed 004's `ServiceConfig`).
 * `getInstance()` reads {@linkcode SERVICE_CONFIG_ENV} once; `dynamo serve` sets it for
 * each service process.
 *
 * @example
 * ```ts
 * const config = ServiceConfig.getInstance();
 * const temperature = config.get("Worker", "temperature", 0.7);
 * const apiKey = config.require("Worker", "api_key");
 * const args = config.asArgs("Worker", { prefix: "vllm_" }); // ["--max-model-len", "4096"]
 * ```
 */
export class ServiceConfig {
  static #instance: ServiceConfig | undefined;
  readonly #data: ServiceConfigData;

  /**
   * Creates a configuration from settings per service.
   * @param data service name -> settings (copied)
   */
  constructor(data: ServiceConfigData = {}) {
    this.#data = mergeConfig(checkShape(data, "ServiceConfig"));
  }

  /**
   * The process-wide configuration: the one set with {@linkcode setInstance}, else parsed
   * from {@linkcode SERVICE_CONFIG_ENV} (empty when unset).
   * @throws {ConfigError} the variable holds something other than a JSON mapping
   */
  static getInstance(): ServiceConfig {
    if (ServiceConfig.#instance === undefined) {
      const raw = Deno.env.get(SERVICE_CONFIG_ENV);
      ServiceConfig.#instance = new ServiceConfig(raw ? parseConfigJson(raw) : {});
    }
    return ServiceConfig.#instance;
  }

  /**
   * Replaces the process-wide configuration (undefined: read the environment again).
   * @returns the one it replaced, to put back later
   */
  static setInstance(config: ServiceConfig | undefined): ServiceConfig | undefined {
    const previous = ServiceConfig.#instance;
    ServiceConfig.#instance = config;
    return previous;
  }

  /**
   * Merges configuration sources with seed 004's precedence, lowest first: the
   * environment's {@linkcode SERVICE_CONFIG_ENV}, then the YAML file, then CLI flags.
   */
  static fromLayers(layers: ConfigLayers): ServiceConfig {
    return new ServiceConfig(mergeConfig<ServiceConfigData>(layers.env, layers.yaml, layers.cli));
  }

  /** Service names that have settings. */
  services(): string[] {
    return Object.keys(this.#data);
  }

  /** Every setting of `service` (a copy; empty when it has none). */
  get(service: string): Record<string, unknown>;
  /** One setting of `service`, or `fallback` when it is not set. */
  get<T = unknown>(service: string, key: string, fallback?: T): T;
  get(service: string, key?: string, fallback?: unknown): unknown {
    const settings = Object.hasOwn(this.#data, service) ? this.#data[service]! : {};
    if (key === undefined) return structuredClone(settings);
    return Object.hasOwn(settings, key) ? structuredClone(settings[key]) : fallback;
  }

  /**
   * One setting of `service` that must be present.
   * @throws {ConfigKeyMissingError} it is not set (or null); the message names service and key
   */
  require<T = unknown>(service: string, key: string): T {
    const value = this.get<unknown>(service, key);
    if (value === undefined || value === null) throw new ConfigKeyMissingError(service, key);
    return value as T;
  }

  /** The `ServiceArgs` of `service` (overrides of its decorator), empty when none. */
  serviceArgs(service: string): Record<string, unknown> {
    const args = this.get(service, SERVICE_ARGS_KEY, {});
    return isPlainObject(args) ? args : {};
  }

  /** The settings of `service` that are not `ServiceArgs`: its constructor's argument. */
  params(service: string): Record<string, unknown> {
    const { [SERVICE_ARGS_KEY]: _, ...params } = this.get(service);
    return params;
  }

  /**
   * The settings of `service` as command-line arguments for another parser: `key_name`
   * becomes `--key-name value`; `true` becomes `--key-name` and `false`/null are left out;
   * objects and arrays are passed as JSON. `ServiceArgs` is never included.
   *
   * @example
   * ```ts
   * new ServiceConfig({ W: { lib_max_len: 8, lib_trust: true, other: 1 } })
   *   .asArgs("W", { prefix: "lib_" }); // ["--max-len", "8", "--trust"]
   * ```
   */
  asArgs(service: string, options: AsArgsOptions = {}): string[] {
    const prefix = options.prefix ?? "";
    const args: string[] = [];
    for (const [key, value] of Object.entries(this.params(service))) {
      if (!key.startsWith(prefix)) continue;
      const flag = `--${kebab(key.slice(prefix.length))}`;
      if (value === undefined || value === null || value === false) continue;
      if (value === true) args.push(flag);
      else if (typeof value === "object") args.push(flag, JSON.stringify(value));
      else args.push(flag, String(value));
    }
    return args;
  }

  /** The whole configuration as plain data (what {@linkcode SERVICE_CONFIG_ENV} carries). */
  toJSON(): ServiceConfigData {
    return structuredClone(this.#data);
  }
}
