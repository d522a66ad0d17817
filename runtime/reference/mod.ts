/**
 * Speaking to the reference system (ai-dynamo 1.6.1) as a caller: read its workers' instance
 * records from etcd, send them PreprocessedRequests over their TCP request plane, and stream the
 * answers they call home with. And as a worker its frontend can call: `serveReferenceEndpoint`
 * registers an engine in the reference's records and serves its request framing.
 * @module
 */

export { ReferenceRecordError, ReferenceWorkerRefusedError } from "./errors.ts";
export {
  listReferenceInstances,
  type ListReferenceInstancesOptions,
  parseReferenceInstance,
  REFERENCE_INSTANCES_PREFIX,
  type ReferenceEndpoint,
  type ReferenceInstance,
  waitForReferenceInstances,
  type WaitForReferenceInstancesOptions,
} from "./instances.ts";
export {
  listReferenceModels,
  type ListReferenceModelsOptions,
  parseReferenceModel,
  REFERENCE_MODELS_PREFIX,
  type ReferenceModel,
} from "./models.ts";
export {
  parseReferenceStreamItem,
  type ReferenceEngineOutput,
  type ReferencePreprocessedRequest,
  type ReferenceStreamItem,
  referenceTokensRequest,
  type ReferenceTokensRequestInit,
} from "./request.ts";
export {
  type ReferenceCallItem,
  ReferenceClient,
  type ReferenceClientOptions,
  type ReferenceGenerateOptions,
} from "./client.ts";
export {
  type ReferenceCodec,
  ReferenceEndpointClient,
  type ReferenceEndpointClientOptions,
  type ReferenceSendOptions,
} from "./endpoint_client.ts";
export {
  type CallHomeConnection,
  CallHomeServer,
  type CallHomeServerOptions,
  type TwoPartSource,
} from "./call_home.ts";
export {
  type ReferenceEndpointServer,
  referenceModelCard,
  type ReferenceModelCardInit,
  referenceOutput,
  type ReferenceRuntime,
  referenceRuntimeOf,
  serveReferenceEndpoint,
  type ServeReferenceEndpointOptions,
} from "./worker.ts";
export {
  encodeReferenceKvMessage,
  type ReferenceKvEventData,
  ReferenceKvEventPublisher,
  type ReferenceKvEventPublisherOptions,
  type ReferenceKvMessageInit,
  ReferenceKvState,
  type ReferenceStorageTier,
} from "./kv_events.ts";
export {
  decodeReferenceLoad,
  encodeReferenceLoadMessage,
  type ReferenceLoad,
  referenceLoadFor,
  type ReferenceLoadMessageInit,
  ReferenceLoadPublisher,
  type ReferenceLoadPublisherOptions,
} from "./load_metrics.ts";
export { ZmqPublisher, type ZmqPublisherOptions } from "./zmq_pub.ts";
// The reference's framing, for callers that speak it themselves.
export {
  encodeTcpRequest,
  encodeTwoPart,
  MAX_TWO_PART_PART,
  type ReferenceTcpRequest,
  ReferenceWireError,
  TcpRequestDecoder,
  TwoPartDecoder,
  type TwoPartMessage,
} from "../transport/reference_wire.ts";
