// Port of seed 004's "Complete Configuration Example": decorator defaults, constructor
// defaults, a production YAML and a CLI override, read back through ServiceConfig.
//
//   deno task dynamo serve examples/sdk_config/service.ts:LLMService \
//     -f examples/sdk_config/prod_config.yaml --LLMService.temperature=0.9 --dry-run

import { endpoint, service, ServiceConfig } from "../../mod.ts";

/** Constructor parameters: configurable, with their own defaults (the lowest precedence). */
export interface LLMServiceParams {
  model_name?: string;
  temperature?: number;
  max_tokens?: number;
}

/** What the `config` endpoint reports: the configuration the service ended up with. */
export interface EffectiveConfig {
  model_name: string;
  temperature: number;
  max_tokens: number;
  cache_size: number;
  use_kv_cache: boolean;
  namespace: string;
}

/** A service whose settings come from every configuration layer. */
@service({ dynamo: { enabled: true, namespace: "default" }, resources: { gpu: 1 }, workers: 1 })
export class LLMService {
  readonly modelName: string;
  readonly temperature: number;
  readonly maxTokens: number;
  readonly cacheSize: number;
  readonly useKvCache: boolean;

  constructor(
    { model_name = "gpt-2", temperature = 0.7, max_tokens = 1024 }: LLMServiceParams = {},
  ) {
    this.modelName = model_name;
    this.temperature = temperature;
    this.maxTokens = max_tokens;
    // Service-specific settings that are not constructor parameters.
    const config = ServiceConfig.getInstance();
    this.cacheSize = config.get("LLMService", "cache_size", 1000);
    this.useKvCache = config.get("LLMService", "use_kv_cache", true);
  }

  /** Streams the effective configuration once. */
  @endpoint()
  async *config(_request: unknown): AsyncGenerator<EffectiveConfig> {
    yield await Promise.resolve({
      model_name: this.modelName,
      temperature: this.temperature,
      max_tokens: this.maxTokens,
      cache_size: this.cacheSize,
      use_kv_cache: this.useKvCache,
      namespace: LLMService.dynamoAddress()[0],
    });
  }
}
