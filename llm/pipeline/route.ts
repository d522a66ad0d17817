// The route stage: sends a request to one instance of a model, by the router mode
// (round robin, random, or the KV router for models that take tokens).

import type { Context } from "../../runtime/context.ts";
import { withDeadline } from "../../runtime/_deadline.ts";
import { anyIn, type InstanceIds } from "../../runtime/_id_set.ts";
import { NoInstancesError, TimeoutError } from "../../runtime/errors.ts";
import { type Logger, silentLogger } from "../../runtime/logger.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import type { EndpointClient, EndpointGroup, EndpointId } from "../model/endpoints.ts";
import { ModelInput } from "../protocols.ts";

/**
 * How the frontend spreads requests over a model's instances. "kv" applies to models that
 * take tokens; requests to text models go round-robin (logged once per model).
 */
export type RouterMode = "round-robin" | "random" | "kv";

/** What the route stage needs of a KV router. */
export interface TokenRouter {
  generate<T extends { token_ids?: number[] }>(
    request: { token_ids: number[] },
    options: { context?: Context; instances?: InstanceIds },
  ): Promise<ResponseStream<T>>;
}

/** How requests are routed; one policy for all models of a registry. */
export interface RoutePolicy {
  mode: RouterMode;
  /** How long a request waits for a registered model's endpoint to be served (ms). */
  instanceWaitMs: number;
  /** The KV router of one endpoint (mode "kv"). */
  kvRouter(endpoint: EndpointId, client: EndpointClient, blockSize: number): TokenRouter;
  logger?: Logger;
}

/** The model as the route stage reads it: its name, input kind and live endpoint groups. */
export interface RouteTarget {
  readonly name: string;
  readonly modelInput: ModelInput;
  readonly endpoints: ReadonlyMap<string, EndpointGroup>;
}

/** A tokens request, as the KV router reads it. */
interface TokensRequest {
  token_ids: number[];
}

/** A request with one token list (an embedding request's list of lists goes round-robin). */
function hasTokens(request: unknown): request is TokensRequest {
  if (typeof request !== "object" || request === null) return false;
  const ids = (request as TokensRequest).token_ids;
  return Array.isArray(ids) && !Array.isArray(ids[0]);
}

/** Routes one model's requests: endpoints in turn, then an instance by the policy's mode. */
export class ModelRouter {
  readonly #target: RouteTarget;
  readonly #policy: RoutePolicy;
  readonly #blockSize: () => Promise<number>;
  #next = 0;
  #kvFallbackLogged = false;

  /**
   * @param target the model (its endpoints are read on every request: they change)
   * @param policy the router mode and its settings
   * @param blockSize the model's KV block size (read only in mode "kv")
   */
  constructor(target: RouteTarget, policy: RoutePolicy, blockSize: () => Promise<number>) {
    this.#target = target;
    this.#policy = policy;
    this.#blockSize = blockSize;
  }

  /**
   * Sends `request` to one of the model's instances.
   * @throws {NoInstancesError} no instance is live
   */
  generate<T>(request: unknown, context: Context): Promise<ResponseStream<T>> {
    return context.trace === undefined
      ? this.#generate<T>(request, context)
      : this.#generateTraced<T>(request, context);
  }

  /**
   * Routing as a "route" span; for its duration the context's span is the route span, so that
   * the request-plane hop is its child.
   */
  async #generateTraced<T>(request: unknown, context: Context): Promise<ResponseStream<T>> {
    const parent = context.trace!;
    const span = parent.child("route", {
      attributes: {
        "gen_ai.request.model": this.#target.name,
        "dynamo.router_mode": this.#policy.mode,
      },
    });
    context.trace = span;
    try {
      const stream = await this.#generate<T>(request, context);
      span.setAttribute("dynamo.instance_id", stream.instanceId);
      return stream;
    } catch (err) {
      span.fail(err);
      throw err;
    } finally {
      context.trace = parent;
      span.end();
    }
  }

  async #generate<T>(request: unknown, context: Context): Promise<ResponseStream<T>> {
    const target = this.#target;
    const group = this.#nextGroup();
    if (group === undefined) throw new NoInstancesError(target.name);
    const client = clientOf(group) ?? await firstListing(group, this.#policy, context);
    // Only the instances that registered this model (an endpoint may serve several): the
    // live set itself, read by the client as it is.
    const instances = group.instances;
    // Workers register the model before they serve (seed 001's order): give the endpoint's
    // instance a moment to appear instead of failing a request in that window.
    if (!anyIn(client.instanceIds(), instances)) {
      await client.waitForInstances({
        among: instances,
        timeoutMs: this.#policy.instanceWaitMs,
        signal: context.signal,
      })
        .catch(() => {});
    }
    const options = { context, instances };
    const mode = this.#policy.mode;
    if (mode === "kv") {
      if (hasTokens(request) && target.modelInput === ModelInput.Tokens) {
        const router = this.#policy.kvRouter(group.id, client, await this.#blockSize());
        return await router.generate<T & { token_ids?: number[] }>(
          request,
          options,
        ) as ResponseStream<T>;
      }
      // The KV router needs token ids: a text model (or a request without them) goes
      // round-robin. Say so once per model, or the operator sees kv mode silently not apply.
      if (!this.#kvFallbackLogged) {
        this.#kvFallbackLogged = true;
        (this.#policy.logger ?? silentLogger).warn(
          "router mode kv does not apply; routing round-robin",
          {
            model: target.name,
            reason: target.modelInput === ModelInput.Tokens
              ? "request has no token_ids"
              : "model takes text, not tokens",
          },
        );
      }
    }
    return mode === "random"
      ? await client.random<T>(request, options)
      : await client.roundRobin<T>(request, options);
  }

  /** The next of the model's endpoint groups with an instance, in turn (none: undefined). */
  #nextGroup(): EndpointGroup | undefined {
    const endpoints = this.#target.endpoints;
    if (endpoints.size === 1) {
      // One endpoint (the common case): no list of groups to build per request.
      const only = endpoints.values().next().value!;
      return only.instances.size > 0 ? only : undefined;
    }
    const groups = [...endpoints.values()].filter((g) => g.instances.size > 0);
    return groups.length === 0 ? undefined : groups[this.#next++ % groups.length];
  }

  /**
   * Skips an instance for a while (its stream broke: dead or leaving), until discovery
   * confirms or clears it.
   */
  reportInstanceDown(instanceId: string): void {
    for (const g of this.#target.endpoints.values()) {
      if (g.instances.has(instanceId)) {
        void g.client.then((c) => c.reportInstanceDown(instanceId), () => {});
      }
    }
  }
}

// The endpoint clients whose first listing has come, by group promise: a request to a known
// endpoint takes its client without a timer or an await.
const listed = new WeakMap<Promise<EndpointClient>, EndpointClient>();

function clientOf(group: EndpointGroup): EndpointClient | undefined {
  return listed.get(group.client);
}

/**
 * The group's client once discovery has listed the endpoint's instances. That first listing
 * retries for as long as discovery is unreachable; a request waits for it no longer than for
 * an instance to appear (at least a second), and not after its client has gone.
 */
async function firstListing(
  group: EndpointGroup,
  policy: RoutePolicy,
  context: Context,
): Promise<EndpointClient> {
  const ms = Math.max(policy.instanceWaitMs, 1000);
  const gone = context.stopped().then(() => Promise.reject(context.signal.reason));
  gone.catch(() => {}); // after the listing came, a stop is nobody's business here
  const client = await withDeadline(
    Promise.race([group.client, gone]),
    ms,
    () => new TimeoutError(`discovery did not list the instances of ${group.path} within ${ms} ms`),
  );
  listed.set(group.client, client);
  return client;
}
