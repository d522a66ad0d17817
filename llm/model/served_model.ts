// One model name as the frontend serves it: the endpoints its instances registered on,
// its card and preprocessing pipeline (loaded once per card), and its router.

import type { Context } from "../../runtime/context.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import type { ModelDeploymentCard, ModelEntry, ModelInput, ModelType } from "../protocols.ts";
import { ModelRouter, type RoutePolicy } from "../pipeline/route.ts";
import type { EndpointGroup } from "./endpoints.ts";
import type { ModelPipeline } from "./loader.ts";

/** Where a served model loads its card and pipeline from. */
export interface CardLoader {
  loadCard(cardKey: string): Promise<ModelDeploymentCard>;
  loadPipeline(cardKey: string): Promise<ModelPipeline>;
}

/** Loads a value once per key; a failed load is retried on the next call. */
class PerKey<T> {
  #key: string | undefined;
  #value: Promise<T> | undefined;

  get(key: string, load: (previous: Promise<T> | undefined) => Promise<T>): Promise<T> {
    if (this.#value && this.#key === key) return this.#value;
    this.#key = key;
    const loading = load(this.#value);
    this.#value = loading;
    loading.catch(() => {
      if (this.#value === loading) this.#value = undefined;
    });
    return loading;
  }
}

/** One model name served by one or more endpoints. */
export class ServedModel {
  /** The model's name, as requests give it. */
  readonly name: string;
  /** When the model first appeared (Unix seconds), for `/v1/models`. */
  readonly created: number = Math.floor(Date.now() / 1000);
  /** What the model's handlers take: tokens or text. */
  modelInput: ModelInput;
  /** What the model serves: chat, completions, embeddings (flags). */
  modelType: ModelType;
  /** Card key of any live instance (cards of one model are expected to agree). */
  cardKey: string;
  /** The model's instances by endpoint ({@linkcode endpointPath} keys). */
  readonly endpoints: Map<string, EndpointGroup> = new Map();
  readonly #loader: CardLoader;
  readonly #router: ModelRouter;
  readonly #pipeline = new PerKey<ModelPipeline>();
  readonly #card = new PerKey<ModelDeploymentCard>();

  /**
   * @internal
   * @param entry the model entry that made the model appear
   * @param loader reads cards and pipelines
   * @param policy how requests are routed
   */
  constructor(entry: ModelEntry, loader: CardLoader, policy: RoutePolicy) {
    this.name = entry.name;
    this.modelInput = entry.model_input;
    this.modelType = entry.model_type;
    this.cardKey = entry.card_key;
    this.#loader = loader;
    this.#router = new ModelRouter(
      this,
      policy,
      async () => (await this.pipeline()).card.kv_cache_block_size,
    );
  }

  /** Live instances across the model's endpoints. */
  get instanceCount(): number {
    let n = 0;
    for (const g of this.endpoints.values()) n += g.instances.size;
    return n;
  }

  /**
   * The model's card, tokenizer and preprocessor: loaded once per card checksum (each
   * worker publishes its own card under its own key; equal checksums share one pipeline).
   */
  pipeline(): Promise<ModelPipeline> {
    const key = this.cardKey;
    return this.#pipeline.get(key, async (previous) => {
      const old = await previous?.catch(() => undefined);
      if (old !== undefined) {
        const card = await this.#loader.loadCard(key);
        if (card.mdcsum !== undefined && card.mdcsum === old.card.mdcsum) return old;
      }
      const loaded = await this.#loader.loadPipeline(key);
      // Counted here, with the rest of the loading (40 ms for a 150k-token vocabulary), not by
      // the first request's pipeline (its output check needs it), which stalled the first
      // requests after a model appeared by as much.
      void loaded.tokenizer.vocabSize;
      return loaded;
    });
  }

  /** The card of a live instance: loaded once per card key. */
  card(): Promise<ModelDeploymentCard> {
    const key = this.cardKey;
    return this.#card.get(key, () => this.#loader.loadCard(key));
  }

  /**
   * Skips an instance for a while in routing (its stream broke: dead or leaving), until
   * discovery confirms or clears it.
   */
  reportInstanceDown(instanceId: string): void {
    this.#router.reportInstanceDown(instanceId);
  }

  /**
   * Sends `request` to one of the model's instances, by the registry's router mode.
   * @throws {NoInstancesError} no instance is live
   */
  generate<T>(request: unknown, context: Context): Promise<ResponseStream<T>> {
    return this.#router.generate<T>(request, context);
  }
}
