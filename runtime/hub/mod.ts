/**
 * The hub: a local default that spans processes without etcd or NATS. One process
 * hosts a {@linkcode HubServer} (the `dynamo serve` parent, or `dynamo hub`); the others
 * connect with `DYN_HUB=host:port` (and `DYN_HUB_TOKEN`) and get discovery, the request
 * plane, an object store and an event plane over one TCP connection each. Response
 * streams go straight from worker to caller over TCP call-home, as with NATS.
 * @module
 */

export { HubServer, type HubServerOptions } from "./server.ts";
export {
  type HubCallOptions,
  HubConnection,
  type HubConnectionOptions,
  HubRemoteError,
  HubSession,
} from "./connection.ts";
export { HubDiscovery } from "./discovery.ts";
export { HubRequestPlane, type HubRequestPlaneOptions } from "./request_plane.ts";
export { HubObjectStore } from "./objects.ts";
export { HubEventPlane, type HubEventPlaneOptions } from "./events.ts";
export { HubAuthError, HubConnectionError, HubProtocolError, parseHubAddress } from "./protocol.ts";
