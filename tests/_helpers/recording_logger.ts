// A logger for tests that keeps its warnings (the others are dropped).

import type { Logger } from "../../runtime/logger.ts";

/** One warning as logged. */
export interface RecordedWarning {
  msg: string;
  fields: Record<string, unknown>;
}

/** A logger that records its warnings in `warnings`. */
export function recordingLogger(): { logger: Logger; warnings: RecordedWarning[] } {
  const warnings: RecordedWarning[] = [];
  const logger: Logger = {
    debug() {},
    info() {},
    warn: (msg, fields = {}) => void warnings.push({ msg, fields }),
    error() {},
    child: () => logger,
  };
  return { logger, warnings };
}
