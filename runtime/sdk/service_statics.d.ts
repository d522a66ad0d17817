// Types the statics @service adds at run time (`Worker.link(Backend)`,
// `Worker.dynamoAddress()`, seed 004's SDK) for code in this repository.
//
// Class decorators cannot change a class's type, so typing those statics takes a global
// augmentation of `Function`. JSR refuses global augmentations in a package's module graph,
// so this file is outside it: deno.json loads it through `compilerOptions.types`. Code that
// uses the published package calls the typed functions instead: `link(Worker, Backend)`,
// `dynamoAddress(Worker)` (runtime/sdk/service.ts).

import type { ServiceClass } from "./service.ts";

declare global {
  // Declared on every function; calling them on a class that is not a service throws.
  interface Function {
    /**
     * `[namespace, component]` of a `@service` class, after configuration overrides.
     * @throws {ServiceDefinitionError} the class is not a service
     */
    dynamoAddress(): [string, string];
    /**
     * Keeps only the dependencies on linked services in the graph (seed 004's `.link()`).
     * @returns `next`, so links chain: `A.link(B).link(C)`
     * @throws {ServiceDefinitionError} either class is not a service
     */
    link<T extends ServiceClass>(next: T): T;
  }
}
