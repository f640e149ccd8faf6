"""vLLM's gRPC service (`vllm.grpc.engine.VllmEngine`, the proto `vllm serve --grpc` serves,
from the `smg-grpc-proto` package) in every worker, beside HTTP.

Token ids in, token ids out: the gateway in front (the Shepherd Model Gateway, `smg`) renders
chat templates and tokenizes; a worker validates, lowers through `vllm_pyfrontend.llm` and
submits with the same engine client as HTTP. Nothing here is imported unless the worker was
given `--grpc-port`, so HTTP-only workers never load grpcio.

- `lowering.py`: a `GenerateRequest` to prompt ids and engine sampling maps, refusing what
  must not reach the engine (unknown fields, ids out of vocabulary, values out of range).
- `servicer.py`: the RPCs (Generate, Abort, HealthCheck, GetModelInfo, GetServerInfo,
  GetLoads, GetTokenizer) and the standard `grpc.health.v1` service.
- `server.py`: the `grpc.aio` server on the worker's event loop, on one port shared by every
  worker (SO_REUSEPORT), with server reflection.
"""
