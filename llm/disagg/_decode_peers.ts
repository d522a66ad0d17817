// The decode workers a prefill worker writes into: each one's published memory, checked and
// prepared for transfers once, on first use (a failed lookup is tried again next time).

import type { DlistHandle, TransferAgent } from "../../native/mod.ts";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { checkDecodeMemoryInfo } from "./prefill_request.ts";
import type { DecodeMemoryInfo } from "./protocol.ts";

/** A decode worker's memory, ready for WRITEs. */
export interface DecodePeer {
  /** What it published. */
  info: DecodeMemoryInfo;
  /** Its slots as a transfer descriptor list. */
  remote: DlistHandle;
}

/** Decode peers by agent name, resolved once each. */
export class DecodePeers {
  readonly #peers = new Map<string, Promise<DecodePeer>>();
  readonly #agent: TransferAgent;
  readonly #resolve: (agentName: string) => Promise<DecodeMemoryInfo>;
  readonly #unitBytes: number;
  readonly #unit: string;

  /**
   * @param agent this worker's transfer agent
   * @param resolve finds a decode worker's published memory
   * @param unitBytes bytes per slot this worker writes (must match the decode worker's)
   * @param unit what a slot is called in errors ("block", "chunk")
   */
  constructor(
    agent: TransferAgent,
    resolve: (agentName: string) => Promise<DecodeMemoryInfo>,
    unitBytes: number,
    unit: string,
  ) {
    this.#agent = agent;
    this.#resolve = resolve;
    this.#unitBytes = unitBytes;
    this.#unit = unit;
  }

  /**
   * The decode worker `name`, its memory checked and prepared.
   *
   * @throws {InvalidArgumentError} its memory is malformed or its slots another size
   */
  get(name: string): Promise<DecodePeer> {
    let p = this.#peers.get(name);
    if (!p) {
      p = (async () => {
        const info = checkDecodeMemoryInfo(await this.#resolve(name), name);
        if (info.block_bytes !== this.#unitBytes) {
          throw new InvalidArgumentError(
            `decode ${name} has ${info.block_bytes}-byte ${this.#unit}s, this worker ${this.#unitBytes}`,
          );
        }
        const added = this.#agent.addRemoteAgent(info.metadata);
        return { info, remote: this.#agent.prepXferDlist(added, info.descs) };
      })();
      p.catch(() => this.#peers.delete(name));
      this.#peers.set(name, p);
    }
    return p;
  }
}
