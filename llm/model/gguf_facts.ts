// Turns what a model card needs from GGUF metadata (context length, chat template,
// tokenizer) into Hugging Face form.

import { basename, extname } from "node:path";
import { GgufError, readGgufMetadata } from "./gguf.ts";

/** What a model card takes from a GGUF file. */
export interface GgufModelFacts {
  /** The file name without `.gguf`. */
  displayName: string;
  /** `general.name`, when set. */
  generalName: string | undefined;
  architecture: string | undefined;
  /** `{architecture}.context_length`. */
  contextLength: number | undefined;
  chatTemplate: string | undefined;
  /** EOS, plus end-of-turn / end-of-message ids when the file has them. */
  eosTokenIds: number[];
  bosToken: string | undefined;
  eosToken: string | undefined;
  /** `tokenizer.ggml.model` ("gpt2", "llama", ...). */
  tokenizerModel: string | undefined;
  /** HF tokenizer.json equivalent, for byte-level BPE ("gpt2") tokenizers only. */
  tokenizerJson: Record<string, unknown> | undefined;
  /** A synthesized tokenizer_config.json (always, so chat templates and eos travel). */
  tokenizerConfig: Record<string, unknown>;
  /** Why there is no tokenizer.json, when there is none. */
  tokenizerUnsupported: string | undefined;
}

function num(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

function str(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

/**
 * Derives card facts and HF tokenizer files from GGUF metadata.
 *
 * Only byte-level BPE tokenizers (`tokenizer.ggml.model == "gpt2"`: Llama 3, Qwen, Mistral
 * Nemo, GPT-2, ...) are converted to tokenizer.json. Others (SentencePiece "llama", "t5",
 * "bert", "rwkv") leave `tokenizerJson` undefined; a frontend serving such a model with
 * `ModelInput.Tokens` then fails with a message saying the card has no tokenizer.json.
 *
 * @param path the file, for the default display name
 * @param metadata what {@linkcode readGgufMetadata} returned
 */
export function ggufModelFacts(path: string, metadata: Record<string, unknown>): GgufModelFacts {
  const name = basename(path);
  const displayName = extname(name).toLowerCase() === ".gguf"
    ? name.slice(0, -extname(name).length)
    : name;
  const architecture = str(metadata["general.architecture"]);
  const contextLength = architecture === undefined
    ? undefined
    : num(metadata[`${architecture}.context_length`]);
  const tokens = Array.isArray(metadata["tokenizer.ggml.tokens"])
    ? metadata["tokenizer.ggml.tokens"] as unknown[]
    : undefined;
  const tokenAt = (id: number | undefined) => {
    if (id === undefined || !tokens) return undefined;
    return str(tokens[id]);
  };
  const eosId = num(metadata["tokenizer.ggml.eos_token_id"]);
  const bosId = num(metadata["tokenizer.ggml.bos_token_id"]);
  const eosTokenIds: number[] = [];
  for (
    const k of [
      "tokenizer.ggml.eos_token_id",
      "tokenizer.ggml.eot_token_id",
      "tokenizer.ggml.eom_token_id",
    ]
  ) {
    const id = num(metadata[k]);
    if (id !== undefined && Number.isInteger(id) && id >= 0 && !eosTokenIds.includes(id)) {
      eosTokenIds.push(id);
    }
  }
  const chatTemplate = str(metadata["tokenizer.chat_template"]);
  const tokenizerModel = str(metadata["tokenizer.ggml.model"]);
  const bosToken = tokenAt(bosId);
  const eosToken = tokenAt(eosId);
  const addBos = metadata["tokenizer.ggml.add_bos_token"] === true;

  let tokenizerJson: Record<string, unknown> | undefined;
  let tokenizerUnsupported: string | undefined;
  if (tokenizerModel === "gpt2") {
    tokenizerJson = byteLevelBpeTokenizer(path, metadata, addBos ? bosToken : undefined, bosId);
  } else {
    tokenizerUnsupported = tokenizerModel === undefined
      ? "the GGUF file has no tokenizer (tokenizer.ggml.model is missing)"
      : `GGUF tokenizer model "${tokenizerModel}" cannot be converted to tokenizer.json ` +
        `(only byte-level BPE, "gpt2", can); serve it with ModelInput.Text or use the HF repo`;
  }
  const tokenizerConfig: Record<string, unknown> = {
    tokenizer_class: "PreTrainedTokenizerFast",
    add_bos_token: addBos,
    add_eos_token: metadata["tokenizer.ggml.add_eos_token"] === true,
    bos_token: bosToken ?? null,
    eos_token: eosToken ?? null,
    clean_up_tokenization_spaces: false,
  };
  const pad = tokenAt(num(metadata["tokenizer.ggml.padding_token_id"]));
  if (pad !== undefined) tokenizerConfig.pad_token = pad;
  const unk = tokenAt(num(metadata["tokenizer.ggml.unknown_token_id"]));
  if (unk !== undefined) tokenizerConfig.unk_token = unk;
  if (contextLength !== undefined) tokenizerConfig.model_max_length = contextLength;
  if (chatTemplate !== undefined) tokenizerConfig.chat_template = chatTemplate;
  return {
    displayName,
    generalName: str(metadata["general.name"]),
    architecture,
    contextLength,
    chatTemplate,
    eosTokenIds,
    bosToken,
    eosToken,
    tokenizerModel,
    tokenizerJson,
    tokenizerConfig,
    tokenizerUnsupported,
  };
}

// Split regexes of llama.cpp's pre-tokenizer names (tokenizer.ggml.pre), as HF writes them.
const QWEN2_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const LLAMA3_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const SPLITS: Record<string, string> = {
  "qwen2": QWEN2_SPLIT,
  "deepseek-r1-qwen": QWEN2_SPLIT,
  "llama3": LLAMA3_SPLIT,
  "llama-bpe": LLAMA3_SPLIT,
  "llama-v3": LLAMA3_SPLIT,
  "smaug-bpe": LLAMA3_SPLIT,
};

const TOKEN_TYPE_CONTROL = 3;
const TOKEN_TYPE_USER_DEFINED = 4;

function byteLevelBpeTokenizer(
  path: string,
  metadata: Record<string, unknown>,
  bosToken: string | undefined,
  bosId: number | undefined,
): Record<string, unknown> {
  const tokens = metadata["tokenizer.ggml.tokens"];
  const merges = metadata["tokenizer.ggml.merges"] ?? [];
  const types = metadata["tokenizer.ggml.token_type"];
  if (!Array.isArray(tokens) || !tokens.every((t) => typeof t === "string")) {
    throw new GgufError(path, "tokenizer.ggml.tokens is missing or not a list of strings");
  }
  if (!Array.isArray(merges) || !merges.every((m) => typeof m === "string")) {
    throw new GgufError(path, "tokenizer.ggml.merges is not a list of strings");
  }
  if (types !== undefined && (!Array.isArray(types) || types.length !== tokens.length)) {
    throw new GgufError(path, "tokenizer.ggml.token_type does not match tokenizer.ggml.tokens");
  }
  const ids = new Map<string, number>();
  const addedTokens: Record<string, unknown>[] = [];
  for (let id = 0; id < tokens.length; id++) {
    const token = tokens[id] as string;
    if (!ids.has(token)) ids.set(token, id);
    const type = types?.[id];
    if (type === TOKEN_TYPE_CONTROL || type === TOKEN_TYPE_USER_DEFINED) {
      addedTokens.push({
        id,
        content: token,
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: type === TOKEN_TYPE_CONTROL,
      });
    }
  }
  const pre = str(metadata["tokenizer.ggml.pre"]) ?? "default";
  const split = SPLITS[pre];
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false };
  const preTokenizer = split === undefined ? { ...byteLevel, use_regex: true } : {
    type: "Sequence",
    pretokenizers: [
      { type: "Split", pattern: { Regex: split }, behavior: "Isolated", invert: false },
      { ...byteLevel, use_regex: false },
    ],
  };
  const postProcessor = bosToken !== undefined && bosId !== undefined
    ? {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: bosToken, type_id: 0 } }, {
        Sequence: { id: "A", type_id: 0 },
      }],
      pair: [
        { SpecialToken: { id: bosToken, type_id: 0 } },
        { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: bosToken, type_id: 1 } },
        { Sequence: { id: "B", type_id: 1 } },
      ],
      special_tokens: { [bosToken]: { id: bosToken, ids: [bosId], tokens: [bosToken] } },
    }
    : { ...byteLevel, use_regex: false };
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: pre === "qwen2" || pre === "deepseek-r1-qwen" ? { type: "NFC" } : null,
    pre_tokenizer: preTokenizer,
    post_processor: postProcessor,
    decoder: { ...byteLevel, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: Object.fromEntries(ids), // own data properties, "__proto__" included
      merges,
    },
  };
}

/**
 * Writes a GGUF model's tokenizer and config as a Hugging Face folder (config.json,
 * tokenizer.json, tokenizer_config.json), for systems that read a model's tokenizer only from
 * such a folder (the reference system's frontend, from its model card).
 *
 * @param path the `.gguf` file
 * @param dir the folder to write (created if missing)
 * @returns `dir`
 * @throws {GgufError} the file is not GGUF, or its tokenizer cannot be converted
 */
export async function writeGgufAsHfFolder(path: string, dir: string): Promise<string> {
  const { metadata } = await readGgufMetadata(path);
  const facts = ggufModelFacts(path, metadata);
  if (facts.tokenizerJson === undefined) {
    throw new GgufError(path, facts.tokenizerUnsupported ?? "the GGUF file has no tokenizer");
  }
  await Deno.mkdir(dir, { recursive: true });
  const arch = facts.architecture ?? "llama";
  const config: Record<string, unknown> = {
    // HF's class name for the architecture (llama -> LlamaForCausalLM, qwen2 -> Qwen2...).
    architectures: [`${arch[0]!.toUpperCase()}${arch.slice(1)}ForCausalLM`],
    model_type: arch,
    ...(facts.contextLength !== undefined && { max_position_embeddings: facts.contextLength }),
    ...(facts.eosTokenIds.length > 0 && {
      eos_token_id: facts.eosTokenIds.length === 1 ? facts.eosTokenIds[0] : facts.eosTokenIds,
    }),
  };
  const write = (name: string, value: unknown) =>
    Deno.writeTextFile(`${dir}/${name}`, JSON.stringify(value, null, 2));
  await write("config.json", config);
  await write("tokenizer.json", facts.tokenizerJson);
  await write("tokenizer_config.json", facts.tokenizerConfig);
  return dir;
}
