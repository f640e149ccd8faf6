"""The drop-in router: one vLLM engine client slot shared by N worker processes."""
