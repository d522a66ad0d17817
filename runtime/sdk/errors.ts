// Typed failures of the SDK layer: bad service definitions, bad or missing configuration,
// graphs that do not resolve, and requests an endpoint's schema rejects.

import { DynamoError } from "../errors.ts";

/** A decorator was used on the wrong kind of member, or a class is not a service. */
export class ServiceDefinitionError extends DynamoError {}

/** Configuration could not be read or has the wrong shape (YAML, flags, env). */
export class ConfigError extends DynamoError {}

/** {@linkcode ServiceConfig.require} found no value for the key. */
export class ConfigKeyMissingError extends ConfigError {
  /** The service whose setting is missing. */
  readonly service: string;
  /** The missing key. */
  readonly key: string;
  /** Creates the error for a service and key. */
  constructor(service: string, key: string) {
    super(
      `missing configuration ${service}.${key}: set it under "${service}:" in the YAML ` +
        `file (-f) or with --${service}.${key}=VALUE`,
    );
    this.service = service;
    this.key = key;
  }
}

/** The dependency graph cannot be built (unknown link, two services with one name). */
export class GraphError extends DynamoError {}

/** One problem a request schema found. */
export interface ValidationIssue {
  /** Where in the request, e.g. ["messages", 0, "role"] (empty: the request itself). */
  path: readonly PropertyKey[];
  /** What is wrong there. */
  message: string;
}

/**
 * A request did not match the endpoint's `request` schema. Crosses the process boundary
 * as a `RemoteError` whose `remoteName` is "RequestValidationError".
 */
export class RequestValidationError extends DynamoError {
  /** `namespace/component/endpoint`. */
  readonly endpoint: string;
  /** Every problem found. */
  readonly issues: readonly ValidationIssue[];
  /** Creates the error for an endpoint and the problems its schema found. */
  constructor(endpoint: string, issues: readonly ValidationIssue[]) {
    const detail = issues.map((i) =>
      `${i.path.length ? i.path.map(String).join(".") : "(request)"}: ${i.message}`
    ).join("; ");
    super(`invalid request for ${endpoint}: ${detail}`);
    this.endpoint = endpoint;
    this.issues = issues;
  }
}
