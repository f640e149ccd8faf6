"""vllm_pyfrontend.serving."""
