// A two-service graph whose shutdown hooks leave a mark: tests check that a stop through
// `dynamo serve` (and any wrapper in front of it) ran every service's @asyncOnShutdown.
// SHUTDOWN_MARK_DIR names the folder for the marks (one file per service and pid).

import { asyncOnShutdown, depends, endpoint, service } from "../../mod.ts";

async function mark(service: string): Promise<void> {
  const dir = Deno.env.get("SHUTDOWN_MARK_DIR");
  if (dir) await Deno.writeTextFile(`${dir}/${service}.${Deno.pid}`, "shutdown hook ran\n");
}

/** The called service. */
@service({ dynamo: { namespace: "shutdown_graph" } })
export class Leaf {
  @endpoint()
  async *generate(req: { text: string }): AsyncGenerator<string> {
    yield req.text;
  }

  @asyncOnShutdown
  async close(): Promise<void> {
    await mark("Leaf");
  }
}

/** The entry service. */
@service({ dynamo: { namespace: "shutdown_graph" } })
export class Entry {
  leaf = depends(Leaf);

  @endpoint()
  async *generate(req: { text: string }): AsyncGenerator<string> {
    yield* this.leaf.generate(req);
  }

  @asyncOnShutdown
  async close(): Promise<void> {
    await mark("Entry");
  }
}
