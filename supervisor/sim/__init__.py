"""A simulated vLLM EngineCore.

It plays the engine's side of vLLM's ZMQ + msgpack protocol (handshake, ADD / ABORT /
UTILITY inputs, `EngineCoreOutputs` batches, `ENGINE_CORE_DEAD`) with a clock instead of a
GPU, so the frontend can be tested and benchmarked without a model. It is written from the
engine's point of view and shares no code with `frontend/engine`: when both agree with the
real vLLM frontend and engine, the protocol is right on both sides.

Modules: `wire` (message layouts), `tokens` (what text gets generated), `scheduler`
(request state and one engine step), `engine` (sockets, handshake, step loop, faults).
"""
