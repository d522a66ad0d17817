// Hugging Face download settings from the environment (HF_ENDPOINT, HF_TOKEN, HF_HOME,
// HF_HUB_CACHE), with a progress bar on standard error.

import { defaultHuggingFaceCacheDir, terminalProgress } from "../llm/model/huggingface.ts";
import type { RegisterLlmOptions } from "../llm/model/register.ts";

/** What registerLlm needs to download a repo, as this machine's environment says. */
export function huggingFaceOptionsFromEnv(): NonNullable<RegisterLlmOptions["huggingFace"]> {
  const env = Deno.env.toObject();
  const token = env.HF_TOKEN ?? env.HUGGING_FACE_HUB_TOKEN;
  return {
    cacheDir: defaultHuggingFaceCacheDir(env),
    ...(env.HF_ENDPOINT ? { endpoint: env.HF_ENDPOINT } : {}),
    ...(token ? { token } : {}),
    onProgress: terminalProgress(),
  };
}
