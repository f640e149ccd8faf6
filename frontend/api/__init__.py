"""vllm_pyfrontend.api."""
