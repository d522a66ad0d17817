// Which backends a runtime runs on, said once at start-up, with a warning when it is the
// in-process default: a frontend and a worker started without backend settings each get a
// private one and never meet, which nothing else would tell them.

import type { Logger } from "./logger.ts";

/** The backends of a runtime, as `/health` and the start-up line report them. */
export interface BackendsInfo {
  /** "etcd", "hub" or "memory". */
  discovery: string;
  /** "nats", "hub" or "local". */
  request_plane: string;
  /** True on the in-process default: nothing outside this process can see its registrations. */
  process_local: boolean;
}

/**
 * Describes a runtime's backends.
 *
 * @param runtime anything with a discovery and a request plane (a DistributedRuntime)
 * @returns the backends' kinds and whether they are private to this process
 */
export function backendsInfo(
  runtime: { readonly discovery: { kind: string }; readonly plane: { kind: string } },
): BackendsInfo {
  return {
    discovery: runtime.discovery.kind,
    request_plane: runtime.plane.kind,
    process_local: runtime.discovery.kind === "memory",
  };
}

/** What to set so that processes meet, for the warning. */
export const PROCESS_LOCAL_HINT =
  "only this process can see what it registers and serves; set ETCD_ENDPOINTS and NATS_SERVER " +
  "(etcd + NATS) or DYN_HUB (a `dynamo hub`) in every process that should meet";

/**
 * Logs the start-up line naming the backends, and warns when they are private to this process.
 *
 * @param runtime the runtime
 * @param logger where to say it
 * @param role what this process is ("frontend", "worker"), for the warning
 * @param alone true when the process holds both ends itself (`dynamo run`): no warning then
 */
export function announceBackends(
  runtime: { readonly discovery: { kind: string }; readonly plane: { kind: string } },
  logger: Logger,
  role: string,
  alone = false,
): BackendsInfo {
  const info = backendsInfo(runtime);
  logger.info("backends", { discovery: info.discovery, request_plane: info.request_plane });
  if (info.process_local && !alone) {
    logger.warn(`this ${role} runs on the in-process default: ${PROCESS_LOCAL_HINT}`);
  }
  return info;
}
