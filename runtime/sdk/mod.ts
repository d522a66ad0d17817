/**
 * The SDK (seed 004's `dynamo.sdk`): services as decorated classes, their configuration,
 * the dependency graph `dynamo serve` and `dynamo deploy` work from, and serving one
 * service on a runtime.
 * @module
 */

export {
  asyncOnShutdown,
  asyncOnStart,
  type DependencyCallOptions,
  type DependencyClient,
  depends,
  dynamoAddress,
  dynamoContext,
  type DynamoContextValue,
  type DynamoServiceSettings,
  type EffectiveServiceSettings,
  effectiveSettings,
  endpoint,
  type EndpointCall,
  type EndpointDecorator,
  type EndpointOptions,
  link,
  type RequestParseResult,
  type RequestSchema,
  service,
  type ServiceClass,
  type ServiceDecorator,
  type ServiceOptions,
  type ServiceResources,
  unlink,
} from "./service.ts";
export {
  type AsArgsOptions,
  type ConfigLayers,
  mergeConfig,
  parseConfigFlags,
  parseConfigJson,
  parseConfigYaml,
  type ParsedConfigFlags,
  parseFlagValue,
  SERVICE_ARGS_KEY,
  SERVICE_CONFIG_ENV,
  ServiceConfig,
  type ServiceConfigData,
} from "./config.ts";
export {
  describeGraph,
  type GraphEdge,
  type GraphNode,
  resolveGraph,
  type ResolveGraphOptions,
  type ServiceGraph,
} from "./graph.ts";
export { serveService, type ServeServiceOptions, type ServingService } from "./serve.ts";
export {
  ConfigError,
  ConfigKeyMissingError,
  GraphError,
  RequestValidationError,
  ServiceDefinitionError,
  type ValidationIssue,
} from "./errors.ts";
