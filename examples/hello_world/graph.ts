// The hello-world pipeline of `dynamo serve` (seed 000): Frontend -> Middle -> Backend,
// each a service of its own; text goes down the chain and the words stream back up.
//
//   deno task dynamo serve examples/hello_world/graph.ts:Frontend -f examples/hello_world/config.yaml
//   deno run -A examples/hello_world/client.ts "Hello, Dynamo!"

import { z } from "zod";
import { depends, dynamoContext, endpoint, service } from "../../mod.ts";

/** Where the pipeline registers. */
export const NAMESPACE = "hello_world";

/** The request every stage takes (a wire type). */
export const RequestType = z.object({ text: z.string() });
/** The request every stage takes (a wire type). */
export type RequestType = z.infer<typeof RequestType>;

/** Last stage: appends "-back" and streams one item per word. */
@service({ dynamo: { namespace: NAMESPACE }, resources: { cpu: "1", memory: "1Gi" } })
export class Backend {
  @endpoint({ request: RequestType })
  async *generate(req: RequestType): AsyncGenerator<string> {
    const text = `${req.text}-back`;
    for (const word of text.split(/\s+/)) {
      if (word) yield `Backend: ${word}`;
    }
  }
}

/** Middle stage: appends "-mid", forwards to Backend and tags each item with its replica. */
@service({ dynamo: { namespace: NAMESPACE }, resources: { cpu: "1", memory: "1Gi" } })
export class Middle {
  backend = depends(Backend);
  #instance = "";

  @endpoint({ request: RequestType })
  async *generate(req: RequestType): AsyncGenerator<string> {
    this.#instance ||= dynamoContext.runtime.instanceId;
    dynamoContext.runtime.logger.info("Middle received", { text: req.text });
    for await (const item of this.backend.generate({ text: `${req.text}-mid` })) {
      yield `Middle(${this.#instance}): ${item}`;
    }
  }
}

/** Entry: the endpoint clients call. */
@service({ dynamo: { namespace: NAMESPACE }, resources: { cpu: "1", memory: "512Mi" } })
export class Frontend {
  middle = depends(Middle);

  @endpoint({ request: RequestType })
  async *generate(req: RequestType): AsyncGenerator<string> {
    for await (const item of this.middle.generate({ text: req.text })) {
      yield `Frontend: ${item}`;
    }
  }
}
