// Hugging Face download settings from the environment (HF_ENDPOINT, HF_TOKEN, HF_HOME,
// HF_HUB_CACHE), with a progress bar on standard error.

import { defaultHubCacheDir, terminalProgress } from "../llm/hub.ts";
import type { RegisterLlmOptions } from "../llm/register.ts";

/** What registerLlm needs to download a repo, as this machine's environment says. */
export function hubOptionsFromEnv(): NonNullable<RegisterLlmOptions["hub"]> {
  const env = Deno.env.toObject();
  const token = env.HF_TOKEN ?? env.HUGGING_FACE_HUB_TOKEN;
  return {
    cacheDir: defaultHubCacheDir(env),
    ...(env.HF_ENDPOINT ? { endpoint: env.HF_ENDPOINT } : {}),
    ...(token ? { token } : {}),
    onProgress: terminalProgress(),
  };
}
