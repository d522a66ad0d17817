// registerLlm (seeds 001/002): loads a model's card, uploads its files to the object store,
// and publishes the card and a model entry under the worker's lease so frontends find it.
// The card's record is the reference's model record, ours inside (./reference_card.ts).

import type { Endpoint } from "../../runtime/component.ts";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import * as keys from "../../runtime/keys.ts";
import type { ModelDeploymentCard, ModelEntry, ModelInput, ModelType } from "../protocols.ts";
import { computeMdcsum, validateModelInput, validateModelType } from "./card.ts";
import { cardObjectName } from "./card_files.ts";
import { type LoadedModel, type LoadModelOptions, loadModelSource } from "./model_source.ts";
import { encodeModelRecord, referenceCardOf } from "./reference_card.ts";

/** Options of {@linkcode registerLlm} (the seeds' register_llm kwargs). */
export type RegisterLlmOptions = Omit<LoadModelOptions, "modelInput" | "modelType">;

/** Discovery key of an instance's model card. */
export function modelCardKey(endpoint: Endpoint): string {
  return keys.modelCardKey(...endpointNames(endpoint), endpoint.instanceId);
}

/** Discovery key of an instance's model entry. */
export function modelEntryKey(endpoint: Endpoint): string {
  return keys.modelEntryKey(...endpointNames(endpoint), endpoint.instanceId);
}

function endpointNames(endpoint: Endpoint): [string, string, string] {
  return [endpoint.component.namespace.name, endpoint.component.name, endpoint.name];
}

/**
 * Registers a model served by this worker's endpoint: builds the model deployment card
 * from `modelPath` (folder, Hugging Face repo id, or GGUF file), uploads its files to the
 * object store (content-addressed: `sha256/{hex}`), and puts the card
 * (`v1/mdc/{ns}/{component}/{endpoint}/{instance}`: the reference's (ai-dynamo 1.6.1) model
 * record, its card naming the model's files, ours in `dynamo_deno`) and the model entry
 * (`v1/models/...`) on the runtime's lease: they vanish when the worker stops and come
 * back by themselves after a lease loss. Nothing is registered when an argument is bad
 * or the model cannot be loaded.
 *
 * @param modelInput `ModelInput.Tokens` (Dynamo pre-processes) or `ModelInput.Text`
 * @param modelType `ModelType` flags, e.g. `ModelType.Chat | ModelType.Completions`
 * @param endpoint the endpoint the worker serves the model on
 * @param modelPath folder, `org/name` or `hf://org/name[@revision]`, or `.gguf` file
 * @param options the seeds' kwargs: modelName, contextLength, kvCacheBlockSize, ...
 * @returns the published card
 * @throws {InvalidArgumentError} bad modelInput, modelType, endpoint or options
 * @throws {ModelSourceError} the model path is missing or incomplete
 * @throws {HuggingFaceError} a repo download failed
 *
 * @example
 * ```ts
 * import {
 *   builtinTestModel,
 *   DistributedRuntime,
 *   ModelInput,
 *   ModelType,
 *   registerLlm,
 * } from "../../mod.ts";
 * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
 * const endpoint = runtime.namespace("demo").component("backend").endpoint("generate");
 * // A model folder, a Hugging Face repo id ("Qwen/Qwen3-0.6B") or a GGUF file.
 * const modelPath = await builtinTestModel();
 * await registerLlm(ModelInput.Tokens, ModelType.Chat | ModelType.Completions, endpoint,
 *   modelPath, { kvCacheBlockSize: 16 });
 * await runtime.shutdown();
 * ```
 */
export async function registerLlm(
  modelInput: ModelInput,
  modelType: ModelType,
  endpoint: Endpoint,
  modelPath: string,
  options: RegisterLlmOptions = {},
): Promise<ModelDeploymentCard> {
  validateModelInput(modelInput);
  validateModelType(modelType);
  const rt = (endpoint as Partial<Endpoint> | null)?.component?.runtimeInternals;
  if (!rt) {
    throw new InvalidArgumentError(
      `endpoint must be an Endpoint (component.endpoint(name)), got ${
        endpoint === null ? "null" : typeof endpoint
      }`,
    );
  }
  if (options === null || typeof options !== "object") {
    throw new InvalidArgumentError(`options must be an object, got ${JSON.stringify(options)}`);
  }

  return await publishModelCard(
    endpoint,
    await loadModelSource(modelPath, {
      modelInput,
      modelType,
      modelName: options.modelName,
      contextLength: options.contextLength,
      kvCacheBlockSize: options.kvCacheBlockSize,
      migrationLimit: options.migrationLimit,
      userData: options.userData,
      toolCallParser: options.toolCallParser,
      reasoningParser: options.reasoningParser,
      runtimeData: options.runtimeData,
      huggingFace: options.huggingFace,
      signal: options.signal,
    }),
    options.signal,
  );
}

/**
 * Publishes a card built elsewhere (an upstream server's model, whose card comes from its
 * `/v1/models` rather than from files) as {@linkcode registerLlm} publishes a loaded one:
 * its files to the object store, then the card and the model entry on the runtime's lease.
 *
 * @param endpoint the endpoint the worker serves the model on
 * @param loaded the card (without checksum) and the bytes of the files it names
 * @param signal cancels the publication
 * @returns the published card
 * @throws {InvalidArgumentError} endpoint is not an Endpoint, or the card's input or type is bad
 * @example
 * ```ts ignore
 * const card = await publishModelCard(endpoint, await upstreamModelCard({ baseUrl }));
 * ```
 */
export async function publishModelCard(
  endpoint: Endpoint,
  loaded: LoadedModel,
  signal?: AbortSignal,
): Promise<ModelDeploymentCard> {
  validateModelInput(loaded.card.model_input);
  validateModelType(loaded.card.model_type);
  const rt = (endpoint as Partial<Endpoint> | null)?.component?.runtimeInternals;
  if (!rt) {
    throw new InvalidArgumentError(
      `endpoint must be an Endpoint (component.endpoint(name)), got ${
        endpoint === null ? "null" : typeof endpoint
      }`,
    );
  }
  for (const [name, bytes] of loaded.files) {
    signal?.throwIfAborted();
    const file = loaded.card.files[name];
    if (!file) continue;
    const objectName = cardObjectName(file.sha256);
    if (!(await rt.objects.has(objectName))) await rt.objects.put(objectName, bytes);
  }

  const card: ModelDeploymentCard = { ...loaded.card, mdcsum: computeMdcsum(loaded.card) };
  const cardKey = modelCardKey(endpoint);
  // One model record: the reference's (ai-dynamo 1.6.1), so its frontend lists the model,
  // with our card in `dynamo_deno`, which it ignores and our frontend reads.
  const record = encodeModelRecord(
    {
      namespace: endpoint.component.namespace.name,
      component: endpoint.component.name,
      endpoint: endpoint.name,
      instanceId: endpoint.instanceId,
    },
    await referenceCardOf(loaded, card),
    card,
  );
  const entry: ModelEntry = {
    name: card.display_name,
    endpoint: {
      namespace: endpoint.component.namespace.name,
      component: endpoint.component.name,
      name: endpoint.name,
    },
    model_type: card.model_type,
    model_input: card.model_input,
    card_key: cardKey,
    mdcsum: card.mdcsum,
  };
  signal?.throwIfAborted();
  // The card goes first: a frontend that sees the entry must find its card.
  await rt.registerKey(cardKey, record);
  try {
    await rt.registerKey(modelEntryKey(endpoint), JSON.stringify(entry));
  } catch (err) {
    await rt.unregisterKey(cardKey).catch(() => {});
    throw err;
  }
  rt.logger.info("model registered", {
    model: card.display_name,
    endpoint: endpoint.path,
    instance: endpoint.instanceId,
    mdcsum: card.mdcsum,
  });
  return card;
}
