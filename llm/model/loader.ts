// Loading what a model needs to be served from discovery and the object store: its card
// and, for models that take tokens, its tokenizer and preprocessor.

import type { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { DynamoError } from "../../runtime/errors.ts";
import { fetchCardFiles } from "./card_files.ts";
import { Preprocessor } from "../preprocess/preprocessor.ts";
import { type ModelDeploymentCard, ModelInput } from "../protocols.ts";
import { Tokenizer } from "../preprocess/tokenizer.ts";
import { ourCardOf } from "./reference_card.ts";
import { loadReferencePipeline, type ReferenceWorkersOptions } from "./reference_models.ts";

/** Loaded once per card: what preprocessing needs. */
export interface ModelPipeline {
  /** The model's deployment card. */
  card: ModelDeploymentCard;
  /** The model's tokenizer. */
  tokenizer: Tokenizer;
  /** Turns OpenAI requests into token requests for the model. */
  preprocessor: Preprocessor;
}

/** Distinct reference model records whose pipelines a loader keeps (a fleet has one or two). */
const REFERENCE_PIPELINES_KEPT = 8;

/** Reads model cards and builds preprocessing pipelines from them. */
export class ModelLoader {
  readonly #runtime: DistributedRuntime;
  readonly #reference: ReferenceWorkersOptions;
  /**
   * Reference pipelines by record content. Each reference worker publishes its own record,
   * equal to the others' but for its instance id, and the frontend asks for the card of each
   * (a model's card key follows the last worker that registered): built once per content,
   * not once per worker. Building one reads and parses the tokenizer (half a second of the
   * event loop for a 150k vocabulary), which stalled every request in flight as workers came.
   */
  readonly #referencePipelines = new Map<string, Promise<ModelPipeline>>();

  /**
   * Creates a loader that reads cards from `runtime`'s discovery and object store.
   * @param reference how the cards of reference workers' models are read
   */
  constructor(runtime: DistributedRuntime, reference: ReferenceWorkersOptions = {}) {
    this.#runtime = runtime;
    this.#reference = reference;
  }

  /**
   * The card registered under `cardKey`.
   * @throws {DynamoError} the card is gone
   */
  async loadCard(cardKey: string): Promise<ModelDeploymentCard> {
    const raw = await this.#runtime.discovery.get(cardKey);
    if (raw === undefined) throw new DynamoError(`model card ${cardKey} is gone`);
    const value = JSON.parse(raw);
    // Ours: in `dynamo_deno` of the reference-shaped record, or the whole (earlier) record.
    const ours = ourCardOf(value);
    if (ours !== undefined) return ours;
    return (await this.#referencePipeline(cardKey, raw, value)).card;
  }

  /** The pipeline of a reference model record, shared by the records equal but for the instance. */
  #referencePipeline(cardKey: string, raw: string, value: unknown): Promise<ModelPipeline> {
    const content = referenceRecordContent(value) ?? raw;
    const kept = this.#referencePipelines.get(content);
    if (kept !== undefined) return kept;
    const loading = loadReferencePipeline(cardKey, raw, this.#reference);
    this.#referencePipelines.set(content, loading);
    loading.catch(() => {
      // Not kept when it failed: the next ask loads again.
      if (this.#referencePipelines.get(content) === loading) {
        this.#referencePipelines.delete(content);
      }
    });
    if (this.#referencePipelines.size > REFERENCE_PIPELINES_KEPT) {
      this.#referencePipelines.delete(this.#referencePipelines.keys().next().value!);
    }
    return loading;
  }

  /**
   * The card under `cardKey` with its tokenizer and preprocessor.
   * @throws {DynamoError} the card is gone, takes text, or has no tokenizer files
   */
  async loadPipeline(cardKey: string): Promise<ModelPipeline> {
    const raw = await this.#runtime.discovery.get(cardKey);
    if (raw !== undefined) {
      const value = JSON.parse(raw);
      if (ourCardOf(value) === undefined) return await this.#referencePipeline(cardKey, raw, value);
    }
    const card = await this.loadCard(cardKey);
    if (card.model_input !== ModelInput.Tokens) {
      throw new DynamoError(
        `model ${card.display_name} takes text; it has no preprocessing pipeline`,
      );
    }
    const files = await fetchCardFiles(this.#runtime.objects, card);
    const tj = files.get("tokenizer.json");
    const tc = files.get("tokenizer_config.json");
    if (!tj || !tc) {
      throw new DynamoError(
        `model ${card.display_name} has no tokenizer.json/tokenizer_config.json to preprocess with`,
      );
    }
    const tokenizer = Tokenizer.fromBytes(tj, tc);
    return { card, tokenizer, preprocessor: new Preprocessor({ card, tokenizer }) };
  }
}

/** A reference model record without what differs between its workers (the instance id). */
function referenceRecordContent(value: unknown): string | undefined {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return undefined;
  const { instance_id: _instance, ...content } = value as Record<string, unknown>;
  return JSON.stringify(content);
}
